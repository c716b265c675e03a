//! Reading stacks of test targets: with the library's unwinder (structured frames) and with the
//! real `pyagent` binary; and the expected lines, taken from `# @marker` comments in the scripts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use pyagent::discovery::{locate_runtime, DiscoveryError};
use pyagent::unwind::{ThreadSample, UnwindOptions, Unwinder};

/// A test script in `tests/scripts/`.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
}

/// The line of `script` that carries the comment `# @marker`.
///
/// # Panics
/// When no line has it.
pub fn marker_line(script_name: &str, marker: &str) -> u32 {
    let text = std::fs::read_to_string(script(script_name)).expect("test script is readable");
    let tag = format!("# @{marker}");
    let idx = text
        .lines()
        .position(|l| l.trim_end().ends_with(&tag))
        .unwrap_or_else(|| panic!("{script_name} has no `{tag}` line"));
    idx as u32 + 1
}

/// A frame as tests compare it: qualified name, file base name, line.
pub type SimpleFrame = (String, String, Option<u32>);

/// The frames of a thread sample, innermost first, with file names cut to their base name.
pub fn simple(sample: &ThreadSample) -> Vec<SimpleFrame> {
    sample
        .frames
        .iter()
        .map(|f| {
            let base = f.file().rsplit('/').next().unwrap_or(f.file()).to_string();
            (f.function().to_string(), base, f.line)
        })
        .collect()
}

/// Shorthand for an expected frame of `script` at `# @marker`.
pub fn at(function: &str, script_name: &str, marker: &str) -> SimpleFrame {
    (
        function.to_string(),
        script_name.to_string(),
        Some(marker_line(script_name, marker)),
    )
}

/// Locates the runtime of `pid`, waiting while it is still starting up.
pub fn unwinder(pid: u32, options: UnwindOptions) -> Unwinder {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match locate_runtime(pid) {
            Ok(t) => return Unwinder::new(t, options),
            Err(DiscoveryError::NotInitialized { .. }) if Instant::now() < deadline => {
                std::thread::yield_now()
            }
            Err(e) => panic!("locating the runtime of {pid}: {e}"),
        }
    }
}

/// Samples `unwinder` until `done` holds for the sample (the target reaches its parking
/// point), or panics after `timeout` showing the last sample.
pub fn sample_until(
    unwinder: &mut Unwinder,
    timeout: Duration,
    mut done: impl FnMut(&[ThreadSample]) -> bool,
) -> Vec<ThreadSample> {
    let deadline = Instant::now() + timeout;
    loop {
        let samples = unwinder
            .sample()
            .unwrap_or_else(|e| panic!("sampling failed: {e}"));
        if done(&samples) {
            return samples;
        }
        if Instant::now() > deadline {
            let shown: Vec<_> = samples.iter().map(|s| (s.tid, simple(s))).collect();
            panic!("the target did not reach the expected state in {timeout:?}; last sample: {shown:#?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

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

/// `pyagent record --pid PID ARGS -f collapsed -o FILE` to completion, which must succeed;
/// returns the collapsed stacks and the summary on stderr.
pub fn record_collapsed(pid: u32, args: &[&str], file: &Path) -> (String, String) {
    let pid = pid.to_string();
    let file_arg = file.to_str().expect("utf-8 path");
    let mut all = vec!["record", "--pid", &pid];
    all.extend_from_slice(args);
    all.extend(["-f", "collapsed", "-o", file_arg]);
    let out = run_pyagent(&all);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "record {args:?}: {err}");
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
