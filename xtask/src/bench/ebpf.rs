//! `cargo xtask bench ebpf`: what the BPF sampler costs.
//!
//! 1. ns per BPF run. This process loads the sampler (`BpfSampler`, kernel run-time statistics
//!    on) at `--bpf-rate` Hz per CPU, tracks one real Python process whose only thread loops on
//!    the CPU DEPTH frames deep (`bench-scripts/deep.py DEPTH busy`), and reads the program's
//!    run time and run count. The perf event follows the target's thread alone, so that every
//!    run is a walk; a baseline load on every CPU with nothing tracked measures an early exit
//!    (idle CPU, untracked task). Both are medians over 100 ms intervals.
//!    On 3.15, "with anchor" runs as the agent does: the program stops at `last_profiled_frame`,
//!    which this process's userspace unwinder (frame cache on) moves to each thread's top frame
//!    every 100 ms, right after walking it (the program cannot write it: `bpf_probe_write_user`
//!    is refused under lockdown and fails in interrupt context).
//! 2. Agent overhead: `target/release/pyagent --all-python` at 99 Hz (ebpf, then userspace mode)
//!    with 1, 10 and 50 busy Python processes: its CPU time (`wait4`) as % of one core over the
//!    run and after its first scan, its peak RSS, and in ebpf mode the BPF program's own run
//!    time (spent in the interrupted Python processes, not charged to the agent).
//! 3. Off-CPU: the agent with and without `--off-cpu` beside many blocking processes.
//! 4. Native stacks: ns per sample with and without the native section on a target whose leaf
//!    is in C under 100 Python frames (`deep.py 100 native`), and the agent's CPU at 99 Hz with
//!    `--native` off and on beside 50 such processes.
//! 5. GIL holder: what naming the GIL's holder costs a GIL wait (the off-CPU program with the
//!    lookup and without it, beside `gil_holder.py`).
//!
//! The measurements link the agent library, whose build needs clang: `cargo xtask` itself is built
//! with the Rust toolchain alone, so it installs the build packages and re-runs itself from a
//! release build with the `agent-lib` feature, building the release agent as well
//! ([`super::util::reexec_release`]).
//!
//! Modules, lowest first (each imports only those before it). What no process runs, with unit
//! tests: `cost` (what a load of the sampler measured), `cost_rows` (the program-cost tables'
//! rows), `agent_output` (what a run of the agent printed and cost), `agent_rows` (the agent
//! tables' rows), `targets` (the targets' settings). What runs processes: `program_run` (one
//! load of the sampler beside a target), `program_cost` (sections 1 and 4's program costs), `gil_cost` (section 5),
//! `agent_run` (one run of the agent), `agent_overhead` (sections 2, 3 and 4's agent runs),
//! `measure` (the parts in order). `args` holds the arguments.

#[cfg(feature = "agent-lib")]
mod agent_output;
#[cfg(feature = "agent-lib")]
mod agent_overhead;
#[cfg(feature = "agent-lib")]
mod agent_rows;
#[cfg(feature = "agent-lib")]
mod agent_run;
mod args;
#[cfg(feature = "agent-lib")]
mod cost;
#[cfg(feature = "agent-lib")]
mod cost_rows;
#[cfg(feature = "agent-lib")]
mod gil_cost;
#[cfg(feature = "agent-lib")]
mod measure;
#[cfg(feature = "agent-lib")]
mod program_cost;
#[cfg(feature = "agent-lib")]
mod program_run;
#[cfg(feature = "agent-lib")]
mod targets;

pub use self::args::Args;

/// Runs the benchmark, from a build that links the agent library.
pub fn run(args: &Args) -> anyhow::Result<()> {
    super::util::reexec_release(
        &["pyagent"],
        super::util::Features::AgentLib,
        args.no_release,
    )?;
    #[cfg(feature = "agent-lib")]
    return measure::run(args);
    #[cfg(not(feature = "agent-lib"))]
    unreachable!("reexec_release returns only in a build with the agent-lib feature")
}
