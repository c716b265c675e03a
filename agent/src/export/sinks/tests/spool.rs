//! Spilled profiles reach the store once it is back, in this run or the next.

use std::sync::Arc;
use std::time::Duration;

use super::receiver::{delivered_starts, refused_url, Receiver, Reply};
use super::requests::check_push;
use super::{config, directory, spilled_files, upload, wait_for, window, START_MS};
use crate::export::metrics::{AgentMetrics, SpoolOutcome};
use crate::export::sinks::{DirectoryRole, ShutdownReport, SinkSet, UploadApi};
use crate::test_support::temp_dir;

/// Reliability issue, defect 1: with the store down, profiles beyond the queue spilled to the directory,
/// and when the store came back only the queued ones were delivered; the spilled files stayed on disk
/// forever. The spill directory is a write-ahead buffer: it is delivered, oldest profile first, and every
/// profile is counted once.
#[test]
fn spilled_profiles_are_delivered_when_the_store_is_back() {
    let receiver = Receiver::start(&[], Reply::Current);
    receiver.set_status(503);
    let dir = temp_dir("spool-back");
    let metrics = AgentMetrics::new();
    let spool = directory(dir.path(), DirectoryRole::Spool, &metrics);
    let mut config = config(receiver.url(), UploadApi::Ingest);
    config.queue_capacity = 2;
    config.max_attempts = 1;
    let sink = upload(config, Some(&spool), &metrics);
    let counters = sink.metrics().clone();
    let sinks = SinkSet::new()
        .with_directory(Arc::clone(&spool), false)
        .with_upload(sink);
    const PROFILES: u64 = 12;
    for i in 0..PROFILES {
        let (window, meta) = window(i * 10_000);
        sinks.submit(&window, &meta);
    }
    wait_for("every profile spilled", Duration::from_secs(20), || {
        counters.spilled() == PROFILES
    });
    assert_eq!(spilled_files(dir.path()).len() as u64, PROFILES);

    // The store is back: the spool drains, and the delivered files leave the disk.
    receiver.set_status(200);
    wait_for("the spool to drain", Duration::from_secs(30), || {
        spool.pending_len() == 0
    });
    assert_eq!(spilled_files(dir.path()), Vec::<String>::new());
    // Each profile reached the store once, oldest first.
    let expected: Vec<u64> = (0..PROFILES)
        .map(|i| (START_MS + i * 10_000) / 1000)
        .collect();
    assert_eq!(delivered_starts(&receiver), expected);

    // Every profile counted once: spilled, then delivered from the spool.
    let spooled = metrics.sink("directory");
    assert_eq!(counters.submitted_count(), PROFILES);
    assert_eq!(
        counters.submitted_count(),
        counters.successes() + counters.spilled() + counters.dropped_total()
    );
    assert_eq!(
        spooled.spool_settled_count(SpoolOutcome::Delivered),
        PROFILES
    );
    assert_eq!(spooled.spool_settled_count(SpoolOutcome::Expired), 0);
    assert_eq!(spooled.spool_pending(), 0);
    assert_eq!(
        sinks.shutdown(Duration::from_secs(5)),
        ShutdownReport::default()
    );
}

/// Defect 1, across a restart: what one run spilled, the next delivers (and counts as recovered).
#[test]
fn spilled_profiles_are_delivered_by_the_next_run() {
    let dir = temp_dir("spool-restart");
    {
        let metrics = AgentMetrics::new();
        let spool = directory(dir.path(), DirectoryRole::Spool, &metrics);
        let mut config = config(refused_url(), UploadApi::Push);
        config.max_attempts = 1;
        let sink = upload(config, Some(&spool), &metrics);
        let sinks = SinkSet::new().with_upload(sink);
        for offset in [20_000, 0, 10_000] {
            let (window, meta) = window(offset);
            sinks.submit(&window, &meta);
        }
        sinks.shutdown(Duration::from_secs(5));
        assert_eq!(metrics.sink("pyroscope").spilled(), 3);
    }
    assert_eq!(spilled_files(dir.path()).len(), 3);

    let receiver = Receiver::start(&[], Reply::Status(200));
    let metrics = AgentMetrics::new();
    let spool = directory(dir.path(), DirectoryRole::Spool, &metrics);
    let spooled = metrics.sink("directory");
    assert_eq!(spooled.spool_recovered_count(), 3);
    let sink = upload(
        config(receiver.url(), UploadApi::Push),
        Some(&spool),
        &metrics,
    );
    wait_for("the spool to drain", Duration::from_secs(30), || {
        spool.pending_len() == 0
    });
    for _ in 0..3 {
        // The labels and the profile survived the file.
        check_push(&receiver.next());
    }
    assert_eq!(spilled_files(dir.path()), Vec::<String>::new());
    assert_eq!(spooled.spool_settled_count(SpoolOutcome::Delivered), 3);
    drop(sink);
}
