//! `convene`: run the daemon (`convene serve`) or talk to it.

mod auth_cmds;
mod client_cmds;
mod ledger_io;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use clap::{Parser, Subcommand};

/// Convene: a durable collaboration ledger for agents and their human.
#[derive(Parser)]
#[command(name = "convene", version, about)]
struct Cli {
    /// Home directory (default: $CONVENE_HOME or ~/.convene).
    #[arg(long, global = true, env = "CONVENE_HOME")]
    home: Option<PathBuf>,
    /// Print machine-readable JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the daemon in the foreground.
    Serve {
        /// Also listen on TCP (e.g. 127.0.0.1:9765). Non-loopback peers must send args.api_key.
        #[arg(long)]
        tcp: Option<String>,
        /// Require the API key from every TCP peer, loopback included.
        #[arg(long)]
        require_key: bool,
        /// Stream heartbeat interval in milliseconds.
        #[arg(long, default_value_t = 30_000)]
        heartbeat_ms: u64,
        /// Session runtime transport: delivery frames one attached `runtime_attach`
        /// connection may have waiting; a handoff past that is recorded `failed`.
        #[arg(long, default_value_t = 1024,
              value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        session_queue: u32,
        /// Session runtime transport: how long one handoff may take (queue wait plus write)
        /// before its result is settled on what can be proven (unstarted = failed, started
        /// = ambiguous); a consumer that stops reading for this long is disconnected.
        #[arg(long, default_value_t = 10_000)]
        session_timeout_ms: u64,
        /// Serve Cowchat v2 on this TCP address (default: 127.0.0.1:9229 when that port is
        /// free). Non-loopback peers must register with the API key.
        #[arg(long)]
        cowchat_tcp: Option<String>,
        /// Do not serve Cowchat on TCP at all (the Unix socket stays).
        #[arg(long, conflicts_with = "cowchat_tcp")]
        no_cowchat_tcp: bool,
        /// Also serve Cowchat v2 over WebSocket at ws://ADDR/ws (e.g. 127.0.0.1:9230).
        /// Non-loopback peers and browser pages (requests with Origin) must register with
        /// the API key.
        #[arg(long)]
        cowchat_ws: Option<String>,
        /// Serve GroupX (REST + SSE + the web page) on this loopback address (default:
        /// 127.0.0.1:7390 when that port is free). Agents come from --groupx-config.
        #[arg(long)]
        groupx: Option<String>,
        /// Do not serve GroupX at all.
        #[arg(long, conflicts_with = "groupx")]
        no_groupx: bool,
        /// The GroupX roster (default: <home>/groupx.json; see docs/groupx.md).
        #[arg(long)]
        groupx_config: Option<PathBuf>,
        #[command(flatten)]
        cowchat: CowchatLimits,
        /// Cowchat webhook delivery attempts in flight at once, across all subscriptions
        /// (each subscription still delivers one message at a time, in order).
        #[arg(long, default_value_t = 16,
              value_parser = clap::value_parser!(u16).range(1..=4096))]
        cowchat_webhook_concurrency: u16,
        /// Of those, at most this many to one host (host and port as written in the URL),
        /// so one slow receiver cannot take every slot.
        #[arg(long, default_value_t = 4,
              value_parser = clap::value_parser!(u16).range(1..=4096))]
        cowchat_webhook_per_host: u16,
        /// TEST ONLY: let Cowchat webhooks reach loopback and private addresses (disables
        /// the SSRF guard). Never use on a daemon reachable by untrusted clients.
        #[arg(long)]
        cowchat_webhooks_allow_local: bool,
        /// TEST ONLY: the webhook retry schedule's unit in milliseconds (retries at
        /// +1, +4, +16, +64, +256 units; default 1000).
        #[arg(long, env = "CONVENE_WEBHOOK_RETRY_SCALE_MS", hide = true)]
        cowchat_webhooks_retry_unit_ms: Option<u64>,
        /// TEST ONLY: also trust the PEM CA certificates in this file for https webhooks.
        #[arg(long, hide = true)]
        cowchat_webhooks_ca_file: Option<PathBuf>,
        /// TEST ONLY: one webhook attempt's deadline in milliseconds (default 10000).
        #[arg(long, hide = true)]
        cowchat_webhooks_timeout_ms: Option<u64>,
    },
    /// API keys: the daemon key and extra per-principal keys (Cowchat visibility and limits).
    #[command(subcommand)]
    Auth(auth_cmds::AuthCmd),
    /// Daemon status.
    Status,
    /// Groups.
    #[command(subcommand)]
    Group(client_cmds::GroupCmd),
    /// Actors of a group.
    #[command(subcommand)]
    Actor(client_cmds::ActorCmd),
    /// Send a message.
    Send(client_cmds::SendArgs),
    /// Reply to a message.
    Reply(client_cmds::ReplyArgs),
    /// An actor's Mail inbox.
    Inbox(client_cmds::InboxArgs),
    /// Print a group's ledger; `--follow` keeps streaming.
    Tail(client_cmds::TailArgs),
    /// Export or import a ledger as NDJSON.
    #[command(subcommand)]
    Ledger(ledger_io::LedgerCmd),
    /// Print the API key (for remote TCP clients).
    ShowKey,
    /// CCS evidence receipts: keygen, issue, verify, chain, manifest, export (see docs/evidence.md).
    #[command(disable_help_flag = true)]
    Evidence {
        /// Arguments for the evidence CLI.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The out-of-process CCS verifier (`verifier serve`).
    #[command(disable_help_flag = true)]
    Verifier {
        /// Arguments for the verifier.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Per-key limits of the Cowchat face: the defaults of every key (`convene auth set-limits`
/// gives one key its own).
#[derive(clap::Args)]
struct CowchatLimits {
    /// Agents one API key may have connected at once.
    #[arg(long, default_value_t = 256)]
    cowchat_agents_per_key: usize,
    /// Rooms one API key may own.
    #[arg(long, default_value_t = 1000)]
    cowchat_rooms_per_key: usize,
    /// Sustained messages per second per API key.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..))]
    cowchat_messages_per_sec: u32,
    /// Message burst per API key.
    #[arg(long, default_value_t = 40_000, value_parser = clap::value_parser!(u32).range(1..))]
    cowchat_message_burst: u32,
    /// Largest message `content` in bytes (at most 262144, the protocol's hard bound).
    #[arg(long, default_value_t = convene_cowchat::MAX_CONTENT_BYTES,
          value_parser = auth_cmds::content_bytes)]
    cowchat_max_content_bytes: usize,
    /// Largest serialized message `metadata` in bytes (at most 16384, the hard bound).
    #[arg(long, default_value_t = convene_cowchat::MAX_METADATA_BYTES,
          value_parser = auth_cmds::metadata_bytes)]
    cowchat_max_metadata_bytes: usize,
    /// Seconds a disconnected agent keeps its rooms and replay cursors (spec: 120).
    #[arg(long, default_value_t = 120)]
    cowchat_reconnect_secs: u64,
}

fn default_home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
        .join(".convene")
}

/// Turns transparent huge pages off for this process, also where the host's THP mode is
/// `always`: the allocator's arena is reserved in large aligned ranges, and with THP the first
/// touch of each 2 MiB range makes all of it resident (most of a fresh daemon's RSS).
fn disable_thp() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments only and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

fn main() {
    // Errors print as one line with their causes (`{:#}`): the `Debug` form a `Result` from
    // `main` would print adds a stack backtrace whenever RUST_BACKTRACE is set.
    if let Err(e) = real_main() {
        eprintln!("Error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    disable_thp();
    // `convene evidence …` and `convene verifier …` belong to the CCS evidence crate's CLI.
    let argv: Vec<String> = std::env::args().collect();
    if matches!(
        argv.get(1).map(String::as_str),
        Some("evidence" | "verifier")
    ) {
        std::process::exit(convene_evidence::cli::run(argv[1..].to_vec()));
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CONVENE_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let home = cli.home.clone().unwrap_or_else(default_home);
    match cli.cmd {
        Cmd::Serve {
            tcp,
            require_key,
            heartbeat_ms,
            session_queue,
            session_timeout_ms,
            cowchat_tcp,
            no_cowchat_tcp,
            cowchat_ws,
            groupx,
            no_groupx,
            groupx_config,
            cowchat: l,
            cowchat_webhook_concurrency,
            cowchat_webhook_per_host,
            cowchat_webhooks_allow_local,
            cowchat_webhooks_retry_unit_ms,
            cowchat_webhooks_ca_file,
            cowchat_webhooks_timeout_ms,
        } => {
            let mut cfg = convene_daemon::Config::new(home);
            cfg.cowchat_limits = convene_daemon::cowchat::Limits {
                agents_per_key: l.cowchat_agents_per_key,
                rooms_per_key: l.cowchat_rooms_per_key,
                messages_per_sec: l.cowchat_messages_per_sec,
                message_burst: l.cowchat_message_burst,
                max_content_bytes: l.cowchat_max_content_bytes,
                max_metadata_bytes: l.cowchat_max_metadata_bytes,
            };
            cfg.cowchat_reconnect = Duration::from_secs(l.cowchat_reconnect_secs);
            cfg.tcp = tcp;
            cfg.tcp_require_key = require_key;
            cfg.cowchat_tcp = cowchat_tcp;
            if !no_cowchat_tcp {
                cfg.cowchat_tcp_default = Some(convene_daemon::cowchat::DEFAULT_TCP.to_string());
            }
            cfg.cowchat_ws = cowchat_ws;
            cfg.groupx = groupx;
            if !no_groupx {
                cfg.groupx_default = Some(convene_daemon::groupx::DEFAULT_ADDR.to_string());
            }
            cfg.groupx_config = groupx_config;
            cfg.cowchat_webhooks.allow_local = cowchat_webhooks_allow_local;
            cfg.cowchat_webhooks.concurrency = cowchat_webhook_concurrency.into();
            cfg.cowchat_webhooks.per_host = cowchat_webhook_per_host.into();
            cfg.cowchat_webhooks.extra_ca = cowchat_webhooks_ca_file;
            if let Some(ms) = cowchat_webhooks_timeout_ms {
                cfg.cowchat_webhooks.timeout = Duration::from_millis(ms.max(1));
            }
            if let Some(ms) = cowchat_webhooks_retry_unit_ms {
                cfg.cowchat_webhooks.retry_unit = Duration::from_millis(ms.max(1));
            }
            cfg.heartbeat = Duration::from_millis(heartbeat_ms.max(10));
            cfg.session_queue = session_queue as usize;
            cfg.session_timeout = Duration::from_millis(session_timeout_ms.max(1));
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let running = convene_daemon::start(cfg).await?;
                running.wait().await;
                anyhow::Ok(())
            })
        }
        Cmd::ShowKey => {
            let key = std::fs::read_to_string(home.join("auth.key"))?;
            println!("{}", key.trim());
            Ok(())
        }
        Cmd::Ledger(c) => ledger_io::run(&home, cli.json, c),
        Cmd::Auth(c) => auth_cmds::run(&home, cli.json, c),
        Cmd::Evidence { args } => std::process::exit(convene_evidence::cli::run(
            [vec!["evidence".to_string()], args].concat(),
        )),
        Cmd::Verifier { args } => std::process::exit(convene_evidence::cli::run(
            [vec!["verifier".to_string()], args].concat(),
        )),
        other => client_cmds::run(&home, cli.json, other_into(other)),
    }
}

fn other_into(c: Cmd) -> client_cmds::Cmd {
    match c {
        Cmd::Status => client_cmds::Cmd::Status,
        Cmd::Group(g) => client_cmds::Cmd::Group(g),
        Cmd::Actor(a) => client_cmds::Cmd::Actor(a),
        Cmd::Send(s) => client_cmds::Cmd::Send(s),
        Cmd::Reply(r) => client_cmds::Cmd::Reply(r),
        Cmd::Inbox(i) => client_cmds::Cmd::Inbox(i),
        Cmd::Tail(t) => client_cmds::Cmd::Tail(t),
        Cmd::Serve { .. }
        | Cmd::Ledger(_)
        | Cmd::ShowKey
        | Cmd::Auth(_)
        | Cmd::Evidence { .. }
        | Cmd::Verifier { .. } => client_cmds::Cmd::Status,
    }
}
