//! The `pyagent` binary under test: built once, run to completion or as `nobody`, its
//! summary read; and the lock that tests running a host-wide agent hold.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The `pyagent` binary, built once per test run so the tests never exercise a stale one
/// (`cargo test` builds only the test targets' dependencies, not other packages' binaries).
pub fn pyagent_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        // target/<profile>/deps/integration-xxxx → target/<profile>
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>/deps");
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "pyagent", "--bin", "pyagent"]);
        if release {
            cmd.arg("--release");
        }
        let status = cmd
            .status()
            .unwrap_or_else(|e| panic!("cannot run cargo build: {e}"));
        assert!(status.success(), "building the pyagent binary failed");
        let bin = profile_dir.join("pyagent");
        assert!(bin.exists(), "{} missing after cargo build", bin.display());
        bin
    })
    .clone()
}

/// Runs `pyagent ARGS` to completion.
pub fn run_pyagent(args: &[&str]) -> Output {
    Command::new(pyagent_bin())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run pyagent: {e}"))
}

/// Host-wide agents profile every Python process, other tests' included, and compete for the
/// CPUs: tests that run one hold this lock.
pub fn host_wide_lock() -> std::sync::MutexGuard<'static, ()> {
    static HOST_WIDE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    HOST_WIDE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `pyagent record --pid PID ARGS -o FILE` to completion, which must succeed; returns its
/// stderr (the summary). Without a `--mode` in `args`, the userspace sampler's
/// (`--mode userspace`): most tests are of one sampler, and name it; [`record_default`] runs
/// what a user who names none gets.
pub fn record(pid: u32, args: &[&str], file: &Path) -> String {
    let mut all = args.to_vec();
    if !all.contains(&"--mode") {
        all.extend(["--mode", "userspace"]);
    }
    record_default(pid, &all, file)
}

/// `pyagent record --pid PID ARGS --verbose -o FILE` with `args` as given (no `--mode`: the
/// default sampler), which must succeed; returns its stderr, every counter included.
pub fn record_default(pid: u32, args: &[&str], file: &Path) -> String {
    let pid = pid.to_string();
    let mut all = vec!["record", "--pid", &pid, "--verbose"];
    all.extend_from_slice(args);
    all.extend(["-o", file.to_str().expect("utf-8 path")]);
    let out = run_pyagent(&all);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "record {args:?}: {err}");
    err
}

/// `pyagent record --pid PID ARGS -f collapsed -o FILE` to completion, which must succeed;
/// returns the collapsed stacks and the summary on stderr.
pub fn record_collapsed(pid: u32, args: &[&str], file: &Path) -> (String, String) {
    collapsed_by(record, pid, args, file)
}

/// [`record_collapsed`] with `args` exactly as given: the default sampler without a `--mode`.
pub fn record_collapsed_default(pid: u32, args: &[&str], file: &Path) -> (String, String) {
    collapsed_by(record_default, pid, args, file)
}

/// `recorder` writing collapsed stacks to `file`: the stacks and the summary.
fn collapsed_by(
    recorder: fn(u32, &[&str], &Path) -> String,
    pid: u32,
    args: &[&str],
    file: &Path,
) -> (String, String) {
    let mut all = args.to_vec();
    all.extend(["-f", "collapsed"]);
    let err = recorder(pid, &all, file);
    let text = std::fs::read_to_string(file).expect("profile written");
    (text, err)
}

/// The number right before `suffix` in `text` (`"(97 samples,"` with `" samples,"` → 97).
pub fn number_before(text: &str, suffix: &str) -> u64 {
    let head = &text[..text
        .find(suffix)
        .unwrap_or_else(|| panic!("no `{suffix}` in: {text}"))];
    head.rsplit(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number before `{suffix}` in: {text}"))
}

/// `setpriv … pyagent`: pyagent as `nobody` with exactly `caps` (`+bpf,+perfmon`, ambient), or
/// with no capability at all when `caps` is empty; its arguments still to add.
pub fn as_nobody(caps: &str) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
    if caps.is_empty() {
        cmd.arg("--inh-caps=-all");
    } else {
        cmd.arg(format!("--inh-caps={caps}"))
            .arg(format!("--ambient-caps={caps}"));
    }
    cmd.arg(format!(
        "--bounding-set=-all{}",
        if caps.is_empty() {
            String::new()
        } else {
            format!(",{caps}")
        }
    ));
    cmd.arg(pyagent_bin());
    cmd
}
