//! Sinks: where the profiles of the continuous service go.
//!
//! In comes one [`ProfileWindow`] per process (or group of processes) and interval, with its
//! [`ProfileMeta`]; [`SinkSet::submit`] encodes it once as gzipped pprof ([`crate::export::pprof`]) and
//! hands the same bytes to each configured sink:
//! - [`DirectorySink`] writes `<dir>/<service>-<pid>-<start unix ms>.pb.gz` atomically, within a byte and an
//!   age bound;
//! - [`UploadSink`] queues the bytes for a background thread that uploads them to Grafana Pyroscope
//!   (`/ingest` or the push API) or to an OTLP receiver (OTLP profiles over HTTP, see
//!   [`crate::export::otlp`]), retrying with backoff, and spills what it cannot deliver to the directory.
//!
//! The caller never waits on the network: `submit` only encodes, writes the local file (if archiving) and
//! enqueues. [`SinkSet::shutdown`] delivers or spills whatever is still queued within a deadline. Every
//! profile is counted exactly once as delivered, spilled or dropped ([`SinkMetrics`]), so nothing is lost
//! silently. What is kept between windows: the upload queue (bounded by
//! [`UploadConfig::queue_capacity`]) and the files on disk (bounded by [`DirectoryLimits`]).

mod directory;
mod index;
mod request;
mod stored;
mod upload;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::aggregate::ProfileWindow;
use crate::export::metrics::{AgentMetrics, DropReason, SinkMetrics};

pub use directory::{
    file_safe_service, ArchiveWriter, DirectoryLimits, DirectoryRole, DirectorySink,
};
pub use request::{ingest_name, ingest_query, push_body, push_labels};
pub use stored::StoredProfileError;
pub use upload::{Auth, Headers, UploadApi, UploadConfig, UploadSink};

/// What a profile is about, beyond its samples: who, when, and the labels to file it under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileMeta {
    /// Service name (see [`crate::discovery::service_name`]); Pyroscope's `service_name`.
    pub service: String,
    /// Host PID of the process (the first one, when a window covers several).
    pub pid: u32,
    /// Wall-clock start of the window.
    pub start: SystemTime,
    /// Wall-clock end of the window.
    pub end: SystemTime,
    /// Labels to file the profile under (`host`, `python_version`, ...).
    pub labels: BTreeMap<String, String>,
}

impl ProfileMeta {
    /// The meta of `window`: its start and end, its labels, `pid` its first PID (or 0).
    pub fn for_window(service: impl Into<String>, window: &ProfileWindow) -> ProfileMeta {
        ProfileMeta {
            service: service.into(),
            pid: window.pids().first().copied().unwrap_or(0),
            start: window.start,
            end: window.start + window.duration,
            labels: window.labels.clone(),
        }
    }

    /// Milliseconds since the Unix epoch at `start` (0 before 1970).
    pub fn start_unix_ms(&self) -> u128 {
        self.start
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis())
    }
}

/// A profile ready to deliver: its meta and the gzipped pprof bytes, shared by every sink.
#[derive(Debug, Clone)]
pub struct EncodedProfile {
    /// Who and when.
    pub meta: Arc<ProfileMeta>,
    /// Gzipped `perftools.profiles.Profile`.
    pub bytes: Arc<[u8]>,
    /// Samples per second the window was taken at (from its period), for Pyroscope's `sampleRate`.
    pub sample_rate_hz: u32,
}

impl EncodedProfile {
    /// Encodes `window` as gzipped pprof, with `meta` in the gzip header (see [`stored`]) so that a
    /// spilled file can be uploaded later.
    pub fn encode(window: &ProfileWindow, meta: &ProfileMeta) -> io::Result<EncodedProfile> {
        // Rounded to the nearest hertz; 0 for a window without a period.
        let sample_rate_hz = (1_000_000_000 + window.period_ns / 2)
            .checked_div(window.period_ns)
            .map_or(0, |hz| u32::try_from(hz).unwrap_or(u32::MAX));
        let bytes = stored::encode(window, meta, sample_rate_hz)?;
        Ok(EncodedProfile {
            meta: Arc::new(meta.clone()),
            bytes: bytes.into(),
            sample_rate_hz,
        })
    }
}

/// Why a sink could not start or write.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The output directory cannot be created or written to.
    #[error("output directory {dir} is not writable")]
    Unwritable {
        /// The directory.
        dir: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// A profile file could not be written.
    #[error("cannot write profile {path}")]
    Write {
        /// The file (its final name).
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// The store's URL is not an `http://` or `https://` URL.
    #[error("upload url {url:?} must start with http:// or https://")]
    BadUrl {
        /// The URL given.
        url: String,
    },
    /// The upload thread could not start.
    #[error("cannot start the upload thread")]
    Thread {
        /// The spawn error.
        #[source]
        source: io::Error,
    },
}

/// What [`SinkSet::shutdown`] did with the profiles still queued.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Delivered during the shutdown.
    pub delivered: u64,
    /// Written to the output directory instead.
    pub spilled: u64,
    /// Lost (no directory, or the spill failed); each is counted in `pyagent_sink_dropped_total`.
    pub dropped: u64,
}

/// Any combination of sinks; see the module docs.
#[derive(Debug)]
pub struct SinkSet {
    directory: Option<Arc<DirectorySink>>,
    /// Writes every profile into the directory, off the caller's thread (no upload, or an
    /// archive beside it).
    archive: Option<ArchiveWriter>,
    upload: Option<UploadSink>,
    /// Counts windows that could not even be encoded.
    encode_metrics: Option<SinkMetrics>,
}

impl SinkSet {
    /// A set with no sink (profiles are encoded and discarded).
    pub fn new() -> SinkSet {
        SinkSet {
            directory: None,
            archive: None,
            upload: None,
            encode_metrics: None,
        }
    }

    /// Starts the sinks a service configuration asks for: the directory (if `output_dir`), archiving
    /// every profile when there is no upload, and holding the spills (a write-ahead buffer the upload
    /// sink delivers from) when there is; and the upload sink (if `upload`: Pyroscope or an OTLP
    /// receiver), spilling into that directory. Counters go to `metrics` (`sink="directory"`,
    /// `sink="pyroscope"` or `sink="otlp"`, encode failures under `sink="encode"`).
    pub fn start(
        output_dir: Option<&Path>,
        limits: DirectoryLimits,
        upload: Option<UploadConfig>,
        metrics: &AgentMetrics,
    ) -> Result<SinkSet, SinkError> {
        let mut set = SinkSet::new().with_encode_metrics(metrics.sink("encode"));
        let directory = match output_dir {
            Some(dir) => {
                let role = if upload.is_some() {
                    DirectoryRole::Spool
                } else {
                    DirectoryRole::Archive
                };
                Some(Arc::new(DirectorySink::create(
                    dir,
                    limits,
                    role,
                    metrics.sink("directory"),
                )?))
            }
            None => None,
        };
        if let Some(directory) = &directory {
            set = set.with_directory(Arc::clone(directory), upload.is_none());
        }
        if let Some(config) = upload {
            let sink_label = config.api.sink_label();
            set = set.with_upload(UploadSink::start(
                config,
                directory,
                metrics.sink(sink_label),
            )?);
        }
        Ok(set)
    }

    /// Adds the directory sink. With `archive` (or without an upload sink), every profile is written
    /// there; otherwise only what the upload sink spills (give the same `Arc` to
    /// [`UploadSink::start`]).
    pub fn with_directory(mut self, sink: Arc<DirectorySink>, archive: bool) -> SinkSet {
        self.archive = archive.then(|| ArchiveWriter::start(Arc::clone(&sink)));
        self.directory = Some(sink);
        self
    }

    /// Adds the upload sink.
    pub fn with_upload(mut self, sink: UploadSink) -> SinkSet {
        self.upload = Some(sink);
        self
    }

    /// Where windows that fail to encode are counted (`pyagent_sink_dropped_total{reason="encode"}`).
    pub fn with_encode_metrics(mut self, metrics: SinkMetrics) -> SinkSet {
        self.encode_metrics = Some(metrics);
        self
    }

    /// The directory sink, if any.
    pub fn directory(&self) -> Option<&Arc<DirectorySink>> {
        self.directory.as_ref()
    }

    /// The upload sink, if any.
    pub fn upload(&self) -> Option<&UploadSink> {
        self.upload.as_ref()
    }

    /// Encodes `window` once and hands it to every sink. Never waits on the network: an upload is only
    /// queued (or, with the queue full, spilled to the directory). A local write failure is counted and
    /// logged, not returned: the service loop goes on either way.
    pub fn submit(&self, window: &ProfileWindow, meta: &ProfileMeta) {
        if self.directory.is_none() && self.upload.is_none() {
            return;
        }
        let profile = match EncodedProfile::encode(window, meta) {
            Ok(profile) => profile,
            Err(err) => {
                tracing::warn!(
                    "cannot encode the profile of {} (pid {}): {err}",
                    meta.service,
                    meta.pid
                );
                if let Some(metrics) = &self.encode_metrics {
                    metrics.drop_profile(DropReason::Encode);
                }
                return;
            }
        };
        self.submit_encoded(profile);
    }

    /// Hands an already encoded profile to every sink (see [`submit`](SinkSet::submit)).
    pub fn submit_encoded(&self, profile: EncodedProfile) {
        match (&self.archive, &self.directory, &self.upload) {
            (Some(archive), _, _) => archive.submit(profile.clone()),
            // A directory set up as a spool, with no upload to spill from it: keep it all.
            (None, Some(directory), None) => directory.submit(&profile),
            _ => {}
        }
        if let Some(upload) = &self.upload {
            upload.submit(profile);
        }
    }

    /// Writes what the archive's queue holds, then delivers what the upload queue holds, or spills
    /// it to the directory, before `deadline` has passed; returns what happened to the queued
    /// uploads. Returns early when everything is delivered.
    pub fn shutdown(&self, deadline: Duration) -> ShutdownReport {
        if let Some(archive) = &self.archive {
            archive.finish();
        }
        match &self.upload {
            Some(upload) => upload.shutdown(Instant::now() + deadline),
            None => ShutdownReport::default(),
        }
    }
}

impl Default for SinkSet {
    fn default() -> SinkSet {
        SinkSet::new()
    }
}

#[cfg(test)]
mod tests;
