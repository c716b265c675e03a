//! `cargo xtask test`: the whole test suite from a fresh machine. Installs the Debian packages
//! the build and the tests' real consumers need (clang for the BPF program, Go's pprof,
//! Prometheus' promtool), prepares the interpreter matrix, builds everything, runs every test.

use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::pythons;

/// Packages to build the agent (the BPF program is C, compiled by clang-19).
pub const BUILD_PACKAGES: &[&str] = &["clang-19", "llvm-19", "libbpf-dev"];

/// Packages the tests use as real consumers and tools.
pub const TEST_PACKAGES: &[&str] = &["golang-go", "prometheus", "util-linux", "procps"];

/// Runs cargo with `args`, failing with the command in the message.
pub fn cargo(args: &[&str]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .args(args)
        .status()
        .with_context(|| format!("cannot run {cargo}"))?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Installs what building the agent needs.
pub fn ensure_build_packages(logs: &std::path::Path) -> Result<()> {
    pythons::host::ensure_installed(logs, "packages", BUILD_PACKAGES)
}

/// `cargo xtask test [-- TEST ARGS]`
pub fn run(test_args: &[String]) -> Result<()> {
    if !is_root() {
        bail!("the tests load BPF programs and read other processes' memory: run them as root");
    }
    let pythons = pythons::Args::prepare();
    let logs = pythons.dir().join("logs");
    ensure_build_packages(&logs)?;
    pythons::host::ensure_installed(&logs, "packages", TEST_PACKAGES)?;
    pythons::run(&pythons)?;
    // `--all-features` so that xtask's in-process benches (the `agent-lib` feature) are built and
    // tested too: `cargo xtask` itself runs without them.
    cargo(&["build", "--workspace", "--all-targets", "--all-features"])?;
    let mut args = vec!["test", "--workspace", "--all-features", "--no-fail-fast"];
    if !test_args.is_empty() {
        args.push("--");
        args.extend(test_args.iter().map(String::as_str));
    }
    cargo(&args)
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
