//! `dump`: one snapshot of every thread of a process, as text: each thread's stack, whether it
//! is on the CPU or what it waits in, and whether it holds the GIL. The `dump` command prints
//! it; the service writes it next to the profiles when a thread stalls.

use std::io::{self, Write};
use std::ops::Range;

use crate::aggregate::WaitReason;
use crate::discovery::{locate_runtime, DiscoveryError};
use crate::sampler::blocking::PausedThreads;
use crate::sampler::off_cpu::{blocked_in, syscall_name, wait_reason};
use crate::unwind::{
    GilState, LostThread, StackLoss, ThreadOutcome, UnwindError, UnwindOptions, Unwinder,
};

/// Why a process could not be dumped.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// Not a CPython process, gone, or unreadable.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// Its threads could not be read.
    #[error(transparent)]
    Unwind(#[from] UnwindError),
    /// The text could not be written.
    #[error("writing the dump: {0}")]
    Write(#[from] io::Error),
}

/// Writes the snapshot of process `pid` to `out`: a header naming the interpreter, then each
/// thread with its state and its frames, innermost first.
pub fn write(pid: u32, options: UnwindOptions, out: &mut dyn Write) -> Result<(), DumpError> {
    let target = locate_runtime(pid)?;
    writeln!(
        out,
        "Process {} (CPython {}{}, {} {})",
        target.pid,
        target.version(),
        if target.offsets.free_threaded {
            ", free-threaded"
        } else {
            ""
        },
        if target.shared_libpython {
            "shared libpython"
        } else {
            "runtime in"
        },
        target.object_path.display()
    )?;
    // A snapshot: a thread whose stack moves under every read is stopped and read exactly
    // (`read_stopped`) rather than shown as read on the move.
    let options = UnwindOptions {
        keep_moved_top: false,
        ..options
    };
    let mut unwinder = Unwinder::new(target, options);
    // The GIL's words, to tell a thread waiting for it from one waiting on another futex (the
    // main interpreter's: sub-interpreters with their own GIL are shown as waiting on a lock).
    let gil = unwinder
        .threads()
        .ok()
        .and_then(|_| unwinder.main_gil_words());
    for outcome in unwinder.sample_round(|_| true)? {
        let s = match outcome {
            ThreadOutcome::Stack(s) => s,
            ThreadOutcome::Lost(lost) => match read_stopped(&mut unwinder, &lost)? {
                ThreadOutcome::Stack(s) => s,
                ThreadOutcome::Lost(lost) => {
                    writeln!(
                        out,
                        "\nThread {}{}\n    (no stack: {})",
                        lost.tid,
                        quoted_name(lost.thread_name.as_deref()),
                        lost.reason
                    )?;
                    continue;
                }
            },
        };
        let name = quoted_name(s.thread_name.as_deref());
        let host_tid = unwinder.host_tid(s.tid);
        let holds_gil = s.gil.map(|g| g == GilState::Held);
        let state = thread_state(pid, host_tid, holds_gil, gil.clone());
        writeln!(out, "\nThread {}{} ({state})", s.tid, name)?;
        if s.frames.is_empty() {
            writeln!(out, "    (no Python frames)")?;
        }
        for f in &s.frames {
            writeln!(out, "    {f}")?;
        }
        if s.truncated {
            writeln!(out, "    ... (truncated)")?;
        }
    }
    Ok(())
}

/// ` "name"`, or nothing for a thread without a name.
fn quoted_name(name: Option<&str>) -> String {
    name.map(|n| format!(" \"{n}\"")).unwrap_or_default()
}

/// What `dump` says of a thread besides its stack: on or off the CPU, what it waits in (the
/// reason and system call, as off-CPU profiles label it), and whether it holds the GIL.
fn thread_state(
    pid: u32,
    host_tid: Option<u32>,
    holds_gil: Option<bool>,
    gil: Option<Range<u64>>,
) -> String {
    let task_state = host_tid.and_then(|tid| {
        procfs::process::Process::new(pid as i32)
            .ok()?
            .task_from_tid(tid as i32)
            .ok()?
            .stat()
            .ok()
            .map(|s| s.state)
    });
    let blocked = host_tid.and_then(|tid| blocked_in(pid, tid));
    let wait = blocked.map(|b| wait_reason(b.class, b.wait_addr, gil));
    let mut parts = vec![match (task_state, blocked, wait) {
        (_, Some(b), Some(wait)) => match syscall_name(b.nr) {
            Some(call) => format!("waiting: {wait} in {call}"),
            None => format!("waiting: {wait} in system call {}", b.nr),
        },
        (Some('R'), _, _) => "on CPU".to_string(),
        (Some(state), _, _) => format!("off CPU, state {state}"),
        (None, _, _) => "state unknown".to_string(),
    }];
    match holds_gil {
        // Blocked on the GIL's own futex: it has just released it, whatever `last_holder` says.
        _ if wait == Some(WaitReason::Gil) => {}
        Some(true) => parts.push("holds the GIL".to_string()),
        Some(false) => parts.push("GIL not held".to_string()),
        None => {}
    }
    parts.join(", ")
}

/// `dump` is one snapshot, so it must show every thread: a thread whose stack moved under every
/// re-read is stopped (that thread alone, briefly) and read once more.
fn read_stopped(unwinder: &mut Unwinder, lost: &LostThread) -> Result<ThreadOutcome, UnwindError> {
    let Some(host_tid) = unwinder.host_tid(lost.tid) else {
        return Ok(ThreadOutcome::Lost(lost.clone()));
    };
    tracing::debug!(tid = lost.tid, reason = %lost.reason, "stopping the thread to read it");
    let paused = match PausedThreads::pause_thread(host_tid) {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(tid = lost.tid, error = %e, "cannot stop the thread for a re-read");
            return Ok(ThreadOutcome::Lost(LostThread {
                reason: StackLoss::NotPaused,
                ..lost.clone()
            }));
        }
    };
    let outcome = unwinder.sample_thread_again(lost.tid)?;
    drop(paused);
    Ok(outcome)
}
