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

/// The span ids spans.py publishes while `in_span_a` and `in_span_b` run.
const SPAN_A: &str = "b7ad6b7169203331";
const SPAN_B: &str = "00f067aa0ba902b7";
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";

/// Builds otel_thread_ctx.c where `py` can load it; returns its path as `py` sees it.
fn build_publisher(py: &Interpreter, tag: &str) -> String {
    let inside = format!("/tmp/pyagent-otel-ctx-{}-{tag}.so", std::process::id());
    let host = py.host_path_of(Path::new(&inside));
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&host)
        .arg(script("otel_thread_ctx.c"))
        .status()
        .unwrap_or_else(|e| panic!("cannot run cc: {e}"));
    assert!(status.success(), "building otel_thread_ctx.c failed");
    inside
}

/// Samples per (span function on the stack, `span_id` label) of `go tool pprof -raw`'s output.
fn spans_by_function(raw: &str) -> BTreeMap<(String, String), u64> {
    let functions = location_functions(raw);
    let mut out = BTreeMap::new();
    let mut current: Option<(String, u64)> = None;
    let mut flush = |current: &mut Option<(String, u64)>, span: &str| {
        if let Some((function, n)) = current.take() {
            *out.entry((function, span.to_string())).or_insert(0) += n;
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
            flush(&mut current, "none");
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
        } else if let Some(span) = line
            .split_whitespace()
            .find_map(|t| t.strip_prefix("span_id:["))
        {
            assert!(line.contains(&format!("trace_id:[{TRACE}]")), "{line}");
            flush(&mut current, span.trim_end_matches(']'));
        }
    }
    flush(&mut current, "none");
    out
}

/// Checks that at least 90% of the samples under each span function carry its span.
fn assert_spans_match(raw: &str, what: &str) {
    let by = spans_by_function(raw);
    for (function, span) in [("in_span_a", SPAN_A), ("in_span_b", SPAN_B)] {
        let total: u64 = by
            .iter()
            .filter(|((f, _), _)| f == function)
            .map(|(_, n)| n)
            .sum();
        let matching: u64 = by
            .iter()
            .filter(|((f, s), _)| f == function && s == span)
            .map(|(_, n)| n)
            .sum();
        eprintln!("{what}: {function}: {matching} of {total} samples carry its span ({by:?})");
        assert!(total >= 30, "{what}: {function} sampled: {by:?}");
        assert!(
            matching * 10 >= total * 9,
            "{what}: {function}'s samples carry its span: {by:?}"
        );
    }
}

/// Userspace samples read the context while walking the thread, so each carries the span of
/// its stack. eBPF records would read it when the agent drains them, up to one drain interval
/// after the stack was taken (with spans of 50 ms, about half carried the wrong span), so
/// they carry none: a wrong span is worse than none.
#[rstest]
fn samples_carry_the_span_of_the_function_under_them(
    #[values("py312", "py313", "py315")] py: &str,
    #[values("userspace", "ebpf")] mode: &str,
) {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let interpreter = Interpreter::by_name(py);
    let library = build_publisher(interpreter, &format!("{py}-{mode}"));
    let p = PythonProcess::ready(py, "spans.py", &[&library, "30"]);
    let _serial = (mode == "ebpf").then(host_wide_lock);
    let dir = fresh_dir(&format!("trace-context-{py}-{mode}"));
    let file = dir.join("spans.pb.gz");
    let summary = record(p.pid(), &["--mode", mode, "-d", "3"], &file);
    let raw = go_pprof_raw(&file);
    let what = format!("{py} {mode}: {summary}");
    if mode == "userspace" {
        assert_spans_match(&raw, &what);
    } else {
        let by = spans_by_function(&raw);
        let labelled: u64 = by
            .iter()
            .filter(|((_, span), _)| span != "none")
            .map(|(_, n)| n)
            .sum();
        let total: u64 = by.values().sum();
        assert!(total >= 100, "{what}: sampled: {by:?}");
        assert_eq!(labelled, 0, "{what}: no span on eBPF samples: {by:?}");
    }
}
