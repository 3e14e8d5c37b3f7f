//! `cowchat`: a Cowchat-compatible command-line client for Convene (and any Cowchat v2
//! server). See docs/cowchat-cli.md.
//!
//! Exit codes: 0 success; 1 error (connection, server refusal, bad input); 2 `wait
//! --idle-timeout` expired (the resume seq is printed on stdout); 3 a plain `wait --timeout`
//! expired with no message; 64 command-line usage error.

mod cmds;
mod ctx;
mod lantern_cmd;
mod wait;

use std::path::PathBuf;

use clap::{ArgGroup, Args, Parser, Subcommand};

/// Exit code: `wait --idle-timeout` expired.
pub const EXIT_IDLE: i32 = 2;
/// Exit code: a plain `wait --timeout` expired.
pub const EXIT_TIMEOUT: i32 = 3;
/// Exit code: command-line usage error.
pub const EXIT_USAGE: i32 = 64;

#[derive(Parser, Debug)]
#[command(
    name = "cowchat",
    version,
    about = "Cowchat client: rooms, messages, wait, votes, tasks, LANTERN"
)]
pub struct Cli {
    #[command(flatten)]
    pub g: Global,
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// Connection and identity flags (given before the command).
#[derive(Args, Debug, Clone)]
pub struct Global {
    /// Server: unix:/path | tcp host:port | ws://host:port/ws | wss://host[:port]/ws
    /// [default: $COWCHAT_URL, else unix:<convene home>/daemon/cowchat.sock]
    #[arg(long, env = "COWCHAT_URL")]
    pub url: Option<String>,
    /// wss://: also trust the CA certificates of this PEM file (besides Mozilla's roots)
    #[arg(long, env = "SSL_CERT_FILE", value_name = "PATH")]
    pub ca_file: Option<PathBuf>,
    /// API key [default: <convene home>/auth.key if present, else empty]
    #[arg(long, env = "COWCHAT_KEY", hide_env_values = true)]
    pub key: Option<String>,
    /// Display name [default: the agent id, else "cowchat-cli"]
    #[arg(long, env = "COWCHAT_NAME")]
    pub name: Option<String>,
    /// Stable agent id (self-filtering and reconnect are keyed on it)
    #[arg(long, env = "COWCHAT_AGENT_ID")]
    pub agent_id: Option<String>,
    /// End-to-end room secret (encrypted rooms)
    #[arg(long, env = "COWCHAT_ROOM_KEY", hide_env_values = true)]
    pub room_key: Option<String>,
    /// Machine-readable JSON for commands whose default output is text
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Send a message
    Send {
        /// Room name or id
        room: String,
        /// Message text
        text: String,
        /// Id of the message this replies to
        #[arg(long)]
        reply_to: Option<String>,
        /// Mark the end of the conversation (metadata.kind = "end"); peers' `wait --follow` exit
        #[arg(long)]
        end: bool,
        /// Mention an agent id (repeatable; members only)
        #[arg(long = "mention")]
        mentions: Vec<String>,
        /// metadata.kind (for webhook filters)
        #[arg(long)]
        kind: Option<String>,
    },
    /// Post a thinking pulse (persisted, never wakes `wait`)
    Thinking { room: String, text: String },
    /// Rooms
    #[command(subcommand)]
    Rooms(RoomsCmd),
    /// List connected agents, or a room's members
    Agents {
        #[arg(long)]
        room: Option<String>,
    },
    /// Set presence: idle | waiting | working | thinking
    Presence {
        status: String,
        #[arg(long)]
        detail: Option<String>,
        #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100))]
        progress: Option<u8>,
    },
    /// Print history (JSON lines; --text for humans)
    History {
        room: String,
        #[arg(long, default_value_t = 50)]
        limit: u64,
        /// Only messages after this message id
        #[arg(long)]
        since: Option<String>,
        /// Only messages with seq > N (not with --since: the server refuses the pair)
        #[arg(long, conflicts_with = "since")]
        since_seq: Option<u64>,
        /// Keep streaming new messages (reconnects; never exits)
        #[arg(long)]
        follow: bool,
        #[arg(long)]
        text: bool,
    },
    /// Block until a message arrives (see docs for --loop / --follow)
    Wait(WaitArgs),
    /// Watch pushed events (messages, joins, rooms, votes…)
    Monitor {
        #[arg(long)]
        room: Option<String>,
        /// Raw frames
        #[arg(long = "json")]
        raw: bool,
    },
    /// Server, identity and counts
    Status,
    /// Sealed-ballot votes
    #[command(subcommand)]
    Vote(VoteCmd),
    /// Leader elections
    #[command(subcommand)]
    Election(ElectionCmd),
    /// Room tasks: assign, update, list
    #[command(subcommand)]
    Task(TaskCmd),
    /// Webhook subscriptions
    #[command(subcommand)]
    Sub(SubCmd),
    /// Print a random room secret (for COWCHAT_ROOM_KEY)
    Keygen,
    /// LANTERN structured-reasoning overlay
    #[command(subcommand)]
    Lantern(lantern_cmd::LanternCmd),
}

#[derive(Subcommand, Debug)]
pub enum RoomsCmd {
    /// List visible rooms
    List {
        #[arg(long)]
        parent: Option<String>,
    },
    /// Create a room (and join it)
    Create {
        name: String,
        #[arg(long)]
        description: Option<String>,
        /// Parent room (name or id)
        #[arg(long)]
        parent: Option<String>,
        #[arg(long)]
        ephemeral: bool,
        #[arg(long)]
        public: bool,
        #[arg(long)]
        encrypted: bool,
    },
    /// Room details, members, sub-rooms, turn token
    Info { room: String },
    /// Rename a room you created
    Rename { room: String, name: String },
    /// Irreversibly destroy a room you created
    Destroy {
        room: String,
        #[arg(long)]
        yes: bool,
    },
    /// The room's newest message seq (the authoritative cursor)
    Tip { room: String },
}

/// `--since-seq` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinceSeq {
    /// Messages after this seq.
    N(u64),
    /// The room's tip at start.
    Tip,
    /// The cursor file's value if present, else the tip.
    Auto,
}

fn parse_since_seq(s: &str) -> Result<SinceSeq, String> {
    match s {
        "tip" => Ok(SinceSeq::Tip),
        "auto" => Ok(SinceSeq::Auto),
        n => n
            .parse()
            .map(SinceSeq::N)
            .map_err(|_| format!("{n:?}: expected a seq, tip or auto")),
    }
}

#[derive(Args, Debug, Clone)]
pub struct WaitArgs {
    /// Room name or id
    pub room: String,
    /// Catch up after --since-seq, block, return after the first matching message; retries
    /// internal timeouts and disconnects
    #[arg(long = "loop", conflicts_with = "follow")]
    pub loop_: bool,
    /// With --loop: return everything unread that matches (JSON lines)
    #[arg(long, requires = "loop_")]
    pub drain: bool,
    /// Stream forever (reconnects, resumes from the cursor)
    #[arg(long)]
    pub follow: bool,
    /// N | tip | auto
    #[arg(long, value_parser = parse_since_seq)]
    pub since_seq: Option<SinceSeq>,
    /// Ignore messages from these agents (id or name; repeatable, or space-separated)
    #[arg(long, num_args = 1..)]
    pub not_from: Vec<String>,
    /// Only wake for these agents (id or name)
    #[arg(long, num_args = 1..)]
    pub only_from: Vec<String>,
    /// Cursor file, replaced atomically after every processed row
    #[arg(long)]
    pub cursor_file: Option<PathBuf>,
    /// With --loop/--follow: exit 2 (printing the resume seq) after this long without a match
    #[arg(long)]
    pub idle_timeout: Option<u64>,
    /// Plain wait: give up after SECS (0 = 24 h cap; exit 3). With --loop/--follow: the
    /// internal re-check interval (default 30)
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Print peers' thinking pulses to stderr (never wakes)
    #[arg(long)]
    pub show_thinking: bool,
    /// Human-readable output
    #[arg(long)]
    pub text: bool,
}

#[derive(Subcommand, Debug)]
pub enum VoteCmd {
    /// Create a sealed-ballot vote
    Create {
        room: String,
        title: String,
        #[arg(long, num_args = 2.., required = true)]
        options: Vec<String>,
        #[arg(long)]
        description: Option<String>,
        /// Deadline in seconds
        #[arg(long)]
        duration: Option<u64>,
    },
    /// Cast a ballot (0-indexed option)
    Cast { vote_id: String, option: u64 },
    /// Counts (open) or tally (closed)
    Status { vote_id: String },
    /// Recent votes in a room
    History {
        room: String,
        #[arg(long, default_value_t = 20)]
        limit: u64,
    },
}

#[derive(Subcommand, Debug)]
pub enum ElectionCmd {
    /// Start a leader election
    Start { room: String },
    /// Decline candidacy (within the 2 s window)
    Decline { room: String },
    /// Issue a decision (leader only)
    Decide { room: String, text: String },
}

/// The task statuses of the spec.
pub const TASK_STATUSES: [&str; 4] = ["pending", "in_progress", "completed", "blocked"];

#[derive(Subcommand, Debug)]
pub enum TaskCmd {
    /// Assign a new task (status pending) in a room
    Assign {
        /// Room name or id
        room: String,
        #[arg(long)]
        title: String,
        #[arg(long)]
        description: Option<String>,
        /// Agent id of a room member
        #[arg(long)]
        assignee: Option<String>,
    },
    /// Change a task's status, assignee and/or note
    #[command(group(ArgGroup::new("change").required(true).multiple(true).args(["status", "assignee", "note"])))]
    Update {
        /// Room name or id (the task must be one of its tasks)
        room: String,
        task_id: String,
        #[arg(long, value_parser = TASK_STATUSES)]
        status: Option<String>,
        /// New assignee (agent id of a member; "" unassigns)
        #[arg(long)]
        assignee: Option<String>,
        /// A note kept with the task
        #[arg(long)]
        note: Option<String>,
    },
    /// The room's tasks, oldest first
    List {
        /// Room name or id
        room: String,
        #[arg(long, value_parser = TASK_STATUSES)]
        status: Option<String>,
        /// One line per task instead of JSON
        #[arg(long)]
        text: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum SubCmd {
    /// Register a webhook subscription
    Create {
        room: String,
        /// Webhook URL
        #[arg(long)]
        url: String,
        /// Signing secret (whsec_… or plain)
        #[arg(long)]
        secret: String,
        /// metadata.kind values, comma-separated
        #[arg(long, value_delimiter = ',')]
        kinds: Vec<String>,
        #[arg(long)]
        only_from: Option<String>,
        #[arg(long)]
        not_from: Option<String>,
        #[arg(long)]
        exclude_thinking: bool,
        /// tip (default) | auto | N
        #[arg(long, value_parser = parse_since_seq)]
        since_seq: Option<SinceSeq>,
    },
    /// Subscriptions owned by your key
    List {
        #[arg(long)]
        room: Option<String>,
    },
    /// Delete a subscription
    Delete { id: String },
    /// Re-arm a failed subscription
    Enable { id: String },
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cowchat: {e:#}");
            1
        }
    };
    std::process::exit(code);
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    let ctx = ctx::Ctx::new(&cli.g)?;
    match cli.cmd {
        Cmd::Keygen => {
            println!("{}", convene_chat::crypto::keygen()?);
            Ok(0)
        }
        Cmd::Wait(w) => wait::run(&ctx, &w),
        Cmd::Lantern(l) => lantern_cmd::run(&ctx, l),
        other => cmds::run(&ctx, other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("cowchat").chain(args.iter().copied()))
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn wait_flags() {
        let c = parse(&[
            "--agent-id",
            "me",
            "wait",
            "room",
            "--loop",
            "--drain",
            "--not-from",
            "me",
            "x",
            "--since-seq",
            "tip",
            "--idle-timeout",
            "5",
            "--cursor-file",
            "/tmp/c",
        ])
        .unwrap();
        let Cmd::Wait(w) = c.cmd else { panic!() };
        assert!(w.loop_ && w.drain && !w.follow);
        assert_eq!(w.not_from, vec!["me", "x"]);
        assert_eq!(w.since_seq, Some(SinceSeq::Tip));
        assert_eq!(w.idle_timeout, Some(5));
        assert_eq!(c.g.agent_id.as_deref(), Some("me"));
        let Cmd::Wait(w) = parse(&["wait", "r", "--follow", "--since-seq", "12"])
            .unwrap()
            .cmd
        else {
            panic!()
        };
        assert_eq!(w.since_seq, Some(SinceSeq::N(12)));
        assert!(parse(&["wait", "r", "--since-seq", "soon"]).is_err());
        assert!(parse(&["wait", "r", "--loop", "--follow"]).is_err());
        assert!(
            parse(&["wait", "r", "--drain"]).is_err(),
            "--drain needs --loop"
        );
        assert!(
            parse(&["history", "r", "--since", "m1", "--since-seq", "3"]).is_err(),
            "two lower bounds"
        );
        assert!(parse(&["history", "r", "--since-seq", "3"]).is_ok());
    }

    #[test]
    fn send_and_rooms_flags() {
        let c = parse(&["send", "lobby", "bye", "--end", "--reply-to", "m1"]).unwrap();
        let Cmd::Send { end, reply_to, .. } = c.cmd else {
            panic!()
        };
        assert!(end);
        assert_eq!(reply_to.as_deref(), Some("m1"));
        let c = parse(&["rooms", "create", "v", "--encrypted", "--public"]).unwrap();
        assert!(matches!(
            c.cmd,
            Cmd::Rooms(RoomsCmd::Create {
                encrypted: true,
                public: true,
                ephemeral: false,
                ..
            })
        ));
        assert!(parse(&["presence", "working", "--progress", "101"]).is_err());
        assert!(parse(&["vote", "create", "r", "t", "--options", "only-one"]).is_err());
    }

    #[test]
    fn task_flags() {
        assert!(parse(&["task", "assign", "r", "--title", "t", "--assignee", "bob"]).is_ok());
        assert!(
            parse(&["task", "assign", "r"]).is_err(),
            "--title is required"
        );
        assert!(parse(&["task", "update", "r", "t1", "--status", "in_progress"]).is_ok());
        assert!(parse(&["task", "update", "r", "t1", "--status", "done"]).is_err());
        assert!(
            parse(&["task", "update", "r", "t1"]).is_err(),
            "an update changes something"
        );
        assert!(parse(&["task", "update", "r", "t1", "--note", "n"]).is_ok());
        assert!(parse(&["task", "list", "r", "--status", "blocked", "--text"]).is_ok());
        assert!(parse(&["task", "list", "r", "--status", "open"]).is_err());
    }

    #[test]
    fn lantern_rules_at_the_command_line() {
        assert!(parse(&["lantern", "assert", "r", "--claim", "c"]).is_err());
        assert!(parse(&[
            "lantern",
            "assert",
            "r",
            "--claim",
            "c",
            "--falsifiable-by",
            "f"
        ])
        .is_ok());
        assert!(parse(&[
            "lantern",
            "challenge",
            "r",
            "--thread",
            "2",
            "--counter-claim",
            "x",
            "--test",
            "t"
        ])
        .is_err());
        assert!(parse(&[
            "lantern",
            "challenge",
            "r",
            "--thread",
            "2",
            "--counter-claim",
            "x",
            "--confidence",
            "0.6"
        ])
        .is_err());
        assert!(parse(&[
            "lantern",
            "challenge",
            "r",
            "--thread",
            "2",
            "--counter-claim",
            "x",
            "--confidence",
            "0.6",
            "--test",
            "t"
        ])
        .is_ok());
        assert!(parse(&[
            "lantern",
            "resolve",
            "r",
            "--thread",
            "2",
            "--observation",
            "o",
            "--basis",
            "vibes"
        ])
        .is_err());
        assert!(parse(&[
            "lantern",
            "resolve",
            "r",
            "--thread",
            "2",
            "--observation",
            "o",
            "--basis",
            "stale"
        ])
        .is_ok());
        assert!(parse(&[
            "lantern",
            "fuse",
            "r",
            "--thread",
            "2",
            "--synthesis",
            "s",
            "--state-delta",
            "d.json",
            "--outcome",
            "2=maybe"
        ])
        .is_err());
        assert!(parse(&[
            "lantern",
            "fuse",
            "r",
            "--thread",
            "2",
            "--synthesis",
            "s",
            "--state-delta",
            "d.json",
            "--outcome",
            "2=true"
        ])
        .is_ok());
        assert!(parse(&["lantern", "fuse", "r", "--thread", "2", "--synthesis", "s"]).is_err());
    }

    #[test]
    fn usage_errors_are_not_exit_2() {
        // Exit 2 is reserved for the idle timeout; clap's own usage code must not leak.
        let e = parse(&["wait"]).unwrap_err();
        assert!(e.use_stderr());
        assert_ne!(EXIT_USAGE, EXIT_IDLE);
    }
}
