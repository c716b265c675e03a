//! `cargo xtask bench unwind` arguments.

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds of sampling per measurement of pyagent's unwinder.
    #[arg(long, default_value_t = 3.0)]
    pub(super) seconds: f64,
    /// Seconds each peer profiler (Tachyon, py-spy) samples.
    #[arg(long, default_value_t = 5.0)]
    pub(super) peer_seconds: f64,
    /// Depths 10 and 100 only, 1 s per measurement.
    #[arg(long)]
    pub(super) quick: bool,
    /// Stack depths (Python frames, module frame included).
    #[arg(long, value_delimiter = ',', default_values_t = [10, 100, 1000])]
    pub(super) depths: Vec<usize>,
    /// Interpreters, by manifest name.
    #[arg(long, value_delimiter = ',', default_values_t = ["py315".to_owned(), "py313".to_owned()])]
    pub(super) pythons: Vec<String>,
    /// Target kinds: `park` (sleeping leaf) and/or `busy` (leaf looping on the CPU).
    #[arg(long, value_delimiter = ',', default_values_t = ["park".to_owned(), "busy".to_owned()])]
    pub(super) kinds: Vec<String>,
    /// Run in this build even if it is a debug build (numbers are then meaningless).
    #[arg(long)]
    pub(super) no_release: bool,
    /// Only the asyncio row (100 tasks, coroutine depth 20, on py315).
    #[arg(long, conflicts_with = "no_asyncio")]
    pub(super) asyncio_only: bool,
    /// Leave out the asyncio row.
    #[arg(long)]
    pub(super) no_asyncio: bool,
}
