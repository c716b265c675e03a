//! Helpers shared by the library's unit tests.

use std::path::Path;
use std::process::Command;

/// Runs `go tool pprof ARGS FILE` (the real consumer of our profiles) with HOME and caches in
/// `dir`, and returns its stdout; panics with its stderr on failure, or naming the package when
/// Go is missing.
pub fn go_pprof(dir: &Path, args: &[&str], file: &Path) -> String {
    let output = Command::new("go")
        .arg("tool")
        .arg("pprof")
        .args(args)
        .arg(file)
        // pprof and go want writable homes and caches; keep them out of the user's.
        .env("HOME", dir)
        .env("GOCACHE", dir.join("gocache"))
        .env("PPROF_TMPDIR", dir.join("pprof"))
        .output()
        .unwrap_or_else(|err| {
            panic!("cannot run `go tool pprof` ({err}); install Go: apt-get install golang-go")
        });
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "go tool pprof {args:?} failed: {}\n{}\n{stdout}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// A fresh directory under the system's temporary directory, removed when the value is dropped.
pub fn temp_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("pyagent-{tag}-"))
        .tempdir()
        .expect("create a temporary directory")
}
