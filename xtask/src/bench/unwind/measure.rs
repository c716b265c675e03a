//! The measurements (they link the agent library; see the parent module).

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use pyagent::discovery::locate_runtime;
use pyagent::unwind::{ThreadSample, UnwindOptions, Unwinder};

use super::super::util::{Interpreter, Manifest, Proc, Table};

use super::super::util;
use super::Args;

pub(super) const READY: Duration = Duration::from_secs(30);

/// One profiler's result on one target.
#[derive(Debug, Clone)]
pub(super) enum Cell {
    Measured(Rate),
    NotApplicable(String),
    Failed(String),
}

#[derive(Debug, Clone, Default)]
pub(super) struct Rate {
    pub(super) samples: u64,
    pub(super) wrong: u64,
    pub(super) cpu_secs: f64,
    pub(super) wall_secs: f64,
    /// one-line extras for the details table
    pub(super) note: String,
}

impl Rate {
    fn per_cpu_sec(&self) -> f64 {
        self.samples as f64 / self.cpu_secs.max(1e-9)
    }
}

impl Cell {
    pub(super) fn rate(&self) -> Option<f64> {
        match self {
            Cell::Measured(r) if r.samples > 0 => Some(r.per_cpu_sec()),
            _ => None,
        }
    }

    pub(super) fn show(&self) -> String {
        match self {
            Cell::Measured(r) if r.wrong > 0 => {
                format!("{} ({} wrong)", util::si(r.per_cpu_sec()), r.wrong)
            }
            Cell::Measured(r) => util::si(r.per_cpu_sec()),
            Cell::NotApplicable(why) => format!("n/a ({why})"),
            Cell::Failed(why) => format!("failed ({why})"),
        }
    }
}

struct Row {
    python: String,
    depth: usize,
    kind: String,
    ours_on: Cell,
    ours_off: Cell,
    tachyon: Cell,
    pyspy: Cell,
}

impl Row {
    /// Our best: the cache on where it exists.
    fn ours(&self) -> Option<f64> {
        self.ours_on.rate().or_else(|| self.ours_off.rate())
    }
}

/// Runs the benchmark.
pub fn run(args: &Args) -> Result<()> {
    let manifest = Manifest::load()?;
    let (seconds, peer_seconds, depths) = if args.quick {
        (
            1.0,
            1.0,
            args.depths
                .iter()
                .copied()
                .filter(|&d| d <= 100)
                .collect::<Vec<_>>(),
        )
    } else {
        (args.seconds, args.peer_seconds, args.depths.clone())
    };
    if depths.iter().any(|&d| d < 2) {
        bail!("depths must be at least 2 (the module frame and one function)");
    }
    for k in &args.kinds {
        if k != "park" && k != "busy" {
            bail!("unknown target kind {k:?}: use park and/or busy");
        }
    }
    let pythons: Vec<&Interpreter> = args
        .pythons
        .iter()
        .map(|n| manifest.interpreter(n))
        .collect::<Result<_>>()?;
    let pyspy = manifest.peer("py-spy");
    let pythons = if args.asyncio_only {
        Vec::new()
    } else {
        pythons
    };
    let script = util::bench_script("deep.py");
    let load_before = util::load_average();
    eprintln!(
        "bench unwind: {} targets, {seconds} s per pyagent measurement, {peer_seconds} s per peer",
        pythons.len() * depths.len() * args.kinds.len()
    );

    let mut rows = Vec::new();
    for py in &pythons {
        for &depth in &depths {
            for kind in &args.kinds {
                eprintln!("bench unwind: {} depth {depth} {kind}", py.name);
                let target = spawn_target(py, &script, depth, kind)?;
                let tachyon = if py.minor() >= (3, 15) {
                    tachyon(py, &target, depth, peer_seconds)
                } else {
                    Cell::NotApplicable("3.15+ only".into())
                };
                let pyspy = match pyspy {
                    Some(bin) => py_spy(bin, &target, depth, peer_seconds),
                    None => Cell::NotApplicable("not in the manifest".into()),
                };
                // Ours last: with the cache on, the unwinder clears anchors a peer left behind.
                let ours_off = ours(&target, depth, false, seconds);
                let ours_on = if py.minor() >= (3, 15) {
                    ours(&target, depth, true, seconds)
                } else {
                    Cell::NotApplicable("no cache before 3.15".into())
                };
                drop(target);
                rows.push(Row {
                    python: py.name.clone(),
                    depth,
                    kind: kind.clone(),
                    ours_on,
                    ours_off,
                    tachyon,
                    pyspy,
                });
            }
        }
    }
    if !rows.is_empty() {
        print_report(&rows, &load_before);
    }
    if !args.no_asyncio {
        super::asyncio_row::run(&manifest, seconds, peer_seconds)?;
    }
    Ok(())
}

fn spawn_target(py: &Interpreter, script: &Path, depth: usize, kind: &str) -> Result<Proc> {
    let mut cmd = py.script_command(script, &[depth.to_string(), kind.to_owned()])?;
    Proc::spawn_ready(
        &mut cmd,
        format!("{} deep.py {depth} {kind}", py.name),
        "ready",
        READY,
    )
}

/// pyagent's unwinder in this thread, sampling every thread of the target for `secs`.
fn ours(target: &Proc, depth: usize, frame_cache: bool, secs: f64) -> Cell {
    let options = UnwindOptions {
        frame_cache,
        ..UnwindOptions::default()
    };
    let check = |s: &[ThreadSample]| s.len() == 1 && s[0].frames.len() == depth && !s[0].truncated;
    ours_checked(
        target,
        options,
        check,
        &format!("one thread {depth} deep"),
        secs,
    )
}

/// [`ours`] with `options`, counting the samples `check` accepts (`expected` says what it wants).
pub(super) fn ours_checked(
    target: &Proc,
    options: UnwindOptions,
    check: impl Fn(&[ThreadSample]) -> bool,
    expected: &str,
    secs: f64,
) -> Cell {
    let frame_cache = options.frame_cache;
    let located = match locate_runtime(target.pid()) {
        Ok(t) => t,
        Err(e) => return Cell::Failed(e.to_string()),
    };
    let mut u = Unwinder::new(located, options);
    if frame_cache && !u.frame_cache_enabled() {
        return Cell::NotApplicable("no anchor in this layout".into());
    }
    // Warm up the code-object and frame caches: the steady state is what is measured.
    for _ in 0..20 {
        if let Err(e) = u.sample() {
            return Cell::Failed(e.to_string());
        }
    }
    let first = match u.sample() {
        Ok(s) => s,
        Err(e) => return Cell::Failed(e.to_string()),
    };
    if !check(&first) {
        let got: Vec<usize> = first.iter().map(|s| s.frames.len()).collect();
        return Cell::Failed(format!("expected {expected}, got depths {got:?}"));
    }
    let stats0 = u.stats();
    let reads0 = u.remote_reads();
    let pages0 = u.page_cache_stats();
    let wall0 = Instant::now();
    let cpu0 = util::thread_cpu_time();
    let sys0 = thread_sys_time();
    let (mut samples, mut wrong, mut errors) = (0u64, 0u64, 0u64);
    let limit = Duration::from_secs_f64(secs);
    loop {
        match u.sample() {
            Ok(s) if check(&s) => samples += 1,
            Ok(_) => wrong += 1,
            Err(_) => errors += 1,
        }
        if (samples + wrong + errors) % 64 == 0 && wall0.elapsed() >= limit {
            break;
        }
    }
    let cpu = (util::thread_cpu_time() - cpu0).as_secs_f64();
    let sys = (thread_sys_time() - sys0).as_secs_f64();
    let wall = wall0.elapsed().as_secs_f64();
    let st = u.stats();
    let reads = u.remote_reads();
    let pages = u.page_cache_stats();
    let n = (st.samples - stats0.samples).max(1) as f64;
    let mut note = format!(
        "{:.1} µs/sample ({:.0}% in the kernel), {:.1} frames read/sample, {:.2} process_vm_readv/sample ({:.1} pages)",
        cpu * 1e6 / n,
        100.0 * sys / cpu.max(1e-9),
        (st.frames_read - stats0.frames_read) as f64 / n,
        (reads - reads0) as f64 / n,
        (pages.misses - pages0.misses + pages.prefetched - pages0.prefetched) as f64 / n,
    );
    if frame_cache {
        let _ = write!(
            note,
            ", cache {}/{}/{} full/partial/miss",
            st.cache_full_hits - stats0.cache_full_hits,
            st.cache_partial_hits - stats0.cache_partial_hits,
            st.cache_misses - stats0.cache_misses
        );
    }
    if errors > 0 {
        let _ = write!(note, ", {errors} errors");
    }
    Cell::Measured(Rate {
        samples,
        wrong: wrong + errors,
        cpu_secs: cpu,
        wall_secs: wall,
        note,
    })
}

/// System CPU time of the calling thread (`getrusage(RUSAGE_THREAD)`).
fn thread_sys_time() -> Duration {
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid `who` and out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    Duration::new(ru.ru_stime.tv_sec as u64, ru.ru_stime.tv_usec as u32 * 1000)
}

/// Tachyon attached to the target, flat out, in the target's chroot.
fn tachyon(py: &Interpreter, target: &Proc, depth: usize, secs: f64) -> Cell {
    // `tid:N;outer;...;inner COUNT`
    let right = |stack: &str| stack.split(';').filter(|f| !f.starts_with("tid:")).count() == depth;
    tachyon_with(py, target, &["-a"], right, secs)
}

/// [`tachyon`] with `extra` flags, counting the collapsed stacks `right` accepts.
pub(super) fn tachyon_with(
    py: &Interpreter,
    target: &Proc,
    extra: &[&str],
    right: impl Fn(&str) -> bool,
    secs: f64,
) -> Cell {
    let run = || -> Result<Cell> {
        let (inside, host) = py.scratch_dir()?;
        let name = format!("tachyon-{}.txt", target.pid());
        let _ = std::fs::remove_file(host.join(&name));
        let out = inside.join(&name);
        let mut cmd = py.command([
            "-m".to_owned(),
            "profiling.sampling".to_owned(),
            "attach".to_owned(),
            target.pid().to_string(),
            "-r".to_owned(),
            "100khz".to_owned(),
            "-d".to_owned(),
            format!("{}", secs.ceil() as u64),
            "--collapsed".to_owned(),
            "-o".to_owned(),
            out.display().to_string(),
        ]);
        cmd.args(extra);
        let mut p = Proc::spawn(&mut cmd, "tachyon")?;
        let (usage, stderr) = p.wait(Duration::from_secs_f64(secs + 60.0))?;
        if !usage.success() {
            return Ok(Cell::Failed(first_line(&stderr)));
        }
        let text = std::fs::read_to_string(host.join(&name))
            .with_context(|| format!("tachyon wrote no {}", host.join(&name).display()))?;
        let _ = std::fs::remove_file(host.join(&name));
        let (samples, wrong) = count_collapsed(&text, &right);
        Ok(Cell::Measured(Rate {
            samples,
            wrong,
            cpu_secs: usage.cpu_secs(),
            wall_secs: usage.wall.as_secs_f64(),
            note: stats_line(&p.rest_of_stdout(), &stderr),
        }))
    };
    run().unwrap_or_else(|e| Cell::Failed(format!("{e:#}")))
}

/// py-spy recording the target flat out, stopped with SIGINT after `secs`.
fn py_spy(bin: &Path, target: &Proc, depth: usize, secs: f64) -> Cell {
    let run = || -> Result<Cell> {
        let out = std::env::temp_dir().join(format!("pyagent-bench-pyspy-{}.txt", target.pid()));
        let _ = std::fs::remove_file(&out);
        let mut cmd = std::process::Command::new(bin);
        cmd.args([
            "record",
            "--pid",
            &target.pid().to_string(),
            "--rate",
            "10000",
        ])
        .args([
            "--duration",
            "3600",
            "--nonblocking",
            "--idle",
            "-f",
            "raw",
            "-o",
        ])
        .arg(&out);
        let mut p = Proc::spawn(&mut cmd, "py-spy")?;
        // py-spy falls behind at this rate and would run long past --duration: interrupt it.
        std::thread::sleep(Duration::from_secs_f64(secs));
        p.signal(libc::SIGINT);
        let (usage, stderr) = p.wait(Duration::from_secs(60))?;
        let Ok(text) = std::fs::read_to_string(&out) else {
            return Ok(Cell::Failed(format!("no output: {}", first_line(&stderr))));
        };
        let _ = std::fs::remove_file(&out);
        let (samples, wrong) = count_collapsed(&text, |stack| stack.split(';').count() == depth);
        if samples + wrong == 0 {
            return Ok(Cell::Failed(format!("no samples: {}", first_line(&stderr))));
        }
        let note = stderr
            .lines()
            .find_map(|l| {
                l.split_once("Samples:")
                    .map(|(_, r)| format!("Samples:{r}"))
            })
            .unwrap_or_default();
        Ok(Cell::Measured(Rate {
            samples,
            wrong,
            cpu_secs: usage.cpu_secs(),
            wall_secs: usage.wall.as_secs_f64(),
            note,
        }))
    };
    run().unwrap_or_else(|e| Cell::Failed(format!("{e:#}")))
}

/// Sums the counts of collapsed stacks (`a;b;c COUNT`), split into (those `right` accepts, the
/// others).
fn count_collapsed(text: &str, right: impl Fn(&str) -> bool) -> (u64, u64) {
    let (mut good, mut wrong) = (0, 0);
    for line in text.lines() {
        let Some((stack, count)) = line.trim_end().rsplit_once(' ') else {
            continue;
        };
        let Ok(count) = count.parse::<u64>() else {
            continue;
        };
        if right(stack) {
            good += count;
        } else {
            wrong += count;
        }
    }
    (good, wrong)
}

/// Tachyon's own summary (rate, missed samples) from its output.
fn stats_line(stdout: &str, stderr: &str) -> String {
    stdout
        .lines()
        .chain(stderr.lines())
        .filter(|l| l.starts_with("Sample rate") || l.starts_with("Warning: missed"))
        .map(str::trim)
        .collect::<Vec<_>>()
        .join("; ")
}

pub(super) fn first_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no message")
        .chars()
        .take(120)
        .collect()
}

pub(super) fn ratio(ours: Option<f64>, theirs: Option<f64>) -> String {
    match (ours, theirs) {
        (Some(a), Some(b)) => format!("{:.1}×", a / b),
        _ => "—".to_owned(),
    }
}

/// A table's title, the command line and the load averages at its start and now.
pub(super) fn print_heading(title: &str, load_before: &str) {
    println!("\n## {title}: samples per CPU-second (higher is better)\n");
    util::print_command_line();
    println!("{load_before} at start, {} at end\n", util::load_average());
}

fn print_report(rows: &[Row], load_before: &str) {
    print_heading("pyagent unwinder", load_before);
    let mut t = Table::new(&[
        "python, depth, target",
        "pyagent (cache on)",
        "pyagent (cache off)",
        "Tachyon",
        "py-spy",
        "ours/Tachyon",
        "ours/py-spy",
    ]);
    for r in rows {
        t.row(vec![
            format!("{} {} {}", r.python, r.depth, r.kind),
            r.ours_on.show(),
            r.ours_off.show(),
            r.tachyon.show(),
            r.pyspy.show(),
            ratio(r.ours(), r.tachyon.rate()),
            ratio(r.ours(), r.pyspy.rate()),
        ]);
    }
    t.print();
    println!(
        "\n\"ours\" is the cache-on figure where the cache exists (3.15), else cache off. Ours: \
         unwinding only, in-process, CPU time of the sampling thread. Tachyon (`-r 100khz -a \
         --collapsed`) and py-spy (`--rate 10000 --nonblocking --idle -f raw`, SIGINT after the \
         run): whole-process user+system time, including their start-up and aggregation."
    );

    println!("\n### Details\n");
    let mut d = Table::new(&[
        "python, depth, target",
        "profiler",
        "samples",
        "CPU s",
        "wall s",
        "notes",
    ]);
    for r in rows {
        for (who, c) in [
            ("pyagent cache on", &r.ours_on),
            ("pyagent cache off", &r.ours_off),
            ("Tachyon", &r.tachyon),
            ("py-spy", &r.pyspy),
        ] {
            if let Cell::Measured(m) = c {
                d.row(vec![
                    format!("{} {} {}", r.python, r.depth, r.kind),
                    who.to_owned(),
                    m.samples.to_string(),
                    format!("{:.2}", m.cpu_secs),
                    format!("{:.2}", m.wall_secs),
                    m.note.clone(),
                ]);
            }
        }
    }
    d.print();

    println!("\n### Targets (issue: depth 100 on 3.15: ≥ 2× Tachyon, ≥ 10× py-spy)\n");
    let mut any = false;
    for r in rows
        .iter()
        .filter(|r| r.depth == 100 && r.python.starts_with("py315"))
    {
        any = true;
        let check = |theirs: Option<f64>, want: f64| match (r.ours(), theirs) {
            (Some(a), Some(b)) if a / b >= want => format!("met ({:.1}× ≥ {want}×)", a / b),
            (Some(a), Some(b)) => format!("MISSED ({:.1}× < {want}×)", a / b),
            _ => "not measured".to_owned(),
        };
        println!(
            "- py315 100 {}: vs Tachyon {}; vs py-spy {}",
            r.kind,
            check(r.tachyon.rate(), 2.0),
            check(r.pyspy.rate(), 10.0)
        );
    }
    if !any {
        println!("- not measured in this run (needs py315 at depth 100)");
    }
}
