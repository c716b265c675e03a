//! The real consumers of what pyagent exports, run by the tests: `go tool pprof` (Debian's
//! golang-go) for profiles, `promtool` (Debian's prometheus) for metrics.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// `go tool pprof ARGS FILE`'s stdout, with a private HOME and Go cache; panics with its
/// stderr on failure, or naming the package when Go is missing.
pub fn go_pprof(args: &[&str], file: &Path) -> String {
    let home = std::env::temp_dir().join(format!("pyagent-gohome-{}", std::process::id()));
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .env("HOME", &home)
        .env("GOCACHE", home.join("cache"))
        .env("PPROF_TMPDIR", &home)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `go tool pprof` ({e}): apt-get install golang-go"));
    assert!(
        out.status.success(),
        "go tool pprof {args:?} {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `go tool pprof -raw FILE`: every sample, location and label of a profile, as text.
pub fn go_pprof_raw(file: &Path) -> String {
    go_pprof(&["-raw"], file)
}

/// Runs `promtool check metrics` on an exposition; panics with its complaints.
pub fn promtool_check_metrics(exposition: &str) {
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run promtool ({e}): apt-get install prometheus"));
    promtool
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(exposition.as_bytes())
        .expect("write to promtool");
    let out = promtool.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The function of each location in `go tool pprof -raw` output, by location id (its lines read
/// `ID: 0x0 M=1 function file:line s=N()`).
pub fn location_functions(raw: &str) -> BTreeMap<&str, &str> {
    location_frames(raw)
        .into_iter()
        .map(|(id, (function, _))| (id, function))
        .collect()
}

/// The function and file of each location in `go tool pprof -raw` output, by location id: its
/// lines read `ID: 0x0 [M=N] function file:line s=N()`, where the file of a native frame is its
/// object's path and of a kernel frame `[kernel]`, with line 0 (a location without a mapping
/// has no `M=`).
pub fn location_frames(raw: &str) -> BTreeMap<&str, (&str, &str)> {
    raw.lines()
        .skip_while(|l| *l != "Locations")
        .skip(1)
        .take_while(|l| *l != "Mappings")
        .filter_map(|l| {
            let (id, rest) = l.trim().split_once(':')?;
            let mut words = rest
                .split_whitespace()
                .skip(1)
                .skip_while(|w| w.starts_with("M="));
            Some((id.trim(), (words.next()?, words.next()?)))
        })
        .collect()
}
