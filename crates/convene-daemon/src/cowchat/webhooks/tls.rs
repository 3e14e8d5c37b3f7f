//! The TLS client of https webhook targets, behind the `webhooks-https` cargo feature
//! (default on). It costs about 1.8 MB of the stripped release binary (rustls, ring,
//! webpki-roots); without the feature, `subscribe` refuses https URLs with `not_supported`.

/// Whether this build delivers to https targets.
pub const HTTPS: bool = cfg!(feature = "webhooks-https");

#[cfg(feature = "webhooks-https")]
mod imp {
    use std::path::Path;
    use std::sync::Arc;

    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, ServerName};
    use tokio::net::TcpStream;
    use tokio_rustls::client::TlsStream;
    use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
    use tokio_rustls::TlsConnector;

    /// rustls on ring, TLS 1.2 and 1.3, trusting the Mozilla roots compiled into
    /// `webpki-roots` plus the PEM certificates in `extra_ca` (test-only setting).
    pub struct Tls(TlsConnector);

    impl Tls {
        /// Builds the client configuration once.
        pub fn new(extra_ca: Option<&Path>) -> Result<Self, String> {
            let mut roots = RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            if let Some(path) = extra_ca {
                let bad = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
                for c in CertificateDer::pem_file_iter(path).map_err(|e| bad(&e))? {
                    roots.add(c.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
                }
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let cfg = ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Ok(Self(TlsConnector::from(Arc::new(cfg))))
        }

        /// Handshakes over `tcp`, verifying the certificate against `host` (name or IP).
        pub async fn connect(
            &self,
            host: &str,
            tcp: TcpStream,
        ) -> std::io::Result<TlsStream<TcpStream>> {
            let name = ServerName::try_from(host.to_string()).map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad TLS server name")
            })?;
            self.0.connect(name, tcp).await
        }
    }
}

#[cfg(not(feature = "webhooks-https"))]
mod imp {
    use std::path::Path;

    use tokio::net::TcpStream;

    /// No TLS in this build.
    pub struct Tls;

    impl Tls {
        /// Refuses extra CA certificates: there is nothing to trust them with.
        pub fn new(extra_ca: Option<&Path>) -> Result<Self, String> {
            match extra_ca {
                Some(_) => Err("built without the webhooks-https feature".into()),
                None => Ok(Self),
            }
        }

        /// Always fails (`subscribe` already refuses https URLs).
        pub async fn connect(&self, _host: &str, _tcp: TcpStream) -> std::io::Result<TcpStream> {
            Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "built without https support",
            ))
        }
    }
}

pub use imp::Tls;
