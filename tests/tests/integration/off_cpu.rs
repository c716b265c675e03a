//! Off-CPU profiling (issue 12): `record --mode ebpf --off-cpu` on threads that sleep, block on
//! a socket, block on a lock and fight over the GIL, read back with `go tool pprof`.

use std::collections::BTreeMap;
use std::path::Path;

use pyagent_tests::agent::{host_wide_lock, number_before, pyagent_bin, record, run_pyagent};
use pyagent_tests::consumers::{go_pprof_raw, location_frames};
use pyagent_tests::scratch::fresh_dir;
use pyagent_tests::{Interpreter, PythonProcess};
use rstest_reuse::apply;

use crate::{free_threaded, representative, representative_with_gil, with_gil};

/// One sample of `go tool pprof -raw`: its values, its top function, its frames (function and
/// file, leaf first) and its string labels.
#[derive(Debug)]
struct RawSample {
    values: Vec<u64>,
    top: String,
    stack: Vec<(String, String)>,
    labels: BTreeMap<String, String>,
}

impl RawSample {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

/// The sample types and samples of a profile, as `go tool pprof -raw` prints them.
fn raw_samples(file: &Path) -> (Vec<String>, Vec<RawSample>) {
    let raw = go_pprof_raw(file);
    let mut lines = raw.lines();
    let types: Vec<String> = lines
        .by_ref()
        .skip_while(|l| *l != "Samples:")
        .nth(1)
        .expect("a sample-type line")
        .split_whitespace()
        .map(|t| t.trim_end_matches("[dflt]").to_string())
        .collect();
    let frames = location_frames(&raw);
    let mut samples: Vec<RawSample> = Vec::new();
    for line in raw
        .lines()
        .skip_while(|l| *l != "Samples:")
        .skip(2)
        .take_while(|l| *l != "Locations")
    {
        if let Some((values, locations)) = line.split_once(':').filter(|(v, _)| {
            v.split_whitespace()
                .all(|n| n.bytes().all(|b| b.is_ascii_digit()))
        }) {
            let stack: Vec<(String, String)> = locations
                .split_whitespace()
                .map(|id| {
                    let (function, file) = frames.get(id).copied().unwrap_or(("?", "?"));
                    (function.to_string(), file.to_string())
                })
                .collect();
            samples.push(RawSample {
                values: values
                    .split_whitespace()
                    .map(|n| n.parse().expect("a number"))
                    .collect(),
                top: stack.first().map_or("?".to_string(), |f| f.0.clone()),
                stack,
                labels: BTreeMap::new(),
            });
        } else {
            // `key:[value] key:[value]`, over one or more lines after the sample; a value may
            // hold spaces (`gil_holder:[holder in spin]`).
            let mut rest = line.trim_start();
            while let Some((key, after)) = rest.split_once(":[") {
                let Some((value, tail)) = after.split_once(']') else {
                    break;
                };
                samples
                    .last_mut()
                    .expect("labels follow a sample")
                    .labels
                    .insert(key.trim().to_string(), value.to_string());
                rest = tail.trim_start();
            }
        }
    }
    (types, samples)
}

/// Seconds off the CPU per (top function, wait label).
fn off_cpu_seconds(types: &[String], samples: &[RawSample]) -> BTreeMap<(String, String), f64> {
    let column = types
        .iter()
        .position(|t| t == "off_cpu/nanoseconds")
        .unwrap_or_else(|| panic!("no off_cpu sample type in {types:?}"));
    let mut out = BTreeMap::new();
    for s in samples.iter().filter(|s| s.values[column] > 0) {
        let wait = s.label("wait").expect("off-CPU samples carry a wait label");
        *out.entry((s.top.clone(), wait.to_string())).or_insert(0.0) +=
            s.values[column] as f64 / 1e9;
    }
    out
}

/// waits.py under `py` with `args`, once its threads are started.
fn spawn_waits(py: &str, args: &[&str]) -> PythonProcess {
    PythonProcess::ready(py, "waits.py", args)
}

/// `record --mode ebpf --off-cpu` of `pid` for `secs`; returns the summary on stderr.
fn record_off_cpu(pid: u32, secs: &str, file: &Path) -> String {
    record(pid, &["--mode", "ebpf", "--off-cpu", "-d", secs], file)
}

/// Each way of waiting shows under its own function with its own label: a thread that sleeps
/// nearly all the time has nearly all of the recording as `sleep` (±5%), one blocked on a
/// socket for all of it as `io`, one blocked on a `threading.Lock` as `lock`, and threads that
/// spin with the GIL in contention wait for it as `gil` (not on free-threaded builds). The
/// socket and lock waits start before the recording: they are found at attach.
#[apply(representative)]
fn off_cpu_waits_show_under_their_function_with_their_reason(py: &str) {
    pyagent_bin();
    let _serial = host_wide_lock();
    let free_threaded = py.ends_with('t');
    let args: &[&str] = if free_threaded { &[] } else { &["gil"] };
    let p = spawn_waits(py, args);
    let dir = fresh_dir(&format!("offcpu-{py}"));
    let file = dir.join("off.pb.gz");
    let err = record_off_cpu(p.pid(), "3", &file);
    let (types, samples) = raw_samples(&file);
    assert_eq!(
        types,
        ["samples/count", "cpu/nanoseconds", "off_cpu/nanoseconds"],
        "{py}"
    );
    let off = off_cpu_seconds(&types, &samples);
    let what = format!("{py}: {off:?} ({err})");
    let secs = |f: &str, w: &str| {
        off.get(&(f.to_string(), w.to_string()))
            .copied()
            .unwrap_or(0.0)
    };
    // Waits that last the whole recording; under emulation the agent attaches late.
    let whole = if pyagent_tests::emulated() { 2.0 } else { 2.7 };
    assert!(secs("reader", "io") >= whole, "socket wait: {what}");
    assert!(secs("locker", "lock") >= whole, "lock wait: {what}");
    assert!(
        secs("<module>", "sleep") >= whole,
        "main thread's sleep: {what}"
    );
    // The reader's and the locker's waits began before the recording, and the summary counts
    // them, not only the waits the program saw begin.
    assert!(
        number_before(&err, " more already under way at attach") >= 2,
        "{what}"
    );
    // The sleeper runs a few microseconds every 50 ms; with spinners it also waits for the GIL.
    let sleeper = secs("sleeper", "sleep") + secs("sleeper", "gil");
    assert!((whole..=3.3).contains(&sleeper), "sleeper: {what}");
    assert!(secs("sleeper", "sleep") >= 1.0, "sleeper: {what}");
    if free_threaded {
        assert!(
            off.keys().all(|(_, w)| w != "gil"),
            "no GIL, no GIL wait: {what}"
        );
    } else {
        assert!(secs("spinner", "gil") >= 0.3, "GIL contention: {what}");
    }
    for ((f, w), s) in &off {
        assert!(w != "other", "{f} waited {s:.2}s in `other`: {what}");
    }
}

/// With `--off-cpu --native`, a wait carries the native and kernel frames the thread blocks in,
/// merged with its Python frames as on-CPU samples are: waits.py's sleeper reads, leaf first,
/// the kernel's sleep (`schedule`, `…nanosleep`; `…select` before 3.11), libc's `clock_nanosleep`
/// (`select`), `time.sleep`'s C
/// function, then `sleeper` and the threading frames under it; none of the profiler's own
/// frames (the program, the tracepoint that runs it) is left at the leaf. The threads already
/// blocked at attach are read by the agent itself, with Python frames only.
#[apply(representative)]
fn off_cpu_waits_carry_native_and_kernel_frames(py: &str) {
    pyagent_bin();
    let _serial = host_wide_lock();
    let p = spawn_waits(py, &[]);
    let dir = fresh_dir(&format!("offcpu-native-{py}"));
    let file = dir.join("off.pb.gz");
    let err = record(
        p.pid(),
        &["--mode", "ebpf", "--off-cpu", "--native", "-d", "3"],
        &file,
    );
    let (types, samples) = raw_samples(&file);
    let column = types
        .iter()
        .position(|t| t == "off_cpu/nanoseconds")
        .expect("an off_cpu sample type");
    let kernel = |f: &(String, String)| f.1 == "[kernel]:0";
    let python = |f: &(String, String)| f.1.contains(".py:");
    let sleep = Interpreter::by_name(py).role().time_sleep();
    let (mut mixed, mut total) = (0.0, 0.0);
    for s in samples
        .iter()
        .filter(|s| s.values[column] > 0 && s.label("thread_name") == Some("sleeper"))
    {
        // Beside a loaded host the sleeper is also preempted while it runs: only its sleeps
        // are in the kernel's sleep.
        if s.label("wait") != Some("sleep") {
            continue;
        }
        let secs = s.values[column] as f64 / 1e9;
        total += secs;
        let what = format!("{py}: {:?} ({err})", s.stack);
        assert!(
            !s.stack
                .iter()
                .any(|f| f.0.starts_with("bpf_prog_") || f.0.starts_with("bpf_trace_run")),
            "the program's own frames: {what}"
        );
        if s.stack.iter().all(|f| python(f) || f.1 == "~:0") {
            continue; // blocked at attach, read by the agent (`<native>` markers included)
        }
        let k = s.stack.iter().take_while(|f| kernel(f)).count();
        assert!(
            s.stack[..k].iter().any(|f| f.0.contains("schedule"))
                && s.stack[..k].iter().any(|f| f.0.contains(sleep.function)),
            "no kernel sleep at the leaf: {what}"
        );
        let libc = s.stack[k..]
            .iter()
            .position(|f| f.0.contains(sleep.function) && f.1.contains("libc.so"))
            .map(|i| i + k)
            .unwrap_or_else(|| {
                panic!("no libc {} under the kernel frames: {what}", sleep.function)
            });
        let sleeper = s
            .stack
            .iter()
            .position(|f| f.0 == "sleeper" && f.1.contains("waits.py:"))
            .unwrap_or_else(|| panic!("no sleeper frame: {what}"));
        // time.sleep's C function (unnamed in Debian's stripped 3.14/3.15) between them.
        assert!(
            libc + 1 < sleeper
                && s.stack[libc + 1..sleeper]
                    .iter()
                    .all(|f| !kernel(f) && !python(f)),
            "not kernel → libc → C → sleeper: {what}"
        );
        assert!(
            s.stack[sleeper + 1..].iter().any(|f| f.0
                == Interpreter::by_name(py).role().function_name("Thread.run")
                && python(f)),
            "no Thread.run under sleeper: {what}"
        );
        mixed += secs;
    }
    // Nearly all of the recording sleeping; all of it but the wait found at attach mixed.
    assert!(total >= 2.7, "{py}: sleeper off-CPU {total:.2} s ({err})");
    assert!(
        mixed >= total - 0.1,
        "{py}: {mixed:.2} of {total:.2} s with native frames ({err})"
    );
}

/// The length of the recording in `file`, in seconds, as `go tool pprof` reads it.
fn recording_seconds(file: &Path) -> f64 {
    go_pprof_raw(file)
        .lines()
        .find_map(|l| l.strip_prefix("Duration: "))
        .and_then(|d| d.trim().parse().ok())
        .expect("a duration")
}

/// Records waits.py (under 3.12, with `args`) for 4 s with off-CPU on and returns the share of
/// the recording that `function` spent under `wait=sleep`, a description, and the agent's stderr.
fn sleep_share(args: &[&str], tag: &str, function: &str) -> (f64, String, String) {
    pyagent_bin();
    let _serial = host_wide_lock();
    let p = spawn_waits("py312", args);
    let dir = fresh_dir(&format!("offcpu-{tag}"));
    let file = dir.join("off.pb.gz");
    let err = record_off_cpu(p.pid(), "4", &file);
    let (types, samples) = raw_samples(&file);
    let off = off_cpu_seconds(&types, &samples);
    let duration = recording_seconds(&file);
    let slept = off
        .get(&(function.to_string(), "sleep".to_string()))
        .copied()
        .unwrap_or(0.0);
    let what = format!("{function} slept {slept:.3}s of {duration:.3}s: {off:?} ({err})");
    (slept / duration, what, err)
}

/// Off-CPU totals are right: a thread sleeping all but a few microseconds of every 50 ms shows
/// the whole recording (±5%) under `sleep`.
#[test]
fn off_cpu_sleep_time_matches_the_recording() {
    let (share, what, _) = sleep_share(&[], "accuracy", "sleeper");
    assert!((share - 1.0).abs() <= 0.05, "{what}");
}

/// A thread that blocks a thousand times a second has few of its waits walked (one per thread
/// per 50 ms at most): the repeats are timed by the program and counted under the stack of the
/// last walked one, so its off-CPU total still matches the recording (±5%).
#[test]
fn repeated_short_waits_are_timed_without_walking_each() {
    let (share, what, err) = sleep_share(&["tick"], "tick", "ticker");
    let repeats = number_before(&err, " of them at a stack walked before");
    let walked = number_before(&err, " waits off CPU seen (") - repeats;
    assert!(repeats > 4 * walked, "most ticks are repeats: {what}");
    // The ticker runs for microseconds between sleeps; the rest of its time is sleep.
    assert!((share - 1.0).abs() <= 0.05, "{what}");
}

/// A wait that repeats the last one from another caller is walked, not counted under the last
/// one's stack: a thread that naps 60 ms from one function and 120 ms from another, in turn,
/// through the same function at the same line (the same top frame, at the same address), has a
/// third of its naps under the first caller and two thirds under the second (±5% of the
/// recording). A thread sleeping from one place all along has its waits timed, not walked.
#[test]
fn repeats_from_another_caller_are_walked() {
    pyagent_bin();
    let _serial = host_wide_lock();
    let p = spawn_waits("py312", &["alternate"]);
    let dir = fresh_dir("offcpu-alternate");
    let file = dir.join("off.pb.gz");
    let err = record_off_cpu(p.pid(), "4", &file);
    let (types, samples) = raw_samples(&file);
    let column = types
        .iter()
        .position(|t| t == "off_cpu/nanoseconds")
        .expect("an off_cpu sample type");
    let mut by_caller: BTreeMap<String, f64> = BTreeMap::new();
    for s in samples
        .iter()
        .filter(|s| s.values[column] > 0 && s.top == "nap")
    {
        assert_eq!(s.label("wait"), Some("sleep"), "{:?}", s.stack);
        let caller = s.stack.get(1).map_or("?", |f| f.0.as_str());
        *by_caller.entry(caller.to_string()).or_insert(0.0) += s.values[column] as f64 / 1e9;
    }
    let duration = recording_seconds(&file);
    let what = format!("{by_caller:?} over {duration:.3}s ({err})");
    let short = by_caller.get("short_naps").copied().unwrap_or(0.0) / duration;
    let long = by_caller.get("long_naps").copied().unwrap_or(0.0) / duration;
    assert_eq!(by_caller.len(), 2, "{what}");
    assert!((short - 1.0 / 3.0).abs() <= 0.05, "{what}");
    assert!((long - 2.0 / 3.0).abs() <= 0.05, "{what}");
    // The sleeper's 50 ms naps: walked once, then timed (its first nap may be walked twice,
    // within the minimum gap of the attach).
    let repeats = number_before(&err, " of them at a stack walked before");
    let walked = number_before(&err, " waits off CPU seen (") - repeats;
    assert!(repeats >= 60, "the sleeper's naps repeat: {what}");
    assert!(walked <= 2 * 4 * 6 + 10, "{walked} walked: {what}");
}

/// The on-CPU part of a profile does not change with off-CPU on: a CPU-bound target recorded
/// with and without `--off-cpu` has about as many on-CPU samples per second of CPU it used
/// (±15%), nearly all in `hot`. Per CPU second, not per run: other tests running beside this
/// one take CPU from the target, and fewer samples of a thread that ran less is right.
#[test]
fn on_cpu_profile_is_unchanged_with_off_cpu_on() {
    pyagent_bin();
    let _serial = host_wide_lock();
    let p = PythonProcess::ready("py312", "busy.py", &[]);
    let dir = fresh_dir("offcpu-unchanged");
    let mut runs = Vec::new();
    for extra in [&[][..], &["--off-cpu"][..]] {
        let file = dir.join(format!("on{}.pb.gz", extra.len()));
        let cpu_before = cpu_seconds(p.pid());
        let samples = record_samples(p.pid(), "ebpf", "3", extra, &file);
        let cpu = cpu_seconds(p.pid()) - cpu_before;
        let on_cpu: Vec<&RawSample> = samples.iter().filter(|s| s.values[0] > 0).collect();
        let total: u64 = on_cpu.iter().map(|s| s.values[0]).sum();
        let hot: u64 = on_cpu
            .iter()
            .filter(|s| s.top == "hot")
            .map(|s| s.values[0])
            .sum();
        runs.push((total as f64 / cpu, cpu, hot as f64 / total.max(1) as f64));
    }
    let [(without, cpu_without, hot_without), (with, cpu_with, hot_with)] = runs[..] else {
        unreachable!("two runs")
    };
    let what = format!(
        "without off-CPU {without:.0} samples per CPU second over {cpu_without:.2} s ({hot_without:.2} hot), with {with:.0} over {cpu_with:.2} s ({hot_with:.2} hot)"
    );
    // 99 Hz: about 99 samples per second the target ran.
    assert!(
        cpu_without >= 1.0 && (80.0..=120.0).contains(&without),
        "{what}"
    );
    assert!((with / without - 1.0).abs() <= 0.15, "{what}");
    assert!(hot_without >= 0.9 && hot_with >= 0.9, "{what}");
}

/// CPU time `pid` has used, in seconds (`utime + stime` of `/proc/PID/stat`).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = procfs::process::Process::new(i32::try_from(pid).expect("a pid"))
        .and_then(|p| p.stat())
        .expect("stat");
    (stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64
}

/// Bad input: a kernel without what the off-CPU program needs (its BTF, hidden here by a tmpfs
/// over `/sys/kernel/btf` in a private mount namespace) gets one line naming what is missing,
/// and the on-CPU profile all the same.
#[test]
fn off_cpu_without_kernel_btf_falls_back_with_one_line() {
    pyagent_bin();
    let _serial = host_wide_lock();
    let p = PythonProcess::ready("py312", "busy.py", &[]);
    let dir = fresh_dir("offcpu-nobtf");
    let file = dir.join("on.pb.gz");
    let command = format!(
        "mount -t tmpfs none /sys/kernel/btf && exec {} record --pid {} --mode ebpf --off-cpu -d 2 -o {}",
        pyagent_bin().display(),
        p.pid(),
        file.display()
    );
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &command])
        .output()
        .expect("unshare runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let fallback: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("off-CPU profiling unavailable"))
        .collect();
    assert_eq!(fallback.len(), 1, "{err}");
    assert!(fallback[0].contains("/sys/kernel/btf/vmlinux"), "{err}");
    let (types, samples) = raw_samples(&file);
    assert_eq!(types, ["samples/count", "cpu/nanoseconds"], "{err}");
    assert!(samples.iter().any(|s| s.top == "hot"), "{err}");
}

/// Bad input: off-CPU needs the eBPF sampler, and says so in one line.
#[test]
fn off_cpu_with_the_userspace_sampler_is_a_one_line_error() {
    let out = run_pyagent(&[
        "record",
        "--pid",
        "1",
        "--mode",
        "userspace",
        "--off-cpu",
        "-d",
        "1",
        "-o",
        "/dev/null",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--mode ebpf"), "{err}");
}

/// `dump` says what each thread is doing: which wait and system call, and the GIL. The
/// blocked threads of waits.py are stable; the sleeper runs for microseconds every 50 ms, so
/// `dump` is run until it is caught asleep.
#[apply(representative)]
fn dump_shows_each_threads_wait_and_gil(py: &str) {
    pyagent_bin();
    let p = spawn_waits(py, &[]);
    let pid = p.pid().to_string();
    let asleep = format!(
        "waiting: sleep in {}",
        Interpreter::by_name(py).role().time_sleep().syscall
    );
    let expected = [
        ("locker", "waiting: lock in futex"),
        ("reader", "waiting: io in recvfrom"),
        ("<module>", asleep.as_str()),
        ("sleeper", asleep.as_str()),
    ];
    let mut last = String::new();
    for _ in 0..50 {
        let out = run_pyagent(&["dump", "--pid", &pid]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        last = String::from_utf8_lossy(&out.stdout).into_owned();
        // `Thread TID "name" (STATE)` then the frames, innermost first.
        let states: Vec<(String, String)> = last
            .split("\nThread ")
            .skip(1)
            .filter_map(|block| {
                let mut lines = block.lines();
                let header = lines.next()?;
                let state = header
                    .rsplit_once(" (")?
                    .1
                    .trim_end_matches(')')
                    .to_string();
                let top = lines.next()?.split_whitespace().next()?.to_string();
                Some((top, state))
            })
            .collect();
        let found = |f: &str, s: &str| states.iter().any(|(t, st)| t == f && st.starts_with(s));
        if expected.iter().all(|(f, s)| found(f, s)) {
            let gil_said = states.iter().any(|(_, s)| s.contains("GIL"));
            assert_eq!(
                gil_said,
                !py.ends_with('t'),
                "{py}: GIL state only with a GIL:\n{last}"
            );
            return;
        }
    }
    panic!("{py}: states never matched {expected:?}:\n{last}");
}

/// Records `pid` for `secs` with `extra` arguments and returns the profile's samples.
fn record_samples(pid: u32, mode: &str, secs: &str, extra: &[&str], file: &Path) -> Vec<RawSample> {
    let mut args = vec!["--mode", mode, "-d", secs];
    args.extend_from_slice(extra);
    record(pid, &args, file);
    raw_samples(file).1
}

/// On-CPU samples of the threads whose top function is `top`, counted by `gil` label
/// (`-` for none).
fn gil_counts(samples: &[RawSample], top: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for s in samples.iter().filter(|s| s.top == top && s.values[0] > 0) {
        let gil = s.label("gil").unwrap_or("-").to_string();
        *out.entry(gil).or_insert(0) += s.values[0];
    }
    out
}

/// Every on-CPU sample says whether its thread held the GIL: threads running Python code hold
/// it; a thread hashing a large buffer runs on the CPU with the GIL released. Both samplers, every
/// GIL layout (`representative` has one of each: 3.11 runtime, 3.12–3.14 interpreter, 3.15
/// thread flag); free-threaded builds have no GIL and no label.
#[apply(representative)]
fn on_cpu_samples_say_whether_their_thread_held_the_gil(
    py: &str,
    #[values("ebpf", "userspace")] mode: &str,
) {
    pyagent_bin();
    let _serial = host_wide_lock();
    let p = spawn_waits(py, &["spin", "hash"]);
    let dir = fresh_dir(&format!("offcpu-gil-{mode}-{py}"));
    let samples = record_samples(p.pid(), mode, "3", &[], &dir.join("gil.pb.gz"));
    let spinner = gil_counts(&samples, "spinner");
    let hasher = gil_counts(&samples, "hasher");
    let what = format!("{py} {mode}: spinner {spinner:?}, hasher {hasher:?}");
    let share = |counts: &BTreeMap<String, u64>, gil: &str| {
        let total: u64 = counts.values().sum();
        assert!(total >= 20, "too few samples to tell: {what}");
        counts.get(gil).copied().unwrap_or(0) as f64 / total as f64
    };
    if py.ends_with('t') {
        assert_eq!(spinner.keys().collect::<Vec<_>>(), ["-"], "{what}");
        assert_eq!(hasher.keys().collect::<Vec<_>>(), ["-"], "{what}");
        return;
    }
    // The userspace sampler takes the threads in state R, which includes a spinner woken to
    // ask for the GIL and one queued behind the others for a CPU (3 busy threads, 2 CPUs): it
    // reads the GIL a little after the thread states, so its shares are looser than the BPF
    // program's, which reads the GIL at the tick itself.
    let held = if mode == "ebpf" { 0.8 } else { 0.5 };
    assert!(share(&spinner, "held") >= held, "{what}");
    assert!(share(&hasher, "released") >= 0.8, "{what}");
    assert!(
        samples
            .iter()
            .filter(|s| s.values[0] > 0)
            .all(|s| s.label("gil").is_some()),
        "every on-CPU sample has a gil label: {what}"
    );
}

/// `record --gil` keeps only the samples of threads holding the GIL (the hasher, which runs
/// without it, is left out), and on a free-threaded build says in one line that there is none.
#[apply(representative)]
fn record_gil_keeps_only_the_gil_holders(py: &str, #[values("ebpf", "userspace")] mode: &str) {
    pyagent_bin();
    let _serial = host_wide_lock();
    let p = spawn_waits(py, &["spin", "hash"]);
    let dir = fresh_dir(&format!("offcpu-gilonly-{mode}-{py}"));
    let file = dir.join("gil.pb.gz");
    if py.ends_with('t') {
        let pid = p.pid().to_string();
        let path = file.to_str().expect("utf-8 path");
        let out = run_pyagent(&[
            "record", "--pid", &pid, "--mode", mode, "-d", "1", "--gil", "-o", path,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("free-threaded"), "{err}");
        return;
    }
    let summary = record(p.pid(), &["--mode", mode, "-d", "2", "--gil"], &file);
    let samples = raw_samples(&file).1;
    // The headline counts what was written; what --gil left out is said apart.
    let written: u64 = samples.iter().map(|s| s.values[0]).sum();
    assert_eq!(
        number_before(&summary, " samples,"),
        written,
        "{py} {mode}: {summary}"
    );
    let spinner = gil_counts(&samples, "spinner");
    let hasher = gil_counts(&samples, "hasher");
    let what = format!("{py} {mode}: spinner {spinner:?}, hasher {hasher:?}");
    assert!(
        samples.iter().all(|s| s.label("gil") == Some("held")),
        "{what}"
    );
    let spun = spinner.get("held").copied().unwrap_or(0);
    let hashed = hasher.get("held").copied().unwrap_or(0);
    assert!(spun >= 20, "{what}");
    assert!(
        hashed * 5 <= spun,
        "the hasher mostly runs without the GIL: {what}"
    );
}

/// Userspace wall-clock sampling (`--idle`) labels each sample on or off the CPU, and a thread
/// blocked on the GIL's futex as waiting for it: on every GIL layout.
#[apply(representative_with_gil)]
fn idle_samples_say_on_or_off_cpu_and_who_waits_for_the_gil(py: &str) {
    pyagent_bin();
    let _serial = host_wide_lock();
    let p = spawn_waits(py, &["gil"]);
    let dir = fresh_dir(&format!("offcpu-idle-{py}"));
    let samples = record_samples(
        p.pid(),
        "userspace",
        "3",
        &["--idle"],
        &dir.join("idle.pb.gz"),
    );
    let states = |top: &str| -> BTreeMap<(String, String), u64> {
        let mut out = BTreeMap::new();
        for s in samples.iter().filter(|s| s.top == top) {
            let key = (
                s.label("state").unwrap_or("-").to_string(),
                s.label("gil").unwrap_or("-").to_string(),
            );
            *out.entry(key).or_insert(0) += s.values[0];
        }
        out
    };
    let what = format!(
        "{py}: locker {:?}, reader {:?}, spinner {:?}",
        states("locker"),
        states("reader"),
        states("spinner")
    );
    let only = |top: &str, state: &str, gil: &str| {
        let s = states(top);
        !s.is_empty() && s.keys().all(|(st, g)| st == state && g == gil)
    };
    assert!(only("locker", "off_cpu", "released"), "{what}");
    assert!(only("reader", "off_cpu", "released"), "{what}");
    let spinner = states("spinner");
    let count = |state: &str, gil: &str| {
        spinner
            .get(&(state.to_string(), gil.to_string()))
            .copied()
            .unwrap_or(0)
    };
    assert!(count("on_cpu", "held") > 0, "{what}");
    assert!(count("off_cpu", "waiting") > 0, "{what}");
}

/// Issue 17, item 7: `dump --json` is the same snapshot as one JSON object: each thread's state
/// (the wait and its system call), the GIL, and its frames innermost first.
#[test]
fn dump_json_has_each_threads_state_and_frames() {
    pyagent_bin();
    let p = spawn_waits("py312", &[]);
    let out = run_pyagent(&["dump", "--pid", &p.pid().to_string(), "--json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dump: serde_json::Value = serde_json::from_str(&text).expect("one JSON object");
    assert_eq!(dump["pid"], p.pid(), "{text}");
    assert!(
        dump["python_version"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.12")),
        "{text}"
    );
    let threads = dump["threads"].as_array().expect("threads");
    let top = |t: &serde_json::Value| t["frames"][0]["function"].as_str().map(str::to_string);
    let locker = threads
        .iter()
        .find(|t| top(t).as_deref() == Some("locker"))
        .unwrap_or_else(|| panic!("no locker thread: {text}"));
    assert_eq!(locker["state"]["state"], "waiting", "{text}");
    assert_eq!(locker["state"]["wait"], "lock", "{text}");
    assert_eq!(locker["state"]["syscall"], "futex", "{text}");
    assert_eq!(locker["holds_gil"], false, "{text}");
    assert_eq!(locker["frames"][0]["kind"], "python", "{text}");
    assert!(
        locker["frames"][0]["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("waits.py")),
        "{text}"
    );
}

/// A target that never blocks still gets a profile that declares `off_cpu` when it was asked
/// for, so that `go tool pprof -sample_index=off_cpu` (a script's fixed query) reads it: zero
/// off-CPU time, not a missing sample type.
#[test]
fn off_cpu_is_declared_when_no_thread_waited() {
    pyagent_bin();
    let _serial = host_wide_lock();
    let p = PythonProcess::ready("py312", "busy.py", &[]);
    let dir = fresh_dir("off-cpu-declared");
    let file = dir.join("busy.pb.gz");
    record_off_cpu(p.pid(), "2", &file);
    let (types, samples) = raw_samples(&file);
    assert!(
        types.iter().any(|t| t.starts_with("off_cpu")),
        "sample types {types:?}"
    );
    assert!(!samples.is_empty(), "on-CPU samples recorded");
    let top = pyagent_tests::consumers::go_pprof(&["-sample_index=off_cpu", "-top"], &file);
    assert!(top.contains("off_cpu"), "{top}");
}

/// Issue 38, item 1: a thread waiting for the GIL names who holds it. gil_holder.py's `holder`
/// thread keeps the GIL in a pure-Python loop (`hold_gil_spin`), then, in a second process,
/// through long C calls (`hold_gil_in_c`), while three `wanter` threads keep waiting for it: at
/// least 90% of their GIL-wait time (eBPF `--off-cpu`) or of their waiting samples (userspace
/// `--idle`) carries `gil_holder:[holder in FUNCTION]`.
#[apply(with_gil)]
fn gil_waits_name_the_holder_and_its_function(py: &str, #[values("ebpf", "userspace")] mode: &str) {
    pyagent_bin();
    let _serial = host_wide_lock();
    for (holds, function) in [("python", "hold_gil_spin"), ("c", "hold_gil_in_c")] {
        let p = PythonProcess::ready(py, "gil_holder.py", &[holds]);
        let dir = fresh_dir(&format!("gil-holder-{mode}-{holds}-{py}"));
        let file = dir.join("holder.pb.gz");
        let waits = if mode == "ebpf" {
            "--off-cpu"
        } else {
            "--idle"
        };
        record(p.pid(), &["--mode", mode, "-d", "2", waits], &file);
        let (types, samples) = raw_samples(&file);
        // eBPF: nanoseconds off the CPU; userspace: samples of threads found waiting.
        let column = match mode {
            "ebpf" => types
                .iter()
                .position(|t| t == "off_cpu/nanoseconds")
                .unwrap_or_else(|| panic!("no off_cpu sample type in {types:?}")),
            _ => 0,
        };
        let mut by_holder: BTreeMap<String, u64> = BTreeMap::new();
        for s in samples
            .iter()
            .filter(|s| s.label("gil") == Some("waiting") && s.values[column] > 0)
        {
            let holder = s.label("gil_holder").unwrap_or("-").to_string();
            *by_holder.entry(holder).or_insert(0) += s.values[column];
        }
        let total: u64 = by_holder.values().sum();
        let blamed = by_holder
            .get(&format!("holder in {function}"))
            .copied()
            .unwrap_or(0);
        let what = format!("{py} {mode} {holds}: GIL waits by holder {by_holder:?}");
        assert!(total > 0, "no GIL waits: {what}");
        assert!(blamed * 10 >= total * 9, "{what}");
    }
}

/// A free-threaded build has no GIL: nobody waits for it and no sample names a holder.
#[apply(free_threaded)]
fn no_gil_holder_without_a_gil(py: &str) {
    pyagent_bin();
    let _serial = host_wide_lock();
    let p = PythonProcess::ready(py, "gil_holder.py", &[]);
    let dir = fresh_dir(&format!("gil-holder-none-{py}"));
    let file = dir.join("holder.pb.gz");
    record(p.pid(), &["--mode", "ebpf", "-d", "1", "--off-cpu"], &file);
    let (_, samples) = raw_samples(&file);
    assert!(
        samples.iter().any(|s| s.top == "hold_gil_spin"),
        "{py}: the spinning thread is sampled"
    );
    assert!(
        samples.iter().all(|s| s.label("gil_holder").is_none()),
        "{py}: {samples:?}"
    );
}
