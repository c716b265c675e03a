//! Sampling rounds: every thread of the process (or those a filter selects), each read again
//! while the target moves under the walk, and the threads that still yield no stack counted by
//! reason.

use super::error::{AttemptError, LostThread, ThreadOutcome, UnwindError};
use super::reread::{self, same_page, RereadBudget};
use super::{threads, AsyncMode, InterpreterInfo, StackLoss, ThreadInfo, ThreadSample, Unwinder};
use crate::memory::{MemoryError, ProcessMemory};
use crate::symbolize::FrameKind;

impl Unwinder {
    /// One sample of every thread.
    pub fn sample(&mut self) -> Result<Vec<ThreadSample>, UnwindError> {
        self.sample_filtered(|_| true)
    }

    /// One sample of every thread; `filter` gets a thread's host TID (None if the thread is
    /// not in /proc any more) and says whether to unwind it. Threads that yield no stack are
    /// left out (and counted in [`UnwindStats::lost`]).
    pub fn sample_filtered(
        &mut self,
        filter: impl FnMut(Option<u32>) -> bool,
    ) -> Result<Vec<ThreadSample>, UnwindError> {
        let outcomes = self.sample_round(filter)?;
        Ok(outcomes
            .into_iter()
            .filter_map(|o| match o {
                ThreadOutcome::Stack(s) => Some(s),
                ThreadOutcome::Lost(_) => None,
            })
            .collect())
    }

    /// One sample of every thread `filter` selects (as in [`Unwinder::sample_filtered`]), in
    /// thread-list order, with the threads that yielded no stack and why.
    pub fn sample_round(
        &mut self,
        mut filter: impl FnMut(Option<u32>) -> bool,
    ) -> Result<Vec<ThreadOutcome>, UnwindError> {
        self.mem.begin_sample();
        self.stats.samples += 1;
        let interpreters = self.threads()?;
        let mut out = Vec::new();
        for (interp, threads) in &interpreters {
            self.symbolizer.begin_sample(interp.code_generation);
            for t in threads {
                if !filter(self.host_tid(t.native_thread_id)) {
                    continue;
                }
                let outcome = match self.sample_thread_rereading(interp, t) {
                    Ok(s) => ThreadOutcome::Stack(s),
                    Err(e) => {
                        let reason = e.into_loss().map_err(|e| self.whole_sample_error(e))?;
                        ThreadOutcome::Lost(self.lost_thread(t.native_thread_id, reason))
                    }
                };
                out.push(outcome);
            }
        }
        if let Some(fc) = self.frame_cache.as_mut() {
            fc.end_round();
        }
        let stacks = out
            .iter()
            .filter(|o| matches!(o, ThreadOutcome::Stack(_)))
            .count();
        self.stats.thread_samples += stacks as u64;
        // Counted apart (`task_waiting_samples`): they are no thread's stack.
        if self.options.async_tasks && self.options.async_mode == AsyncMode::All {
            let waiting = self.waiting_task_samples(&interpreters);
            out.extend(waiting.into_iter().map(ThreadOutcome::Stack));
        }
        Ok(out)
    }

    /// One more read of the thread `ns_tid`, fresh from the process: for a caller that has
    /// stopped that thread since its sample lost it (`dump`). Not counted as a loss again.
    pub fn sample_thread_again(&mut self, ns_tid: u32) -> Result<ThreadOutcome, UnwindError> {
        self.mem.begin_sample();
        let interpreters = self.threads()?;
        let found = interpreters.iter().find_map(|(interp, threads)| {
            threads
                .iter()
                .find(|t| t.native_thread_id == ns_tid)
                .map(|t| (*interp, *t))
        });
        let Some((interp, t)) = found else {
            // The thread exited, or its thread state was freed: nothing left to read.
            return Ok(ThreadOutcome::Lost(
                self.lost_thread(ns_tid, StackLoss::ReadFault),
            ));
        };
        self.symbolizer.begin_sample(interp.code_generation);
        let outcome = match self.sample_thread(&interp, &t) {
            Ok(s) => ThreadOutcome::Stack(s),
            Err(e) => {
                let reason = e.into_loss().map_err(|e| self.whole_sample_error(e))?;
                ThreadOutcome::Lost(self.lost_thread(ns_tid, reason))
            }
        };
        Ok(outcome)
    }

    /// A memory error that ends a whole sample (the process exited or cannot be read).
    pub(in crate::unwind) fn whole_sample_error(&self, e: MemoryError) -> UnwindError {
        match e {
            MemoryError::Denied { .. } => UnwindError::Denied(e),
            _ => UnwindError::Gone {
                pid: self.target.pid,
            },
        }
    }

    /// Counts a thread that yielded no stack and describes it.
    pub(in crate::unwind) fn lost_thread(&mut self, ns_tid: u32, reason: StackLoss) -> LostThread {
        self.stats.lost.add(reason);
        let thread_name = self.thread_name(ns_tid);
        LostThread {
            tid: ns_tid,
            thread_name,
            reason,
        }
    }

    /// The stack of one thread, read again (thread state and frames, fresh from the process)
    /// while the target moves under the walk, within `read_attempts` walks and the re-read
    /// budget ([`reread::REREAD_CPU_BUDGET`], [`reread::REREAD_WALL_CAP`]). Each walk is
    /// validated in full: a re-read replaces a rejected walk, it never relaxes the checks.
    ///
    /// A walk the target moved under keeps the frames a second read proved, from its bottom
    /// up, under `[stack moved while read]` (see [`Unwinder::recheck_walk`]); the frames above
    /// may be another moment's, and a stack of two moments never happened. It is read again
    /// up to [`reread::ROOTED_REREADS`] times for a whole walk, and kept if none comes. The
    /// re-reads are few: holding out for a walk the thread stayed in its top frame through
    /// favours the frames it stays in longest (on a tight recursion the loop around it got
    /// about 10 times its share, measured against BPF walks, which stop the thread).
    pub(in crate::unwind) fn sample_thread_rereading(
        &mut self,
        interp: &InterpreterInfo,
        first: &ThreadInfo,
    ) -> Result<ThreadSample, AttemptError> {
        let mut budget = RereadBudget::start();
        let mut t = *first;
        let mut walks = 1;
        let mut cyclic_in_a_row = 0;
        // The first walk kept as its proven root, and the re-reads left to find a whole one.
        let mut rooted: Option<ThreadSample> = None;
        let mut rooted_left = reread::ROOTED_REREADS;
        loop {
            let err = match self.sample_thread(interp, &t) {
                Ok(s) if !is_proven_root(&s) => return Ok(s),
                Ok(s) => {
                    rooted.get_or_insert(s);
                    None
                }
                Err(e) => Some(e),
            };
            if matches!(err, Some(AttemptError::Lost(StackLoss::CyclicChain))) {
                cyclic_in_a_row += 1;
            } else {
                cyclic_in_a_row = 0;
            }
            let fatal = err.as_ref().is_some_and(AttemptError::is_fatal);
            let out_of_tries = walks >= self.options.read_attempts.max(1)
                || cyclic_in_a_row >= reread::CYCLIC_WALKS_IN_A_ROW
                || budget.spent()
                || (rooted.is_some() && rooted_left == 0);
            if out_of_tries || fatal {
                // A fatal error ends the sample whatever the first walk proved.
                return match (rooted, err) {
                    (_, Some(e)) if fatal => Err(e),
                    (Some(s), _) => Ok(self.kept_root(s)),
                    (None, e) => Err(e.unwrap_or(AttemptError::Lost(StackLoss::TopMoved))),
                };
            }
            if rooted.is_some() {
                rooted_left -= 1;
            }
            walks += 1;
            self.stats.rereads += 1;
            t = match (self.reread_thread(interp, &t), rooted.take()) {
                (Ok(now), r) => {
                    rooted = r;
                    now
                }
                // The thread cannot be read again: what the first walk proved stands.
                (Err(e), Some(s)) if !e.is_fatal() => return Ok(self.kept_root(s)),
                (Err(e), _) => return Err(e),
            };
        }
    }

    /// Counts a proven root kept and hands it back.
    fn kept_root(&mut self, s: ThreadSample) -> ThreadSample {
        self.stats.proven_roots += 1;
        s
    }

    /// The thread state at `t.addr` as it is now, with every page read again. The pages of
    /// this thread (its thread state, on 3.11/3.12 its `_PyCFrame`, the frames of the last walk)
    /// come back in one vectored read, the thread state first, as in a sample's first read;
    /// anything else is read fresh on demand.
    pub(in crate::unwind) fn reread_thread(
        &mut self,
        interp: &InterpreterInfo,
        t: &ThreadInfo,
    ) -> Result<ThreadInfo, AttemptError> {
        let pages = self.thread_pages(t);
        self.mem.restart_with(&pages);
        let o = self.target.offsets;
        let now = threads::read_thread(&mut self.mem, &o, interp, t.addr)?;
        // The thread exited and its thread state went to another thread: not ours to read.
        if now.native_thread_id != t.native_thread_id {
            return Err(AttemptError::Lost(StackLoss::ReadFault));
        }
        Ok(now)
    }

    /// Addresses on every page a re-read of `t` needs, in the order to copy them: the thread
    /// state, its `_PyCFrame` (3.11/3.12), its top frame, then the frames of the last walk.
    pub(in crate::unwind) fn thread_pages(&mut self, t: &ThreadInfo) -> Vec<u64> {
        let o = self.target.offsets;
        let ts = &o.thread_state;
        // Addresses read from the process may be garbage (a frame torn under the read): pages
        // are only where the copy starts, and an address past the end of memory wraps and
        // fails its read like any other bad one.
        let mut pages = vec![t.addr, t.addr.wrapping_add(o.thread_read_len() as u64 - 1)];
        if let Some(off) = ts.cframe_current_frame {
            // Still cached from the read being repeated.
            if let Ok(cframe) = self.mem.read_u64(t.addr + ts.current_frame) {
                pages.push(cframe.wrapping_add(off));
            }
        }
        let frame_end = o.frame_read_len() as u64 - 1;
        let frames = [t.top_frame]
            .into_iter()
            .chain(self.raw.iter().map(|f| f.addr))
            .flat_map(|a| [a, a.wrapping_add(frame_end)]);
        // Frames sit next to each other in a data-stack chunk: one entry per run of a page.
        for addr in frames {
            if pages.last().is_none_or(|&last| !same_page(last, addr)) {
                pages.push(addr);
            }
        }
        pages
    }
}

/// A walk kept as the frames a second read proved, under `[stack moved while read]`.
fn is_proven_root(s: &ThreadSample) -> bool {
    s.frames.iter().any(|f| f.kind == FrameKind::Moved)
}
