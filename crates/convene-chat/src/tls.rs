//! TLS for `wss://`: rustls on the `ring` provider (no OpenSSL, no aws-lc), Mozilla's roots
//! compiled in (webpki-roots), plus the certificates of an extra PEM file for self-hosted
//! servers. The client stays synchronous: a rustls `StreamOwned` over the `TcpStream`.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{CertificateError, ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::{Error, Result};

/// A TLS stream as the WebSocket layer sees it.
pub(crate) type TlsStream = StreamOwned<ClientConnection, TcpStream>;

/// Trust settings for `wss://` connections. Cheap to clone (shared); build it once per
/// process and reuse it for every reconnect.
#[derive(Clone)]
pub struct TlsConfig {
    config: Arc<ClientConfig>,
    /// The extra CA file, named in certificate errors.
    ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// Mozilla's roots, plus every certificate of `extra_ca` (PEM, one or more
    /// certificates) when given. A file that cannot be read or holds no usable certificate
    /// is an error: silently trusting less than asked would only fail later, less clearly.
    pub fn new(extra_ca: Option<&Path>) -> Result<Self> {
        let mut roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        if let Some(path) = extra_ca {
            let ca_err = |reason: String| Error::CaFile {
                path: path.to_path_buf(),
                reason,
            };
            let pem = std::fs::read(path).map_err(|e| ca_err(e.to_string()))?;
            let certs = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ca_err(format!("bad PEM: {e}")))?;
            if certs.is_empty() {
                return Err(ca_err("no PEM certificate in it".into()));
            }
            let (added, _ignored) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(ca_err(
                    "none of its certificates can be used as a CA".into(),
                ));
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            // Invariant: ring's default provider has the suites for TLS 1.2 and 1.3.
            .expect("ring supports the default TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self {
            config: Arc::new(config),
            ca_file: extra_ca.map(Path::to_path_buf),
        })
    }

    /// Runs the TLS handshake with `host` (SNI and the name the certificate must match; an
    /// IP address is matched against the certificate's IP entries) over `tcp`, which has
    /// its read timeout set. Certificate and protocol failures become [`Error::Tls`]; I/O
    /// failures stay [`Error::Io`] (retryable), with the host in the message.
    pub(crate) fn connect(&self, host: &str, mut tcp: TcpStream) -> Result<TlsStream> {
        let name = ServerName::try_from(host.to_string()).map_err(|e| Error::Tls {
            host: host.into(),
            reason: format!("not a valid server name: {e}"),
        })?;
        let mut conn =
            ClientConnection::new(self.config.clone(), name).map_err(|e| self.tls_err(host, e))?;
        // Handshake now, so its failures are reported as such and not as a WebSocket error.
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)
                .map_err(|e| self.handshake_err(host, e))?;
        }
        Ok(StreamOwned::new(conn, tcp))
    }

    fn handshake_err(&self, host: &str, e: std::io::Error) -> Error {
        // rustls reports its own failures as InvalidData wrapping a rustls::Error.
        if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            return self.tls_err(host, tls.clone());
        }
        Error::Io(std::io::Error::new(
            e.kind(),
            format!("TLS handshake with {host}: {e}"),
        ))
    }

    fn tls_err(&self, host: &str, e: rustls::Error) -> Error {
        let reason = match &e {
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
                let hint = match &self.ca_file {
                    Some(f) => format!("neither Mozilla's roots nor {} trust it", f.display()),
                    None => "give its CA with --ca-file or SSL_CERT_FILE".into(),
                };
                format!("certificate not trusted: unknown issuer ({hint})")
            }
            rustls::Error::InvalidCertificate(c) => format!("certificate rejected: {c}"),
            // A TLS client hello answered with HTTP or a WebSocket frame.
            rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => {
                "the server did not answer in TLS (is this a plain ws:// port?)".into()
            }
            rustls::Error::AlertReceived(a) => {
                format!("the server refused the handshake (alert {a:?})")
            }
            e => e.to_string(),
        };
        Error::Tls {
            host: host.into(),
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name)
    }

    #[test]
    fn ca_file_with_several_certificates_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("bundle.pem");
        let mut pem = std::fs::read(data("wrong-name.pem")).unwrap();
        pem.extend(std::fs::read(data("ca.pem")).unwrap());
        std::fs::write(&bundle, pem).unwrap();
        let t = TlsConfig::new(Some(&bundle)).unwrap();
        assert_eq!(t.ca_file.as_deref(), Some(bundle.as_path()));
        TlsConfig::new(None).unwrap();
    }

    #[test]
    fn unusable_ca_files_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no certificates here\n").unwrap();
        let broken = dir.path().join("broken.pem");
        std::fs::write(
            &broken,
            "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        for (f, why) in [
            (&missing, "No such file"),
            (&empty, "no PEM certificate"),
            (&broken, "bad PEM"),
        ] {
            let e = TlsConfig::new(Some(f)).unwrap_err();
            assert!(matches!(e, Error::CaFile { .. }), "{e:?}");
            let msg = e.to_string();
            assert!(msg.contains(&f.display().to_string()), "{msg}");
            assert!(msg.contains(why), "{msg}");
        }
    }

    #[test]
    fn tls_errors_name_the_host_and_are_not_retried() {
        let t = TlsConfig::new(None).unwrap();
        let e = t.tls_err(
            "h.example",
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        assert_eq!(
            e.to_string(),
            "TLS with h.example: certificate not trusted: unknown issuer (give its CA with --ca-file or SSL_CERT_FILE)"
        );
        assert!(!e.is_transport());
        // An I/O failure inside the handshake stays retryable, and says where it happened.
        let e = t.handshake_err("h.example", std::io::ErrorKind::ConnectionReset.into());
        assert!(e.is_transport());
        assert!(
            e.to_string().contains("TLS handshake with h.example"),
            "{e}"
        );
    }
}
