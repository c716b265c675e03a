//! The sinks together: an archive beside the upload, and what [`SinkSet::start`] makes of a
//! configuration.

use std::time::Duration;

use super::receiver::{Receiver, Reply};
use super::requests::{check_ingest, check_push};
use super::{config, directory, spilled_files, upload, wait_for, window};
use crate::export::metrics::AgentMetrics;
use crate::export::sinks::{DirectoryLimits, DirectoryRole, SinkSet, UploadApi};
use crate::test_support::temp_dir;

#[test]
fn archive_and_upload_both_get_the_profile() {
    let receiver = Receiver::start(&[], Reply::Status(200));
    let dir = temp_dir("archive");
    let metrics = AgentMetrics::new();
    let archive = directory(dir.path(), DirectoryRole::Archive, &metrics);
    let sink = upload(
        config(receiver.url(), UploadApi::Ingest),
        Some(&archive),
        &metrics,
    );
    let sinks = SinkSet::new()
        .with_directory(archive, true)
        .with_upload(sink);
    let (window, meta) = window(0);
    sinks.submit(&window, &meta);
    let request = receiver.next();
    check_ingest(&request, 0);
    sinks.shutdown(Duration::from_secs(5));
    let files = spilled_files(dir.path());
    assert_eq!(files, ["billing-4321-1700000000000.pb.gz"]);
    // The same bytes went to both.
    assert_eq!(
        std::fs::read(dir.path().join(&files[0])).unwrap(),
        request.body
    );
    assert_eq!(metrics.sink("pyroscope").successes(), 1);
    assert_eq!(metrics.sink("directory").successes(), 1);
}

#[test]
fn start_archives_without_upload_and_spills_with_it() {
    let dir = temp_dir("start");
    let metrics = AgentMetrics::new();
    let archive = SinkSet::start(
        Some(&dir.path().join("archive")),
        DirectoryLimits::default(),
        None,
        &metrics,
    )
    .unwrap();
    let (window0, meta0) = window(0);
    archive.submit(&window0, &meta0);
    // Written off this thread: shutting down waits for it.
    archive.shutdown(Duration::from_secs(5));
    assert_eq!(
        spilled_files(&dir.path().join("archive")),
        ["billing-4321-1700000000000.pb.gz"]
    );

    let receiver = Receiver::start(&[], Reply::Status(200));
    let metrics = AgentMetrics::new();
    let upload = SinkSet::start(
        Some(&dir.path().join("spill")),
        DirectoryLimits::default(),
        Some(config(receiver.url(), UploadApi::Push)),
        &metrics,
    )
    .unwrap();
    upload.submit(&window0, &meta0);
    check_push(&receiver.next());
    let counters = metrics.sink("pyroscope");
    wait_for(
        "the delivery to be counted",
        Duration::from_secs(10),
        || counters.successes() == 1,
    );
    upload.shutdown(Duration::from_secs(5));
    // Delivered: nothing in the spill directory.
    assert!(spilled_files(&dir.path().join("spill")).is_empty());
}
