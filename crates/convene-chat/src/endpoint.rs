//! Where to connect: `unix:/path`, `tcp host:port` / `tcp://host:port` / `host:port`, or
//! `ws://host:port/path`; and the Convene home defaults (socket path, key file).

use std::path::{Path, PathBuf};

use crate::Error;

/// A parsed server address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A Unix domain socket.
    Unix(PathBuf),
    /// A TCP `host:port`.
    Tcp(String),
    /// A WebSocket URL (`ws://…`; TLS is not built in).
    Ws(String),
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
            // Say so plainly rather than failing inside the handshake.
            return Err(Error::BadUrl(format!(
                "{s} (wss:// needs TLS, which this client does not build in; terminate TLS locally or use ws://)"
            )));
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
            Endpoint::Ws(u) => f.write_str(u),
        }
    }
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
        assert!(Endpoint::parse("wss://h/ws").is_err());
        assert!(Endpoint::parse("nonsense").is_err());
        assert!(Endpoint::parse("unix:").is_err());
    }
}
