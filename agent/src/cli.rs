//! Command-line flags (clap). Only this file knows about clap; it turns flags into the
//! library's configuration types.
//!
//! Values are read by the library's parsers ([`pyagent::config::values`]), the ones the config
//! file and the `PYAGENT_*` variables use: a duration flag takes `30`, `1.5`, `500ms` or `2m` the
//! way `interval = ...` does, and a rate is checked against the one range every sampler accepts.

use std::path::PathBuf;
use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use pyagent::config::values::{
    parse_cpu_budget, parse_duration, parse_rate_hz, parse_socket_addr, parse_whole_number,
    ValueError,
};
use pyagent::config::CpuBudget;
use pyagent::export::Format;

/// pyagent: a sampling profiler for CPython 3.6–3.15.
///
/// `pyagent --all-python` profiles every CPython process on the host (eBPF, or the userspace
/// sampler where eBPF is unavailable); `dump`, `record` and `top` work on one process, `spans`
/// on a profile written before.
#[derive(Debug, Parser)]
#[command(name = "pyagent", version, about)]
pub struct Cli {
    /// What to do (or `--all-python`).
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub host: HostArgs,
    /// Log filter (tracing `EnvFilter` syntax), e.g. `info` or `pyagent=debug` [default: the
    /// service logs at `info` (or the config file's `log`), the one-shot commands at `warn`].
    #[arg(long, global = true, env = "PYAGENT_LOG")]
    pub log: Option<String>,
}

impl Cli {
    /// The process's arguments. A value that does not parse (`--interval ten`, `--rate 0`) is one
    /// line on stderr and exit status 1, like all bad input; other usage errors and `--help` are
    /// clap's own.
    pub fn parse_args() -> Cli {
        Cli::try_parse_from_args(std::env::args_os()).unwrap_or_else(|err| {
            match bad_value_line(&err) {
                Some(line) => {
                    eprintln!("pyagent: {line}");
                    std::process::exit(1);
                }
                None => err.exit(),
            }
        })
    }

    /// Parses `args`. The service's flags do not go with a subcommand (`pyagent --all-python
    /// record` is refused), but `--log`, which both take, goes before or after one: clap's
    /// `args_conflicts_with_subcommands` would refuse `pyagent --log debug record`, so the
    /// conflict is checked here, on the flags given on the command line.
    fn try_parse_from_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let mut command = Cli::command();
        let matches = command.try_get_matches_from_mut(args)?;
        if let Some((name, _)) = matches.subcommand() {
            let host = HostArgs::augment_args(clap::Command::new("host"));
            let given = host.get_arguments().find(|arg| {
                matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine)
            });
            if let Some(arg) = given {
                let flag = arg
                    .get_long()
                    .map_or_else(|| arg.get_id().to_string(), |long| format!("--{long}"));
                return Err(command.error(
                    ErrorKind::ArgumentConflict,
                    format!("the subcommand '{name}' cannot be used with '{flag}'"),
                ));
            }
        }
        Cli::from_arg_matches(&matches)
    }
}

/// `--interval: not a duration (...): "-5s"` for an error of a flag's value parser, else `None`.
fn bad_value_line(err: &clap::Error) -> Option<String> {
    if err.kind() != ErrorKind::ValueValidation {
        return None;
    }
    // "--interval <INTERVAL>": the flag without its placeholder.
    let flag = match err.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg.split_whitespace().next()?.to_owned(),
        _ => return None,
    };
    let reason = std::error::Error::source(err)?;
    if reason.is::<ValueError>() {
        // Our parsers' messages end with the value already.
        return Some(format!("{flag}: {reason}"));
    }
    match err.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(value)) => Some(format!("{flag}: {reason}: {value:?}")),
        _ => Some(format!("{flag}: {reason}")),
    }
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the current Python stack of every thread of a process.
    Dump(DumpArgs),
    /// Sample a process and write a profile.
    Record(RecordArgs),
    /// Live view of the functions a process spends its time in, refreshed every second.
    Top(TopArgs),
    /// Where each span's time went, in a pprof profile pyagent wrote: on CPU with or without
    /// the GIL, waiting for it, io, lock, sleep, other.
    Spans(SpansArgs),
}

/// `pyagent spans`
#[derive(Debug, Args)]
pub struct SpansArgs {
    /// A pprof profile written by pyagent (`record`, `--all-python`, the service), gzipped or
    /// not; with `--off-cpu` for the waits.
    pub file: PathBuf,
    /// How many groups to show, most wall time first (0: all).
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Print one JSON object (every part of each group, in seconds and as a share) instead of
    /// text.
    #[arg(long)]
    pub json: bool,
    /// What to group samples by [default: span when a sample has `trace_id` and `span_id`
    /// labels, else thread].
    #[arg(long, value_enum)]
    pub by: Option<GroupByArg>,
}

/// `spans --by`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GroupByArg {
    /// the `trace_id` and `span_id` labels (OpenTelemetry thread context); samples without
    /// them are only totalled
    Span,
    /// the sampled thread (`pid`, `thread_id`; `thread_name` shown)
    Thread,
    /// the `service_name` label of the service's profiles; a profile without it (`record`)
    /// is one service named after the file
    Service,
}

impl From<GroupByArg> for pyagent::report::spans::GroupBy {
    fn from(b: GroupByArg) -> Self {
        use pyagent::report::spans::GroupBy;
        match b {
            GroupByArg::Span => GroupBy::Span,
            GroupByArg::Thread => GroupBy::Thread,
            GroupByArg::Service => GroupBy::Service,
        }
    }
}

/// `pyagent top`
#[derive(Debug, Args)]
pub struct TopArgs {
    /// Process to watch.
    #[arg(long, short, value_parser = parse_whole_number::<u32>)]
    pub pid: u32,
    /// Samples per second (1 to 10000).
    #[arg(long, short, default_value_t = 100, value_parser = parse_rate_hz, allow_hyphen_values = true)]
    pub rate: u32,
    /// Also count threads that are not running on a CPU (the userspace sampler).
    #[arg(long)]
    pub idle: bool,
    /// Sampler backend [default: auto: eBPF where the kernel and privileges allow it, else the
    /// userspace sampler; `--idle` chooses `userspace`].
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// Stop after this many refreshes (default: until Ctrl-C or the process exits).
    #[arg(long)]
    pub iterations: Option<u64>,
    /// Rows shown.
    #[arg(long, default_value_t = 20)]
    pub rows: usize,
    /// Count samples since the start rather than in the last second (like py-spy top's
    /// cumulative view): a function that ran once keeps its row.
    #[arg(long)]
    pub cumulative: bool,
    #[command(flatten)]
    pub frames: FrameArgs,
}

/// Frame-rendering options shared by the commands.
#[derive(Debug, Args, Clone, Copy)]
pub struct FrameArgs {
    /// Native stacks: the native (C, C++, Rust) frames between and below the Python ones, and
    /// with the eBPF sampler the kernel frames at the leaf. `record` in userspace mode and `dump`
    /// stop each thread while they read it (ptrace); `top` and `--all-python --mode userspace`
    /// show `<native>` where Python code called into C that called back into Python.
    #[arg(long)]
    pub native: bool,
    /// Do not show `<GC>` where the garbage collector runs.
    #[arg(long)]
    pub no_gc: bool,
    /// Do not use CPython 3.15's frame cache (which writes `last_profiled_frame` in the target).
    #[arg(long)]
    pub no_frame_cache: bool,
    /// Reads of a thread's stack per sample while it changes under the read (1: read once, and
    /// count the thread as lost if the read was torn).
    #[arg(
        long,
        default_value_t = pyagent::unwind::UnwindOptions::default().read_attempts,
        value_parser = clap::value_parser!(u32).range(1..=100_000)
    )]
    pub read_attempts: u32,
    /// Userspace sampler: keep only stacks read whole at one instant, re-reading the others:
    /// stacks that change faster than a read (tight recursion) are under-sampled. By default a
    /// stack the thread changed while it was read keeps the frames a second read proved, from
    /// the bottom up, under `[stack moved while read]`.
    #[arg(long)]
    pub verified_stacks_only: bool,
    /// asyncio task-aware stacks (CPython 3.14+): a thread running a task shows the task's
    /// frames, `<task NAME>`, the tasks awaiting it up to the root task, then the event loop's
    /// frames, and samples get a `task_name` label; `dump --async` prints every task.
    #[arg(long = "async")]
    pub async_tasks: bool,
}

/// `pyagent dump`
#[derive(Debug, Args)]
pub struct DumpArgs {
    /// Process to inspect.
    #[arg(long, short, value_parser = parse_whole_number::<u32>)]
    pub pid: u32,
    /// Print the snapshot as one JSON object (threads, states, frames) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Every greenlet of the process (gevent, eventlet), found in the garbage collector's
    /// lists: the running ones, whose frames are their thread's stack, and the parked ones with
    /// the frames they wait in, which no thread's stack shows (CPython 3.11+, builds with a
    /// GIL, greenlet 3.x).
    #[arg(long, conflicts_with = "async_tasks")]
    pub greenlets: bool,
    #[command(flatten)]
    pub frames: FrameArgs,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// gzipped pprof protobuf (`go tool pprof`, Pyroscope, Parca)
    Pprof,
    /// collapsed stacks, one line per stack (flamegraph.pl, speedscope)
    Collapsed,
    /// an SVG flame graph
    Flamegraph,
    /// speedscope JSON (speedscope.app), one profile per thread
    Speedscope,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::Pprof => Format::Pprof,
            FormatArg::Collapsed => Format::Collapsed,
            FormatArg::Flamegraph => Format::Flamegraph,
            FormatArg::Speedscope => Format::Speedscope,
        }
    }
}

/// Sampler backends.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ModeArg {
    /// eBPF if it can be loaded, else the userspace sampler (saying why)
    Auto,
    /// eBPF only: fail if it cannot be loaded
    Ebpf,
    /// the userspace sampler only (process_vm_readv; no BPF privileges needed)
    Userspace,
}

impl From<ModeArg> for pyagent::profiler::Mode {
    fn from(m: ModeArg) -> Self {
        use pyagent::profiler::Mode;
        match m {
            ModeArg::Auto => Mode::Auto,
            ModeArg::Ebpf => Mode::Ebpf,
            ModeArg::Userspace => Mode::Userspace,
        }
    }
}

/// `pyagent --all-python`: host-wide profiling.
#[derive(Debug, Args)]
pub struct HostArgs {
    /// Profile every CPython process on the host, including ones started later.
    #[arg(long)]
    pub all_python: bool,
    /// Also profile the time threads spend blocked (eBPF only), as an `off_cpu` sample type
    /// with a `wait` label (io, sleep, lock, gil, other, cpu) [config: off_cpu].
    #[arg(long)]
    pub off_cpu: bool,
    /// How long to profile, in seconds (`30`, `1.5`) or with a unit (`500ms`, `2m`), then write
    /// one file per process into --output and exit. With a setting only the service uses
    /// (--pyroscope-url, --otlp-endpoint, --metrics-addr, --interval, ...), run the service for
    /// that long instead, uploads included, and stop as at SIGTERM. Without it, run as a service
    /// until SIGTERM, cutting a profile per process every --interval.
    #[arg(long, short, value_parser = parse_duration, allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    /// Service mode: TOML configuration file (flags override it, it overrides PYAGENT_* vars).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Service mode: profile length, in seconds (`10`) or with a unit (`10s`, `1m`) [default: 10s].
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true)]
    pub interval: Option<Duration>,
    /// Service mode: how much of one core profiling may cost, the agent and its BPF programs
    /// together (`1%`, `0.5%`, `off`); the sampling rate is lowered to stay within it and
    /// raised again, never above --rate, when there is room [default: 1%] [config: cpu_budget].
    #[arg(long, value_parser = parse_cpu_budget)]
    pub cpu_budget: Option<CpuBudget>,
    /// Service mode: report a thread blocked in one stack for this long as stalled, once per
    /// stall: a metric and a dump of its process next to the profiles (needs --off-cpu; `0`:
    /// never) [default: 30s] [config: stall_after].
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true)]
    pub stall_after: Option<Duration>,
    /// Service mode: address of the Prometheus /metrics endpoint [default: 127.0.0.1:9464].
    #[arg(long, value_parser = parse_socket_addr)]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Service mode: Grafana Pyroscope base URL to upload profiles to.
    #[arg(long)]
    pub pyroscope_url: Option<String>,
    /// Service mode: Pyroscope API, `push`, `ingest` or `otlp` (Pyroscope 1.20+) [default: push].
    #[arg(long)]
    pub pyroscope_api: Option<String>,
    /// Service mode: tenant (X-Scope-OrgID) for Pyroscope.
    #[arg(long)]
    pub pyroscope_tenant: Option<String>,
    /// Service mode: base URL of an OTLP receiver (OpenTelemetry Collector, e.g.
    /// http://collector:4318) to send OTLP profiles to [config: otlp.endpoint].
    #[arg(long)]
    pub otlp_endpoint: Option<String>,
    /// Samples per second (per CPU with eBPF; 1 to 10000) [default: 99 with --duration, else 19].
    #[arg(long, short, value_parser = parse_rate_hz, allow_hyphen_values = true)]
    pub rate: Option<u32>,
    /// Output format of the per-process files of a --duration run (the service writes
    /// pprof) [default: pprof].
    #[arg(long, short, value_enum)]
    pub format: Option<FormatArg>,
    /// Directory for the per-process files.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Sampler backend [default: auto].
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// Native stacks: a directory of separate debug files (`DIR/.build-id/ab/cdef….debug`, and
    /// `.gnu_debuglink` names under `DIR/<the object's directory>/`) to name the functions of
    /// stripped objects with, under each process's root, then the host's; repeat for more,
    /// in order [default: /usr/lib/debug] [config: debug_dirs].
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dirs: Vec<PathBuf>,
    #[command(flatten)]
    pub frames: FrameArgs,
}

/// `pyagent record`
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Process to sample.
    #[arg(long, short, value_parser = parse_whole_number::<u32>)]
    pub pid: u32,
    /// How long to sample, in seconds (`30`, `1.5`) or with a unit (`500ms`, `2m`) (default:
    /// until the process exits or Ctrl-C).
    #[arg(long, short, value_parser = parse_duration, allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    /// Samples per second (1 to 10000).
    #[arg(long, short, default_value_t = 99, value_parser = parse_rate_hz, allow_hyphen_values = true)]
    pub rate: u32,
    /// Also sample child processes, as they start.
    #[arg(long)]
    pub subprocesses: bool,
    /// Stop the process's threads while reading each sample (consistent stacks, slows it).
    #[arg(long)]
    pub blocking: bool,
    /// Also record threads that are not running on a CPU.
    #[arg(long)]
    pub idle: bool,
    /// Output format [default: from the output's extension (`.pb.gz`, `.svg`, `.txt`), else
    /// pprof].
    #[arg(long, short, value_enum)]
    pub format: Option<FormatArg>,
    /// Output file [default: `pyagent-PID-UNIXTIME` in the current directory, with the
    /// format's extension].
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Sampler backend [default: auto: eBPF, whose stacks are each one instant's, where the
    /// kernel and privileges allow it, else the userspace sampler; `--blocking`, `--idle`,
    /// `--subprocesses` and `--async-mode all` choose `userspace`].
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// Also profile the time threads spend blocked (`--mode ebpf`): the pprof profile gets an
    /// `off_cpu` sample type, with a `wait` label (io, sleep, lock, gil, other, cpu).
    #[arg(long)]
    pub off_cpu: bool,
    /// Keep only samples whose thread held the GIL (not for free-threaded builds, which have
    /// none). Every sample carries a `gil` label (held, released, waiting) either way.
    #[arg(long)]
    pub gil: bool,
    /// With `--async`: `running` samples each thread as the task it runs; `all` also samples
    /// every waiting task at its await point, under its awaiters (userspace only), as CPython's
    /// sampler's `--async-mode all` does.
    #[arg(long, value_enum, default_value_t = AsyncModeArg::Running, requires = "async_tasks")]
    pub async_mode: AsyncModeArg,
    /// With `--native`: a directory of separate debug files (`DIR/.build-id/ab/cdef….debug`,
    /// and `.gnu_debuglink` names under `DIR/<the object's directory>/`) to name the functions
    /// of stripped objects with, under the process's root, then the host's; repeat for more,
    /// in order [default: /usr/lib/debug].
    #[arg(long = "debug-dir", value_name = "DIR", requires = "native")]
    pub debug_dirs: Vec<PathBuf>,
    /// Print every counter of the sampler and the unwinder in the summary, after its short
    /// lines.
    #[arg(long, short)]
    pub verbose: bool,
    #[command(flatten)]
    pub frames: FrameArgs,
}

/// `--debug-dir` values as the library takes them: absolute (a relative one is relative to the
/// current directory, as for any path given on the command line); `None` when none is given.
pub fn debug_dir_flags(dirs: &[PathBuf]) -> Option<Vec<PathBuf>> {
    if dirs.is_empty() {
        return None;
    }
    // `absolute` fails only without a current directory, where the path is left as given
    // (and refused by the configuration's validation).
    Some(
        dirs.iter()
            .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone()))
            .collect(),
    )
}

/// `record --async-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AsyncModeArg {
    /// the task each thread runs
    Running,
    /// every task: the running ones, and each waiting one at its await point
    All,
}

impl From<AsyncModeArg> for pyagent::unwind::AsyncMode {
    fn from(m: AsyncModeArg) -> Self {
        use pyagent::unwind::AsyncMode;
        match m {
            AsyncModeArg::Running => AsyncMode::Running,
            AsyncModeArg::All => AsyncMode::All,
        }
    }
}
