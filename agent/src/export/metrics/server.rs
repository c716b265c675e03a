//! The HTTP endpoint of the agent: `/metrics`, `/healthz` and `/debug/pprof/profile`.
//!
//! One thread accepts and answers requests (tiny_http parses them on its own small pool); a CPU profile of
//! the agent itself, which takes seconds, runs on a thread of its own so `/metrics` keeps answering. Only
//! one self-profile runs at a time: the `pprof` crate's profiler is process-wide (`setitimer(ITIMER_PROF)`
//! and a `SIGPROF` handler), so a second request gets 409.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use flate2::write::GzEncoder;
use flate2::Compression;
use prometheus::{Encoder, Registry, TextEncoder};
use prost::Message;
use tiny_http::{Header, Method, Request, Response, Server};

use super::{AgentMetrics, SinkHealth};

/// Where the metrics server listens unless configured otherwise (9464: the port OpenTelemetry's Prometheus
/// exporter uses, free on most hosts).
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9464";

/// Profile length when `/debug/pprof/profile` has no `seconds` (as Go's `net/http/pprof`).
const DEFAULT_PROFILE_SECONDS: u64 = 30;

/// Longest self-profile one request may ask for.
const MAX_PROFILE_SECONDS: u64 = 300;

/// Sampling frequency of the self-profile: 99 Hz, off the round numbers timers tick at.
const PROFILE_HZ: i32 = 99;

/// Why the metrics server could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// Another process listens on the address.
    #[error("metrics address {addr} is already in use (choose another one with --metrics-addr)")]
    AddrInUse {
        /// The address asked for.
        addr: SocketAddr,
        /// The bind error.
        #[source]
        source: io::Error,
    },
    /// Binding failed for another reason (no such local address, privileged port).
    #[error("cannot listen on metrics address {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The bind error.
        #[source]
        source: io::Error,
    },
    /// The HTTP server or its thread could not start.
    #[error("cannot start the metrics server on {addr}")]
    Start {
        /// The address bound.
        addr: SocketAddr,
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A stop flag threads can wait on.
#[derive(Default)]
struct Stop {
    stopped: Mutex<bool>,
    changed: Condvar,
}

impl Stop {
    fn set(&self) {
        *self.stopped.lock().expect("stop flag poisoned") = true;
        self.changed.notify_all();
    }

    fn is_set(&self) -> bool {
        *self.stopped.lock().expect("stop flag poisoned")
    }

    /// Waits up to `timeout`; returns whether the flag was set meanwhile.
    fn wait(&self, timeout: Duration) -> bool {
        let stopped = self.stopped.lock().expect("stop flag poisoned");
        let (stopped, _) = self
            .changed
            .wait_timeout_while(stopped, timeout, |stopped| !*stopped)
            .expect("stop flag poisoned");
        *stopped
    }
}

/// The running metrics server; stops on [`shutdown`](MetricsServer::shutdown) or drop.
pub struct MetricsServer {
    addr: SocketAddr,
    server: Arc<Server>,
    stop: Arc<Stop>,
    acceptor: Option<JoinHandle<()>>,
    profiles: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Starts serving `metrics` on `addr` (`127.0.0.1:0` picks a free port; see
/// [`local_addr`](MetricsServer::local_addr)).
pub fn serve(addr: SocketAddr, metrics: &AgentMetrics) -> Result<MetricsServer, MetricsError> {
    let listener = TcpListener::bind(addr).map_err(|source| {
        if source.kind() == io::ErrorKind::AddrInUse {
            MetricsError::AddrInUse { addr, source }
        } else {
            MetricsError::Bind { addr, source }
        }
    })?;
    let local = listener
        .local_addr()
        .map_err(|source| MetricsError::Bind { addr, source })?;
    let server =
        Arc::new(
            Server::from_listener(listener, None).map_err(|source| MetricsError::Start {
                addr: local,
                source,
            })?,
        );
    let stop = Arc::new(Stop::default());
    let profiles = Arc::new(Mutex::new(Vec::new()));
    let acceptor = {
        let server = Arc::clone(&server);
        let stop = Arc::clone(&stop);
        let profiles = Arc::clone(&profiles);
        let registry = metrics.registry().clone();
        let health = metrics.sink_health();
        thread::Builder::new()
            .name("pyagent-metrics".into())
            .spawn(move || accept(&server, &registry, &health, &stop, &profiles))
            .map_err(|source| MetricsError::Start {
                addr: local,
                source: Box::new(source),
            })?
    };
    Ok(MetricsServer {
        addr: local,
        server,
        stop,
        acceptor: Some(acceptor),
        profiles,
    })
}

impl MetricsServer {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting requests, cuts a running self-profile short and waits for the threads.
    pub fn shutdown(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        self.stop.set();
        self.server.unblock();
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let profiles =
            std::mem::take(&mut *self.profiles.lock().expect("profile threads poisoned"));
        for profile in profiles {
            let _ = profile.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

fn accept(
    server: &Server,
    registry: &Registry,
    health: &SinkHealth,
    stop: &Arc<Stop>,
    profiles: &Mutex<Vec<JoinHandle<()>>>,
) {
    loop {
        let request = match server.recv() {
            Ok(request) => request,
            // `unblock` (shutdown) or an accept error; only the first ends the loop.
            Err(_) if stop.is_set() => return,
            Err(err) => {
                tracing::debug!("metrics server: {err}");
                continue;
            }
        };
        let (path, query) = split_url(request.url());
        match (request.method(), path) {
            (Method::Get, "/metrics") => respond(request, metrics_response(registry)),
            (Method::Get, "/healthz") => respond(request, health_response(health)),
            (Method::Get, "/debug/pprof/profile") => match profile_seconds(&query) {
                Ok(seconds) => {
                    let stop = Arc::clone(stop);
                    let spawned = thread::Builder::new()
                        .name("pyagent-self-profile".into())
                        .spawn(move || respond(request, self_profile(seconds, &stop)));
                    match spawned {
                        Ok(handle) => {
                            let mut profiles = profiles.lock().expect("profile threads poisoned");
                            profiles.retain(|handle| !handle.is_finished());
                            profiles.push(handle);
                        }
                        Err(err) => tracing::warn!("cannot start the self-profile thread: {err}"),
                    }
                }
                Err(message) => respond(request, text(400, &message)),
            },
            (Method::Get, _) => respond(request, text(404, "not found")),
            _ => respond(request, text(405, "only GET is served")),
        }
    }
}

type BoxedResponse = Response<io::Cursor<Vec<u8>>>;

/// 200 `ok`, or 503 naming each failing sink: profiles are being lost, which an orchestrator and an
/// operator should see without reading counters.
fn health_response(health: &SinkHealth) -> BoxedResponse {
    let problems = health.problems();
    if problems.is_empty() {
        text(200, "ok")
    } else {
        text(503, &format!("failing: {}\n", problems.join("; ")))
    }
}

fn respond(request: Request, response: BoxedResponse) {
    if let Err(err) = request.respond(response) {
        tracing::debug!("metrics server: cannot answer: {err}");
    }
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("static header is valid")
}

fn text(status: u16, body: &str) -> BoxedResponse {
    Response::from_string(body)
        .with_status_code(status)
        .with_header(header("Content-Type", "text/plain; charset=utf-8"))
}

fn metrics_response(registry: &Registry) -> BoxedResponse {
    let encoder = TextEncoder::new();
    let mut body = Vec::new();
    if let Err(err) = encoder.encode(&registry.gather(), &mut body) {
        return text(500, &format!("cannot encode metrics: {err}"));
    }
    Response::from_data(body).with_header(header("Content-Type", encoder.format_type()))
}

/// `/path?query` -> (`/path`, query pairs). Values are used as numbers only, so no percent-decoding.
fn split_url(url: &str) -> (&str, HashMap<&str, &str>) {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let pairs = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
        .collect();
    (path, pairs)
}

fn profile_seconds(query: &HashMap<&str, &str>) -> Result<u64, String> {
    let Some(value) = query.get("seconds") else {
        return Ok(DEFAULT_PROFILE_SECONDS);
    };
    match value.parse::<u64>() {
        Ok(seconds) if (1..=MAX_PROFILE_SECONDS).contains(&seconds) => Ok(seconds),
        _ => Err(format!(
            "seconds: must be a whole number from 1 to {MAX_PROFILE_SECONDS}, not {value:?}"
        )),
    }
}

/// Profiles the agent's own CPU use for `seconds` (or until shutdown) and answers with a gzipped pprof.
fn self_profile(seconds: u64, stop: &Stop) -> BoxedResponse {
    // Unwinding through these from a signal handler can deadlock (pprof-rs README).
    let guard = match pprof::ProfilerGuardBuilder::default()
        .frequency(PROFILE_HZ)
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
    {
        Ok(guard) => guard,
        Err(pprof::Error::Running) => return text(409, "a self-profile is already running"),
        Err(err) => return text(500, &format!("cannot start the profiler: {err}")),
    };
    stop.wait(Duration::from_secs(seconds));
    let profile = guard.report().build().and_then(|report| report.pprof());
    drop(guard);
    let profile = match profile {
        Ok(profile) => profile,
        Err(err) => return text(500, &format!("cannot build the profile: {err}")),
    };
    let mut gzip = GzEncoder::new(Vec::new(), Compression::default());
    let body = gzip
        .write_all(&profile.encode_to_vec())
        .and_then(|()| gzip.finish());
    match body {
        Ok(body) => Response::from_data(body)
            .with_header(header("Content-Type", "application/octet-stream"))
            .with_header(header(
                "Content-Disposition",
                "attachment; filename=\"profile\"",
            )),
        Err(err) => text(500, &format!("cannot compress the profile: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::export::metrics::tests::busy_metrics;

    /// A GET through ureq (any status is an answer, not an error); returns (status, body).
    fn get(addr: SocketAddr, path: &str) -> (u16, Vec<u8>) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut response = agent
            .get(format!("http://{addr}{path}"))
            .call()
            .expect("GET from the metrics server");
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(64 * 1024 * 1024)
            .read_to_vec()
            .expect("read the body");
        (status, body)
    }

    fn local() -> SocketAddr {
        "127.0.0.1:0".parse().expect("valid address")
    }

    #[test]
    fn metrics_pass_promtool() {
        let metrics = busy_metrics();
        let server = serve(local(), &metrics).expect("start the metrics server");
        let (status, body) = get(server.local_addr(), "/metrics");
        assert_eq!(status, 200);
        let text = String::from_utf8(body).expect("UTF-8 exposition");
        for expected in [
            "pyagent_samples_total 109",
            "pyagent_python_wall_seconds_total{process_role=\"\",python_version=\"3.12.3\",reason=\"lock\",service=\"web\"} 0.5",
            "pyagent_samples_lost_total{reason=\"torn_read\"} 3",
            "pyagent_bpf_runs_total 200",
            "pyagent_cache_lookups_total{cache=\"page\",result=\"hit\"} 90",
            "pyagent_processes{state=\"ready\"} 2",
            "pyagent_python_info{service=\"web\",version=\"3.12.3\"} 1",
            "pyagent_sink_failures_total{reason=\"timeout\",sink=\"pyroscope\"} 1",
            "pyagent_sink_duration_seconds_bucket",
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }

        let mut promtool = match Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(child) => child,
            Err(err) => panic!("cannot run promtool ({err}); apt-get install prometheus"),
        };
        promtool
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(text.as_bytes())
            .expect("feed promtool");
        let output = promtool.wait_with_output().expect("wait for promtool");
        assert!(
            output.status.success(),
            "promtool check metrics failed ({}):\n{}{}\n--- input ---\n{text}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        server.shutdown();
    }

    #[test]
    fn healthz_and_unknown_paths() {
        let metrics = AgentMetrics::new();
        let server = serve(local(), &metrics).expect("start the metrics server");
        assert_eq!(get(server.local_addr(), "/healthz"), (200, b"ok".to_vec()));
        assert_eq!(get(server.local_addr(), "/nope").0, 404);
        let (status, body) = get(server.local_addr(), "/debug/pprof/profile?seconds=0");
        assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
        server.shutdown();
    }

    #[test]
    fn port_in_use_is_one_line() {
        let metrics = AgentMetrics::new();
        let first = serve(local(), &metrics).expect("start the metrics server");
        let err = serve(first.local_addr(), &metrics).expect_err("second bind must fail");
        assert!(matches!(err, MetricsError::AddrInUse { .. }), "{err:?}");
        let message = format!("{:#}", anyhow::Error::new(err));
        assert!(!message.contains('\n'), "{message}");
        assert!(
            message.starts_with(&format!(
                "metrics address {} is already in use",
                first.local_addr()
            )),
            "{message}"
        );
        first.shutdown();
    }

    use crate::test_support::go_pprof;

    #[inline(never)]
    fn spin(done: &AtomicBool) -> u64 {
        let mut x = 1u64;
        while !done.load(Ordering::Relaxed) {
            for i in 0..10_000u64 {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i);
            }
            std::hint::black_box(x);
        }
        x
    }

    #[test]
    fn self_profile_is_read_by_go_tool_pprof() {
        let metrics = AgentMetrics::new();
        let server = serve(local(), &metrics).expect("start the metrics server");
        let addr = server.local_addr();
        // Burn CPU until the profile is back, so it has samples.
        let done = Arc::new(AtomicBool::new(false));
        let burner = {
            let done = Arc::clone(&done);
            thread::spawn(move || spin(&done))
        };
        let (status, body) = get(addr, "/debug/pprof/profile?seconds=1");
        done.store(true, Ordering::Relaxed);
        burner.join().expect("burner thread");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert_eq!(&body[..2], &[0x1f, 0x8b], "gzip magic");

        let dir = std::env::temp_dir().join(format!("pyagent-selfprof-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("self.pb.gz");
        std::fs::write(&file, &body).expect("write profile");
        let raw = go_pprof(&dir, &["-raw"], &file);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(raw.contains("Samples:"), "{raw}");
        assert!(raw.contains("Locations"), "{raw}");
        assert!(raw.contains("spin"), "the busy thread is missing:\n{raw}");
        server.shutdown();
    }
}
