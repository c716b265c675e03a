//! `cargo xtask bench compare` (issue 5): pyagent beside py-spy, Austin and Tachyon, all as
//! separate processes attached to the same Python targets, on four questions.
//!
//! 1. Target slowdown: `compare-scripts/compare_slowdown.py` counts calls of a fixed function per
//!    wall-clock second over a fixed window, with no profiler and with each profiler at 99 Hz and
//!    1 kHz. Runs are interleaved (a round per repetition runs none, A, none, B, none, ... over
//!    every configuration, the order rotated each round) and each profiled run is compared with
//!    the unprofiled runs just before and after it, which cancels a shared machine's drifting load.
//! 2. Profiler cost: the profiler process's CPU time (`wait4` rusage) per 1000 samples counted
//!    in its own output, from the same runs.
//! 3. Accuracy: `compare_accuracy.py` splits its CPU time 60/30/10 over three functions at stack
//!    depths 1, 2 and 4 below its loop and measures the split with `time.process_time()`; each
//!    profiler's share of samples per function is compared with it, and the line of each hot
//!    loop and the callers above it are checked.
//! 4. Throughput: `compare_deep.py` holds a stack 100 or 1000 frames deep; each profiler is run at
//!    rising rates until it collects less than 90% of rate × duration, or finishes late.
//!
//! The main table runs on one interpreter every peer supports (`--python`, py313); Tachyon exists
//! only in 3.15, so it and pyagent get their own rows on `--tachyon-python` (py315, in the sid
//! chroot). Results go to stdout, `target/bench/compare.md` and `target/bench/compare.svg`.
//!
//! Modules, lowest first (each imports only those before it): [`profiler`] (the profilers and
//! their output), [`plan`] (what runs), [`results`] (what was measured), [`profiled_run`] (a
//! target with a profiler attached), [`toggled`] (the toggled slowdown), [`measure`] (every run),
//! [`report`] (the tables and the chart). Statistics come from [`crate::bench::stats`].

mod measure;
mod plan;
mod profiled_run;
mod profiler;
mod report;
mod results;
mod toggled;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use self::plan::{Plan, Suite};
use self::profiled_run::script;
use self::profiler::{Profiler, Tools};
use super::util::Manifest;
use crate::test;

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Repetitions of every slowdown run [default: 6, 1 with --quick]: six is the fewest whose
    /// median has a 95% confidence interval.
    #[arg(long)]
    reps: Option<usize>,
    /// Seconds of each slowdown window [default: 2, 0.6 with --quick]; the lead before it is
    /// half of it, at most 1 s. Shorter windows give more pairs in the same time.
    #[arg(long)]
    window: Option<f64>,
    /// Only the slowdown runs (which also give each profiler's cost): sections 3 and 4 are
    /// left out.
    #[arg(long)]
    slowdown_only: bool,
    /// Seconds of paused-and-resumed pairs in each toggled slowdown run, one run per profiler
    /// and rate [default: 60, 2 with --quick; 0: none].
    #[arg(long)]
    toggle_seconds: Option<f64>,
    /// Seconds of each half of a toggled pair [default: 0.05]: the host's noise drifts, so
    /// halves close together differ less.
    #[arg(long)]
    toggle_window: Option<f64>,
    /// Only the toggled slowdown runs.
    #[arg(long)]
    toggled_only: bool,
    /// Only these profilers [default: all]. The unprofiled baseline runs for each Python that
    /// keeps one (Tachyon runs on 3.15 only, Austin and py-spy on 3.13 only), and the toggled
    /// slowdown's timer-only control beside pyagent-ebpf.
    #[arg(long, value_enum, value_delimiter = ',')]
    profilers: Vec<Profiler>,
    /// One repetition, 1 s windows, one depth and rate for throughput: checks that every
    /// profiler runs (the smoke test); the numbers mean little.
    #[arg(long)]
    quick: bool,
    /// The pyagent binary to compare [default: build and use target/release/pyagent].
    #[arg(long)]
    agent: Option<PathBuf>,
    /// Where to write compare.md and compare.svg [default: target/bench].
    #[arg(long)]
    out_dir: Option<PathBuf>,
    /// Interpreter (manifest name) of the main table: one that py-spy and Austin support.
    #[arg(long, default_value = "py313")]
    python: String,
    /// Interpreter (manifest name) of the Tachyon rows: 3.15 or later.
    #[arg(long, default_value = "py315")]
    tachyon_python: String,
}

/// Runs the benchmark.
pub fn run(args: &Args) -> Result<()> {
    let command = format!(
        "cargo xtask {}",
        std::env::args().skip(1).collect::<Vec<_>>().join(" ")
    );
    let manifest = Manifest::load()?;
    let main = manifest.interpreter(&args.python)?.clone();
    let tachyon = manifest.interpreter(&args.tachyon_python)?.clone();
    if tachyon.minor() < (3, 15) {
        bail!(
            "{} is Python {}: Tachyon (`-m profiling.sampling`) needs 3.15",
            tachyon.name,
            tachyon.version
        );
    }
    for interp in [&main, &tachyon] {
        let exe = interp.host_path(&interp.exe);
        if !exe.exists() {
            bail!(
                "{} ({}) is missing: run `cargo xtask pythons`",
                interp.name,
                exe.display()
            );
        }
    }
    let peer = |name: &str| {
        manifest.peer(name).map(Path::to_path_buf).with_context(|| {
            format!("the peer profiler {name} is missing: run `cargo xtask pythons`")
        })
    };
    let agent = match &args.agent {
        Some(path) => path.clone(),
        None => {
            test::cargo(&["build", "--release", "--quiet", "-p", "pyagent"])?;
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/pyagent")
        }
    };
    if !agent.exists() {
        bail!("the pyagent binary {} does not exist", agent.display());
    }
    let tools = Tools {
        agent,
        py_spy: peer("py-spy")?,
        austin: peer("austin")?,
    };
    for name in [
        "compare_slowdown.py",
        "compare_accuracy.py",
        "compare_deep.py",
        "compare_toggle.py",
    ] {
        if !script(name).exists() {
            bail!("{} is missing", script(name).display());
        }
    }
    let mut plan = Plan::new(args.quick, args.reps, args.window, args.slowdown_only);
    plan.toggled_only = args.toggled_only;
    if let Some(s) = args.toggle_seconds {
        plan.toggle_s = s.max(0.0);
    }
    if let Some(w) = args.toggle_window {
        if !(0.01..=5.0).contains(&w) {
            bail!("--toggle-window {w}: give 0.01 to 5 seconds");
        }
        plan.toggle_window_s = w;
    }
    let mut suites = [
        Suite {
            interp: main,
            profilers: vec![
                Profiler::PyagentEbpf,
                Profiler::PyagentUserspace,
                Profiler::PySpy,
                Profiler::PySpyNonblocking,
                Profiler::Austin,
                Profiler::AustinCpu,
            ],
        },
        Suite {
            interp: tachyon,
            profilers: vec![
                Profiler::PyagentEbpf,
                Profiler::PyagentUserspace,
                Profiler::Tachyon,
            ],
        },
    ];
    if !args.profilers.is_empty() {
        for s in &mut suites {
            s.profilers.retain(|p| args.profilers.contains(p));
        }
    }
    if suites.iter().all(|s| s.profilers.is_empty()) {
        bail!(
            "--profilers: none of them runs here (Tachyon runs on 3.15 only, Austin and py-spy on 3.13 only)"
        );
    }
    let machine = report::Machine::probe(command);
    eprintln!(
        "compare: {} mode, {} reps; {}",
        if args.quick { "quick" } else { "full" },
        plan.reps,
        machine.load_before
    );
    let results = measure::run(&tools, &suites, &plan)?;
    let out_dir = args
        .out_dir
        .clone()
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench"));
    let machine = machine.finish();
    report::write(&out_dir, &machine, &tools, &suites, &plan, &results)?;
    let failed = results.failures();
    if failed > 0 {
        bail!("{failed} measurements failed (see the report)");
    }
    Ok(())
}
