//! Section 5: what naming the GIL's holder costs a GIL wait. One load of the sampler with
//! off-CPU on beside a fresh `gil_holder.py` (one thread holding the GIL in a Python loop,
//! three threads waiting for it), with the holder lookup and without it
//! (`BpfConfig::gil_holder`): the off-CPU program's run time per context switch, the waits it
//! recorded and how many of them named a holder.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use pyagent::sampler::bpf::{pa_proc_for, set_gil, BpfConfig, BpfSampler};
use pyagent::unwind::{UnwindOptions, Unwinder};

use super::program_run::spawn_target;
use crate::bench::util::{self, Interpreter, Table};

/// The target: the integration tests' `gil_holder.py`.
fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/scripts/gil_holder.py")
}

/// One run's figures.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    /// runs of the off-CPU program (every context switch of the host)
    switches: u64,
    /// its run time, ns
    run_ns: u64,
    /// off-CPU records written
    recorded: u64,
    /// of them, the ones naming a holder
    named: u64,
}

impl Run {
    fn ns_per_switch(&self) -> f64 {
        self.run_ns as f64 / self.switches.max(1) as f64
    }
}

/// Loads the sampler with off-CPU on (holder lookup `lookup`) beside a fresh `gil_holder.py`
/// under `py`, tracked as the agent tracks it, for `secs`.
fn measure(py: &Interpreter, lookup: bool, secs: f64) -> Result<Run> {
    let (target, located) = spawn_target(py, &script(), &[])?;
    let pid = target.pid();
    let offsets = located.offsets;
    let mut u = Unwinder::new(located, UnwindOptions::default());
    let interpreters = u.threads().context("reading the thread list")?;
    let main_interp = interpreters.last().map_or(0, |(i, _)| i.addr);
    let mut s = BpfSampler::load(&BpfConfig {
        rate_hz: 1,
        enable_stats: true,
        off_cpu: true,
        gil_holder: lookup,
        ..BpfConfig::default()
    })
    .context("loading the BPF sampler (needs root)")?;
    for (_, list) in &interpreters {
        for t in list {
            let host = u
                .host_tid(t.native_thread_id)
                .context("thread not in /proc")?;
            s.set_thread(host, t.addr)?;
        }
    }
    let mut proc = pa_proc_for(&offsets, false);
    set_gil(&mut proc, &offsets, u.target().runtime_addr, main_interp);
    s.track_process(pid, &proc)?;
    let Some(start) = s.off_cpu_run_stats() else {
        bail!("the kernel's BPF run-time statistics could not be enabled (needs CAP_SYS_ADMIN)");
    };
    let mut run = Run::default();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
        s.drain(|r| {
            let h = r.header();
            if h.is_off_cpu() {
                run.recorded += 1;
                run.named += u64::from(h.gil_holder().is_some());
            }
        });
    }
    let (ns, count) = s.off_cpu_run_stats().context("BPF statistics vanished")?;
    run.run_ns = ns - start.0;
    run.switches = count - start.1;
    drop(target);
    Ok(run)
}

/// Section 5: the holder lookup's cost on each interpreter with a GIL of `pythons`.
pub(super) fn gil_holder_cost(pythons: &[&Interpreter], secs: f64) -> Result<()> {
    let load_before = util::load_average();
    let mut t = Table::new(&[
        "python",
        "holder lookup",
        "switches",
        "recorded waits",
        "named a holder",
        "ns/switch",
        "ns per named wait",
    ]);
    for py in pythons.iter().filter(|py| !py.free_threaded) {
        eprintln!(
            "bench ebpf: {} gil_holder.py, holder lookup off, then on",
            py.name
        );
        let off = measure(py, false, secs)?;
        let on = measure(py, true, secs)?;
        for (lookup, r) in [("off", off), ("on", on)] {
            // What the lookup added per named wait: the run time beyond the same switches at
            // the rate measured without it.
            let added =
                (r.run_ns as f64 - off.ns_per_switch() * r.switches as f64) / r.named.max(1) as f64;
            t.row(vec![
                py.name.clone(),
                lookup.to_owned(),
                r.switches.to_string(),
                r.recorded.to_string(),
                r.named.to_string(),
                format!("{:.0}", r.ns_per_switch()),
                if r.named > 0 {
                    format!("{added:.0}")
                } else {
                    "-".to_owned()
                },
            ]);
        }
    }
    println!("\n## GIL holder lookup: what naming the holder costs a GIL wait\n");
    println!(
        "{load_before} at start, {} at end; {secs} s per row, off-CPU on, on-CPU at 1 Hz\n",
        util::load_average()
    );
    t.print();
    println!(
        "\nTarget: `gil_holder.py` (one thread holds the GIL in a Python loop, three wait for \
         it). ns/switch: the off-CPU program's run time over its runs (every context switch of \
         the host, tracked or not). ns per named wait: the run time beyond what the same \
         switches cost at the rate without the lookup, over the waits that named a holder \
         (the lookup reads the GIL's holder, its current frame and that frame's code object). \
         Two runs of a noisy machine: a difference within the runs' spread reads as ~0.\n"
    );
    Ok(())
}
