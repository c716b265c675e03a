//! The host profiler's table of blocked threads (off-CPU profiling): each thread's recorded
//! wait from its off-CPU record to its wake-up record, how its time reaches the profile, and
//! which waits have lasted long enough to be stalls.
//!
//! In: the off-CPU and wake-up records the host profiler resolved, the waits it found running
//! at attach, and its cuts. Out: off-CPU time for the aggregators, through the `add` function
//! each call takes (the profile of the wait's process; it says `false` when there is none), and
//! [`Stall`]s.

use std::collections::HashMap;
use std::time::Duration;

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

/// Threads off the CPU in a recorded stack, and each thread's last ended wait, by host TID.
#[derive(Debug, Default)]
pub(crate) struct Waits {
    waiting: HashMap<u32, Waiting>,
    /// Each thread's last recorded wait once it ended: the program counts the short waits that
    /// repeat it under it (`carried_ns` of the thread's next record).
    last: HashMap<u32, Waiting>,
}

impl Waits {
    /// Thread `tid` blocks in `waiting` (an off-CPU record). `carried_ns`, the time of the
    /// repeats of its previous recorded wait that the program timed but did not walk, goes to
    /// that wait's stack and reason. Returns false when there was carried time and no previous
    /// wait to give it to.
    pub fn blocked(
        &mut self,
        tid: u32,
        waiting: Waiting,
        carried_ns: u64,
        mut add: impl AddWait,
    ) -> bool {
        let previous = self.waiting.get(&tid).or(self.last.get(&tid));
        let carried = match previous {
            Some(w) => {
                add(&w.sample, w.wait, carried_ns);
                true
            }
            None => carried_ns == 0,
        };
        self.waiting.insert(tid, waiting);
        carried
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
    }

    /// Weighs the waits still running up to now (of every process, or only of `only`, which
    /// is leaving: its waits end with it), so that a thread blocked for minutes shows in every
    /// profile. A wait found at attach ends with no wake-up record if the thread woke before
    /// the program was told: it is over once the thread is in another call.
    pub fn weigh(&mut self, only: Option<u32>, mut add: impl AddWait) {
        let now = monotonic_ns();
        if let Some(pid) = only {
            self.last.retain(|_, w| w.sample.thread.pid != pid);
        }
        self.waiting.retain(|&tid, w| {
            if only.is_some_and(|pid| pid != w.sample.thread.pid) {
                return true;
            }
            if !add(&w.sample, w.wait, now.saturating_sub(w.since_ns)) || only.is_some() {
                return false;
            }
            w.since_ns = now;
            w.seen_blocked_in.is_none()
                || blocked_in(w.sample.thread.pid, tid).map(|b| b.nr) == w.seen_blocked_in
        });
    }

    /// Threads blocked in one wait for at least `after`, each returned once per wait.
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
            stalls.push(Stall {
                pid: w.sample.thread.pid,
                tid: w.sample.thread.ns_tid(),
                thread_name: w.sample.thread.thread_name.clone(),
                wait: w.wait,
                blocked_for: Duration::from_nanos(blocked_ns),
                frames: w.sample.frames.clone(),
            });
        }
        stalls.sort_by_key(|s| (s.pid, s.tid));
        stalls
    }

    /// Threads reported stalled and still blocked, per PID.
    pub fn stalled_threads(&self) -> HashMap<u32, u64> {
        let mut per_pid = HashMap::new();
        for w in self.waiting.values().filter(|w| w.stall_reported) {
            *per_pid.entry(w.sample.thread.pid).or_insert(0) += 1;
        }
        per_pid
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
