//! `--async-mode all`: at each tick, besides each thread's own sample, one sample of every
//! waiting task that no other task awaits (a leaf of the task graph): its coroutine stack at
//! its await point, `<task NAME>`, then its awaiters' frames up to the root task. The shape of
//! CPython's sampler in that mode, which also shows no event-loop frames for them: a waiting
//! task is on no thread's stack.
//!
//! A task awaited by another shows inside its awaiters' samples only (as CPython's sampler), so
//! a gather of a hundred tasks gives a hundred samples a tick, not a hundred and one. The
//! running task is its thread's own sample, with its full stack; a finished task still in its
//! list (until it is freed) gives none, and so does one found running when it is read (its
//! thread moved on to it since the tick): a sample of it here would be its coroutine's frame
//! alone, cut above the plain functions it runs, which are on its thread's stack only.
//!
//! Each sample is of one instant ([`super::instant`]): under churn a task that changes under
//! each of its reads is dropped, counted in `task_read_errors`, rather than shown as it never
//! was.

use std::sync::Arc;

use foldhash::{HashSet, HashSetExt};

use super::chain::First;
use super::objects::{self, Layouts, RawTask};
use crate::memory::ProcessMemory;
use crate::symbolize::{Frame, ObjectError};
use crate::unwind::{InterpreterInfo, SampleThread, ThreadInfo, ThreadSample, Unwinder};

/// A task's stack, innermost first, and its name (the `task_name` label).
type TaskStack = (Vec<Frame>, Arc<str>);

impl Unwinder {
    /// The waiting tasks' samples of one tick, for each thread whose event loop runs. Nothing
    /// when the process has not imported asyncio; what cannot be read is counted in
    /// `task_read_errors` and left out.
    pub(in crate::unwind) fn waiting_task_samples(
        &mut self,
        interpreters: &[(InterpreterInfo, Vec<ThreadInfo>)],
    ) -> Vec<ThreadSample> {
        let Some(l) = self
            .asyncio_table(false)
            .ok()
            .and_then(|table| self.layouts(table))
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for t in interpreters.iter().flat_map(|(_, threads)| threads) {
            if let Err(e) = self.thread_waiting_tasks(&l, t, &mut out) {
                tracing::debug!(pid = self.target.pid, error = %e, "task list unread");
                self.stats.task_read_errors += 1;
            }
        }
        self.stats.task_waiting_samples += out.len() as u64;
        out
    }

    /// The samples of the waiting leaf tasks of thread `t`'s list.
    fn thread_waiting_tasks(
        &mut self,
        l: &Layouts,
        t: &ThreadInfo,
        out: &mut Vec<ThreadSample>,
    ) -> Result<(), ObjectError> {
        if self.running_loop(l, t.addr)? == 0 {
            return Ok(());
        }
        let running = self
            .mem
            .read_u64(t.addr.wrapping_add(l.a.thread_running_task))?;
        let head = t.addr.wrapping_add(l.a.thread_tasks_head);
        let mut tasks = Vec::new();
        let mut awaited = HashSet::new();
        for addr in objects::list_tasks(&mut self.mem, l, head)? {
            match objects::read_task(&mut self.mem, l, addr)
                .and_then(|task| Ok((task, objects::awaiters(&mut self.mem, l, &task)?)))
            {
                Ok((task, awaiters)) => {
                    awaited.extend(awaiters);
                    tasks.push(task);
                }
                Err(_) => self.stats.task_read_errors += 1,
            }
        }
        for task in tasks {
            if task.addr == running || task.coro == 0 || awaited.contains(&task.addr) {
                continue;
            }
            match self.waiting_task_stack(l, &task) {
                Ok(Some((frames, label))) => out.push(self.task_sample(t, frames, label)),
                Ok(None) => {}
                Err(_) => self.stats.task_read_errors += 1,
            }
        }
        Ok(())
    }

    /// A waiting task's stack, innermost first, and its name; `None` for a task that does not
    /// wait (finished, or running now). Its frames and its awaiters' are of one instant
    /// ([`Unwinder::chain_at_one_instant`]): a task listed a moment ago may have started and
    /// been awaited since, or finished and been freed and its memory taken by the next task,
    /// and frames of one of those lives under another's awaiters would be a chain that never
    /// was.
    fn waiting_task_stack(
        &mut self,
        l: &Layouts,
        task: &RawTask,
    ) -> Result<Option<TaskStack>, ObjectError> {
        let Some(chain) = self.chain_at_one_instant(l, task.addr, First::Waiting)? else {
            return Ok(None);
        };
        if chain[0].frames.is_empty() {
            return Ok(None);
        }
        let (label, frames) = self.chain_frames(&chain, None)?;
        Ok(Some((frames, label)))
    }

    /// A waiting task's sample, on the thread whose list holds it. No GIL or span: the task
    /// holds neither while it waits.
    fn task_sample(&mut self, t: &ThreadInfo, frames: Vec<Frame>, label: Arc<str>) -> ThreadSample {
        let tid = t.native_thread_id;
        let mut thread = SampleThread::new(self.target.pid, tid, self.host_tid(tid).unwrap_or(tid));
        thread.thread_name = self.thread_name(tid);
        thread.task = Some(label);
        ThreadSample {
            thread,
            frames,
            truncated: false,
        }
    }
}
