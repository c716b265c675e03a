//! The directory sink: one gzipped pprof file per profile, written atomically, within bounds.
//!
//! A file appears under its final name only once complete: it is written to a hidden temporary file in
//! the same directory (same file system, so `rename(2)` is atomic), synced, then renamed. Readers (a
//! collector tailing the directory, `go tool pprof`) never see half a profile. After each write the
//! directory is brought back within [`DirectoryLimits`]: files older than `max_age` go first, then the
//! oldest files until the total is at most `max_bytes` (the newest file always stays, even when it alone is
//! larger). Only this sink's files (`*.pb.gz`, not hidden) are counted or deleted.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use super::{EncodedProfile, ProfileMeta, SinkError};
use crate::export::metrics::{EvictReason, FailureReason, SinkMetrics};

/// Suffix of the files this sink writes.
const SUFFIX: &str = ".pb.gz";

/// Marks temporary files (`.<final name>.tmp-<random>`), removed at start if a crash left them behind.
const TMP_MARK: &str = ".tmp-";

/// Longest service name kept in a file name.
const MAX_SERVICE_CHARS: usize = 100;

/// How much the directory sink may keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectoryLimits {
    /// Total size of the profile files.
    pub max_bytes: u64,
    /// Age (modification time) past which a file is deleted.
    pub max_age: Duration,
}

impl Default for DirectoryLimits {
    /// 1 GiB and 7 days.
    fn default() -> DirectoryLimits {
        DirectoryLimits {
            max_bytes: 1 << 30,
            max_age: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// Writes profiles to one directory; see the module docs.
#[derive(Debug)]
pub struct DirectorySink {
    dir: PathBuf,
    limits: DirectoryLimits,
    metrics: SinkMetrics,
    /// Serializes write + eviction (the caller's thread and the upload thread both write).
    lock: Mutex<()>,
    warned: AtomicBool,
}

/// One profile file, as eviction sees it.
struct Entry {
    path: PathBuf,
    len: u64,
    modified: SystemTime,
}

impl DirectorySink {
    /// Creates `dir` if needed, checks that a file can be written there, removes temporary files a crash
    /// left behind and applies `limits` once.
    pub fn create(
        dir: impl Into<PathBuf>,
        limits: DirectoryLimits,
        metrics: SinkMetrics,
    ) -> Result<DirectorySink, SinkError> {
        let dir = dir.into();
        let unwritable = |source| SinkError::Unwritable {
            dir: dir.clone(),
            source,
        };
        fs::create_dir_all(&dir).map_err(unwritable)?;
        let probe = dir.join(format!(
            ".pyagent-probe{TMP_MARK}{:016x}",
            rand::random::<u64>()
        ));
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
            .and_then(|mut file| file.write_all(b"probe"))
            .map_err(unwritable)?;
        fs::remove_file(&probe).map_err(unwritable)?;
        let sink = DirectorySink {
            dir,
            limits,
            metrics,
            lock: Mutex::new(()),
            warned: AtomicBool::new(false),
        };
        sink.remove_stale_temporaries();
        if let Err(err) = sink.enforce_limits() {
            tracing::warn!("cannot apply the limits of {}: {err}", sink.dir.display());
        }
        Ok(sink)
    }

    /// The directory written to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The limits kept.
    pub fn limits(&self) -> DirectoryLimits {
        self.limits
    }

    /// The counters of this sink.
    pub fn metrics(&self) -> &SinkMetrics {
        &self.metrics
    }

    /// `<service>-<pid>-<start unix ms>.pb.gz`, the service reduced to `[A-Za-z0-9._-]` (other characters
    /// become `_`, a leading dot too, so the file is never hidden).
    pub fn file_name(meta: &ProfileMeta) -> String {
        let mut service: String = meta
            .service
            .chars()
            .take(MAX_SERVICE_CHARS)
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if service.is_empty() {
            service.push_str("unknown");
        }
        if service.starts_with('.') {
            service.replace_range(..1, "_");
        }
        format!("{service}-{}-{}{SUFFIX}", meta.pid, meta.start_unix_ms())
    }

    /// The path `profile` is written to.
    pub fn path_for(&self, meta: &ProfileMeta) -> PathBuf {
        self.dir.join(DirectorySink::file_name(meta))
    }

    /// Writes `profile` atomically, counts the attempt and applies the limits; returns the file's path.
    pub fn write(&self, profile: &EncodedProfile) -> Result<PathBuf, SinkError> {
        self.metrics.submitted();
        let path = self.path_for(&profile.meta);
        let started = Instant::now();
        let _guard = self.lock.lock().expect("directory sink lock poisoned");
        match write_atomically(&self.dir, &path, &profile.bytes) {
            Ok(()) => self.metrics.success(profile.bytes.len(), started.elapsed()),
            Err(source) => {
                self.metrics
                    .failure(FailureReason::Write, started.elapsed());
                return Err(SinkError::Write { path, source });
            }
        }
        if let Err(err) = self.enforce_limits_locked() {
            tracing::debug!("cannot apply the limits of {}: {err}", self.dir.display());
        }
        Ok(path)
    }

    /// Writes a profile an upload sink could not deliver. When the file is already there (the directory
    /// also archives every profile), nothing is written again.
    pub fn spill(&self, profile: &EncodedProfile) -> Result<PathBuf, SinkError> {
        let path = self.path_for(&profile.meta);
        if path.exists() {
            return Ok(path);
        }
        self.write(profile)
    }

    /// Writes `profile`, logging the first failure (later ones only count).
    pub(crate) fn submit(&self, profile: &EncodedProfile) {
        if let Err(err) = self.write(profile) {
            self.warn_once(&err);
        }
    }

    pub(crate) fn warn_once(&self, err: &SinkError) {
        let err = anyhow_like(err);
        if self.warned.swap(true, Ordering::Relaxed) {
            tracing::debug!("{err}");
        } else {
            tracing::warn!("{err} (further failures are only counted)");
        }
    }

    /// The profile files, oldest first (by modification time, then name).
    pub fn files(&self) -> io::Result<Vec<PathBuf>> {
        Ok(self
            .entries()?
            .into_iter()
            .map(|entry| entry.path)
            .collect())
    }

    /// Deletes files past `max_age`, then the oldest until the total is within `max_bytes`.
    pub fn enforce_limits(&self) -> io::Result<()> {
        let _guard = self.lock.lock().expect("directory sink lock poisoned");
        self.enforce_limits_locked()
    }

    fn enforce_limits_locked(&self) -> io::Result<()> {
        let mut entries = self.entries()?;
        let now = SystemTime::now();
        let mut too_old = 0;
        entries.retain(|entry| {
            let age = now.duration_since(entry.modified).unwrap_or_default();
            if age > self.limits.max_age && remove(&entry.path) {
                too_old += 1;
                return false;
            }
            true
        });
        self.metrics.evicted(EvictReason::Age, too_old);

        let mut total: u64 = entries.iter().map(|entry| entry.len).sum();
        let mut too_big = 0;
        // The newest file (last) always stays.
        let keep = entries.len().saturating_sub(1);
        for entry in &entries[..keep] {
            if total <= self.limits.max_bytes {
                break;
            }
            if remove(&entry.path) {
                total -= entry.len;
                too_big += 1;
            }
        }
        self.metrics.evicted(EvictReason::Size, too_big);
        Ok(())
    }

    fn entries(&self) -> io::Result<Vec<Entry>> {
        let mut entries = Vec::new();
        for item in fs::read_dir(&self.dir)? {
            let item = item?;
            let name = item.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') || !name.ends_with(SUFFIX) {
                continue;
            }
            // A file deleted meanwhile (by another agent, or by hand) is simply skipped.
            let Ok(meta) = item.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            entries.push(Entry {
                path: item.path(),
                len: meta.len(),
                modified: meta.modified()?,
            });
        }
        entries.sort_by(|a, b| a.modified.cmp(&b.modified).then(a.path.cmp(&b.path)));
        Ok(entries)
    }

    fn remove_stale_temporaries(&self) {
        let Ok(items) = fs::read_dir(&self.dir) else {
            return;
        };
        for item in items.flatten() {
            let name = item.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') && name.contains(TMP_MARK) {
                let _ = fs::remove_file(item.path());
            }
        }
    }
}

/// `err` and its causes on one line (`a: b: c`), as `main` prints errors.
fn anyhow_like(err: &dyn std::error::Error) -> String {
    let mut line = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        line.push_str(": ");
        line.push_str(&cause.to_string());
        source = cause.source();
    }
    line
}

fn remove(path: &Path) -> bool {
    match fs::remove_file(path) {
        Ok(()) => true,
        // Already gone: it no longer counts either.
        Err(err) if err.kind() == io::ErrorKind::NotFound => true,
        Err(err) => {
            tracing::debug!("cannot delete {}: {err}", path.display());
            false
        }
    }
}

/// Writes `bytes` to a temporary file in `dir`, syncs it and renames it to `path`.
fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path
        .file_name()
        .and_then(|name| name.to_str())
        .expect("profile file names are UTF-8");
    let tmp = dir.join(format!(".{name}{TMP_MARK}{:016x}", rand::random::<u64>()));
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)?;
        // Make the rename itself durable.
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::UNIX_EPOCH;

    use super::*;

    pub(crate) struct TempDir(pub(crate) PathBuf);

    impl TempDir {
        pub(crate) fn new(tag: &str) -> TempDir {
            let path = std::env::temp_dir().join(format!(
                "pyagent-{tag}-{}-{:08x}",
                std::process::id(),
                rand::random::<u32>()
            ));
            fs::create_dir_all(&path).expect("create temp dir");
            TempDir(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn profile(service: &str, pid: u32, start_ms: u64, len: usize) -> EncodedProfile {
        let start = UNIX_EPOCH + Duration::from_millis(start_ms);
        EncodedProfile {
            meta: Arc::new(ProfileMeta {
                service: service.to_owned(),
                pid,
                start,
                end: start + Duration::from_secs(10),
                labels: BTreeMap::new(),
            }),
            bytes: vec![0x1f; len].into(),
            sample_rate_hz: 19,
        }
    }

    fn names(sink: &DirectorySink) -> Vec<String> {
        sink.files()
            .unwrap()
            .iter()
            .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    }

    fn set_age(path: &Path, age: Duration) {
        let file = OpenOptions::new().write(true).open(path).unwrap();
        file.set_modified(SystemTime::now() - age).unwrap();
    }

    #[test]
    fn file_names_are_safe() {
        let p = profile("web/api server", 42, 1_700_000_000_123, 1);
        assert_eq!(
            DirectorySink::file_name(&p.meta),
            "web_api_server-42-1700000000123.pb.gz"
        );
        let p = profile("..", 1, 5, 1);
        assert_eq!(DirectorySink::file_name(&p.meta), "_.-1-5.pb.gz");
        let p = profile("", 1, 5, 1);
        assert_eq!(DirectorySink::file_name(&p.meta), "unknown-1-5.pb.gz");
    }

    #[test]
    fn writes_atomically_and_leaves_no_temporaries() {
        let dir = TempDir::new("dirsink-atomic");
        // A temporary left by a crash is removed at start.
        fs::write(dir.0.join(".web-1-1.pb.gz.tmp-0123"), b"half").unwrap();
        fs::write(dir.0.join("notes.txt"), b"not ours").unwrap();
        let sink = DirectorySink::create(
            &dir.0,
            DirectoryLimits::default(),
            SinkMetrics::detached("directory"),
        )
        .unwrap();
        let p = profile("web", 7, 1_000, 64);
        let path = sink.write(&p).unwrap();
        assert_eq!(path, dir.0.join("web-7-1000.pb.gz"));
        assert_eq!(fs::read(&path).unwrap(), &p.bytes[..]);
        let mut all: Vec<String> = fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        all.sort();
        assert_eq!(all, ["notes.txt", "web-7-1000.pb.gz"]);
        assert_eq!(sink.metrics().successes(), 1);
        assert_eq!(sink.metrics().bytes(), 64);
        // A spill of a profile already archived writes nothing again.
        sink.spill(&p).unwrap();
        assert_eq!(sink.metrics().successes(), 1);
    }

    #[test]
    fn size_bound_deletes_oldest_first() {
        let dir = TempDir::new("dirsink-size");
        let limits = DirectoryLimits {
            max_bytes: 250,
            max_age: Duration::from_secs(3600),
        };
        let sink =
            DirectorySink::create(&dir.0, limits, SinkMetrics::detached("directory")).unwrap();
        for (i, start) in [1_000u64, 2_000, 3_000].into_iter().enumerate() {
            let path = sink.write(&profile("web", 1, start, 100)).unwrap();
            // Distinct, increasing modification times without waiting.
            set_age(&path, Duration::from_secs(100 - i as u64 * 10));
        }
        // The third write pushed the total to 300 > 250 before its mtime was set; apply again to be sure.
        sink.enforce_limits().unwrap();
        assert_eq!(names(&sink), ["web-1-2000.pb.gz", "web-1-3000.pb.gz"]);
        assert_eq!(sink.metrics().evictions(EvictReason::Size), 1);

        // A single file above the bound stays: it is the newest.
        let path = sink.write(&profile("web", 1, 4_000, 400)).unwrap();
        assert_eq!(names(&sink), ["web-1-4000.pb.gz"]);
        assert!(path.exists());
        assert_eq!(sink.metrics().evictions(EvictReason::Size), 3);
    }

    #[test]
    fn age_bound_deletes_old_files() {
        let dir = TempDir::new("dirsink-age");
        let limits = DirectoryLimits {
            max_bytes: 1 << 20,
            max_age: Duration::from_secs(60),
        };
        let sink =
            DirectorySink::create(&dir.0, limits, SinkMetrics::detached("directory")).unwrap();
        let old = sink.write(&profile("web", 1, 1_000, 10)).unwrap();
        set_age(&old, Duration::from_secs(3600));
        sink.write(&profile("web", 1, 2_000, 10)).unwrap();
        assert_eq!(names(&sink), ["web-1-2000.pb.gz"]);
        assert_eq!(sink.metrics().evictions(EvictReason::Age), 1);

        // Old files found at start are deleted at start.
        let stale = dir.0.join("api-3-5.pb.gz");
        fs::write(&stale, b"x").unwrap();
        set_age(&stale, Duration::from_secs(3600));
        let again =
            DirectorySink::create(&dir.0, limits, SinkMetrics::detached("directory")).unwrap();
        assert_eq!(names(&again), ["web-1-2000.pb.gz"]);
    }

    #[test]
    fn unwritable_directory_is_a_one_line_error() {
        let dir = TempDir::new("dirsink-unwritable");
        // A regular file where a directory should be: fails even for root, unlike a mode of 0555.
        let file = dir.0.join("file");
        fs::write(&file, b"x").unwrap();
        let target = file.join("profiles");
        let err = DirectorySink::create(
            &target,
            DirectoryLimits::default(),
            SinkMetrics::detached("directory"),
        )
        .unwrap_err();
        assert!(matches!(err, SinkError::Unwritable { .. }), "{err:?}");
        let line = anyhow_like(&err);
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.starts_with(&format!(
                "output directory {} is not writable: ",
                target.display()
            )),
            "{line}"
        );

        // Without root, a read-only directory is refused the same way.
        if !nix::unistd::geteuid().is_root() {
            use std::os::unix::fs::PermissionsExt;
            let ro = dir.0.join("ro");
            fs::create_dir(&ro).unwrap();
            fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
            let err = DirectorySink::create(
                &ro,
                DirectoryLimits::default(),
                SinkMetrics::detached("directory"),
            )
            .unwrap_err();
            assert!(matches!(err, SinkError::Unwritable { .. }), "{err:?}");
        }
    }
}
