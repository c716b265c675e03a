//! Reading stacks of test targets with the library's unwinder (structured frames), and the
//! expected lines, taken from `# @marker` comments in the scripts.

use std::path::{Path, PathBuf};
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

/// The line number right after `SCRIPT:` in `location` (a line of `go tool pprof -raw`'s
/// locations, say).
///
/// # Panics
/// When there is no number there.
pub fn line_after(location: &str, script_name: &str) -> u32 {
    location
        .split(&format!("{script_name}:"))
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no line after `{script_name}:` in {location}"))
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
            let shown: Vec<_> = samples
                .iter()
                .map(|s| (s.thread.ns_tid(), simple(s)))
                .collect();
            panic!("the target did not reach the expected state in {timeout:?}; last sample: {shown:#?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
