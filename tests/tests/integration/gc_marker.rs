//! Reliability issue: `<GC>` was never shown on free-threaded builds. Before 3.15 CPython says
//! only that an interpreter is collecting, and the marker went to the thread holding the GIL,
//! which a free-threaded build does not have (py-spy's gc.py: 22 of 99 samples inside
//! `gc.collect()`, no `<GC>`). Now it goes to the thread running the collection.

use pyagent_tests::agent::{pyagent_bin, record_collapsed};
use pyagent_tests::PythonProcess;
use rstest::rstest;

/// `record` (userspace) of gc_loop.py for 3 s: samples of the collecting main thread show
/// `<GC>` on top of its stack, and the sleeping thread never has one.
#[rstest]
fn gc_marker_is_on_the_collecting_thread_of_free_threaded_builds(
    // The regression's own pair: 3.13t, where the marker went missing, and 3.13, its GIL twin.
    #[values("py313t", "py313")] py: &str,
) {
    pyagent_bin(); // built before the target starts: a slow build must not outlive it
    let p = PythonProcess::ready(py, "gc_loop.py", &[]);
    let file = std::env::temp_dir().join(format!("pyagent-gc-{py}-{}.txt", std::process::id()));
    let (text, _) = record_collapsed(p.pid(), &["-d", "3"], &file);
    let count = |line: &str| -> u64 {
        let (_, n) = line.rsplit_once(' ').expect("a count");
        n.parse().expect("numeric count")
    };
    let main_thread = |line: &str| {
        let rest = line.strip_prefix(&format!("thread {}", p.pid()));
        rest.is_some_and(|r| r.starts_with(' ') || r.starts_with(';'))
    };
    let mut in_gc = 0;
    for line in text.lines().filter(|l| l.contains("<GC>")) {
        assert!(main_thread(line), "{py}: `<GC>` on another thread: {line}");
        let (stack, _) = line.rsplit_once(' ').expect("a count");
        let frames: Vec<&str> = stack.split(';').collect();
        // Explicit `gc.collect()` calls and collections an allocation set off (in
        // `Node.__init__`): either way on top of the collecting thread's stack, under churn.
        assert!(
            frames.last() == Some(&"<GC>") && frames.iter().any(|f| f.starts_with("churn (")),
            "{py}: `<GC>` not on top of churn's stack: {line}"
        );
        in_gc += count(line);
    }
    let total: u64 = text.lines().filter(|l| main_thread(l)).map(count).sum();
    // py-spy's gc.py spends about a fifth of its time collecting; this target more.
    assert!(
        in_gc * 10 >= total,
        "{py}: {in_gc} of {total} main-thread samples in `<GC>`:\n{text}"
    );
}
