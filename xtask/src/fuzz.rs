//! `cargo xtask fuzz --seconds N [--target T]`: runs each libFuzzer target of `agent/fuzz` for a
//! bounded time and prints a table of executions and crashes.
//!
//! xtask cannot link the agent (its build script needs clang), so everything goes through
//! `cargo +nightly fuzz` as a subprocess. cargo-fuzz is installed at a pinned version when missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// The cargo-fuzz release `cargo xtask fuzz` installs and expects.
const CARGO_FUZZ_VERSION: &str = "0.13.1";

/// One target per parser of untrusted bytes; the `[[bin]]` names of `agent/fuzz/Cargo.toml`.
pub const TARGETS: &[&str] = &[
    "linetable",
    "debug_offsets",
    "elf_facts",
    "ring_record",
    "strings",
    "code_object",
    "config_toml",
];

/// `cargo xtask fuzz` options.
#[derive(clap::Args)]
pub struct Args {
    /// How long to run each target, in seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Run only this target (default: all of them, one after the other).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(TARGETS))]
    target: Option<String>,
}

/// What one libFuzzer run reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// inputs executed
    pub executions: u64,
    /// crashing inputs written (libFuzzer stops at the first one)
    pub crashes: Vec<String>,
}

pub fn run(args: &Args) -> Result<()> {
    ensure_nightly()?;
    ensure_cargo_fuzz()?;
    let root = workspace_root();
    let fuzz_dir = root.join("agent/fuzz");
    let scratch = target_dir(&root).join("fuzz-corpus");
    let targets: Vec<&str> = match &args.target {
        Some(t) => vec![t.as_str()],
        None => TARGETS.to_vec(),
    };
    let mut rows = Vec::new();
    for target in targets {
        eprintln!("fuzzing {target} for {} s", args.seconds);
        let report = run_target(&fuzz_dir, &scratch, target, args.seconds)?;
        rows.push((target, report));
    }
    println!("{:<14} | {:>14} | crashes", "target", "executions");
    println!("{:-<14}-|-{:->14}-|--------", "", "");
    for (target, report) in &rows {
        println!(
            "{target:<14} | {:>14} | {}",
            report.executions,
            report.crashes.len()
        );
    }
    let crashed: Vec<String> = rows
        .iter()
        .flat_map(|(t, r)| r.crashes.iter().map(move |c| format!("{t}: {c}")))
        .collect();
    if !crashed.is_empty() {
        bail!("crashing inputs: {}", crashed.join(", "));
    }
    Ok(())
}

/// Runs one target for `seconds`, new inputs going to a scratch corpus (the repository's corpus
/// is read, never written), and parses libFuzzer's final statistics.
fn run_target(fuzz_dir: &Path, scratch: &Path, target: &str, seconds: u64) -> Result<RunReport> {
    let new_inputs = scratch.join(target);
    std::fs::create_dir_all(&new_inputs)
        .with_context(|| format!("cannot create {}", new_inputs.display()))?;
    let log_path = scratch.join(format!("{target}.log"));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    // No sanitizer: the parsers are safe Rust, so ASan would only slow them down; debug
    // assertions on, so an arithmetic overflow is a crash rather than a silent wrap.
    let status = Command::new("cargo")
        .args([
            "+nightly",
            "fuzz",
            "run",
            "--sanitizer",
            "none",
            "--debug-assertions",
        ])
        .arg("--fuzz-dir")
        .arg(fuzz_dir)
        .arg(target)
        .arg(&new_inputs)
        .arg(fuzz_dir.join("corpus").join(target))
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg("-print_final_stats=1")
        .stdout(Stdio::null())
        .stderr(log)
        .status()
        .context("cannot run cargo +nightly fuzz")?;
    let output = std::fs::read_to_string(&log_path)
        .with_context(|| format!("cannot read {}", log_path.display()))?;
    let report = parse_output(&output);
    if !status.success() && report.crashes.is_empty() {
        bail!(
            "cargo fuzz run {target} failed ({status}) without a crash report; see {}",
            log_path.display()
        );
    }
    Ok(report)
}

/// Executions and crash artifacts from libFuzzer's output: `stat::number_of_executed_units`
/// (with `-print_final_stats=1`), else the last `#N` status line (`#N DONE`, `#N pulse`…).
pub fn parse_output(output: &str) -> RunReport {
    let from_stats = output.lines().find_map(|l| {
        l.strip_prefix("stat::number_of_executed_units:")
            .and_then(|n| n.trim().parse().ok())
    });
    let from_status = || {
        output
            .lines()
            .rev()
            .filter_map(|l| l.strip_prefix('#'))
            .find_map(|l| l.split_whitespace().next()?.parse().ok())
    };
    let crashes = output
        .lines()
        .filter_map(|l| l.split_once("Test unit written to "))
        .map(|(_, path)| path.trim().to_string())
        .collect();
    RunReport {
        executions: from_stats.or_else(from_status).unwrap_or(0),
        crashes,
    }
}

/// Installs a nightly toolchain (libFuzzer's instrumentation needs it) unless there is one.
fn ensure_nightly() -> Result<()> {
    let present = Command::new("cargo")
        .args(["+nightly", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if present {
        return Ok(());
    }
    eprintln!("installing the nightly toolchain");
    let status = Command::new("rustup")
        .args(["toolchain", "install", "nightly", "--profile", "minimal"])
        .status()
        .context("cannot run rustup")?;
    if !status.success() {
        bail!("rustup toolchain install nightly failed ({status})");
    }
    Ok(())
}

/// Installs the pinned cargo-fuzz unless that version is already there.
fn ensure_cargo_fuzz() -> Result<()> {
    let installed = Command::new("cargo")
        .args(["fuzz", "--version"])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| {
            o.status.success() && String::from_utf8_lossy(&o.stdout).contains(CARGO_FUZZ_VERSION)
        });
    if installed {
        return Ok(());
    }
    eprintln!("installing cargo-fuzz {CARGO_FUZZ_VERSION}");
    let status = Command::new("cargo")
        .args([
            "install",
            "cargo-fuzz",
            "--locked",
            "--version",
            CARGO_FUZZ_VERSION,
        ])
        .status()
        .context("cannot run cargo install")?;
    if !status.success() {
        bail!("cargo install cargo-fuzz {CARGO_FUZZ_VERSION} failed ({status})");
    }
    Ok(())
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Where cargo puts build output: `CARGO_TARGET_DIR` when set, as cargo fuzz honours it too.
fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_final_stats() {
        let out = "INFO: Seed: 1\n#2\tINITED cov: 10 ft: 11 corp: 1/1b exec/s: 0 rss: 30Mb\n\
                   #1048576\tpulse  cov: 10 ft: 11 corp: 1/1b exec/s: 349525 rss: 40Mb\n\
                   #1234567\tDONE   cov: 10 ft: 11 corp: 1/1b exec/s: 41152 rss: 40Mb\n\
                   Done 1234567 runs in 31 second(s)\n\
                   stat::number_of_executed_units: 1234568\n\
                   stat::average_exec_per_sec:     39824\n";
        assert_eq!(
            parse_output(out),
            RunReport {
                executions: 1234568,
                crashes: vec![]
            }
        );
    }

    #[test]
    fn falls_back_to_status_lines_and_finds_crashes() {
        let out = "#512\tpulse  cov: 3\n#777\tNEW    cov: 4\n\
                   thread '<unnamed>' panicked at src/x.rs:1:1:\n\
                   ==1== ERROR: libFuzzer: deadly signal\n\
                   artifact_prefix='/f/artifacts/linetable/'; \
                   Test unit written to /f/artifacts/linetable/crash-abc\n";
        assert_eq!(
            parse_output(out),
            RunReport {
                executions: 777,
                crashes: vec!["/f/artifacts/linetable/crash-abc".into()]
            }
        );
    }

    /// The target list is the fuzz crate's `[[bin]]` list, in both directions.
    #[test]
    fn targets_match_the_fuzz_crate() {
        let manifest = std::fs::read_to_string(workspace_root().join("agent/fuzz/Cargo.toml"))
            .expect("agent/fuzz/Cargo.toml");
        let mut bins: Vec<&str> = manifest
            .split("[[bin]]")
            .skip(1)
            .filter_map(|b| b.lines().find_map(|l| l.strip_prefix("name = ")))
            .map(|n| n.trim_matches('"'))
            .collect();
        let mut targets = TARGETS.to_vec();
        bins.sort_unstable();
        targets.sort_unstable();
        assert_eq!(bins, targets);
        for t in TARGETS {
            let seeds = workspace_root().join("agent/fuzz/corpus").join(t);
            let n = std::fs::read_dir(&seeds).map_or(0, |d| d.count());
            assert!(n > 0, "no seed corpus in {}", seeds.display());
        }
    }
}
