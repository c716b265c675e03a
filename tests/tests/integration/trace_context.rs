//! OpenTelemetry thread context (OTEP 4947): a target publishes `otel_thread_ctx_v1` from a C
//! library built here and switches spans on a known schedule; each sample's `trace_id` and
//! `span_id` labels (pprof) and link (OTLP) must be the trace and span of the function running
//! under it, in its thread.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use pyagent_tests::agent::{host_wide_lock, pyagent_bin, record};
use pyagent_tests::consumers::{go_pprof_raw, location_functions};
use pyagent_tests::http::free_port;
use pyagent_tests::scratch::fresh_dir;
use pyagent_tests::stacks::script;
use pyagent_tests::{Interpreter, PythonProcess};
use rstest::rstest;
use rstest_reuse::apply;

use crate::otlp::{start_receiver, text};
use crate::{oldest_and_newest, representative};

/// The trace and span ids spans.py publishes while `in_span_a` and `in_span_b` run, in its main
/// thread and in its worker: each thread has its own trace.
const MAIN_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const WORKER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const MAIN_SPANS: [&str; 2] = ["b7ad6b7169203331", "00f067aa0ba902b7"];
const WORKER_SPANS: [&str; 2] = ["c0c0c0c0c0c0c0c0", "d0d0d0d0d0d0d0d0"];
/// Samples each span function needs in each thread before its spans are judged.
const ENOUGH: u64 = 15;

/// Samples per (span function on the stack, thread name, trace id, span id); "none" where a
/// sample has no trace or span.
type SpanCounts = BTreeMap<(String, String, String, String), u64>;

/// Builds otel_thread_ctx.c where `py` can load it, with the given extra compiler flags;
/// returns its path as `py` sees it.
pub(crate) fn build_publisher(py: &Interpreter, tag: &str, flags: &[&str]) -> String {
    let inside = format!("/tmp/pyagent-otel-ctx-{}-{tag}.so", std::process::id());
    let host = py.host_path(Path::new(&inside));
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1"])
        .args(flags)
        .arg("-o")
        .arg(&host)
        .arg(script("otel_thread_ctx.c"))
        .status()
        .unwrap_or_else(|e| panic!("cannot run cc: {e}"));
    assert!(status.success(), "building otel_thread_ctx.c failed");
    inside
}

/// The span function of a stack (innermost first), or "other".
fn span_function<'a>(mut functions: impl Iterator<Item = &'a str>) -> String {
    functions
        .find(|f| f.starts_with("in_span_"))
        .unwrap_or("other")
        .to_string()
}

/// [`SpanCounts`] of `go tool pprof -raw`'s output.
fn spans_by_function(raw: &str) -> SpanCounts {
    let functions = location_functions(raw);
    let mut out = SpanCounts::new();
    let mut current: Option<(String, u64)> = None;
    let mut flush = |current: &mut Option<(String, u64)>, thread: &str, trace: &str, span: &str| {
        if let Some((function, n)) = current.take() {
            let key = (
                function,
                thread.to_string(),
                trace.to_string(),
                span.to_string(),
            );
            *out.entry(key).or_insert(0) += n;
        }
    };
    // Samples: `   COUNT VALUE: LOCATION IDS`, then label lines `key:[value] ...`.
    for line in raw
        .lines()
        .skip_while(|l| *l != "Samples:")
        .skip(2)
        .take_while(|l| *l != "Locations")
    {
        if let Some((values, locations)) = line.split_once(": ").filter(|(v, _)| {
            v.split_whitespace()
                .all(|n| n.bytes().all(|b| b.is_ascii_digit()))
        }) {
            flush(&mut current, "?", "none", "none");
            let count: u64 = values
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .expect("a count");
            let function = span_function(
                locations
                    .split_whitespace()
                    .filter_map(|id| functions.get(id).copied()),
            );
            current = Some((function, count));
        } else if current.is_some() {
            // The label line: `thread_name:[worker] ... trace_id:[...] span_id:[...]`.
            let label = |key: &str| {
                line.split_whitespace()
                    .find_map(|t| t.strip_prefix(key))
                    .map(|v| v.trim_end_matches(']').to_string())
            };
            let thread = label("thread_name:[").unwrap_or_else(|| "?".into());
            let trace = label("trace_id:[").unwrap_or_else(|| "none".into());
            let span = label("span_id:[").unwrap_or_else(|| "none".into());
            flush(&mut current, &thread, &trace, &span);
        }
    }
    flush(&mut current, "?", "none", "none");
    out
}

fn hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "none".into();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Adds the samples of sample type `ty` (`samples`, `off_cpu`) of process `pid` in `request` to
/// `out`: the span function of each sample's stack, its `thread.name` attribute and its link's
/// trace and span ids, with its value (samples, nanoseconds).
fn add_otlp_spans(
    out: &mut SpanCounts,
    request: &ExportProfilesServiceRequest,
    pid: u32,
    ty: &str,
) {
    let d = request.dictionary.as_ref().expect("a dictionary");
    let s = |i: i32| d.string_table[i as usize].as_str();
    for resource in &request.resource_profiles {
        let ours = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .any(|kv| kv.key == "process.pid" && text(&kv.value) == format!("int:{pid}"));
        if !ours {
            continue;
        }
        let of_type = resource
            .scope_profiles
            .iter()
            .flat_map(|scope| &scope.profiles)
            .filter(|p| {
                p.sample_type
                    .as_ref()
                    .is_some_and(|t| s(t.type_strindex) == ty)
            });
        for sample in of_type.flat_map(|p| &p.samples) {
            let functions = d.stack_table[sample.stack_index as usize]
                .location_indices
                .iter()
                .map(|&l| {
                    let line = &d.location_table[l as usize].lines[0];
                    s(d.function_table[line.function_index as usize].name_strindex)
                });
            let thread = sample
                .attribute_indices
                .iter()
                .map(|&a| &d.attribute_table[a as usize])
                .find(|a| s(a.key_strindex) == "thread.name")
                .map_or_else(|| "?".to_string(), |a| text(&a.value));
            let link = &d.link_table[sample.link_index as usize];
            let key = (
                span_function(functions),
                thread,
                hex(&link.trace_id),
                hex(&link.span_id),
            );
            *out.entry(key).or_insert(0) += sample.values.iter().map(|&v| v as u64).sum::<u64>();
        }
    }
}

/// Samples under `function` in `thread`, of trace and span `want` (any with `None`).
fn samples_of(by: &SpanCounts, function: &str, thread: &str, want: Option<(&str, &str)>) -> u64 {
    by.iter()
        .filter(|((f, t, tr, sp), _)| {
            f == function && t == thread && want.is_none_or(|(w_tr, w_sp)| tr == w_tr && sp == w_sp)
        })
        .map(|(_, n)| n)
        .sum()
}

/// The span functions of both threads, each with the trace and span it runs in.
fn expected() -> [(&'static str, &'static str, &'static str, &'static str); 4] {
    [
        ("MainThread", "in_span_a", MAIN_TRACE, MAIN_SPANS[0]),
        ("MainThread", "in_span_b", MAIN_TRACE, MAIN_SPANS[1]),
        ("worker", "in_span_a", WORKER_TRACE, WORKER_SPANS[0]),
        ("worker", "in_span_b", WORKER_TRACE, WORKER_SPANS[1]),
    ]
}

/// Checks that at least 90% of the samples under each span function, in each thread, carry
/// that thread's trace and its span for it.
fn assert_spans_match(by: &SpanCounts, what: &str) {
    for (thread, function, trace, span) in expected() {
        let total = samples_of(by, function, thread, None);
        let matching = samples_of(by, function, thread, Some((trace, span)));
        eprintln!("{what}: {thread} {function}: {matching} of {total} carry its trace and span");
        assert!(
            total >= ENOUGH,
            "{what}: {thread} {function} sampled: {by:?}"
        );
        assert!(
            matching * 10 >= total * 9,
            "{what}: {thread} {function}'s samples carry its trace and span: {by:?}"
        );
    }
}

/// Profiles `spans.py` publishing through a library built with `flags`, in `mode`, and checks
/// each sample's span. Userspace samples read the context while walking the thread; eBPF
/// records carry the span the program read at the tick (read at the drain instead, up to one
/// drain interval later, about half named the wrong span).
fn check_spans(py: &str, mode: &str, tag: &str, flags: &[&str]) {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let interpreter = Interpreter::by_name(py);
    let library = build_publisher(interpreter, &format!("{py}-{mode}-{tag}"), flags);
    // Serialized before the target starts: a wait for the lock must not eat its 30 s.
    let _serial = (mode == "ebpf").then(host_wide_lock);
    let p = PythonProcess::ready(py, "spans.py", &[&library, "30"]);
    let dir = fresh_dir(&format!("trace-context-{py}-{mode}-{tag}"));
    let file = dir.join("spans.pb.gz");
    let mut args = vec!["--mode", mode, "-d", "3"];
    if mode == "ebpf" {
        // eBPF samples on-CPU time only: on a busy machine the two threads get little of it,
        // and at the default rate a function could collect fewer samples than the check needs.
        args.extend(["-r", "250"]);
    }
    let summary = record(p.pid(), &args, &file);
    assert_spans_match(
        &spans_by_function(&go_pprof_raw(&file)),
        &format!("{py} {mode} {tag}: {summary}"),
    );
}

#[apply(representative)]
fn samples_carry_the_span_of_the_function_under_them(
    py: &str,
    #[values("userspace", "ebpf")] mode: &str,
) {
    check_spans(py, mode, "gd", &[]);
}

/// The TLS model OTEP 4947 asks for (TLSDESC): glibc then gives the `dlopen`ed publisher
/// static TLS and never fills the DTV entry of a thread that was already running (the main
/// thread here), whose context is found below its thread pointer instead.
#[apply(oldest_and_newest)]
fn a_tlsdesc_publisher_reaches_threads_that_ran_before_it_was_loaded(
    py: &str,
    #[values("userspace", "ebpf")] mode: &str,
) {
    check_spans(py, mode, "gnu2", &["-mtls-dialect=gnu2"]);
}

/// The service sending OTLP: each CPU sample of a span function links to the trace and span it
/// ran in (the link Pyroscope turns into `trace_id`/`span_id` labels), in both modes. In eBPF
/// mode with `--off-cpu`, an off-CPU profile comes too (the two threads wait for each other's
/// GIL), and its time under a span function links to that function's span as well.
#[rstest]
fn otlp_samples_link_to_the_trace_and_span_under_them(#[values("userspace", "ebpf")] mode: &str) {
    pyagent_bin();
    let py = "py312";
    let library = build_publisher(Interpreter::by_name(py), &format!("{mode}-otlp"), &[]);
    let _serial = (mode == "ebpf").then(host_wide_lock);
    let p = PythonProcess::ready(py, "spans.py", &[&library, "90"]);
    let (port, received) = start_receiver();
    let log = fresh_dir(&format!("trace-context-otlp-{mode}")).join("stderr");
    // As in `check_spans`: eBPF needs a higher rate to see each function often enough.
    let rate = if mode == "ebpf" { "250" } else { "100" };
    let off_cpu: &[&str] = if mode == "ebpf" { &["--off-cpu"] } else { &[] };
    let mut service = Command::new(pyagent_bin())
        .args([
            "--all-python",
            "--mode",
            mode,
            "--interval",
            "2s",
            "--rate",
            rate,
        ])
        .args(off_cpu)
        .args(["--otlp-endpoint", &format!("http://127.0.0.1:{port}")])
        .args(["--metrics-addr", &format!("127.0.0.1:{}", free_port())])
        .stderr(std::fs::File::create(&log).expect("stderr file"))
        .spawn()
        .expect("start the service");
    let (mut by, mut off) = (SpanCounts::new(), SpanCounts::new());
    let deadline = Instant::now() + Duration::from_secs(60);
    let enough = |by: &SpanCounts| {
        expected()
            .iter()
            .all(|(thread, function, _, _)| samples_of(by, function, thread, None) >= ENOUGH)
    };
    // Until enough samples came, the time is up, or the service is gone.
    while !enough(&by) && Instant::now() < deadline {
        if let Ok(r) = received.recv_timeout(Duration::from_secs(1)) {
            add_otlp_spans(&mut by, &r.request, p.pid(), "samples");
            add_otlp_spans(&mut off, &r.request, p.pid(), "off_cpu");
        } else if service.try_wait().expect("the service's status").is_some() {
            break;
        }
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(service.id() as i32, libc::SIGTERM) };
    let status = service.wait().expect("exits");
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "{status}: {stderr}");
    eprintln!("{stderr}");
    assert_spans_match(&by, &format!("{py} {mode} OTLP"));
    if mode == "ebpf" {
        assert_off_cpu_spans_match(&off);
    }
}

/// Of the off-CPU nanoseconds under each span function in each thread, at least 90% carry that
/// thread's trace and its span for it; some time under them at all.
fn assert_off_cpu_spans_match(off: &SpanCounts) {
    let mut seen = 0;
    for (thread, function, trace, span) in expected() {
        let total = samples_of(off, function, thread, None);
        let matching = samples_of(off, function, thread, Some((trace, span)));
        eprintln!(
            "off-CPU: {thread} {function}: {matching} of {total} ns carry its trace and span"
        );
        assert!(
            matching * 10 >= total * 9,
            "off-CPU: {thread} {function}'s time carries its trace and span: {off:?}"
        );
        seen += total;
    }
    assert!(seen > 0, "no off-CPU time under a span function: {off:?}");
}
