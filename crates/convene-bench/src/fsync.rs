//! 1. The machine's own fsync rate, measured beside the daemons on the same filesystem.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::conn::Res;
use crate::stats::Acc;

/// Flushes dirty data of the filesystem holding `dir` (`sync -f`), so that a probe or a run
/// does not pay for writeback left over by the previous phase (e.g. a 100k-event database
/// just written and closed): without it the fsync probe swings between ~0.2 and ~4 ms here.
pub fn settle_disk(dir: &Path) {
    let ok = std::process::Command::new("sync")
        .arg("-f")
        .arg(dir)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        let _ = std::process::Command::new("sync").status();
    }
}

/// Appends 256 bytes + fdatasync to a file in the temp dir (same filesystem as the homes).
/// Also measures the same 256-byte write + fdatasync as an overwrite inside a preallocated
/// file (what a reused WAL does): on ext4 an append changes the file size and needs a
/// journal commit, an overwrite does not, and the two can differ by 10x on a busy machine.
pub struct FsyncProbe {
    pub file: File,
    pub path: PathBuf,
    pub acc: Acc,
    pub over: File,
    pub over_path: PathBuf,
    pub over_off: u64,
    pub over_acc: Acc,
}

/// Size of the preallocated overwrite probe file.
const OVER_SIZE: u64 = 1 << 20;

impl FsyncProbe {
    /// Creates both probe files and runs a short warm-up that is not counted.
    pub fn open(dir: &Path) -> Res<Self> {
        let path = dir.join("fsync-probe.bin");
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| format!("open {}: {e}", path.display()))?;
        let over_path = dir.join("fsync-probe-prealloc.bin");
        let mut over = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&over_path)
            .map_err(|e| format!("open {}: {e}", over_path.display()))?;
        over.write_all(&vec![0u8; OVER_SIZE as usize])
            .and_then(|_| over.sync_all())
            .map_err(|e| e.to_string())?;
        let mut p = FsyncProbe {
            file,
            path,
            acc: Acc::default(),
            over,
            over_path,
            over_off: 0,
            over_acc: Acc::default(),
        };
        // Warm-up: the first appends allocate the file's first blocks.
        p.run(20)?;
        p.acc = Acc::default();
        p.over_acc = Acc::default();
        Ok(p)
    }

    /// Runs `n` appends then `n` overwrites, each followed by fdatasync.
    pub fn run(&mut self, n: usize) -> Res<()> {
        use std::os::unix::fs::FileExt;
        let block = [b'x'; 256];
        let mut lats = Vec::with_capacity(n);
        let start = Instant::now();
        for _ in 0..n {
            let t = Instant::now();
            self.file.write_all(&block).map_err(|e| e.to_string())?;
            self.file.sync_data().map_err(|e| e.to_string())?;
            lats.push(t.elapsed());
        }
        self.acc
            .add(lats, start.elapsed(), &Vec::new(), &Vec::new());
        let mut lats = Vec::with_capacity(n);
        let start = Instant::now();
        for _ in 0..n {
            let t = Instant::now();
            self.over
                .write_all_at(&block, self.over_off)
                .map_err(|e| e.to_string())?;
            self.over.sync_data().map_err(|e| e.to_string())?;
            self.over_off = (self.over_off + 256) % OVER_SIZE;
            lats.push(t.elapsed());
        }
        self.over_acc
            .add(lats, start.elapsed(), &Vec::new(), &Vec::new());
        Ok(())
    }
}

impl Drop for FsyncProbe {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(&self.over_path);
    }
}
