//! The upload sink speaking OTLP: what an OpenTelemetry Collector or Pyroscope's OTLP endpoint
//! receives, decoded with the generated types of `opentelemetry-proto` (no collector can be
//! installed here, so the receiver decodes every field the way the real schema defines it).

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use prost_otlp::Message;

use super::receiver::{refused_url, Captured, Receiver, Reply};
use super::{config, directory, spilled_files, upload, wait_for, window, START_MS};
use crate::export::metrics::AgentMetrics;
use crate::export::otlp::resource_attribute_map;
use crate::export::sinks::{DirectoryRole, Headers, SinkSet, UploadApi};
use crate::test_support::temp_dir;

/// The request an OTLP receiver got, checked as one: path, content type, gzip, and the decoded
/// request of the test window (service `billing`, pid 4321, 5 samples over two stacks).
pub(super) fn check_otlp(request: &Captured, start_ms: u64) -> ExportProfilesServiceRequest {
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1development/profiles");
    assert_eq!(
        request.header("Content-Type"),
        Some("application/x-protobuf")
    );
    assert_eq!(request.header("Content-Encoding"), Some("gzip"));
    let mut body = Vec::new();
    flate2::read::GzDecoder::new(&request.body[..])
        .read_to_end(&mut body)
        .expect("a gzipped body");
    let decoded = ExportProfilesServiceRequest::decode(body.as_slice()).expect("an OTLP request");
    let attributes = resource_attribute_map(&decoded);
    assert_eq!(attributes["service.name"], "billing");
    assert_eq!(attributes["process.runtime.name"], "CPython");
    assert_eq!(attributes["process.runtime.version"], "3.12.3");
    let profiles = &decoded.resource_profiles[0].scope_profiles[0].profiles;
    assert_eq!(profiles.len(), 1, "on-CPU only");
    let cpu = &profiles[0];
    assert_eq!(cpu.time_unix_nano, start_ms * 1_000_000);
    assert_eq!(cpu.duration_nano, 10_000_000_000);
    let total: i64 = cpu.samples.iter().flat_map(|s| &s.values).sum();
    assert_eq!(total, 5);
    let d = decoded.dictionary.as_ref().expect("a dictionary");
    let names: Vec<&str> = d.function_table[1..]
        .iter()
        .map(|f| d.string_table[f.name_strindex as usize].as_str())
        .collect();
    assert_eq!(names, ["work", "main"]);
    decoded
}

#[test]
fn otlp_upload_is_delivered_with_its_headers() {
    let receiver = Receiver::start(&[], Reply::Status(200));
    let metrics = AgentMetrics::new();
    let mut config = config(receiver.url(), UploadApi::Otlp);
    config.headers = "authorization=Bearer s3cret,x-scope-orgid=team-a"
        .parse::<Headers>()
        .unwrap();
    let sink = upload(config, None, &metrics);
    let sinks = SinkSet::new().with_upload(sink);
    let (window, meta) = window(0);
    sinks.submit(&window, &meta);

    let request = receiver.next();
    check_otlp(&request, START_MS);
    assert_eq!(request.header("authorization"), Some("Bearer s3cret"));
    assert_eq!(request.header("x-scope-orgid"), Some("team-a"));
    sinks.shutdown(Duration::from_secs(5));
    assert_eq!(metrics.sink("otlp").successes(), 1);
    assert_eq!(metrics.sink("pyroscope").successes(), 0);
}

/// The same spool guarantees as Pyroscope's: a profile the receiver could not take is spilled as
/// pprof, and sent as OTLP once the receiver is back.
#[test]
fn a_spilled_profile_reaches_the_otlp_receiver_once_it_is_back() {
    let dir = temp_dir("otlp-spool");
    let metrics = AgentMetrics::new();
    let spool = directory(dir.path(), DirectoryRole::Spool, &metrics);
    let mut down = config(refused_url(), UploadApi::Otlp);
    down.max_attempts = 1;
    let sink = upload(down, Some(&spool), &metrics);
    let counters = sink.metrics().clone();
    let sinks = SinkSet::new()
        .with_directory(Arc::clone(&spool), false)
        .with_upload(sink);
    let (window, meta) = window(0);
    sinks.submit(&window, &meta);
    wait_for("the spill", Duration::from_secs(10), || {
        counters.spilled() == 1
    });
    sinks.shutdown(Duration::from_secs(5));
    assert_eq!(spilled_files(dir.path()).len(), 1);

    // The next run finds the spool and delivers it.
    let receiver = Receiver::start(&[], Reply::Status(200));
    let sink = upload(
        config(receiver.url(), UploadApi::Otlp),
        Some(&spool),
        &metrics,
    );
    let sinks = SinkSet::new()
        .with_directory(Arc::clone(&spool), false)
        .with_upload(sink);
    check_otlp(&receiver.next(), START_MS);
    wait_for("the spool to drain", Duration::from_secs(10), || {
        spool.pending_len() == 0
    });
    sinks.shutdown(Duration::from_secs(5));
    assert_eq!(spilled_files(dir.path()), Vec::<String>::new());
}
