//! Standard Webhooks v1 signing and a minimal HTTP/1.1 POST over a pinned address.
//!
//! Hand-written on purpose: one request per connection (`Connection: close`), a
//! `Content-Length` body, and only the status line is read back. No redirects are followed
//! (a 3xx is a failed delivery) and the connection goes to the address the SSRF guard
//! checked, with the URL's host kept in the `Host` header (and as the TLS server name, so
//! the certificate is checked against the name, not the pinned address).

use std::net::SocketAddr;
use std::time::Duration;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::{alphabet, Engine as _};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::ssrf::Target;
use super::tls::Tls;

/// Prefix of base64-encoded secrets in the Standard Webhooks format.
const WHSEC: &str = "whsec_";
/// Bytes of the response read while looking for the status line.
const MAX_HEAD: usize = 8 * 1024;

/// The HMAC key of a secret: `whsec_<base64>` is decoded (padding optional, as the
/// reference libraries accept); any other string is used as its raw UTF-8 bytes.
pub fn secret_key(secret: &str) -> Result<Vec<u8>, &'static str> {
    let key = match secret.strip_prefix(WHSEC) {
        Some(b64) => {
            let lenient = GeneralPurpose::new(
                &alphabet::STANDARD,
                GeneralPurposeConfig::new()
                    .with_decode_padding_mode(DecodePaddingMode::Indifferent),
            );
            lenient
                .decode(b64)
                .map_err(|_| "a whsec_ secret must be base64 after the prefix")?
        }
        None => secret.as_bytes().to_vec(),
    };
    if key.is_empty() {
        return Err("secret must not be empty");
    }
    Ok(key)
}

/// `v1,<base64 HMAC-SHA256(key, "{id}.{ts}.{body}")>`.
pub fn sign(key: &[u8], id: &str, ts: i64, body: &[u8]) -> String {
    // HMAC accepts keys of any length; this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(ts.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// Why an attempt did not get a 2xx.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    /// Connect, write or read failed.
    #[error("transport: {0}")]
    Io(#[from] std::io::Error),
    /// No complete answer within the delivery timeout.
    #[error("timed out")]
    Timeout,
    /// The response did not start with an HTTP status line.
    #[error("malformed response")]
    Malformed,
    /// A non-2xx status (3xx included: redirects are not followed).
    #[error("HTTP {0}")]
    Status(u16),
}

/// POSTs `body` to `t` at `addr` with the extra `headers`; Ok(status) for a 2xx.
pub async fn post(
    t: &Target,
    addr: SocketAddr,
    tls: &Tls,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> Result<u16, PostError> {
    let attempt = async {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        if t.tls {
            let s = tls.connect(&t.host, tcp).await?;
            exchange(s, t, headers, body).await
        } else {
            exchange(tcp, t, headers, body).await
        }
    };
    let status = tokio::time::timeout(timeout, attempt)
        .await
        .map_err(|_| PostError::Timeout)??;
    if (200..300).contains(&status) {
        Ok(status)
    } else {
        Err(PostError::Status(status))
    }
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    t: &Target,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<u16, PostError> {
    let mut req = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: convene-webhooks/{}\r\nContent-Length: {}\r\nConnection: close\r\n",
        t.path,
        t.host_header,
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    for (k, v) in headers {
        req.push_str(k);
        req.push_str(": ");
        req.push_str(v);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    let mut out = req.into_bytes();
    out.extend_from_slice(body);
    s.write_all(&out).await?;
    s.flush().await?;
    // Read until the status line is complete; the rest of the response is ignored.
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            return status_of(&buf[..end]);
        }
        if buf.len() >= MAX_HEAD {
            return Err(PostError::Malformed);
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return status_of(&buf);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn status_of(line: &[u8]) -> Result<u16, PostError> {
    let line = std::str::from_utf8(line).map_err(|_| PostError::Malformed)?;
    let mut parts = line.split(' ');
    match (parts.next(), parts.next()) {
        (Some(v), Some(code)) if v.starts_with("HTTP/1.") && code.len() == 3 => {
            code.parse().map_err(|_| PostError::Malformed)
        }
        _ => Err(PostError::Malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_independent_vectors() {
        // The Standard Webhooks reference vector, recomputed with Python's hmac module.
        let key = secret_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            sign(
                &key,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        // A secret without the prefix is raw bytes:
        // python3 -c 'hmac.new(b"plain-secret", b"wh_1.1700000000.{\"a\":1}", sha256)'
        let key = secret_key("plain-secret").unwrap();
        assert_eq!(key, b"plain-secret");
        assert_eq!(
            sign(&key, "wh_1", 1700000000, br#"{"a":1}"#),
            "v1,b+5WIKH4d6qN73x9NGPZRlI2hCOMrBo0VW8TXbmrty0="
        );
    }

    #[test]
    fn secrets() {
        // Unpadded base64 is accepted, like the reference libraries do.
        assert_eq!(secret_key("whsec_YWJj").unwrap(), b"abc");
        assert_eq!(secret_key("whsec_YWI").unwrap(), b"ab");
        assert_eq!(secret_key("whsec_YWI=").unwrap(), b"ab");
        assert!(secret_key("whsec_!!!").is_err());
        assert!(secret_key("whsec_").is_err());
        assert!(secret_key("").is_err());
    }

    #[test]
    fn status_lines() {
        assert_eq!(status_of(b"HTTP/1.1 204 No Content").unwrap(), 204);
        assert_eq!(status_of(b"HTTP/1.0 302").unwrap(), 302);
        assert!(status_of(b"SSH-2.0-OpenSSH").is_err());
        assert!(status_of(b"").is_err());
    }
}
