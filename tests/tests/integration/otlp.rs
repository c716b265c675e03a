//! The service sending OTLP profiles to a receiver that decodes them with the generated types of
//! `opentelemetry-proto` (no OpenTelemetry Collector or Pyroscope server can be installed on
//! these machines), naming the target from its OpenTelemetry environment and leaking nothing
//! else of it.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::AnyValue;
use prost_otlp::Message;

use pyagent_tests::agent::{host_wide_lock, pyagent_bin};
use pyagent_tests::http::{free_port, get as http_get};
use pyagent_tests::scratch::fresh_path;
use pyagent_tests::wait::wait_for;
use pyagent_tests::PythonProcess;

/// One request the receiver took.
pub(crate) struct Received {
    pub(crate) path: String,
    pub(crate) headers: BTreeMap<String, String>,
    /// The body, gunzipped.
    pub(crate) raw: Vec<u8>,
    pub(crate) request: ExportProfilesServiceRequest,
}

/// An OTLP/HTTP profiles receiver on a loopback port: answers 200 with an empty
/// `ExportProfilesServiceResponse`, hands each decoded request to the test.
pub(crate) fn start_receiver() -> (u16, mpsc::Receiver<Received>) {
    let server = tiny_http::Server::http("127.0.0.1:0").expect("bind the OTLP receiver");
    let port = server.server_addr().to_ip().expect("TCP").port();
    let (sender, received) = mpsc::channel();
    std::thread::spawn(move || {
        for mut request in server.incoming_requests() {
            let mut raw = Vec::new();
            request
                .as_reader()
                .read_to_end(&mut raw)
                .expect("read the body");
            let headers = request
                .headers()
                .iter()
                .map(|h| {
                    (
                        h.field.as_str().as_str().to_ascii_lowercase(),
                        h.value.as_str().to_string(),
                    )
                })
                .collect();
            let mut body = Vec::new();
            flate2::read::GzDecoder::new(&raw[..])
                .read_to_end(&mut body)
                .expect("a gzipped body");
            let decoded = ExportProfilesServiceRequest::decode(body.as_slice())
                .expect("an ExportProfilesServiceRequest");
            let received = Received {
                path: request.url().to_string(),
                headers,
                raw: body,
                request: decoded,
            };
            let _ =
                request.respond(tiny_http::Response::from_data(Vec::new()).with_status_code(200));
            if sender.send(received).is_err() {
                break;
            }
        }
    });
    (port, received)
}

pub(crate) fn text(value: &Option<AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(n)) => format!("int:{n}"),
        other => format!("{other:?}"),
    }
}

#[test]
fn service_sends_otlp_profiles_named_from_the_targets_opentelemetry_environment() {
    pyagent_bin();
    let _serial = host_wide_lock();
    let (receiver_port, received) = start_receiver();
    // Issue 15's check word for word (`authorization=secret`), and others of the kinds a target
    // holds: an attribute outside the kept ones, another variable.
    let secrets = ["secret", "attr-s3cret", "db-s3cret"];
    let target_env = [
        ("OTEL_SERVICE_NAME", "checkout"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "service.name=not-this,deployment.environment=prod,service.version=1.4.2,service.namespace=shop,team.token=attr-s3cret",
        ),
        ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=secret"),
        ("DB_PASSWORD", "db-s3cret"),
    ];
    let p = PythonProcess::ready_with_env("py312", "busy.py", &["90"], &target_env);
    let spool = fresh_path("otlp-spool");
    let metrics_port = free_port();
    let mut service = Command::new(pyagent_bin())
        .args(["--all-python", "--mode", "ebpf", "--interval", "2s"])
        .args([
            "--otlp-endpoint",
            &format!("http://127.0.0.1:{receiver_port}"),
        ])
        .arg("--output")
        .arg(&spool)
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
        .env("PYAGENT_OTLP_HEADERS", "authorization=Bearer agent-token")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the service");

    // The first request about the target (other Python processes of the host may come first).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut bodies = Vec::new();
    let ours = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let r = received
            .recv_timeout(left)
            .expect("an OTLP request about the target within 60 s");
        bodies.push(r.raw.clone());
        let pid = r.request.resource_profiles[0]
            .resource
            .as_ref()
            .expect("a resource")
            .attributes
            .iter()
            .find(|kv| kv.key == "process.pid")
            .map(|kv| text(&kv.value));
        if pid == Some(format!("int:{}", p.pid())) {
            break r;
        }
    };
    let metrics = wait_for("/metrics", Duration::from_secs(10), || {
        http_get(metrics_port, "/metrics").map(|(_, body)| body)
    });
    // SAFETY: signalling our own child.
    unsafe { libc::kill(service.id() as i32, libc::SIGTERM) };
    let mut stderr = String::new();
    service
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    assert!(service.wait().expect("exits").success(), "{stderr}");

    assert_eq!(ours.path, "/v1development/profiles");
    assert_eq!(ours.headers["content-type"], "application/x-protobuf");
    assert_eq!(ours.headers["content-encoding"], "gzip");
    assert_eq!(ours.headers["authorization"], "Bearer agent-token");

    let request = &ours.request;
    let resource = request.resource_profiles[0].resource.as_ref().unwrap();
    let attributes: BTreeMap<String, String> = resource
        .attributes
        .iter()
        .map(|kv| (kv.key.clone(), text(&kv.value)))
        .collect();
    assert_eq!(attributes["service.name"], "checkout", "{attributes:?}");
    assert_eq!(attributes["process.runtime.name"], "CPython");
    assert!(attributes["process.runtime.version"].starts_with("3.12"));
    assert!(!attributes["host.name"].is_empty());
    assert_eq!(attributes["deployment.environment.name"], "prod");
    assert_eq!(attributes["service.version"], "1.4.2");
    assert_eq!(attributes["service.namespace"], "shop");
    let expected_keys = [
        "deployment.environment.name",
        "host.name",
        "process.pid",
        "process.runtime.name",
        "process.runtime.version",
        "service.name",
        "service.namespace",
        "service.version",
    ];
    let keys: Vec<&str> = attributes.keys().map(String::as_str).collect();
    assert_eq!(keys, expected_keys, "no other attribute of the target");

    let scope = &request.resource_profiles[0].scope_profiles[0];
    assert_eq!(scope.scope.as_ref().unwrap().name, "pyagent");
    let d = request.dictionary.as_ref().expect("a dictionary");
    let s = |i: i32| d.string_table[i as usize].as_str();
    let cpu = scope
        .profiles
        .iter()
        .find(|p| s(p.sample_type.as_ref().unwrap().type_strindex) == "samples")
        .expect("a CPU profile");
    let period_type = cpu.period_type.as_ref().expect("a period type");
    assert_eq!(
        (s(period_type.type_strindex), s(period_type.unit_strindex)),
        ("cpu", "nanoseconds")
    );
    assert_eq!(cpu.period, 1_000_000_000 / 19);
    assert!(cpu.duration_nano > 0 && cpu.time_unix_nano > 0);
    // The target's hot path, leaf first, with its thread.
    let mut hot_samples = 0;
    for sample in &cpu.samples {
        let frames: Vec<String> = d.stack_table[sample.stack_index as usize]
            .location_indices
            .iter()
            .map(|&l| {
                let line = &d.location_table[l as usize].lines[0];
                let f = &d.function_table[line.function_index as usize];
                format!("{} {}", s(f.name_strindex), s(f.filename_strindex))
            })
            .collect();
        let attrs: BTreeMap<&str, String> = sample
            .attribute_indices
            .iter()
            .map(|&a| {
                let a = &d.attribute_table[a as usize];
                (s(a.key_strindex), text(&a.value))
            })
            .collect();
        assert_eq!(attrs["thread.id"], format!("int:{}", p.pid()), "{attrs:?}");
        assert!(!attrs["thread.name"].is_empty());
        if frames
            .first()
            .is_some_and(|f| f.starts_with("hot ") && f.ends_with("busy.py"))
        {
            assert!(frames[1].starts_with("warm "), "{frames:?}");
            hot_samples += sample.values[0];
        }
    }
    assert!(hot_samples > 0, "no sample in hot()");

    // Nothing of the target's environment but the names and attributes above went anywhere.
    let mut outputs: Vec<(String, Vec<u8>)> = bodies
        .into_iter()
        .chain(received.try_iter().map(|r| r.raw))
        .enumerate()
        .map(|(i, body)| (format!("request {i}"), body))
        .collect();
    outputs.push(("metrics".into(), metrics.into_bytes()));
    outputs.push(("stderr".into(), stderr.clone().into_bytes()));
    for entry in std::fs::read_dir(&spool).into_iter().flatten().flatten() {
        let bytes = std::fs::read(entry.path()).unwrap_or_default();
        let mut unpacked = Vec::new();
        let _ = flate2::read::GzDecoder::new(&bytes[..]).read_to_end(&mut unpacked);
        outputs.push((
            entry.path().display().to_string(),
            [bytes, unpacked].concat(),
        ));
    }
    for (what, bytes) in &outputs {
        let text = String::from_utf8_lossy(bytes);
        for secret in secrets.iter().chain(&["agent-token"]) {
            assert!(!text.contains(secret), "{secret} in {what}");
        }
    }
    let _ = std::fs::remove_dir_all(&spool);
}

/// A process that publishes its OpenTelemetry process context (OTEP 4719) is named by it, and
/// its kept attributes label its profiles, over what its environment says.
#[test]
fn a_published_process_context_names_the_service() {
    use pyagent::discovery::process_context::encode_payload;
    use pyagent_tests::agent::run_pyagent;
    use pyagent_tests::consumers::go_pprof_raw;

    pyagent_bin();
    let payload = encode_payload(vec![
        ("service.name", "ctx-checkout"),
        ("service.version", "3.1.0"),
        ("db.password", "ctx-s3cret"),
    ]);
    let hex: String = payload.iter().map(|b| format!("{b:02x}")).collect();
    let p = PythonProcess::ready_with_env(
        "py312",
        "otel_ctx.py",
        &[&hex, "60"],
        &[("OTEL_SERVICE_NAME", "from-env")],
    );
    let dir = fresh_path("otel-ctx");
    let out = run_pyagent(&[
        "--all-python",
        "--mode",
        "userspace",
        "-d",
        "2",
        "-o",
        dir.to_str().expect("utf-8"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let file = dir.join(format!("ctx-checkout-{}.pb.gz", p.pid()));
    assert!(file.exists(), "named by the published context: {stderr}");
    let raw = go_pprof_raw(&file);
    assert!(raw.contains("service_name:[ctx-checkout]"), "{raw}");
    assert!(raw.contains("service_version:[3.1.0]"), "{raw}");
    assert!(!raw.contains("ctx-s3cret") && !stderr.contains("ctx-s3cret"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// An SDK that publishes its process context after the agent found the process: the next
/// windows carry the published name.
#[test]
fn a_process_context_published_late_renames_the_next_windows() {
    use pyagent::discovery::process_context::encode_payload;

    pyagent_bin();
    let payload = encode_payload(vec![("service.name", "ctx-late")]);
    let hex: String = payload.iter().map(|b| format!("{b:02x}")).collect();
    let dir = fresh_path("otel-ctx-late");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let trigger = dir.join("publish-now");
    let mut p = PythonProcess::ready(
        "py312",
        "otel_ctx.py",
        &[&hex, "60", trigger.to_str().expect("utf-8")],
    );
    let out = dir.join("profiles");
    let metrics_port = free_port();
    let mut service = Command::new(pyagent_bin())
        .args(["--all-python", "--mode", "userspace", "--interval", "1s"])
        .arg("--output")
        .arg(&out)
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
        .stderr(Stdio::null())
        .spawn()
        .expect("start the service");
    let pid = p.pid();
    let named = |service: &str| {
        let prefix = format!("{service}-{pid}-");
        std::fs::read_dir(&out)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(&prefix))
    };
    // Found before it publishes: named by its script.
    wait_for(
        "a window named by the script",
        Duration::from_secs(60),
        || named("otel_ctx").then_some(()),
    );
    assert!(!named("ctx-late"));
    std::fs::write(&trigger, b"").expect("trigger");
    p.wait_for_line("published", Duration::from_secs(30));
    wait_for(
        "a window named by the context",
        Duration::from_secs(30),
        || named("ctx-late").then_some(()),
    );
    // SAFETY: signalling our own child.
    unsafe { libc::kill(service.id() as i32, libc::SIGTERM) };
    assert!(service.wait().expect("exits").success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--duration` with an upload target is the service for that long: with an interval longer
/// than the run, the target's profile reaches the receiver only because the run ends as the
/// service ends at SIGTERM, cutting the partial interval and delivering it.
#[test]
fn duration_with_an_otlp_endpoint_runs_the_service_and_delivers_at_the_end() {
    pyagent_bin();
    let _serial = host_wide_lock();
    let (receiver_port, received) = start_receiver();
    let p = PythonProcess::ready("py312", "busy.py", &["90"]);
    let spool = fresh_path("otlp-duration-spool");
    let mut run = Command::new(pyagent_bin())
        .args(["--all-python", "--mode", "ebpf", "--duration", "5"])
        .args(["--interval", "120s"])
        .args([
            "--otlp-endpoint",
            &format!("http://127.0.0.1:{receiver_port}"),
        ])
        .arg("--output")
        .arg(&spool)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start pyagent");
    let status = wait_for(
        "the --duration run to exit",
        Duration::from_secs(90),
        || run.try_wait().expect("wait for pyagent"),
    );
    let mut stderr = String::new();
    run.stderr
        .take()
        .expect("piped")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("running the service for"), "{stderr}");
    let ours = received.try_iter().any(|r| {
        r.request.resource_profiles.iter().any(|rp| {
            rp.resource.as_ref().is_some_and(|res| {
                res.attributes.iter().any(|kv| {
                    kv.key == "process.pid" && text(&kv.value) == format!("int:{}", p.pid())
                })
            })
        })
    });
    assert!(ours, "the target's profile reached the receiver: {stderr}");
    let _ = std::fs::remove_dir_all(&spool);
}
