//! The host profiler's table of blocked threads (off-CPU profiling): each thread's recorded
//! wait from its off-CPU record to its wake-up record, the waits that repeated it (timed by the
//! program, not walked), how their time reaches the profile, and which waits have lasted long
//! enough to be stalls.
//!
//! In: the off-CPU and wake-up records the host profiler resolved, the waits it found running
//! at attach, the program's per-thread off-CPU state read at cuts and stall checks, and its
//! cuts. Out: off-CPU time for the aggregators, through the `add` function each call takes (the
//! profile of the wait's process; it says `false` when there is none), and [`Stall`]s.

use std::collections::HashMap;
use std::time::Duration;

use common::PaOffCpuThread;

use crate::aggregate::WaitReason;
use crate::sampler::off_cpu::{blocked_in, gil_while_blocked, monotonic_ns};
use crate::unwind::ThreadSample;

/// A thread blocked in a recorded stack, until its wake-up record (or a cut) weighs it.
#[derive(Debug)]
pub(crate) struct Waiting {
    pub sample: ThreadSample,
    pub wait: WaitReason,
    /// CLOCK_MONOTONIC nanoseconds from which the wait is not yet in a profile
    pub since_ns: u64,
    /// for a wait found already running at attach: the system call it was seen in
    pub seen_blocked_in: Option<i64>,
    /// CLOCK_MONOTONIC nanoseconds the wait began (or was found): how long it has lasted
    pub blocked_since_ns: u64,
    /// reported as stalled already (once per wait)
    pub stall_reported: bool,
}

impl Waiting {
    /// The wait of a thread that blocked in `sample` for `wait` at `since_ns`: its GIL state
    /// becomes waiting when it waits for the GIL.
    pub fn new(
        mut sample: ThreadSample,
        wait: WaitReason,
        since_ns: u64,
        seen_blocked_in: Option<i64>,
    ) -> Waiting {
        sample.thread.gil = gil_while_blocked(sample.thread.gil, wait);
        Waiting {
            sample,
            wait,
            since_ns,
            seen_blocked_in,
            blocked_since_ns: since_ns,
            stall_reported: false,
        }
    }
}

/// A thread blocked in one stack for longer than the stall threshold: what the service reports
/// once per stall.
#[derive(Debug, Clone)]
pub struct Stall {
    /// Host PID of its process.
    pub pid: u32,
    /// Its thread id (in the process's PID namespace, as CPython stores it).
    pub tid: u32,
    /// Its Python thread name, when known.
    pub thread_name: Option<std::sync::Arc<str>>,
    /// What it waits in.
    pub wait: WaitReason,
    /// How long it has been blocked (since the agent first saw the wait).
    pub blocked_for: std::time::Duration,
    /// The stack it blocked in, innermost first.
    pub frames: Vec<crate::symbolize::Frame>,
}

/// Hands a wait's time to the profile of its process: `false` when the process has none.
pub(crate) trait AddWait: FnMut(&ThreadSample, WaitReason, u64) -> bool {}
impl<F: FnMut(&ThreadSample, WaitReason, u64) -> bool> AddWait for F {}

/// What became of a wake-up record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// Its wait was weighed into the profile.
    Weighed,
    /// No recorded wait of that thread (its record was dropped or torn).
    Unmatched,
    /// The wait's process has no profile any more.
    Untracked,
}

/// What is known of a thread's waits that the program timed without walking them (they repeat
/// its last recorded wait): a running total in the program's state of the thread, counted here
/// as a cursor.
#[derive(Debug, Default, Clone, Copy)]
struct Carried {
    /// Host PID of the thread it counts for: a reused tid of another process starts again.
    pid: u32,
    /// How much of the program's running total is in the profile already.
    counted_ns: u64,
    /// CLOCK_MONOTONIC nanoseconds the thread's unrecorded wait began, at the last read of
    /// the program's state (0: not in one).
    blocked_since_ns: u64,
    /// The `blocked_since_ns` of the unrecorded wait reported as stalled (0: none).
    stall_reported_for: u64,
}

impl Carried {
    /// The cursor of thread `tid` of `pid` in `all`: a new one when the tid was another
    /// process's (the program restarts its total for a reused tid).
    fn of(all: &mut HashMap<u32, Carried>, tid: u32, pid: u32) -> &mut Carried {
        let c = all.entry(tid).or_default();
        if c.pid != pid {
            *c = Carried {
                pid,
                ..Carried::default()
            };
        }
        c
    }

    /// Moves the cursor to `total`; returns the time not counted yet. A total behind the
    /// cursor (a torn read counted a wait early) adds nothing until it catches up.
    fn count_to(&mut self, total: u64) -> u64 {
        let ns = total.saturating_sub(self.counted_ns);
        self.counted_ns = self.counted_ns.max(total);
        ns
    }
}

/// Threads off the CPU in a recorded stack, each thread's last ended wait, and the waits that
/// repeat it, by host TID.
#[derive(Debug, Default)]
pub(crate) struct Waits {
    waiting: HashMap<u32, Waiting>,
    /// Each thread's last recorded wait once it ended: the program counts the waits that
    /// repeat it under it (`carried_ns` of the thread's next record and of its state).
    last: HashMap<u32, Waiting>,
    carried: HashMap<u32, Carried>,
}

impl Waits {
    /// Thread `tid` blocks in `waiting` (an off-CPU record). `carried_total_ns`, the program's
    /// running total of the thread's waits that repeated its previous recorded wait (timed, not
    /// walked): its growth goes to that wait's stack and reason. Returns false when there was
    /// carried time and no previous wait to give it to.
    pub fn blocked(
        &mut self,
        tid: u32,
        waiting: Waiting,
        carried_total_ns: u64,
        mut add: impl AddWait,
    ) -> bool {
        let pid = waiting.sample.thread.pid;
        let carried = Carried::of(&mut self.carried, tid, pid);
        let ns = carried.count_to(carried_total_ns);
        carried.blocked_since_ns = 0;
        // Not a wait of another process's thread that had this tid.
        let previous = self
            .waiting
            .get(&tid)
            .or(self.last.get(&tid))
            .filter(|w| w.sample.thread.pid == pid);
        let given = match previous {
            Some(w) => {
                if ns > 0 {
                    add(&w.sample, w.wait, ns);
                }
                true
            }
            None => ns == 0,
        };
        self.waiting.insert(tid, waiting);
        given
    }

    /// The threads with a wait known here (of process `only`, or all): whose program state
    /// [`Waits::weigh_carried`] reads.
    pub fn threads(&self, only: Option<u32>) -> Vec<u32> {
        let mut tids: Vec<u32> = self
            .last
            .iter()
            .chain(&self.waiting)
            .filter(|(_, w)| only.is_none_or(|pid| w.sample.thread.pid == pid))
            .map(|(&tid, _)| tid)
            .collect();
        tids.sort_unstable();
        tids.dedup();
        tids
    }

    /// Weighs the waits of `tids` that the program timed without walking them, up to `now_ns`
    /// (CLOCK_MONOTONIC), from each thread's program state (`read`; `None`: none, or unreadable):
    /// its running total, and the unrecorded wait it is in now, whose time so far counts too (a
    /// worker that polls in a loop then hangs in the same call shows in every window, and as a
    /// stall). The time goes to the thread's last recorded wait's stack and reason.
    pub fn weigh_carried(
        &mut self,
        tids: &[u32],
        now_ns: u64,
        mut read: impl FnMut(u32) -> Option<PaOffCpuThread>,
        mut add: impl AddWait,
    ) {
        for &tid in tids {
            let Some(w) = self.waiting.get(&tid).or(self.last.get(&tid)) else {
                continue;
            };
            let Some(state) = read(tid).filter(|s| s.tgid == w.sample.thread.pid) else {
                continue;
            };
            let carried = Carried::of(&mut self.carried, tid, w.sample.thread.pid);
            let ongoing = match state.blocked_ns {
                0 => 0,
                since => now_ns.saturating_sub(since),
            };
            carried.blocked_since_ns = state.blocked_ns;
            let ns = carried.count_to(state.carried_ns.saturating_add(ongoing));
            if ns > 0 {
                add(&w.sample, w.wait, ns);
            }
        }
    }

    /// A wait found already running when its process was first seen.
    pub fn found_blocked(&mut self, tid: u32, waiting: Waiting) {
        self.waiting.insert(tid, waiting);
    }

    /// Thread `tid` runs again at `at_ns`: its wait's time goes to the profile.
    pub fn woke(&mut self, tid: u32, at_ns: u64, mut add: impl AddWait) -> Woke {
        let Some(w) = self.waiting.remove(&tid) else {
            return Woke::Unmatched;
        };
        if !add(&w.sample, w.wait, at_ns.saturating_sub(w.since_ns)) {
            return Woke::Untracked;
        }
        self.last.insert(tid, w);
        Woke::Weighed
    }

    /// Thread `tid` is gone: a thread that exited blocked never wakes, its wait ends with it.
    pub fn forget_thread(&mut self, tid: u32) {
        self.waiting.remove(&tid);
        self.last.remove(&tid);
        self.carried.remove(&tid);
    }

    /// Weighs the waits still running up to now (of every process, or only of `only`, which
    /// is leaving: its waits end with it), so that a thread blocked for minutes shows in every
    /// profile. A wait found at attach ends with no wake-up record if the thread woke before
    /// the program was told: it is over once the thread is in another call.
    pub fn weigh(&mut self, only: Option<u32>, mut add: impl AddWait) {
        let now = monotonic_ns();
        if let Some(pid) = only {
            let carried = &mut self.carried;
            self.last.retain(|tid, w| {
                let keep = w.sample.thread.pid != pid;
                if !keep {
                    carried.remove(tid);
                }
                keep
            });
        }
        let carried = &mut self.carried;
        self.waiting.retain(|&tid, w| {
            if only.is_some_and(|pid| pid != w.sample.thread.pid) {
                return true;
            }
            if !add(&w.sample, w.wait, now.saturating_sub(w.since_ns)) || only.is_some() {
                // Its process is gone: so is what was counted of its repeats.
                carried.remove(&tid);
                return false;
            }
            w.since_ns = now;
            w.seen_blocked_in.is_none()
                || blocked_in(w.sample.thread.pid, tid).map(|b| b.nr) == w.seen_blocked_in
        });
    }

    /// Threads in a wait that repeats their last recorded one, blocked for at least `after`
    /// and not reported yet, as of the last [`Waits::weigh_carried`]: read again before they
    /// are reported (the wait may have ended since).
    pub fn carried_stall_candidates(&self, after: Duration) -> Vec<u32> {
        let now = monotonic_ns();
        let after_ns = u64::try_from(after.as_nanos()).unwrap_or(u64::MAX);
        self.carried
            .iter()
            .filter(|(tid, c)| {
                c.blocked_since_ns != 0
                    && c.stall_reported_for != c.blocked_since_ns
                    && now.saturating_sub(c.blocked_since_ns) >= after_ns
                    && !self.waiting.contains_key(tid)
            })
            .map(|(&tid, _)| tid)
            .collect()
    }

    /// Threads blocked in one wait for at least `after`, each returned once per wait: a
    /// recorded wait, or one that repeats the thread's last recorded wait (as of the last
    /// [`Waits::weigh_carried`]), in its stack.
    pub fn take_new_stalls(&mut self, after: Duration) -> Vec<Stall> {
        let now = monotonic_ns();
        let after_ns = u64::try_from(after.as_nanos()).unwrap_or(u64::MAX);
        let mut stalls = Vec::new();
        for (&host_tid, w) in self.waiting.iter_mut() {
            let blocked_ns = now.saturating_sub(w.blocked_since_ns);
            if w.stall_reported || blocked_ns < after_ns {
                continue;
            }
            // A wait found at attach is still the same wait only while in the same call.
            if w.seen_blocked_in.is_some()
                && blocked_in(w.sample.thread.pid, host_tid).map(|b| b.nr) != w.seen_blocked_in
            {
                continue;
            }
            w.stall_reported = true;
            stalls.push(Stall::of(w, blocked_ns));
        }
        for (host_tid, c) in self.carried.iter_mut() {
            let since = c.blocked_since_ns;
            if since == 0 || c.stall_reported_for == since || self.waiting.contains_key(host_tid) {
                continue;
            }
            let blocked_ns = now.saturating_sub(since);
            let Some(w) = self.last.get(host_tid).filter(|_| blocked_ns >= after_ns) else {
                continue;
            };
            c.stall_reported_for = since;
            stalls.push(Stall::of(w, blocked_ns));
        }
        stalls.sort_by_key(|s| (s.pid, s.tid));
        stalls
    }

    /// Threads reported stalled and still blocked, per PID.
    pub fn stalled_threads(&self) -> HashMap<u32, u64> {
        let mut per_pid = HashMap::new();
        let carried_stalls = self
            .carried
            .iter()
            .filter(|(tid, c)| {
                c.blocked_since_ns != 0
                    && c.stall_reported_for == c.blocked_since_ns
                    && !self.waiting.contains_key(tid)
            })
            .filter_map(|(tid, _)| self.last.get(tid));
        for w in self
            .waiting
            .values()
            .filter(|w| w.stall_reported)
            .chain(carried_stalls)
        {
            *per_pid.entry(w.sample.thread.pid).or_insert(0) += 1;
        }
        per_pid
    }
}

impl Stall {
    /// The stall of the thread blocked in `w` for `blocked_ns`.
    fn of(w: &Waiting, blocked_ns: u64) -> Stall {
        Stall {
            pid: w.sample.thread.pid,
            tid: w.sample.thread.ns_tid(),
            thread_name: w.sample.thread.thread_name.clone(),
            wait: w.wait,
            blocked_for: Duration::from_nanos(blocked_ns),
            frames: w.sample.frames.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::tests::{frame, sample};

    fn wait(pid: u32, tid: u32, function: &str, since_ns: u64) -> Waiting {
        let s = sample(pid, tid, None, vec![frame(function, "app.py", 3, 1)]);
        Waiting::new(s, WaitReason::Sleep, since_ns, None)
    }

    /// A wait is weighed at its wake-up; the repeats carried by the next record go to that
    /// ended wait's stack; a wake-up with no wait, or of a process without a profile, says so.
    #[test]
    fn wake_ups_and_carried_time_go_to_the_right_stack() {
        let mut waits = Waits::default();
        let mut added: Vec<(String, u64)> = Vec::new();
        let mut add = |s: &ThreadSample, _: WaitReason, ns: u64| {
            added.push((s.frames[0].function().to_string(), ns));
            true
        };
        assert!(waits.blocked(11, wait(1, 11, "first", 100), 0, &mut add));
        assert_eq!(waits.woke(11, 150, &mut add), Woke::Weighed);
        assert!(waits.blocked(11, wait(1, 11, "second", 300), 40, &mut add));
        assert_eq!(waits.woke(12, 400, &mut add), Woke::Unmatched);
        assert!(
            !waits.blocked(13, wait(1, 13, "third", 300), 5, &mut add),
            "nothing to carry to"
        );
        assert_eq!(
            waits.woke(13, 400, |_: &ThreadSample, _: WaitReason, _: u64| false),
            Woke::Untracked
        );
        assert_eq!(
            added,
            [("first".to_string(), 50), ("first".to_string(), 40)]
        );
    }

    /// The program's running total of a thread's repeated waits is counted once, whether it
    /// is read from a record or from the thread's state, and the unrecorded wait under way
    /// counts up to now; once it has lasted long enough it is a stall, reported once, in the
    /// last recorded wait's stack.
    #[test]
    fn repeats_timed_by_the_program_count_once_and_can_stall() {
        let mut waits = Waits::default();
        let mut added: Vec<(String, u64)> = Vec::new();
        let mut add = |s: &ThreadSample, _: WaitReason, ns: u64| {
            added.push((s.frames[0].function().to_string(), ns));
            true
        };
        let state = |carried_ns: u64, blocked_ns: u64| PaOffCpuThread {
            tgid: 1,
            carried_ns,
            blocked_ns,
            ..PaOffCpuThread::default()
        };
        assert!(waits.blocked(11, wait(1, 11, "loop", 100), 0, &mut add));
        assert_eq!(waits.woke(11, 150, &mut add), Woke::Weighed);
        // 30 ns of repeats, then one under way since 1,000.
        waits.weigh_carried(&[11], 1_010, |_| Some(state(30, 1_000)), &mut add);
        // It ended at 1,020 (20 ns): only the 10 not counted yet are new.
        waits.weigh_carried(&[11], 2_000, |_| Some(state(50, 0)), &mut add);
        // A torn read that counted early: nothing until the total catches up.
        waits.weigh_carried(&[11], 2_000, |_| Some(state(45, 0)), &mut add);
        // No state (another process's thread by that tid reads as none): nothing.
        waits.weigh_carried(&[11], 2_000, |_| None, &mut add);
        // The next record carries the total: only its growth is new.
        assert!(waits.blocked(11, wait(1, 11, "other", 3_000), 70, &mut add));
        // The tid reused by another process: its program state starts again, and its first
        // record's total is its own (nothing to give to another process's wait).
        assert!(waits.woke(11, 3_100, &mut add) == Woke::Weighed);
        assert!(!waits.blocked(11, wait(2, 11, "reused", 4_000), 7, &mut add));
        assert_eq!(
            added,
            [
                ("loop".to_string(), 50),
                ("loop".to_string(), 40),
                ("loop".to_string(), 10),
                ("loop".to_string(), 20),
                ("other".to_string(), 100),
            ]
        );

        // A repeat under way for long is a stall, once, in the recorded wait's stack.
        let mut waits = Waits::default();
        let keep = |_: &ThreadSample, _: WaitReason, _: u64| true;
        let long_ago = monotonic_ns().saturating_sub(60_000_000_000);
        assert!(waits.blocked(12, wait(1, 12, "poll", 1), 0, keep));
        assert_eq!(waits.woke(12, 2, keep), Woke::Weighed);
        waits.weigh_carried(&[12], monotonic_ns(), |_| Some(state(0, long_ago)), keep);
        let stalls = waits.take_new_stalls(Duration::from_secs(5));
        assert_eq!(stalls.len(), 1);
        assert_eq!(stalls[0].frames[0].function(), "poll");
        assert!(stalls[0].blocked_for >= Duration::from_secs(60));
        assert_eq!(waits.stalled_threads().get(&1), Some(&1));
        assert!(waits.take_new_stalls(Duration::from_secs(5)).is_empty());
        // It ended: no longer stalled.
        waits.weigh_carried(&[12], monotonic_ns(), |_| Some(state(1, 0)), keep);
        assert!(waits.stalled_threads().is_empty());
    }

    /// A process that leaves takes its waits with it; the others' stay.
    #[test]
    fn a_leaving_process_ends_only_its_own_waits() {
        let mut waits = Waits::default();
        let mut seen = Vec::new();
        waits.found_blocked(21, wait(2, 21, "a", 0));
        waits.found_blocked(31, wait(3, 31, "b", 0));
        waits.weigh(Some(2), |s: &ThreadSample, _: WaitReason, _: u64| {
            seen.push(s.thread.pid);
            true
        });
        assert_eq!(seen, [2]);
        assert_eq!(waits.waiting.len(), 1);
        assert!(waits.waiting.contains_key(&31));
    }
}
