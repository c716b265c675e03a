//! The `pyagent` binary: errors as one line, `record` in every format, read back by the real
//! consumers.

use std::process::{Command, Stdio};
use std::time::Duration;

use pyagent_tests::agent::{number_before, pyagent_bin, record, record_collapsed, run_pyagent};
use pyagent_tests::consumers::{go_pprof, go_pprof_raw};
use pyagent_tests::pythons::{pyenv_executable, spawn_idle};
use pyagent_tests::scratch::fresh_dir;
use pyagent_tests::stacks::{line_after, marker_line, script};
use pyagent_tests::{Interpreter, PythonProcess};
use rstest_reuse::apply;

use crate::{oldest_and_newest, representative};

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_one_line_error(out: &std::process::Output, needle: &str) {
    let err = stderr_of(out);
    assert!(!out.status.success(), "must fail: {err}");
    assert_eq!(out.status.code(), Some(1), "an error, not a crash: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with("pyagent: ") && err.contains(needle),
        "{err}"
    );
}

/// Issue 47: a CPython release with no layout here (2.7, which every machine of this kind has
/// under `~/.pyenv/versions`) is named in one line with the supported range, never "not a
/// CPython process" or "not initialised".
#[test]
fn unsupported_releases_are_named_in_one_line() {
    pyagent_bin();
    for (version, minor) in [("2.7.18", "2.7")] {
        let exe = pyenv_executable(version, &format!("python{minor}"));
        let mut target = spawn_idle(&exe);
        let pid = target.id().to_string();
        for cmd in ["dump", "record"] {
            let mut args = vec![cmd, "--pid", &pid];
            if cmd == "record" {
                args.extend(["-d", "1", "-o", "/dev/null"]);
            }
            assert_one_line_error(
                &run_pyagent(&args),
                &format!("CPython {minor} is not supported: pyagent reads CPython 3.6 to 3.15"),
            );
        }
        target.kill().expect("kill");
        target.wait().expect("reap");
    }
}

#[test]
fn pid_that_is_not_python() {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let mut sleeper = Command::new("sleep")
        .arg("1000")
        .stdout(Stdio::null())
        .spawn()
        .expect("sleep");
    let pid = sleeper.id().to_string();
    for cmd in ["dump", "record"] {
        let mut args = vec![cmd, "--pid", &pid];
        if cmd == "record" {
            args.extend(["-d", "1", "-o", "/dev/null"]);
        }
        assert_one_line_error(&run_pyagent(&args), "is not a CPython process");
    }
    // A refused recording removes the file it created, never one that was there.
    use std::os::unix::fs::FileTypeExt;
    let null = std::fs::metadata("/dev/null").expect("/dev/null is still there");
    assert!(null.file_type().is_char_device(), "{null:?}");
    let fresh = fresh_dir("cli-not-python").join("x.pb");
    let out = run_pyagent(&[
        "record",
        "--pid",
        &pid,
        "-d",
        "1",
        "-o",
        fresh.to_str().unwrap(),
    ]);
    assert_one_line_error(&out, "is not a CPython process");
    assert!(!fresh.exists(), "an empty profile was left behind");
    sleeper.kill().expect("kill");
    let _ = sleeper.wait();
}

#[test]
fn pid_that_does_not_exist() {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
                   // PIDs above pid_max never exist.
    let out = run_pyagent(&["dump", "--pid", "4194305"]);
    assert_one_line_error(&out, "does not exist");
}

#[test]
fn unwritable_output_fails_before_sampling() {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let out = run_pyagent(&["record", "--pid", "1", "-o", "/nonexistent-dir/x.pb.gz"]);
    assert_one_line_error(&out, "cannot create /nonexistent-dir/x.pb.gz");
}

/// `pyagent record --pid PID ARGS -o OUT`, which must succeed; returns what it wrote.
fn record_file(pid: u32, out: &std::path::Path, args: &[&str]) -> String {
    record(pid, args, out);
    std::fs::read_to_string(out).unwrap_or_else(|e| panic!("{}: {e}", out.display()))
}

/// As root, `record`'s userspace sampler is woken by a cpu-clock perf event on its own CPU
/// (cheaper than sleeping to each tick), and its ticks, taken or counted as missed, keep the
/// rate: 500 Hz for 2 s, with the event throttled at times on an idle CPU (deadlines fill in).
#[test]
fn userspace_record_ticks_from_a_perf_event_at_its_rate() {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let p = PythonProcess::ready("py313", "busy.py", &[]);
    let dir = fresh_dir("cli-ticks");
    let err = record(
        p.pid(),
        &["--mode", "userspace", "-d", "2", "-r", "500"],
        &dir.join("profile.pb.gz"),
    );
    assert!(err.contains("ticks from a cpu-clock perf event"), "{err}");
    let from_event = number_before(&err, " from the event");
    let ticks = number_before(&err, " sampling ticks");
    let lagged = number_before(&err, " lagged ticks");
    assert!(from_event > 0, "{err}");
    // Ticks taken and missed make the rate; the last tick may fall after the run's end.
    assert!(
        (ticks + lagged).abs_diff(1000) <= 20,
        "{ticks} ticks and {lagged} missed for 2 s at 500 Hz: {err}"
    );
}

#[apply(representative)]
fn record_pprof_read_by_go_tool_pprof(py: &str) {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let p = PythonProcess::ready(py, "busy.py", &[]);
    let dir = fresh_dir(&format!("cli-{py}"));
    let file = dir.join("profile.pb.gz");
    record(p.pid(), &["-d", "1.5", "-r", "200"], &file);
    let raw = go_pprof_raw(&file);
    assert!(raw.contains("PeriodType: cpu nanoseconds"), "{raw}");
    assert!(raw.contains("samples/count cpu/nanoseconds"), "{raw}");
    // Every location is one of the script's own frames, at a line the script has there.
    // Any line of hot()'s body: the loop, its body, its setup and its return.
    let body: Vec<u32> =
        (marker_line("busy.py", "hot_def")..=marker_line("busy.py", "hot_end")).collect();
    let hot: Vec<&str> = raw
        .lines()
        .filter(|l| l.contains(" hot ") && l.contains("busy.py:"))
        .collect();
    assert!(!hot.is_empty(), "{raw}");
    for l in &hot {
        let line = line_after(l, "busy.py");
        assert!(
            body.contains(&line),
            "hot() at line {line}, expected one of {body:?}: {l}"
        );
    }
    let warm = format!("busy.py:{}", marker_line("busy.py", "warm"));
    assert!(
        raw.lines()
            .any(|l| l.contains(" warm ") && l.contains(&warm)),
        "{raw}"
    );
    assert!(
        raw.contains(&format!("busy.py:{}", marker_line("busy.py", "module"))),
        "{raw}"
    );
    // The profile is dominated by hot().
    let top = go_pprof(&["-top"], &file);
    assert!(top.lines().any(|l| l.trim_end().ends_with(" hot")), "{top}");
}

#[apply(oldest_and_newest)]
fn record_collapsed_and_flamegraph(py: &str) {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let p = PythonProcess::ready(py, "busy.py", &[]);
    let dir = fresh_dir(&format!("cli-{py}"));
    let pid = p.pid();
    let text = record_file(pid, &dir.join("out.txt"), &["-d", "1", "-f", "collapsed"]);
    let warm = marker_line("busy.py", "warm");
    // Nearly every sample is inside warm(); the module's own loop line between two calls is a
    // real place too, and a sample may land on it.
    let count = |l: &str| -> u64 {
        l.rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let total: u64 = text.lines().map(count).sum();
    let in_warm: u64 = text
        .lines()
        .filter(|l| l.contains("warm (") && l.contains(&format!("busy.py:{warm})")))
        .map(count)
        .sum();
    assert!(total > 0 && in_warm * 10 >= total * 9, "{text}");
    let svg = record_file(pid, &dir.join("out.svg"), &["-d", "1", "-f", "flamegraph"]);
    assert!(
        svg.contains("<svg") && svg.contains("hot"),
        "flame graph names hot()"
    );
    // Without -f, the extension says the format.
    let svg = record_file(pid, &dir.join("inferred.svg"), &["-d", "1"]);
    assert!(svg.contains("<svg"), "an SVG from the .svg extension");
    // speedscope (issue 17, item 7): one sampled profile per thread, stacks root first.
    let json = record_file(pid, &dir.join("out.speedscope.json"), &["-d", "1"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("speedscope JSON");
    assert_eq!(
        v["$schema"], "https://www.speedscope.app/file-format-schema.json",
        "{json}"
    );
    let frames = v["shared"]["frames"].as_array().expect("frames");
    let hot = frames
        .iter()
        .position(|f| f["name"] == "hot")
        .unwrap_or_else(|| panic!("no hot frame: {json}"));
    let profile = &v["profiles"][0];
    assert_eq!(profile["type"], "sampled", "{json}");
    let samples = profile["samples"].as_array().expect("samples");
    assert_eq!(
        samples.len(),
        profile["weights"].as_array().map_or(0, Vec::len)
    );
    assert!(
        samples
            .iter()
            .any(|s| s.as_array().and_then(|s| s.last()) == Some(&hot.into())),
        "hot is the leaf of some stack: {json}"
    );
}

/// Issue 17, item 6: with `--subprocesses` the root need not be Python. A shell that starts
/// Python a second later (py-spy's delayed launch) is watched, its Python child profiled, and
/// the run ends when the shell does.
#[test]
fn subprocesses_of_a_non_python_parent_are_profiled() {
    pyagent_bin();
    let py = Interpreter::by_name("py312");
    let command = format!(
        "sleep 1; {} {} 3; true",
        py.host_exe().display(),
        script("busy.py").display()
    );
    let mut shell = std::process::Command::new("sh")
        .args(["-c", &command])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("sh");
    let dir = fresh_dir("cli-delayed");
    let file = dir.join("out.txt");
    let out = run_pyagent(&[
        "record",
        "--pid",
        &shell.id().to_string(),
        "--subprocesses",
        "-o",
        file.to_str().expect("utf-8"),
    ]);
    let _ = shell.wait();
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    let text = std::fs::read_to_string(&file).expect("collapsed output");
    assert!(
        text.contains("hot ("),
        "the Python child was profiled: {text}\n{err}"
    );
}

/// Issue 17, item 1: as `nobody` without capabilities, root's Python processes cannot be
/// inspected. They are not "not_python": the run says in one line that nothing can be profiled
/// for lack of permission, and fails.
#[test]
fn missing_privileges_are_named_not_counted_as_not_python() {
    pyagent_bin();
    let _p = PythonProcess::ready("py312", "busy.py", &["30"]);
    let dir = fresh_dir("cli-nobody");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .expect("chmod");
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(pyagent_bin())
        .args(["--all-python", "--mode", "userspace", "-d", "1", "-o"])
        .arg(&dir)
        .output()
        .expect("setpriv runs");
    // Warnings at start name what is missing; the error is the last line.
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let (last, warnings) = err
        .trim_end()
        .lines()
        .collect::<Vec<_>>()
        .split_last()
        .map(|(l, w)| (l.to_string(), w.to_vec()))
        .expect("output");
    assert!(
        last.starts_with("pyagent: no process can be profiled")
            && last.contains("permission denied")
            && last.contains("CAP_SYS_PTRACE missing"),
        "{err}"
    );
    assert!(
        warnings.iter().all(|w| w.starts_with("pyagent: warning: "))
            && warnings
                .iter()
                .any(|w| w.contains("CAP_SYS_PTRACE missing")),
        "{err}"
    );
}

/// Issue 17, item 2: `--all-python --duration` reads the service's configuration layers with
/// the service's validation: a misspelt key and an out-of-range rate are refused, the file's
/// rate, output directory and service-name rules apply. `-f` in service mode is refused
/// rather than ignored.
#[test]
fn duration_runs_take_the_service_configuration() {
    pyagent_bin();
    let dir = fresh_dir("cli-duration-config");
    let config = dir.join("pyagent.toml");
    let run_with = |toml: &str, extra: &[&str]| {
        std::fs::write(&config, toml).expect("config file");
        let mut args = vec!["--all-python", "--config", config.to_str().expect("utf-8")];
        args.extend_from_slice(extra);
        run_pyagent(&args)
    };
    assert_one_line_error(
        &run_with("intervall = \"5s\"\n", &["-d", "1", "-o", "/tmp"]),
        "unknown field `intervall`",
    );
    assert_one_line_error(
        &run_with("rate_hz = 50000\n", &["-d", "1", "-o", "/tmp"]),
        "rate_hz",
    );
    assert_one_line_error(
        &run_with("", &["-f", "flamegraph", "-o", "/tmp"]),
        "-f flamegraph",
    );

    let p = PythonProcess::ready("py312", "busy.py", &["60"]);
    let out_dir = dir.join("profiles");
    let toml = format!(
        "rate_hz = 50\n[output]\ndir = {:?}\n[[service_name]]\ncontains = \"busy.py\"\nname = \"billing\"\n",
        out_dir.to_str().expect("utf-8")
    );
    let out = run_with(&toml, &["-d", "2", "--mode", "userspace"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let file = out_dir.join(format!("billing-{}.pb.gz", p.pid()));
    assert!(
        file.exists(),
        "named by the file's rule: {}",
        stderr_of(&out)
    );
    let raw = go_pprof_raw(&file);
    assert!(raw.contains("service_name:[billing]"), "{raw}");
    assert!(
        raw.contains("Period: 20000000"),
        "50 Hz from the file: {raw}"
    );
    assert!(stderr_of(&out).contains("50 Hz"), "{}", stderr_of(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `-f` that contradicts the output's extension is a one-line error, before any sampling.
#[test]
fn format_contradicting_the_extension_is_refused() {
    let out = run_pyagent(&[
        "record",
        "--pid",
        "1",
        "-d",
        "1",
        "-f",
        "pprof",
        "-o",
        "/tmp/pyagent-out.svg",
    ]);
    let err = stderr_of(&out);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("-f pprof") && err.contains("flamegraph"),
        "{err}"
    );
}

#[apply(representative)]
fn target_exits_while_recorded(py: &str) {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
                   // busy.py with a deadline: it exits on its own after 1 s while pyagent records (no -d).
    let mut p = PythonProcess::ready(py, "busy.py", &["1"]);
    let dir = fresh_dir(&format!("cli-exit-{py}"));
    // A clean stop when the target exits.
    let (text, _) = record_collapsed(p.pid(), &["-r", "500"], &dir.join("out.txt"));
    assert!(
        text.contains("hot ("),
        "samples taken before the exit are kept: {text}"
    );
    p.wait_exit(Duration::from_secs(10));
}

#[apply(representative)]
fn blocking_mode(py: &str) {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let p = PythonProcess::ready(py, "busy.py", &[]);
    let dir = fresh_dir(&format!("cli-blocking-{py}"));
    let (text, _) = record_collapsed(p.pid(), &["--blocking", "-d", "1"], &dir.join("out.txt"));
    assert!(text.contains("hot ("), "{text}");
}

#[apply(representative)]
fn record_follows_subprocesses(py: &str) {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let mut p = PythonProcess::spawn(Interpreter::by_name(py), &script("parent.py"), &["3"]);
    let line = p.wait_for_line("ready", Duration::from_secs(30));
    let child: u32 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("child pid");
    let dir = fresh_dir(&format!("cli-subproc-{py}"));
    let (text, _) = record_collapsed(
        p.pid(),
        &["--subprocesses", "-d", "1.5"],
        &dir.join("out.txt"),
    );
    // Only the child burns CPU: its stacks are there, tagged with its pid in the thread label.
    assert!(text.lines().any(|l| l.contains("hot (")), "{text}");
    assert!(
        text.lines()
            .all(|l| !l.contains("hot (") || l.contains(&child.to_string())),
        "{text}"
    );
}

/// A thread already traced by someone else cannot be seized (EPERM): `--blocking` skips it,
/// counts it, and still finishes on time with the samples.
#[test]
fn blocking_skips_threads_it_cannot_seize() {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let p = PythonProcess::ready("py312", "busy.py", &[]);
    let pid = p.pid();
    // The test process becomes the tracer of the target's main thread.
    // SAFETY: PTRACE_SEIZE with no options on a child of ours; no memory is passed.
    let rc = unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid as libc::pid_t, 0usize, 0usize) };
    assert_eq!(rc, 0, "seize: {}", std::io::Error::last_os_error());
    let dir = fresh_dir("cli-eperm");
    let (text, err) = record_collapsed(pid, &["--blocking", "-d", "1"], &dir.join("out.txt"));
    let denied: u64 = err
        .split(" denied (EPERM)")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no EPERM count in: {err}"));
    assert!(denied > 0, "{err}");
    assert!(text.contains("hot ("), "{text}");
    // SAFETY: detaching the thread seized above.
    unsafe { libc::ptrace(libc::PTRACE_DETACH, pid as libc::pid_t, 0usize, 0usize) };
}

#[apply(representative)]
fn top_shows_the_hot_function(py: &str) {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let p = PythonProcess::ready(py, "busy.py", &["60"]);
    let text = top(p.pid(), &["--iterations", "1", "--rows", "3"]);
    let first_row = text.lines().nth(2).unwrap_or_default();
    assert!(
        first_row.contains("hot (") && first_row.contains("busy.py"),
        "{text}"
    );
    assert!(
        text.lines().skip(2).any(|l| l.contains("<module> (")),
        "{text}"
    );
}

/// `pyagent top --pid PID ARGS`, which must succeed: its stdout.
fn top(pid: u32, args: &[&str]) -> String {
    let pid = pid.to_string();
    let mut all = vec!["top", "--pid", &pid];
    all.extend_from_slice(args);
    let out = run_pyagent(&all);
    assert!(out.status.success(), "{}", stderr_of(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Issue 39: `top --cumulative` counts since the start, like py-spy top's toggle: a function
/// that ran only in the first 2 s (`warm_up`) still has its row after 5 refreshes, when a view
/// of the last second shows only `steady`.
#[test]
fn top_cumulative_keeps_a_function_that_ran_only_at_the_start() {
    pyagent_bin();
    let p = PythonProcess::ready("py312", "warm_up.py", &["60"]);
    let text = top(
        p.pid(),
        &["--iterations", "5", "--rows", "5", "--cumulative"],
    );
    // Not a terminal: the five tables one after the other, each after its header.
    let tables: Vec<&str> = text.split("pyagent top: ").skip(1).collect();
    assert_eq!(tables.len(), 5, "{text}");
    let last = tables[4];
    assert!(last.contains("samples since the start ("), "{text}");
    assert!(
        last.contains("warm_up (") && last.contains("steady ("),
        "{text}"
    );
}

/// Every duration flag takes plain seconds and units alike, through the config's own parser: a
/// form that parses gets past the flags (and fails later, on the missing output), and a bad one
/// is one line naming the flag, whether the value is joined with `=` or not.
#[test]
fn duration_flags_take_seconds_and_units() {
    let needle_for = |interval: &str| match interval {
        // Below the interval's 1 s minimum: refused by the config's validation.
        "500ms" => "interval: must be between 1s and 1h",
        // Accepted: the next problem is that profiles go nowhere.
        _ => "output.dir: set output.dir, pyroscope.url or otlp.endpoint",
    };
    for interval in ["2", "2s", "500ms", "1.5", "1m30s"] {
        let out = run_pyagent(&["--all-python", "--interval", interval]);
        assert_one_line_error(&out, needle_for(interval));
        let joined = format!("--interval={interval}");
        let out = run_pyagent(&["--all-python", &joined]);
        assert_one_line_error(&out, needle_for(interval));
    }
    for duration in ["2", "2s", "500ms", "0.5"] {
        let out = run_pyagent(&["--all-python", "--duration", duration]);
        assert_one_line_error(&out, "--all-python --duration needs --output DIR");
    }
    // PYAGENT_INTERVAL goes through the same parser.
    let out = Command::new(pyagent_bin())
        .args(["--all-python"])
        .env("PYAGENT_INTERVAL", "2")
        .output()
        .expect("run pyagent");
    assert_one_line_error(
        &out,
        "output.dir: set output.dir, pyroscope.url or otlp.endpoint",
    );
}

/// `--log` goes before a subcommand as well as after it; the service's own flags do not go with
/// one.
#[test]
fn log_goes_before_a_subcommand_and_service_flags_do_not() {
    for args in [
        &["--log", "warn", "dump", "--pid", "4194305"][..],
        &["dump", "--log", "warn", "--pid", "4194305"],
    ] {
        assert_one_line_error(&run_pyagent(args), "does not exist");
    }
    let out = run_pyagent(&["--all-python", "dump", "--pid", "4194305"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err = stderr_of(&out);
    assert!(
        err.contains("the subcommand 'dump' cannot be used with '--all-python'"),
        "{err}"
    );
}

#[test]
fn bad_flag_values_are_one_line() {
    for args in [
        &["--all-python", "--interval", "-5s"][..],
        &["--all-python", "--interval=-5s"],
        &["--all-python", "--interval", "ten"],
        &["--all-python", "-d", "-1"],
        &["record", "--pid", "1", "-o", "/dev/null", "-d", "-5s"],
        &[
            "record",
            "--pid",
            "1",
            "-o",
            "/dev/null",
            "--duration=5 parsecs",
        ],
    ] {
        let out = run_pyagent(args);
        assert_one_line_error(&out, "not a duration");
        let err = stderr_of(&out);
        assert!(
            err.starts_with("pyagent: --interval: ") || err.starts_with("pyagent: --duration: "),
            "names the flag: {err}"
        );
    }
    for args in [
        &["--all-python", "--rate", "0"][..],
        &["record", "--pid", "1", "-o", "/dev/null", "--rate", "10001"],
        &["top", "--pid", "1", "-r", "0"],
    ] {
        let out = run_pyagent(args);
        assert_one_line_error(
            &out,
            "--rate: must be between 1 and 10000 samples per second",
        );
    }
    let out = run_pyagent(&["--all-python", "--rate", "-5"]);
    assert_one_line_error(&out, "--rate: not a whole number: \"-5\"");
    let out = run_pyagent(&["--all-python", "--metrics-addr", "localhost"]);
    assert_one_line_error(&out, "--metrics-addr: not an address with a port");
    let out = run_pyagent(&["dump", "--pid", "abc"]);
    assert_one_line_error(&out, "--pid: not a whole number: \"abc\"");
}

/// `record` without `-o`, like py-spy: the profile goes to a file of its own in the current
/// directory (pprof, named after the pid), and the summary says which.
#[test]
fn record_without_an_output_names_its_own_file() {
    let p = PythonProcess::ready("py312", "busy.py", &[]);
    let dir = fresh_dir("record-default-output");
    let out = Command::new(pyagent_bin())
        .args(["record", "--pid", &p.pid().to_string(), "-d", "1"])
        .current_dir(&dir)
        .output()
        .expect("run pyagent");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let written: Vec<_> = std::fs::read_dir(&dir)
        .expect("the directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let prefix = format!("pyagent-{}-", p.pid());
    assert!(
        written.len() == 1 && written[0].starts_with(&prefix) && written[0].ends_with(".pb.gz"),
        "{written:?}"
    );
    assert!(
        err.contains(&written[0]),
        "the summary names the file: {err}"
    );
    let raw = go_pprof_raw(&dir.join(&written[0]));
    assert!(raw.contains("busy.py"), "{raw}");
}

/// A refusal tells the user what would help: to `nobody` without capabilities, to get
/// CAP_SYS_PTRACE; to root, which holds it, not that again (init here, like some sandboxes' and
/// containers' init, refuses even root), but what else refuses it.
#[test]
fn a_refusal_asks_for_ptrace_only_when_it_is_missing() {
    let p = PythonProcess::ready("py312", "busy.py", &[]);
    let pid = p.pid().to_string();
    let out = pyagent_tests::agent::as_nobody("")
        .args(["dump", "--pid", &pid])
        .output()
        .expect("run pyagent as nobody");
    assert_one_line_error(&out, "run as root or grant CAP_SYS_PTRACE");

    let out = run_pyagent(&["dump", "--pid", "1"]);
    if std::fs::read_link("/proc/1/exe").is_err() {
        assert_one_line_error(&out, "refused although pyagent holds CAP_SYS_PTRACE");
    } else {
        // Where init can be read, it is simply not Python.
        assert_one_line_error(&out, "is not a CPython process");
    }
}
