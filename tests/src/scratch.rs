//! Scratch directories of the tests, under the system's temporary directory.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

/// `pyagent-TAG-PID-N` under the temporary directory, removed if a previous run left it, not
/// created: for a program under test that creates it. N counts the calls in this test binary,
/// so tests running in parallel never share one.
pub fn fresh_path(tag: &str) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "pyagent-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&path);
    path
}

/// [`fresh_path`], created empty.
pub fn fresh_dir(tag: &str) -> PathBuf {
    let dir = fresh_path(tag);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}
