//! `convene auth …`: the daemon key, extra per-principal keys, and a key's own Cowchat
//! limits (`<home>/keys.d/<principal>.limits.json`, read by the daemon at each `register`).

use std::path::Path;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use convene_cowchat::{MAX_CONTENT_BYTES, MAX_METADATA_BYTES};
use convene_daemon::cowchat::limits::{self, KeyLimits};
use convene_daemon::home as h;
use serde_json::{json, Value};

/// `convene auth …`.
#[derive(Subcommand)]
pub enum AuthCmd {
    /// Print the daemon key (principal `primary`).
    ShowKey,
    /// Replace the daemon key; clients must reconnect with the new one.
    RotateKey,
    /// Create an extra key for principal NAME and print it.
    AddKey {
        /// Principal name (1-64 of A-Z a-z 0-9 - _ .).
        name: String,
    },
    /// List the extra keys' principals.
    ListKeys,
    /// Remove an extra key (and its own limits).
    RemoveKey {
        /// Principal name.
        name: String,
    },
    /// Give principal NAME (`primary` or an extra key) its own Cowchat limits. Only the
    /// flags given change; the rest keep their value (unset = the `serve` default). A running
    /// daemon applies them at the key's next `register`.
    SetLimits {
        /// Principal name.
        name: String,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Print principal NAME's own Cowchat limits (unset = the `serve` default).
    ShowLimits {
        /// Principal name.
        name: String,
    },
    /// Remove principal NAME's own Cowchat limits (back to the `serve` defaults).
    ClearLimits {
        /// Principal name.
        name: String,
    },
}

/// The limits `set-limits` takes.
#[derive(clap::Args)]
pub struct LimitArgs {
    /// Agents connected at once.
    #[arg(long)]
    agents: Option<usize>,
    /// Rooms owned at once.
    #[arg(long)]
    rooms: Option<usize>,
    /// Sustained messages (send, thinking, decision) per second.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    messages_per_sec: Option<u32>,
    /// Messages allowed in a burst above the sustained rate.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    message_burst: Option<u32>,
    /// Largest message `content` in bytes (1 to 262144).
    #[arg(long, value_parser = content_bytes)]
    max_content_bytes: Option<usize>,
    /// Largest serialized message `metadata` in bytes (1 to 16384).
    #[arg(long, value_parser = metadata_bytes)]
    max_metadata_bytes: Option<usize>,
}

fn bytes_in(s: &str, max: usize) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    if (1..=max).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "{n} is not in 1..={max} (the Cowchat protocol's hard bound)"
        ))
    }
}

/// Parses a content size limit (1 to the wire hard bound).
pub fn content_bytes(s: &str) -> Result<usize, String> {
    bytes_in(s, MAX_CONTENT_BYTES)
}

/// Parses a metadata size limit (1 to the wire hard bound).
pub fn metadata_bytes(s: &str) -> Result<usize, String> {
    bytes_in(s, MAX_METADATA_BYTES)
}

/// Refuses a name that is neither `primary` nor an existing extra key: limits for a key
/// that does not exist would be silently inherited by a later key of that name.
fn known_principal(home: &Path, name: &str) -> Result<()> {
    if name == "primary" {
        return Ok(());
    }
    if !h::valid_key_name(name) || !home.join("keys.d").join(format!("{name}.key")).exists() {
        bail!(
            "no API key named {name:?} (see `convene auth list-keys`; the daemon key is `primary`)"
        );
    }
    Ok(())
}

fn read(home: &Path, name: &str) -> Result<KeyLimits> {
    limits::read(home, name).with_context(|| {
        format!("the limits of {name} are invalid (fix the file or run `convene auth clear-limits {name}`)")
    })
}

fn show(home: &Path, name: &str, json: bool, k: &KeyLimits) -> Result<()> {
    let file = limits::path(home, name)?;
    let fields: [(&str, Option<u64>); 6] = [
        ("agents_per_key", k.agents_per_key.map(|v| v as u64)),
        ("rooms_per_key", k.rooms_per_key.map(|v| v as u64)),
        ("messages_per_sec", k.messages_per_sec.map(u64::from)),
        ("message_burst", k.message_burst.map(u64::from)),
        ("max_content_bytes", k.max_content_bytes.map(|v| v as u64)),
        ("max_metadata_bytes", k.max_metadata_bytes.map(|v| v as u64)),
    ];
    if json {
        let l: serde_json::Map<String, Value> = fields
            .iter()
            .map(|(f, v)| (f.to_string(), json!(v)))
            .collect();
        let doc = json!({"principal": name, "file": file, "limits": l});
        println!("{doc}");
        return Ok(());
    }
    println!("principal           {name}");
    println!("file                {}", file.display());
    for (f, v) in fields {
        match v {
            Some(v) => println!("{f:<20}{v}"),
            None => println!("{f:<20}(serve default)"),
        }
    }
    Ok(())
}

/// Runs one `convene auth` command.
pub fn run(home: &Path, json: bool, c: AuthCmd) -> Result<()> {
    match c {
        AuthCmd::ShowKey => println!("{}", std::fs::read_to_string(home.join("auth.key"))?.trim()),
        AuthCmd::RotateKey => println!("{}", h::rotate_key(home)?),
        AuthCmd::AddKey { name } => println!("{}", h::add_key(home, &name)?),
        AuthCmd::ListKeys => {
            println!("primary");
            for n in h::key_names(home) {
                println!("{n}");
            }
        }
        AuthCmd::RemoveKey { name } => h::remove_key(home, &name)?,
        AuthCmd::SetLimits { name, limits: l } => {
            known_principal(home, &name)?;
            let given = KeyLimits {
                agents_per_key: l.agents,
                rooms_per_key: l.rooms,
                messages_per_sec: l.messages_per_sec,
                message_burst: l.message_burst,
                max_content_bytes: l.max_content_bytes,
                max_metadata_bytes: l.max_metadata_bytes,
            };
            if given.is_empty() {
                bail!("give at least one limit (see --help), or use `convene auth clear-limits {name}`");
            }
            let mut k = read(home, &name)?;
            k.merge(&given);
            limits::write(home, &name, &k)?;
            show(home, &name, json, &k)?;
        }
        AuthCmd::ShowLimits { name } => {
            known_principal(home, &name)?;
            let k = read(home, &name)?;
            show(home, &name, json, &k)?;
        }
        AuthCmd::ClearLimits { name } => {
            known_principal(home, &name)?;
            limits::remove(home, &name)?;
        }
    }
    Ok(())
}
