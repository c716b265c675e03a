//! `cargo xtask bench unwind` (being written).

use anyhow::{bail, Result};

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the benchmark.
pub fn run(_args: &Args) -> Result<()> {
    bail!("cargo xtask bench unwind is not written yet")
}
