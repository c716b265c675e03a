//! `cargo xtask bench ebpf` (being written).

use anyhow::{bail, Result};

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the benchmark.
pub fn run(_args: &Args) -> Result<()> {
    bail!("cargo xtask bench ebpf is not written yet")
}
