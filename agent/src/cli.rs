//! Command-line flags (clap). Only this file knows about clap; it turns flags into the
//! library's configuration types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use pyagent::export::Format;

/// pyagent: a sampling profiler for CPython 3.11–3.15.
#[derive(Debug, Parser)]
#[command(name = "pyagent", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Log filter (tracing `EnvFilter` syntax), e.g. `info` or `pyagent=debug`.
    #[arg(long, global = true, env = "PYAGENT_LOG", default_value = "warn")]
    pub log: String,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the current Python stack of every thread of a process.
    Dump(DumpArgs),
    /// Sample a process and write a profile.
    Record(RecordArgs),
}

/// Frame-rendering options shared by the commands.
#[derive(Debug, Args, Clone, Copy)]
pub struct FrameArgs {
    /// Show `<native>` where Python code called into C that called back into Python.
    #[arg(long)]
    pub native: bool,
    /// Do not show `<GC>` where the garbage collector runs.
    #[arg(long)]
    pub no_gc: bool,
    /// Do not use CPython 3.15's frame cache (which writes `last_profiled_frame` in the target).
    #[arg(long)]
    pub no_frame_cache: bool,
}

/// `pyagent dump`
#[derive(Debug, Args)]
pub struct DumpArgs {
    /// Process to inspect.
    #[arg(long, short)]
    pub pid: u32,
    #[command(flatten)]
    pub frames: FrameArgs,
}

/// Output formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FormatArg {
    /// gzipped pprof protobuf (`go tool pprof`, Pyroscope, Parca)
    Pprof,
    /// collapsed stacks, one line per stack (flamegraph.pl, speedscope)
    Collapsed,
    /// an SVG flame graph
    Flamegraph,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::Pprof => Format::Pprof,
            FormatArg::Collapsed => Format::Collapsed,
            FormatArg::Flamegraph => Format::Flamegraph,
        }
    }
}

/// `pyagent record`
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Process to sample.
    #[arg(long, short)]
    pub pid: u32,
    /// Seconds to sample (default: until the process exits or Ctrl-C).
    #[arg(long, short)]
    pub duration: Option<f64>,
    /// Samples per second.
    #[arg(long, short, default_value_t = 99)]
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
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = FormatArg::Pprof)]
    pub format: FormatArg,
    /// Output file.
    #[arg(long, short)]
    pub output: PathBuf,
    #[command(flatten)]
    pub frames: FrameArgs,
}
