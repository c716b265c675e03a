//! The directory sink: one gzipped pprof file per profile, written atomically, within bounds.
//!
//! A file appears under its final name only once complete: it is written to a hidden temporary file in
//! the same directory (same file system, so `rename(2)` is atomic), synced, then renamed. Readers (a
//! collector tailing the directory, `go tool pprof`) never see half a profile. After each write the
//! directory is brought back within [`DirectoryLimits`]: files older than `max_age` go first, then the
//! oldest files until the total is at most `max_bytes` (the newest file always stays, even when it alone is
//! larger). Only this sink's files (`*.pb.gz`, not hidden) are counted or deleted.
//!
//! The directory is read once, at start, into a [`DirectoryIndex`]; writes and bounds use the index, so
//! their cost does not grow with the number of files.
//!
//! A directory has one of two [`DirectoryRole`]s. An archive keeps every profile. A spool holds the
//! profiles the upload sink could not deliver: a write-ahead buffer, every file in it waits for the store
//! (including files an earlier run left), the upload sink takes them oldest profile first
//! ([`DirectorySink::next_pending`]) and a delivered file is deleted ([`DirectorySink::settle`]). Every
//! spilled profile leaves the spool once, counted by [`SpoolOutcome`]: delivered, expired (deleted by the
//! bounds first), rejected by the store, or unreadable.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use super::index::{DirectoryIndex, IndexedFile};
use super::stored::{self, StoredProfileError};
use super::{EncodedProfile, ProfileMeta, SinkError};
use crate::export::atomic_file::{self, TMP_MARK};
use crate::export::metrics::{DropReason, EvictReason, FailureReason, SinkMetrics, SpoolOutcome};

/// Suffix of the files this sink writes.
const SUFFIX: &str = ".pb.gz";

/// Longest service name kept in a file name.
const MAX_SERVICE_CHARS: usize = 100;

/// A service name as the start of a file name: reduced to `[A-Za-z0-9._-]` (other characters
/// become `_`, a leading dot too, so the file is never hidden), at most 100 characters,
/// `unknown` when empty. Every file the agent names after a service uses it.
pub fn file_safe_service(service: &str) -> String {
    let mut safe: String = service
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
    if safe.is_empty() {
        safe.push_str("unknown");
    }
    if safe.starts_with('.') {
        safe.replace_range(..1, "_");
    }
    safe
}

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

/// What a directory is for; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectoryRole {
    /// Every profile is kept (until the bounds delete it).
    Archive,
    /// Only undelivered profiles, each waiting for the store; delivered ones are deleted.
    Spool,
}

/// What becomes of a spilled profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpillFate {
    /// Offered to the store again when it is back.
    Redeliver,
    /// Only kept: the store refused it for good.
    Keep,
}

/// A spilled profile taken from the spool: its file name and, if the file could be read, the profile.
#[derive(Debug)]
pub struct PendingProfile {
    /// The file's name in the directory (for [`DirectorySink::settle`]).
    pub name: String,
    /// The profile, ready to upload.
    pub profile: Result<EncodedProfile, StoredProfileError>,
}

/// Writes profiles to one directory; see the module docs.
#[derive(Debug)]
pub struct DirectorySink {
    dir: PathBuf,
    limits: DirectoryLimits,
    role: DirectoryRole,
    metrics: SinkMetrics,
    /// The files, read once at start; the lock also serializes write + eviction (the caller's thread and
    /// the upload thread both write).
    index: Mutex<DirectoryIndex>,
    /// Times the directory itself was listed (once per start: everything else uses the index).
    scans: AtomicU64,
    warned: AtomicBool,
}

impl DirectorySink {
    /// Creates `dir` if needed, checks that a file can be written there, removes temporary files a crash
    /// left behind and applies `limits` once. As a spool, every file found is pending.
    pub fn create(
        dir: impl Into<PathBuf>,
        limits: DirectoryLimits,
        role: DirectoryRole,
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
            role,
            metrics,
            index: Mutex::new(DirectoryIndex::default()),
            scans: AtomicU64::new(0),
            warned: AtomicBool::new(false),
        };
        let mut index = sink.scan().map_err(|source| SinkError::Unwritable {
            dir: sink.dir.clone(),
            source,
        })?;
        if role == DirectoryRole::Spool {
            let names: Vec<String> = index
                .oldest_first()
                .map(|(name, _)| name.to_owned())
                .collect();
            for name in &names {
                index.mark_pending(name);
            }
            sink.metrics.spool_recovered(names.len() as u64);
        }
        *sink.lock() = index;
        sink.enforce_limits();
        Ok(sink)
    }

    /// What the directory is for.
    pub fn role(&self) -> DirectoryRole {
        self.role
    }

    fn lock(&self) -> MutexGuard<'_, DirectoryIndex> {
        self.index.lock().expect("directory index poisoned")
    }

    /// How many times the directory was listed since the sink started (one: the start).
    pub fn directory_scans(&self) -> u64 {
        self.scans.load(Ordering::Relaxed)
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

    /// `<service>-<pid>-<start unix ms>.pb.gz`, the service as [`file_safe_service`] makes it.
    pub fn file_name(meta: &ProfileMeta) -> String {
        let service = file_safe_service(&meta.service);
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
        let name = DirectorySink::file_name(&profile.meta);
        let started = Instant::now();
        let mut index = self.lock();
        let result = match write_atomically(&path, &profile.bytes) {
            // Someone deleted the directory (a cleanup script, a hand): make it again and retry once.
            Err(err) if err.kind() == io::ErrorKind::NotFound && !self.dir.is_dir() => self
                .recreate(&mut index)
                .and_then(|()| write_atomically(&path, &profile.bytes)),
            result => result,
        };
        match result {
            Ok(written) => {
                self.metrics.success(profile.bytes.len(), started.elapsed());
                self.metrics.healthy();
                index.insert(&name, written);
            }
            Err(source) => {
                self.metrics
                    .failure(FailureReason::Write, started.elapsed());
                let err = SinkError::Write { path, source };
                self.metrics.unhealthy(anyhow_like(&err));
                return Err(err);
            }
        }
        self.enforce_limits_locked(&mut index);
        Ok(path)
    }

    /// Writes a profile an upload sink could not deliver, pending delivery unless `fate` is
    /// [`SpillFate::Keep`]. When the file is already there (the directory also archives every profile),
    /// it is not written again.
    pub fn spill(&self, profile: &EncodedProfile, fate: SpillFate) -> Result<PathBuf, SinkError> {
        let name = DirectorySink::file_name(&profile.meta);
        let written = {
            let index = self.lock();
            index.contains(&name)
        };
        let path = if written {
            self.dir.join(&name)
        } else {
            self.write(profile)?
        };
        if fate == SpillFate::Redeliver {
            let mut index = self.lock();
            // False when the bounds deleted the file at once (it alone exceeds them): counted then.
            if index.mark_pending(&name) {
                self.metrics.set_spool_pending(index.pending_len());
            } else {
                self.metrics.spool_settled(SpoolOutcome::Expired, 1);
            }
        }
        Ok(path)
    }

    /// Spilled profiles waiting for the store.
    pub fn pending_len(&self) -> usize {
        self.lock().pending_len()
    }

    /// The oldest spilled profile waiting for the store, read from its file; it stays pending until
    /// [`settle`](DirectorySink::settle)d.
    pub fn next_pending(&self) -> Option<PendingProfile> {
        let name = self.lock().oldest_pending()?.to_owned();
        // Read outside the lock: writers need not wait for it.
        let profile = fs::read(self.dir.join(&name))
            .map_err(StoredProfileError::Read)
            .and_then(stored::decode);
        Some(PendingProfile { name, profile })
    }

    /// `name` left the spool with `outcome`: a delivered file is deleted from a spool (kept in an
    /// archive), any other is kept but no longer offered. Counted once, unless it had already left
    /// (deleted by the bounds meanwhile, counted as expired then).
    pub fn settle(&self, name: &str, outcome: SpoolOutcome) {
        let mut index = self.lock();
        if !index.unmark_pending(name) {
            return;
        }
        if outcome == SpoolOutcome::Delivered
            && self.role == DirectoryRole::Spool
            && remove(&self.dir.join(name))
        {
            index.remove(name);
        }
        self.metrics.spool_settled(outcome, 1);
        self.metrics.set_spool_pending(index.pending_len());
    }

    /// Makes the directory again after it was deleted; the files it held are gone with it (spilled
    /// ones count as expired).
    fn recreate(&self, index: &mut DirectoryIndex) -> io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        tracing::warn!(
            "output directory {} was deleted; created it again",
            self.dir.display()
        );
        let lost = index.pending_len() as u64;
        *index = DirectoryIndex::default();
        self.metrics.spool_settled(SpoolOutcome::Expired, lost);
        self.metrics.set_spool_pending(0);
        Ok(())
    }

    /// Archives `profile`; a failed write loses it, so it is counted as dropped (and the first failure
    /// logged: later ones are counted, and shown by `/healthz` while they last).
    pub(crate) fn submit(&self, profile: &EncodedProfile) {
        if let Err(err) = self.write(profile) {
            self.metrics.drop_profile(DropReason::WriteFailed);
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

    /// The profile files, oldest first (by modification time, then name), as the index knows them.
    pub fn files(&self) -> Vec<PathBuf> {
        self.lock()
            .oldest_first()
            .map(|(name, _)| self.dir.join(name))
            .collect()
    }

    /// Deletes files past `max_age`, then the oldest until the total is within `max_bytes`.
    pub fn enforce_limits(&self) {
        let mut index = self.lock();
        self.enforce_limits_locked(&mut index);
    }

    fn enforce_limits_locked(&self, index: &mut DirectoryIndex) {
        let now = SystemTime::now();
        let too_old: Vec<String> = index
            .oldest_first()
            .take_while(|(_, file)| {
                now.duration_since(file.modified).unwrap_or_default() > self.limits.max_age
            })
            .map(|(name, _)| name.to_owned())
            .collect();
        let mut evicted = 0;
        let mut expired = 0;
        for name in too_old {
            if remove(&self.dir.join(&name)) {
                if let Some((_, true)) = index.remove(&name) {
                    expired += 1;
                }
                evicted += 1;
            }
        }
        self.metrics.evicted(EvictReason::Age, evicted);

        // Oldest first, and the newest file (last) always stays. A file that cannot be deleted is
        // skipped (still counted in the total), so the walk ends.
        let mut evicted = 0;
        let mut skipped = 0;
        while index.total_bytes() > self.limits.max_bytes && index.len() > skipped + 1 {
            let Some(name) = index
                .oldest_first()
                .nth(skipped)
                .map(|(name, _)| name.to_owned())
            else {
                break;
            };
            if remove(&self.dir.join(&name)) {
                if let Some((_, true)) = index.remove(&name) {
                    expired += 1;
                }
                evicted += 1;
            } else {
                skipped += 1;
            }
        }
        self.metrics.evicted(EvictReason::Size, evicted);
        // Spilled profiles deleted before the store took them.
        self.metrics.spool_settled(SpoolOutcome::Expired, expired);
        self.metrics.set_spool_pending(index.pending_len());
    }

    /// Lists the directory: this sink's files (`*.pb.gz`, not hidden), and removes the temporary files a
    /// crash left behind. Runs once, at start.
    fn scan(&self) -> io::Result<DirectoryIndex> {
        self.scans.fetch_add(1, Ordering::Relaxed);
        let mut index = DirectoryIndex::default();
        for item in fs::read_dir(&self.dir)? {
            let item = item?;
            let name = item.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') {
                if name.contains(TMP_MARK) {
                    let _ = fs::remove_file(item.path());
                }
                continue;
            }
            if !name.ends_with(SUFFIX) {
                continue;
            }
            // A file deleted meanwhile (by another agent, or by hand) is simply skipped.
            let Ok(meta) = item.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            index.insert(
                name,
                IndexedFile {
                    len: meta.len(),
                    modified: meta.modified()?,
                },
            );
        }
        Ok(index)
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

/// Writes `bytes` to `path` atomically; returns its size and modification time (from the file itself,
/// not the directory).
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<IndexedFile> {
    let meta = atomic_file::write_atomically(path, |out| out.write_all(bytes))?;
    Ok(IndexedFile {
        len: meta.len(),
        modified: meta.modified()?,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::test_support::temp_dir;

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
            .iter()
            .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    }

    fn set_age(path: &Path, age: Duration) {
        let file = OpenOptions::new().write(true).open(path).unwrap();
        file.set_modified(SystemTime::now() - age).unwrap();
    }

    /// Ages a file the sink wrote, on disk and in its index (which is not re-read).
    fn age_file(sink: &DirectorySink, path: &Path, age: Duration) {
        set_age(path, age);
        let name = path.file_name().unwrap().to_str().unwrap();
        let len = fs::metadata(path).unwrap().len();
        sink.lock().insert(
            name,
            IndexedFile {
                len,
                modified: fs::metadata(path).unwrap().modified().unwrap(),
            },
        );
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
        let dir = temp_dir("dirsink-atomic");
        // A temporary left by a crash is removed at start.
        fs::write(dir.path().join(".web-1-1.pb.gz.tmp-0123"), b"half").unwrap();
        fs::write(dir.path().join("notes.txt"), b"not ours").unwrap();
        let sink = DirectorySink::create(
            dir.path(),
            DirectoryLimits::default(),
            DirectoryRole::Archive,
            SinkMetrics::detached("directory"),
        )
        .unwrap();
        let p = profile("web", 7, 1_000, 64);
        let path = sink.write(&p).unwrap();
        assert_eq!(path, dir.path().join("web-7-1000.pb.gz"));
        assert_eq!(fs::read(&path).unwrap(), &p.bytes[..]);
        let mut all: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        all.sort();
        assert_eq!(all, ["notes.txt", "web-7-1000.pb.gz"]);
        assert_eq!(sink.metrics().successes(), 1);
        assert_eq!(sink.metrics().bytes(), 64);
        // A spill of a profile already archived writes nothing again.
        sink.spill(&p, SpillFate::Redeliver).unwrap();
        assert_eq!(sink.metrics().successes(), 1);
    }

    #[test]
    fn size_bound_deletes_oldest_first() {
        let dir = temp_dir("dirsink-size");
        let limits = DirectoryLimits {
            max_bytes: 250,
            max_age: Duration::from_secs(3600),
        };
        let sink = DirectorySink::create(
            dir.path(),
            limits,
            DirectoryRole::Archive,
            SinkMetrics::detached("directory"),
        )
        .unwrap();
        for (i, start) in [1_000u64, 2_000, 3_000].into_iter().enumerate() {
            let path = sink.write(&profile("web", 1, start, 100)).unwrap();
            // Distinct, increasing modification times without waiting.
            age_file(&sink, &path, Duration::from_secs(100 - i as u64 * 10));
        }
        // The third write pushed the total to 300 > 250 before its mtime was set; apply again to be sure.
        sink.enforce_limits();
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
        let dir = temp_dir("dirsink-age");
        let limits = DirectoryLimits {
            max_bytes: 1 << 20,
            max_age: Duration::from_secs(60),
        };
        let sink = DirectorySink::create(
            dir.path(),
            limits,
            DirectoryRole::Archive,
            SinkMetrics::detached("directory"),
        )
        .unwrap();
        let old = sink.write(&profile("web", 1, 1_000, 10)).unwrap();
        age_file(&sink, &old, Duration::from_secs(3600));
        sink.write(&profile("web", 1, 2_000, 10)).unwrap();
        assert_eq!(names(&sink), ["web-1-2000.pb.gz"]);
        assert_eq!(sink.metrics().evictions(EvictReason::Age), 1);

        // Old files found at start are deleted at start.
        let stale = dir.path().join("api-3-5.pb.gz");
        fs::write(&stale, b"x").unwrap();
        set_age(&stale, Duration::from_secs(3600));
        let again = DirectorySink::create(
            dir.path(),
            limits,
            DirectoryRole::Archive,
            SinkMetrics::detached("directory"),
        )
        .unwrap();
        assert_eq!(names(&again), ["web-1-2000.pb.gz"]);
    }

    /// Reliability issue, defect 5: every write listed and stat'ed the whole directory, so with 20,000 old
    /// files the agent's CPU was 16 times that of an empty directory. The directory is read once, at start;
    /// writes and both bounds use the index from then on.
    #[test]
    fn output_directory_is_scanned_once_not_per_write() {
        let dir = temp_dir("dirsink-scans");
        const OLD_FILES: u64 = 3_000;
        for i in 0..OLD_FILES {
            let path = dir.path().join(format!("old-1-{i}.pb.gz"));
            fs::write(&path, [0u8; 10]).unwrap();
            // The old files are older than anything written now, oldest first by number.
            set_age(&path, Duration::from_secs(10_000 - i));
        }
        let limits = DirectoryLimits {
            // Room for every old file plus 10 new ones of 10 bytes: then the oldest go.
            max_bytes: (OLD_FILES + 10) * 10,
            max_age: Duration::from_secs(3600 * 24),
        };
        let sink = DirectorySink::create(
            dir.path(),
            limits,
            DirectoryRole::Archive,
            SinkMetrics::detached("directory"),
        )
        .unwrap();
        assert_eq!(sink.files().len() as u64, OLD_FILES);
        for start in 0..30 {
            sink.write(&profile("new", 2, start, 10)).unwrap();
        }
        assert_eq!(
            sink.directory_scans(),
            1,
            "the directory was listed again after the start"
        );
        // The bounds still hold, through the index: the 20 oldest files went, and only those.
        assert_eq!(sink.metrics().evictions(EvictReason::Size), 20);
        let names = names(&sink);
        assert_eq!(names.len() as u64, OLD_FILES + 10);
        assert_eq!(names[0], "old-1-20.pb.gz");
        assert!(!dir.path().join("old-1-19.pb.gz").exists());
        assert!(dir.path().join("old-1-20.pb.gz").exists());
        let on_disk = fs::read_dir(dir.path()).unwrap().count() as u64;
        assert_eq!(on_disk, OLD_FILES + 10);
    }

    #[test]
    fn unwritable_directory_is_a_one_line_error() {
        let dir = temp_dir("dirsink-unwritable");
        // A regular file where a directory should be: fails even for root, unlike a mode of 0555.
        let file = dir.path().join("file");
        fs::write(&file, b"x").unwrap();
        let target = file.join("profiles");
        let err = DirectorySink::create(
            &target,
            DirectoryLimits::default(),
            DirectoryRole::Archive,
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
            let ro = dir.path().join("ro");
            fs::create_dir(&ro).unwrap();
            fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
            let err = DirectorySink::create(
                &ro,
                DirectoryLimits::default(),
                DirectoryRole::Archive,
                SinkMetrics::detached("directory"),
            )
            .unwrap_err();
            assert!(matches!(err, SinkError::Unwritable { .. }), "{err:?}");
        }
    }
}
