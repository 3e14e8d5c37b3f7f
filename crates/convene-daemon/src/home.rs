//! The daemon's home directory: the ledger database, blobs, the API key, the endpoint file
//! (`daemon/ccccd.addr.json`, so `CCCC_HOME=<home>` points cccc-sdk at us) and the lock that
//! makes a second daemon on the same home refuse to start (CCCS §12 single writer).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Home layout and the held lock.
pub struct Home {
    /// Root directory.
    pub root: PathBuf,
    _lock: File,
}

/// Why the home could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    /// Another daemon holds the lock.
    #[error("another convene daemon is already running on {0} (lock held)")]
    Locked(PathBuf),
    /// Filesystem error.
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
}

impl Home {
    /// Creates the layout and takes the exclusive lock.
    pub fn open(root: &Path) -> Result<Self, HomeError> {
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |e| HomeError::Io(p, e)
        };
        std::fs::create_dir_all(root.join("daemon")).map_err(io(root))?;
        let lock_path = root.join("daemon").join("convene.lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(HomeError::Locked(root.to_path_buf()))
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(HomeError::Io(lock_path, e)),
        }
        Ok(Self {
            root: root.to_path_buf(),
            _lock: lock,
        })
    }

    /// The ledger database.
    pub fn db(&self) -> PathBuf {
        self.root.join("ledger.sqlite")
    }

    /// The Unix socket.
    pub fn socket(&self) -> PathBuf {
        self.root.join("daemon").join("ccccd.sock")
    }

    /// The endpoint discovery file.
    pub fn addr_file(&self) -> PathBuf {
        self.root.join("daemon").join("ccccd.addr.json")
    }

    /// The API key, generated (mode 0600) at first start.
    pub fn api_key(&self) -> Result<String, HomeError> {
        let p = self.root.join("auth.key");
        if let Ok(k) = std::fs::read_to_string(&p) {
            let k = k.trim().to_string();
            if !k.is_empty() {
                return Ok(k);
            }
        }
        let key = new_key().map_err(|e| HomeError::Io(p.clone(), e))?;
        write_private(&p, key.as_bytes()).map_err(|e| HomeError::Io(p.clone(), e))?;
        Ok(key)
    }

    /// The Cowchat endpoint file (`{unix, tcp, ws}`).
    pub fn cowchat_addr_file(&self) -> PathBuf {
        self.root.join("daemon").join("cowchat.addr.json")
    }

    /// Writes the endpoint file atomically.
    pub fn write_addr(&self, doc: &serde_json::Value) -> Result<(), HomeError> {
        self.write_json(&self.addr_file(), doc)
    }

    /// Writes a JSON file atomically (temporary file, then rename).
    pub fn write_json(&self, p: &Path, doc: &serde_json::Value) -> Result<(), HomeError> {
        let p = p.to_path_buf();
        let tmp = p.with_extension("json.tmp");
        let body = serde_json::to_vec_pretty(doc).unwrap_or_default();
        std::fs::write(&tmp, body)
            .and_then(|_| std::fs::rename(&tmp, &p))
            .map_err(|e| HomeError::Io(p, e))
    }

    /// Removes the socket and endpoint file (at shutdown).
    pub fn cleanup(&self) {
        let _ = std::fs::remove_file(self.addr_file());
        let _ = std::fs::remove_file(self.socket());
    }
}

fn write_private(p: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(p)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// A fresh random API key (`cvn_` + 64 hex of a hash of 32 bytes from the OS CSPRNG).
fn new_key() -> std::io::Result<String> {
    let mut b = [0u8; 32];
    File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))?;
    Ok(format!("cvn_{}", hex::encode(Sha256::digest(b))))
}

/// Replaces the daemon key (`auth.key`) with a fresh one; returns it. Running faces
/// that read the key file per connection (Cowchat) take it at the next `register`.
pub fn rotate_key(root: &Path) -> Result<String, HomeError> {
    let p = root.join("auth.key");
    let key = new_key().map_err(|e| HomeError::Io(p.clone(), e))?;
    write_private(&p, key.as_bytes()).map_err(|e| HomeError::Io(p.clone(), e))?;
    Ok(key)
}

/// True for a name an extra key may have: 1-64 of `A-Z a-z 0-9 - _ .`, not `primary` (the
/// daemon key's principal), and no path separator, so it is always one file in `keys.d`.
pub fn valid_key_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name != "primary"
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Creates an extra API key for principal `name` (`keys.d/<name>.key`); returns it.
pub fn add_key(root: &Path, name: &str) -> Result<String, HomeError> {
    let dir = root.join("keys.d");
    let p = dir.join(format!("{name}.key"));
    if !valid_key_name(name) {
        return Err(HomeError::Io(
            p,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "key names are 1-64 of A-Z a-z 0-9 - _ . (not `primary`)",
            ),
        ));
    }
    std::fs::create_dir_all(&dir).map_err(|e| HomeError::Io(dir.clone(), e))?;
    let key = new_key().map_err(|e| HomeError::Io(p.clone(), e))?;
    write_private(&p, key.as_bytes()).map_err(|e| HomeError::Io(p.clone(), e))?;
    Ok(key)
}

/// Names of the extra API keys.
pub fn key_names(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root.join("keys.d"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            (p.extension()? == "key").then(|| p.file_stem()?.to_str().map(String::from))?
        })
        .collect();
    v.sort();
    v
}

/// Removes an extra API key, and its own Cowchat limits (a later key of the same name
/// starts from the defaults).
pub fn remove_key(root: &Path, name: &str) -> Result<(), HomeError> {
    let p = root.join("keys.d").join(format!("{name}.key"));
    if !valid_key_name(name) {
        return Err(HomeError::Io(
            p,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a key name"),
        ));
    }
    std::fs::remove_file(&p).map_err(|e| HomeError::Io(p, e))?;
    let l = root.join("keys.d").join(format!("{name}.limits.json"));
    match std::fs::remove_file(&l) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(HomeError::Io(l, e)),
    }
}
