//! `dump`: one snapshot of every thread of a process: each thread's stack, whether it is on the
//! CPU or what it waits in, whether it holds the GIL, and for a thread waiting for the GIL, the
//! thread that holds it and where. [`snapshot`] takes it as typed values; [`write_text`] renders
//! it as `dump` prints it, and `dump --json` serializes it. The service writes the text next to
//! the profiles when a thread stalls.
//!
//! With native stacks (`dump --native`), the process's threads are stopped (ptrace) around the
//! read, and each thread's registers and stack copy are unwound and merged with its Python
//! frames, as `record --native` does in userspace mode.

use std::collections::HashMap;
use std::io::{self, Write};
use std::ops::Range;

use serde::Serialize;

use crate::aggregate::WaitReason;
use crate::discovery::{locate_runtime, task_ids, DiscoveryError};
use crate::offsets::Evaluations;
use crate::sampler::blocking::{PausedThreads, SeizeStats};
use crate::sampler::native_copy::copy_stopped_thread;
use crate::sampler::off_cpu::{blocked_in, syscall_name, wait_reason};
use crate::symbolize::native::DebugDirs;
use crate::symbolize::{Frame, FrameKind};
use crate::unwind::native::{NativeMixer, NativeUnwinder};
use crate::unwind::{
    AsyncTask, AsyncioError, GilState, Greenlet, GreenletError, GreenletState, LostThread,
    StackLoss, ThreadOutcome, ThreadSample, UnwindError, UnwindOptions, Unwinder,
};
use common::NativeSection;

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
    /// Its greenlets could not be read (`dump --greenlets`).
    #[error(transparent)]
    Greenlets(#[from] GreenletError),
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
    /// Native stacks only (`dump --native`): why this thread has its Python frames alone (its
    /// registers or stack could not be copied, or its native stack did not match its Python
    /// one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub native_missing: Option<String>,
    /// Waiting for the GIL only: the thread that holds it (`null`: none could be named).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gil_holder: Option<Option<GilHolder>>,
}

/// The thread holding the GIL, as a thread waiting for it names it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GilHolder {
    /// Its thread id, as CPython stores it.
    pub tid: u32,
    /// Its name, when known.
    pub name: Option<String>,
    /// Its innermost Python function (`None`: no Python frames).
    pub function: Option<String>,
    /// That function's file.
    pub file: Option<String>,
    /// The line it executes.
    pub line: Option<u32>,
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
    /// `python`, `native` (the `<native>` marker), `gc`, `task`, `native_code` (a function of
    /// a loaded object) or `kernel`.
    pub kind: &'static str,
    /// Native code: the object's file name (`libz.so.1.2.13`), or `[kernel]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
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
                FrameKind::TruncatedNative => "truncated_native",
                FrameKind::Moved => "moved",
                FrameKind::NativeCode => "native_code",
                FrameKind::Kernel => "kernel",
            },
            object: f.code.object.as_ref().map(|o| o.file_name().to_string()),
        }
    }
}

/// Takes the snapshot of process `pid`. With `native` (the directories separate debug files
/// are looked for in), every thread of the process is stopped around the read and its native
/// frames are merged with its Python ones; `options.native` must then be on (the merge needs
/// the `<native>` boundaries).
pub fn snapshot(
    pid: u32,
    options: UnwindOptions,
    native: Option<&DebugDirs>,
) -> Result<ProcessDump, DumpError> {
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
        native: options.native || native.is_some(),
        ..options
    };
    let mut unwinder = Unwinder::new(target, options);
    // The GIL's words, to tell a thread waiting for it from one waiting on another futex (the
    // main interpreter's: sub-interpreters with their own GIL are shown as waiting on a lock).
    let gil = unwinder
        .threads()
        .ok()
        .and_then(|_| unwinder.main_gil_words());
    // Native stacks: the threads' states are read before they are stopped (a stopped thread
    // is `t`, and no longer in its system call), then the whole process is stopped.
    let mut stopped = native.map(|dirs| {
        let states: HashMap<u32, (ThreadState, bool)> = task_ids(pid)
            .into_iter()
            .map(|t| (t.host_tid, thread_state(pid, Some(t.host_tid), gil.clone())))
            .collect();
        let paused = PausedThreads::pause(pid, &mut SeizeStats::default());
        Stopped {
            states,
            native: NativeUnwinder::new(pid, dirs.clone()),
            mix: NativeMixer::default(),
            evaluations: unwinder.offsets().frame.evaluations(),
            copy: Vec::new(),
            _paused: paused,
        }
    });
    let mut waits_for_gil = Vec::new();
    for outcome in unwinder.sample_round(|_| true)? {
        let outcome = match outcome {
            // The whole process is stopped: the stack can no longer move, read it again.
            ThreadOutcome::Lost(lost) if stopped.is_some() => {
                unwinder.sample_thread_again(lost.tid)?
            }
            ThreadOutcome::Lost(lost) => read_stopped(&mut unwinder, &lost)?,
            stack => stack,
        };
        let thread = match outcome {
            ThreadOutcome::Stack(mut s) => {
                let host_tid = unwinder.host_tid(s.thread.ns_tid());
                let (state, waits) = match &stopped {
                    Some(st) => host_tid
                        .and_then(|t| st.states.get(&t).cloned())
                        .unwrap_or((ThreadState::Unknown, false)),
                    None => thread_state(pid, host_tid, gil.clone()),
                };
                let native_missing = stopped.as_mut().and_then(|st| st.mix_native(&mut s));
                waits_for_gil.push(waits);
                ThreadDump {
                    tid: s.thread.ns_tid(),
                    name: s.thread.thread_name.as_deref().map(str::to_string),
                    state,
                    // Blocked on the GIL's own futex: it has just released it, whatever
                    // `last_holder` says.
                    holds_gil: s.thread.gil.filter(|_| !waits).map(|g| g == GilState::Held),
                    frames: s.frames.iter().map(FrameDump::from).collect(),
                    truncated: s.truncated,
                    no_stack: None,
                    native_missing,
                    gil_holder: None,
                }
            }
            ThreadOutcome::Lost(lost) => {
                waits_for_gil.push(false);
                ThreadDump {
                    tid: lost.tid,
                    name: lost.thread_name.as_deref().map(str::to_string),
                    state: ThreadState::Unknown,
                    holds_gil: None,
                    frames: Vec::new(),
                    truncated: false,
                    no_stack: Some(lost.reason.to_string()),
                    native_missing: None,
                    gil_holder: None,
                }
            }
        };
        dump.threads.push(thread);
    }
    drop(stopped);
    let holder = gil_holder(&dump.threads);
    for (t, waits) in dump.threads.iter_mut().zip(waits_for_gil) {
        if waits {
            t.gil_holder = Some(holder.clone());
        }
    }
    Ok(dump)
}

/// The thread holding the GIL: the one thread whose state says it holds it (3.11–3.14: the
/// GIL's `last_holder` while it is locked; 3.15: the thread state's `holds_gil` flag), and not
/// blocked on the GIL's own futex (see [`snapshot`]). `None` when no thread, or more than one
/// (threads of sub-interpreters with their own GIL, or flags read at different instants), does.
fn gil_holder(threads: &[ThreadDump]) -> Option<GilHolder> {
    let mut holders = threads.iter().filter(|t| t.holds_gil == Some(true));
    let (Some(h), None) = (holders.next(), holders.next()) else {
        return None;
    };
    let top = h.frames.iter().find(|f| f.kind == "python");
    Some(GilHolder {
        tid: h.tid,
        name: h.name.clone(),
        function: top.map(|f| f.function.clone()),
        file: top.map(|f| f.file.clone()),
        line: top.and_then(|f| f.line),
    })
}

/// A process stopped for its native stacks (`dump --native`); it resumes when this is dropped.
struct Stopped {
    /// each thread's state (and whether it waits for the GIL) by host TID, read before it was
    /// stopped
    states: HashMap<u32, (ThreadState, bool)>,
    native: NativeUnwinder,
    mix: NativeMixer,
    /// how its stacks divide into evaluations
    evaluations: Evaluations,
    copy: Vec<u8>,
    _paused: PausedThreads,
}

impl Stopped {
    /// Merges the native stack of the stopped thread of `sample` into its frames; on failure,
    /// why its Python frames are shown alone.
    fn mix_native(&mut self, sample: &mut ThreadSample) -> Option<String> {
        let regs = match copy_stopped_thread(sample.thread.tid, &mut self.copy) {
            Ok(regs) => regs,
            Err(e) => return Some(format!("no native stack: {e}")),
        };
        let section = NativeSection::from_user_copy(regs.ip, regs.sp, regs.bp, &self.copy);
        let mismatched = self.mix.counts.mismatch;
        self.mix
            .merge_into(&mut self.native, &section, sample, self.evaluations);
        (self.mix.counts.mismatch != mismatched).then(|| {
            "no native stack: its eval-loop frames did not match its Python frames".to_string()
        })
    }
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

/// The greenlets of one process (`dump --greenlets`).
#[derive(Debug, Clone, Serialize)]
pub struct GreenletsDump {
    /// Host PID.
    pub pid: u32,
    /// CPython version.
    pub python_version: String,
    /// Every greenlet, in the garbage collector's list order.
    pub greenlets: Vec<Greenlet>,
}

/// Reads every greenlet of process `pid`, the parked ones with their frames.
pub fn snapshot_greenlets(pid: u32, options: UnwindOptions) -> Result<GreenletsDump, DumpError> {
    let target = locate_runtime(pid)?;
    let python_version = target.version().to_string();
    let mut unwinder = Unwinder::new(target, options);
    let greenlets = unwinder.greenlets()?;
    Ok(GreenletsDump {
        pid,
        python_version,
        greenlets,
    })
}

/// Writes the greenlets: a count by state, then each greenlet with its state and, for a
/// parked one, its frames innermost first, as `dump` prints a thread's.
pub fn write_greenlets(dump: &GreenletsDump, out: &mut dyn Write) -> io::Result<()> {
    let count = |s| dump.greenlets.iter().filter(|g| g.state == s).count();
    writeln!(
        out,
        "Process {} (CPython {}): {} greenlets ({} running, {} parked, {} not started, {} dead)",
        dump.pid,
        dump.python_version,
        dump.greenlets.len(),
        count(GreenletState::Running),
        count(GreenletState::Parked),
        count(GreenletState::NotStarted),
        count(GreenletState::Dead),
    )?;
    for g in &dump.greenlets {
        let state = match g.state {
            GreenletState::Running => "running: its frames are its thread's stack",
            GreenletState::Parked => "parked",
            GreenletState::NotStarted => "not started",
            GreenletState::Dead => "dead",
        };
        let main = if g.main {
            ", a thread's main greenlet"
        } else {
            ""
        };
        writeln!(out, "\nGreenlet {:#x} {} ({state}{main})", g.id, g.kind)?;
        for f in &g.frames {
            match f.line {
                Some(line) => writeln!(out, "    {} ({}:{line})", f.function, f.file)?,
                None => writeln!(out, "    {} ({})", f.function, f.file)?,
            }
        }
    }
    Ok(())
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
    write_text(&snapshot(pid, options, None)?, out)?;
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
        if let Some(holder) = &t.gil_holder {
            writeln!(out, "    {}", holder_line(holder.as_ref()))?;
        }
        if let Some(why) = &t.native_missing {
            writeln!(out, "    ({why}; Python frames only)")?;
        }
        if t.frames.is_empty() {
            writeln!(out, "    (no Python frames)")?;
        }
        for f in &t.frames {
            match (f.kind, f.line, &f.object) {
                ("python", Some(line), _) => {
                    writeln!(out, "    {} ({}:{line})", f.function, f.file)?
                }
                ("python", None, _) => writeln!(out, "    {} ({})", f.function, f.file)?,
                // As the collapsed and pprof exporters name them: `deflate [libz.so.1.2.13]`.
                (_, _, Some(o)) if o.starts_with('[') => writeln!(out, "    {} {o}", f.function)?,
                (_, _, Some(o)) => writeln!(out, "    {} [{o}]", f.function)?,
                _ => writeln!(out, "    {}", f.function)?,
            }
        }
        if t.truncated {
            writeln!(out, "    ... (truncated)")?;
        }
    }
    Ok(())
}

/// `waiting for the GIL held by thread 12 "spinner" in spin (app.py:7)`.
fn holder_line(holder: Option<&GilHolder>) -> String {
    let Some(h) = holder else {
        return "waiting for the GIL held by an unknown thread".to_string();
    };
    let name = h
        .name
        .as_deref()
        .map(|n| format!(" \"{n}\""))
        .unwrap_or_default();
    let at = match (&h.function, &h.file, h.line) {
        (Some(f), Some(file), Some(line)) => format!(" in {f} ({file}:{line})"),
        (Some(f), Some(file), None) => format!(" in {f} ({file})"),
        _ => " (no Python frames)".to_string(),
    };
    format!("waiting for the GIL held by thread {}{name}{at}", h.tid)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, file: &str, line: Option<u32>, kind: &'static str) -> FrameDump {
        FrameDump {
            function: function.to_string(),
            file: file.to_string(),
            line,
            kind,
            object: None,
        }
    }

    fn thread(tid: u32, name: &str, holds_gil: Option<bool>, frames: Vec<FrameDump>) -> ThreadDump {
        ThreadDump {
            tid,
            name: Some(name.to_string()),
            state: ThreadState::OnCpu,
            holds_gil,
            frames,
            truncated: false,
            no_stack: None,
            native_missing: None,
            gil_holder: None,
        }
    }

    fn text(threads: Vec<ThreadDump>) -> String {
        let dump = ProcessDump {
            pid: 1,
            python_version: "3.12.1".to_string(),
            free_threaded: false,
            shared_libpython: false,
            runtime_object: "/usr/bin/python3.12".to_string(),
            threads,
        };
        let mut out = Vec::new();
        write_text(&dump, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// The holder is the one thread saying it holds the GIL, named by its innermost Python
    /// frame (a native frame above it is skipped); two such threads name none.
    #[test]
    fn the_holder_is_the_one_thread_holding_the_gil() {
        let mut native = frame("deflate", "/lib/libz.so.1", None, "native_code");
        native.object = Some("libz.so.1".to_string());
        let spin = frame("spin", "app.py", Some(7), "python");
        let holder = thread(12, "spinner", Some(true), vec![native, spin]);
        let waiter = thread(13, "w", Some(false), vec![]);
        assert_eq!(
            gil_holder(&[waiter.clone(), holder.clone()]),
            Some(GilHolder {
                tid: 12,
                name: Some("spinner".to_string()),
                function: Some("spin".to_string()),
                file: Some("app.py".to_string()),
                line: Some(7),
            })
        );
        assert_eq!(gil_holder(&[holder.clone(), holder]), None);
        assert_eq!(gil_holder(&[waiter]), None);
    }

    /// A waiting thread's holder line comes first under it, then a native stack's absence,
    /// then the frames, native ones as the exporters name them.
    #[test]
    fn text_names_the_holder_and_native_frames() {
        let mut native = frame("deflate", "/lib/libz.so.1", None, "native_code");
        native.object = Some("libz.so.1".to_string());
        let mut kernel = frame("do_syscall_64", "[kernel]", None, "kernel");
        kernel.object = Some("[kernel]".to_string());
        let mut holder = thread(12, "spinner", Some(true), vec![kernel, native]);
        holder
            .frames
            .push(frame("spin", "app.py", Some(7), "python"));
        let mut waiter = thread(13, "w", None, vec![frame("f", "app.py", Some(3), "python")]);
        waiter.gil_holder = Some(gil_holder(std::slice::from_ref(&holder)));
        waiter.native_missing = Some("no native stack: gone".to_string());
        let mut lost = thread(14, "x", None, vec![]);
        lost.gil_holder = Some(None);
        let out = text(vec![waiter, holder, lost]);
        assert!(
            out.contains(
                "Thread 13 \"w\" (on CPU)\n    waiting for the GIL held by thread 12 \
                 \"spinner\" in spin (app.py:7)\n    (no native stack: gone; Python frames \
                 only)\n    f (app.py:3)\n"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "    do_syscall_64 [kernel]\n    deflate [libz.so.1]\n    spin (app.py:7)\n"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "Thread 14 \"x\" (on CPU)\n    waiting for the GIL held by an unknown thread\n    \
                 (no Python frames)\n"
            ),
            "{out}"
        );
    }
}
