//! The agents' native session ids (`<home>/groupx/native-sessions.json`): broker-internal
//! (§3.1: never in a public event), kept so a restarted broker can `session/load` each agent's
//! own session instead of starting it from nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn file(home: &Path) -> PathBuf {
    home.join("groupx").join("native-sessions.json")
}

fn read(home: &Path) -> BTreeMap<String, String> {
    std::fs::read(file(home))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// The agent's last native session id.
pub fn get(home: &Path, agent: &str) -> Option<String> {
    read(home).remove(agent)
}

/// Serializes [`put`]: lanes start their sessions concurrently, and two read-modify-writes of
/// the one file (through one temporary name) lost an agent's entry or tore the file.
static WRITE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Records the agent's native session id (write-then-rename; a failure only costs a resume).
pub fn put(home: &Path, agent: &str, session_id: &str) {
    let _one_writer = WRITE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut all = read(home);
    if all.get(agent).map(String::as_str) == Some(session_id) {
        return;
    }
    all.insert(agent.to_string(), session_id.to_string());
    let p = file(home);
    let tmp = p.with_extension("json.tmp");
    let res = std::fs::create_dir_all(p.parent().unwrap_or(home))
        .and_then(|_| std::fs::write(&tmp, serde_json::to_vec(&all).unwrap_or_default()))
        .and_then(|_| std::fs::rename(&tmp, &p));
    if let Err(e) = res {
        tracing::warn!(error = %e, "groupx: could not record a native session id");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_round_trip_per_agent() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(super::get(d.path(), "a"), None);
        super::put(d.path(), "a", "s1");
        super::put(d.path(), "b", "s2");
        super::put(d.path(), "a", "s3");
        assert_eq!(super::get(d.path(), "a").as_deref(), Some("s3"));
        assert_eq!(super::get(d.path(), "b").as_deref(), Some("s2"));
    }
}
