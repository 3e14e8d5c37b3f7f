//! Where to connect: `unix:/path`, `tcp host:port` / `tcp://host:port` / `host:port`, or
//! `ws://host:port/path`, `wss://host[:port]/path`; and the Convene home defaults (socket
//! path, key file).

use std::path::{Path, PathBuf};

use crate::Error;

/// A parsed server address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A Unix domain socket.
    Unix(PathBuf),
    /// A TCP `host:port`.
    Tcp(String),
    /// A WebSocket URL (`ws://…`).
    Ws(String),
    /// A WebSocket URL over TLS (`wss://…`).
    Wss(String),
}

impl Endpoint {
    /// Parses the forms accepted by `--url`.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let t = s.trim();
        if let Some(p) = t
            .strip_prefix("unix://")
            .or_else(|| t.strip_prefix("unix:"))
        {
            if p.is_empty() {
                return Err(Error::BadUrl(s.into()));
            }
            return Ok(Self::Unix(PathBuf::from(p)));
        }
        if t.starts_with("ws://") {
            return Ok(Self::Ws(t.to_string()));
        }
        if t.starts_with("wss://") {
            // Fail on a hostless URL here rather than inside the TLS setup.
            url_host_port(t)?;
            return Ok(Self::Wss(t.to_string()));
        }
        let hp = t
            .strip_prefix("tcp://")
            .or_else(|| t.strip_prefix("tcp "))
            .or_else(|| t.strip_prefix("tcp:"))
            .unwrap_or(t)
            .trim();
        if t.starts_with('/') || t.starts_with('.') {
            return Ok(Self::Unix(PathBuf::from(t)));
        }
        match hp.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => Ok(Self::Tcp(hp.into())),
            _ => Err(Error::BadUrl(s.into())),
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
            Endpoint::Tcp(a) => write!(f, "tcp {a}"),
            Endpoint::Ws(u) | Endpoint::Wss(u) => f.write_str(u),
        }
    }
}

/// Host and port of a `ws://` / `wss://` URL: the port defaults to 80 / 443, an IPv6
/// host loses its brackets (`wss://[::1]:9/ws` → `("::1", 9)`).
pub(crate) fn url_host_port(url: &str) -> Result<(String, u16), Error> {
    let bad = || Error::BadUrl(url.into());
    let (rest, default_port) = if let Some(r) = url.strip_prefix("ws://") {
        (r, 80)
    } else if let Some(r) = url.strip_prefix("wss://") {
        (r, 443)
    } else {
        return Err(bad());
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    // user:password@ is not part of the address.
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or_else(bad)?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| bad())?,
            None if after.is_empty() => default_port,
            None => return Err(bad()),
        };
        (h, port)
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().map_err(|_| bad())?),
            None => (hostport, default_port),
        }
    };
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

/// The Convene home: `$CONVENE_HOME`, else `~/.convene`.
pub fn convene_home() -> PathBuf {
    if let Some(h) = std::env::var_os("CONVENE_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".convene")
}

/// The Cowchat socket of a Convene home.
pub fn default_socket(home: &Path) -> PathBuf {
    home.join("daemon").join("cowchat.sock")
}

/// The API key stored in a Convene home (`auth.key`), trimmed; empty when absent.
pub fn default_key(home: &Path) -> String {
    std::fs::read_to_string(home.join("auth.key"))
        .map(|k| k.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(
            Endpoint::parse("unix:/tmp/c.sock").unwrap(),
            Endpoint::Unix("/tmp/c.sock".into())
        );
        assert_eq!(
            Endpoint::parse("/tmp/c.sock").unwrap(),
            Endpoint::Unix("/tmp/c.sock".into())
        );
        assert_eq!(
            Endpoint::parse("tcp 127.0.0.1:9229").unwrap(),
            Endpoint::Tcp("127.0.0.1:9229".into())
        );
        assert_eq!(
            Endpoint::parse("tcp://localhost:1").unwrap(),
            Endpoint::Tcp("localhost:1".into())
        );
        assert_eq!(
            Endpoint::parse("127.0.0.1:9229").unwrap(),
            Endpoint::Tcp("127.0.0.1:9229".into())
        );
        assert_eq!(
            Endpoint::parse("ws://h:80/ws").unwrap(),
            Endpoint::Ws("ws://h:80/ws".into())
        );
        assert_eq!(
            Endpoint::parse("wss://h/ws").unwrap(),
            Endpoint::Wss("wss://h/ws".into())
        );
        assert!(Endpoint::parse("wss:///ws").is_err());
        assert!(Endpoint::parse("nonsense").is_err());
        assert!(Endpoint::parse("unix:").is_err());
    }

    #[test]
    fn url_host_port_defaults_and_ipv6() {
        let hp = |u| url_host_port(u).unwrap();
        assert_eq!(hp("ws://h:9/ws"), ("h".into(), 9));
        assert_eq!(hp("ws://h/ws"), ("h".into(), 80));
        assert_eq!(hp("wss://h/ws"), ("h".into(), 443));
        assert_eq!(hp("wss://h:8443"), ("h".into(), 8443));
        assert_eq!(hp("wss://127.0.0.1:1/ws?x=1"), ("127.0.0.1".into(), 1));
        assert_eq!(hp("wss://[::1]:9/ws"), ("::1".into(), 9));
        assert_eq!(hp("wss://[::1]/ws"), ("::1".into(), 443));
        assert_eq!(hp("wss://u:p@h:2/ws"), ("h".into(), 2));
        assert!(url_host_port("ws:///ws").is_err());
        assert!(url_host_port("wss://h:x/ws").is_err());
        assert!(url_host_port("wss://[::1/ws").is_err());
        assert!(url_host_port("http://h/ws").is_err());
    }
}
