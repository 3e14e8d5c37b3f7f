//! Shared by the integration tests: a real `convene` daemon on a temp home and the real
//! `cowchat` binary. Build the daemon first: `cargo build -p convene-cli` (or set CONVENE_BIN).
#![allow(dead_code)] // each test file uses a different subset

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn convene_bin() -> PathBuf {
    if let Some(b) = std::env::var_os("CONVENE_BIN") {
        return b.into();
    }
    let me = PathBuf::from(env!("CARGO_BIN_EXE_cowchat"));
    let b = me.with_file_name("convene");
    assert!(
        b.exists(),
        "{} not found: run `cargo build -p convene-cli` first (or set CONVENE_BIN)",
        b.display()
    );
    b
}

pub struct Daemon {
    home: tempfile::TempDir,
    child: Child,
    tcp: Option<String>,
}

impl Daemon {
    pub fn start() -> Self {
        Self::start_with(None)
    }

    pub fn start_with(tcp: Option<String>) -> Self {
        Self::start_args(tcp, &[])
    }

    pub fn start_args(tcp: Option<String>, extra: &[&str]) -> Self {
        let home = tempfile::tempdir().unwrap();
        let child = Self::spawn(home.path(), tcp.as_deref(), extra);
        let d = Self { home, child, tcp };
        d.wait_ready();
        d
    }

    pub fn spawn(home: &Path, tcp: Option<&str>, extra: &[&str]) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(home.join("daemon.log"))
            .unwrap();
        let mut cmd = Command::new(convene_bin());
        cmd.arg("--home").arg(home).arg("serve").args(extra);
        if let Some(a) = tcp {
            cmd.arg("--cowchat-tcp").arg(a);
        }
        cmd.env("CONVENE_LOG", "warn")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    /// Stops the daemon and starts it again on the same home.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::spawn(self.home.path(), self.tcp.as_deref(), &[]);
        self.wait_ready();
    }

    pub fn wait_ready(&self) {
        let d = self;
        let sock = d.sock();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&sock).is_err() {
            assert!(
                Instant::now() < deadline,
                "daemon did not start: {}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(a) = &d.tcp {
            while std::net::TcpStream::connect(a).is_err() {
                assert!(
                    Instant::now() < deadline,
                    "daemon TCP did not start: {}",
                    d.log()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    pub fn sock(&self) -> PathBuf {
        self.home.path().join("daemon").join("cowchat.sock")
    }

    pub fn url(&self) -> String {
        format!("unix:{}", self.sock().display())
    }

    /// The `ws://…/ws` URL from `<home>/daemon/cowchat.addr.json` (`--cowchat-ws ADDR:0`).
    pub fn ws_url(&self) -> String {
        let f = self.home.path().join("daemon").join("cowchat.addr.json");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let v: Option<Value> = std::fs::read_to_string(&f)
                .ok()
                .and_then(|s| serde_json::from_str(&s).ok());
            if let Some(u) = v.as_ref().and_then(|v| v["ws"].as_str()) {
                return u.to_string();
            }
            assert!(
                Instant::now() < deadline,
                "no ws address in {}",
                f.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("daemon.log")).unwrap_or_default()
    }

    /// A `cowchat` command as agent `who`, on the Unix socket.
    pub fn cow(&self, who: &str) -> Command {
        self.cow_at(&self.url(), who)
    }

    pub fn cow_at(&self, url: &str, who: &str) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_cowchat"));
        for (k, _) in std::env::vars() {
            if k.starts_with("COWCHAT_") {
                c.env_remove(k);
            }
        }
        c.env("CONVENE_HOME", self.home.path())
            .args(["--url", url, "--name", who, "--agent-id", who])
            .stdin(Stdio::null());
        c
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn run(mut c: Command) -> Output {
    c.output().unwrap()
}

/// Runs and requires exit 0; returns stdout.
pub fn ok(c: Command) -> String {
    let o = run(c);
    assert!(
        o.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

pub fn json_lines(s: &str) -> Vec<Value> {
    s.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

pub fn contents(v: &[Value]) -> Vec<&str> {
    v.iter().map(|m| m["content"].as_str().unwrap()).collect()
}

pub fn create_room(d: &Daemon, who: &str, name: &str, extra: &[&str]) -> Value {
    let mut c = d.cow(who);
    c.args(["rooms", "create", name]).args(extra);
    serde_json::from_str(ok(c).trim()).unwrap()
}

pub fn send(d: &Daemon, who: &str, room: &str, text: &str, extra: &[&str]) -> Value {
    let mut c = d.cow(who);
    c.args(["send", room, text]).args(extra);
    serde_json::from_str(ok(c).trim()).unwrap()
}

/// Starts a blocked waiter (`c`), lets it settle, has `sender` send `text` to `room`, and
/// returns the waiter's JSON lines once it exited 0.
pub fn woken_by(mut c: Command, d: &Daemon, sender: &str, room: &str, text: &str) -> Vec<Value> {
    let waiter = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    send(d, sender, room, text, &[]);
    let o = waiter.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    json_lines(&String::from_utf8(o.stdout).unwrap())
}

/// A library client of the daemon, registered as `who` (name and stable agent id).
pub fn connect_as(d: &Daemon, who: &str) -> convene_chat::Client {
    let ep = convene_chat::Endpoint::parse(&d.url()).unwrap();
    let id = convene_chat::Identity {
        name: who.into(),
        agent_id: Some(who.into()),
        ..Default::default()
    };
    convene_chat::Client::connect(&ep, &id).unwrap()
}

pub fn tip(d: &Daemon, who: &str, room: &str) -> u64 {
    let mut c = d.cow(who);
    c.args(["rooms", "tip", room]);
    ok(c).trim().parse().unwrap()
}

pub fn join(d: &Daemon, who: &str, room: &str) {
    // history joins (membership is needed to read).
    let mut c = d.cow(who);
    c.args(["history", room, "--limit", "1"]);
    ok(c);
}

pub fn read_cursor(f: &Path) -> u64 {
    std::fs::read_to_string(f).unwrap().trim().parse().unwrap()
}

pub fn ws_bridge(sock: PathBuf) -> String {
    use std::io::{BufRead, BufReader, ErrorKind, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let sock = sock.clone();
            std::thread::spawn(move || {
                let mut ws = tungstenite::accept(s).unwrap();
                ws.get_ref()
                    .set_read_timeout(Some(Duration::from_millis(20)))
                    .unwrap();
                let u = std::os::unix::net::UnixStream::connect(&sock).unwrap();
                u.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
                let mut w = u.try_clone().unwrap();
                let mut r = BufReader::new(u);
                let mut line = Vec::new();
                loop {
                    match ws.read() {
                        Ok(tungstenite::Message::Text(t)) => {
                            w.write_all(t.as_bytes()).unwrap();
                            w.write_all(b"\n").unwrap();
                        }
                        Ok(tungstenite::Message::Close(_)) => return,
                        Ok(_) => {}
                        Err(tungstenite::Error::Io(e))
                            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                        Err(_) => return,
                    }
                    match r.read_until(b'\n', &mut line) {
                        Ok(0) => return,
                        Ok(_) if line.ends_with(b"\n") => {
                            let t = String::from_utf8(std::mem::take(&mut line)).unwrap();
                            if ws.send(tungstenite::Message::text(t.trim_end())).is_err() {
                                return;
                            }
                        }
                        Ok(_) => {}
                        Err(e)
                            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                        Err(_) => return,
                    }
                }
            });
        }
    });
    format!("ws://{addr}/ws")
}

pub trait Tap {
    fn tap(self, f: impl FnOnce(&mut Self)) -> Self;
}

impl Tap for Command {
    fn tap(mut self, f: impl FnOnce(&mut Self)) -> Self {
        f(&mut self);
        self
    }
}

/// Whether this `convene` build serves Cowchat over WebSocket (`serve --cowchat-ws`).
pub fn daemon_has_ws() -> bool {
    Command::new(convene_bin())
        .args(["serve", "--help"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("--cowchat-ws"))
        .unwrap_or(false)
}

/// A long-running command (`wait --follow`) after the first line it printed.
pub struct Follower {
    pub child: Child,
    pub out: BufReader<ChildStdout>,
    pub first: String,
}

/// Starts `c` with piped output and waits for its first stdout line.
pub fn follow(mut c: Command) -> Follower {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    Follower { child, out, first }
}

impl Follower {
    /// Waits for the exit: the status, the rest of stdout, and stderr.
    pub fn finish(mut self) -> (ExitStatus, String, String) {
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).unwrap();
        let status = self.child.wait().unwrap();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            e.read_to_string(&mut err).unwrap();
        }
        (status, rest, err)
    }
}
