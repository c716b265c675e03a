//! Sink tests against a local HTTP receiver that checks requests the way Pyroscope's handlers read them
//! (no Pyroscope server is installable here), and against the real file system.
//!
//! `receiver` is the stand-in store, `requests` checks what reached it; the tests are grouped by what
//! they exercise: `upload` the upload sink to Pyroscope, `otlp` the same sink speaking OTLP, `spool`
//! the redelivery of spilled profiles, `sink_set` the two sinks together.

mod otlp;
mod receiver;
mod requests;
mod sink_set;
mod spool;
mod upload;

use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, UNIX_EPOCH};

use self::requests::check_profile;
use super::*;
use crate::aggregate::tests::{frame, sample};
use crate::aggregate::Aggregator;
use crate::export::metrics::AgentMetrics;

/// Where the test window starts (Unix milliseconds).
const START_MS: u64 = 1_700_000_000_000;

/// A window of pid 4321 with 5 samples over two stacks, started at `START_MS + offset_ms`.
fn window(offset_ms: u64) -> (ProfileWindow, ProfileMeta) {
    let main = frame("main", "/srv/app.py", 10, 1);
    let work = frame("work", "/srv/app.py", 5, 4);
    let mut agg = Aggregator::new(1_000_000_000 / 19);
    agg.set_label("host", "node-1");
    agg.set_label("python_version", "3.12.3");
    agg.add_count(
        &sample(4321, 4321, Some("MainThread"), vec![work, main.clone()]),
        3,
    );
    agg.add_count(&sample(4321, 4322, None, vec![main]), 2);
    let mut window = agg.cut();
    window.start = UNIX_EPOCH + Duration::from_millis(START_MS + offset_ms);
    window.duration = Duration::from_secs(10);
    let meta = ProfileMeta::for_window("billing", &window);
    (window, meta)
}
fn config(url: String, api: UploadApi) -> UploadConfig {
    UploadConfig {
        timeout: Duration::from_secs(5),
        backoff_initial: Duration::from_millis(5),
        backoff_max: Duration::from_millis(20),
        ..UploadConfig::new(url, api)
    }
}

fn directory(dir: &Path, role: DirectoryRole, metrics: &AgentMetrics) -> Arc<DirectorySink> {
    Arc::new(
        DirectorySink::create(
            dir,
            DirectoryLimits::default(),
            role,
            metrics.sink("directory"),
        )
        .expect("create the directory sink"),
    )
}

/// Starts an upload sink with `config`, spilling into `spill`, counted in `metrics` under its
/// store (`pyroscope` or `otlp`), as the service counts it.
fn upload(
    config: UploadConfig,
    spill: Option<&Arc<DirectorySink>>,
    metrics: &AgentMetrics,
) -> UploadSink {
    let label = config.api.sink_label();
    UploadSink::start(config, spill.cloned(), metrics.sink(label)).expect("start the upload sink")
}

/// The profile files in `dir`, sorted by name; each must decode as the test window.
fn spilled_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in &names {
        assert!(!name.starts_with('.'), "temporary file left: {name}");
        check_profile(&std::fs::read(dir.join(name)).expect("read spilled file"));
    }
    names
}

/// Waits until `condition` holds, failing after `timeout`.
fn wait_for(what: &str, timeout: Duration, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::yield_now();
        thread::sleep(Duration::from_millis(2));
    }
}
