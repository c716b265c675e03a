//! `cargo xtask bench ebpf` arguments.

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds per BPF cost measurement.
    #[arg(long, default_value_t = 3.0)]
    pub(super) seconds: f64,
    /// Seconds the agent profiles per overhead measurement.
    #[arg(long, default_value_t = 20.0)]
    pub(super) agent_seconds: f64,
    /// About a minute: 1 s BPF measurements, 5 s agent runs.
    #[arg(long)]
    pub(super) quick: bool,
    /// Stack depths of the BPF cost targets.
    #[arg(long, value_delimiter = ',', default_values_t = [10, 100, 1000])]
    pub(super) depths: Vec<usize>,
    /// Interpreters of the BPF cost targets, by manifest name.
    #[arg(long, value_delimiter = ',', default_values_t = ["py315".to_owned(), "py312".to_owned()])]
    pub(super) pythons: Vec<String>,
    /// Numbers of busy Python processes for the agent-overhead runs.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 10, 50])]
    pub(super) processes: Vec<usize>,
    /// Number of blocking processes (about 1,000 blocking calls a second each) for the
    /// off-CPU overhead runs.
    #[arg(long, default_value_t = 50)]
    pub(super) blocking_processes: usize,
    /// Number of processes whose leaf is in C (`deep.py 30 native`) for the agent runs with
    /// `--native` off and on.
    #[arg(long, default_value_t = 50)]
    pub(super) native_processes: usize,
    /// Interpreter of the busy processes (manifest name).
    #[arg(long, default_value = "py312")]
    pub(super) busy_python: String,
    /// Perf-event rate (per CPU) of the BPF cost runs.
    #[arg(long, default_value_t = 999)]
    pub(super) bpf_rate: u64,
    /// Only one part: `cost` (ns per run), `agent` (agent overhead), `offcpu` (agent and BPF
    /// cost with off-CPU profiling, beside many blocking processes), `native` (BPF cost per
    /// sample and agent overhead with native stacks, `--native`) or `gil` (what naming the
    /// GIL's holder costs a GIL wait).
    #[arg(long)]
    pub(super) only: Option<String>,
    /// Also measure each stage of an anchored depth-100 walk on 3.15 (the program stops after
    /// stage N: what each part of a run costs).
    #[arg(long)]
    pub(super) stages: bool,
    /// Run in this build even if it is a debug build.
    #[arg(long)]
    pub(super) no_release: bool,
}
