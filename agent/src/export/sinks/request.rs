//! The two Pyroscope ingestion requests, as plain data (no I/O), so their exact shape is unit-tested.
//!
//! **`POST /ingest`** (the original Pyroscope HTTP API, still served by Grafana Pyroscope; docs:
//! `docs/sources/configure-server/about-server-api.md`; handler: `pkg/ingester/pyroscope/ingest_handler.go`).
//! Query: `name=<service>{k=v,...}`, `from`/`until` (Unix seconds), `format=pprof`, `sampleRate` (Hz),
//! `spyName`. With `format=pprof` the handler takes the *raw body* as the profile
//! (`pprof.RawProfile{RawData: b}`; a multipart form is only parsed when `format` is absent and the
//! content type is `multipart/form-data`), and `pkg/pprof.RawFromBytes` accepts it gzipped or not. So the
//! body is the gzipped pprof itself, sent as `application/octet-stream`. The name is parsed by
//! `api/model/labelset.Parse`: values are not quoted (a `"` would become part of the value) and end at `,`
//! or `}`; the service name may hold `[A-Za-z0-9_./-]`, label names `[A-Za-z0-9_.]`.
//!
//! **Push** (`api/push/v1/push.proto`, service `push.v1.PusherService`, method `Push`), over the Connect
//! protocol with JSON: `POST /push.v1.PusherService/Push`, `Content-Type: application/json`,
//! `Connect-Protocol-Version: 1`, body the protojson form of `PushRequest`:
//! `{"series":[{"labels":[{"name":..,"value":..}],"samples":[{"rawProfile":"<base64>","ID":"<uuid>"}]}]}`
//! (protojson names fields by their lowerCamelCase JSON name: `raw_profile` is `rawProfile`, `ID` stays
//! `ID`; `bytes` are standard base64 with padding). Labels: `__name__="process_cpu"` (the profile type,
//! as Pyroscope's own `/ingest` adapter sets for CPU), `__delta__="false"` (the profile is already a
//! delta: do not diff it against the previous one), `service_name`, then the profile's labels with names
//! reduced to `[A-Za-z_][A-Za-z0-9_]*`.

use std::time::UNIX_EPOCH;

use base64::Engine;

use super::{EncodedProfile, ProfileMeta};

/// `spyName` of `/ingest` and `pyroscope_spy` of push: which agent took the profile.
pub const SPY_NAME: &str = "pyagent";

/// The path of the Connect push method.
pub const PUSH_PATH: &str = "/push.v1.PusherService/Push";

/// The path of the ingest endpoint.
pub const INGEST_PATH: &str = "/ingest";

/// The service name as `/ingest` accepts it: `[A-Za-z0-9_./-]`, anything else becomes `_`.
fn ingest_service(service: &str) -> String {
    let service: String = service
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if service.is_empty() {
        "unknown".to_owned()
    } else {
        service
    }
}

/// A label name as both APIs accept it: `[A-Za-z_][A-Za-z0-9_]*` (the Prometheus rule, stricter than
/// `/ingest`'s, which also takes `.`).
fn label_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// A label value as `/ingest`'s name parser keeps it: `,` and `}` end a value there, and `{`/`=` would
/// confuse a reader, so all four become `_`; spaces at the ends are trimmed by the parser anyway.
fn ingest_value(value: &str) -> String {
    value
        .trim()
        .chars()
        .map(|c| {
            if matches!(c, ',' | '}' | '{' | '=') {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// The profile's labels as sent: `pid` (from the meta, unless a label sets it), then `meta.labels`;
/// names cleaned, reserved (`__*`) and `service_name` left out, empty values skipped; sorted by name.
fn series_labels(meta: &ProfileMeta) -> Vec<(String, String)> {
    let mut labels: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    labels.insert("pid".to_owned(), meta.pid.to_string());
    for (name, value) in &meta.labels {
        let name = label_name(name);
        if name.starts_with("__") || name == "service_name" || value.is_empty() {
            continue;
        }
        labels.insert(name, value.clone());
    }
    labels.into_iter().collect()
}

/// `/ingest`'s `name`: `<service>{label=value,...}`, for instance `web{host=node1,pid=42}`.
pub fn ingest_name(meta: &ProfileMeta) -> String {
    let labels: Vec<String> = series_labels(meta)
        .into_iter()
        .map(|(name, value)| format!("{name}={}", ingest_value(&value)))
        .collect();
    format!("{}{{{}}}", ingest_service(&meta.service), labels.join(","))
}

/// `/ingest`'s query parameters, in order, not yet percent-encoded.
pub fn ingest_query(profile: &EncodedProfile) -> Vec<(&'static str, String)> {
    let unix = |time: std::time::SystemTime| {
        time.duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs())
    };
    let from = unix(profile.meta.start);
    let until = unix(profile.meta.end).max(from);
    vec![
        ("name", ingest_name(&profile.meta)),
        ("from", from.to_string()),
        ("until", until.to_string()),
        ("format", "pprof".to_owned()),
        ("sampleRate", profile.sample_rate_hz.to_string()),
        ("spyName", SPY_NAME.to_owned()),
    ]
}

/// The push series labels: `__name__`, `__delta__`, `service_name`, `pyroscope_spy`, then the profile's.
pub fn push_labels(meta: &ProfileMeta) -> Vec<(String, String)> {
    let mut labels = vec![
        ("__name__".to_owned(), "process_cpu".to_owned()),
        ("__delta__".to_owned(), "false".to_owned()),
        ("service_name".to_owned(), meta.service.clone()),
        ("pyroscope_spy".to_owned(), SPY_NAME.to_owned()),
    ];
    labels.extend(
        series_labels(meta)
            .into_iter()
            .filter(|(name, _)| name != "pyroscope_spy"),
    );
    labels
}

/// The JSON body of `PushRequest` with one series holding `profile` under the sample id `id`.
pub fn push_body(profile: &EncodedProfile, id: &str) -> String {
    let labels: Vec<serde_json::Value> = push_labels(&profile.meta)
        .into_iter()
        .map(|(name, value)| serde_json::json!({ "name": name, "value": value }))
        .collect();
    let raw = base64::engine::general_purpose::STANDARD.encode(&profile.bytes);
    serde_json::json!({
        "series": [{
            "labels": labels,
            "samples": [{ "rawProfile": raw, "ID": id }],
        }]
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn profile() -> EncodedProfile {
        let start = UNIX_EPOCH + Duration::from_millis(1_700_000_000_400);
        let labels = BTreeMap::from([
            ("host".to_owned(), "node-1".to_owned()),
            ("python.version".to_owned(), "3.12.3".to_owned()),
            ("cmd".to_owned(), "a,b}c".to_owned()),
            ("__secret".to_owned(), "x".to_owned()),
            ("empty".to_owned(), String::new()),
        ]);
        EncodedProfile {
            meta: Arc::new(ProfileMeta {
                service: "billing api".to_owned(),
                pid: 42,
                start,
                end: start + Duration::from_secs(10),
                labels,
            }),
            bytes: vec![1, 2, 3, 250].into(),
            sample_rate_hz: 19,
        }
    }

    #[test]
    fn ingest_query_follows_the_api() {
        let query = ingest_query(&profile());
        assert_eq!(
            query,
            [
                (
                    "name",
                    "billing_api{cmd=a_b_c,host=node-1,pid=42,python_version=3.12.3}".to_owned()
                ),
                ("from", "1700000000".to_owned()),
                ("until", "1700000010".to_owned()),
                ("format", "pprof".to_owned()),
                ("sampleRate", "19".to_owned()),
                ("spyName", "pyagent".to_owned()),
            ]
        );
    }

    #[test]
    fn push_body_is_protojson() {
        let body: serde_json::Value = serde_json::from_str(&push_body(&profile(), "0f0f")).unwrap();
        let series = &body["series"][0];
        let labels: Vec<(&str, &str)> = series["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| (l["name"].as_str().unwrap(), l["value"].as_str().unwrap()))
            .collect();
        assert_eq!(
            labels,
            [
                ("__name__", "process_cpu"),
                ("__delta__", "false"),
                ("service_name", "billing api"),
                ("pyroscope_spy", "pyagent"),
                ("cmd", "a,b}c"),
                ("host", "node-1"),
                ("pid", "42"),
                ("python_version", "3.12.3"),
            ]
        );
        assert_eq!(series["samples"][0]["rawProfile"], "AQID+g==");
        assert_eq!(series["samples"][0]["ID"], "0f0f");
    }
}
