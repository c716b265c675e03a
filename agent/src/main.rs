//! The `pyagent` binary: flags in, one-line errors out.

mod all_python;
mod cli;
mod top;

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};
use pyagent::aggregate::{Aggregator, ProfileWindow};
use pyagent::discovery::locate_runtime;
use pyagent::discovery::privileges::{Privileges, Shortfall};
use pyagent::export;
use pyagent::offsets::AsyncioUnsupported;
use pyagent::sampler::bpf::ProgramBuild;
use pyagent::sampler::tick::TickSource;
use pyagent::sampler::userspace::{SamplerStats, UserspaceConfig, UserspaceSampler};
use pyagent::unwind::UnwindOptions;

use all_python::{all_python, service, service_config};
use cli::{
    debug_dir_flags, AsyncModeArg, Cli, Command, DumpArgs, FrameArgs, ModeArg, RecordArgs,
    SpansArgs,
};
use pyagent::config::{DebugDirs, Mode};
use pyagent::profiler::{HostConfig, HostProfiler};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn install_stop_handlers() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
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
        read_attempts: f.read_attempts,
        keep_moved_top: !f.verified_stacks_only,
        async_tasks: f.async_tasks,
        ..UnwindOptions::default()
    }
}

fn dump(args: &DumpArgs) -> Result<()> {
    if args.frames.async_tasks {
        return dump_tasks(args);
    }
    let snapshot = pyagent::dump::snapshot(args.pid, unwind_options(&args.frames))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &snapshot).context("writing the dump")?;
        writeln!(out)?;
    } else {
        pyagent::dump::write_text(&snapshot, &mut out)?;
    }
    Ok(())
}

/// `dump --async`: every asyncio task of the process, as a tree of who awaits whom.
fn dump_tasks(args: &DumpArgs) -> Result<()> {
    let tasks = pyagent::dump::snapshot_tasks(args.pid, unwind_options(&args.frames))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &tasks).context("writing the dump")?;
        writeln!(out)?;
    } else {
        pyagent::dump::write_task_tree(&tasks, &mut out)?;
    }
    Ok(())
}

/// `pyagent spans FILE`: the profile's time by span (or thread, or service), split by where it
/// went.
fn spans(args: &SpansArgs) -> Result<()> {
    use pyagent::report::{read_profile, render, spans::summarize};
    let file = &args.file;
    let named = || file.display().to_string();
    let profile = read_profile(file).with_context(named)?;
    let summary =
        summarize(&profile, args.by.map(Into::into), &file_stem(file)).with_context(named)?;
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        render::write_json(&summary, file, args.top, &mut out)
    } else {
        render::write_text(&summary, file, args.top, &mut out)
    };
    match written {
        // `pyagent spans FILE | head`: the reader has what it wanted.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing the report"),
    }
}

/// A profile's file name without its pprof extension: `web-1234.pb.gz` → `web-1234`.
fn file_stem(file: &std::path::Path) -> String {
    let name = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    [".pb.gz", ".pb", ".pprof", ".gz"]
        .iter()
        .find_map(|ext| name.strip_suffix(ext).filter(|s| !s.is_empty()))
        .map_or(name.clone(), str::to_owned)
}

fn record(args: &RecordArgs) -> Result<()> {
    if args.off_cpu {
        bail!("--off-cpu needs --mode ebpf (the userspace sampler cannot see a thread block; --idle samples waiting threads instead)");
    }
    let config = UserspaceConfig {
        rate_hz: args.rate,
        duration: args.duration,
        subprocesses: args.subprocesses,
        blocking: args.blocking,
        idle: args.idle,
        native_stacks: args.frames.native,
        debug_dirs: record_debug_dirs(args),
        unwind: UnwindOptions {
            async_mode: args.async_mode.into(),
            ..unwind_options(&args.frames)
        },
    };
    // Open the output first: a bad path should fail before sampling, not after.
    let (output, format) = output_and_format(args)?;
    let file =
        File::create(&output).with_context(|| format!("cannot create {}", output.display()))?;
    let mut sampler = UserspaceSampler::new(&[args.pid], config)?;
    let mut agg = Aggregator::new(1_000_000_000 / args.rate as u64);
    if let Some(u) = sampler.unwinder(args.pid) {
        check_gil_filter(args, &u.target().offsets)?;
        if args.frames.async_tasks && u.target().offsets.coroutines.is_none() {
            return Err(AsyncioUnsupported(u.target().version()).into());
        }
        agg.set_label("python_version", u.target().version().to_string());
    }
    install_stop_handlers();
    let tty = std::io::stderr().is_terminal();
    sampler.run(&mut agg, &STOP, |stats, elapsed| {
        if tty {
            eprint!(
                "\r{} samples in {:.1}s ({} failed)",
                stats.samples,
                elapsed.as_secs_f64(),
                stats.failed
            );
            // Threads without a stack are counted in the summary at the end.
        }
    });
    if tty {
        eprintln!();
    }
    let stats = sampler.stats();
    let mut window = agg.cut();
    let without_gil = keep_gil_holders(args, &mut window);
    let mut w = BufWriter::new(file);
    export::write(format, &window, &mut w)
        .with_context(|| format!("writing {}", output.display()))?;
    w.flush()
        .with_context(|| format!("writing {}", output.display()))?;
    let u = sampler.unwind_stats();
    let mut summary = format!(
        "pyagent: wrote {} ({} samples, {} stacks, {} failed, {} lagged ticks, {} sampling ticks, {} thread samples without a stack: {}, {} re-reads, {} unverified stacks, {} frames named after they returned",
        output.display(),
        window.total_samples(),
        window.counts.len(),
        stats.failed,
        stats.lagged,
        stats.ticks,
        u.lost.total(),
        u.lost.summary(),
        u.rereads,
        u.unverified,
        u.popped_frames_named,
    );
    if args.frames.async_tasks {
        summary += &format!(
            ", {} samples in asyncio tasks, {} not attributed to a task",
            u.task_samples, u.task_unattributed
        );
        if args.async_mode == AsyncModeArg::All {
            summary += &format!(", {} samples of waiting tasks", u.task_waiting_samples);
        }
        if u.task_read_errors > 0 {
            summary += &format!(
                ", {} task reads that made no sense or changed under the read",
                u.task_read_errors
            );
        }
    }
    if let Some(n) = without_gil {
        summary += &format!(", {n} samples left out by --gil");
    }
    summary += &tick_summary(&stats);
    if sampler.frame_cache_used() {
        summary += &format!(
            ", frame cache {}/{}/{} full/partial/miss",
            u.cache_full_hits, u.cache_partial_hits, u.cache_misses
        );
    }
    if args.blocking || args.frames.native {
        let s = stats.seize;
        summary += &format!(
            ", threads not stopped: {} denied (EPERM), {} gone (ESRCH), {} failed",
            s.skipped_denied, s.skipped_gone, s.failed
        );
    }
    eprintln!("{summary})");
    if args.frames.native {
        let n = sampler.native_stats();
        eprintln!(
            "pyagent: native stacks (each thread stopped while read): {} merged whole, {} cut above the stack's bottom, {} mismatched (Python frames kept alone), {} not copied; {} frames outside every mapped object",
            n.merged, n.cut, n.mismatch, n.not_copied, n.unmapped_frames
        );
        print_symbol_sources();
    }
    Ok(())
}

/// `, ticks from ...`: what woke the sampler (a perf event on its CPU, or sleeping).
fn tick_summary(stats: &SamplerStats) -> String {
    let t = stats.tick;
    match stats.tick_source {
        Some(TickSource::PerfEvent) => format!(
            ", ticks from a cpu-clock perf event: {} from the event, {} from deadlines (the event throttled {} times, or late), {} moves to another CPU",
            t.event_ticks, t.deadline_ticks, t.throttles, t.moves
        ),
        Some(TickSource::Sleep) if t.event_ticks > 0 => format!(
            ", ticks from a cpu-clock perf event ({} from the event), then from sleeping (the event failed)",
            t.event_ticks
        ),
        Some(TickSource::Sleep) => ", ticks from sleeping".to_string(),
        None => String::new(),
    }
}

/// `pyagent: native symbols: ...`: where the names of the native objects came from.
fn print_symbol_sources() {
    eprintln!(
        "pyagent: native symbols: {}",
        pyagent::symbolize::native::symbol_source_stats()
    );
}

/// `record --debug-dir`, or the default directory.
fn record_debug_dirs(args: &RecordArgs) -> DebugDirs {
    debug_dir_flags(&args.debug_dirs).map_or_else(DebugDirs::default, DebugDirs::new)
}

/// The format `record` writes: `-f`, else the one the output's extension names, else pprof. A
/// `-f` that contradicts the extension (`-f pprof -o out.svg`) is refused rather than writing a
/// file its name lies about.
fn output_and_format(args: &RecordArgs) -> Result<(std::path::PathBuf, export::Format)> {
    let Some(output) = args.output.clone() else {
        // Like py-spy: a name of its own in the current directory, never an old profile's.
        let format = args
            .format
            .map_or(export::Format::Pprof, export::Format::from);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let name = format!("pyagent-{}-{now}.{}", args.pid, format.extension());
        return Ok((std::path::PathBuf::from(name), format));
    };
    let named = export::Format::from_extension(&output);
    let format = match (args.format.map(export::Format::from), named) {
        (Some(given), Some(named)) if given != named => bail!(
            "-f {given} but {} names a {named} file: drop -f, or name the file for {given} (.{})",
            output.display(),
            given.extension()
        ),
        (Some(given), _) => given,
        (None, named) => named.unwrap_or(export::Format::Pprof),
    };
    Ok((output, format))
}

/// `record --gil` on a free-threaded build would write an empty profile: there is no GIL.
fn check_gil_filter(args: &RecordArgs, offsets: &pyagent::offsets::Offsets) -> Result<()> {
    if args.gil && offsets.free_threaded {
        bail!(
            "--gil: process {} runs a free-threaded build, which has no GIL (record without --gil; samples carry no gil label there)",
            args.pid
        );
    }
    Ok(())
}

/// With `record --gil`, leaves out of `window` the samples of threads that did not hold the
/// GIL and returns how many; `None` without `--gil`.
fn keep_gil_holders(args: &RecordArgs, window: &mut ProfileWindow) -> Option<u64> {
    args.gil.then(|| window.keep_gil_holders())
}

/// Says at start, one `pyagent: warning:` line each, what keeps this run from reading
/// processes; fails when nothing could be read at all.
fn privilege_shortfalls() -> Result<Vec<Shortfall>> {
    let lacks = Privileges::current().shortfalls();
    if let Some(fatal) = lacks.iter().find(|s| s.prevents_profiling()) {
        bail!("{fatal}");
    }
    for lack in &lacks {
        eprintln!("pyagent: warning: {lack}");
    }
    Ok(lacks)
}

/// Off-CPU profiling as a run asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OffCpu {
    /// Not asked for.
    Off,
    /// Asked for by the configuration: on-CPU profiling goes on without it, with a warning.
    IfAvailable,
    /// Asked for by `--off-cpu`: the run fails without it.
    Required,
}

impl OffCpu {
    /// From the configured setting and whether the `--off-cpu` flag gave it.
    fn from_config(configured: bool, flag: bool) -> OffCpu {
        match (configured, flag) {
            (_, true) => OffCpu::Required,
            (true, false) => OffCpu::IfAvailable,
            (false, false) => OffCpu::Off,
        }
    }
}

fn host_profiler(
    mode: Mode,
    rate: u32,
    pids: Option<Vec<u32>>,
    frames: &FrameArgs,
    off_cpu: OffCpu,
    native_stacks: bool,
    debug_dirs: DebugDirs,
) -> Result<HostProfiler> {
    let config = HostConfig {
        mode,
        rate_hz: rate,
        pids,
        unwind: unwind_options(frames),
        thread_search_max: thread_search_max()?,
        bpf_build: bpf_build()?,
        off_cpu: off_cpu != OffCpu::Off,
        native_stacks,
        debug_dirs,
        ..HostConfig::default()
    };
    let profiler = HostProfiler::new(config)?;
    if native_stacks && profiler.fallback_reason().is_some() {
        eprintln!("pyagent: native stacks need the eBPF sampler: Python frames only, with <native> where C called back into Python");
    }
    if let Some(why) = profiler.fallback_reason() {
        if off_cpu == OffCpu::Required {
            bail!("--off-cpu needs the eBPF sampler, which is unavailable: {why}");
        }
        eprintln!("pyagent: eBPF sampler unavailable ({why}); using the userspace sampler");
        if off_cpu == OffCpu::IfAvailable {
            eprintln!("pyagent: off_cpu needs the eBPF sampler: profiling on-CPU time only");
        }
    }
    for note in profiler.kernel_notes() {
        eprintln!("pyagent: {note}");
    }
    if let Some(why) = profiler.off_cpu_unavailable() {
        eprintln!("pyagent: off-CPU profiling unavailable ({why}); profiling on-CPU time only");
    }
    Ok(profiler)
}

/// `PYAGENT_THREAD_SEARCH_MAX` (eBPF, for measuring): how many thread states the program
/// searches for a thread started since the last refresh; 0 turns the search off.
fn thread_search_max() -> Result<u32> {
    const VAR: &str = "PYAGENT_THREAD_SEARCH_MAX";
    match std::env::var(VAR) {
        Ok(v) => match v.trim().parse::<u32>() {
            Ok(n) if n <= common::MAX_FRAMES => Ok(n),
            _ => bail!("{VAR}: expected a number of thread states in 0..=1024, got {v:?}"),
        },
        Err(_) => Ok(common::THREAD_SEARCH_MAX),
    }
}

/// `PYAGENT_BPF_BUILD` (eBPF, for testing): `default` or `portable` loads that build of the
/// program whatever the kernel's helpers allow.
fn bpf_build() -> Result<Option<ProgramBuild>> {
    const VAR: &str = "PYAGENT_BPF_BUILD";
    match std::env::var(VAR) {
        Ok(v) => match v.trim() {
            "default" => Ok(Some(ProgramBuild::Default)),
            "portable" => Ok(Some(ProgramBuild::Portable)),
            _ => bail!("{VAR}: expected `default` or `portable`, got {v:?}"),
        },
        Err(_) => Ok(None),
    }
}

fn record_ebpf(args: &RecordArgs) -> Result<()> {
    if args.blocking || args.idle || args.subprocesses {
        bail!("--blocking, --idle and --subprocesses need --mode userspace");
    }
    if args.async_mode == AsyncModeArg::All {
        // The program walks only the threads on a CPU; a waiting task is on no stack, and
        // reading every task at each tick is the userspace sampler's job.
        bail!("--async-mode all needs --mode userspace (the BPF program samples running threads only; waiting tasks are read at each tick by the userspace sampler)");
    }
    let target = locate_runtime(args.pid)?;
    check_gil_filter(args, &target.offsets)?;
    if args.frames.async_tasks && target.offsets.coroutines.is_none() {
        return Err(AsyncioUnsupported(target.version()).into());
    }
    let (output, format) = output_and_format(args)?;
    let file =
        File::create(&output).with_context(|| format!("cannot create {}", output.display()))?;
    let mut profiler = host_profiler(
        args.mode.into(),
        args.rate,
        Some(vec![args.pid]),
        &args.frames,
        OffCpu::from_config(args.off_cpu, args.off_cpu),
        args.frames.native,
        record_debug_dirs(args),
    )?;
    install_stop_handlers();
    let until = args.duration.map(|d| std::time::Instant::now() + d);
    let pid = args.pid;
    let mut scanned = false;
    profiler.run(&STOP, until, |p| {
        // The target exited: stop (its samples are kept).
        if scanned && p.pids().is_empty() {
            STOP.store(true, Ordering::Relaxed);
        }
        scanned = true;
    });
    let windows = profiler.cut();
    let window = windows
        .into_iter()
        .find(|(i, _)| i.pid == pid)
        .map(|(_, w)| w);
    let mut window = window.unwrap_or_else(|| {
        let mut agg = pyagent::aggregate::Aggregator::new(1_000_000_000 / args.rate as u64);
        if args.off_cpu {
            agg.trace_off_cpu();
        }
        agg.cut()
    });
    let without_gil = keep_gil_holders(args, &mut window);
    let mut w = BufWriter::new(file);
    export::write(format, &window, &mut w)
        .with_context(|| format!("writing {}", output.display()))?;
    w.flush()?;
    let s = profiler.stats();
    let (cache_hits, cache_misses) = profiler
        .cache_stats()
        .get("frame")
        .copied()
        .unwrap_or((0, 0));
    let (repeated, resolved) = profiler
        .cache_stats()
        .get("record")
        .copied()
        .unwrap_or((0, 0));
    let bpf_counter = |c| profiler.bpf().and_then(|b| b.counter(c).ok()).unwrap_or(0);
    let anchor_hits = bpf_counter(common::Counter::AnchorHit);
    let threads_found = bpf_counter(common::Counter::ThreadFound);
    eprintln!(
        "pyagent: {} mode, wrote {} ({} samples, {} stacks, {}; BPF stopped at the 3.15 anchor {} times, found {} new threads' states itself, frame cache {} hits / {} misses / {} walks past its bounds, walked whole by BPF / {} stored stacks dropped because an anchor write raced the thread; {} records repeated their thread's last stack below the top frame, {} resolved whole; {} thread lists read, {} thread-exit notices)",
        profiler.mode_name(),
        output.display(),
        window.total_samples(),
        window.counts.len(),
        s.dropped_summary(),
        anchor_hits,
        threads_found,
        cache_hits,
        cache_misses,
        profiler.frame_cache_bypassed(),
        profiler.unwind_stats().anchor_write_races,
        repeated,
        resolved,
        s.thread_list_reads,
        s.thread_exit_notices
    );
    if let Some(n) = without_gil {
        eprintln!("pyagent: --gil left out {n} samples of threads that did not hold the GIL");
    }
    if args.frames.async_tasks {
        let u = profiler.unwind_stats();
        eprintln!(
            "pyagent: {} samples in asyncio tasks, {} not attributed to a task",
            u.task_samples, u.task_unattributed
        );
    }
    if args.off_cpu {
        print_off_cpu_summary(&profiler);
    }
    if args.frames.native && profiler.bpf().is_some() {
        eprintln!(
            "pyagent: native stacks: {} merged whole, {} cut above the stack's bottom, {} mismatched (Python frames kept alone); {} stack copies cut at an unreadable page; {} frames outside every mapped object; {:.1} ms of agent CPU resolving {} records (the first parse of each object and of kallsyms included)",
            s.native_merged,
            s.native_cut,
            s.native_mismatch,
            bpf_counter(common::Counter::NativeStackShort),
            s.native_unmapped,
            s.drain_cpu_ns as f64 / 1e6,
            s.records
        );
        print_symbol_sources();
    }
    Ok(())
}

/// `pyagent: off-CPU: ...`: waits recorded, context switches seen and their mean cost.
fn print_off_cpu_summary(profiler: &HostProfiler) {
    let Some(bpf) = profiler.bpf() else { return };
    let counter = |c| bpf.counter(c).unwrap_or(0);
    let switch_cost = bpf
        .off_cpu_run_stats()
        .filter(|(_, runs)| *runs > 0)
        .map_or("unknown".to_string(), |(ns, runs)| {
            format!("{:.0} ns", ns as f64 / runs as f64)
        });
    eprintln!(
        "pyagent: off-CPU: {} waits recorded, {} more already under way at attach, {} repeats timed only, {} context switches seen at {switch_cost} each",
        counter(common::Counter::OffCpuWalks),
        profiler.stats().blocked_at_attach,
        counter(common::Counter::OffCpuCarried),
        counter(common::Counter::Switches)
    );
}

fn init_logging(filter: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            pyagent::config::values::parse_log_filter(filter).unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        // Colour only for people: journald, files and pipes get plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn main() {
    let cli = Cli::parse_args();
    let service_mode = cli.command.is_none() && cli.host.all_python && cli.host.duration.is_none();
    let result = if service_mode {
        // The config may name the log filter, so it is read before logging starts.
        service_config(&cli.host, cli.log.as_deref()).and_then(|config| {
            init_logging(&config.log);
            service(&config, &cli.host.frames)
        })
    } else {
        init_logging(cli.log.as_deref().unwrap_or("warn"));
        match &cli.command {
            Some(Command::Dump(a)) => dump(a),
            Some(Command::Record(a)) if a.mode != ModeArg::Userspace => record_ebpf(a),
            Some(Command::Record(a)) => record(a),
            Some(Command::Top(a)) => {
                install_stop_handlers();
                top::run(
                    a.pid,
                    a.rate,
                    a.idle,
                    a.rows,
                    a.iterations,
                    unwind_options(&a.frames),
                    &STOP,
                )
            }
            Some(Command::Spans(a)) => spans(a),
            None if cli.host.all_python => all_python(&cli.host),
            None => Err(anyhow::anyhow!(
                "nothing to do: give --all-python or a subcommand (see --help)"
            )),
        }
    };
    if let Err(e) = result {
        // One line: the error and its causes.
        let mut msg = format!("pyagent: {e}");
        for cause in e.chain().skip(1) {
            msg.push_str(&format!(": {cause}"));
        }
        eprintln!("{msg}");
        // `spans` only reads its file: whatever fails is bad input, which exits with 2.
        let bad_input = matches!(cli.command, Some(Command::Spans(_)));
        std::process::exit(if bad_input { 2 } else { 1 });
    }
}
