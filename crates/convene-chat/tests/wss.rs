//! `wss://`: the real `cowchat` binary through a real TLS terminator (rustls, server side,
//! in this test) in front of the daemon's plain `ws://` listener. Certificates: a static
//! test CA and two server certificates it signed, in tests/data (see its README).

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// A TLS terminator: accepts TLS on 127.0.0.1:0 with `cert`, forwards the plaintext bytes to
/// `backend` (the daemon's WebSocket listener) and back.
struct TlsProxy {
    port: u16,
    /// The configuration new connections get (swappable: a certificate change).
    cfg: Arc<Mutex<Arc<rustls::ServerConfig>>>,
    /// The client-side sockets, so a test can cut every connection.
    clients: Arc<Mutex<Vec<TcpStream>>>,
}

impl TlsProxy {
    fn start(backend: SocketAddr, cert: &str) -> Self {
        let cfg = Arc::new(Mutex::new(Self::config(cert)));
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let clients = Arc::new(Mutex::new(Vec::new()));
        let (list, current) = (clients.clone(), cfg.clone());
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                list.lock().unwrap().push(s.try_clone().unwrap());
                let cfg = current.lock().unwrap().clone();
                std::thread::spawn(move || {
                    let _ = Self::serve(cfg, s, backend);
                });
            }
        });
        Self { port, cfg, clients }
    }

    fn config(cert: &str) -> Arc<rustls::ServerConfig> {
        let certs = vec![CertificateDer::from_pem_file(data(&format!("{cert}.pem"))).unwrap()];
        let key = PrivateKeyDer::from_pem_file(data(&format!("{cert}.key"))).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .unwrap(),
        )
    }

    /// Serves `cert` to the connections accepted from now on.
    fn set_cert(&self, cert: &str) {
        *self.cfg.lock().unwrap() = Self::config(cert);
    }

    /// One connection: handshake, then shuttle bytes both ways with short read timeouts
    /// (a TLS stream cannot be split between two threads).
    fn serve(
        cfg: Arc<rustls::ServerConfig>,
        mut tcp: TcpStream,
        backend: SocketAddr,
    ) -> std::io::Result<()> {
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut conn = rustls::ServerConnection::new(cfg).map_err(std::io::Error::other)?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)?; // fails when the client rejects our certificate
        }
        let tick = Some(Duration::from_millis(5));
        tcp.set_read_timeout(tick)?;
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let mut back = TcpStream::connect(backend)?;
        back.set_nodelay(true)?;
        back.set_read_timeout(tick)?;
        let mut buf = vec![0u8; 64 * 1024];
        let idle =
            |e: &std::io::Error| matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut);
        loop {
            match tls.read(&mut buf) {
                Ok(0) => return back.shutdown(std::net::Shutdown::Write),
                Ok(n) => back.write_all(&buf[..n])?,
                Err(e) if idle(&e) => {}
                Err(e) => return Err(e),
            }
            match back.read(&mut buf) {
                Ok(0) => {
                    tls.conn.send_close_notify();
                    return tls.flush();
                }
                Ok(n) => {
                    tls.write_all(&buf[..n])?;
                    tls.flush()?;
                }
                Err(e) if idle(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn url(&self, host: &str) -> String {
        format!("wss://{host}:{}/ws", self.port)
    }

    /// Cuts every open connection (as a network failure or a proxy restart would).
    fn cut(&self) {
        for s in self.clients.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// A daemon serving plain WebSocket, and the address of that listener.
fn ws_daemon() -> (Daemon, SocketAddr) {
    let (d, url) = if daemon_has_ws() {
        let d = Daemon::start_args(None, &["--cowchat-ws", "127.0.0.1:0"]);
        let url = d.ws_url();
        (d, url)
    } else {
        // A `convene` without --cowchat-ws: the test bridge in front of its Unix socket.
        let d = Daemon::start();
        let url = ws_bridge(d.sock());
        (d, url)
    };
    let hostport = url
        .strip_prefix("ws://")
        .and_then(|r| r.split('/').next())
        .unwrap();
    (d, hostport.parse().unwrap())
}

/// `cowchat` on `url` as `who`, with no CA settings inherited from the environment.
fn cow_wss(d: &Daemon, url: &str, who: &str) -> Command {
    let mut c = d.cow_at(url, who);
    c.env_remove("SSL_CERT_FILE");
    c
}

fn with_ca(mut c: Command) -> Command {
    c.arg("--ca-file").arg(data("ca.pem"));
    c
}

fn failure(mut c: Command) -> (Option<i32>, String) {
    let o = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    (o.status.code(), String::from_utf8(o.stderr).unwrap())
}

#[test]
fn wss_send_and_history_with_ca_file() {
    let (d, backend) = ws_daemon();
    let proxy = TlsProxy::start(backend, "server");
    // A DNS name (SNI + name check) and an IP address (checked against the IP entries).
    let url = proxy.url("localhost");
    let ip_url = proxy.url("127.0.0.1");
    let mut c = with_ca(cow_wss(&d, &url, "alice"));
    c.args(["rooms", "create", "secure", "--public"]);
    ok(c);
    let mut c = with_ca(cow_wss(&d, &ip_url, "alice"));
    c.args(["send", "secure", "over tls"]);
    let sent: serde_json::Value = serde_json::from_str(ok(c).trim()).unwrap();
    assert!(sent["seq"].as_u64().is_some(), "{sent}");
    let mut c = with_ca(cow_wss(&d, &url, "bob"));
    c.args(["history", "secure"]);
    let got = json_lines(&ok(c));
    assert_eq!(contents(&got), vec!["over tls"]);
    assert_eq!(got[0]["agent_id"], "alice");
    // The same room over the Unix socket: one server behind both.
    let mut c = d.cow("carol");
    c.args(["history", "secure"]);
    assert_eq!(contents(&json_lines(&ok(c))), vec!["over tls"]);
}

#[test]
fn wss_trusts_ssl_cert_file_and_seals_encrypted_rooms() {
    let (d, backend) = ws_daemon();
    let proxy = TlsProxy::start(backend, "server");
    let url = proxy.url("localhost");
    // A bundle of several certificates, the CA last.
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle.pem");
    let mut pem = std::fs::read(data("wrong-name.pem")).unwrap();
    pem.extend(std::fs::read(data("ca.pem")).unwrap());
    std::fs::write(&bundle, pem).unwrap();
    let key = "correct horse battery staple";
    let cow = |who: &str| {
        let mut c = cow_wss(&d, &url, who);
        c.env("SSL_CERT_FILE", &bundle).env("COWCHAT_ROOM_KEY", key);
        c
    };
    let mut c = cow("alice");
    c.args(["rooms", "create", "vault", "--public", "--encrypted"]);
    ok(c);
    let mut c = cow("alice");
    c.args(["send", "vault", "the eagle lands"]);
    ok(c);
    let mut c = cow("bob");
    c.args(["history", "vault"]);
    let got = json_lines(&ok(c));
    assert_eq!(contents(&got), vec!["the eagle lands"]);
    assert_eq!(got[0]["encrypted"], true);
    // The server only ever saw the sealed blob.
    let mut c = d.cow("carol");
    c.args(["history", "vault"]);
    let raw = json_lines(&ok(c));
    assert!(
        raw[0]["content"].as_str().unwrap().starts_with("cow1:"),
        "{}",
        raw[0]
    );
}

#[test]
fn wss_untrusted_certificate_fails_clearly() {
    let (d, backend) = ws_daemon();
    let proxy = TlsProxy::start(backend, "server");
    let url = proxy.url("localhost");
    // Mozilla's roots only: the test CA is unknown.
    let mut c = cow_wss(&d, &url, "alice");
    c.args(["rooms", "list"]);
    let (code, err) = failure(c);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("TLS with localhost"), "{err}");
    assert!(err.contains("certificate not trusted"), "{err}");
    assert!(err.contains("--ca-file"), "{err}");
    assert!(err.contains(&url), "names the URL: {err}");
    // An unusable CA file is reported as such.
    let mut c = cow_wss(&d, &url, "alice");
    c.arg("--ca-file").arg(data("README.md"));
    c.args(["rooms", "list"]);
    let (code, err) = failure(c);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("CA file") && err.contains("README.md"),
        "{err}"
    );
    // ... but only for wss: the Unix socket ignores an SSL_CERT_FILE meant for other tools.
    let mut c = d.cow("alice");
    c.env("SSL_CERT_FILE", "/nonexistent/ca.pem")
        .args(["rooms", "list"]);
    ok(c);
}

#[test]
fn wss_name_mismatch_fails_clearly() {
    let (d, backend) = ws_daemon();
    // Signed by the trusted CA, but for wrong-name.invalid only.
    let proxy = TlsProxy::start(backend, "wrong-name");
    for host in ["localhost", "127.0.0.1"] {
        let mut c = with_ca(cow_wss(&d, &proxy.url(host), "alice"));
        c.args(["send", "lobby", "must not arrive"]);
        let (code, err) = failure(c);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains(&format!("TLS with {host}")), "{err}");
        assert!(err.contains("not valid for name"), "{err}");
        assert!(err.contains("wrong-name.invalid"), "{err}");
    }
    let mut c = d.cow("carol");
    c.args(["history", "lobby"]);
    assert!(json_lines(&ok(c)).is_empty());
}

#[test]
fn wss_wait_loop_is_woken_by_a_message_sent_on_the_unix_socket() {
    let (d, backend) = ws_daemon();
    let proxy = TlsProxy::start(backend, "server");
    create_room(&d, "alice", "live", &[]);
    join(&d, "bob", "live");
    let t = tip(&d, "bob", "live").to_string();
    let mut c = with_ca(cow_wss(&d, &proxy.url("localhost"), "bob"));
    // Internal re-check at the idle limit: only the push path can pass.
    c.args([
        "wait",
        "live",
        "--loop",
        "--since-seq",
        &t,
        "--idle-timeout",
        "60",
        "--timeout",
        "60",
    ]);
    let got = woken_by(c, &d, "alice", "live", "pushed through tls");
    assert_eq!(contents(&got), vec!["pushed through tls"]);
    assert_eq!(got[0]["agent_id"], "alice");
}

#[test]
fn wss_follow_reconnects_after_the_connection_is_cut() {
    let (d, backend) = ws_daemon();
    let proxy = TlsProxy::start(backend, "server");
    create_room(&d, "alice", "durable", &[]);
    join(&d, "bob", "durable");
    let start = tip(&d, "bob", "durable").to_string();
    send(&d, "alice", "durable", "before the cut", &[]);
    let mut c = with_ca(cow_wss(&d, &proxy.url("127.0.0.1"), "bob"));
    c.args(["wait", "durable", "--follow", "--since-seq", &start]);
    let w = follow(c);
    assert!(w.first.contains("before the cut"), "{}", w.first);
    proxy.cut();
    // Sent while the follower may still be reconnecting: it must arrive exactly once.
    send(&d, "alice", "durable", "after the cut", &[]);
    send(&d, "alice", "durable", "the end", &["--end"]);
    let (status, rest, err) = w.finish();
    assert!(status.success(), "{err}");
    assert_eq!(
        contents(&json_lines(&rest)),
        vec!["after the cut", "the end"],
        "{err}"
    );
    assert!(
        err.contains("reconnecting"),
        "the follower saw the cut: {err}"
    );
}

#[test]
fn wss_history_follow_prints_the_history_then_a_message_sent_after_it_started() {
    let (d, backend) = ws_daemon();
    let proxy = TlsProxy::start(backend, "server");
    create_room(&d, "alice", "journal", &[]);
    send(&d, "alice", "journal", "earlier one", &[]);
    send(&d, "alice", "journal", "earlier two", &[]);
    let mut c = with_ca(cow_wss(&d, &proxy.url("localhost"), "bob"));
    c.args(["history", "journal", "--follow"]);
    let w = follow(c);
    assert_eq!(contents(&json_lines(&w.first)), vec!["earlier one"]);
    // Sent on the Unix socket once the follower has printed: it must come through the TLS
    // stream, exactly once, and a peer's `--end` then ends the stream with exit 0.
    send(&d, "alice", "journal", "after it started", &[]);
    send(&d, "alice", "journal", "the end", &["--end"]);
    let (status, rest, err) = w.finish();
    assert!(status.success(), "{err}");
    let got = json_lines(&rest);
    assert_eq!(
        contents(&got),
        vec!["earlier two", "after it started", "the end"],
        "{err}"
    );
    assert_eq!(got[1]["agent_id"], "alice");
}

#[test]
fn wss_follow_stops_instead_of_retrying_a_certificate_that_went_bad() {
    let (d, backend) = ws_daemon();
    let proxy = TlsProxy::start(backend, "server");
    create_room(&d, "alice", "rotated", &[]);
    join(&d, "bob", "rotated");
    let start = tip(&d, "bob", "rotated").to_string();
    send(&d, "alice", "rotated", "first", &[]);
    let mut c = with_ca(cow_wss(&d, &proxy.url("localhost"), "bob"));
    c.args(["wait", "rotated", "--follow", "--since-seq", &start]);
    let w = follow(c);
    assert!(w.first.contains("first"), "{}", w.first);
    // The server now presents a certificate for another name: reconnecting cannot help,
    // and a follower must not spin on it forever.
    proxy.set_cert("wrong-name");
    proxy.cut();
    let (status, _, err) = w.finish();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("TLS with localhost"), "{err}");
    assert!(err.contains("not valid for name"), "{err}");
}
