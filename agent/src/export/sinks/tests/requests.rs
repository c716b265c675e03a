//! What a request must look like for Pyroscope's handlers to take it, and the profile it carries.

use std::collections::BTreeMap;
use std::io::Read;

use base64::Engine;
use flate2::read::GzDecoder;
use pprof::protos::Profile;
use prost::Message;

use super::receiver::Captured;
use super::START_MS;
use crate::export::sinks::UploadApi;

/// Checks a request of the test window offset by `offset_ms` as the receiver of `api` reads it.
pub(super) fn check_request(api: UploadApi, request: &Captured, offset_ms: u64) {
    match api {
        UploadApi::Ingest => {
            check_ingest(request, offset_ms);
        }
        UploadApi::Push => {
            check_push(request);
        }
        UploadApi::Otlp => {
            super::otlp::check_otlp(request, START_MS + offset_ms);
        }
    }
}

/// Decodes gzipped pprof and checks it holds the window of [`window`].
pub(super) fn check_profile(gzipped: &[u8]) -> Profile {
    assert_eq!(&gzipped[..2], &[0x1f, 0x8b], "not gzip");
    let mut raw = Vec::new();
    GzDecoder::new(gzipped)
        .read_to_end(&mut raw)
        .expect("gunzip the profile");
    let profile = Profile::decode(raw.as_slice()).expect("decode pprof");
    let total: i64 = profile.sample.iter().map(|s| s.value[0]).sum();
    assert_eq!(total, 5, "samples in the uploaded profile");
    let functions: Vec<&str> = profile
        .function
        .iter()
        .map(|f| profile.string_table[f.name as usize].as_str())
        .collect();
    assert!(functions.contains(&"work"), "{functions:?}");
    profile
}

/// Checks an `/ingest` request exactly as `ingest_handler.go` reads it; returns the profile.
pub(super) fn check_ingest(request: &Captured, offset_ms: u64) -> Profile {
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/ingest");
    let from = (START_MS + offset_ms) / 1000;
    let expected: Vec<(String, String)> = [
        (
            "name",
            "billing{host=node-1,pid=4321,python_version=3.12.3}".to_owned(),
        ),
        ("from", from.to_string()),
        ("until", (from + 10).to_string()),
        ("format", "pprof".to_owned()),
        ("sampleRate", "19".to_owned()),
        ("spyName", "pyagent".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(request.query, expected);
    assert_eq!(
        request.header("Content-Type"),
        Some("application/octet-stream")
    );
    assert_eq!(
        request.header("Content-Length"),
        Some(request.body.len().to_string().as_str())
    );
    check_profile(&request.body)
}

/// Checks a Connect push request against `push.v1.PusherService/Push` in protojson; returns the profile.
pub(super) fn check_push(request: &Captured) -> Profile {
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/push.v1.PusherService/Push");
    assert!(request.query.is_empty(), "{:?}", request.query);
    assert_eq!(request.header("Content-Type"), Some("application/json"));
    assert_eq!(request.header("Connect-Protocol-Version"), Some("1"));
    let body: serde_json::Value = serde_json::from_slice(&request.body).expect("JSON body");
    let top: Vec<&String> = body.as_object().expect("object").keys().collect();
    assert_eq!(top, ["series"]);
    let series = body["series"].as_array().expect("series array");
    assert_eq!(series.len(), 1);
    let series = series[0].as_object().expect("series object");
    let mut keys: Vec<&String> = series.keys().collect();
    keys.sort();
    assert_eq!(keys, ["labels", "samples"]);
    let labels: BTreeMap<&str, &str> = series["labels"]
        .as_array()
        .expect("labels array")
        .iter()
        .map(|label| {
            let label = label.as_object().expect("label object");
            assert_eq!(label.len(), 2, "{label:?}");
            (
                label["name"].as_str().expect("name"),
                label["value"].as_str().expect("value"),
            )
        })
        .collect();
    assert_eq!(
        labels,
        BTreeMap::from([
            ("__name__", "process_cpu"),
            ("__delta__", "false"),
            ("service_name", "billing"),
            ("pyroscope_spy", "pyagent"),
            ("host", "node-1"),
            ("pid", "4321"),
            ("python_version", "3.12.3"),
        ])
    );
    let samples = series["samples"].as_array().expect("samples array");
    assert_eq!(samples.len(), 1);
    let sample = samples[0].as_object().expect("sample object");
    let mut keys: Vec<&String> = sample.keys().collect();
    keys.sort();
    assert_eq!(keys, ["ID", "rawProfile"]);
    let id = sample["ID"].as_str().expect("ID string");
    assert_eq!(id.len(), 36, "{id}");
    let raw = base64::engine::general_purpose::STANDARD
        .decode(sample["rawProfile"].as_str().expect("rawProfile string"))
        .expect("standard base64");
    check_profile(&raw)
}
