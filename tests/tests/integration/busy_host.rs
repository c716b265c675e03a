//! A busy host (issue 39): a Python thread that shares its CPU with hogs runs a fraction of the
//! time and waits on the run queue the rest. Its profile's CPU time must be the CPU time the
//! kernel accounts to it (`/proc/PID/task/TID/schedstat`), in both modes; in userspace mode its
//! time on the run queue is `wait=cpu` off-CPU time, not CPU.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pyagent_tests::agent::{host_wide_lock, pyagent_bin, record};
use pyagent_tests::consumers::{go_pprof, go_pprof_raw};
use pyagent_tests::scratch::fresh_dir;
use pyagent_tests::wait::wait_for;
use pyagent_tests::PythonProcess;
use rstest::rstest;

/// Pins every thread of `pid` to `cpu`.
fn pin(pid: u32, cpu: usize) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process's tasks");
    for task in tasks.flatten() {
        let tid: libc::pid_t = task
            .file_name()
            .to_str()
            .expect("tid")
            .parse()
            .expect("tid");
        // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes within it.
        let ok = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
        };
        assert_eq!(ok, 0, "pin {tid}: {}", std::io::Error::last_os_error());
    }
}

/// Processes that spin on one CPU until dropped.
struct Hogs(Vec<Child>);

impl Hogs {
    fn on(cpu: usize, n: usize) -> Hogs {
        let hogs = Hogs(
            (0..n)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .stdout(Stdio::null())
                        .spawn()
                        .expect("spawn a hog")
                })
                .collect(),
        );
        for hog in &hogs.0 {
            pin(hog.id(), cpu);
        }
        hogs
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for hog in &mut self.0 {
            let _ = hog.kill();
            let _ = hog.wait();
        }
    }
}

/// schedstat of the main thread of `pid`: ns on a CPU, ns waiting on a run queue.
fn schedstat(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/schedstat"))
        .expect("schedstat (CONFIG_SCHED_INFO)");
    parse_schedstat(&text)
}

/// A schedstat file's first two fields: ns on a CPU, ns waiting on a run queue.
fn parse_schedstat(text: &str) -> (u64, u64) {
    let mut f = text
        .split_whitespace()
        .map(|n| n.parse::<u64>().expect("ns"));
    (f.next().expect("run"), f.next().expect("wait"))
}

/// Seconds of the `index` sample type of a profile (`Total samples` of `go tool pprof -top`),
/// 0 when the profile has none.
fn total_seconds(file: &Path, index: &str) -> f64 {
    let types = go_pprof_raw(file);
    if !types.contains(&format!("{index}/nanoseconds")) {
        return 0.0;
    }
    let top = go_pprof(
        &[&format!("-sample_index={index}"), "-unit=ms", "-top"],
        file,
    );
    let total = top
        .split("Total samples = ")
        .nth(1)
        .and_then(|t| t.split("ms").next())
        .unwrap_or_else(|| panic!("no total in:\n{top}"));
    total.parse::<f64>().expect("ms") / 1e3
}

/// The profile's duration in seconds (`Duration:` of `go tool pprof -raw`).
fn duration_seconds(file: &Path) -> f64 {
    let raw = go_pprof_raw(file);
    raw.lines()
        .find_map(|l| l.strip_prefix("Duration: "))
        .and_then(|d| d.trim().parse().ok())
        .unwrap_or_else(|| panic!("no duration in:\n{raw:.400}"))
}

/// A busy thread pinned to CPU 0 beside two hogs there has about a third of that CPU: the
/// profile's CPU time per second of profile is schedstat's per second of wall time (rates, so
/// that the agent's start, outside the profile, does not count), within 10%. Before, userspace
/// mode counted every runnable tick as CPU: 3.92 s of "CPU" where the kernel accounted 0.86 s.
///
/// Its run-queue time is `wait=cpu` off-CPU time at the same stack, within 10% of schedstat's:
/// userspace credits schedstat itself; eBPF with `--off-cpu` times each preemption until the
/// thread runs again and carries the sum in the thread's next tick record (before: none).
#[rstest]
fn cpu_time_is_what_the_kernel_accounts(#[values("userspace", "ebpf", "ebpf-off-cpu")] mode: &str) {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let _serial = host_wide_lock();
    let p = PythonProcess::ready("py312", "busy.py", &[]);
    pin(p.pid(), 0);
    let _hogs = Hogs::on(0, 2);
    // The hogs share the CPU: the target waits on the run queue.
    let waited = schedstat(p.pid()).1;
    wait_for(
        "the target to wait for its CPU",
        Duration::from_secs(10),
        || (schedstat(p.pid()).1 > waited + 50_000_000).then_some(()),
    );
    let dir = fresh_dir(&format!("busy-host-{mode}"));
    let file = dir.join("busy.pb");
    let (before, started) = (schedstat(p.pid()), Instant::now());
    // eBPF samples the CPU at each tick: at 999 Hz some 800 samples land on the target, a
    // standard error near 4%. Userspace credits the kernel's own account, exact at any rate.
    let sampler = match mode {
        "ebpf-off-cpu" => &["--mode", "ebpf", "--off-cpu"][..],
        _ => &["--mode", mode],
    };
    let err = record(
        p.pid(),
        &[sampler, &["-d", "4", "-r", "999"]].concat(),
        &file,
    );
    let (after, wall) = (schedstat(p.pid()), started.elapsed().as_secs_f64());
    let truth_cpu = (after.0 - before.0) as f64 / 1e9 / wall;
    let truth_wait = (after.1 - before.1) as f64 / 1e9 / wall;
    assert!(
        truth_wait > truth_cpu,
        "the hogs took most of the CPU: {truth_cpu:.3} on, {truth_wait:.3} waiting per second"
    );
    let seconds = duration_seconds(&file);
    let cpu = total_seconds(&file, "cpu") / seconds;
    eprintln!(
        "{mode}: profile {cpu:.3} s of CPU per second, schedstat {truth_cpu:.3} ({truth_wait:.3} waiting)"
    );
    assert!(
        (cpu - truth_cpu).abs() <= 0.1 * truth_cpu,
        "{mode}: {cpu:.3} s of CPU a second in the profile, {truth_cpu:.3} by schedstat: {err}"
    );
    if mode != "ebpf" {
        // The rest of its runnable time is waiting for a CPU, with the same stack.
        let waiting = total_seconds(&file, "off_cpu") / seconds;
        eprintln!(
            "{mode}: profile {waiting:.3} s of wait=cpu per second, schedstat {truth_wait:.3}"
        );
        assert!(
            (waiting - truth_wait).abs() <= 0.1 * truth_wait,
            "{waiting:.3} s a second of wait=cpu in the profile, {truth_wait:.3} by schedstat"
        );
        let cpu_waits = go_pprof(
            &["-sample_index=off_cpu", "-tagfocus=wait=cpu", "-top"],
            &file,
        );
        assert!(cpu_waits.contains("hot"), "{cpu_waits}");
    }
}

/// On-CPU and run-queue ns of every thread of `pid`, summed over its schedstat files.
fn process_schedstat(pid: u32) -> (u64, u64) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process's tasks");
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .map(|text| parse_schedstat(&text))
        .fold((0, 0), |(r, w), (r2, w2)| (r + r2, w + w2))
}

/// Issue 39's trial, rebuilt: real gunicorn (pip-installed) with two sync workers whose
/// requests multiply numpy matrices and query sqlite, six client threads keeping this 2-core
/// host loaded. One worker's profile CPU per second must be within 5% of what the kernel
/// accounted to its threads per second, in both modes. In the trial, userspace `record` said
/// 9.89 s of CPU where schedstat said 1.15 s.
#[rstest]
fn the_trial_service_s_cpu_is_what_the_kernel_accounts(#[values("userspace", "ebpf")] mode: &str) {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let sites = [
        pyagent_tests::pip::site("gunicorn==27.0.1"),
        pyagent_tests::pip::site("numpy==2.5.5"),
    ];
    let _serial = host_wide_lock();
    let port = pyagent_tests::http::free_port().to_string();
    let script = pyagent_tests::stacks::script("trial_app.py");
    let mut args = vec!["serve"];
    args.extend(sites.iter().map(|s| s.to_str().expect("utf-8 path")));
    args.extend([port.as_str(), "2"]);
    let mut server = PythonProcess::spawn_with_env(
        pyagent_tests::Interpreter::by_name("py312"),
        &script,
        &args,
        &[("OPENBLAS_NUM_THREADS", "1")],
    );
    let worker: u32 = {
        let line = server.wait_for_line("worker ", Duration::from_secs(60));
        line["worker ".len()..].trim().parse().expect("worker pid")
    };
    server.wait_for_line("worker ", Duration::from_secs(60));
    let _load = PythonProcess::ready("py312", "trial_app.py", &["load", &port, "6"]);
    let dir = fresh_dir(&format!("trial-{mode}"));
    let file = dir.join("worker.pb");
    let (before, started) = (process_schedstat(worker), Instant::now());
    // eBPF samples at each tick: some 4,000 samples land on the worker in 8 s at 999 Hz, a
    // standard error under 2%.
    let err = record(worker, &["--mode", mode, "-d", "8", "-r", "999"], &file);
    let (after, wall) = (process_schedstat(worker), started.elapsed().as_secs_f64());
    let truth_cpu = (after.0 - before.0) as f64 / 1e9 / wall;
    let truth_wait = (after.1 - before.1) as f64 / 1e9 / wall;
    let cpu = total_seconds(&file, "cpu") / duration_seconds(&file);
    eprintln!(
        "{mode}: worker profile {cpu:.3} s of CPU per second, schedstat {truth_cpu:.3} ({truth_wait:.3} waiting)"
    );
    assert!(
        (cpu - truth_cpu).abs() <= 0.05 * truth_cpu,
        "{mode}: {cpu:.3} s of CPU a second in the profile, {truth_cpu:.3} by schedstat: {err}"
    );
}
