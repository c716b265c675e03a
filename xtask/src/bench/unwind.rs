//! `cargo xtask bench unwind`: samples per CPU-second of pyagent's unwinder (frame cache on and
//! off) beside Tachyon (`python3.15 -m profiling.sampling`) and py-spy, on the same steady
//! targets in the same run.
//!
//! Targets (`bench-scripts/deep.py`): one thread DEPTH Python frames deep, parked in
//! `time.sleep` (`park`) or looping on the CPU in its innermost frame (`busy`: the top frame's
//! line moves). Ours runs in this process: an `Unwinder` sampling every thread in a tight loop,
//! charged with this thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`). The peers run flat out as
//! children (Tachyon at 100 kHz, py-spy at 10 kHz, both past what they can reach) and are charged
//! with their rusage (user + system). Every sample's depth is checked; wrong ones are reported.
//! Ours does no aggregation (the peers aggregate into their output files): the cost of
//! unwinding alone, which is what the agent pays per sample before counting it.
//!
//! The asyncio row (`bench-scripts/async_deep.py`): 100 tasks 20 coroutines deep, one running on
//! the CPU in its innermost coroutine; ours with and without task-aware stacks (`--async`),
//! Tachyon with `--async-aware` (running mode).
//!
//! The measurements link the agent library, whose build needs clang: `cargo xtask` itself is built
//! with the Rust toolchain alone, so it installs the build packages and re-runs itself from a
//! release build with the `agent-lib` feature ([`super::util::reexec_release`]).

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds of sampling per measurement of pyagent's unwinder.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Seconds each peer profiler (Tachyon, py-spy) samples.
    #[arg(long, default_value_t = 5.0)]
    peer_seconds: f64,
    /// Depths 10 and 100 only, 1 s per measurement.
    #[arg(long)]
    quick: bool,
    /// Stack depths (Python frames, module frame included).
    #[arg(long, value_delimiter = ',', default_values_t = [10, 100, 1000])]
    depths: Vec<usize>,
    /// Interpreters, by manifest name.
    #[arg(long, value_delimiter = ',', default_values_t = ["py315".to_owned(), "py313".to_owned()])]
    pythons: Vec<String>,
    /// Target kinds: `park` (sleeping leaf) and/or `busy` (leaf looping on the CPU).
    #[arg(long, value_delimiter = ',', default_values_t = ["park".to_owned(), "busy".to_owned()])]
    kinds: Vec<String>,
    /// Run in this build even if it is a debug build (numbers are then meaningless).
    #[arg(long)]
    no_release: bool,
    /// Only the asyncio row (100 tasks, coroutine depth 20, on py315).
    #[arg(long, conflicts_with = "no_asyncio")]
    asyncio_only: bool,
    /// Leave out the asyncio row.
    #[arg(long)]
    no_asyncio: bool,
}

#[cfg(feature = "agent-lib")]
mod asyncio_row;
#[cfg(feature = "agent-lib")]
mod measure;

/// Runs the benchmark, from a build that links the agent library.
pub fn run(args: &Args) -> anyhow::Result<()> {
    super::util::reexec_release(&[], super::util::Features::AgentLib, args.no_release)?;
    #[cfg(feature = "agent-lib")]
    return measure::run(args);
    #[cfg(not(feature = "agent-lib"))]
    unreachable!("reexec_release returns only in a build with the agent-lib feature")
}
