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
//!
//! Modules, lowest first: `args`, `cell` (a sampler's result and the cells' text), `samplers`
//! (each sampler on a running target), `asyncio_row`, `measure` (the depth table, then the
//! asyncio row).

mod args;
#[cfg(feature = "agent-lib")]
mod asyncio_row;
#[cfg(feature = "agent-lib")]
mod cell;
#[cfg(feature = "agent-lib")]
mod measure;
#[cfg(feature = "agent-lib")]
mod samplers;

pub use self::args::Args;

/// Runs the benchmark, from a build that links the agent library.
pub fn run(args: &Args) -> anyhow::Result<()> {
    super::util::reexec_release(&[], super::util::Features::AgentLib, args.no_release)?;
    #[cfg(feature = "agent-lib")]
    return measure::run(args);
    #[cfg(not(feature = "agent-lib"))]
    unreachable!("reexec_release returns only in a build with the agent-lib feature")
}
