//! `cargo xtask agent -- ARGS`: installs what the build needs, builds the release agent and runs
//! it with ARGS (the README's first command).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};

use crate::{pythons, test};

/// Builds `target/release/pyagent` and replaces this process with it.
pub fn run(args: &[String]) -> Result<()> {
    let logs = pythons::Args::prepare().dir().join("logs");
    test::ensure_build_packages(&logs)?;
    test::cargo(&["build", "--release", "--quiet", "-p", "pyagent"])?;
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/pyagent");
    let err = Command::new(&bin).args(args).exec();
    Err(err).with_context(|| format!("cannot run {}", bin.display()))
}
