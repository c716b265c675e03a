//! `pyagent top`: which functions a process is in right now, like `top` for Python.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use pyagent::discovery::locate_runtime;
use pyagent::offsets::AsyncioUnsupported;
use pyagent::profiler::HostConfig;

use crate::SamplerChoice;
use pyagent::unwind::UnwindOptions;

/// Self and total counts of one function (qualified name and file).
#[derive(Default)]
struct Row {
    own: u64,
    total: u64,
}

/// What `top` shows and for how long.
pub struct TopOptions {
    /// samples per second
    pub rate_hz: u32,
    /// count threads off the CPU too
    pub idle: bool,
    /// rows shown
    pub rows: usize,
    /// refreshes before it stops (`None`: until stopped or the process exits)
    pub iterations: Option<u64>,
    /// counts since the start rather than of the last second (py-spy top's toggle)
    pub cumulative: bool,
    /// which sampler, and why
    pub sampler: SamplerChoice,
}

/// Samples `pid` and redraws a table of functions by self time every second.
pub fn run(pid: u32, options: TopOptions, unwind: UnwindOptions, stop: &AtomicBool) -> Result<()> {
    let TopOptions {
        rate_hz,
        sampler,
        idle,
        rows,
        iterations,
        cumulative,
    } = options;
    let target = locate_runtime(pid)?;
    // Refused as `dump` and `record` refuse it, rather than shown without tasks.
    if unwind.async_tasks && target.offsets.coroutines.is_none() {
        return Err(AsyncioUnsupported(target.version()).into());
    }
    let version = target.version().to_string();
    let profiler = crate::host_profiler(
        HostConfig {
            mode: sampler.mode,
            rate_hz,
            pids: Some(vec![pid]),
            unwind,
            idle,
            ..HostConfig::default()
        },
        crate::OffCpu::Off,
    )?;
    // Said before the screen is first drawn, and kept on stderr where the redraws do not reach.
    eprintln!("{}", sampler.line(&profiler));
    let mut profiler = profiler;
    let mode = profiler.mode_name();
    let tty = std::io::stdout().is_terminal();
    let mut shown = 0u64;
    let started = Instant::now();
    let mut table: HashMap<(String, String), Row> = HashMap::new();
    let mut samples = 0u64;
    while !stop.load(Ordering::Relaxed) && iterations.is_none_or(|n| shown < n) {
        profiler.run(stop, Some(Instant::now() + Duration::from_secs(1)), |_| {});
        let alive = !profiler.pids().is_empty();
        if !cumulative {
            table.clear();
            samples = 0;
        }
        for (_, window) in profiler.cut() {
            for (key, n) in window.stacks() {
                samples += n;
                let mut seen = std::collections::HashSet::new();
                for (i, f) in key.frames.iter().enumerate() {
                    let name = (f.function().to_string(), f.file().to_string());
                    let row = table.entry(name.clone()).or_default();
                    if i == 0 {
                        row.own += n;
                    }
                    // Recursion counts once towards total.
                    if seen.insert(name) {
                        row.total += n;
                    }
                }
            }
        }
        shown += 1;
        let mut sorted: Vec<_> = table.iter().collect();
        sorted.sort_by(|a, b| {
            b.1.own
                .cmp(&a.1.own)
                .then(b.1.total.cmp(&a.1.total))
                .then(a.0.cmp(b.0))
        });
        let mut out = std::io::stdout().lock();
        if tty {
            write!(out, "\x1b[H\x1b[2J")?;
        }
        let span = if cumulative {
            format!("since the start ({} s)", started.elapsed().as_secs())
        } else {
            "in the last second".to_string()
        };
        writeln!(
            out,
            "pyagent top: pid {pid} (CPython {version}), {mode} sampler, {samples} samples {span}"
        )?;
        writeln!(out, "{:>7} {:>7}  function (file)", "%own", "%total")?;
        for ((function, file), row) in sorted.into_iter().take(rows) {
            let pct = |n: u64| 100.0 * n as f64 / samples.max(1) as f64;
            writeln!(
                out,
                "{:>6.1}% {:>6.1}%  {function} ({file})",
                pct(row.own),
                pct(row.total)
            )?;
        }
        out.flush()?;
        if !alive {
            writeln!(out, "process {pid} exited")?;
            break;
        }
    }
    Ok(())
}
