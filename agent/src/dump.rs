//! `dump`: one snapshot of every thread of a process: each thread's stack, whether it is on the
//! CPU or what it waits in, and whether it holds the GIL. [`snapshot`] takes it
//! as typed values; [`write_text`] renders it as `dump` prints it, and `dump --json` serializes
//! it. The service writes the text next to the profiles when a thread stalls.

use std::io::{self, Write};
use std::ops::Range;

use serde::Serialize;

use crate::aggregate::WaitReason;
use crate::discovery::{locate_runtime, DiscoveryError};
use crate::sampler::blocking::PausedThreads;
use crate::sampler::off_cpu::{blocked_in, syscall_name, wait_reason};
use crate::symbolize::{Frame, FrameKind};
use crate::unwind::{
    AsyncTask, AsyncioError, GilState, LostThread, StackLoss, ThreadOutcome, UnwindError,
    UnwindOptions, Unwinder,
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
    /// Its asyncio tasks could not be read (`dump --async`).
    #[error(transparent)]
    Asyncio(#[from] AsyncioError),
    /// The text could not be written.
    #[error("writing the dump: {0}")]
    Write(#[from] io::Error),
}

/// One snapshot of a process.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessDump {
    /// Host PID.
    pub pid: u32,
    /// CPython version (`3.12.1`).
    pub python_version: String,
    /// A free-threaded build (no GIL).
    pub free_threaded: bool,
    /// The runtime is in a shared libpython (else in the executable).
    pub shared_libpython: bool,
    /// The file holding the runtime.
    pub runtime_object: String,
    /// Every thread, in the interpreter's thread-list order.
    pub threads: Vec<ThreadDump>,
}

/// One thread of a [`ProcessDump`].
#[derive(Debug, Clone, Serialize)]
pub struct ThreadDump {
    /// Thread id, as CPython stores it (the process's PID namespace).
    pub tid: u32,
    /// Thread name, when known.
    pub name: Option<String>,
    /// On or off the CPU, and what it waits in.
    pub state: ThreadState,
    /// Whether it holds the GIL (`None`: a free-threaded build, or blocked on the GIL itself).
    pub holds_gil: Option<bool>,
    /// Frames, innermost first (empty: no Python frames, or no stack).
    pub frames: Vec<FrameDump>,
    /// The walk stopped before the bottom of the stack.
    pub truncated: bool,
    /// Why the stack could not be read, when it could not.
    pub no_stack: Option<String>,
}

/// What a thread was doing.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ThreadState {
    /// Running or runnable.
    OnCpu,
    /// Blocked in a system call.
    Waiting {
        /// The wait reason, as off-CPU profiles label it (`io`, `sleep`, `lock`, `gil`, `other`).
        wait: &'static str,
        /// The system call's name, or its number.
        syscall: String,
    },
    /// Off the CPU outside a system call (the task state letter from `/proc`).
    OffCpu {
        /// `S`, `D`, `T`, ...
        task_state: char,
    },
    /// The thread's task could not be read.
    Unknown,
}

/// One frame of a [`ThreadDump`].
#[derive(Debug, Clone, Serialize)]
pub struct FrameDump {
    /// Qualified name, or `<native>` / `<GC>`.
    pub function: String,
    /// File (`~` for pseudo-frames).
    pub file: String,
    /// Line being executed.
    pub line: Option<u32>,
    /// `python`, `native`, `gc` or `task`.
    pub kind: &'static str,
}

impl From<&Frame> for FrameDump {
    fn from(f: &Frame) -> FrameDump {
        FrameDump {
            function: f.function().to_string(),
            file: f.file().to_string(),
            line: f.line,
            kind: match f.kind {
                FrameKind::Python => "python",
                FrameKind::Native => "native",
                FrameKind::Gc => "gc",
                FrameKind::Task => "task",
                FrameKind::NativeCode => "native_code",
                FrameKind::Kernel => "kernel",
            },
        }
    }
}

/// Takes the snapshot of process `pid`.
pub fn snapshot(pid: u32, options: UnwindOptions) -> Result<ProcessDump, DumpError> {
    let target = locate_runtime(pid)?;
    let mut dump = ProcessDump {
        pid: target.pid,
        python_version: target.version().to_string(),
        free_threaded: target.offsets.free_threaded,
        shared_libpython: target.shared_libpython,
        runtime_object: target.object_path.display().to_string(),
        threads: Vec::new(),
    };
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
        let outcome = match outcome {
            ThreadOutcome::Lost(lost) => read_stopped(&mut unwinder, &lost)?,
            stack => stack,
        };
        let thread = match outcome {
            ThreadOutcome::Stack(s) => {
                let host_tid = unwinder.host_tid(s.thread.ns_tid());
                let (state, waits_for_gil) = thread_state(pid, host_tid, gil.clone());
                ThreadDump {
                    tid: s.thread.ns_tid(),
                    name: s.thread.thread_name.as_deref().map(str::to_string),
                    state,
                    // Blocked on the GIL's own futex: it has just released it, whatever
                    // `last_holder` says.
                    holds_gil: s
                        .thread
                        .gil
                        .filter(|_| !waits_for_gil)
                        .map(|g| g == GilState::Held),
                    frames: s.frames.iter().map(FrameDump::from).collect(),
                    truncated: s.truncated,
                    no_stack: None,
                }
            }
            ThreadOutcome::Lost(lost) => ThreadDump {
                tid: lost.tid,
                name: lost.thread_name.as_deref().map(str::to_string),
                state: ThreadState::Unknown,
                holds_gil: None,
                frames: Vec::new(),
                truncated: false,
                no_stack: Some(lost.reason.to_string()),
            },
        };
        dump.threads.push(thread);
    }
    Ok(dump)
}

/// The asyncio tasks of one process (`dump --async`).
#[derive(Debug, Clone, Serialize)]
pub struct TasksDump {
    /// Host PID.
    pub pid: u32,
    /// CPython version.
    pub python_version: String,
    /// Every task: each thread's, then those of exited threads.
    pub tasks: Vec<AsyncTask>,
}

/// Reads every asyncio task of process `pid`, with its coroutine stack and awaiters.
pub fn snapshot_tasks(pid: u32, options: UnwindOptions) -> Result<TasksDump, DumpError> {
    let target = locate_runtime(pid)?;
    let python_version = target.version().to_string();
    let mut unwinder = Unwinder::new(target, options);
    let tasks = unwinder.asyncio_tasks()?;
    Ok(TasksDump {
        pid,
        python_version,
        tasks,
    })
}

/// Writes the tasks as a tree, in the style of `python -m asyncio pstree`: each root task (one
/// nobody awaits), its coroutine stack outermost first, and under its innermost frame the tasks
/// it awaits, and so on. A task met again on its own path (an await cycle) is named, not
/// followed.
pub fn write_task_tree(dump: &TasksDump, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "Process {} (CPython {}): {} asyncio task{}",
        dump.pid,
        dump.python_version,
        dump.tasks.len(),
        if dump.tasks.len() == 1 { "" } else { "s" }
    )?;
    let known: std::collections::HashSet<u64> = dump.tasks.iter().map(|t| t.id).collect();
    let mut roots: Vec<&AsyncTask> = dump
        .tasks
        .iter()
        .filter(|t| !t.awaited_by.iter().any(|a| known.contains(a)))
        .collect();
    if roots.is_empty() {
        // Every task is awaited by another: a cycle; start anywhere.
        roots.extend(dump.tasks.first());
    }
    let mut path = Vec::new();
    for (i, root) in roots.iter().enumerate() {
        write_task(dump, root, "", i + 1 == roots.len(), &mut path, out)?;
    }
    Ok(())
}

fn write_task(
    dump: &TasksDump,
    task: &AsyncTask,
    prefix: &str,
    last: bool,
    path: &mut Vec<u64>,
    out: &mut dyn Write,
) -> io::Result<()> {
    let branch = if last { "└── " } else { "├── " };
    let state = if task.running { "running" } else { "waiting" };
    let thread = task
        .thread
        .map_or_else(|| "thread exited".to_string(), |t| format!("thread {t}"));
    if path.contains(&task.id) {
        return writeln!(
            out,
            "{prefix}{branch}(T) {} (await cycle: already above)",
            task.name
        );
    }
    writeln!(out, "{prefix}{branch}(T) {} [{state}, {thread}]", task.name)?;
    let mut inner = format!("{prefix}{}", if last { "    " } else { "│   " });
    for f in &task.coroutine {
        let line = f.line.map(|l| format!(":{l}")).unwrap_or_default();
        writeln!(out, "{inner}└──  {} {}{line}", f.function, f.file)?;
        inner.push_str("    ");
    }
    let children: Vec<&AsyncTask> = dump
        .tasks
        .iter()
        .filter(|t| t.awaited_by.contains(&task.id))
        .collect();
    path.push(task.id);
    for (i, child) in children.iter().enumerate() {
        write_task(dump, child, &inner, i + 1 == children.len(), path, out)?;
    }
    path.pop();
    Ok(())
}

/// Writes the snapshot of process `pid` as text (what `dump` prints).
pub fn write(pid: u32, options: UnwindOptions, out: &mut dyn Write) -> Result<(), DumpError> {
    write_text(&snapshot(pid, options)?, out)?;
    Ok(())
}

/// A header naming the interpreter, then each thread with its state and its frames, innermost
/// first.
pub fn write_text(dump: &ProcessDump, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "Process {} (CPython {}{}, {} {})",
        dump.pid,
        dump.python_version,
        if dump.free_threaded {
            ", free-threaded"
        } else {
            ""
        },
        if dump.shared_libpython {
            "shared libpython"
        } else {
            "runtime in"
        },
        dump.runtime_object
    )?;
    for t in &dump.threads {
        let name = t
            .name
            .as_deref()
            .map(|n| format!(" \"{n}\""))
            .unwrap_or_default();
        if let Some(why) = &t.no_stack {
            writeln!(out, "\nThread {}{name}\n    (no stack: {why})", t.tid)?;
            continue;
        }
        let mut parts = vec![match &t.state {
            ThreadState::OnCpu => "on CPU".to_string(),
            ThreadState::Waiting { wait, syscall } => format!("waiting: {wait} in {syscall}"),
            ThreadState::OffCpu { task_state } => format!("off CPU, state {task_state}"),
            ThreadState::Unknown => "state unknown".to_string(),
        }];
        match t.holds_gil {
            Some(true) => parts.push("holds the GIL".to_string()),
            Some(false) => parts.push("GIL not held".to_string()),
            None => {}
        }
        writeln!(out, "\nThread {}{name} ({})", t.tid, parts.join(", "))?;
        if t.frames.is_empty() {
            writeln!(out, "    (no Python frames)")?;
        }
        for f in &t.frames {
            match (f.kind, f.line) {
                ("python", Some(line)) => writeln!(out, "    {} ({}:{line})", f.function, f.file)?,
                ("python", None) => writeln!(out, "    {} ({})", f.function, f.file)?,
                _ => writeln!(out, "    {}", f.function)?,
            }
        }
        if t.truncated {
            writeln!(out, "    ... (truncated)")?;
        }
    }
    Ok(())
}

/// A thread's state: on or off the CPU, what it waits in (the reason and system call, as
/// off-CPU profiles label it), and whether that wait is for the GIL. How long it has waited is
/// not said: the kernel here keeps no block start (no schedstats), and `se.exec_start` is a
/// per-CPU task clock that leaves out steal time and differs between CPUs by seconds.
fn thread_state(pid: u32, host_tid: Option<u32>, gil: Option<Range<u64>>) -> (ThreadState, bool) {
    let Some(tid) = host_tid else {
        return (ThreadState::Unknown, false);
    };
    if let Some(b) = blocked_in(pid, tid) {
        let wait = wait_reason(b.class, b.wait_addr, gil);
        let state = ThreadState::Waiting {
            wait: wait.label(),
            syscall: syscall_name(b.nr)
                .map_or_else(|| format!("system call {}", b.nr), str::to_string),
        };
        return (state, wait == WaitReason::Gil);
    }
    let task_state = procfs::process::Process::new(pid as i32)
        .ok()
        .and_then(|p| p.task_from_tid(tid as i32).ok())
        .and_then(|t| t.stat().ok())
        .map(|s| s.state);
    let state = match task_state {
        Some('R') => ThreadState::OnCpu,
        Some(task_state) => ThreadState::OffCpu { task_state },
        None => ThreadState::Unknown,
    };
    (state, false)
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
