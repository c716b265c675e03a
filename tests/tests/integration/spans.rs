//! `pyagent spans` (issue 38): a target whose spans each spend a known mix of CPU, socket and
//! lock time (`span_mix.py`), recorded in eBPF mode with off-CPU time, must come back split
//! as it was spent, span by span; bad input is one line and exit status 2.

use pyagent_tests::agent::{host_wide_lock, pyagent_bin, record, run_pyagent};
use pyagent_tests::scratch::fresh_dir;
use pyagent_tests::{Interpreter, PythonProcess};
use rstest_reuse::apply;
use serde_json::Value;

use crate::oldest_and_newest;
use crate::trace_context::build_publisher;

/// The trace of span_mix.py's spans.
const TRACE: &str = "5b8efff798038103d269b633813fc60c";

/// A part of a span's time (its JSON name), the milliseconds span_mix.py spends in it per
/// turn, and the function it spends them in.
type Part = (&'static str, f64, &'static str);

/// span_mix.py's spans: span id, then milliseconds of CPU, socket wait and lock wait per turn
/// with the function each is spent in.
const SPANS: [(&str, [Part; 3]); 2] = [
    (
        "1111111111111111",
        [
            ("cpu_gil_held", 100.0, "compute"),
            ("io", 200.0, "call_service"),
            ("lock", 50.0, "take_lock"),
        ],
    ),
    (
        "2222222222222222",
        [
            ("cpu_gil_held", 150.0, "compute"),
            ("io", 50.0, "call_service"),
            ("lock", 150.0, "take_lock"),
        ],
    ),
];

/// How long to record. A recording starts and ends inside a turn and cuts one part of it
/// short: in 14 s each span has about 20 turns (700 ms a pair), so a cut part is a few percent
/// of its total at most. Shorter turns would lower that error, but add to the fixed latency of
/// each wait (the peer's wake-up, the GIL's hand-over), which the short waits show as a share.
const RECORD_SECONDS: &str = "14";

/// `pyagent spans ARGS`, which must succeed; its stdout.
fn spans(args: &[&str]) -> String {
    let mut all = vec!["spans"];
    all.extend_from_slice(args);
    let out = run_pyagent(&all);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "spans {args:?}: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The group of span `span_id` in `pyagent spans --json` output.
fn span_group<'a>(report: &'a Value, span_id: &str) -> &'a Value {
    report["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["span_id"] == span_id)
        .unwrap_or_else(|| panic!("no span {span_id} in {report:#}"))
}

/// Each span's CPU (with the GIL held), socket and lock time, as a share of its wall time, is
/// within 10% of the share span_mix.py spends in it, and is spent in its function. The time the
/// span waited for a CPU is the host's load, not the script's: the shares are of the wall time
/// without it.
#[apply(oldest_and_newest)]
fn each_spans_time_is_split_as_it_was_spent(py: &str) {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let library = build_publisher(Interpreter::by_name(py), &format!("{py}-span-mix"), &[]);
    // Serialized before the target starts: a wait for the lock must not eat its 40 s.
    let _serial = host_wide_lock();
    let p = PythonProcess::ready(py, "span_mix.py", &[&library, "40"]);
    let dir = fresh_dir(&format!("spans-{py}"));
    let file = dir.join("mix.pb.gz");
    let file = file.to_str().expect("utf-8 path");
    // ~1 kHz: the CPU part of a span is sampled, the waits are timed.
    let args = [
        "--mode",
        "ebpf",
        "--off-cpu",
        "-r",
        "997",
        "-d",
        RECORD_SECONDS,
    ];
    let summary = record(p.pid(), &args, std::path::Path::new(file));
    eprintln!("{py}: {summary}");
    eprintln!("{}", spans(&[file]));
    let report: Value = serde_json::from_str(&spans(&[file, "--json"])).expect("JSON");
    assert_eq!(report["by"], "span", "{report:#}");
    for (span_id, parts) in SPANS {
        let group = span_group(&report, span_id);
        assert_eq!(group["trace_id"], TRACE, "{group:#}");
        let wall_ms: f64 = parts.iter().map(|(_, ms, _)| ms).sum();
        let queued = group["parts"]["cpu_wait"]["share"].as_f64().unwrap_or(0.0);
        assert!(
            queued < 0.5,
            "{py} span {span_id}: mostly waiting for a CPU: {group:#}"
        );
        for (part, ms, function) in parts {
            let want = ms / wall_ms;
            let got = &group["parts"][part];
            let share = got["share"].as_f64().expect("a share") / (1.0 - queued);
            eprintln!(
                "{py} span {span_id} {part}: {share:.3} of its wall time, expected {want:.3}"
            );
            assert!(
                (share - want).abs() <= want * 0.1,
                "{py} span {span_id} {part}: {share:.3}, expected {want:.3} ± 10%: {group:#}"
            );
            assert_eq!(got["top_function"]["function"], function, "{group:#}");
        }
    }
}

/// A missing file and one that is not a profile: one line on stderr each, exit status 2.
#[test]
fn bad_input_is_one_line_and_exit_status_2() {
    let dir = fresh_dir("spans-bad-input");
    let text = dir.join("notes.txt");
    std::fs::write(&text, "not a profile\n").expect("write");
    let missing = dir.join("missing.pb.gz");
    for (file, needle) in [
        (&missing, "cannot read the file"),
        (&text, "not a pprof profile"),
    ] {
        let file = file.to_str().expect("utf-8 path");
        let out = run_pyagent(&["spans", file]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(
            err.starts_with(&format!("pyagent: {file}: ")) && err.contains(needle),
            "{err}"
        );
        assert!(out.stdout.is_empty(), "{file}: nothing on stdout");
    }
}

/// A free port whose next one is free too: the app's and its upstream's.
fn free_port_pair() -> u16 {
    use std::net::TcpListener;
    (0..100)
        .find_map(|_| {
            let first = TcpListener::bind("127.0.0.1:0").ok()?;
            let port = first.local_addr().ok()?.port();
            TcpListener::bind(("127.0.0.1", port.checked_add(1)?)).ok()?;
            Some(port)
        })
        .expect("two free ports in a row")
}

/// Issue 38, item 4: the README's worked example. `slow_app.py` serves `/report` (Python code
/// on the CPU, so concurrent reports wait for each other's GIL) and `/quote` (a wait on an
/// upstream socket) from 8 worker threads under load. `pyagent spans --by service` of an eBPF
/// `--off-cpu` recording puts the CPU under `render_report`, the io under `fetch_quote`, and the
/// GIL waits on the workers running `render_report`.
#[test]
fn the_worked_examples_app_shows_where_its_time_goes() {
    pyagent_bin();
    let _serial = host_wide_lock();
    let port = free_port_pair().to_string();
    let app = PythonProcess::ready("py312", "slow_app.py", &["serve", &port]);
    let _load = PythonProcess::ready("py312", "slow_app.py", &["load", &port]);
    let dir = fresh_dir("worked-example");
    let file = dir.join("app.pb.gz");
    let path = file.to_str().unwrap();
    record(
        app.pid(),
        &["--mode", "ebpf", "--off-cpu", "-d", "5"],
        &file,
    );
    let json = spans(&[path, "--by", "service", "--json"]);
    let report: Value = serde_json::from_str(&json).expect("JSON");
    let parts = &report["groups"][0]["parts"];
    assert_eq!(
        parts["cpu_gil_held"]["top_function"]["function"], "render_report",
        "{json}"
    );
    assert_eq!(
        parts["io"]["top_function"]["function"], "fetch_quote",
        "{json}"
    );
    let holder = &parts["gil_wait"]["top_holder"];
    assert_eq!(holder["function"], "render_report", "{json}");
    assert!(holder["threads"].as_u64().unwrap_or(0) >= 2, "{json}");
    let text = spans(&[path, "--by", "service"]);
    assert!(text.contains("; held in render_report ("), "{text}");
}
