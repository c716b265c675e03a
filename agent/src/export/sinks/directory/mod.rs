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
//!
//! The parts: `naming` says what a file is called, `limits` keeps the directory within its bounds,
//! `spool` is the write-ahead buffer of the upload sink; this module creates the sink, writes files and
//! reads the directory at start.

mod limits;
mod naming;
mod spool;
mod writer;

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use super::index::{DirectoryIndex, IndexedFile};
use super::{EncodedProfile, SinkError};
use crate::export::atomic_file::{self, TMP_MARK};
use crate::export::metrics::{DropReason, FailureReason, SinkMetrics, SpoolOutcome};

pub use limits::DirectoryLimits;
pub use naming::file_safe_service;
use naming::SUFFIX;
pub use spool::{PendingProfile, SpillFate};
pub use writer::ArchiveWriter;

/// What a directory is for; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectoryRole {
    /// Every profile is kept (until the bounds delete it).
    Archive,
    /// Only undelivered profiles, each waiting for the store; delivered ones are deleted.
    Spool,
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

    /// Writes `profile` atomically, counts the attempt and applies the limits; returns the file's path.
    pub fn write(&self, profile: &EncodedProfile) -> Result<PathBuf, SinkError> {
        self.write_with(profile, DirSync::Now)
    }

    fn write_with(&self, profile: &EncodedProfile, sync: DirSync) -> Result<PathBuf, SinkError> {
        self.metrics.submitted();
        let path = self.path_for(&profile.meta);
        let name = DirectorySink::file_name(&profile.meta);
        let started = Instant::now();
        let mut index = self.lock();
        let result = match write_file(&path, &profile.bytes, sync) {
            // Someone deleted the directory (a cleanup script, a hand): make it again and retry once.
            Err(err) if err.kind() == io::ErrorKind::NotFound && !self.dir.is_dir() => self
                .recreate(&mut index)
                .and_then(|()| write_file(&path, &profile.bytes, sync)),
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

    /// Archives `profiles` as [`submit`](Self::submit) does each, syncing the directory once for
    /// all of them (see [`atomic_file`]).
    pub(crate) fn submit_batch(&self, profiles: &[EncodedProfile]) {
        let mut renamed = false;
        for profile in profiles {
            match self.write_with(profile, DirSync::Deferred) {
                Ok(_) => renamed = true,
                Err(err) => {
                    self.metrics.drop_profile(DropReason::WriteFailed);
                    self.warn_once(&err);
                }
            }
        }
        if renamed {
            if let Err(source) = atomic_file::sync_dir(&self.dir) {
                self.warn_once(&SinkError::Write {
                    path: self.dir.clone(),
                    source,
                });
            }
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

/// Whether a write makes its rename durable itself or leaves that to one directory sync after a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DirSync {
    Now,
    Deferred,
}

/// Writes `bytes` to `path` atomically; returns its size and modification time (from the file itself,
/// not the directory).
fn write_file(path: &Path, bytes: &[u8], sync: DirSync) -> io::Result<IndexedFile> {
    let fill = |out: &mut dyn Write| out.write_all(bytes);
    let meta = match sync {
        DirSync::Now => atomic_file::write_atomically(path, fill)?,
        DirSync::Deferred => atomic_file::write_renamed(path, fill)?,
    };
    Ok(IndexedFile {
        len: meta.len(),
        modified: meta.modified()?,
    })
}

#[cfg(test)]
mod tests;
