//! The upload sink: both of Pyroscope's APIs, and retries, spills, drops and a shutdown against
//! a hanging store, each for a Pyroscope API and for OTLP (the same guarantees).

use std::time::{Duration, Instant};

use rstest::rstest;

use super::receiver::{refused_url, Receiver, Reply};
use super::requests::{check_ingest, check_push, check_request};
use super::{config, directory, spilled_files, upload, wait_for, window};
use crate::export::metrics::{AgentMetrics, FailureReason};
use crate::export::sinks::{Auth, DirectoryRole, ShutdownReport, SinkSet, UploadApi};
use crate::test_support::temp_dir;

#[test]
fn ingest_upload_is_delivered() {
    let receiver = Receiver::start(&[], Reply::Status(200));
    let metrics = AgentMetrics::new();
    let mut config = config(receiver.url(), UploadApi::Ingest);
    config.auth = Some(Auth::Basic {
        user: "agent".into(),
        password: "s3cret".into(),
    });
    config.tenant = Some("team-a".into());
    let sink = upload(config, None, &metrics);
    let sinks = SinkSet::new().with_upload(sink);
    let (window, meta) = window(400);
    sinks.submit(&window, &meta);

    let request = receiver.next();
    check_ingest(&request, 400);
    assert_eq!(
        request.header("Authorization"),
        Some("Basic YWdlbnQ6czNjcmV0")
    );
    assert_eq!(request.header("X-Scope-OrgID"), Some("team-a"));

    let counters = metrics.sink("pyroscope");
    wait_for(
        "the delivery to be counted",
        Duration::from_secs(10),
        || counters.successes() == 1,
    );
    // Nothing was left for the shutdown to do.
    let report = sinks.shutdown(Duration::from_secs(5));
    assert_eq!(report, ShutdownReport::default());
    assert_eq!(counters.submitted_count(), 1);
    assert_eq!(counters.successes(), 1);
    assert_eq!(counters.bytes(), request.body.len() as u64);
    assert_eq!(counters.retries(), 0);
    assert_eq!(counters.attempts(), 1);
    assert_eq!(receiver.pending(), 0);
}

#[test]
fn push_upload_is_delivered() {
    let receiver = Receiver::start(&[], Reply::Status(200));
    let metrics = AgentMetrics::new();
    let mut config = config(format!("{}/", receiver.url()), UploadApi::Push);
    config.auth = Some(Auth::Bearer("tok".into()));
    let sink = upload(config, None, &metrics);
    let sinks = SinkSet::new().with_upload(sink);
    let (window, meta) = window(0);
    sinks.submit(&window, &meta);

    let request = receiver.next();
    check_push(&request);
    assert_eq!(request.header("Authorization"), Some("Bearer tok"));
    assert_eq!(request.header("X-Scope-OrgID"), None);
    sinks.shutdown(Duration::from_secs(5));
    assert_eq!(metrics.sink("pyroscope").successes(), 1);
}

#[rstest]
fn server_error_is_retried_and_delivered_once(
    #[values(UploadApi::Push, UploadApi::Otlp)] api: UploadApi,
) {
    let receiver = Receiver::start(&[Reply::Status(503)], Reply::Status(200));
    let metrics = AgentMetrics::new();
    let sink = upload(config(receiver.url(), api), None, &metrics);
    let counters = sink.metrics().clone();
    let sinks = SinkSet::new().with_upload(sink);
    let (window, meta) = window(0);
    sinks.submit(&window, &meta);

    check_request(api, &receiver.next(), 0);
    check_request(api, &receiver.next(), 0);
    wait_for(
        "the delivery to be counted",
        Duration::from_secs(10),
        || counters.successes() == 1,
    );
    sinks.shutdown(Duration::from_secs(5));
    assert_eq!(receiver.pending(), 0, "delivered more than once");
    assert_eq!(counters.failures(FailureReason::Http5xx), 1);
    assert_eq!(counters.retries(), 1);
    assert_eq!(counters.successes(), 1);
    assert_eq!(counters.spilled(), 0);
    assert_eq!(counters.dropped_total(), 0);
}

#[rstest]
fn timeout_is_retried(#[values(UploadApi::Ingest, UploadApi::Otlp)] api: UploadApi) {
    let receiver = Receiver::start(&[Reply::Hang], Reply::Status(200));
    let metrics = AgentMetrics::new();
    let mut config = config(receiver.url(), api);
    config.timeout = Duration::from_millis(300);
    let sink = upload(config, None, &metrics);
    let counters = sink.metrics().clone();
    let sinks = SinkSet::new().with_upload(sink);
    let (window, meta) = window(0);
    sinks.submit(&window, &meta);

    check_request(api, &receiver.next(), 0);
    check_request(api, &receiver.next(), 0);
    wait_for(
        "the delivery to be counted",
        Duration::from_secs(10),
        || counters.successes() == 1,
    );
    sinks.shutdown(Duration::from_secs(5));
    assert_eq!(counters.failures(FailureReason::Timeout), 1);
    assert_eq!(counters.retries(), 1);
    assert_eq!(counters.successes(), 1);
}

#[rstest]
fn refused_connection_spills_to_the_directory(
    #[values(UploadApi::Push, UploadApi::Otlp)] api: UploadApi,
) {
    let dir = temp_dir("spill-refused");
    let metrics = AgentMetrics::new();
    let spill = directory(dir.path(), DirectoryRole::Spool, &metrics);
    let mut config = config(refused_url(), api);
    config.max_attempts = 3;
    let sink = upload(config, Some(&spill), &metrics);
    let counters = sink.metrics().clone();
    let sinks = SinkSet::new()
        .with_directory(spill, false)
        .with_upload(sink);
    for offset in [0, 10_000, 20_000] {
        let (window, meta) = window(offset);
        sinks.submit(&window, &meta);
    }
    wait_for("three spills", Duration::from_secs(10), || {
        counters.spilled() == 3
    });
    assert_eq!(
        spilled_files(dir.path()),
        [
            "billing-4321-1700000000000.pb.gz",
            "billing-4321-1700000010000.pb.gz",
            "billing-4321-1700000020000.pb.gz",
        ]
    );
    // Three attempts each, and maybe offers of the spilled ones (the store is still down).
    assert!(counters.failures(FailureReason::Refused) >= 9);
    assert_eq!(counters.retries(), 6);
    assert_eq!(counters.successes(), 0);
    assert_eq!(counters.dropped_total(), 0);
    assert_eq!(
        sinks.shutdown(Duration::from_secs(5)),
        ShutdownReport::default()
    );
    // Every profile is accounted for exactly once.
    assert_eq!(
        counters.submitted_count(),
        counters.successes() + counters.spilled() + counters.dropped_total()
    );
    let written = metrics.sink("directory");
    assert_eq!(written.successes(), 3);
}

#[rstest]
fn refused_without_directory_is_counted_as_dropped(
    #[values(UploadApi::Ingest, UploadApi::Otlp)] api: UploadApi,
) {
    let metrics = AgentMetrics::new();
    let mut config = config(refused_url(), api);
    config.max_attempts = 2;
    let sink = upload(config, None, &metrics);
    let counters = sink.metrics().clone();
    let (window, meta) = window(0);
    SinkSet::new().with_upload(sink).submit(&window, &meta);
    // Dropping the set shuts the sink down; the profile was dropped before or at shutdown.
    assert_eq!(counters.submitted_count(), 1);
    assert_eq!(counters.successes() + counters.spilled(), 0);
    assert_eq!(counters.dropped_total(), 1);
}

#[rstest]
fn client_error_is_not_retried_and_spilled(
    #[values(UploadApi::Ingest, UploadApi::Otlp)] api: UploadApi,
) {
    let receiver = Receiver::start(&[], Reply::Status(400));
    let dir = temp_dir("spill-4xx");
    let metrics = AgentMetrics::new();
    let spill = directory(dir.path(), DirectoryRole::Spool, &metrics);
    let sink = upload(config(receiver.url(), api), Some(&spill), &metrics);
    let counters = sink.metrics().clone();
    let sinks = SinkSet::new().with_upload(sink);
    let (window, meta) = window(0);
    sinks.submit(&window, &meta);
    check_request(api, &receiver.next(), 0);
    wait_for("the spill", Duration::from_secs(10), || {
        counters.spilled() == 1
    });
    sinks.shutdown(Duration::from_secs(5));
    assert_eq!(receiver.pending(), 0, "a 4xx must not be retried");
    assert_eq!(counters.failures(FailureReason::Http4xx), 1);
    assert_eq!(counters.retries(), 0);
    assert_eq!(spilled_files(dir.path()).len(), 1);
}

#[rstest]
fn full_queue_spills_and_shutdown_beats_a_hanging_store(
    #[values(UploadApi::Push, UploadApi::Otlp)] api: UploadApi,
) {
    let receiver = Receiver::start(&[], Reply::Hang);
    let dir = temp_dir("spill-full");
    let metrics = AgentMetrics::new();
    let spill = directory(dir.path(), DirectoryRole::Spool, &metrics);
    let mut config = config(receiver.url(), api);
    config.queue_capacity = 2;
    config.timeout = Duration::from_secs(60);
    let sink = upload(config, Some(&spill), &metrics);
    let counters = sink.metrics().clone();
    let sinks = SinkSet::new()
        .with_directory(spill, false)
        .with_upload(sink);

    // The first profile is taken by the upload thread and hangs in the store.
    let (window0, meta0) = window(0);
    sinks.submit(&window0, &meta0);
    check_request(api, &receiver.next(), 0);
    // Two fit in the queue; the rest spill at once, without waiting on the network.
    let submitting = Instant::now();
    for i in 1..=20u64 {
        let (window, meta) = window(i * 10_000);
        sinks.submit(&window, &meta);
        let queued = sinks.upload().unwrap().queue_len();
        assert!(queued <= 2, "queue grew to {queued}");
    }
    assert!(
        submitting.elapsed() < Duration::from_secs(30),
        "submit waited for the hanging store"
    );
    assert_eq!(sinks.upload().unwrap().queue_len(), 2);
    assert_eq!(counters.queue_length(), 2);
    assert_eq!(counters.spilled(), 18);
    assert_eq!(counters.dropped_total(), 0);

    // SIGTERM: within the deadline, the queued and the hanging profile are on disk.
    let deadline = Duration::from_secs(2);
    let stopping = Instant::now();
    let report = sinks.shutdown(deadline);
    assert!(
        stopping.elapsed() <= deadline + Duration::from_secs(1),
        "shutdown overran its deadline: {:?}",
        stopping.elapsed()
    );
    assert_eq!(
        report,
        ShutdownReport {
            delivered: 0,
            spilled: 3,
            dropped: 0
        }
    );
    assert_eq!(spilled_files(dir.path()).len(), 21);
    assert_eq!(counters.spilled(), 21);
    assert_eq!(counters.queue_length(), 0);
    assert_eq!(counters.submitted_count(), 21);
    assert_eq!(counters.successes(), 0);

    // A profile submitted after shutdown goes straight to disk.
    let (late, late_meta) = window(1_000_000);
    sinks.submit(&late, &late_meta);
    assert_eq!(counters.spilled(), 22);
}
