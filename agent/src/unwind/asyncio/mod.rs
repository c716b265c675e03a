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
//!
//! Every chain of tasks a sample shows (a task, its name and coroutine frames, and each task
//! awaiting it up to the root) is one the process had at one instant ([`instant`]): tasks,
//! coroutines and names are freed and their blocks handed to the next ones made, in the same
//! order, thousands of times a second, so parts read at different moments can each look right
//! and together be a chain that never existed.

mod chain;
#[cfg(test)]
mod garbage_tests;
mod instant;
mod objects;
mod waiting;

use std::sync::Arc;
use std::time::{Duration, Instant};

use foldhash::{HashMap, HashSet, HashSetExt};
use serde::Serialize;

use super::walk::read_frame;
use super::{AsyncMode, CachedFrame, RawFrame, ThreadInfo, UnwindError, Unwinder};
use crate::discovery::asyncio_section::asyncio_debug_address;
use crate::discovery::look_again::LookAgain;
use crate::discovery::DiscoveryError;
use crate::memory::{MemoryError, PageCache, ProcessMemory};
use crate::offsets::{
    AsyncioDebugOffsets, AsyncioUnsupported, LongObjectOffsets, OffsetsError, ASYNCIO_DEBUG_LEN,
};
use crate::symbolize::{bytecode_base, task_code_name, CodeName, Frame, ObjectError};
use chain::{First, Link};
use instant::{Reads, Recorder};
use objects::{Layouts, Life, RawTask};

/// First wait before looking for the table again in a process that has not imported asyncio
/// yet; doubled after each miss up to [`MAX_LOOKUP_WAIT`].
const FIRST_LOOKUP_WAIT: Duration = Duration::from_secs(1);
/// Longest wait between two looks for the table.
const MAX_LOOKUP_WAIT: Duration = Duration::from_secs(30);
/// Decodes of a task chain before giving up on one that changes under each
/// ([`Unwinder::at_one_instant`]): the second with fresh pages.
const INSTANT_READS: usize = 2;
/// Reads of one task list before giving up on a list that changes under every read.
const LIST_READ_ATTEMPTS: usize = 20;
/// Samples of a thread again for the frames of a task it runs (`dump --async`).
const RUNNING_REREADS: usize = 3;
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

/// Where the thread state holds its running task, the task its coroutine and its awaiters,
/// and the coroutine its frame: what the BPF program reads at each tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskFrameOffsets {
    /// `_PyThreadStateImpl.asyncio_running_task`
    pub running_task: u32,
    /// `TaskObj.task_coro`
    pub task_coro: u32,
    /// `PyGenObject.gi_iframe`
    pub coroutine_iframe: u32,
    /// `TaskObj.task_awaited_by`
    pub task_awaited_by: u32,
}

/// A task's name, read once per (task, name object): its `<task NAME>` frame and its
/// `task_name` label.
#[derive(Debug, Clone)]
struct TaskName {
    /// what the task's frame says: the name the program gave it, or for a task asyncio named
    /// (`Task-N`) the qualified name of its coroutine, so that the thousand tasks of one
    /// request handler make one tower of a flame graph, not a thousand
    shown: Arc<str>,
    marker: Arc<CodeName>,
    /// the name itself, every task its own (the `task_name` label)
    label: Arc<str>,
}

/// Whether `name` is one asyncio gave an unnamed task: `Task-` and its counter.
fn named_by_asyncio(name: &str) -> bool {
    name.strip_prefix("Task-")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A task as `dump --async` reads it, at one instant.
struct TaskRead {
    task: RawTask,
    name: String,
    /// where its coroutine is in its life
    life: Life,
    /// its coroutine frames, innermost first
    frames: Vec<Frame>,
    /// the tasks awaiting it
    awaiters: Vec<u64>,
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
    /// for `dump --async`, while it samples its threads: each running task put on its
    /// thread's stack, as read then, with its own frames (innermost first: from the thread's
    /// leaf to the task's coroutine frame)
    running_frames: Option<HashMap<u64, (RawTask, Vec<Frame>)>>,
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
    /// their coroutine stacks and awaiters (`dump --async`). A running task's stack is its
    /// thread's, from the task's coroutine frame to the thread's innermost frame: the plain
    /// functions it calls are on no coroutine's frame, only on the thread's stack.
    pub fn asyncio_tasks(&mut self) -> Result<Vec<AsyncTask>, AsyncioError> {
        let table = self.asyncio_table(true)?;
        let pid = self.target.pid;
        let l = self
            .layouts(table)
            .ok_or(AsyncioUnsupported(self.target.version()))?;
        let mut running_frames = self.running_task_frames(None);
        let mut lists: Vec<(Option<u32>, u64)> = Vec::new();
        for (interp, threads) in self.threads()? {
            for t in &threads {
                lists.push((
                    Some(t.native_thread_id),
                    t.addr.wrapping_add(table.thread_tasks_head),
                ));
            }
            lists.push((None, interp.addr.wrapping_add(table.interpreter_tasks_head)));
        }
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        for (thread, head) in lists {
            let tasks = self.read_task_list(&l, head)?;
            for addr in tasks {
                if !seen.insert(addr) {
                    continue;
                }
                // A task finishing as we read is left out, not the whole dump.
                let read = match self.running_task_read(&l, addr, thread, &mut running_frames) {
                    Ok(read) => read,
                    Err(ObjectError::Memory(
                        e @ (MemoryError::Gone { .. } | MemoryError::Denied { .. }),
                    )) => return Err(UnwindError::from_memory(pid, e).into()),
                    Err(e) => {
                        tracing::debug!(pid, task = addr, error = %e, "task skipped");
                        continue;
                    }
                };
                out.push(AsyncTask {
                    id: addr,
                    name: read.name,
                    thread,
                    running: read.life == Life::Executing,
                    coroutine: read.frames.iter().rev().map(TaskFrame::from).collect(),
                    awaited_by: read.awaiters,
                });
            }
        }
        Ok(out)
    }

    /// The task at `addr` of `thread`'s list ([`Unwinder::read_async_task`]), with its thread's
    /// frames for its stack when it runs: those its thread's sample put under it, while the
    /// task still runs and is the one they were put under. A task that runs without such
    /// frames (its thread moved on to it since, or its walk could not be placed) has its
    /// thread sampled again, a few times, then shows its coroutine's frame alone.
    fn running_task_read(
        &mut self,
        l: &Layouts,
        addr: u64,
        thread: Option<u32>,
        running_frames: &mut HashMap<u64, (RawTask, Vec<Frame>)>,
    ) -> Result<TaskRead, ObjectError> {
        let mut read = self.read_async_task(l, addr)?;
        for attempt in 0..=RUNNING_REREADS {
            if read.life != Life::Executing {
                break;
            }
            if let Some((_, frames)) = running_frames
                .get(&addr)
                .filter(|(task, _)| *task == read.task)
            {
                read.frames = frames.clone();
                break;
            }
            let Some(tid) = thread.filter(|_| attempt < RUNNING_REREADS) else {
                break;
            };
            running_frames.extend(self.running_task_frames(Some(tid)));
            read = self.read_async_task(l, addr)?;
        }
        Ok(read)
    }

    /// One sample of every thread (or of the thread `tid` alone) with task-aware stacks, for the
    /// frames each running task has on its thread's stack, by task
    /// ([`AsyncioState::running_frames`]). A thread whose walk or task cannot be placed gives
    /// none.
    fn running_task_frames(&mut self, tid: Option<u32>) -> HashMap<u64, (RawTask, Vec<Frame>)> {
        let options = self.options;
        self.options.async_tasks = true;
        self.options.async_mode = AsyncMode::Running;
        self.asyncio.running_frames = Some(HashMap::default());
        let sampled = match tid {
            None => self.sample_round(|_| true).map(drop),
            Some(tid) => self.sample_thread_again(tid).map(drop),
        };
        if let Err(e) = sampled {
            tracing::debug!(pid = self.target.pid, error = %e, "threads unread");
        }
        self.options = options;
        self.asyncio.running_frames.take().unwrap_or_default()
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

    /// A task at one instant ([`Unwinder::at_one_instant`]): its fields, name, coroutine frames
    /// and the tasks awaiting it.
    fn read_async_task(&mut self, l: &Layouts, addr: u64) -> Result<TaskRead, ObjectError> {
        let long = self.long_layout(addr)?;
        let read = self.at_one_instant(addr, |mem| {
            let task = objects::read_task(mem, l, addr)?;
            mem.reads.must_be_alive(addr);
            let name = objects::task_name(mem, l, &long, task.name)?;
            let (life, raw) = match task.coro {
                0 => (Life::Finished, Vec::new()),
                coro => (
                    objects::coroutine_life(mem, l, coro)?,
                    objects::coroutine_chain(mem, l, coro)?,
                ),
            };
            let awaiters = objects::awaiters(mem, l, &task)?;
            Ok(Some((task, name, life, raw, awaiters)))
        })?;
        let (task, name, life, raw, awaiters) = read.ok_or(ObjectError::Malformed { addr })?;
        Ok(TaskRead {
            task,
            name,
            life,
            frames: self.symbolize_raw(raw.iter().rev())?,
            awaiters,
        })
    }

    /// The `int` layout task names (`Task-N`) are read with.
    fn long_layout(&self, addr: u64) -> Result<LongObjectOffsets, ObjectError> {
        self.target
            .offsets
            .thread_names
            .map(|n| n.long_object)
            .ok_or(ObjectError::Malformed { addr })
    }

    /// What `read` decodes through a recording view of the page cache, kept only when every
    /// range it read still holds at one instant ([`instant::Reads::hold`]); decoded once more
    /// with fresh pages when it does not (a page copied earlier in the tick is no instant of
    /// now), then given up as an error. `Ok(None)` from `read` (nothing to show) is taken as
    /// it is: it shows nothing that could be wrong.
    fn at_one_instant<T>(
        &mut self,
        addr: u64,
        mut read: impl FnMut(&mut Recorder<'_, PageCache>) -> Result<Option<T>, ObjectError>,
    ) -> Result<Option<T>, ObjectError> {
        let free_threaded = self.target.offsets.free_threaded;
        let mut failed = ObjectError::Malformed { addr };
        for attempt in 0..INSTANT_READS {
            if attempt > 0 {
                self.mem.begin_without_prefetch();
            }
            let mut reads = Reads::default();
            match read(&mut Recorder::new(&mut self.mem, &mut reads)) {
                Ok(None) => return Ok(None),
                Ok(Some(found)) => {
                    if reads.hold(self.mem.remote(), free_threaded)? {
                        return Ok(Some(found));
                    }
                }
                Err(ObjectError::Memory(
                    e @ (MemoryError::Gone { .. } | MemoryError::Denied { .. }),
                )) => return Err(e.into()),
                // Pages copied earlier may lead to freed objects: read fresh ones.
                Err(e) => failed = e,
            }
        }
        Err(failed)
    }

    /// The chain of the task at `addr` ([`chain::read_chain`]) at one instant.
    fn chain_at_one_instant(
        &mut self,
        l: &Layouts,
        addr: u64,
        first: First,
    ) -> Result<Option<Vec<Link>>, ObjectError> {
        let long = self.long_layout(addr)?;
        self.at_one_instant(addr, |mem| chain::read_chain(mem, l, &long, addr, first))
    }

    /// Symbolizes coroutine frames, in the order given.
    pub(in crate::unwind) fn symbolize_raw<'a>(
        &mut self,
        raw: impl Iterator<Item = &'a RawFrame>,
    ) -> Result<Vec<Frame>, ObjectError> {
        let c = &self.target.offsets.code_object;
        let mut out = Vec::new();
        for f in raw {
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

    /// The `<task NAME>` code name and label of a chain's task: made once per (task, name
    /// object) while the name read is the one made for (a freed task's block and its name's
    /// are handed to the next task made, whose name is another).
    /// `coroutine` is the qualified name of the task's coroutine, which a task asyncio named is
    /// shown by (and the task's coroutine is the same for its whole life).
    fn task_name_of(&mut self, link: &Link, coroutine: Option<&str>) -> TaskName {
        let key = (link.task.addr, link.task.name);
        if let Some(name) = self.asyncio.names.get(&key) {
            if *name.label == *link.name {
                return name.clone();
            }
        }
        let shown: Arc<str> = match coroutine {
            Some(coroutine) if named_by_asyncio(&link.name) => Arc::from(coroutine),
            _ => Arc::from(link.name.as_str()),
        };
        let name = TaskName {
            marker: task_code_name(&shown),
            shown,
            label: Arc::from(link.name.as_str()),
        };
        if self.asyncio.names.len() >= MAX_NAMES {
            self.asyncio.names.clear();
        }
        self.asyncio.names.insert(key, name.clone());
        name
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

    /// Where the program finds the coroutine frame of the task a thread runs, and whether the
    /// task is awaited (the [`common::PaProc`] fields). Known once the program has imported
    /// asyncio, with task-aware stacks only; looked for no more often than the table is.
    pub fn task_frame_offsets(&mut self) -> Option<TaskFrameOffsets> {
        if !self.options.async_tasks {
            return None;
        }
        let table = self.asyncio_table(false).ok()?;
        let l = self.layouts(table)?;
        Some(TaskFrameOffsets {
            running_task: u32::try_from(l.a.thread_running_task).ok()?,
            task_coro: u32::try_from(l.a.task_coro).ok()?,
            coroutine_iframe: u32::try_from(l.c.gi_iframe).ok()?,
            task_awaited_by: u32::try_from(l.a.task_awaited_by).ok()?,
        })
    }

    /// [`Unwinder::attribute_task`] for a record walked by the BPF program. `task_frame` is the
    /// coroutine frame of the task the thread ran, as the program read it at the tick (once it
    /// was told where): that frame of the record begins the task's own. Without it, the
    /// innermost of the record's frames that is a live task's coroutine frame names the task,
    /// on a thread whose event loop was running when the batch began. The task is then the
    /// one indexed when the batch began (so a record is attributed to the task it ran however
    /// long it waited in the ring), its chain read now. A task that ended before the drain (a
    /// server's request lives a few ms, a drain comes every 100 ms) has no chain left: when the
    /// program saw it was a root task (nothing awaited it), its marker is its coroutine's
    /// name, `<task COROUTINE>`, as a task asyncio named is shown, without its own name
    /// (counted `task_ended`). An awaited one's awaiters are not known, and a marker alone
    /// would show it as a root: such a record keeps its plain stack and is counted
    /// `unattributed`, as one is without `task_frame`.
    pub(in crate::unwind) fn attribute_record(
        &mut self,
        tstate: u64,
        task_frame: Option<(u64, bool)>,
        raw: &[RawFrame],
        frames: &mut Vec<CachedFrame>,
    ) -> Option<Arc<str>> {
        if task_frame.is_none() && !self.asyncio.loop_threads.contains(&tstate) {
            return None;
        }
        // The frame of a root task that may have ended (an awaited one's chain must be read),
        // walked at the tick: one in the part spliced from the frame cache (3.15) was not,
        // and its code cannot be checked against the record's.
        let root_frame = task_frame
            .and_then(|(addr, awaited)| (!awaited).then_some(addr))
            .filter(|addr| raw.iter().any(|f| f.addr == *addr));
        let awaited_at_tick = task_frame.is_some_and(|(_, awaited)| awaited);
        let task_frame = task_frame.map(|(addr, _)| addr);
        let found = match task_frame {
            Some(addr) => frames
                .iter()
                .position(|f| f.addr == addr)
                .and_then(|k| self.asyncio.task_frames.get(&addr).map(|&t| (k, t))),
            None => frames
                .iter()
                .enumerate()
                .find_map(|(k, f)| self.asyncio.task_frames.get(&f.addr).map(|&t| (k, t))),
        };
        let same_code = |(k, (_, _, code)): &(usize, (u64, bool, u64))| {
            let addr = frames[*k].addr;
            raw.iter().any(|f| f.addr == addr && f.code == *code)
        };
        let Some((k, (task_addr, awaited, _))) = found.filter(same_code) else {
            if root_frame.is_some_and(|addr| mark_ended_task(frames, addr)) {
                self.stats.task_ended += 1;
                return None;
            }
            let generator = self.target.offsets.frame.generator_owner;
            if raw.iter().any(|f| f.owner == generator) {
                self.stats.task_unattributed += 1;
            }
            return None;
        };
        let l = self.layouts(self.asyncio.table?)?;
        let frame = frames[k].addr;
        let stacked = self
            .chain_at_one_instant(&l, task_addr, First::Running)
            .and_then(|chain| {
                let chain = chain.ok_or(ObjectError::Malformed { addr: task_addr })?;
                let task = &chain[0].task;
                // The task holds another coroutine now: the record's frame is not its.
                if task.frame(&l.c) != Some(frame) {
                    return Err(ObjectError::Malformed { addr: task_addr });
                }
                // A task awaited when the batch began and not now has finished since (its
                // awaiters let go of it): its chain is gone, and one read now would be a chain
                // that never was.
                if (awaited || awaited_at_tick) && task.awaited_by == 0 {
                    return Err(ObjectError::Malformed { addr: task_addr });
                }
                self.stack_chain(&chain, k, frames)
            });
        match stacked {
            Ok(name) => {
                self.stats.task_samples += 1;
                Some(name)
            }
            Err(_) if root_frame.is_some_and(|addr| mark_ended_task(frames, addr)) => {
                self.stats.task_ended += 1;
                None
            }
            Err(_) => {
                self.stats.task_unattributed += 1;
                None
            }
        }
    }

    /// [`Unwinder::attribute_task`] for the running task at `running`: `Ok(None)` when it is not
    /// running any more, or its frame is not on the stack.
    fn task_stack(
        &mut self,
        l: &Layouts,
        running: u64,
        frames: &mut Vec<CachedFrame>,
    ) -> Result<Option<Arc<str>>, ObjectError> {
        let Some(chain) = self.chain_at_one_instant(l, running, First::Running)? else {
            return Ok(None);
        };
        let Some(task_frame) = chain[0].task.frame(&l.c) else {
            return Ok(None);
        };
        let Some(k) = frames.iter().position(|f| f.addr == task_frame) else {
            return Ok(None);
        };
        if let Some(kept) = self.asyncio.running_frames.as_mut() {
            let own = frames[..=k].iter().map(|f| f.frame.clone()).collect();
            kept.insert(running, (chain[0].task, own));
        }
        self.stack_chain(&chain, k, frames).map(Some)
    }

    /// Rewrites `frames`, whose `k`th is the coroutine frame of `chain`'s first task, into the
    /// task-aware stack: frames up to `k`, `<task NAME>`, each awaiting task's coroutine frames
    /// and marker up to the root task, then the loop's frames below `k`. Returns the task's
    /// name.
    fn stack_chain(
        &mut self,
        chain: &[Link],
        k: usize,
        frames: &mut Vec<CachedFrame>,
    ) -> Result<Arc<str>, ObjectError> {
        // Symbolize everything above before touching `frames`: a failure leaves them whole.
        let running = frames[k].frame.clone();
        let (label, above) = self.chain_frames(chain, Some(&running))?;
        let loop_frames = frames.split_off(k + 1);
        frames.extend(
            above
                .into_iter()
                .map(|frame| CachedFrame { addr: 0, frame }),
        );
        frames.extend(loop_frames);
        Ok(label)
    }

    /// A chain's stack, innermost first: its first task's coroutine frames (none for a running
    /// task), its `<task NAME>`, then each awaiting task's coroutine frames and marker, up to
    /// the root task. And the first task's name (its `task_name` label). A task awaited by
    /// several says how many (`<task NAME (2 parents)>`), as CPython's sampler does.
    /// `running` is the coroutine frame of a running first task, whose frames are its thread's.
    fn chain_frames(
        &mut self,
        chain: &[Link],
        running: Option<&Frame>,
    ) -> Result<(Arc<str>, Vec<Frame>), ObjectError> {
        let mut out = Vec::new();
        let mut label = None;
        for (i, link) in chain.iter().enumerate() {
            let own = self.symbolize_raw(link.frames.iter())?;
            // Innermost first: the last of a task's frames is its coroutine's own.
            let coroutine = match (own.last(), running) {
                (Some(frame), _) => Some(frame.code.function.clone()),
                (None, Some(frame)) if i == 0 => Some(frame.code.function.clone()),
                (None, _) => None,
            };
            out.extend(own);
            let name = self.task_name_of(link, coroutine.as_deref());
            let marker = match link.awaiters {
                0 | 1 => name.marker,
                n => task_code_name(&format!("{} ({n} parents)", name.shown)),
            };
            out.push(Frame::task(marker));
            label.get_or_insert(name.label);
        }
        let label = label.ok_or(ObjectError::Malformed { addr: 0 })?;
        Ok((label, out))
    }
}

/// Puts `<task COROUTINE>` under the frame at `task_frame` (innermost first: right after it),
/// the coroutine frame of a root task that ran at the tick and has ended since; false when the
/// record does not hold that frame (the task had not entered its coroutine yet).
fn mark_ended_task(frames: &mut Vec<CachedFrame>, task_frame: u64) -> bool {
    let Some(k) = frames.iter().position(|f| f.addr == task_frame) else {
        return false;
    };
    let marker = Frame::task(task_code_name(&frames[k].frame.code.function));
    frames.insert(
        k + 1,
        CachedFrame {
            addr: 0,
            frame: marker,
        },
    );
    true
}
