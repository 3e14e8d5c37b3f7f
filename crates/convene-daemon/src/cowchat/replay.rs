//! Replay points across a daemon restart: for every agent (connected or inside its
//! reconnect window), how far each of its rooms was pushed to a socket. The reaper saves
//! them when they change and the daemon saves them once more when it stops, so an agent
//! reconnecting after a restart (graceful or kill -9) replays from there instead of from the
//! head at startup. A saved point can only be older than the truth (a replay may repeat a
//! message the agent already had; it never skips one).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// agent id → room id → last `seq` written to one of its sockets.
pub(super) type Points = HashMap<String, HashMap<String, u64>>;

fn path(home: &Path) -> PathBuf {
    home.join("cowchat").join("replay.json")
}

/// Writes the points atomically (a crash leaves the old file or the new one).
pub(super) fn save(home: &Path, points: &Points) -> std::io::Result<()> {
    let p = path(home);
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = p.with_extension("json.tmp");
    let body = serde_json::to_vec(points).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, &p)
}

/// The saved points (empty when none were saved or the file is unreadable: then the head
/// at startup is used, as before this file existed).
pub(super) fn load(home: &Path) -> Points {
    match std::fs::read(path(home)) {
        Ok(b) => serde_json::from_slice(&b).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "unreadable cowchat replay points; replaying from the head");
            Points::new()
        }),
        Err(_) => Points::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_survive_a_save_and_load() {
        let home = tempfile::tempdir().unwrap();
        assert!(load(home.path()).is_empty());
        let mut p = Points::new();
        p.entry("a".into()).or_default().insert("g_1".into(), 42);
        save(home.path(), &p).unwrap();
        assert_eq!(load(home.path()), p);
        std::fs::write(path(home.path()), b"{not json").unwrap();
        assert!(load(home.path()).is_empty());
    }
}
