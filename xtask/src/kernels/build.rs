//! The executables the kernels run: built on the host (a guest only executes), copied into the
//! cache directory so that every kernel runs the same build even while someone rebuilds the
//! workspace, and checked to hold the plan's tests. The tests are the debug build `cargo test`
//! makes; the `pyagent` they run is the release one.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::plan::{Binary, Check};
use crate::pythons::cmd;

/// The copies: `DIR/build/deps/<test executables>` and `DIR/build/pyagent`, the layout of a
/// cargo profile directory, where the tests look for `pyagent` next to their `deps/`.
pub struct Build {
    pub dir: PathBuf,
    pub bpf: PathBuf,
    pub integration: PathBuf,
    pub pyagent: PathBuf,
}

impl Build {
    pub fn exe(&self, binary: Binary) -> &Path {
        match binary {
            Binary::Bpf => &self.bpf,
            Binary::Integration => &self.integration,
        }
    }
}

/// Builds the workspace's tests and the release `pyagent`, and copies their executables into
/// `dir`.
pub fn build(workspace: &Path, dir: &Path) -> Result<Build> {
    let tests = cargo_json(
        workspace,
        &["test", "--no-run", "--workspace", "--all-features"],
    )?;
    // The release binary, which users run: the debug one, unoptimised, spends many times as
    // long under TCG parsing objects and unwinding, and the tests run it for every check.
    let release = cargo_json(
        workspace,
        &["build", "--release", "-p", "pyagent", "--bin", "pyagent"],
    )?;
    let built = Built::parse(&tests, &release)?;
    let deps = dir.join("deps");
    fs::create_dir_all(&deps).with_context(|| format!("cannot create {}", deps.display()))?;
    Ok(Build {
        dir: dir.to_owned(),
        bpf: copy_into(&built.bpf, &deps)?,
        integration: copy_into(&built.integration, &deps)?,
        pyagent: copy_into(&built.pyagent, dir)?,
    })
}

/// Runs `cargo ARGS --message-format=json` in `workspace`, its progress on stderr; returns the
/// messages.
fn cargo_json(workspace: &Path, args: &[&str]) -> Result<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(&cargo);
    command
        .current_dir(workspace)
        .args(args)
        .arg("--message-format=json")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    let line = cmd::display(&command);
    let out = command
        .output()
        .with_context(|| format!("cannot run `{line}`"))?;
    let stdout = String::from_utf8(out.stdout)
        .with_context(|| format!("`{line}` printed non-UTF-8 output"))?;
    if !out.status.success() {
        bail!("`{line}` failed ({}):\n{}", out.status, errors(&stdout));
    }
    Ok(stdout)
}

/// The compiler's errors among cargo's JSON messages, as rustc prints them: with
/// `--message-format=json` they are on stdout, in the messages.
fn errors(json: &str) -> String {
    json.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-message" && m["message"]["level"] == "error")
        .filter_map(|m| m["message"]["rendered"].as_str().map(str::to_owned))
        .collect::<Vec<_>>()
        .join("")
}

/// Copies the executable `from` into `to_dir`; returns the copy's path.
fn copy_into(from: &Path, to_dir: &Path) -> Result<PathBuf> {
    let to = to_dir.join(from.file_name().context("an executable has a file name")?);
    // Unlinked first: a copy over an executable still running elsewhere would fail.
    if to.exists() {
        fs::remove_file(&to).with_context(|| format!("cannot remove {}", to.display()))?;
    }
    fs::copy(from, &to)
        .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    Ok(to)
}

/// The executables cargo reported.
#[derive(Debug, PartialEq)]
struct Built {
    bpf: PathBuf,
    integration: PathBuf,
    pyagent: PathBuf,
}

impl Built {
    /// Reads cargo's messages: those of the tests' build, and of the release binary's.
    fn parse(tests: &str, release: &str) -> Result<Built> {
        let executable = |json: &str, kind: &str, name: &str| -> Result<PathBuf> {
            executables(json)?
                .into_iter()
                .find(|(kinds, n, _)| n == name && kinds.iter().any(|k| k == kind))
                .map(|(_, _, exe)| exe)
                .with_context(|| format!("cargo reported no {kind} executable {name}"))
        };
        Ok(Built {
            bpf: executable(tests, "test", Binary::Bpf.target())?,
            integration: executable(tests, "test", Binary::Integration.target())?,
            pyagent: executable(release, "bin", "pyagent")?,
        })
    }
}

/// The executables of cargo's `compiler-artifact` messages: target kinds, name, path.
fn executables(json: &str) -> Result<Vec<(Vec<String>, String, PathBuf)>> {
    let mut found = Vec::new();
    for line in json.lines().filter(|l| l.starts_with('{')) {
        let message: Value = serde_json::from_str(line)
            .with_context(|| format!("cannot parse cargo's message {line}"))?;
        let target = &message["target"];
        let (Some(exe), Some(name), Some(kinds)) = (
            message["executable"].as_str(),
            target["name"].as_str(),
            target["kind"].as_array(),
        ) else {
            continue;
        };
        let kinds = kinds
            .iter()
            .filter_map(|k| k.as_str().map(str::to_owned))
            .collect();
        found.push((kinds, name.to_owned(), PathBuf::from(exe)));
    }
    Ok(found)
}

/// Fails, naming them, unless every check's test is in its binary's `--list`.
pub fn verify(build: &Build, checks: &[Check]) -> Result<()> {
    let mut missing = Vec::new();
    for binary in [Binary::Bpf, Binary::Integration] {
        let wanted: Vec<&Check> = checks.iter().filter(|c| c.binary == binary).collect();
        if wanted.is_empty() {
            continue;
        }
        let exe = build.exe(binary);
        let listed = test_names(&cmd::output(Command::new(exe).arg("--list"))?);
        for check in wanted {
            if !listed.contains(check.name) {
                missing.push(format!("{} (in {})", check.name, exe.display()));
            }
        }
    }
    if !missing.is_empty() {
        bail!(
            "tests of the plan (xtask/src/kernels/plan.rs) not found; renamed?\n{}",
            missing.join("\n")
        );
    }
    Ok(())
}

/// The names in libtest's `--list` output (`NAME: test`).
fn test_names(list: &str) -> BTreeSet<String> {
    list.lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifacts_are_picked_by_target_kind_and_name() {
        let tests = r#"{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"pyagent"},"executable":null}
{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"pyagent"},"executable":"/t/debug/pyagent"}
{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"pyagent"},"profile":{"test":true},"executable":"/t/debug/deps/pyagent-1"}
{"reason":"compiler-artifact","target":{"kind":["test"],"name":"bpf"},"executable":"/t/debug/deps/bpf-2"}
{"reason":"compiler-artifact","target":{"kind":["test"],"name":"integration"},"executable":"/t/debug/deps/integration-3"}
{"reason":"build-finished","success":true}"#;
        let release = r#"{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"pyagent"},"executable":"/t/release/pyagent"}"#;
        assert_eq!(
            Built::parse(tests, release).expect("parsed"),
            Built {
                bpf: "/t/debug/deps/bpf-2".into(),
                integration: "/t/debug/deps/integration-3".into(),
                pyagent: "/t/release/pyagent".into(),
            }
        );
        let err = Built::parse(tests, r#"{"reason":"build-finished"}"#).unwrap_err();
        assert!(err.to_string().contains("bin executable pyagent"), "{err}");
    }

    #[test]
    fn errors_are_the_rendered_compiler_errors() {
        let json = r#"{"reason":"compiler-message","message":{"level":"warning","rendered":"warning: w\n"}}
{"reason":"compiler-message","message":{"level":"error","rendered":"error[E0521]: borrowed data escapes\n"}}
{"reason":"build-finished","success":false}"#;
        assert_eq!(errors(json), "error[E0521]: borrowed data escapes\n");
    }

    #[test]
    fn list_names_are_the_tests() {
        let list = "a::b: test\nc: test\nd: bench\n\n2 tests, 1 benchmark\n";
        let names = test_names(list);
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["a::b", "c"]);
    }
}
