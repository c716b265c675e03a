//! `pyagent top`: which functions a process is in right now, like `top` for Python.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use pyagent::offsets::AsyncioUnsupported;
use pyagent::sampler::userspace::{UserspaceConfig, UserspaceSampler};
use pyagent::unwind::{ThreadSample, UnwindOptions};

/// Self and total counts of one function (qualified name and file).
#[derive(Default)]
struct Row {
    own: u64,
    total: u64,
}

/// Samples `pid` and redraws a table of functions by self time every second.
pub fn run(
    pid: u32,
    rate_hz: u32,
    idle: bool,
    rows: usize,
    iterations: Option<u64>,
    unwind: UnwindOptions,
    stop: &AtomicBool,
) -> Result<()> {
    let config = UserspaceConfig {
        rate_hz,
        duration: None,
        subprocesses: false,
        blocking: false,
        idle,
        native_stacks: false,
        debug_dirs: pyagent::config::DebugDirs::default(),
        unwind,
    };
    let async_tasks = config.unwind.async_tasks;
    let mut sampler = UserspaceSampler::new(&[pid], config)?;
    if let Some(u) = sampler.unwinder(pid) {
        // Refused as `dump` and `record` refuse it, rather than shown without tasks.
        if async_tasks && u.target().offsets.coroutines.is_none() {
            return Err(AsyncioUnsupported(u.target().version()).into());
        }
    }
    let version = sampler
        .unwinder(pid)
        .map(|u| u.target().version().to_string())
        .unwrap_or_default();
    let tty = std::io::stdout().is_terminal();
    let period = Duration::from_secs_f64(1.0 / rate_hz.max(1) as f64);
    let mut shown = 0u64;
    while !stop.load(Ordering::Relaxed) && iterations.is_none_or(|n| shown < n) {
        let mut table: HashMap<(String, String), Row> = HashMap::new();
        let mut samples = 0u64;
        let window = Instant::now();
        let mut alive = true;
        while alive && window.elapsed() < Duration::from_secs(1) && !stop.load(Ordering::Relaxed) {
            let tick = Instant::now();
            alive = sampler.sample_once(&mut |s: &ThreadSample| {
                samples += 1;
                let mut seen = std::collections::HashSet::new();
                for (i, f) in s.frames.iter().enumerate() {
                    let key = (f.function().to_string(), f.file().to_string());
                    let row = table.entry(key.clone()).or_default();
                    if i == 0 {
                        row.own += 1;
                    }
                    // Recursion counts once towards total.
                    if seen.insert(key) {
                        row.total += 1;
                    }
                }
            });
            if let Some(rest) = period.checked_sub(tick.elapsed()) {
                std::thread::sleep(rest);
            }
        }
        shown += 1;
        let mut sorted: Vec<_> = table.into_iter().collect();
        sorted.sort_by(|a, b| {
            b.1.own
                .cmp(&a.1.own)
                .then(b.1.total.cmp(&a.1.total))
                .then(a.0.cmp(&b.0))
        });
        let mut out = std::io::stdout().lock();
        if tty {
            write!(out, "\x1b[H\x1b[2J")?;
        }
        writeln!(
            out,
            "pyagent top: pid {pid} (CPython {version}), {samples} samples in the last second"
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
