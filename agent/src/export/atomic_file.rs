//! Writing a file so that it appears under its final name only once complete.
//!
//! The bytes go to a hidden temporary file in the same directory (same file system, so `rename(2)` is
//! atomic), which is synced, then renamed, and the rename is synced too. A crash, a SIGKILL or a full disk
//! leaves either the complete file or none (at worst a hidden `.<name>.tmp-<random>` that the next start of
//! the directory sink removes), never a truncated or empty profile under the final name.
//!
//! The rename's sync is what makes the file survive a crash, not what makes it whole: a writer of many
//! files at once ([`write_renamed`] each, then one [`sync_dir`]) syncs the directory once for all of
//! them (each sync is a flush of the disk's cache: with 50 processes, the two syncs per profile were a
//! quarter of the agent's CPU).

use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// Marks temporary files (`.<final name>.tmp-<random>`).
pub const TMP_MARK: &str = ".tmp-";

/// Writes `path` atomically with what `fill` writes; returns the metadata of the written file (taken from
/// the file itself: nothing else in the directory is read).
pub fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<Metadata> {
    let meta = write_renamed(path, fill)?;
    sync_dir(parent_dir(path))?;
    Ok(meta)
}

/// Like [`write_atomically`], without syncing the directory: the file is whole under its final name,
/// and survives a crash once [`sync_dir`] has run on its directory.
pub fn write_renamed(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<Metadata> {
    let dir = parent_dir(path);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?
        .to_string_lossy();
    let tmp = dir.join(format!(".{name}{TMP_MARK}{:016x}", rand::random::<u64>()));
    let result = (|| {
        let file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        let mut out = BufWriter::new(file);
        fill(&mut out)?;
        let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
        file.sync_all()?;
        let meta = file.metadata()?;
        drop(file);
        fs::rename(&tmp, path)?;
        Ok(meta)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Makes the renames made in `dir` durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The directory a file is written in.
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_fill_leaves_nothing() {
        let dir = std::env::temp_dir().join(format!(
            "pyagent-atomic-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.pb.gz");
        let err = write_atomically(&path, |out| {
            out.write_all(b"half")?;
            Err(io::Error::other("disk full"))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "disk full");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);

        let meta = write_atomically(&path, |out| out.write_all(b"whole")).unwrap();
        assert_eq!(meta.len(), 5);
        assert_eq!(fs::read(&path).unwrap(), b"whole");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        fs::remove_dir_all(&dir).unwrap();
    }
}
