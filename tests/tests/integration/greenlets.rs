//! `dump --greenlets` on a real gevent server (issue 52, item 4): gunicorn with a gevent
//! worker, pip-installed for the interpreter, whose requests wait in `gevent.sleep`. Those
//! greenlets are on no thread's stack; the dump finds them in the garbage collector's lists.

use std::time::Duration;

use pyagent_tests::agent::{pyagent_bin, run_pyagent};
use pyagent_tests::stacks::{marker_line, script};
use pyagent_tests::wait::wait_for;
use pyagent_tests::{Interpreter, PythonProcess};
use rstest_reuse::apply;
use serde_json::Value;

use crate::representative_with_interpreter_frames;

/// `dump --greenlets ARGS` of `pid`: its exit status and output.
fn dump_greenlets(pid: u32, extra: &[&str]) -> std::process::Output {
    let pid = pid.to_string();
    let mut args = vec!["dump", "--pid", &pid, "--greenlets"];
    args.extend_from_slice(extra);
    run_pyagent(&args)
}

/// The parked requests: greenlets suspended in `sleep` under `do_request`, at the line of the
/// sleep, as gevent keeps them while the worker serves others; and the running ones.
#[apply(representative_with_interpreter_frames)]
fn every_greenlet_of_a_gevent_worker_is_dumped(py: &str) {
    pyagent_bin();
    let interpreter = Interpreter::by_name(py);
    if interpreter.free_threaded {
        // No collector lists: refused in one line, whatever the process runs.
        let p = PythonProcess::ready(py, "busy.py", &[]);
        let out = dump_greenlets(p.pid(), &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{py}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{py}: {err}");
        assert!(err.contains("free-threaded"), "{py}: {err}");
        return;
    }
    let site = pyagent_tests::pip::site_for(
        interpreter,
        &["gunicorn==27.0.1", "gevent==26.9.0", "packaging==25.0"],
    );
    let mut master = PythonProcess::spawn(
        interpreter,
        &script("gevent_app.py"),
        &[site.to_str().expect("utf-8 path")],
    );
    let line = master.wait_for_line("worker ", Duration::from_secs(60));
    let worker: u32 = line["worker ".len()..].trim().parse().expect("worker pid");
    let sleep_line = u64::from(marker_line("gevent_app.py", "request-sleep"));
    let parked_requests = |dump: &Value| {
        dump["greenlets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|g| {
                let frames = g["frames"].as_array().cloned().unwrap_or_default();
                g["state"] == "parked"
                    && frames.first().is_some_and(|f| f["function"] == "sleep")
                    && frames.iter().any(|f| {
                        f["function"] == "do_request" && f["line"].as_u64() == Some(sleep_line)
                    })
            })
            .count()
    };
    let dump = wait_for("three parked requests", Duration::from_secs(30), || {
        let out = dump_greenlets(worker, &["--json"]);
        assert!(
            out.status.success(),
            "{py}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dump: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        (parked_requests(&dump) >= 3).then_some(dump)
    });
    let greenlets = dump["greenlets"].as_array().expect("greenlets");
    assert!(
        greenlets.iter().any(|g| g["state"] == "running"),
        "{py}: no running greenlet: {dump:#}"
    );
    assert!(
        greenlets
            .iter()
            .any(|g| g["kind"].as_str().is_some_and(|k| k.ends_with("Greenlet"))),
        "{py}: no gevent Greenlet: {dump:#}"
    );
    let text = String::from_utf8_lossy(&dump_greenlets(worker, &[]).stdout).into_owned();
    assert!(text.contains(" greenlets ("), "{py}: {text}");
    assert!(text.contains("(parked)\n    sleep ("), "{py}: {text}");
}

/// A Python process that never imported greenlet: one line, exit status 1.
#[test]
fn a_process_without_greenlet_is_refused_in_one_line() {
    let p = PythonProcess::ready("py312", "busy.py", &[]);
    let out = dump_greenlets(p.pid(), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("has not imported greenlet"), "{err}");
}
