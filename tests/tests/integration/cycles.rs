//! Reliability issue: a looping frame chain. A frame whose `previous` leads back to a frame
//! already walked (corrupt memory) used to give a fake 1,024-frame stack of one function in
//! eBPF mode, and `dump` could leave such a thread out. The test target's chains are corrupted
//! from outside with `process_vm_writev`, as a stray write in an extension would.

use std::time::Duration;

use pyagent::memory::{ProcessMemory, RemoteMemory};
use pyagent::unwind::{ThreadInfo, ThreadSample, UnwindOptions, Unwinder};
use pyagent_tests::agent::{number_before, pyagent_bin, record_collapsed, run_pyagent};
use pyagent_tests::stacks::{sample_until, simple, unwinder};
use pyagent_tests::PythonProcess;
use rstest_reuse::apply;

use crate::representative;

/// An aligned address that no process maps (the top of the lower half is never handed out).
const GARBAGE_FRAME: u64 = 0x7fff_ffff_0000;

/// How the test corrupts the main thread's chain.
#[derive(Debug, Clone, Copy)]
enum Loop {
    /// spin_main's frame is its own caller
    SelfLoop,
    /// spin_main's caller names spin_main as its caller: a loop of two frames
    TwoFrames,
}

/// cycles.py on `py`, with every thread in its parking function.
fn parked_target(py: &str, threads: bool) -> (PythonProcess, Unwinder) {
    pyagent_bin(); // built before any target starts: a slow build must not outlive it
    let args: &[&str] = if threads { &["threads"] } else { &[] };
    let p = PythonProcess::ready(py, "cycles.py", args);
    let want = if threads { 2 } else { 1 };
    let mut u = unwinder(p.pid(), UnwindOptions::default());
    sample_until(
        &mut u,
        Duration::from_secs(20),
        |samples: &[ThreadSample]| {
            let parked = samples.iter().filter(|s| {
                let top = simple(s).first().map(|f| f.0.clone()).unwrap_or_default();
                top == "spin_main" || top == "park_worker"
            });
            parked.count() == want
        },
    );
    (p, u)
}

/// The thread states of the target, main thread first.
fn thread_states(u: &mut Unwinder, pid: u32) -> Vec<ThreadInfo> {
    let mut threads: Vec<ThreadInfo> = u
        .threads()
        .expect("thread list")
        .into_iter()
        .flat_map(|(_, t)| t)
        .collect();
    threads.sort_by_key(|t| t.native_thread_id != pid);
    threads
}

/// Writes `previous` of the frame at `frame`.
fn set_previous(u: &Unwinder, frame: u64, previous: u64) {
    let off = u.target().offsets.interpreter_frame.previous;
    RemoteMemory::new(u.target().pid)
        .write(frame + off, &previous.to_le_bytes())
        .expect("writing the target's frame");
}

/// `previous` of the frame at `frame`.
fn previous_of(u: &Unwinder, frame: u64) -> u64 {
    let off = u.target().offsets.interpreter_frame.previous;
    let mut b = [0u8; 8];
    RemoteMemory::new(u.target().pid)
        .read(frame + off, &mut b)
        .expect("reading the target's frame");
    u64::from_le_bytes(b)
}

fn make_loop(u: &Unwinder, main: &ThreadInfo, kind: Loop) {
    let top = main.top_frame;
    match kind {
        Loop::SelfLoop => set_previous(u, top, top),
        Loop::TwoFrames => set_previous(u, previous_of(u, top), top),
    }
}

/// The defect: 143–151 samples per 3 s run of spin_main repeated 1,024 times. Now the BPF walk
/// stops where the chain loops, the record is dropped and counted as a cyclic chain.
#[apply(representative)]
fn cyclic_frame_chain_is_dropped_and_counted_not_a_1024_frame_stack_in_ebpf_mode(
    py: &str,
    #[values(Loop::SelfLoop, Loop::TwoFrames)] kind: Loop,
) {
    let (p, mut u) = parked_target(py, false);
    let threads = thread_states(&mut u, p.pid());
    make_loop(&u, &threads[0], kind);
    let file = std::env::temp_dir().join(format!("pyagent-cycles-{py}-{kind:?}.txt"));
    let (text, err) = record_collapsed(p.pid(), &["--mode", "ebpf", "-d", "3"], &file);
    for line in text.lines() {
        let spins = line
            .split(';')
            .filter(|f| f.starts_with("spin_main ("))
            .count();
        assert!(
            spins <= 1,
            "{py} {kind:?}: a looping stack was kept: {line:.300}"
        );
    }
    let cyclic = number_before(&err, " cyclic chains");
    assert!(cyclic >= 10, "{py} {kind:?}: loops not counted: {err}");
}

/// The defect: `dump` listed 1 of 2 threads, exit 0, when a thread's chain was garbage or
/// looped. Now every thread is listed, with the reason when it has no stack; and `record`
/// counts the looping thread's ticks by that reason, without re-reading it all tick long.
#[apply(representative)]
fn dump_lists_a_thread_whose_frame_chain_loops_or_is_garbage(py: &str) {
    let (p, mut u) = parked_target(py, true);
    let threads = thread_states(&mut u, p.pid());
    assert_eq!(threads.len(), 2, "{py}: {threads:?}");
    let (main, worker) = (threads[0], threads[1]);
    make_loop(&u, &main, Loop::SelfLoop);
    set_previous(&u, worker.top_frame, GARBAGE_FRAME);
    let out = run_pyagent(&["dump", "--pid", &p.pid().to_string()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{py}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let entry = |tid: u32| {
        let head = format!("\nThread {tid}");
        let at = text
            .find(&head)
            .unwrap_or_else(|| panic!("{py}: thread {tid} not listed:\n{text}"));
        text[at..]
            .lines()
            .nth(2)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    assert_eq!(
        entry(main.native_thread_id),
        "(no stack: frame chain loops back on itself)",
        "{py}: the looping main thread:\n{text}"
    );
    assert!(
        entry(worker.native_thread_id).starts_with("(no stack: "),
        "{py}: the garbage worker thread:\n{text}"
    );

    // The userspace sampler drops and counts the looping thread's ticks by the same reason.
    let file = std::env::temp_dir().join(format!("pyagent-cycles-user-{py}.txt"));
    let (text, err) = record_collapsed(p.pid(), &["-d", "1"], &file);
    let loops = number_before(&err, " frame chain loops back on itself");
    assert!(loops >= 10, "{py}: looping ticks not counted: {err}");
    // A loop that stays is not read again for the whole re-read budget of every tick.
    let rereads = number_before(&err, " re-reads");
    assert!(rereads <= 3 * loops, "{py}: {rereads} re-reads: {err}");
    assert!(
        !text.contains("spin_main ("),
        "{py}: a looping stack was kept:\n{text:.600}"
    );
}
