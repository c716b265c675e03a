//! Sink tests against a local HTTP receiver that checks requests the way Pyroscope's handlers read them
//! (no Pyroscope server is installable here), and against the real file system.

use std::collections::{BTreeMap, VecDeque};
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use base64::Engine;
use flate2::read::GzDecoder;
use pprof::protos::Profile;
use prost::Message;

use super::*;
use crate::aggregate::tests::{frame, sample};
use crate::aggregate::Aggregator;
use crate::export::metrics::{AgentMetrics, FailureReason, SpoolOutcome};
use crate::test_support::temp_dir;

/// How the receiver answers one request.
#[derive(Debug, Clone, Copy)]
enum Reply {
    Status(u16),
    /// Read the request, never answer (until the receiver is dropped).
    Hang,
    /// The status the test last set ([`Receiver::set_status`]): a store that goes down and comes back.
    Current,
}

/// One request as the receiver saw it.
#[derive(Debug)]
struct Captured {
    method: String,
    path: String,
    query: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// The status the receiver answered with (0: none, the request hangs).
    answered: u16,
}

impl Captured {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// A local HTTP server answering from a script, then with `fallback`.
struct Receiver {
    addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    requests: mpsc::Receiver<Captured>,
    thread: Option<JoinHandle<()>>,
    current: Arc<std::sync::atomic::AtomicU16>,
}

impl Receiver {
    fn start(script: &[Reply], fallback: Reply) -> Receiver {
        let server =
            Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind the test receiver"));
        let addr = server
            .server_addr()
            .to_ip()
            .expect("the receiver listens on TCP");
        let (sender, requests) = mpsc::channel();
        let mut script: VecDeque<Reply> = script.iter().copied().collect();
        let current = Arc::new(std::sync::atomic::AtomicU16::new(200));
        let thread = {
            let server = Arc::clone(&server);
            let current = Arc::clone(&current);
            thread::spawn(move || {
                let mut held = Vec::new();
                for mut request in server.incoming_requests() {
                    let mut body = Vec::new();
                    request
                        .as_reader()
                        .read_to_end(&mut body)
                        .expect("read request body");
                    let (path, query) =
                        request.url().split_once('?').unwrap_or((request.url(), ""));
                    let reply = match script.pop_front().unwrap_or(fallback) {
                        Reply::Current => {
                            Reply::Status(current.load(std::sync::atomic::Ordering::SeqCst))
                        }
                        reply => reply,
                    };
                    let captured = Captured {
                        method: request.method().to_string(),
                        path: path.to_owned(),
                        query: parse_query(query),
                        headers: request
                            .headers()
                            .iter()
                            .map(|h| (h.field.to_string(), h.value.to_string()))
                            .collect(),
                        body,
                        answered: match reply {
                            Reply::Status(status) => status,
                            _ => 0,
                        },
                    };
                    let _ = sender.send(captured);
                    match reply {
                        Reply::Status(status) => {
                            let body = if status == 200 { "{}" } else { "store says no" };
                            let _ = request.respond(
                                tiny_http::Response::from_string(body).with_status_code(status),
                            );
                        }
                        Reply::Hang | Reply::Current => held.push(request),
                    }
                }
                drop(held);
            })
        };
        Receiver {
            addr,
            server,
            requests,
            thread: Some(thread),
            current,
        }
    }

    /// The status [`Reply::Current`] answers with from now on.
    fn set_status(&self, status: u16) {
        self.current
            .store(status, std::sync::atomic::Ordering::SeqCst);
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next request, waiting up to 10 s.
    fn next(&self) -> Captured {
        self.requests
            .recv_timeout(Duration::from_secs(10))
            .expect("the receiver got no request within 10 s")
    }

    /// Requests received so far and not yet taken.
    fn pending(&self) -> usize {
        self.requests.try_iter().count()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Percent-decoding as Go's `url.ParseQuery` does it (`+` is a space).
fn parse_query(query: &str) -> Vec<(String, String)> {
    fn decode(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'%' => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).expect("ascii escape");
                    out.push(u8::from_str_radix(hex, 16).expect("hex escape"));
                    i += 3;
                }
                b'+' => {
                    out.push(b' ');
                    i += 1;
                }
                b => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        String::from_utf8(out).expect("UTF-8 query")
    }
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(key), decode(value))
        })
        .collect()
}

/// A closed local port: connecting is refused.
fn refused_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local addr");
    drop(listener);
    format!("http://{addr}")
}

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

/// Decodes gzipped pprof and checks it holds the window of [`window`].
fn check_profile(gzipped: &[u8]) -> Profile {
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
fn check_ingest(request: &Captured, offset_ms: u64) -> Profile {
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
fn check_push(request: &Captured) -> Profile {
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

fn config(url: String, api: PyroscopeApi) -> PyroscopeConfig {
    PyroscopeConfig {
        timeout: Duration::from_secs(5),
        backoff_initial: Duration::from_millis(5),
        backoff_max: Duration::from_millis(20),
        ..PyroscopeConfig::new(url, api)
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

#[test]
fn ingest_upload_is_delivered() {
    let receiver = Receiver::start(&[], Reply::Status(200));
    let metrics = AgentMetrics::new();
    let mut config = config(receiver.url(), PyroscopeApi::Ingest);
    config.auth = Some(Auth::Basic {
        user: "agent".into(),
        password: "s3cret".into(),
    });
    config.tenant = Some("team-a".into());
    let sink = PyroscopeSink::start(config, None, metrics.sink("pyroscope")).unwrap();
    let sinks = SinkSet::new().with_pyroscope(sink);
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
    let mut config = config(format!("{}/", receiver.url()), PyroscopeApi::Push);
    config.auth = Some(Auth::Bearer("tok".into()));
    let sink = PyroscopeSink::start(config, None, metrics.sink("pyroscope")).unwrap();
    let sinks = SinkSet::new().with_pyroscope(sink);
    let (window, meta) = window(0);
    sinks.submit(&window, &meta);

    let request = receiver.next();
    check_push(&request);
    assert_eq!(request.header("Authorization"), Some("Bearer tok"));
    assert_eq!(request.header("X-Scope-OrgID"), None);
    sinks.shutdown(Duration::from_secs(5));
    assert_eq!(metrics.sink("pyroscope").successes(), 1);
}

#[test]
fn server_error_is_retried_and_delivered_once() {
    let receiver = Receiver::start(&[Reply::Status(503)], Reply::Status(200));
    let metrics = AgentMetrics::new();
    let sink = PyroscopeSink::start(
        config(receiver.url(), PyroscopeApi::Push),
        None,
        metrics.sink("pyroscope"),
    )
    .unwrap();
    let counters = sink.metrics().clone();
    let sinks = SinkSet::new().with_pyroscope(sink);
    let (window, meta) = window(0);
    sinks.submit(&window, &meta);

    let first = receiver.next();
    let second = receiver.next();
    check_push(&first);
    check_push(&second);
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

#[test]
fn timeout_is_retried() {
    let receiver = Receiver::start(&[Reply::Hang], Reply::Status(200));
    let metrics = AgentMetrics::new();
    let mut config = config(receiver.url(), PyroscopeApi::Ingest);
    config.timeout = Duration::from_millis(300);
    let sink = PyroscopeSink::start(config, None, metrics.sink("pyroscope")).unwrap();
    let counters = sink.metrics().clone();
    let sinks = SinkSet::new().with_pyroscope(sink);
    let (window, meta) = window(0);
    sinks.submit(&window, &meta);

    check_ingest(&receiver.next(), 0);
    check_ingest(&receiver.next(), 0);
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

#[test]
fn refused_connection_spills_to_the_directory() {
    let dir = temp_dir("spill-refused");
    let metrics = AgentMetrics::new();
    let spill = directory(dir.path(), DirectoryRole::Spool, &metrics);
    let mut config = config(refused_url(), PyroscopeApi::Push);
    config.max_attempts = 3;
    let sink =
        PyroscopeSink::start(config, Some(Arc::clone(&spill)), metrics.sink("pyroscope")).unwrap();
    let counters = sink.metrics().clone();
    let sinks = SinkSet::new()
        .with_directory(spill, false)
        .with_pyroscope(sink);
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

#[test]
fn refused_without_directory_is_counted_as_dropped() {
    let metrics = AgentMetrics::new();
    let mut config = config(refused_url(), PyroscopeApi::Ingest);
    config.max_attempts = 2;
    let sink = PyroscopeSink::start(config, None, metrics.sink("pyroscope")).unwrap();
    let counters = sink.metrics().clone();
    let (window, meta) = window(0);
    SinkSet::new().with_pyroscope(sink).submit(&window, &meta);
    // Dropping the set shuts the sink down; the profile was dropped before or at shutdown.
    assert_eq!(counters.submitted_count(), 1);
    assert_eq!(counters.successes() + counters.spilled(), 0);
    assert_eq!(counters.dropped_total(), 1);
}

#[test]
fn client_error_is_not_retried_and_spilled() {
    let receiver = Receiver::start(&[], Reply::Status(400));
    let dir = temp_dir("spill-4xx");
    let metrics = AgentMetrics::new();
    let spill = directory(dir.path(), DirectoryRole::Spool, &metrics);
    let sink = PyroscopeSink::start(
        config(receiver.url(), PyroscopeApi::Ingest),
        Some(Arc::clone(&spill)),
        metrics.sink("pyroscope"),
    )
    .unwrap();
    let counters = sink.metrics().clone();
    let sinks = SinkSet::new().with_pyroscope(sink);
    let (window, meta) = window(0);
    sinks.submit(&window, &meta);
    check_ingest(&receiver.next(), 0);
    wait_for("the spill", Duration::from_secs(10), || {
        counters.spilled() == 1
    });
    sinks.shutdown(Duration::from_secs(5));
    assert_eq!(receiver.pending(), 0, "a 4xx must not be retried");
    assert_eq!(counters.failures(FailureReason::Http4xx), 1);
    assert_eq!(counters.retries(), 0);
    assert_eq!(spilled_files(dir.path()).len(), 1);
}

#[test]
fn full_queue_spills_and_shutdown_beats_a_hanging_store() {
    let receiver = Receiver::start(&[], Reply::Hang);
    let dir = temp_dir("spill-full");
    let metrics = AgentMetrics::new();
    let spill = directory(dir.path(), DirectoryRole::Spool, &metrics);
    let mut config = config(receiver.url(), PyroscopeApi::Push);
    config.queue_capacity = 2;
    config.timeout = Duration::from_secs(60);
    let sink =
        PyroscopeSink::start(config, Some(Arc::clone(&spill)), metrics.sink("pyroscope")).unwrap();
    let counters = sink.metrics().clone();
    let sinks = SinkSet::new()
        .with_directory(spill, false)
        .with_pyroscope(sink);

    // The first profile is taken by the upload thread and hangs in the store.
    let (window0, meta0) = window(0);
    sinks.submit(&window0, &meta0);
    check_push(&receiver.next());
    // Two fit in the queue; the rest spill at once, without waiting on the network.
    let submitting = Instant::now();
    for i in 1..=20u64 {
        let (window, meta) = window(i * 10_000);
        sinks.submit(&window, &meta);
        let queued = sinks.pyroscope().unwrap().queue_len();
        assert!(queued <= 2, "queue grew to {queued}");
    }
    assert!(
        submitting.elapsed() < Duration::from_secs(30),
        "submit waited for the hanging store"
    );
    assert_eq!(sinks.pyroscope().unwrap().queue_len(), 2);
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

#[test]
fn archive_and_upload_both_get_the_profile() {
    let receiver = Receiver::start(&[], Reply::Status(200));
    let dir = temp_dir("archive");
    let metrics = AgentMetrics::new();
    let archive = directory(dir.path(), DirectoryRole::Archive, &metrics);
    let sink = PyroscopeSink::start(
        config(receiver.url(), PyroscopeApi::Ingest),
        Some(Arc::clone(&archive)),
        metrics.sink("pyroscope"),
    )
    .unwrap();
    let sinks = SinkSet::new()
        .with_directory(archive, true)
        .with_pyroscope(sink);
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
    assert_eq!(
        spilled_files(&dir.path().join("archive")),
        ["billing-4321-1700000000000.pb.gz"]
    );

    let receiver = Receiver::start(&[], Reply::Status(200));
    let metrics = AgentMetrics::new();
    let upload = SinkSet::start(
        Some(&dir.path().join("spill")),
        DirectoryLimits::default(),
        Some(config(receiver.url(), PyroscopeApi::Push)),
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

/// The `from` (window start, Unix seconds) of each request the receiver answered with 200, in order.
fn delivered_starts(receiver: &Receiver) -> Vec<u64> {
    receiver
        .requests
        .try_iter()
        .filter(|request| request.answered == 200)
        .map(|request| {
            request
                .query
                .iter()
                .find(|(key, _)| key == "from")
                .and_then(|(_, value)| value.parse().ok())
                .expect("a from parameter")
        })
        .collect()
}

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
    let mut config = config(receiver.url(), PyroscopeApi::Ingest);
    config.queue_capacity = 2;
    config.max_attempts = 1;
    let sink =
        PyroscopeSink::start(config, Some(Arc::clone(&spool)), metrics.sink("pyroscope")).unwrap();
    let counters = sink.metrics().clone();
    let sinks = SinkSet::new()
        .with_directory(Arc::clone(&spool), false)
        .with_pyroscope(sink);
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
        let mut config = config(refused_url(), PyroscopeApi::Push);
        config.max_attempts = 1;
        let sink = PyroscopeSink::start(config, Some(spool), metrics.sink("pyroscope")).unwrap();
        let sinks = SinkSet::new().with_pyroscope(sink);
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
    let sink = PyroscopeSink::start(
        config(receiver.url(), PyroscopeApi::Push),
        Some(Arc::clone(&spool)),
        metrics.sink("pyroscope"),
    )
    .unwrap();
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
