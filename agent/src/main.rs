//! The `pyagent` binary: flags in, one-line errors out.

mod cli;

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use pyagent::aggregate::Aggregator;
use pyagent::discovery::locate_runtime;
use pyagent::export;
use pyagent::sampler::userspace::{UserspaceConfig, UserspaceSampler};
use pyagent::unwind::{UnwindOptions, Unwinder};

use cli::{Cli, Command, DumpArgs, FrameArgs, RecordArgs};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn install_stop_handlers() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(SigHandler::Handler(on_signal), SaFlags::SA_RESTART, SigSet::empty());
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        let _ = unsafe { sigaction(sig, &action) };
    }
}

fn unwind_options(f: &FrameArgs) -> UnwindOptions {
    UnwindOptions {
        native: f.native,
        gc: !f.no_gc,
        frame_cache: !f.no_frame_cache,
        ..UnwindOptions::default()
    }
}

fn dump(args: &DumpArgs) -> Result<()> {
    let target = locate_runtime(args.pid)?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "Process {} (CPython {}{}, {} {})",
        target.pid,
        target.version(),
        if target.offsets.free_threaded { ", free-threaded" } else { "" },
        if target.shared_libpython { "shared libpython" } else { "runtime in" },
        target.object_path.display()
    )?;
    let mut unwinder = Unwinder::new(target, unwind_options(&args.frames));
    let samples = unwinder.sample()?;
    for s in samples {
        let gil = match s.holds_gil {
            Some(true) => " (holds the GIL)",
            _ => "",
        };
        let name = s.thread_name.as_deref().map(|n| format!(" \"{n}\"")).unwrap_or_default();
        writeln!(out, "\nThread {}{}{}", s.tid, name, gil)?;
        if s.frames.is_empty() {
            writeln!(out, "    (no Python frames)")?;
        }
        for f in &s.frames {
            writeln!(out, "    {f}")?;
        }
        if s.truncated {
            writeln!(out, "    ... (truncated)")?;
        }
    }
    Ok(())
}

fn record(args: &RecordArgs) -> Result<()> {
    if args.rate == 0 || args.rate > 10_000 {
        bail!("--rate must be between 1 and 10000 samples per second");
    }
    let config = UserspaceConfig {
        rate_hz: args.rate,
        duration: args.duration.map(Duration::from_secs_f64),
        subprocesses: args.subprocesses,
        blocking: args.blocking,
        idle: args.idle,
        unwind: unwind_options(&args.frames),
    };
    // Open the output first: a bad path should fail before sampling, not after.
    let file = File::create(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))?;
    let mut sampler = UserspaceSampler::new(&[args.pid], config)?;
    let mut agg = Aggregator::new(1_000_000_000 / args.rate as u64);
    if let Some(u) = sampler.unwinder(args.pid) {
        agg.set_label("python_version", u.target().version().to_string());
    }
    install_stop_handlers();
    let tty = std::io::stderr().is_terminal();
    sampler.run(&mut agg, &STOP, |stats, elapsed| {
        if tty {
            eprint!("\r{} samples in {:.1}s ({} failed)", stats.samples, elapsed.as_secs_f64(), stats.failed);
        }
    });
    if tty {
        eprintln!();
    }
    let stats = sampler.stats();
    let window = agg.cut();
    let mut w = BufWriter::new(file);
    export::write(args.format.into(), &window, &mut w)
        .with_context(|| format!("writing {}", args.output.display()))?;
    w.flush().with_context(|| format!("writing {}", args.output.display()))?;
    let u = sampler.unwind_stats();
    eprintln!(
        "pyagent: wrote {} ({} samples, {} stacks, {} failed, {} lagged ticks, frame cache {}/{}/{} full/partial/miss)",
        args.output.display(),
        stats.samples,
        window.counts.len(),
        stats.failed,
        stats.lagged,
        u.cache_full_hits,
        u.cache_partial_hits,
        u.cache_misses
    );
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&cli.log).unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let result = match &cli.command {
        Command::Dump(a) => dump(a),
        Command::Record(a) => record(a),
    };
    if let Err(e) = result {
        // One line: the error and its causes.
        let mut msg = format!("pyagent: {e}");
        for cause in e.chain().skip(1) {
            msg.push_str(&format!(": {cause}"));
        }
        eprintln!("{msg}");
        std::process::exit(1);
    }
}
