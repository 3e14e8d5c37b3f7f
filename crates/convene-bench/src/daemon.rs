//! Starting a fresh daemon (Convene or CCCC) in its own temporary home, and stopping it.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use convene_ipc::client::Endpoint;
use serde_json::json;

use crate::conn::{Conn, Res};

/// Which implementation a daemon is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Convene,
    Cccc,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Convene => "Convene",
            Kind::Cccc => "CCCC",
        }
    }
}

/// A running daemon, killed on drop.
pub struct Daemon {
    pub socket: PathBuf,
    pub version: String,
    child: Option<Child>,
}

impl Daemon {
    /// Starts `bin` with a fresh home `home` and waits until it answers `ping`.
    pub fn start(kind: Kind, bin: &Path, home: &Path) -> Res<Self> {
        std::fs::create_dir_all(home).map_err(|e| format!("mkdir {}: {e}", home.display()))?;
        // The log lives next to the home, not in it: CCCC refuses a non-empty directory that
        // is not already a CCCC home.
        let log_path = home.with_extension("log");
        let log = File::create(&log_path).map_err(|e| e.to_string())?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(bin);
        match kind {
            Kind::Convene => {
                cmd.arg("serve")
                    .arg("--home")
                    .arg(home)
                    .env("CONVENE_LOG", "warn");
            }
            Kind::Cccc => {
                cmd.arg("daemon").arg("run").env("CCCC_HOME", home);
            }
        }
        // Own process group so that a stuck daemon and anything it spawned can be killed
        // together without touching anything else.
        cmd.current_dir(home)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let mut d = Daemon {
            socket: PathBuf::new(),
            version: String::new(),
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(c) = d.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    d.child = None;
                    return Err(format!(
                        "{} exited at startup ({st}): {}",
                        kind.name(),
                        log_tail(&log_path)
                    ));
                }
            }
            if home.join("daemon").join("ccccd.addr.json").exists() {
                if let Endpoint::Unix(p) = Endpoint::discover(home) {
                    if let Ok(mut c) = Conn::connect(&p) {
                        if let Ok(v) = c.call("ping", json!({})) {
                            d.socket = p;
                            d.version = v
                                .get("version")
                                .and_then(|x| x.as_str())
                                .unwrap_or("?")
                                .to_string();
                            return Ok(d);
                        }
                    }
                } else {
                    return Err(format!("{} is not listening on a Unix socket", kind.name()));
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} did not come up within 30 s: {}",
                    kind.name(),
                    log_tail(&log_path)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The daemon's process id (0 once stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// A new connection.
    pub fn connect(&self) -> Res<Conn> {
        Conn::connect(&self.socket)
    }

    /// Asks the daemon to shut down, then kills its process group if it lingers.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(mut c) = Conn::connect(&self.socket) {
            let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = c.call("shutdown", json!({}));
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Still there: SIGKILL the group we created (its pgid is its pid).
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg("--")
            .arg(format!("-{}", child.id()))
            .status();
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The first lines of a daemon log, for error messages (the temp dir is removed at exit).
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().take(5).collect();
    format!("{} [log {}]", lines.join(" | "), path.display())
}

/// Finds `name` on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
