//! asyncio task stacks (CPython 3.14+): which task a thread runs, who awaits it, and every task
//! of a process with its coroutine stack.
//!
//! In: a thread's walked frames (with their addresses) and the target's `.AsyncioDebug` table.
//! Out: task-aware stacks, in the shape of CPython's own sampler (`--async-aware`, running mode):
//! the running task's frames, `<task NAME>`, the frames of the task awaiting it, `<task NAME>`,
//! … up to the root task, then the event loop's own frames. And, for `dump --async`, the whole
//! task graph ([`AsyncTask`]).
//!
//! A thread's frames belong to its running task from the top down to the task's coroutine frame,
//! found by address (the frame lives inside the coroutine object, so recursion cannot confuse
//! it). A sample whose running task's frame is not on the walked stack (the thread switched
//! tasks between the two reads) keeps its plain stack and is counted `unattributed`, never
//! attributed to a guess.

#[cfg(test)]
mod garbage_tests;
mod objects;
mod waiting;

use std::sync::Arc;
use std::time::{Duration, Instant};

use foldhash::{HashMap, HashSet, HashSetExt};
use serde::Serialize;

use super::walk::read_frame;
use super::{CachedFrame, RawFrame, ThreadInfo, UnwindError, Unwinder};
use crate::discovery::asyncio_section::asyncio_debug_address;
use crate::discovery::look_again::LookAgain;
use crate::discovery::DiscoveryError;
use crate::memory::{MemoryError, ProcessMemory};
use crate::offsets::{AsyncioDebugOffsets, AsyncioUnsupported, OffsetsError, ASYNCIO_DEBUG_LEN};
use crate::symbolize::{bytecode_base, task_code_name, CodeName, Frame, ObjectError};
use objects::{Layouts, RawTask, SettledTask};

/// First wait before looking for the table again in a process that has not imported asyncio
/// yet; doubled after each miss up to [`MAX_LOOKUP_WAIT`].
const FIRST_LOOKUP_WAIT: Duration = Duration::from_secs(1);
/// Longest wait between two looks for the table.
const MAX_LOOKUP_WAIT: Duration = Duration::from_secs(30);
/// Most awaiting tasks followed above a running one.
const MAX_AWAIT_DEPTH: usize = 64;
/// Reads of one task list before giving up on a list that changes under every read.
const LIST_READ_ATTEMPTS: usize = 20;
/// Task names remembered before the memo is cleared.
const MAX_NAMES: usize = 4096;

/// Why a process's tasks could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AsyncioError {
    /// A version before 3.14.
    #[error(transparent)]
    Unsupported(#[from] AsyncioUnsupported),
    /// No loaded object has the table: the program has not imported asyncio.
    #[error("process {pid} has not imported asyncio: no `.AsyncioDebug` table is loaded")]
    NotLoaded {
        /// host PID
        pid: u32,
    },
    /// The table is there but makes no sense.
    #[error("process {pid}: its asyncio table: {source}")]
    Table {
        /// host PID
        pid: u32,
        /// what is wrong with it
        source: OffsetsError,
    },
    /// Its maps could not be read.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// Its threads could not be read.
    #[error(transparent)]
    Unwind(#[from] UnwindError),
    /// A task list changed under every read (tasks created and finished faster than a read).
    #[error("process {pid}: a task list changed under each of {reads} reads")]
    Torn {
        /// host PID
        pid: u32,
        /// reads tried
        reads: usize,
    },
}

/// One task of a process, as `dump --async` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct AsyncTask {
    /// the task object's address (its identity while it lives)
    pub id: u64,
    /// its name (`Task-N` for unnamed ones)
    pub name: String,
    /// the thread whose task list holds it (`None`: its thread has exited)
    pub thread: Option<u32>,
    /// running on its thread right now (else waiting)
    pub running: bool,
    /// its coroutine stack, outermost first: the task's coroutine, then what it awaits
    pub coroutine: Vec<TaskFrame>,
    /// the tasks awaiting it, by id
    pub awaited_by: Vec<u64>,
}

/// One frame of a task's coroutine stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskFrame {
    /// qualified name
    pub function: String,
    /// file
    pub file: String,
    /// line being executed, or the `await` it is suspended at
    pub line: Option<u32>,
}

impl From<&Frame> for TaskFrame {
    fn from(f: &Frame) -> TaskFrame {
        TaskFrame {
            function: f.function().to_string(),
            file: f.file().to_string(),
            line: f.line,
        }
    }
}

/// A task's name, read once per (task, name object): its `<task NAME>` frame and its
/// `task_name` label.
#[derive(Debug, Clone)]
struct TaskName {
    marker: Arc<CodeName>,
    label: Arc<str>,
}

/// One process's asyncio state: its table once found, and task names already read.
#[derive(Debug, Default)]
pub(super) struct AsyncioState {
    table: Option<AsyncioDebugOffsets>,
    /// no table yet: when to look again
    lookup: Option<LookAgain>,
    /// (task, name object) → its `<task NAME>` code name
    names: HashMap<(u64, u64), TaskName>,
    /// for BPF records: each live task's coroutine frame → the task, and whether something
    /// awaited it, as of the batch's start
    task_frames: HashMap<u64, (u64, bool, u64)>,
    /// for BPF records: thread states whose event loop was running as of the batch's start
    loop_threads: HashSet<u64>,
}

impl Unwinder {
    /// The `_asyncio` table of the process: found once, looked for again with a growing wait
    /// while the program has not imported asyncio (`force` looks now).
    fn asyncio_table(&mut self, force: bool) -> Result<AsyncioDebugOffsets, AsyncioError> {
        let pid = self.target.pid;
        if self.target.offsets.coroutines.is_none() {
            return Err(AsyncioUnsupported(self.target.version()).into());
        }
        if let Some(table) = self.asyncio.table {
            return Ok(table);
        }
        let now = Instant::now();
        let lookup = self
            .asyncio
            .lookup
            .get_or_insert(LookAgain::new(FIRST_LOOKUP_WAIT, MAX_LOOKUP_WAIT));
        if !force && !lookup.due(now) {
            return Err(AsyncioError::NotLoaded { pid });
        }
        let found = match asyncio_debug_address(pid)? {
            Some(addr) => {
                let bytes = self
                    .mem
                    .read_vec(addr, ASYNCIO_DEBUG_LEN)
                    .map_err(|e| UnwindError::from_memory(pid, e))?;
                AsyncioDebugOffsets::parse(&bytes)
                    .map_err(|source| AsyncioError::Table { pid, source })?
            }
            None => {
                if let Some(lookup) = self.asyncio.lookup.as_mut() {
                    lookup.missed(now);
                }
                return Err(AsyncioError::NotLoaded { pid });
            }
        };
        self.asyncio.table = Some(found);
        Ok(found)
    }

    /// The layouts reading tasks needs, with the process's `_asyncio` table (`None` before 3.14).
    fn layouts(&self, table: AsyncioDebugOffsets) -> Option<Layouts> {
        let o = self.target.offsets;
        Some(Layouts {
            o,
            c: o.coroutines?,
            a: table,
        })
    }

    /// Every asyncio task of the process: each thread's, then those of exited threads, with
    /// their coroutine stacks and awaiters (`dump --async`).
    pub fn asyncio_tasks(&mut self) -> Result<Vec<AsyncTask>, AsyncioError> {
        let table = self.asyncio_table(true)?;
        let pid = self.target.pid;
        let l = self
            .layouts(table)
            .ok_or(AsyncioUnsupported(self.target.version()))?;
        let mut lists: Vec<(Option<u32>, u64, u64)> = Vec::new();
        for (interp, threads) in self.threads()? {
            for t in &threads {
                let running = self.running_task(&l, t).unwrap_or(0);
                lists.push((
                    Some(t.native_thread_id),
                    t.addr.wrapping_add(table.thread_tasks_head),
                    running,
                ));
            }
            lists.push((
                None,
                interp.addr.wrapping_add(table.interpreter_tasks_head),
                0,
            ));
        }
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        for (thread, head, running) in lists {
            let tasks = self.read_task_list(&l, head)?;
            for addr in tasks {
                if !seen.insert(addr) {
                    continue;
                }
                // A task finishing as we read is left out, not the whole dump.
                match self.read_async_task(&l, addr) {
                    Ok((task, name, coroutine)) => {
                        let awaited_by =
                            objects::awaiters(&mut self.mem, &l, &task).unwrap_or_default();
                        out.push(AsyncTask {
                            id: addr,
                            name,
                            thread,
                            running: addr == running,
                            coroutine: coroutine.iter().rev().map(TaskFrame::from).collect(),
                            awaited_by,
                        });
                    }
                    Err(ObjectError::Memory(
                        e @ (MemoryError::Gone { .. } | MemoryError::Denied { .. }),
                    )) => return Err(UnwindError::from_memory(pid, e).into()),
                    Err(e) => tracing::debug!(pid, task = addr, error = %e, "task skipped"),
                }
            }
        }
        Ok(out)
    }

    /// The tasks of one list, read again (fresh pages) while tasks come and go under the read.
    fn read_task_list(&mut self, l: &Layouts, head: u64) -> Result<Vec<u64>, AsyncioError> {
        let pid = self.target.pid;
        for _ in 0..LIST_READ_ATTEMPTS {
            match objects::list_tasks(&mut self.mem, l, head) {
                Ok(tasks) => return Ok(tasks),
                Err(ObjectError::Memory(
                    e @ (MemoryError::Gone { .. } | MemoryError::Denied { .. }),
                )) => return Err(UnwindError::from_memory(pid, e).into()),
                // A node freed or relinked as we followed it.
                Err(_) => self.mem.begin_without_prefetch(),
            }
        }
        Err(AsyncioError::Torn {
            pid,
            reads: LIST_READ_ATTEMPTS,
        })
    }

    /// A task, its name and its coroutine frames (innermost first).
    fn read_async_task(
        &mut self,
        l: &Layouts,
        addr: u64,
    ) -> Result<(RawTask, String, Vec<Frame>), ObjectError> {
        let task = objects::read_task(&mut self.mem, l, addr)?;
        let long = self
            .target
            .offsets
            .thread_names
            .map(|n| n.long_object)
            .ok_or(ObjectError::Malformed { addr })?;
        let name = objects::task_name(&mut self.mem, l, &long, task.name)?;
        let frames = self.coroutine_frames(l, task.coro)?;
        Ok((task, name, frames))
    }

    /// The frames of the coroutine at `coro` and of what it awaits, innermost first.
    fn coroutine_frames(&mut self, l: &Layouts, coro: u64) -> Result<Vec<Frame>, ObjectError> {
        if coro == 0 {
            return Ok(Vec::new());
        }
        let raw = objects::coroutine_chain(&mut self.mem, l, coro)?;
        let c = &self.target.offsets.code_object;
        let mut out = Vec::with_capacity(raw.len());
        for f in raw.iter().rev() {
            let Some(info) = self.symbolizer.code_info(&mut self.mem, f.code)? else {
                return Err(ObjectError::Malformed { addr: f.addr });
            };
            let base = bytecode_base(&mut self.mem, c, f.code, f.tlbc_index)?;
            out.push(self.symbolizer.frame(&info, f.ip, base));
        }
        Ok(out)
    }

    /// The event loop the thread state at `tstate` is running (0: none).
    fn running_loop(&mut self, l: &Layouts, tstate: u64) -> Result<u64, MemoryError> {
        self.mem
            .read_u64(tstate.wrapping_add(l.a.thread_running_loop))
    }

    /// The task the thread's event loop is running, if it runs one (0: none).
    fn running_task(&mut self, l: &Layouts, t: &ThreadInfo) -> Result<u64, MemoryError> {
        if self.running_loop(l, t.addr)? == 0 {
            return Ok(0);
        }
        self.mem
            .read_u64(t.addr.wrapping_add(l.a.thread_running_task))
    }

    /// `task`, first read through the page cache, read again straight from the process at one
    /// instant of its coroutine's life ([`objects::read_settled_task`]).
    fn settled_task(&mut self, l: &Layouts, task: &RawTask) -> Result<SettledTask, ObjectError> {
        objects::read_settled_task(self.mem.remote(), l, task.addr, task.coro)
    }

    /// [`Unwinder::settled_task`] for a task that runs or awaits: `Ok(None)` when its coroutine
    /// has not started or has finished; a task that changed under the read is an error (the
    /// caller counts it), never a chain of no one instant.
    fn live_task(&mut self, l: &Layouts, task: &RawTask) -> Result<Option<RawTask>, ObjectError> {
        match self.settled_task(l, task)? {
            SettledTask::Live(task) => Ok(Some(task)),
            SettledTask::NotStarted(_) | SettledTask::Finished => Ok(None),
            SettledTask::Changed => Err(ObjectError::Malformed { addr: task.addr }),
        }
    }

    /// The `<task NAME>` code name of a task, read once per (task, name object).
    fn task_marker(&mut self, l: &Layouts, task: &RawTask) -> Result<TaskName, ObjectError> {
        if let Some(name) = self.asyncio.names.get(&(task.addr, task.name)) {
            return Ok(name.clone());
        }
        let long = self
            .target
            .offsets
            .thread_names
            .map(|n| n.long_object)
            .ok_or(ObjectError::Malformed { addr: task.addr })?;
        let text = objects::task_name(&mut self.mem, l, &long, task.name)?;
        let name = TaskName {
            marker: task_code_name(&text),
            label: Arc::from(text),
        };
        if self.asyncio.names.len() >= MAX_NAMES {
            self.asyncio.names.clear();
        }
        self.asyncio
            .names
            .insert((task.addr, task.name), name.clone());
        Ok(name)
    }

    /// Rewrites a thread's walked frames (innermost first) into its task-aware stack when its
    /// event loop is running a task, and returns that task's name (the `task_name` label).
    /// A thread without a running task keeps its frames, uncounted; one whose task cannot be
    /// placed keeps them too, counted `unattributed`.
    pub(in crate::unwind) fn attribute_task(
        &mut self,
        t: &ThreadInfo,
        frames: &mut Vec<CachedFrame>,
    ) -> Option<Arc<str>> {
        let table = self.asyncio_table(false).ok()?;
        let l = self.layouts(table)?;
        let running = self.running_task(&l, t).ok()?;
        if running == 0 {
            return None;
        }
        match self.task_stack(&l, running, frames) {
            Ok(Some(name)) => {
                self.stats.task_samples += 1;
                Some(name)
            }
            Ok(None) | Err(_) => {
                self.stats.task_unattributed += 1;
                None
            }
        }
    }

    /// Indexes the coroutine frame of every task of the threads at `tstates` whose event loop
    /// runs, for the BPF records of the batch about to be resolved: a record names the task it
    /// ran by holding that frame (see [`Unwinder::attribute_record`]). Nothing is read when
    /// asyncio is not loaded.
    pub(in crate::unwind) fn index_task_frames(&mut self, tstates: Vec<u64>) {
        self.asyncio.task_frames.clear();
        self.asyncio.loop_threads.clear();
        let Some(l) = self
            .asyncio_table(false)
            .ok()
            .and_then(|table| self.layouts(table))
        else {
            return;
        };
        for tstate in tstates {
            if !matches!(self.running_loop(&l, tstate), Ok(event_loop) if event_loop != 0) {
                continue;
            }
            self.asyncio.loop_threads.insert(tstate);
            let head = tstate.wrapping_add(l.a.thread_tasks_head);
            let Ok(tasks) = objects::list_tasks(&mut self.mem, &l, head) else {
                continue;
            };
            for addr in tasks {
                let Ok(task) = objects::read_task(&mut self.mem, &l, addr) else {
                    continue;
                };
                // A finished task keeps its place in the list until it is freed; its frame
                // names no running task.
                if !objects::coroutine_live(&mut self.mem, &l, task.coro).unwrap_or(false) {
                    continue;
                }
                let Some(frame) = task.frame(&l.c) else {
                    continue;
                };
                // Freed coroutines' memory is reused at once: the record's frame must run the
                // same code as the task's.
                let Ok(code) = read_frame(&mut self.mem, &l.o, frame).map(|f| f.code) else {
                    continue;
                };
                let awaited = task.awaited_by != 0;
                self.asyncio
                    .task_frames
                    .insert(frame, (addr, awaited, code));
            }
        }
    }

    /// [`Unwinder::attribute_task`] for a record walked by the BPF program, whose running task
    /// was not read at the tick: the innermost of its frames that is a live task's coroutine
    /// frame names the task (indexed when the batch began, so a record is attributed to the
    /// task it ran however long it waited in the ring). A record of a thread whose event loop
    /// was running, holding a coroutine frame of no indexed task (a task that ended before the
    /// drain, or one created after the batch began), keeps its plain stack and is counted
    /// `unattributed`.
    pub(in crate::unwind) fn attribute_record(
        &mut self,
        tstate: u64,
        raw: &[RawFrame],
        frames: &mut Vec<CachedFrame>,
    ) -> Option<Arc<str>> {
        if !self.asyncio.loop_threads.contains(&tstate) {
            return None;
        }
        let found = frames
            .iter()
            .enumerate()
            .find_map(|(k, f)| self.asyncio.task_frames.get(&f.addr).map(|&t| (k, t)));
        let same_code = |(k, (_, _, code)): &(usize, (u64, bool, u64))| {
            let addr = frames[*k].addr;
            raw.iter().any(|f| f.addr == addr && f.code == *code)
        };
        let Some((k, (task_addr, awaited, _))) = found.filter(same_code) else {
            let generator = self.target.offsets.frame.generator_owner;
            if raw.iter().any(|f| f.owner == generator) {
                self.stats.task_unattributed += 1;
            }
            return None;
        };
        let l = self.layouts(self.asyncio.table?)?;
        // A task awaited when the batch began and not now has finished since (its awaiters let
        // go of it): its chain is gone, and one read now would be a chain that never was.
        let stacked = objects::read_task(&mut self.mem, &l, task_addr)
            .and_then(|task| self.live_task(&l, &task))
            .and_then(|task| {
                let task = task.ok_or(ObjectError::Malformed { addr: task_addr })?;
                if awaited && task.awaited_by == 0 {
                    return Err(ObjectError::Malformed { addr: task.addr });
                }
                self.stack_tasks(&l, task, k, frames)
            });
        match stacked {
            Ok(name) => {
                self.stats.task_samples += 1;
                Some(name)
            }
            Err(_) => {
                self.stats.task_unattributed += 1;
                None
            }
        }
    }

    /// [`Unwinder::attribute_task`] for the running task at `running`: `Ok(None)` when its frame
    /// is not on the stack.
    fn task_stack(
        &mut self,
        l: &Layouts,
        running: u64,
        frames: &mut Vec<CachedFrame>,
    ) -> Result<Option<Arc<str>>, ObjectError> {
        let task = objects::read_task(&mut self.mem, l, running)?;
        let Some(task) = self.live_task(l, &task)? else {
            return Ok(None);
        };
        let Some(task_frame) = task.frame(&l.c) else {
            return Ok(None);
        };
        let Some(k) = frames.iter().position(|f| f.addr == task_frame) else {
            return Ok(None);
        };
        self.stack_tasks(l, task, k, frames).map(Some)
    }

    /// Rewrites `frames`, whose `k`th is `task`'s coroutine frame, into the task-aware stack:
    /// frames up to `k`, `<task NAME>`, each awaiting task's coroutine frames and marker up to
    /// the root task, then the loop's frames below `k`. Returns the task's name.
    fn stack_tasks(
        &mut self,
        l: &Layouts,
        task: RawTask,
        k: usize,
        frames: &mut Vec<CachedFrame>,
    ) -> Result<Arc<str>, ObjectError> {
        // Read everything above before touching `frames`: a failed read leaves them whole.
        let (label, above) = self.awaiter_frames(l, &task)?;
        let loop_frames = frames.split_off(k + 1);
        frames.extend(
            above
                .into_iter()
                .map(|frame| CachedFrame { addr: 0, frame }),
        );
        frames.extend(loop_frames);
        Ok(label)
    }

    /// What stands above `task`'s own frames in its task-aware stack, innermost first: its
    /// `<task NAME>`, then each awaiting task's coroutine frames and marker, up to the root
    /// task. And the task's name (its `task_name` label).
    fn awaiter_frames(
        &mut self,
        l: &Layouts,
        task: &RawTask,
    ) -> Result<(Arc<str>, Vec<Frame>), ObjectError> {
        let (name, mut up) = self.task_link(l, task)?;
        let mut out = vec![Frame::task(name.marker)];
        let mut seen = HashSet::new();
        seen.insert(task.addr);
        for _ in 0..MAX_AWAIT_DEPTH {
            let Some(addr) = up else { break };
            if !seen.insert(addr) {
                break;
            }
            let awaiter = objects::read_task(&mut self.mem, l, addr)?;
            // A bare future in an awaiter set ends the chain: it has no frames or name.
            if !awaiter.is_task {
                break;
            }
            // An awaiting task is suspended in its `await`; one that is not any more has let
            // go of the task below, and the chain is not one of a single instant.
            let awaiter = self
                .live_task(l, &awaiter)?
                .ok_or(ObjectError::Malformed { addr })?;
            out.extend(self.coroutine_frames(l, awaiter.coro)?);
            let (awaiter_name, next) = self.task_link(l, &awaiter)?;
            out.push(Frame::task(awaiter_name.marker));
            up = next;
        }
        Ok((name.label, out))
    }

    /// A task's name and the awaiter its stack continues under: of several, the one at the
    /// lowest address, whose marker then says how many there are (`<task NAME (2 parents)>`),
    /// as CPython's sampler does.
    fn task_link(
        &mut self,
        l: &Layouts,
        task: &RawTask,
    ) -> Result<(TaskName, Option<u64>), ObjectError> {
        let mut name = self.task_marker(l, task)?;
        let awaiters = objects::awaiters(&mut self.mem, l, task)?;
        if awaiters.len() > 1 {
            name.marker = task_code_name(&format!("{} ({} parents)", name.label, awaiters.len()));
        }
        Ok((name, awaiters.into_iter().min()))
    }
}
