//! Cursor files for `wait --cursor-file`: one decimal seq, replaced atomically (write a
//! temporary file in the same directory, fsync it, rename over the target), so a reader or a
//! crash never sees a torn or empty cursor.

use std::io::Write;
use std::path::Path;

use crate::Result;

/// Reads a cursor file; `None` when it does not exist or holds no number.
pub fn read(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Atomically replaces the cursor file with `seq`.
pub fn write(path: &Path, seq: u64) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "cursor".into());
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    {
        let mut f = std::fs::File::create(&tmp)?;
        writeln!(f, "{seq}")?;
        f.sync_all()?;
    }
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_replace_leaves_no_temp_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.cursor");
        assert_eq!(read(&p), None);
        write(&p, 7).unwrap();
        assert_eq!(read(&p), Some(7));
        write(&p, 12).unwrap();
        assert_eq!(read(&p), Some(12));
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("c.cursor")]);
    }

    #[test]
    fn replacement_is_a_new_inode_so_readers_never_see_partial_content() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c");
        write(&p, 1).unwrap();
        let before = std::fs::metadata(&p).unwrap().ino();
        // A reader holding the old file keeps reading the old, complete value.
        let old = std::fs::File::open(&p).unwrap();
        write(&p, 123456789).unwrap();
        assert_ne!(std::fs::metadata(&p).unwrap().ino(), before);
        let mut s = String::new();
        std::io::Read::read_to_string(&mut &old, &mut s).unwrap();
        assert_eq!(s.trim(), "1");
        assert_eq!(read(&p), Some(123456789));
    }

    #[test]
    fn garbage_reads_as_none() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c");
        std::fs::write(&p, "nope").unwrap();
        assert_eq!(read(&p), None);
    }
}
