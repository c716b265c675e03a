//! OpenTelemetry thread context (OTEP 4947): a target publishes `otel_thread_ctx_v1` from a C
//! library built here and switches spans on a known schedule; each sample's `span_id` label
//! must be the span of the function running under it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use pyagent_tests::agent::{host_wide_lock, pyagent_bin, record};
use pyagent_tests::consumers::{go_pprof_raw, location_functions};
use pyagent_tests::scratch::fresh_dir;
use pyagent_tests::stacks::script;
use pyagent_tests::{Interpreter, PythonProcess};
use rstest::rstest;

/// The span ids spans.py publishes while `in_span_a` and `in_span_b` run, in its main thread
/// and in its worker.
const MAIN_SPANS: [&str; 2] = ["b7ad6b7169203331", "00f067aa0ba902b7"];
const WORKER_SPANS: [&str; 2] = ["c0c0c0c0c0c0c0c0", "d0d0d0d0d0d0d0d0"];

/// Builds otel_thread_ctx.c where `py` can load it, with the given extra compiler flags;
/// returns its path as `py` sees it.
fn build_publisher(py: &Interpreter, tag: &str, flags: &[&str]) -> String {
    let inside = format!("/tmp/pyagent-otel-ctx-{}-{tag}.so", std::process::id());
    let host = py.host_path_of(Path::new(&inside));
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

/// Samples per (span function on the stack, thread name, `span_id` label) of `go tool pprof
/// -raw`'s output.
fn spans_by_function(raw: &str) -> BTreeMap<(String, String, String), u64> {
    let functions = location_functions(raw);
    let mut out = BTreeMap::new();
    let mut current: Option<(String, u64)> = None;
    let mut flush = |current: &mut Option<(String, u64)>, thread: &str, span: &str| {
        if let Some((function, n)) = current.take() {
            let key = (function, thread.to_string(), span.to_string());
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
            flush(&mut current, "?", "none");
            let count: u64 = values
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .expect("a count");
            let function = locations
                .split_whitespace()
                .filter_map(|id| functions.get(id))
                .find(|f| f.starts_with("in_span_"))
                .map_or("other", |f| f);
            current = Some((function.to_string(), count));
        } else if current.is_some() {
            // The label line: `thread_name:[worker] ... span_id:[...]`. No `trace_id` label:
            // one series per trace would swamp a store (the OTLP link carries it).
            assert!(!line.contains("trace_id:"), "{line}");
            let label = |key: &str| {
                line.split_whitespace()
                    .find_map(|t| t.strip_prefix(key))
                    .map(|v| v.trim_end_matches(']').to_string())
            };
            let thread = label("thread_name:[").unwrap_or_else(|| "?".into());
            let span = label("span_id:[").unwrap_or_else(|| "none".into());
            flush(&mut current, &thread, &span);
        }
    }
    flush(&mut current, "?", "none");
    out
}

/// Checks that at least 90% of the samples under each span function, in each thread, carry
/// that thread's span for it.
fn assert_spans_match(raw: &str, what: &str) {
    let by = spans_by_function(raw);
    for (thread, spans) in [("MainThread", MAIN_SPANS), ("worker", WORKER_SPANS)] {
        for (function, span) in [("in_span_a", spans[0]), ("in_span_b", spans[1])] {
            let of = |want: Option<&str>| -> u64 {
                by.iter()
                    .filter(|((f, t, s), _)| {
                        f == function && t == thread && want.is_none_or(|w| s == w)
                    })
                    .map(|(_, n)| n)
                    .sum()
            };
            let (total, matching) = (of(None), of(Some(span)));
            eprintln!("{what}: {thread} {function}: {matching} of {total} carry its span");
            assert!(total >= 15, "{what}: {thread} {function} sampled: {by:?}");
            assert!(
                matching * 10 >= total * 9,
                "{what}: {thread} {function}'s samples carry its span: {by:?}"
            );
        }
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
    let p = PythonProcess::ready(py, "spans.py", &[&library, "30"]);
    let _serial = (mode == "ebpf").then(host_wide_lock);
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
        &go_pprof_raw(&file),
        &format!("{py} {mode} {tag}: {summary}"),
    );
}

#[rstest]
fn samples_carry_the_span_of_the_function_under_them(
    #[values("py312", "py313", "py315")] py: &str,
    #[values("userspace", "ebpf")] mode: &str,
) {
    check_spans(py, mode, "gd", &[]);
}

/// The TLS model OTEP 4947 asks for (TLSDESC): glibc then gives the `dlopen`ed publisher
/// static TLS and never fills the DTV entry of a thread that was already running (the main
/// thread here), whose context is found below its thread pointer instead.
#[rstest]
fn a_tlsdesc_publisher_reaches_threads_that_ran_before_it_was_loaded(
    #[values("py312", "py315")] py: &str,
    #[values("userspace", "ebpf")] mode: &str,
) {
    check_spans(py, mode, "gnu2", &["-mtls-dialect=gnu2"]);
}
