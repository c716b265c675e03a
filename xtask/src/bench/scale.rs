//! `cargo xtask bench scale` (issue 36): the default service beside many Python processes.
//!
//! For each N of `--processes`, N py312 processes start: `--busy` (10) of them spin on the CPU
//! (`deep.py 30 busy`, at nice 19), the others sleep and wake 10 times a second to do a little
//! work (`bench-scripts/sleeper.py`); each says `ready` when it is. Beside them runs the release
//! service, `pyagent --all-python --mode ebpf --interval 10s -o DIR`, once per `--off-cpu`
//! setting; after `--warmup` past its start the bench reads, at both ends of a `--measure`
//! window: the agent's CPU time (`/proc/PID/stat`) and memory (`VmRSS`, `VmHWM`), the kernel's
//! run-time statistics of the BPF programs the agent holds (`kernel.bpf_stats_enabled` on for
//! the bench, restored after), the targets' context switches, and the profiles in DIR. Before
//! the first N the agent runs alone (unless `--no-baseline`): its off-CPU program's mean run
//! there is the cost of a context switch of untracked tasks, from which the cost of a tracked
//! thread's switch is worked out. Every process is killed after its N, on error too.
//!
//! The report goes to stdout and `target/bench/scale.md` (`--out-dir`).
//!
//! Modules, lowest first (each imports only those before it): [`args`] (the arguments),
//! [`proc_files`] (what is read from `/proc`), [`window`] (what a window measured),
//! [`report`] (the tables), [`run`] (the processes).

mod args;
mod proc_files;
mod report;
mod run;
mod window;

use std::path::Path;

use anyhow::{bail, Context, Result};

pub use self::args::Args;
use self::report::{Report, Row};
use self::run::{run_agent, BpfStats, Targets, INTERVAL_SECS};
use super::util::{self, Features, Manifest};

/// Runs the benchmark.
pub fn run(args: &Args) -> Result<()> {
    util::reexec_release(&["pyagent"], Features::None, args.no_release)?;
    if args.off_cpu.is_empty() || args.measure.is_zero() {
        bail!("--off-cpu needs a value and --measure a length");
    }
    let manifest = Manifest::load()?;
    let py = manifest.interpreter(&args.python)?;
    let agent = util::release_binary("pyagent")?;
    let _stats = BpfStats::on()?;
    let mut report = Report {
        command: util::command_line(),
        python: py.name.clone(),
        busy: args.busy,
        warmup: args.warmup.as_secs_f64(),
        measure: args.measure.as_secs_f64(),
        interval: INTERVAL_SECS as f64,
        load_before: util::load_average(),
        load_after: String::new(),
        rows: Vec::new(),
    };
    let baseline = (!args.no_baseline).then_some(0);
    for n in baseline.into_iter().chain(args.processes.iter().copied()) {
        eprintln!("bench scale: starting {n} {} processes", py.name);
        let targets = Targets::start(py, n, args.busy.min(n))?;
        for &off_cpu in &args.off_cpu {
            eprintln!("bench scale: the service beside {n} processes, off-CPU {off_cpu}");
            let (window, last) = run_agent(&agent, off_cpu, &targets, args.warmup, args.measure)
                .with_context(|| format!("{n} processes, off-CPU {off_cpu}"))?;
            eprintln!("bench scale: agent's last line: {last}");
            report.rows.push(Row {
                processes: n,
                off_cpu,
                window,
            });
        }
        drop(targets);
    }
    report.load_after = util::load_average();
    let md = report.markdown();
    print!("\n{md}");
    let out_dir = args
        .out_dir
        .clone()
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench"));
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let path = out_dir.join("scale.md");
    std::fs::write(&path, &md).with_context(|| format!("cannot write {}", path.display()))?;
    println!("\nwrote {}", path.display());
    Ok(())
}
