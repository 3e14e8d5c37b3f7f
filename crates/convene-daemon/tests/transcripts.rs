//! Data-driven transcripts: a real daemon on a temp home, request lines in, response lines
//! out. In `tests/transcripts/*.t`: `> {json}` is sent on one connection; `< {pattern}` must
//! match the next response line. Patterns match as subsets: every key given must match;
//! `"*"` matches anything; `"$name"` binds a value on first use and must be equal afterwards
//! (and is substituted into later requests).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use serde_json::Value;

mod common;
use common::{matches, substitute};

fn run_file(path: &Path) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let home = tempfile::tempdir().unwrap();
    let running = rt
        .block_on(convene_daemon::start(convene_daemon::Config::new(
            home.path().to_path_buf(),
        )))
        .unwrap();
    let mut s = UnixStream::connect(&running.socket).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut vars = HashMap::new();
    let text = std::fs::read_to_string(path).unwrap();
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        if let Some(req) = line.strip_prefix("> ") {
            let req = substitute(req, &vars);
            s.write_all(req.as_bytes()).unwrap();
            s.write_all(b"\n").unwrap();
        } else if let Some(pat) = line.strip_prefix("< ") {
            let mut got = String::new();
            r.read_line(&mut got).unwrap();
            let got: Value = serde_json::from_str(&got)
                .unwrap_or_else(|e| panic!("{}:{n}: bad response {got:?}: {e}", path.display()));
            let pat = substitute(pat, &vars);
            let pat: Value = serde_json::from_str(&pat)
                .unwrap_or_else(|e| panic!("{}:{n}: bad pattern: {e}", path.display()));
            if let Err(e) = matches(&pat, &got, &mut vars, "$") {
                panic!("{}:{n}: {e}\n  full response: {got}", path.display());
            }
        }
    }
    drop(rt);
}

macro_rules! transcript {
    ($name:ident, $file:literal) => {
        #[test]
        fn $name() {
            run_file(
                &Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/transcripts")
                    .join($file),
            );
        }
    };
}

transcript!(transcript_groups_and_actors, "groups.t");
transcript!(transcript_messaging_cccs_5_6, "messaging.t");
transcript!(transcript_inbox_and_obligations, "inbox.t");
transcript!(transcript_errors_cccs_11, "errors.t");
transcript!(transcript_ledger_reads, "ledger.t");
