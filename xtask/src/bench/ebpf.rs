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
//!
//! The measurements link the agent library, whose build needs clang: `cargo xtask` itself is built
//! with the Rust toolchain alone, so it installs the build packages and re-runs itself from a
//! release build with the `agent-lib` feature, building the release agent as well
//! ([`super::util::reexec_release`]).

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds per BPF cost measurement.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Seconds the agent profiles per overhead measurement.
    #[arg(long, default_value_t = 20.0)]
    agent_seconds: f64,
    /// About a minute: 1 s BPF measurements, 5 s agent runs.
    #[arg(long)]
    quick: bool,
    /// Stack depths of the BPF cost targets.
    #[arg(long, value_delimiter = ',', default_values_t = [10, 100, 1000])]
    depths: Vec<usize>,
    /// Interpreters of the BPF cost targets, by manifest name.
    #[arg(long, value_delimiter = ',', default_values_t = ["py315".to_owned(), "py312".to_owned()])]
    pythons: Vec<String>,
    /// Numbers of busy Python processes for the agent-overhead runs.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 10, 50])]
    processes: Vec<usize>,
    /// Number of blocking processes (about 1,000 blocking calls a second each) for the
    /// off-CPU overhead runs.
    #[arg(long, default_value_t = 50)]
    blocking_processes: usize,
    /// Number of processes whose leaf is in C (`deep.py 30 native`) for the agent runs with
    /// `--native` off and on.
    #[arg(long, default_value_t = 50)]
    native_processes: usize,
    /// Interpreter of the busy processes (manifest name).
    #[arg(long, default_value = "py312")]
    busy_python: String,
    /// Perf-event rate (per CPU) of the BPF cost runs.
    #[arg(long, default_value_t = 999)]
    bpf_rate: u64,
    /// Only one part: `cost` (ns per run), `agent` (agent overhead), `offcpu` (agent and BPF
    /// cost with off-CPU profiling, beside many blocking processes) or `native` (BPF cost per
    /// sample and agent overhead with native stacks, `--native`).
    #[arg(long)]
    only: Option<String>,
    /// Also measure each stage of an anchored depth-100 walk on 3.15 (the program stops after
    /// stage N: what each part of a run costs).
    #[arg(long)]
    stages: bool,
    /// Run in this build even if it is a debug build.
    #[arg(long)]
    no_release: bool,
}

#[cfg(feature = "agent-lib")]
mod measure;

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
