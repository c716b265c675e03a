//! The samplers measured on a running target: pyagent's unwinder in this thread, Tachyon and
//! py-spy as children; each gives a [`Cell`]. Also the heading the tables share.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use pyagent::discovery::locate_runtime;
use pyagent::unwind::{ThreadSample, UnwindOptions, Unwinder};

use super::cell::{count_collapsed, first_line, stats_line, Cell, Rate};
use crate::bench::util::{self, Interpreter, Proc};

/// How long a target may take to print `ready`.
pub(super) const READY: Duration = Duration::from_secs(30);

/// pyagent's unwinder in this thread with `options`, sampling every thread of the target for
/// `secs` and counting the samples `check` accepts (`expected` says what it wants).
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

/// Tachyon attached to the target, flat out (100 kHz), in the target's chroot, with `extra`
/// flags, counting the collapsed stacks `right` accepts.
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
pub(super) fn py_spy(bin: &Path, target: &Proc, depth: usize, secs: f64) -> Cell {
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

/// A table's title, the command line and the load averages at its start and now.
pub(super) fn print_heading(title: &str, load_before: &str) {
    println!("\n## {title}: samples per CPU-second (higher is better)\n");
    util::print_command_line();
    println!("{load_before} at start, {} at end\n", util::load_average());
}
