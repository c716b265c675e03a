//! The table of depths: every sampler on `deep.py` targets of each interpreter, depth and kind,
//! then the asyncio row ([`super::asyncio_row`]).

use std::path::Path;

use anyhow::{bail, Result};
use pyagent::unwind::{ThreadSample, UnwindOptions};

use super::args::Args;
use super::asyncio_row;
use super::cell::{ratio, Cell};
use super::samplers::{ours_checked, print_heading, py_spy, tachyon_with, READY};
use crate::bench::util::{self, Interpreter, Manifest, Proc, Table};

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
        asyncio_row::run(&manifest, seconds, peer_seconds)?;
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

/// Tachyon attached to the target, flat out, in the target's chroot.
fn tachyon(py: &Interpreter, target: &Proc, depth: usize, secs: f64) -> Cell {
    // `tid:N;outer;...;inner COUNT`
    let right = |stack: &str| stack.split(';').filter(|f| !f.starts_with("tid:")).count() == depth;
    tachyon_with(py, target, &["-a"], right, secs)
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
