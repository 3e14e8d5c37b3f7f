//! The Convene daemon: opens the home, starts the single ledger writer, the runtime delivery
//! worker and the faces (CCCC daemon IPC v1 and Cowchat v2, each on a Unix socket and
//! optional TCP).

pub mod blobs;
pub mod cowchat;
pub mod gate;
pub mod groupx;
pub mod home;
pub mod hub;
pub mod ipc;
pub mod ledger;
pub mod lines;
pub mod listen;
pub mod runtime;
pub mod ws;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use convene_core::{Command, Limits};
use serde_json::{json, Value};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;

use crate::blobs::Blobs;
use crate::home::{Home, HomeError};
use crate::ledger::{Answer, Ledger};
use crate::runtime::Runtime;

/// Daemon settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Home directory.
    pub home: PathBuf,
    /// Also listen on this TCP address (loopback peers are local; others need the API key).
    pub tcp: Option<String>,
    /// Require the API key from every TCP peer, loopback included.
    pub tcp_require_key: bool,
    /// Stream heartbeat interval.
    pub heartbeat: Duration,
    /// Content limits.
    pub limits: Limits,
    /// How long a `command` runtime may take to accept a payload.
    pub command_timeout: Duration,
    /// Session transport: frames an attached `runtime_attach` connection may have queued.
    pub session_queue: usize,
    /// Session transport: the bound on one handoff (queue wait plus write).
    pub session_timeout: Duration,
    /// Largest request line.
    pub max_request_bytes: usize,
    /// Also serve Cowchat v2 on this TCP address (e.g. 127.0.0.1:9229).
    pub cowchat_tcp: Option<String>,
    /// When `cowchat_tcp` is not set: serve Cowchat on this TCP address if it is free (the
    /// Cowchat default 127.0.0.1:9229 for `convene serve`); a taken port is logged, not fatal.
    pub cowchat_tcp_default: Option<String>,
    /// Also serve Cowchat v2 over WebSocket (`ws://ADDR/ws`) on this TCP address.
    pub cowchat_ws: Option<String>,
    /// Cowchat webhook delivery settings.
    pub cowchat_webhooks: cowchat::webhooks::Options,
    /// Per-key limits of the Cowchat face.
    pub cowchat_limits: cowchat::Limits,
    /// Cowchat reconnect window.
    pub cowchat_reconnect: Duration,
    /// Serve the GroupX face (REST + SSE + web page) on this loopback address.
    pub groupx: Option<String>,
    /// When `groupx` is not set: serve GroupX here if the port is free (`convene serve` uses
    /// 127.0.0.1:7390); a taken port is logged, not fatal.
    pub groupx_default: Option<String>,
    /// The GroupX roster file (default `<home>/groupx.json`).
    pub groupx_config: Option<PathBuf>,
}

impl Config {
    /// Defaults for a home.
    pub fn new(home: PathBuf) -> Self {
        Self {
            home,
            tcp: None,
            tcp_require_key: false,
            heartbeat: Duration::from_secs(30),
            limits: Limits::default(),
            command_timeout: Duration::from_secs(30),
            session_queue: runtime::SESSION_QUEUE,
            session_timeout: runtime::SESSION_HANDOFF_TIMEOUT,
            max_request_bytes: convene_ipc::MAX_REQUEST_BYTES,
            cowchat_tcp: None,
            cowchat_tcp_default: None,
            cowchat_ws: None,
            cowchat_webhooks: cowchat::webhooks::Options::default(),
            cowchat_limits: cowchat::Limits::default(),
            cowchat_reconnect: cowchat::RECONNECT_WINDOW,
            groupx: None,
            groupx_default: None,
            groupx_config: None,
        }
    }
}

/// Startup failures.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Home could not be opened or is locked.
    #[error(transparent)]
    Home(#[from] HomeError),
    /// The ledger could not be opened.
    #[error("ledger: {0}")]
    Ledger(#[from] convene_core::CoreError),
    /// A listener could not be bound.
    #[error("listen {0}: {1}")]
    Listen(String, std::io::Error),
    /// The Cowchat webhook store could not be opened.
    #[error(transparent)]
    Webhooks(#[from] cowchat::webhooks::HookError),
    /// A Cowchat default limit is out of range.
    #[error("cowchat limits: {0}")]
    CowchatLimits(#[from] cowchat::limits::LimitsError),
    /// The GroupX roster cannot be used.
    #[error(transparent)]
    Groupx(#[from] groupx::config::ConfigError),
    /// GroupX serves loopback only (§11).
    #[error("groupx address {0} is not a loopback address")]
    GroupxNotLoopback(String),
}

/// Shared state every face uses.
pub struct Daemon {
    /// The ledger.
    pub ledger: Ledger,
    /// Runtime delivery.
    pub runtime: Runtime,
    /// Attachment blobs.
    pub blobs: Blobs,
    /// API key required from remote TCP peers.
    pub api_key: String,
    /// Stream heartbeat interval.
    pub heartbeat: Duration,
    /// Largest request line.
    pub max_request_bytes: usize,
    /// The CCS verifier that gates agent tool calls.
    pub gate: Arc<gate::Gate>,
    shutdown: watch::Sender<bool>,
    /// The Cowchat face, once started: imports go through it (see [`Daemon::import`]).
    cowchat: OnceLock<Weak<cowchat::Face>>,
}

impl Daemon {
    /// Asks every listener and stream to stop.
    pub fn request_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Watches for shutdown.
    pub fn shutdown_rx(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Imports exported or foreign events into a group (`ledger_import`). Imported Cowchat
    /// coordination events (votes, ballots, leaders, tasks) are in the Cowchat face's
    /// projection when this returns, as if the face had appended them.
    pub async fn import(&self, group_id: String, events: Vec<Value>) -> Answer {
        match self.cowchat.get().and_then(Weak::upgrade) {
            Some(face) => cowchat::import(&face, group_id, events).await,
            None => {
                self.ledger
                    .execute(Command::Import { group_id, events })
                    .await
            }
        }
    }
}

/// How long a stopping daemon waits for in-progress deliveries to record their results.
const SHUTDOWN_SETTLE_BOUND: Duration = Duration::from_secs(3);

/// A started daemon.
pub struct Running {
    /// Shared state.
    pub daemon: Arc<Daemon>,
    /// Unix socket path.
    pub socket: PathBuf,
    /// Bound TCP address, if any.
    pub tcp: Option<SocketAddr>,
    /// Cowchat Unix socket path.
    pub cowchat_socket: PathBuf,
    /// Bound Cowchat TCP address, if any.
    pub cowchat_tcp: Option<SocketAddr>,
    /// Bound Cowchat WebSocket address, if any (served at `/ws`).
    pub cowchat_ws: Option<SocketAddr>,
    /// Bound GroupX HTTP address, if any.
    pub groupx: Option<SocketAddr>,
    /// The Cowchat face (its replay points are saved once more at stop).
    cowchat: Arc<cowchat::Face>,
    home: Home,
}

/// Starts the daemon: lock the home, open the ledger (settling stale claims first), bind.
pub async fn start(cfg: Config) -> Result<Running, DaemonError> {
    cfg.cowchat_limits.check()?;
    let home = Home::open(&cfg.home)?;
    let api_key = home.api_key()?;
    let (ledger, commits) = Ledger::open(&home.db(), cfg.limits.clone())?;
    let blobs = Blobs::open(home.root.join("blobs"))
        .map_err(|e| HomeError::Io(home.root.join("blobs"), e))?;
    let gate = Arc::new(gate::open(&home.root.join("evidence"))?);
    let runtime = Runtime::new(
        ledger.clone(),
        cfg.command_timeout,
        runtime::Sessions::new(cfg.session_queue, cfg.session_timeout),
    );
    runtime.spawn_worker(commits);
    runtime.recover(ledger.take_recovery());
    let (shutdown, _) = watch::channel(false);
    let daemon = Arc::new(Daemon {
        ledger,
        runtime,
        blobs,
        api_key,
        heartbeat: cfg.heartbeat,
        max_request_bytes: cfg.max_request_bytes,
        gate,
        shutdown,
        cowchat: OnceLock::new(),
    });

    // The Cowchat face first (it may create the lobby): clients take a bound socket as
    // "ready", so every face must be complete before the first listener exists.
    let face = cowchat::Face::new(
        daemon.clone(),
        cowchat::FaceConfig {
            home: home.root.clone(),
            limits: cfg.cowchat_limits,
            reconnect_window: cfg.cowchat_reconnect,
        },
    )
    .await;
    // Weak: the face holds the daemon.
    let _ = daemon.cowchat.set(Arc::downgrade(&face));
    let cowchat_face = face.clone();
    cowchat::webhooks::attach(
        &face,
        cowchat::webhooks::start(daemon.clone(), &home.root, cfg.cowchat_webhooks.clone())?,
    );
    // We hold the home lock, so a socket file left behind is stale.
    let sock = home.socket();
    let _ = std::fs::remove_file(&sock);
    // The Cowchat face: `<home>/daemon/cowchat.sock`, and TCP when asked. Bound before the
    // IPC socket: clients (and tests) take a live IPC socket to mean every face is up.
    let cowchat_socket = sock.with_file_name("cowchat.sock");
    let _ = std::fs::remove_file(&cowchat_socket);
    let cl = UnixListener::bind(&cowchat_socket)
        .map_err(|e| DaemonError::Listen(cowchat_socket.display().to_string(), e))?;
    let f = face.clone();
    listen::unix(&daemon, cl, "cowchat", move |s, t| {
        cowchat::serve(f.clone(), s, t)
    });
    let mut cowchat_tcp = None;
    let tcp_listener = match (&cfg.cowchat_tcp, &cfg.cowchat_tcp_default) {
        (Some(addr), _) => Some(bind_tcp(addr).await?),
        (None, Some(addr)) => match TcpListener::bind(addr).await {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::warn!(addr = %addr, error = %e, "cowchat default TCP address not available; serving Cowchat on the Unix socket only (use --cowchat-tcp ADDR)");
                None
            }
        },
        (None, None) => None,
    };
    if let Some(tl) = tcp_listener {
        cowchat_tcp = tl.local_addr().ok();
        let f = face.clone();
        listen::tcp(&daemon, tl, cfg.tcp_require_key, "cowchat", move |s, t| {
            cowchat::serve(f.clone(), s, t)
        });
    }
    let mut cowchat_ws = None;
    if let Some(addr) = &cfg.cowchat_ws {
        let tl = bind_tcp(addr).await?;
        cowchat_ws = tl.local_addr().ok();
        let d = daemon.clone();
        listen::tcp(
            &daemon,
            tl,
            cfg.tcp_require_key,
            "cowchat-ws",
            move |s, t| ws::serve(d.clone(), face.clone(), s, t),
        );
    }
    // Where the Cowchat listeners ended up (tests bind port 0 and read it here).
    home.write_json(
        &home.cowchat_addr_file(),
        &json!({
            "unix": cowchat_socket.display().to_string(),
            "tcp": cowchat_tcp.map(|a| a.to_string()),
            "ws": cowchat_ws.map(|a| format!("ws://{a}{}", ws::PATH)),
        }),
    )?;
    // The GroupX face: its room, its lanes, then its HTTP listener.
    let groupx_listener = match (&cfg.groupx, &cfg.groupx_default) {
        (Some(addr), _) => Some(bind_loopback(addr).await?),
        (None, Some(addr)) => match bind_loopback(addr).await {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::warn!(addr = %addr, error = %e, "groupx default address not available; GroupX is not served (use --groupx ADDR)");
                None
            }
        },
        (None, None) => None,
    };
    let mut groupx_addr = None;
    if let Some(l) = groupx_listener {
        let path = cfg
            .groupx_config
            .clone()
            .unwrap_or_else(|| home.root.join("groupx.json"));
        let gcfg = groupx::Config::load(&path)?;
        groupx_addr = l.local_addr().ok();
        let gface =
            groupx::Face::start(daemon.clone(), home.root.clone(), gcfg, groupx_addr).await?;
        tokio::spawn(groupx::serve(gface, l));
    }
    home.write_json(
        &home.root.join("daemon").join("groupx.addr.json"),
        &json!({"http": groupx_addr.map(|a| a.to_string()),
                "url": groupx_addr.map(|a| format!("http://{a}/"))}),
    )?;
    // The IPC face last.
    let ul = UnixListener::bind(&sock)
        .map_err(|e| DaemonError::Listen(sock.display().to_string(), e))?;
    let d = daemon.clone();
    listen::unix(&daemon, ul, "ipc", move |s, t| {
        ipc::serve_conn(d.clone(), s, t)
    });
    let mut tcp = None;
    if let Some(addr) = &cfg.tcp {
        let tl = bind_tcp(addr).await?;
        tcp = tl.local_addr().ok();
        let d = daemon.clone();
        listen::tcp(&daemon, tl, cfg.tcp_require_key, "ipc", move |s, t| {
            ipc::serve_conn(d.clone(), s, t)
        });
    }
    home.write_addr(&json!({
        "v": 1, "transport": "unix", "path": sock.display().to_string(), "host": "", "port": 0,
        "tcp": tcp.map(|a| a.to_string()),
        "pid": std::process::id(), "version": env!("CARGO_PKG_VERSION"), "implementation": "convene",
        "ts": convene_core::event::format_ts(time::OffsetDateTime::now_utc()),
    }))?;
    tracing::info!(home = %home.root.display(), socket = %sock.display(), tcp = ?tcp, cowchat_tcp = ?cowchat_tcp, cowchat_ws = ?cowchat_ws, groupx = ?groupx_addr, "convene daemon ready");
    Ok(Running {
        daemon,
        socket: sock,
        tcp,
        cowchat_socket,
        cowchat_tcp,
        cowchat_ws,
        groupx: groupx_addr,
        cowchat: cowchat_face,
        home,
    })
}

/// Binds a loopback-only listener (GroupX).
async fn bind_loopback(addr: &str) -> Result<TcpListener, DaemonError> {
    let ok = addr
        .parse::<SocketAddr>()
        .map(|a| a.ip().is_loopback())
        .unwrap_or(addr.starts_with("localhost:"));
    if !ok {
        return Err(DaemonError::GroupxNotLoopback(addr.to_string()));
    }
    bind_tcp(addr).await
}

/// Binds a TCP listener the operator asked for (a failure stops the start).
async fn bind_tcp(addr: &str) -> Result<TcpListener, DaemonError> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| DaemonError::Listen(addr.to_string(), e))
}

impl Running {
    /// Waits until shutdown is requested (IPC `shutdown` or a signal), then cleans up.
    pub async fn wait(self) {
        let mut rx = self.daemon.shutdown_rx();
        let d = self.daemon.clone();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {},
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {},
            }
            d.request_shutdown();
        });
        while !*rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                break;
            }
        }
        // Sessions end with shutdown: record what their handoffs established (a frame
        // still queued was never written: failed) while the ledger still takes it.
        let left = self
            .daemon
            .runtime
            .settle_in_flight(SHUTDOWN_SETTLE_BOUND)
            .await;
        if left > 0 {
            tracing::warn!(
                count = left,
                "deliveries still in progress at shutdown; the next start settles them ambiguous"
            );
        }
        // Let in-flight answers leave before the socket goes away.
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.cowchat.save_replay_points();
        self.home.cleanup();
        let _ = std::fs::remove_file(&self.cowchat_socket);
        let _ = std::fs::remove_file(self.home.cowchat_addr_file());
        let _ = std::fs::remove_file(self.home.root.join("daemon").join("groupx.addr.json"));
        tracing::info!("convene daemon stopped");
    }
}
