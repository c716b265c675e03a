//! `cargo xtask bench <which>`: benchmarks that print tables (never timed tests).
//!
//! - `unwind`: samples per CPU-second of the resolver (frame cache on/off) beside Tachyon and
//!   py-spy, on steady targets of known depth.
//! - `ebpf`: ns per BPF run, and the agent's CPU and RSS with many Python processes.
//! - `soak`: the service for an hour with churn: RSS, open descriptors, CPU and the output
//!   directory every 30 s (flat is the target).
//! - `scale`: the service beside 50, 250 and 1,000 processes (mostly asleep, waking 10 times a
//!   second): its CPU, RSS, BPF time per context switch and profiles per window.
//! - `compare`: target slowdown, profiler cost, accuracy and throughput against py-spy, Austin
//!   and Tachyon.

pub mod compare;
pub mod ebpf;
pub mod scale;
pub mod soak;
// Parts of it serve only the in-process benches, which the toolchain-only build leaves out.
#[cfg_attr(not(feature = "agent-lib"), allow(dead_code))]
pub mod stats;
pub mod unwind;
// Parts of it serve only the in-process benches, which the toolchain-only build leaves out.
#[cfg_attr(not(feature = "agent-lib"), allow(dead_code))]
pub mod util;

use anyhow::Result;
use clap::{Args, Subcommand};

/// `cargo xtask bench` arguments.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    which: Which,
}

#[derive(Debug, Subcommand)]
enum Which {
    /// Resolver throughput beside Tachyon and py-spy.
    Unwind(unwind::Args),
    /// BPF program cost and agent overhead.
    Ebpf(ebpf::Args),
    /// Side-by-side comparison with py-spy, Austin and Tachyon.
    Compare(compare::Args),
    /// The service over a long run with churn: RSS, descriptors, CPU and output directory.
    Soak(soak::Args),
    /// The service beside many processes: CPU, RSS, BPF time per context switch, profiles.
    Scale(scale::Args),
}

/// Runs the selected benchmark.
pub fn run(args: &BenchArgs) -> Result<()> {
    match &args.which {
        Which::Unwind(a) => unwind::run(a),
        Which::Ebpf(a) => ebpf::run(a),
        Which::Compare(a) => compare::run(a),
        Which::Soak(a) => soak::run(a),
        Which::Scale(a) => scale::run(a),
    }
}
