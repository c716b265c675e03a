//! The measurements (they link the agent library; see the parent module).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use common::Counter;
use pyagent::discovery::locate_runtime;
use pyagent::sampler::bpf::{pa_proc_for, set_gil, BpfConfig, BpfSampler};
use pyagent::unwind::native::NativeUnwinder;
use pyagent::unwind::{UnwindOptions, Unwinder};

use super::super::util::{Interpreter, Manifest, Proc, Table};

use super::super::util;
use super::Args;

const READY: Duration = Duration::from_secs(60);
/// The program's name as the kernel knows it.
const PROGRAM: &str = "pa_sample";
/// The off-CPU program (on `sched_switch`).
const SWITCH_PROGRAM: &str = "pa_switch";
/// Depth of the busy processes of the agent-overhead runs.
const AGENT_TARGET_DEPTH: usize = 30;

/// Runs the benchmark.
pub fn run(args: &Args) -> Result<()> {
    if let Some(o) = args
        .only
        .as_deref()
        .filter(|o| !["cost", "agent", "offcpu", "native"].contains(o))
    {
        bail!("--only {o}: use cost, agent, offcpu or native");
    }
    let manifest = Manifest::load()?;
    let script = util::bench_script("deep.py");
    let (seconds, agent_seconds) = if args.quick {
        (1.0, 5.0)
    } else {
        (args.seconds, args.agent_seconds)
    };
    util::print_command_line();
    if args.only.is_none() || args.only.as_deref() == Some("offcpu") {
        let agent = util::release_binary("pyagent")?;
        let py = manifest.interpreter(&args.busy_python)?;
        flag_overhead(
            &agent,
            py,
            &script,
            args.blocking_processes,
            agent_seconds,
            Flag::OffCpu,
        )?;
        if args.only.is_some() {
            return Ok(());
        }
    }
    if args.only.is_none() || args.only.as_deref() == Some("native") {
        let pythons: Vec<&Interpreter> = args
            .pythons
            .iter()
            .map(|n| manifest.interpreter(n))
            .collect::<Result<_>>()?;
        native_cost(&pythons, &script, seconds, args.bpf_rate)?;
        let agent = util::release_binary("pyagent")?;
        let py = manifest.interpreter(&args.busy_python)?;
        flag_overhead(
            &agent,
            py,
            &script,
            args.native_processes,
            agent_seconds,
            Flag::Native,
        )?;
        if args.only.is_some() {
            return Ok(());
        }
    }
    if args.only.as_deref() != Some("agent") {
        let pythons: Vec<&Interpreter> = args
            .pythons
            .iter()
            .map(|n| manifest.interpreter(n))
            .collect::<Result<_>>()?;
        bpf_cost(&pythons, &args.depths, &script, seconds, args.bpf_rate)?;
        if args.stages {
            stage_costs(&pythons, &script, seconds, args.bpf_rate)?;
        }
    }
    if args.only.as_deref() != Some("cost") {
        let agent = util::release_binary("pyagent")?;
        let py = manifest.interpreter(&args.busy_python)?;
        agent_overhead(&agent, py, &script, &args.processes, agent_seconds)?;
    }
    Ok(())
}

// ---- 1. ns per BPF run ----

/// What one sampler load measured.
#[derive(Debug, Default)]
struct Cost {
    run_ns: u64,
    runs: u64,
    /// runs that exited before walking (idle CPU, untracked task or thread)
    early: u64,
    idle: u64,
    emitted: u64,
    frames: u64,
    anchor_hits: u64,
    /// records whose walk did not end cleanly (read failure, truncated)
    incomplete: u64,
    /// native sections: records that carry one, their stack and kernel bytes
    native: NativeCount,
    /// (run ns, runs) of each 100 ms drain interval
    windows: Vec<(u64, u64)>,
}

impl Cost {
    /// ns per run: the quartiles over the intervals. Steal time and other tenants' cache
    /// traffic come in bursts on these VMs (±30% between whole-run means); the median interval
    /// is what the program costs when they leave it alone. Walks are measured on the target's
    /// thread alone, so there every run is a walk.
    fn ns_per_run(&self) -> [f64; 3] {
        let v: Vec<f64> = self
            .windows
            .iter()
            .filter(|w| w.1 > 0)
            .map(|&(ns, runs)| ns as f64 / runs as f64)
            .collect();
        if v.is_empty() {
            let mean = self.run_ns as f64 / self.runs.max(1) as f64;
            return [mean; 3];
        }
        [0.25, 0.5, 0.75].map(|q| util::quantile(&v, q))
    }

    fn frames_per_walk(&self) -> f64 {
        self.frames as f64 / self.emitted.max(1) as f64
    }
}

/// What the native sections of a native run held.
#[derive(Debug, Default)]
struct NativeCount {
    records: u64,
    stack_bytes: u64,
    kernel_frames: u64,
    /// records unwound in this process (the first few of each interval) and their frames
    unwound: u64,
    frames: u64,
}

impl NativeCount {
    fn per_record(&self, v: u64) -> f64 {
        v as f64 / self.records.max(1) as f64
    }
}

/// Records unwound per 100 ms interval to count native frames: enough for a mean, few enough
/// that the bench's own CPU stays out of the program's way.
const UNWOUND_PER_INTERVAL: usize = 20;

/// How to configure the walk of the tracked process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// nothing tracked: every run exits early (the baseline)
    Untracked,
    /// whole stacks (what the agent does)
    Full,
    /// stop at the anchor, kept on the top frame by a userspace walk every 100 ms (the agent)
    AgentAnchor,
    /// whole stacks of a `deep.py DEPTH native` target (its leaf in C under C under Python),
    /// each record with a native section (`--native`) if `section`; stopping at the anchor if
    /// `anchored` (3.15, as the agent does)
    NativeTarget { section: bool, anchored: bool },
}

impl Walk {
    /// `deep.py`'s second argument.
    fn target_kind(self) -> &'static str {
        if matches!(self, Walk::NativeTarget { .. }) {
            "native"
        } else {
            "busy"
        }
    }
}

fn bpf_cost(
    pythons: &[&Interpreter],
    depths: &[usize],
    script: &Path,
    secs: f64,
    rate: u64,
) -> Result<()> {
    let load_before = util::load_average();
    let size = BpfSampler::load_detached(&BpfConfig::default())
        .context("loading the BPF sampler (needs root)")?
        .program_size();
    // The baseline target: busy like the others, never tracked.
    let base_py = pythons.last().copied().context("no interpreter given")?;
    eprintln!(
        "bench ebpf: early-exit baseline ({} busy, untracked)",
        base_py.name
    );
    let baseline = measure(base_py, script, 100, Walk::Untracked, 0, secs, rate)?;
    let early_ns = baseline.ns_per_run()[1];

    let mut t = Table::new(&[
        "python, depth",
        "walks",
        "frames/walk",
        "ns/walk: median [quartiles]",
        "with anchor: ns/walk (frames/walk)",
    ]);
    let mut target_line = String::new();
    for py in pythons {
        for &depth in depths {
            eprintln!("bench ebpf: {} depth {depth}", py.name);
            let full = measure(py, script, depth, Walk::Full, 0, secs, rate)?;
            let has_anchor = py.minor() >= (3, 15);
            let (anchor, anchor_ns) = if has_anchor {
                eprintln!("bench ebpf: {} depth {depth}, with anchor", py.name);
                let p = measure(py, script, depth, Walk::AgentAnchor, 0, secs, rate)?;
                let hits = if p.anchor_hits < p.emitted {
                    format!(", {} of {} hit", p.anchor_hits, p.emitted)
                } else {
                    String::new()
                };
                let q = p.ns_per_run();
                (
                    format!("{} ({:.1}{hits})", quartiles(q), p.frames_per_walk()),
                    Some(q[1]),
                )
            } else {
                ("n/a (< 3.15)".to_owned(), None)
            };
            let mut walks = full.emitted.to_string();
            if full.incomplete > 0 {
                let _ = write!(walks, " ({} incomplete)", full.incomplete);
            }
            t.row(vec![
                format!("{} {depth}", py.name),
                walks,
                format!("{:.1}", full.frames_per_walk()),
                quartiles(full.ns_per_run()),
                anchor.clone(),
            ]);
            if let (Some(ns), 100) = (anchor_ns, depth) {
                let _ = write!(
                    target_line,
                    "- {} depth 100: {ns:.0} ns/walk with the anchor ({}); {:.0} without it",
                    py.name,
                    if ns <= 2000.0 {
                        "≤ 2 µs: met"
                    } else {
                        "> 2 µs: MISSED"
                    },
                    full.ns_per_run()[1],
                );
            }
        }
    }
    println!("\n## BPF program cost: ns per run (kernel BPF statistics, lower is better)\n");
    println!(
        "{load_before} at start, {} at end; perf event at {rate} Hz per CPU, {secs} s per row\n",
        util::load_average()
    );
    t.print();
    println!(
        "\nEarly exit (idle CPU or untracked task): {early_ns:.0} ns/run, median of 100 ms intervals \
         ({} runs on every CPU, {} of them on an idle CPU, {} tracked nothing). Walks: the perf \
         event follows the target's thread alone, so every run is a walk; ns/walk per 100 ms \
         interval, the median and quartiles over the intervals (steal time and other tenants' \
         cache traffic come in bursts here; whole-run means differ by ±30%). Targets: `deep.py DEPTH busy` (one thread looping on \
         the CPU DEPTH Python frames deep; frames/walk adds the interpreter's own frames: the C-entry shim, and 3.15's base frame).",
        baseline.runs, baseline.idle, baseline.early - baseline.idle
    );
    if let Some(s) = size {
        println!(
            "Program size: {} verified instructions, {} bytes translated, {} bytes JIT-compiled.",
            s.verified_insns.map_or("?".to_owned(), |v| v.to_string()),
            s.xlated_bytes.map_or("?".to_owned(), |v| v.to_string()),
            s.jited_bytes
        );
    }
    println!(
        "\nWith anchor (3.15): as in the agent, a userspace walk of each thread every 100 ms moves \
         `last_profiled_frame` to its top frame, and the program stops there; the agent splices \
         the rest from its frame cache (anchor hits / walks shown when not all hit).\n"
    );
    println!("Target (≤ 2 µs per run at depth 100 on 3.15 with the anchor):\n");
    if target_line.is_empty() {
        println!("- not measured in this run (needs 3.15 at depth 100)");
    } else {
        println!("{target_line}");
    }
    Ok(())
}

/// What each stage of an anchored depth-100 walk adds, on every 3.15 interpreter given.
fn stage_costs(pythons: &[&Interpreter], script: &Path, secs: f64, rate: u64) -> Result<()> {
    const DEPTH: usize = 100;
    for py in pythons.iter().filter(|p| p.minor() >= (3, 15)) {
        let mut t = Table::new(&[
            "the program stops after",
            "ns/run: median [quartiles]",
            "added by the stage",
        ]);
        let mut prev = 0.0;
        let stages = common::STAGES
            .iter()
            .copied()
            .chain([(0, "submit the record (the whole run)")]);
        for (stage, what) in stages {
            eprintln!(
                "bench ebpf: {} depth {DEPTH}, with anchor, stage {stage}",
                py.name
            );
            let c = measure(py, script, DEPTH, Walk::AgentAnchor, stage, secs, rate)?;
            let q = c.ns_per_run();
            t.row(vec![
                format!("{stage}: {what}"),
                quartiles(q),
                format!("{:+.0}", q[1] - prev),
            ]);
            prev = q[1];
        }
        println!(
            "\n## Cost by stage: {} depth {DEPTH} with the anchor\n\nThe perf event follows the \
             target's thread; with the loader's `stop_after` knob the program returns right \
             after stage N (a reserved record is discarded). Each row is a separate load of \
             {secs} s, so neighbouring rows can differ by the noise of the quartiles.\n",
            py.name
        );
        t.print();
    }
    Ok(())
}

/// The program's cost per sample with and without the native section, on a target whose leaf
/// sits in C under Python frames (`deep.py 100 native`).
fn native_cost(pythons: &[&Interpreter], script: &Path, secs: f64, rate: u64) -> Result<()> {
    const DEPTH: usize = 100;
    let load_before = util::load_average();
    let mut t = Table::new(&[
        "python, native",
        "walks",
        "Python frames/walk",
        "native frames/record",
        "stack bytes/record",
        "kernel frames/record",
        "ns/walk: median [quartiles]",
        "native adds",
    ]);
    let mut target_lines = Vec::new();
    for py in pythons {
        let mut off_ns = None;
        for section in [false, true] {
            eprintln!(
                "bench ebpf: {} deep.py {DEPTH} native, native section {section}",
                py.name
            );
            let c = measure(
                py,
                script,
                DEPTH,
                Walk::NativeTarget {
                    section,
                    // as the agent does
                    anchored: py.minor() >= (3, 15),
                },
                0,
                secs,
                rate,
            )?;
            let q = c.ns_per_run();
            let n = &c.native;
            let (frames, bytes, kernel) = if section {
                (
                    format!(
                        "{:.1} ({} unwound here)",
                        n.frames as f64 / n.unwound.max(1) as f64,
                        n.unwound
                    ),
                    format!("{:.0}", n.per_record(n.stack_bytes)),
                    format!("{:.1}", n.per_record(n.kernel_frames)),
                )
            } else {
                ("—".to_owned(), "—".to_owned(), "—".to_owned())
            };
            let added = off_ns.map_or("—".to_owned(), |off: f64| format!("{:+.0}", q[1] - off));
            t.row(vec![
                format!("{} {}", py.name, if section { "on" } else { "off" }),
                c.emitted.to_string(),
                format!("{:.1}", c.frames_per_walk()),
                frames,
                bytes,
                kernel,
                quartiles(q),
                added,
            ]);
            if section {
                target_lines.push(format!(
                    "- {}: {:.0} ns per sample with native on ({}), {:.0} with it off",
                    py.name,
                    q[1],
                    if q[1] <= 10_000.0 {
                        "≤ 10 µs: met"
                    } else {
                        "> 10 µs: MISSED"
                    },
                    off_ns.unwrap_or(f64::NAN),
                ));
            }
            off_ns.get_or_insert(q[1]);
        }
    }
    println!(
        "\n## Native stacks: BPF program cost per sample, `deep.py {DEPTH} native` (lower is better)\n"
    );
    println!(
        "{load_before} at start, {} at end; perf event at {rate} Hz per CPU on the target's \
         thread, {secs} s per row\n",
        util::load_average()
    );
    t.print();
    println!(
        "\nTarget: one thread {DEPTH} Python frames deep looping on `sorted(range(64), \
         key=slow_key)`, whose key calls `zlib.crc32` on 64 KiB: the leaf is in libz under the \
         zlib module, under the key (Python), under `list.sort` (C), under the {DEPTH} Python \
         frames and the interpreter's own C frames. On 3.15 the walk stops at the anchor, as \
         in the agent. \"off\": the same walk without a native \
         section; \"on\": each record also carries the user registers, the kernel stack when the \
         tick was in the kernel, and a copy of the user stack from `sp` up (at most 16 KiB, or to \
         the stack's top). Native frames: the first {UNWOUND_PER_INTERVAL} records of each \
         100 ms interval unwound by this process with the agent's unwinder (kernel frames \
         included).\n\nTarget (≤ 10 µs per sample in the program with native on):\n"
    );
    for l in target_lines {
        println!("{l}");
    }
    Ok(())
}

fn quartiles([q1, m, q3]: [f64; 3]) -> String {
    format!("{m:.0} [{q1:.0}, {q3:.0}]")
}

/// Loads the sampler, tracks a fresh `deep.py DEPTH busy` (or `native`) target as `walk` says
/// for `secs`, and returns the program's run statistics and counters.
fn measure(
    py: &Interpreter,
    script: &Path,
    depth: usize,
    walk: Walk,
    stop_after: u32,
    secs: f64,
    rate: u64,
) -> Result<Cost> {
    let kind = walk.target_kind();
    let mut cmd = py.script_command(script, &[depth.to_string(), kind.to_owned()])?;
    let target = Proc::spawn_ready(
        &mut cmd,
        format!("{} deep.py {depth} {kind}", py.name),
        "ready",
        READY,
    )?;
    let pid = target.pid();
    let located =
        locate_runtime(pid).with_context(|| format!("locating the runtime of {}", py.name))?;
    let offsets = located.offsets;
    let anchored = matches!(
        walk,
        Walk::AgentAnchor | Walk::NativeTarget { anchored: true, .. }
    );
    let mut u = Unwinder::new(
        located,
        UnwindOptions {
            frame_cache: anchored,
            ..UnwindOptions::default()
        },
    );
    if anchored && !u.frame_cache_enabled() {
        bail!("{} has no frame-cache anchor", py.name);
    }
    let mut threads = Vec::new();
    let interpreters = u.threads().context("reading the thread list")?;
    // The main interpreter (the oldest, last in the list), whose GIL every record reads.
    let main_interp = interpreters.last().map_or(0, |(i, _)| i.addr);
    for (_, list) in interpreters {
        for t in list {
            let host = u
                .host_tid(t.native_thread_id)
                .context("thread not in /proc")?;
            threads.push((host, t));
        }
    }
    // Walks are measured on the target's thread alone, so that every run is a walk; the
    // baseline samples every CPU, as the agent does.
    let only_thread = match walk {
        Walk::Untracked => None,
        _ => Some(threads.first().context("the target has no thread")?.0),
    };
    let mut s = BpfSampler::load(&BpfConfig {
        rate_hz: rate,
        enable_stats: true,
        only_thread,
        stop_after,
        ..BpfConfig::default()
    })
    .context("loading the BPF sampler (needs root)")?;
    if s.run_stats().is_none() {
        bail!("the kernel's BPF run-time statistics could not be enabled (needs CAP_SYS_ADMIN)");
    }
    if walk != Walk::Untracked {
        for (host, t) in &threads {
            s.set_thread(*host, t.addr)?;
        }
        // As the agent configures it: the walk, and where the GIL is.
        let mut proc = pa_proc_for(&offsets, anchored);
        set_gil(&mut proc, &offsets, u.target().runtime_addr, main_interp);
        if matches!(walk, Walk::NativeTarget { section: true, .. }) {
            proc.flags |= common::PROC_NATIVE;
        }
        s.track_process(pid, &proc)?;
    }
    let mut incomplete = 0;
    let mut native = NativeCount::default();
    let mut native_unwinder = NativeUnwinder::new(pid, pyagent::config::DebugDirs::default());
    let mut windows = Vec::new();
    let mut last = (0, 0);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        // The agent's cadence: drain, then (3.15) walk in userspace, which moves the anchors.
        std::thread::sleep(Duration::from_millis(100));
        let mut unwound = 0;
        s.drain(|r| {
            let h = r.header();
            if h.read_failed() || h.is_truncated() {
                incomplete += 1;
            }
            if let Some(n) = r.native() {
                native.records += 1;
                native.stack_bytes += u64::from(n.hdr.stack_bytes);
                native.kernel_frames += u64::from(n.hdr.kernel_frames);
                if unwound < UNWOUND_PER_INTERVAL {
                    unwound += 1;
                    native.unwound += 1;
                    native.frames += native_unwinder.stack(n).frames.len() as u64;
                }
            }
        });
        if anchored {
            u.refresh_anchors().context("refreshing the anchors")?;
        }
        let (ns, runs) = s.run_stats().context("BPF statistics vanished")?;
        windows.push((ns - last.0, runs - last.1));
        last = (ns, runs);
    }
    let (run_ns, runs) = s.run_stats().context("BPF statistics vanished")?;
    let sums = s.counter_sums().unwrap_or([0; common::COUNTER_COUNT]);
    let c = |k: Counter| sums[k.index() as usize];
    let idle = c(Counter::Idle);
    Ok(Cost {
        run_ns,
        runs,
        // An unregistered thread that the program's search did not find exits early too.
        early: idle
            + c(Counter::NotTracked)
            + c(Counter::NoThreadState)
            + c(Counter::ThreadUnknown),
        idle,
        emitted: c(Counter::SamplesEmitted),
        frames: c(Counter::Frames),
        anchor_hits: c(Counter::AnchorHit),
        incomplete,
        native,
        windows,
    })
}

// ---- 2. agent overhead ----

fn agent_overhead(
    agent: &Path,
    py: &Interpreter,
    script: &Path,
    counts: &[usize],
    secs: f64,
) -> Result<()> {
    let load_before = util::load_average();
    let mut t = Table::new(&[
        "processes, mode",
        "profiled",
        "samples",
        "CPU s / wall s",
        "agent CPU % (whole run)",
        "agent CPU % (after first scan)",
        "agent CPU % (sampling only)",
        "agent CPU % (sampling, second half)",
        "peak RSS MiB (whole run)",
        "peak RSS MiB (after first scan)",
        "BPF in targets, % of a core",
    ]);
    let mut notes = Vec::new();
    let mut busy: Vec<Proc> = Vec::new();
    let mut counts = counts.to_vec();
    counts.sort_unstable();
    let mut target_lines = Vec::new();
    for &n in &counts {
        eprintln!(
            "bench ebpf: starting {} busy {} processes",
            n.saturating_sub(busy.len()),
            py.name
        );
        let mut starting = Vec::new();
        while busy.len() + starting.len() < n {
            // At nice 19 they take every idle cycle yet leave the agent (nice 0) the CPU it asks
            // for: its CPU % is then what it needs, not the share 50 competitors leave it.
            let inner =
                py.script_command(script, &[AGENT_TARGET_DEPTH.to_string(), "busy".to_owned()])?;
            let mut cmd = std::process::Command::new("nice");
            cmd.args(["-n", "19"])
                .arg(inner.get_program())
                .args(inner.get_args());
            starting.push(Proc::spawn(
                &mut cmd,
                format!("busy {} #{}", py.name, busy.len() + starting.len()),
            )?);
        }
        for mut p in starting {
            p.wait_line(|l| l == "ready", READY)?;
            busy.push(p);
        }
        for mode in ["ebpf", "userspace"] {
            eprintln!("bench ebpf: agent, {n} processes, {mode} mode, {secs} s");
            let r = run_agent(agent, mode, secs, &[])?;
            let pct = |cpu: f64, wall: f64| 100.0 * cpu / wall.max(1e-9);
            let whole = pct(r.usage.cpu_secs(), r.usage.wall.as_secs_f64());
            let steady = r.steady.map(|(cpu, wall)| pct(cpu, wall));
            let sampling = r.sampling.map(|(cpu, wall)| pct(cpu, wall));
            let second_half = r.second_half.map(|(cpu, wall)| pct(cpu, wall));
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            let rss = mib(r.usage.max_rss);
            let steady_rss = r.steady_rss.map(mib);
            t.row(vec![
                format!("{n} {mode}"),
                r.profiles.map_or("?".to_owned(), |p| p.to_string()),
                r.samples.map_or("?".to_owned(), |s| s.to_string()),
                format!(
                    "{:.2} / {:.1}",
                    r.usage.cpu_secs(),
                    r.usage.wall.as_secs_f64()
                ),
                format!("{whole:.2}"),
                steady.map_or("?".to_owned(), |s| format!("{s:.2}")),
                sampling.map_or("?".to_owned(), |s| format!("{s:.2}")),
                second_half.map_or("?".to_owned(), |s| format!("{s:.2}")),
                format!("{rss:.1}"),
                steady_rss.map_or("?".to_owned(), |m| format!("{m:.1}")),
                r.bpf.map_or("—".to_owned(), |(ns, wall)| {
                    format!("{:.2}", 100.0 * ns as f64 / 1e9 / wall)
                }),
            ]);
            notes.push(format!("{n} {mode}: {}", r.summary));
            if n == 50 && mode == "ebpf" {
                let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
                let cpu = steady.unwrap_or(whole);
                let srss = steady_rss.unwrap_or(rss);
                let sampling = sampling.map_or("?".to_owned(), |s| {
                    format!("{s:.2}% while sampling ({})", verdict(s <= 0.5))
                });
                // Issue 18's target is a service's steady cost: the second half, after the
                // looks again at every new process's maps have backed off.
                let steady_sampling = second_half.map_or("?".to_owned(), |s| {
                    format!(
                        "{s:.2}% over the second half of the sampling (≤ 0.25%: {})",
                        verdict(s <= 0.25)
                    )
                });
                target_lines.push(format!(
                    "- 50 processes, ebpf: CPU {steady_sampling}, {sampling}, {cpu:.2}% after the first scan \
                     including the profile writing at the end ({}), {whole:.2}% over the whole run \
                     ({}); RSS {srss:.1} MiB after the first scan ({}), peak {rss:.1} MiB over the \
                     whole run ({})",
                    verdict(cpu <= 0.5),
                    verdict(whole <= 0.5),
                    verdict(srss <= 50.0),
                    verdict(rss <= 50.0),
                ));
            }
        }
    }
    drop(busy);
    println!(
        "\n## Agent overhead: `pyagent --all-python -r 99` with N busy {} processes\n",
        py.name
    );
    println!("{load_before} at start, {} at end; {secs} s per run; busy processes: `nice -n 19 deep.py {AGENT_TARGET_DEPTH} busy`\n", util::load_average());
    t.print();
    println!(
        "\n\"profiled\": profiles written (every CPython process on the host, so other users' \
         processes count too). CPU %: the agent's user+system time (`wait4`) over its wall time; \
         \"after first scan\" starts when it prints that it is profiling (the first scan parses every \
         Python binary on the host) and ends at its exit, after it wrote its profiles; \"sampling \
         only\" ends at the last reading 0.5 s before its sampling stops, from the run time of its \
         threads (`/proc/PID/task/*/schedstat`, to the nanosecond); \"second half\" is the second \
         half of that span (a service's steady cost: a new process's maps are read again at 2, 6, \
         14 s … after it is found, for a tracer loaded late, then at most every 5 minutes). BPF in targets: the program's kernel run time over the run \
         (spent in the interrupted processes, not charged to the agent). Peak RSS: `ru_maxrss` over the \
         whole run, and the highest `VmRSS` polled every 200 ms after the first scan."
    );
    println!("\nAgent summaries:\n");
    for n in notes {
        println!("- {n}");
    }
    println!("\nTargets (50 processes: agent ≤ 0.5% of one core, ≤ 50 MiB RSS):\n");
    if target_lines.is_empty() {
        println!("- not measured in this run (needs 50 processes)");
    }
    for l in target_lines {
        println!("{l}");
    }
    Ok(())
}

// ---- 3. One agent flag off and on beside many processes ----

/// A flag whose cost the agent runs measure, off then on, beside processes that exercise it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flag {
    /// `--off-cpu` beside processes that block about a thousand times a second
    OffCpu,
    /// `--native` beside busy processes whose leaf is in C
    Native,
}

impl Flag {
    fn arg(self) -> &'static str {
        match self {
            Flag::OffCpu => "--off-cpu",
            Flag::Native => "--native",
        }
    }

    /// `deep.py`'s second argument for the processes.
    fn target_kind(self) -> &'static str {
        match self {
            Flag::OffCpu => "block",
            Flag::Native => "native",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Flag::OffCpu => "blocking",
            Flag::Native => "busy native-leaf",
        }
    }
}

/// The agent in ebpf mode with and without `flag` beside `n` processes that exercise it: its
/// CPU, and the time of both BPF programs (charged to the tasks they interrupt, not to the
/// agent).
fn flag_overhead(
    agent: &Path,
    py: &Interpreter,
    script: &Path,
    n: usize,
    secs: f64,
    flag: Flag,
) -> Result<()> {
    let load_before = util::load_average();
    let kind = flag.target_kind();
    eprintln!(
        "bench ebpf: starting {n} {} {} processes",
        flag.what(),
        py.name
    );
    let mut procs = Vec::new();
    for i in 0..n {
        let inner =
            py.script_command(script, &[AGENT_TARGET_DEPTH.to_string(), kind.to_owned()])?;
        // Busy ones at nice 19, as in the agent-overhead runs: they take every idle cycle yet
        // leave the agent the CPU it asks for.
        let mut cmd = std::process::Command::new("nice");
        cmd.args(["-n", if flag == Flag::Native { "19" } else { "0" }])
            .arg(inner.get_program())
            .args(inner.get_args());
        procs.push(Proc::spawn(&mut cmd, format!("{kind} {} #{i}", py.name))?);
    }
    for p in &mut procs {
        p.wait_line(|l| l == "ready", READY)?;
    }
    let mut t = Table::new(&[
        flag.arg(),
        "samples",
        "agent CPU % (sampling, second half)",
        "agent CPU % (sampling only)",
        "agent CPU % (after first scan)",
        "peak RSS MiB (after first scan)",
        "pa_sample, % of a core",
        "pa_switch, % of a core",
        "summary",
    ]);
    let mut verdicts = Vec::new();
    for on in [false, true] {
        let extra: &[&str] = if on { &[flag.arg()] } else { &[] };
        eprintln!(
            "bench ebpf: agent, {n} {kind} processes, {} {on}, {secs} s",
            flag.arg()
        );
        let r = run_agent(agent, "ebpf", secs, extra)?;
        let pct = |cpu: f64, wall: f64| 100.0 * cpu / wall.max(1e-9);
        let sampling = r.sampling.map(|(cpu, wall)| pct(cpu, wall));
        let second_half = r.second_half.map(|(cpu, wall)| pct(cpu, wall));
        let steady = r.steady.map(|(cpu, wall)| pct(cpu, wall));
        let wall = r.bpf.map(|(_, w)| w);
        let of_core = |ns: Option<u64>| match (ns, wall) {
            (Some(ns), Some(w)) => format!("{:.2}", 100.0 * ns as f64 / 1e9 / w),
            _ => "—".to_owned(),
        };
        let summary = match flag {
            Flag::OffCpu => r.off_cpu_line.clone().unwrap_or_default(),
            Flag::Native => r.summary.clone(),
        };
        t.row(vec![
            if on { "on" } else { "off" }.to_owned(),
            r.samples.map_or("?".to_owned(), |s| s.to_string()),
            second_half.map_or("?".to_owned(), |s| format!("{s:.2}")),
            sampling.map_or("?".to_owned(), |s| format!("{s:.2}")),
            steady.map_or("?".to_owned(), |s| format!("{s:.2}")),
            r.steady_rss.map_or("?".to_owned(), |b| {
                format!("{:.1}", b as f64 / (1 << 20) as f64)
            }),
            of_core(r.bpf.map(|(ns, _)| ns)),
            of_core(r.switch_ns),
            summary,
        ]);
        if on {
            // The target is a service's: judged on the second half, the whole span shown too.
            let verdict = |cpu: f64| {
                if cpu <= 1.0 {
                    "met: ≤ 1%"
                } else {
                    "MISSED: > 1%"
                }
            };
            let cpu = second_half.or(sampling).or(steady).unwrap_or(f64::NAN);
            let whole = sampling.or(steady).unwrap_or(f64::NAN);
            verdicts.push(format!(
                "- {n} {} processes, {} on: agent {cpu:.2}% of one core over the second half of \
                 the sampling ({}); {whole:.2}% over all of it, the first objects parsed included \
                 ({})",
                flag.what(),
                flag.arg(),
                verdict(cpu),
                verdict(whole),
            ));
        }
    }
    drop(procs);
    println!(
        "\n## `pyagent --all-python --mode ebpf -r 99 [{}]` with {n} {} {} processes\n",
        flag.arg(),
        flag.what(),
        py.name
    );
    let how = match flag {
        Flag::OffCpu => "`deep.py {D} block` (time.sleep(0.001) in a loop)",
        Flag::Native => "`nice -n 19 deep.py {D} native` (sorted() with a key calling zlib.crc32)",
    }
    .replace("{D}", &AGENT_TARGET_DEPTH.to_string());
    println!(
        "{load_before} at start, {} at end; {secs} s per run; processes: {how}\n",
        util::load_average()
    );
    t.print();
    println!("\nAgent CPU: its threads' run time (`/proc/PID/task/*/schedstat`) over its wall time; \"sampling only\" from its first scan to 0.5 s before sampling stops, \"second half\" over the second half of that span (a service's steady cost, after the one-time work for new processes). BPF columns: each program's kernel run time over the run, as % of one core (charged to the tasks it runs in). Targets:\n");
    for v in verdicts {
        println!("{v}");
    }
    Ok(())
}

struct AgentRun {
    usage: util::Usage,
    /// CPU seconds and wall seconds from the end of the first scan to exit
    steady: Option<(f64, f64)>,
    /// CPU seconds and wall seconds from the end of the first scan to the last reading before
    /// the run's end (sampling only: no profile writing, no teardown)
    sampling: Option<(f64, f64)>,
    /// the same over the sampling span's second half: what a long-running service costs, once
    /// the one-time work of a new process (its objects parsed, with `--native` its unwind
    /// tables and the kernel's symbols) is done
    second_half: Option<(f64, f64)>,
    /// highest VmRSS seen after the first scan
    steady_rss: Option<u64>,
    /// BPF program run time (ns) and the wall seconds it was observed over
    bpf: Option<(u64, f64)>,
    /// run time (ns) of the off-CPU program, over the same wall seconds
    switch_ns: Option<u64>,
    profiles: Option<usize>,
    samples: Option<u64>,
    summary: String,
    /// the agent's `pyagent: off-CPU: ...` line, with `--off-cpu`
    off_cpu_line: Option<String>,
}

fn run_agent(agent: &Path, mode: &str, secs: f64, extra: &[&str]) -> Result<AgentRun> {
    let dir = std::env::temp_dir().join(format!("pyagent-bench-agent-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Kernel statistics for the agent's program, read from outside it.
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).ok();
    let before = program_ids(PROGRAM);
    let switch_before = program_ids(SWITCH_PROGRAM);
    let mut cmd = std::process::Command::new(agent);
    cmd.args([
        "--all-python",
        "--mode",
        mode,
        "-r",
        "99",
        "-d",
        &secs.to_string(),
        "-o",
    ])
    .arg(&dir)
    .args(extra);
    let mut p = Proc::spawn(&mut cmd, format!("pyagent --mode {mode}"))?;
    let pid = p.pid();
    let scanned = p
        .wait_stderr_line(
            |l| l.starts_with("pyagent: profiling every CPython process"),
            Duration::from_secs(120),
        )
        .ok()
        .map(|_| {
            (
                Instant::now(),
                util::proc_cpu_secs(pid),
                util::proc_cpu_secs_precise(pid),
            )
        });
    // The agent samples for `secs` after that line, then writes its profiles and exits.
    let sampling_end = scanned
        .as_ref()
        .map(|s| s.0 + Duration::from_secs_f64((secs - 0.5).max(0.0)));
    let mut last_sampling: Option<(Instant, f64)> = None;
    let mut halfway: Option<(Instant, f64)> = None;
    let half = scanned
        .as_ref()
        .map(|s| s.0 + Duration::from_secs_f64((secs - 0.5).max(0.0) / 2.0));
    let mut bpf: Option<(u64, Instant, Instant)> = None;
    let mut switch_ns: Option<u64> = None;
    let mut steady_rss: Option<u64> = None;
    let deadline = Instant::now() + Duration::from_secs_f64(secs + 120.0);
    let (usage, stderr) = loop {
        if mode == "ebpf" {
            if let Some(ns) = agent_program_run_ns(PROGRAM, &before) {
                let first = bpf.map_or_else(Instant::now, |(_, f, _)| f);
                bpf = Some((ns, first, Instant::now()));
            }
            switch_ns = agent_program_run_ns(SWITCH_PROGRAM, &switch_before).or(switch_ns);
        }
        if scanned.is_some() {
            if let Some(rss) = util::proc_rss_bytes(pid) {
                steady_rss = Some(steady_rss.map_or(rss, |m| m.max(rss)));
            }
        }
        if sampling_end.is_some_and(|end| Instant::now() < end) {
            if let Some(cpu) = util::proc_cpu_secs_precise(pid) {
                last_sampling = Some((Instant::now(), cpu));
                if halfway.is_none() && half.is_some_and(|h| Instant::now() >= h) {
                    halfway = last_sampling;
                }
            }
        }
        if let Some(done) = p.try_wait()? {
            break done;
        }
        if Instant::now() > deadline {
            p.wait(Duration::ZERO)?;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let end = Instant::now();
    let profiles = std::fs::read_dir(&dir).ok().map(|d| d.count());
    let _ = std::fs::remove_dir_all(&dir);
    let summary = stderr
        .lines()
        .rev()
        .find(|l| l.starts_with("pyagent:") && !l.starts_with("pyagent: off-CPU"))
        .unwrap_or("")
        .to_owned();
    let off_cpu_line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("pyagent: off-CPU: "))
        .map(str::to_owned);
    if !usage.success() {
        bail!("pyagent --mode {mode} failed: {}", stderr.trim());
    }
    let samples = summary
        .split_once(" (")
        .and_then(|(_, r)| r.split(' ').next()?.parse().ok());
    let steady = match scanned {
        Some((at, Some(cpu), _)) => Some((usage.cpu_secs() - cpu, (end - at).as_secs_f64())),
        _ => None,
    };
    let sampling = match (scanned, last_sampling) {
        (Some((at, _, Some(cpu0))), Some((t, cpu))) => Some((cpu - cpu0, (t - at).as_secs_f64())),
        _ => None,
    };
    let second_half = match (halfway, last_sampling) {
        (Some((t0, cpu0)), Some((t, cpu))) if t > t0 => Some((cpu - cpu0, (t - t0).as_secs_f64())),
        _ => None,
    };
    Ok(AgentRun {
        usage,
        steady,
        sampling,
        second_half,
        steady_rss,
        bpf: bpf.map(|(ns, first, last)| (ns, (last - first).as_secs_f64().max(1e-3))),
        switch_ns,
        profiles,
        samples,
        summary,
        off_cpu_line,
    })
}

/// Ids of the loaded programs called `pa_sample`.
fn program_ids(name: &str) -> BTreeSet<u32> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|p| p.name_as_str() == Some(name))
        .map(|p| p.id())
        .collect()
}

/// Run time (ns) of the one program `name` loaded since `before` was taken (none if zero or
/// several: then it cannot be told apart from someone else's).
fn agent_program_run_ns(name: &str, before: &BTreeSet<u32>) -> Option<u64> {
    let mut new = aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|p| p.name_as_str() == Some(name) && !before.contains(&p.id()));
    let p = new.next()?;
    if new.next().is_some() {
        return None;
    }
    u64::try_from(p.run_time().as_nanos()).ok()
}
