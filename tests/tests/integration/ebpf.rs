//! `pyagent --all-python` and `record --mode ebpf` with the real BPF program (CI runs as root).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pyagent_tests::agent::{host_wide_lock, number_before, pyagent_bin, record, record_collapsed};
use pyagent_tests::consumers::go_pprof_raw;
use pyagent_tests::scratch::fresh_dir;
use pyagent_tests::stacks::{line_after, marker_line, script};
use pyagent_tests::wait::wait_for;
use pyagent_tests::{Interpreter, PythonProcess, ROLES};
use rstest::rstest;
use rstest_reuse::apply;

use crate::{oldest_and_newest, representative_without_frame_cache};

/// A running `pyagent --all-python`.
struct Agent {
    child: Child,
    rest: std::thread::JoinHandle<String>,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Agent {
    /// Waits until the agent logs a line containing `needle`.
    fn wait_for_log(&self, needle: &str, timeout: Duration) -> String {
        self.wait_for_log_with(&[needle], timeout)
    }

    /// Waits for a line of the agent's log that holds every one of `needles`; returns it.
    fn wait_for_log_with(&self, needles: &[&str], timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if needles.iter().all(|n| line.contains(n)) => return line,
                Ok(_) => {}
                Err(e) => panic!("the agent never logged a line with {needles:?} ({e:?})"),
            }
        }
    }

    /// Waits for the agent to finish; returns its stderr after the start line.
    fn finish(mut self) -> String {
        let status = self.child.wait().expect("pyagent finishes");
        let err = self.rest.join().expect("stderr reader");
        assert!(status.success(), "pyagent failed: {err}");
        err
    }
}

/// Starts `pyagent --all-python` for `secs` and waits for its start line.
fn start_agent(dir: &Path, secs: &str, extra: &[&str]) -> Agent {
    let mut child = Command::new(pyagent_bin())
        .args([
            "--all-python",
            "--mode",
            "ebpf",
            "-d",
            secs,
            "-o",
            dir.to_str().expect("utf-8"),
        ])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start pyagent");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr"));
    // Log lines may come first; the start line says the initial scan is done.
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = lines.read_line(&mut line).expect("agent stderr");
        assert!(n > 0, "pyagent exited before starting: {seen}");
        seen.push_str(&line);
        if line.contains("profiling every CPython process (ebpf mode") {
            break;
        }
    }
    // Keep reading the rest in the background so the pipe never fills; lines are also
    // forwarded for tests that wait on what the agent logs.
    let (tx, rx) = std::sync::mpsc::channel();
    let rest = std::thread::spawn(move || {
        let mut all = seen;
        for l in lines.lines().map_while(Result::ok) {
            let _ = tx.send(l.clone());
            all.push_str(&l);
            all.push('\n');
        }
        all
    });
    Agent {
        child,
        rest,
        lines: rx,
    }
}

/// The profile written for `pid` in `dir`.
fn profile_of(dir: &Path, pid: u32, agent_log: &str) -> PathBuf {
    let suffix = format!("-{pid}.pb.gz");
    std::fs::read_dir(dir)
        .expect("output dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(&suffix))
        .unwrap_or_else(|| {
            let all: Vec<_> = std::fs::read_dir(dir)
                .expect("dir")
                .filter_map(|e| e.ok())
                .map(|e| e.file_name())
                .collect();
            panic!(
                "no profile for pid {pid} in {}: {all:?}; agent said: {agent_log}",
                dir.display()
            )
        })
}

/// Checks that every `busy.py` frame in a profile is at a line where that function is.
fn assert_busy_profile(raw: &str, what: &str) {
    let hot: Vec<u32> =
        (marker_line("busy.py", "hot_def")..=marker_line("busy.py", "hot_end")).collect();
    let warm = marker_line("busy.py", "warm");
    let module = marker_line("busy.py", "module");
    let mut seen = BTreeMap::new();
    for l in raw.lines().filter(|l| l.contains("busy.py:")) {
        let func = l.split_whitespace().nth(3).expect("function");
        let line = line_after(l, "busy.py");
        let ok = match func {
            "hot" => hot.contains(&line),
            // The `def` line too: a sample can land on the function's entry.
            "warm" => line == warm || line == marker_line("busy.py", "warm_def"),
            "<module>" => line == module || line == marker_line("busy.py", "module_loop"),
            _ => false,
        };
        assert!(ok, "{what}: unexpected frame {func} at line {line}: {l}");
        *seen.entry(func.to_string()).or_insert(0) += 1;
    }
    assert!(
        seen.contains_key("hot") && seen.contains_key("warm") && seen.contains_key("<module>"),
        "{what}: {raw}"
    );
}

#[test]
fn all_python_profiles_every_interpreter_at_once() {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let _serial = host_wide_lock();
    let procs: Vec<PythonProcess> = ROLES
        .iter()
        .map(|role| PythonProcess::ready(role.name, "busy.py", &["300"]))
        .collect();
    let dir = fresh_dir("ebpf-matrix");
    let log = start_agent(&dir, "4", &[]).finish();
    for (role, p) in ROLES.iter().zip(&procs) {
        let name = role.name;
        let raw = go_pprof_raw(&profile_of(&dir, p.pid(), &log));
        assert_busy_profile(&raw, name);
        assert!(
            raw.contains(&format!("pid:[{}]", p.pid())),
            "{name}: labelled with its pid"
        );
    }
}

#[test]
fn process_started_later_and_process_exiting_midway() {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let _serial = host_wide_lock();
    let dir = fresh_dir("ebpf-lifecycle");
    // Runs until the test ends it in the middle of the agent's run.
    let mut early = PythonProcess::ready("py312", "busy.py", &["300"]);
    let agent = start_agent(&dir, "12", &["--log", "pyagent::discovery=info"]);
    // Started after the agent: found by a later scan.
    let late = PythonProcess::ready("py315", "busy.py", &["300"]);
    agent.wait_for_log(&format!("pid={}", late.pid()), Duration::from_secs(10));
    // Let the agent sample both for a while (a workload span, not a sync), then end one.
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(early.pid() as i32, libc::SIGTERM) };
    let log = agent.finish();
    let log = format!("{log} (early {}, late {})", early.pid(), late.pid());
    early.wait_exit(Duration::from_secs(10));
    assert_busy_profile(
        &go_pprof_raw(&profile_of(&dir, early.pid(), &log)),
        "exited process",
    );
    assert_busy_profile(
        &go_pprof_raw(&profile_of(&dir, late.pid(), &log)),
        "late process",
    );
}

/// A worker forked without exec by a profiled process (a pre-forking server's) is found from
/// the fork's notice, and its exit from the exit's notice: not from a /proc listing, which the
/// agent makes every 5 s only while notices flow.
#[test]
fn forked_worker_is_found_and_seen_gone_by_notices() {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let _serial = host_wide_lock();
    let dir = fresh_dir("ebpf-fork");
    let mut parent = PythonProcess::ready("py312", "forks.py", &["60"]);
    // Started after the parent: its first scan (done when it says it is profiling) found it.
    let agent = start_agent(&dir, "20", &["--log", "pyagent::discovery=info"]);
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(parent.pid() as i32, libc::SIGUSR1) };
    let forked = parent.wait_for_line("forked", Duration::from_secs(10));
    let worker: i32 = forked
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("a worker pid: {forked}"));
    // The space ends the number: pid=123 is not pid=1234.
    let worker_pid = format!("pid={worker} ");
    let found = agent.wait_for_log_with(
        &["profiling CPython process", &worker_pid],
        Duration::from_secs(10),
    );
    // The worker runs until the test ends it: stopped whatever happens below.
    struct Kill(i32);
    impl Drop for Kill {
        fn drop(&mut self) {
            // SAFETY: signalling a process this test forked (through its parent).
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
    let kill = Kill(worker);
    assert!(
        found.contains("by_notice=true"),
        "found by a listing: {found}"
    );
    // Its samples reach its own profile: wait until the agent has resolved some.
    wait_for("the worker's samples", Duration::from_secs(10), || {
        let stat = std::fs::read_to_string(format!("/proc/{worker}/stat")).ok()?;
        // At least a second of CPU time: sampled at 99 Hz by then.
        let utime: u64 = stat
            .rsplit(')')
            .next()?
            .split_whitespace()
            .nth(11)?
            .parse()
            .ok()?;
        (utime >= 100).then_some(())
    });
    drop(kill);
    let gone = agent.wait_for_log_with(
        &["profiled process gone", &worker_pid],
        Duration::from_secs(10),
    );
    assert!(
        gone.contains("by_notice=true"),
        "seen gone by a listing: {gone}"
    );
    let log = agent.finish();
    let raw = go_pprof_raw(&profile_of(&dir, worker as u32, &log));
    assert!(raw.contains("worker_hot"), "the worker's profile: {raw}");
}

#[test]
fn process_in_a_new_pid_namespace() {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let _serial = host_wide_lock();
    let py = Interpreter::by_name("py311-debian");
    let mut unshare = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(&py.exe)
        .arg(script("busy.py"))
        .arg("20")
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare");
    let mut out = BufReader::new(unshare.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("ready");
    assert_eq!(line.trim(), "ready");
    // The Python process is unshare's child; in its namespace it is pid 1.
    let unshare_pid = i32::try_from(unshare.id()).expect("a pid");
    let host_pid = wait_for("unshare's child", Duration::from_secs(10), || {
        let task = procfs::process::Process::new(unshare_pid)
            .and_then(|p| p.task_from_tid(unshare_pid))
            .ok()?;
        task.children().ok()?.first().copied()
    });
    let dir = fresh_dir("ebpf-pidns");
    let log = start_agent(&dir, "3", &[]).finish();
    let _ = unshare.kill();
    let _ = unshare.wait();
    let raw = go_pprof_raw(&profile_of(&dir, host_pid, &log));
    assert_busy_profile(&raw, "pid namespace");
    assert!(
        raw.contains(&format!("pid:[{host_pid}]")),
        "host pid label: {raw}"
    );
    assert!(raw.contains("ns_pid:[1]"), "in-namespace pid label: {raw}");
    // Issue 17, item 4: thread ids are labelled as pids are: the host's in `thread_id`, the
    // namespace's in `ns_thread_id` (the main thread's ids are its process's).
    assert!(
        raw.contains(&format!("thread_id:[{host_pid}]")) && raw.contains("ns_thread_id:[1]"),
        "thread id labels: {raw}"
    );
}

/// Self shares of each function, in percent, from `go tool pprof -raw`.
fn shares(raw: &str) -> BTreeMap<String, f64> {
    // Samples: "   <count> <value>: <loc ids>" lines; Locations: "  <id>: 0x0 M=1 <func> <file>:<line> s=..".
    let mut locs = BTreeMap::new();
    let mut in_locs = false;
    let mut samples: Vec<(u64, u64)> = Vec::new();
    for l in raw.lines() {
        if l.starts_with("Locations") {
            in_locs = true;
            continue;
        }
        if l.starts_with("Mappings") {
            in_locs = false;
        }
        let t = l.trim_start();
        if in_locs {
            if let Some((id, rest)) = t.split_once(": ") {
                if let (Ok(id), Some(func)) = (id.parse::<u64>(), rest.split_whitespace().nth(2)) {
                    locs.insert(id, func.to_string());
                }
            }
        } else if let Some((counts, ids)) = t.split_once(": ") {
            let mut c = counts.split_whitespace();
            if let (Some(Ok(n)), Some(Ok(leaf))) = (
                c.next().map(str::parse::<u64>),
                ids.split_whitespace().next().map(str::parse::<u64>),
            ) {
                samples.push((n, leaf));
            }
        }
    }
    let total: u64 = samples.iter().map(|s| s.0).sum();
    let mut out = BTreeMap::new();
    for (n, leaf) in samples {
        *out.entry(locs.get(&leaf).cloned().unwrap_or_default())
            .or_insert(0.0) += 100.0 * n as f64 / total as f64;
    }
    out
}

#[test]
fn ebpf_and_userspace_agree() {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let _serial = host_wide_lock();
    let p = PythonProcess::ready("py315", "busy.py", &["30"]);
    let dir = fresh_dir("ebpf-agree");
    let _pid = p.pid().to_string();
    let mut result = Vec::new();
    for mode in ["ebpf", "userspace"] {
        let file = dir.join(format!("{mode}.pb.gz"));
        record(p.pid(), &["--mode", mode, "-d", "3", "-r", "199"], &file);
        let raw = go_pprof_raw(&file);
        assert_busy_profile(&raw, mode);
        result.push(shares(&raw));
    }
    let (ebpf, user) = (&result[0], &result[1]);
    // Same functions where it matters: a function absent from one profile has share 0 there.
    for f in ebpf.keys().chain(user.keys()) {
        let (a, b) = (
            ebpf.get(f).copied().unwrap_or(0.0),
            user.get(f).copied().unwrap_or(0.0),
        );
        assert!(
            (a - b).abs() <= 5.0,
            "{f}: {a:.1}% (ebpf) vs {b:.1}% (userspace): {ebpf:?} vs {user:?}"
        );
    }
    assert!(ebpf.get("hot").is_some_and(|s| *s > 50.0), "{ebpf:?}");
}

/// How often the BPF walks stopped at the 3.15 anchor, from a `record --mode ebpf` summary.
fn anchor_stops(err: &str) -> u64 {
    // Not the n-th "anchor ": a run that lost records to anchor misses says so in a line of
    // its own before the details.
    err.split_once("BPF stopped at the 3.15 anchor ")
        .and_then(|(_, s)| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no anchor stop count in: {err}"))
}

/// 3.15 event loops: each `await` of a task step takes the task's frames and the step's C-level
/// entry frame off the chain. The defect: the stored stack held no entry frame, so the sequence
/// arithmetic failed for every record that stopped at the loop's frame (68 of 113 records lost
/// in 3 s on async_tasks.py, 57 of 111 on async_churn.py), and such threads were demoted to
/// whole walks. The stored chain now counts entry frames: the cache vouches for the walks that
/// stop at the anchor.
#[rstest]
fn ebpf_frame_cache_keeps_event_loops_anchored(
    #[values("async_tasks.py", "async_churn.py")] target: &str,
) {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let _serial = host_wide_lock();
    let p = PythonProcess::ready("py315", target, &[]);
    let dir = fresh_dir(&format!("ebpf-loop-{target}"));
    let file = dir.join("loop.txt");
    let (_, err) = record_collapsed(p.pid(), &["--mode", "ebpf", "-d", "3", "-r", "199"], &file);
    let samples = number_before(&err, " samples,");
    let misses = number_before(&err, " anchor misses");
    assert!(samples >= 30, "{target}: sampled: {err}");
    // The walks that stopped at the anchor were vouched for: at most 1 in 20 records lost. How
    // many stop there is timing (a thread whose refresh walks tear under churn has no anchor
    // and is walked whole, at no loss), so it is reported, not asserted: a cost, for benches.
    let stops = anchor_stops(&err);
    assert!(
        misses * 20 <= samples,
        "{target}: few anchor misses ({stops} walks stopped at the anchor): {err}"
    );
}

/// 3.15 in eBPF mode: the program stops at `last_profiled_frame` and the agent splices its
/// cached stack; two chains alternating at a high rate (gh-151613) never come out mixed.
#[test]
fn ebpf_frame_cache_never_mixes_chains() {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let _serial = host_wide_lock();
    // Leaves of about 1 ms: long enough for most refresh walks to be proven and anchored (at
    // 100 µs a busy host anchored under half the walks). Short leaves are the race test's.
    let p = PythonProcess::ready("py315", "alternate.py", &["30000"]);
    let dir = fresh_dir("ebpf-aba");
    let file = dir.join("alt.txt");
    let (text, err) = record_collapsed(p.pid(), &["--mode", "ebpf", "-d", "3", "-r", "499"], &file);
    let anchor_stops = anchor_stops(&err);
    let samples = number_before(&err, " samples,");
    let misses = number_before(&err, " anchor misses");
    // How many walks stop there is timing: a thread is anchored only after a refresh walk
    // proven whole, and 40 to 77% of the walks stopped at the anchor in runs here. A fifth
    // proves the cache's splice was exercised, which is what the mixing check needs.
    assert!(
        anchor_stops * 5 >= samples,
        "the BPF walks used the anchor: {err}"
    );
    assert!(misses * 20 <= samples, "few anchor misses: {err}");
    assert!(
        text.contains("a_leaf") && text.contains("b_leaf"),
        "both chains sampled:\n{text}"
    );
    assert_chains_never_mix(&text);
}

/// The anchor write races the thread: between a refresh's walk and its write the walked chain
/// may return and the other one run at the same frame addresses, and records taken under the
/// wrong anchor must never splice the walked stack under it (once 1 sample in 1,489 did, in a
/// loaded CI run). `PYAGENT_TEST_ANCHOR_RACE_US` widens the window between the walk, the write
/// and the write's check to 200 µs, and a spinning process competes for the CPUs: targets with
/// short leaves (the chains swap every few µs) and long ones (a leaf outlives the window), at
/// 999 Hz. The guard must fire (races counted), and no stack may mix.
#[test]
fn ebpf_frame_cache_never_mixes_chains_when_anchor_writes_race() {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let _serial = host_wide_lock();
    let _hog = PythonProcess::ready("py312", "busy.py", &[]);
    let targets = [
        PythonProcess::ready("py315", "alternate.py", &["50"]),
        PythonProcess::ready("py315", "alternate.py", &["3000"]),
    ];
    let dir = fresh_dir("ebpf-aba-race");
    let mut samples = 0;
    let mut races = 0;
    for (i, p) in targets.iter().enumerate() {
        let file = dir.join(format!("alt{i}.txt"));
        let pid = p.pid().to_string();
        let out = std::process::Command::new(pyagent_bin())
            .args([
                "record", "--pid", &pid, "--mode", "ebpf", "-d", "4", "-r", "999", "-v",
            ])
            .args(["-f", "collapsed", "-o", file.to_str().expect("utf-8 path")])
            .env("PYAGENT_TEST_ANCHOR_RACE_US", "200")
            .output()
            .expect("run pyagent");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        let text = std::fs::read_to_string(&file).expect("profile written");
        assert_chains_never_mix(&text);
        samples += number_before(&err, " samples,");
        races += number_before(&err, " stored stacks dropped");
    }
    assert!(races > 0, "the widened window made anchor writes race");
    // Two targets, 4 s at 999 Hz beside a CPU hog on two CPUs: 8,000 at most, and as few as a
    // third of that when other tests load the CPUs too. Enough to have raced, whatever the load.
    assert!(samples > 1_000, "{samples} samples");
}

/// Every stack of an `alternate.py` profile is one of its two chains (or a part of one).
fn assert_chains_never_mix(text: &str) {
    for line in text.lines() {
        let names: Vec<&str> = line
            .rsplit_once(' ')
            .expect("count")
            .0
            .split(';')
            .skip(1)
            .map(|f| f.split(" (").next().unwrap_or(f))
            .collect();
        let ok = matches!(
            names.as_slice(),
            ["<module>"]
                | ["<module>", "a_parent"]
                | ["<module>", "b_parent"]
                | ["<module>", "a_parent", "a_leaf"]
                | ["<module>", "b_parent", "b_leaf"]
        );
        assert!(ok, "impossible stack {names:?} in:\n{text}");
    }
}

/// Before 3.15 every record is a whole walk. One that repeats its thread's last stack but for
/// the top frame's instruction (a loop in the leaf) reuses that stack and looks up the top
/// line alone: the line must still be the one of the record's moment (`two_phases.py` moves
/// between two loops every 200 ms under an unchanging caller), and chains that swap every
/// microsecond over the same frame addresses (`alternate.py`) must never mix.
#[apply(representative_without_frame_cache)]
fn ebpf_records_repeating_a_stack_keep_their_own_top_line(py: &str) {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let _serial = host_wide_lock();
    let dir = fresh_dir(&format!("ebpf-repeat-{py}"));

    let p = PythonProcess::ready(py, "two_phases.py", &[]);
    let file = dir.join("phases.txt");
    let (text, err) = record_collapsed(p.pid(), &["--mode", "ebpf", "-d", "4", "-r", "199"], &file);
    let repeated = number_before(&err, " records repeated");
    let samples = number_before(&err, " samples,");
    assert!(
        samples >= 100 && repeated * 2 >= samples,
        "{py}: most records repeat the stack below the leaf: {err}"
    );
    // Samples whose top frame is `leaf` at one of `markers`' lines, under `caller`.
    // Samples whose top frame is `leaf` at `marker`'s line, under `caller`.
    let at = |marker: &str| -> u64 {
        let end = format!("two_phases.py:{})", marker_line("two_phases.py", marker));
        text.lines()
            .filter_map(|l| l.rsplit_once(' '))
            .filter(|(stack, _)| {
                let top = stack.rsplit(';').next().unwrap_or(stack);
                stack.contains(";caller (") && top.starts_with("leaf (") && top.ends_with(&end)
            })
            .filter_map(|(_, n)| n.parse::<u64>().ok())
            .sum()
    };
    let lines = ["one-loop", "one-body", "two-loop", "two-body"].map(at);
    let (one, two) = (lines[0] + lines[1], lines[2] + lines[3]);
    // A stack reused with its first record's line would show one line per validation (two or
    // three in 4 s): every line of both loops must have its share, each phase about half.
    assert!(
        (one + two) * 10 >= samples * 8
            && lines.iter().all(|&n| n * 20 >= samples)
            && one * 20 >= samples * 7
            && two * 20 >= samples * 7,
        "{py}: both phases' lines, about half each ({lines:?} of {samples}):\n{text}"
    );
    drop(p);

    let p = PythonProcess::ready(py, "alternate.py", &[]);
    let file = dir.join("alt.txt");
    let (text, err) = record_collapsed(p.pid(), &["--mode", "ebpf", "-d", "2", "-r", "499"], &file);
    assert!(
        number_before(&err, " records repeated") > 0,
        "{py}: leaf loops repeat their stacks: {err}"
    );
    assert!(
        text.contains("a_leaf") && text.contains("b_leaf"),
        "both chains sampled:\n{text}"
    );
    assert_chains_never_mix(&text);
}

/// Samples of a collapsed-stacks profile on the main thread (`thread PID (..)`) and in
/// `function` on other threads.
fn main_and_other_samples(collapsed: &str, pid: u32, function: &str) -> (u64, u64) {
    let main_prefix = format!("thread {pid} ");
    let (mut main, mut other) = (0, 0);
    for line in collapsed.lines() {
        let Some((stack, count)) = line.rsplit_once(' ') else {
            continue;
        };
        let n: u64 = count.parse().unwrap_or(0);
        if stack.starts_with(&main_prefix) {
            main += n;
        } else if stack.contains(&format!(";{function} (")) {
            other += n;
        }
    }
    (main, other)
}

/// Threads living 50 ms each, shorter than the agent's thread refresh: the program finds their
/// thread states itself, so their share of the profile is their share of the CPU, and what is
/// still lost is counted (`unknown thread`).
#[test]
fn ebpf_samples_short_lived_threads() {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let _serial = host_wide_lock();
    let mut p = PythonProcess::ready("py312", "short_threads.py", &["50", "8"]);
    let dir = fresh_dir("ebpf-short-threads");
    let file = dir.join("short.txt");
    let (text, err) = record_collapsed(p.pid(), &["--mode", "ebpf", "-d", "4", "-r", "199"], &file);
    // The script's own measure of where its CPU went, over its whole run.
    let cpu_line = p.wait_for_line("cpu ", Duration::from_secs(60));
    let cpu_of = |name: &str| -> f64 {
        cpu_line
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {cpu_line:?}"))
    };
    let (short_cpu, main_cpu) = (cpu_of("short_burn"), cpu_of("main"));
    let cpu_share = 100.0 * short_cpu / (short_cpu + main_cpu);

    let (main, short) = main_and_other_samples(&text, p.pid(), "short_burn");
    assert!(
        short + main >= 100,
        "enough samples: {main} + {short}\n{err}"
    );
    let profile_share = 100.0 * short as f64 / (short + main) as f64;
    assert!(
        (profile_share - cpu_share).abs() <= 12.0,
        "short-lived threads: {profile_share:.1}% of the profile vs {cpu_share:.1}% of the CPU ({cpu_line}); main {main}, short {short}\n{err}"
    );
    // Losses are counted by reason; the threads were found by the program, and few were lost.
    let unknown = number_before(&err, " unknown thread");
    assert!(
        number_before(&err, " new threads' states") > 0,
        "the program found threads itself: {err}"
    );
    assert!(
        unknown * 10 <= short + main,
        "few ticks lost to unknown threads: {err}"
    );
    // Their exits are noticed (each notice has the thread list read again): what lets a process
    // whose threads stay put be re-read every 30 s instead of every 5 s.
    assert!(
        number_before(&err, " thread-exit notices") > 0
            && number_before(&err, " thread lists read") > 0,
        "thread exits noticed: {err}"
    );
}

/// Issue 17, item 4: records the BPF program walked carry the threads' Python names, whole
/// (not the OS name, cut to 15 bytes where CPython sets it), on a version that keeps thread
/// names to Python and on one that also names the OS thread.
#[apply(oldest_and_newest)]
fn ebpf_samples_carry_python_thread_names(py: &str) {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let mut p = PythonProcess::spawn(Interpreter::by_name(py), &script("named_spinners.py"), &[]);
    p.wait_for_line("ready", Duration::from_secs(60));
    let dir = fresh_dir(&format!("ebpf-names-{py}"));
    let file = dir.join("names.txt");
    let (text, err) = record_collapsed(p.pid(), &["--mode", "ebpf", "-d", "2"], &file);
    for name in ["CustomThreadName-1", "CustomThreadName-2"] {
        assert!(
            text.lines()
                .any(|l| l.contains(&format!("({name});")) && l.contains(";spin ")),
            "{name} on its own samples: {text}\n{err}"
        );
    }
}

/// 3.15 with more threads than the frame cache holds (4,096): the main thread, the oldest and so
/// the last one the agent walks, is beyond the cache's bound. Its anchor is cleared so that BPF
/// walks it whole: it gets samples, not anchor misses, and the fallback is counted.
#[test]
fn ebpf_315_threads_beyond_the_frame_cache_are_walked_whole() {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let _serial = host_wide_lock();
    let mut p = PythonProcess::spawn(
        Interpreter::by_name("py315"),
        &script("many_threads.py"),
        &["4200", "120"],
    );
    p.wait_for_line("ready", Duration::from_secs(120));
    let dir = fresh_dir("ebpf-many-threads");
    let file = dir.join("many.txt");
    let (text, err) = record_collapsed(p.pid(), &["--mode", "ebpf", "-d", "4", "-r", "199"], &file);
    let (main, _) = main_and_other_samples(&text, p.pid(), "parked");
    let main_burn: u64 = text
        .lines()
        .filter(|l| l.contains(";main_burn ("))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    assert!(
        main_burn >= 20,
        "the main thread's function was sampled ({main} on main): {err}"
    );
    assert!(
        number_before(&err, " anchor misses") * 10 <= main_burn,
        "few anchor misses: {err}"
    );
    assert!(
        number_before(&err, " walks past its bounds") > 0,
        "the fallback is counted: {err}"
    );
}
