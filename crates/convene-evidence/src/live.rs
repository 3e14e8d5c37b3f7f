//! A verifier that follows its key file: a §7.3 rotation step (`evidence rotate announce |
//! cutover | retire`) run beside a long-lived process (`verifier serve`, the daemon's tool
//! gate) takes effect without a restart.

use crate::issuer::Verifier;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

/// How often, at most, the key file is looked at (on use; there is no thread).
pub const KEY_FILE_POLL: Duration = Duration::from_millis(250);

/// One version of a key file. A rotation step writes a new file and renames it over the
/// old one, so the inode changes even within one mtime tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileVersion(SystemTime, u64, u64);

/// The version of the file at `p` now (None if it cannot be read).
pub fn file_version(p: &Path) -> Option<FileVersion> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some(FileVersion(m.modified().ok()?, m.len(), m.ino()))
}

/// Builds the verifier again from the changed key file; `None` when it does not load (the
/// builder reports why), and the current verifier keeps serving.
pub type Rebuild = Box<dyn Fn() -> Option<Verifier> + Send + Sync>;

struct Watch {
    path: PathBuf,
    /// When the file was last looked at, and the version the current verifier was built from.
    seen: Mutex<(Instant, Option<FileVersion>)>,
    rebuild: Rebuild,
}

/// The verifier for the next request, replaced whole when its key file changes.
pub struct LiveVerifier {
    current: RwLock<Arc<Verifier>>,
    watch: Option<Watch>,
}

impl LiveVerifier {
    /// Always `v` (no key file to follow).
    pub fn new(v: Verifier) -> Self {
        Self {
            current: RwLock::new(Arc::new(v)),
            watch: None,
        }
    }

    /// `v`, built from `key_file` as it is now; when the file changes, `rebuild` makes the
    /// next one. A file that does not load keeps `v` serving: a half-written or broken key
    /// file never stops issuance.
    pub fn watching(v: Verifier, key_file: &Path, rebuild: Rebuild) -> Self {
        Self::watching_since(v, key_file, file_version(key_file), rebuild)
    }

    /// As [`LiveVerifier::watching`], for a `v` built from an earlier version of the file
    /// (read before `v` was built): a change in between is picked up at the first use.
    pub fn watching_since(
        v: Verifier,
        key_file: &Path,
        built_from: Option<FileVersion>,
        rebuild: Rebuild,
    ) -> Self {
        Self {
            current: RwLock::new(Arc::new(v)),
            watch: Some(Watch {
                path: key_file.to_path_buf(),
                // Looked at on the first use.
                seen: Mutex::new((
                    Instant::now()
                        .checked_sub(KEY_FILE_POLL)
                        .unwrap_or_else(Instant::now),
                    built_from,
                )),
                rebuild,
            }),
        }
    }

    /// The verifier for the next request (requests in flight keep the one they started with).
    pub fn get(&self) -> Arc<Verifier> {
        if let Some(w) = &self.watch {
            self.follow(w);
        }
        match self.current.read() {
            Ok(g) => g.clone(),
            // A panic elsewhere poisoned the lock; the Arc inside is still a whole verifier.
            Err(p) => p.into_inner().clone(),
        }
    }

    fn follow(&self, w: &Watch) {
        // One caller looks at the file; the others go on with the current verifier.
        let Ok(mut seen) = w.seen.try_lock() else {
            return;
        };
        if seen.0.elapsed() < KEY_FILE_POLL {
            return;
        }
        seen.0 = Instant::now();
        let now = file_version(&w.path);
        if now.is_none() || now == seen.1 {
            return;
        }
        seen.1 = now;
        if let Some(v) = (w.rebuild)() {
            self.replace(v);
        }
    }

    /// Answer with `v` from now on; it continues the current verifier's sequence and open
    /// state ([`Verifier::continue_from`]).
    pub fn replace(&self, v: Verifier) {
        let mut g = match self.current.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let next = Arc::new(v.continue_from(&g));
        *g = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::KeyMaterial;
    use crate::rules::default_rules;
    use crate::VerifierSettings;
    use serde_json::json;

    fn verifier(k: &KeyMaterial) -> Verifier {
        Verifier::new(VerifierSettings::default(), k.clone(), default_rules()).unwrap()
    }

    fn issue(l: &LiveVerifier, trace: &str) -> crate::Receipt {
        let i = json!({"intake_version":"1.3","agent_id":"a","tool":"search_web",
            "params":{"q":"x"},"timestamp":1.0,"trace_id":trace});
        l.get().issue(&i).unwrap().receipt
    }

    fn write_key(p: &Path, k: &KeyMaterial) {
        let tmp = p.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(&k.to_file()).unwrap()).unwrap();
        std::fs::rename(tmp, p).unwrap();
    }

    #[test]
    fn ccs_7_3_a_changed_key_file_is_followed_and_the_sequence_goes_on() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("key.json");
        let (a, b) = (KeyMaterial::generate(None), KeyMaterial::generate(None));
        write_key(&path, &a);
        let p2 = path.clone();
        let rebuild: Rebuild = Box::new(move || {
            let text = std::fs::read_to_string(&p2).ok()?;
            let f = serde_json::from_str(&text).ok()?;
            Some(verifier(&KeyMaterial::from_file(&f).ok()?))
        });
        let live = LiveVerifier::watching(verifier(&a), &path, rebuild);
        let r1 = issue(&live, "t1");
        assert!(r1.verify_signature(&a.public()));

        write_key(&path, &b);
        std::thread::sleep(KEY_FILE_POLL);
        let r2 = issue(&live, "t2");
        assert!(r2.verify_signature(&b.public()) && !r2.verify_signature(&a.public()));
        assert!(r2.sequence > r1.sequence, "the sequence never goes back");

        // A file that does not load: the current key keeps signing.
        std::fs::write(&path, "{broken").unwrap();
        std::thread::sleep(KEY_FILE_POLL);
        let r3 = issue(&live, "t3");
        assert!(r3.verify_signature(&b.public()));
        assert!(r3.sequence > r2.sequence);
    }

    #[test]
    fn a_file_changed_before_the_first_use_is_picked_up_then() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("key.json");
        let (a, b) = (KeyMaterial::generate(None), KeyMaterial::generate(None));
        write_key(&path, &a);
        let read_at_start = file_version(&path);
        write_key(&path, &b);
        let b2 = b.clone();
        let live = LiveVerifier::watching_since(
            verifier(&a),
            &path,
            read_at_start,
            Box::new(move || Some(verifier(&b2))),
        );
        assert!(issue(&live, "t1").verify_signature(&b.public()));
    }
}
