//! Cowchat face transcripts: a real daemon on a temp home, several Cowchat connections on
//! `<home>/daemon/cowchat.sock`. In `tests/transcripts/cowchat*.t`: `A> {json}` sends a frame
//! on connection `A`; `A< {pattern}` must match connection `A`'s next frame. Patterns match
//! as subsets; `"*"` matches anything; `"$name"` binds on first use, must be equal afterwards
//! and is substituted into later frames.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

mod common;
use common::{matches, substitute};

struct Conn {
    w: UnixStream,
    r: BufReader<UnixStream>,
}

fn run_file(path: &Path) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let home = tempfile::tempdir().unwrap();
    let running = rt
        .block_on(convene_daemon::start(convene_daemon::Config::new(
            home.path().to_path_buf(),
        )))
        .unwrap();
    let mut conns: HashMap<String, Conn> = HashMap::new();
    let mut vars = HashMap::new();
    let text = std::fs::read_to_string(path).unwrap();
    // `#! ignore <type>`: frames of that type are skipped when reading (transient pushes
    // whose order against ledger pushes is not fixed, e.g. `turn_changed` of another sender).
    let ignored: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("#! ignore "))
        .map(str::trim)
        .collect();
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        let Some((name, rest)) = line.split_once(['>', '<']) else {
            continue;
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_uppercase()) {
            continue;
        }
        let c = conns.entry(name.to_string()).or_insert_with(|| {
            let w = UnixStream::connect(&running.cowchat_socket).unwrap();
            w.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            Conn {
                r: BufReader::new(w.try_clone().unwrap()),
                w,
            }
        });
        let body = substitute(rest.trim_start(), &vars);
        if line[name.len()..].starts_with('>') {
            c.w.write_all(body.as_bytes()).unwrap();
            c.w.write_all(b"\n").unwrap();
        } else {
            let got = loop {
                let mut got = String::new();
                c.r.read_line(&mut got)
                    .unwrap_or_else(|e| panic!("{}:{n}: no frame: {e}", path.display()));
                let got: Value = serde_json::from_str(&got)
                    .unwrap_or_else(|e| panic!("{}:{n}: bad frame {got:?}: {e}", path.display()));
                if !ignored.contains(&got["type"].as_str().unwrap_or_default()) {
                    break got;
                }
            };
            let pat: Value = serde_json::from_str(&body)
                .unwrap_or_else(|e| panic!("{}:{n}: bad pattern: {e}", path.display()));
            if let Err(e) = matches(&pat, &got, &mut vars, "$") {
                panic!("{}:{n}: {e}\n  full frame: {got}", path.display());
            }
        }
    }
    drop(rt);
}

#[test]
fn transcript_cowchat_rooms() {
    run_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/transcripts/cowchat_rooms.t"));
}

#[test]
fn transcript_cowchat_v2() {
    run_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/transcripts/cowchat.t"));
}
