//! The `pyagent` binary: flags in, one-line errors out.

mod all_python;
mod cli;
mod summary;
mod top;

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};
use pyagent::aggregate::ProfileWindow;
use pyagent::discovery::privileges::{Privileges, Shortfall};
use pyagent::discovery::{locate_runtime, DiscoveryError};
use pyagent::export;
use pyagent::offsets::AsyncioUnsupported;
use pyagent::sampler::bpf::ProgramBuild;
use pyagent::unwind::UnwindOptions;

use all_python::{all_python, service, service_config};
use cli::{
    debug_dir_flags, AsyncModeArg, Cli, Command, DumpArgs, FrameArgs, RecordArgs, SpansArgs,
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
    if args.greenlets {
        return dump_greenlets(args);
    }
    // `--native`: the process is stopped around the read, and its native frames merged in.
    let debug_dirs = args.frames.native.then(DebugDirs::default);
    let snapshot =
        pyagent::dump::snapshot(args.pid, unwind_options(&args.frames), debug_dirs.as_ref())?;
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

/// `dump --greenlets`: every greenlet of the process, the parked ones with their frames.
fn dump_greenlets(args: &DumpArgs) -> Result<()> {
    let greenlets = pyagent::dump::snapshot_greenlets(args.pid, unwind_options(&args.frames))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &greenlets).context("writing the dump")?;
        writeln!(out)?;
    } else {
        pyagent::dump::write_greenlets(&greenlets, &mut out)?;
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

/// `record`: one process (and with `--subprocesses` its descendants) through the host
/// profiler, in whichever mode, into one file.
fn record(args: &RecordArgs) -> Result<()> {
    let needs_userspace = [
        (args.blocking, "--blocking"),
        (args.idle, "--idle"),
        (args.subprocesses, "--subprocesses"),
        (args.async_mode == AsyncModeArg::All, "--async-mode all"),
    ]
    .into_iter()
    .find_map(|(given, flag)| given.then_some(flag));
    let choice = SamplerChoice::new(args.mode, needs_userspace);
    let mode = choice.mode;
    if mode != Mode::Userspace {
        if args.blocking || args.idle || args.subprocesses {
            bail!("--blocking, --idle and --subprocesses need --mode userspace");
        }
        if args.async_mode == AsyncModeArg::All {
            // The program walks only the threads on a CPU; a waiting task is on no stack, and
            // reading every task at each tick is the userspace sampler's job.
            bail!("--async-mode all needs --mode userspace (the BPF program samples running threads only; waiting tasks are read at each tick by the userspace sampler)");
        }
    } else if args.off_cpu {
        bail!("--off-cpu needs --mode ebpf (the userspace sampler cannot see a thread block; --idle samples waiting threads instead)");
    }
    // Open the output first: a bad path should fail before anything else.
    let (output, format) = output_and_format(args)?;
    let existed = output.symlink_metadata().is_ok();
    let file =
        File::create(&output).with_context(|| format!("cannot create {}", output.display()))?;
    if let Err(e) = check_record_target(args) {
        // Nothing was recorded: no empty file of ours left behind (one that was there before,
        // such as /dev/null, is not ours to remove).
        if !existed {
            let _ = std::fs::remove_file(&output);
        }
        return Err(e);
    }
    let config = HostConfig {
        mode,
        rate_hz: args.rate,
        pids: Some(vec![args.pid]),
        unwind: UnwindOptions {
            async_mode: args.async_mode.into(),
            ..unwind_options(&args.frames)
        },
        native_stacks: args.frames.native,
        debug_dirs: record_debug_dirs(args),
        blocking: args.blocking,
        idle: args.idle,
        subprocesses: args.subprocesses,
        ..HostConfig::default()
    };
    let mut profiler = host_profiler(config, OffCpu::from_config(args.off_cpu, args.off_cpu))?;
    eprintln!("{}", choice.line(&profiler));
    install_stop_handlers();
    let until = args.duration.map(|d| std::time::Instant::now() + d);
    let started = std::time::Instant::now();
    let tty = std::io::stderr().is_terminal();
    let mut last_progress = started;
    let mut scanned = false;
    profiler.run(&STOP, until, |p| {
        // Every process exited (with --subprocesses: the root too): stop, keeping the samples.
        let root_lives = args.subprocesses && pyagent::discovery::process_alive(args.pid);
        if scanned && p.pids().is_empty() && !root_lives {
            STOP.store(true, Ordering::Relaxed);
        }
        scanned = true;
        if tty && last_progress.elapsed() >= std::time::Duration::from_millis(250) {
            last_progress = std::time::Instant::now();
            eprint!(
                "\r{} samples in {:.1}s",
                p.stats().samples,
                started.elapsed().as_secs_f64()
            );
        }
    });
    if tty {
        eprintln!();
    }
    let mut window = merged_window(profiler.cut(), args.rate, args.off_cpu);
    let without_gil = keep_gil_holders(args, &mut window);
    let mut w = BufWriter::new(file);
    export::write(format, &window, &mut w)
        .with_context(|| format!("writing {}", output.display()))?;
    w.flush()
        .with_context(|| format!("writing {}", output.display()))?;
    let shown = summary::Shown {
        async_tasks: args.frames.async_tasks.then_some(args.async_mode),
        off_cpu: args.off_cpu,
        native: args.frames.native,
        threads_stopped: args.blocking || args.frames.native,
        without_gil,
        verbose: args.verbose,
    };
    for line in summary::record_lines(&profiler, &window, &output, &shown) {
        eprintln!("{line}");
    }
    if args.frames.native {
        print_symbol_sources();
    }
    Ok(())
}

/// The process `record` is asked for must be Python (unless it only launches Python children),
/// of a version and build that has what the flags ask for.
fn check_record_target(args: &RecordArgs) -> Result<()> {
    match locate_runtime(args.pid) {
        Ok(target) => {
            check_gil_filter(args, &target.offsets)?;
            if args.frames.async_tasks && target.offsets.coroutines.is_none() {
                return Err(AsyncioUnsupported(target.version()).into());
            }
        }
        Err(DiscoveryError::NotPython { .. }) if args.subprocesses => {
            tracing::info!(
                pid = args.pid,
                "not Python: following its Python subprocesses only"
            );
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// The windows of a recording as one profile: the process's, or with `--subprocesses` every
/// process's (each stack keeps its pid); an empty one when nothing was sampled.
fn merged_window(
    windows: Vec<(pyagent::profiler::ProcessInfo, ProfileWindow)>,
    rate: u32,
    off_cpu: bool,
) -> ProfileWindow {
    let mut windows = windows.into_iter().map(|(_, w)| w);
    let Some(mut window) = windows.next() else {
        let mut agg = pyagent::aggregate::Aggregator::new(1_000_000_000 / u64::from(rate.max(1)));
        if off_cpu {
            agg.trace_off_cpu();
        }
        return agg.cut();
    };
    for other in windows {
        window.merge(other);
    }
    window
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

/// Which sampler a one-process command (`record`, `top`) runs, and why.
#[derive(Debug, Clone, Copy)]
pub struct SamplerChoice {
    /// the mode asked of the host profiler
    pub mode: Mode,
    /// `--mode` as given (`None`: chosen here)
    given: Option<cli::ModeArg>,
    /// the flag that needs the userspace sampler, when one chose it
    needed_by: Option<&'static str>,
}

impl SamplerChoice {
    /// `--mode` as given; without it eBPF where it loads (its stacks are each one instant's,
    /// read in the thread's own interrupt), unless `needed_by` names a flag only the userspace
    /// sampler has.
    pub fn new(given: Option<cli::ModeArg>, needed_by: Option<&'static str>) -> SamplerChoice {
        let mode = match (given, needed_by) {
            (Some(m), _) => m.into(),
            (None, Some(_)) => Mode::Userspace,
            (None, None) => Mode::Auto,
        };
        SamplerChoice {
            mode,
            given,
            needed_by,
        }
    }

    /// The run's first line: which sampler reads the stacks, and for the userspace one why.
    pub fn line(&self, profiler: &HostProfiler) -> String {
        if profiler.bpf().is_some() {
            return "pyagent: eBPF sampler: each stack is read at one instant, in its thread's own interrupt".to_string();
        }
        let why = match (self.given, self.needed_by, profiler.fallback_reason()) {
            (Some(_), _, _) => "--mode userspace".to_string(),
            (None, Some(flag), _) => format!("{flag} needs it"),
            (None, None, Some(why)) => format!("the eBPF sampler is unavailable: {why}"),
            (None, None, None) => "the eBPF sampler is unavailable".to_string(),
        };
        format!("pyagent: userspace sampler ({why}): a stack the thread changed while it was read keeps only its proven frames, under [stack moved while read]")
    }
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

/// The host profiler for `config`, its knobs from the environment added, saying in one line
/// each what it falls back from.
fn host_profiler(config: HostConfig, off_cpu: OffCpu) -> Result<HostProfiler> {
    let native_stacks = config.native_stacks;
    let config = HostConfig {
        thread_search_max: thread_search_max()?,
        bpf_build: bpf_build()?,
        off_cpu: off_cpu != OffCpu::Off,
        ..config
    };
    let profiler = HostProfiler::new(config)?;
    if native_stacks && profiler.fallback_reason().is_some() {
        eprintln!("pyagent: native stacks need the eBPF sampler: Python frames only, with <native> where C called back into Python");
    }
    if let Some(why) = profiler.fallback_reason() {
        if off_cpu == OffCpu::Required {
            bail!("--off-cpu needs the eBPF sampler, which is unavailable: {why}");
        }
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
            Some(Command::Record(a)) => record(a),
            Some(Command::Top(a)) => {
                install_stop_handlers();
                top::run(
                    a.pid,
                    top::TopOptions {
                        rate_hz: a.rate,
                        sampler: SamplerChoice::new(a.mode, a.idle.then_some("--idle")),
                        idle: a.idle,
                        rows: a.rows,
                        iterations: a.iterations,
                        cumulative: a.cumulative,
                    },
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
