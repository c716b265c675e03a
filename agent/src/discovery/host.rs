//! Host-wide discovery: every process on the host, classified once, re-checked when it execs.
//!
//! A process is identified by (pid, start time) so a reused PID is a new process; an `exec`
//! keeps both, so the executable's identity is checked too. Each process ends up in one
//! [`ProcessState`], logged once when it is reached; processes whose runtime is not initialised
//! yet (just started) are retried on later scans for a while.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::{locate_runtime, DiscoveryError, PythonTarget};
use crate::offsets::OffsetsError;

/// What discovery concluded about a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessState {
    /// Not a CPython process.
    NotPython,
    /// CPython, but a version or build we cannot read (why, and the one-line refusal).
    Unsupported(UnsupportedReason, String),
    /// Located and validated: being profiled.
    Ready,
    /// Looked like CPython but could not be read (with the reason).
    Failed(String),
    /// Runtime not initialised yet; retried until the deadline.
    Pending,
    /// Could not be inspected for lack of permission (with the reason): never `NotPython`,
    /// since nothing says it is not.
    Denied(String),
}

/// Why a CPython process is [`ProcessState::Unsupported`]: the service counts them by it
/// (`pyagent_processes_unsupported{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnsupportedReason {
    /// A release pyagent has no layout for (2.7, 3.5, one newer than it knows).
    Version,
    /// An alpha, beta or candidate: layouts are not frozen before the final release.
    PreRelease,
}

impl UnsupportedReason {
    /// Every reason, in the order they are exported.
    pub const ALL: [UnsupportedReason; 2] =
        [UnsupportedReason::Version, UnsupportedReason::PreRelease];

    /// The `reason` label value.
    pub fn label(self) -> &'static str {
        match self {
            UnsupportedReason::Version => "unsupported_version",
            UnsupportedReason::PreRelease => "pre_release",
        }
    }
}

/// A [`ProcessState`] without its reason: what processes are counted by
/// (`pyagent_processes{state}`, the summary of a run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProcessKind {
    /// Not a CPython process.
    NotPython,
    /// CPython, but a version or build we cannot read.
    Unsupported,
    /// Being profiled.
    Ready,
    /// Looked like CPython but could not be read.
    Failed,
    /// Runtime not initialised yet.
    Pending,
    /// Could not be inspected for lack of permission.
    Denied,
}

impl ProcessKind {
    /// Every kind, in the order they are exported.
    pub const ALL: [ProcessKind; 6] = [
        ProcessKind::NotPython,
        ProcessKind::Unsupported,
        ProcessKind::Ready,
        ProcessKind::Failed,
        ProcessKind::Pending,
        ProcessKind::Denied,
    ];

    /// The `state` label value.
    pub fn label(self) -> &'static str {
        match self {
            ProcessKind::NotPython => "not_python",
            ProcessKind::Unsupported => "unsupported",
            ProcessKind::Ready => "ready",
            ProcessKind::Failed => "failed",
            ProcessKind::Pending => "pending",
            ProcessKind::Denied => "denied",
        }
    }
}

impl std::fmt::Display for ProcessKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

impl ProcessState {
    /// The state without its reason.
    pub fn kind(&self) -> ProcessKind {
        match self {
            ProcessState::NotPython => ProcessKind::NotPython,
            ProcessState::Unsupported(..) => ProcessKind::Unsupported,
            ProcessState::Ready => ProcessKind::Ready,
            ProcessState::Failed(_) => ProcessKind::Failed,
            ProcessState::Pending => ProcessKind::Pending,
            ProcessState::Denied(_) => ProcessKind::Denied,
        }
    }

    /// Why a process is not profiled, for the states that have a reason.
    pub fn reason(&self) -> Option<&str> {
        match self {
            ProcessState::Unsupported(_, why)
            | ProcessState::Failed(why)
            | ProcessState::Denied(why) => Some(why),
            _ => None,
        }
    }
}

/// A process that looked like CPython (or could not be looked at) and is not profiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotProfiled {
    /// Host pid.
    pub pid: u32,
    /// Unsupported, failed or denied.
    pub kind: ProcessKind,
    /// Why.
    pub reason: String,
}

/// Longest wait between two looks at a pending process: an interpreter its program starts late
/// (an embedder) is found at most this long after it started.
const PENDING_LOOK_GAP: Duration = Duration::from_secs(8);

/// Whether a pending process last looked at `looked_at_age` after it was first seen is looked
/// at again at `age`: once its age has doubled, or [`PENDING_LOOK_GAP`] later (0 s, then the
/// next scan, 1 s, 2 s, 4 s, 8 s, 16 s, 24 s, 32 s).
fn look_again(looked_at_age: Duration, age: Duration) -> bool {
    age >= (looked_at_age * 2).min(looked_at_age + PENDING_LOOK_GAP)
}

/// Identity of a process instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProcessKey {
    /// host pid
    pub pid: u32,
    /// start time in clock ticks since boot (field 22 of /proc/PID/stat)
    pub start_time: u64,
}

#[derive(Debug)]
struct Known {
    stat: StatIdentity,
    exe: Option<std::path::PathBuf>,
    state: ProcessState,
    first_seen: Instant,
    /// how long after `first_seen` it was last looked at (a pending process is looked at again
    /// once its age has doubled since)
    looked_at_age: Duration,
}

/// What changed in one scan.
#[derive(Debug, Default)]
pub struct ScanChanges {
    /// processes that became ready
    pub ready: Vec<PythonTarget>,
    /// ready processes that exited or exec'd into something else
    pub gone: Vec<u32>,
}

/// Scans /proc and keeps the state of every process.
#[derive(Debug)]
pub struct HostScanner {
    known: HashMap<u32, Known>,
    /// only these pids (and nothing else) when set
    only: Option<HashSet<u32>>,
    /// with `only`: their descendants too, as they appear (a launcher's Python children)
    subprocesses: bool,
    pending_timeout: Duration,
    /// our own pid: never profiled
    own_pid: u32,
    /// what is reported with [`HostScanner::notice`], which decides what a scan reads
    notices: ProcessNotices,
    /// pids noticed since the last scan
    noticed: HashSet<u32>,
    scans_since_full_check: u32,
    scans_since_others_check: u32,
    scans_since_listing: u32,
    /// denied processes at the last warning: it is repeated only when more are denied
    denied_reported: usize,
}

/// With notices, every this many scans the profiled and pending processes are re-read anyway: a
/// notice can be lost, and a PID reused by a fork without exec of an untracked process sends
/// none.
const FULL_CHECK_EVERY: u32 = 20;

/// With notices, every this many scans (60 s at the agent's 500 ms) the other known processes
/// (not Python, denied, failed) are re-read too. Every exec on the host is noticed, so this
/// bounds how late a process that became Python is found after a lost notice, or after its PID
/// was taken, between two listings, by a fork without exec of a process not tracked (which sends
/// no notice). Re-reading every such process's `stat` every 10 s was a twentieth of the agent's
/// time with 50 profiled processes among 120.
const OTHERS_CHECK_EVERY: u32 = 120;

/// With [`ProcessNotices::Lifetimes`], /proc is listed every this many scans (5 s at the
/// agent's 500 ms), for what no notice covers: a lost notice, a process that loads libpython
/// without exec, a process that exits while its main thread's exit left it looking alive.
const LIST_EVERY: u32 = 10;

/// What the BPF programs report of processes' lives ([`HostScanner::notice`]), which decides
/// how much of /proc each scan reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessNotices {
    /// Nothing: every scan lists /proc and re-reads every known process's identity.
    None,
    /// Every exec on the host: every scan lists /proc (new processes, exits); known processes
    /// are re-read when they exec'd, the profiled and pending ones every [`FULL_CHECK_EVERY`]
    /// scans, the others every [`OTHERS_CHECK_EVERY`].
    Execs,
    /// Every exec, and tracked processes' forks and exits: a new Python process sends one (it
    /// execs, or a tracked Python process forked it), so /proc is listed every [`LIST_EVERY`]
    /// scans, and on the scan after one that found a process ready (for children it forked
    /// before it was tracked); the scans between look at the noticed and pending ones only.
    Lifetimes,
}

/// What /proc/PID/stat tells about which program a process runs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StatIdentity {
    /// field 22: a different value is a different process (PID reuse)
    start_time: u64,
    /// field 2: the executable's name after an exec (or a name the process gave itself)
    comm: String,
    /// field 28: randomized anew by every exec, even of the same file (0 when not permitted)
    start_stack: u64,
    /// field 9 has `PF_KTHREAD`: a kernel thread, which has no executable to read (without
    /// `CAP_SYS_PTRACE` its `exe` link answers EACCES, like a process we may not read)
    kernel_thread: bool,
}

impl StatIdentity {
    fn read(pid: u32) -> Option<StatIdentity> {
        let s = super::procfs_util::stat(pid)?;
        /// `PF_KTHREAD` of `include/linux/sched.h`.
        const PF_KTHREAD: u32 = 0x0020_0000;
        Some(StatIdentity {
            start_time: s.starttime,
            comm: s.comm,
            start_stack: s.startstack,
            kernel_thread: s.flags & PF_KTHREAD != 0,
        })
    }

    /// Whether `now` is the same process running the same program as `self`. An exec keeps
    /// the pid and start time; it moves the stack, and it renames the process unless the new
    /// program has the same name. Ready processes are checked by executable path instead of
    /// name, since a Python program may rename itself (setproctitle) as often as it likes.
    fn same_program(&self, now: &StatIdentity, by_name: bool) -> bool {
        self.start_time == now.start_time
            && self.start_stack == now.start_stack
            && (!by_name || self.comm == now.comm)
    }
}

fn classify(e: &DiscoveryError) -> Option<ProcessState> {
    Some(match e {
        DiscoveryError::NoSuchProcess { .. } | DiscoveryError::Exited { .. } => return None,
        DiscoveryError::NotPython { .. } => ProcessState::NotPython,
        DiscoveryError::Offsets {
            layout: OffsetsError::Unsupported(_) | OffsetsError::UnsupportedRelease(..),
            ..
        } => ProcessState::Unsupported(UnsupportedReason::Version, e.to_string()),
        DiscoveryError::Offsets {
            layout: OffsetsError::PreRelease(_),
            ..
        } => ProcessState::Unsupported(UnsupportedReason::PreRelease, e.to_string()),
        DiscoveryError::NotInitialized { .. } => ProcessState::Pending,
        DiscoveryError::Denied { .. } => ProcessState::Denied(e.to_string()),
        _ => ProcessState::Failed(e.to_string()),
    })
}

impl HostScanner {
    /// A scanner of every process (`only` None) or of the given pids.
    pub fn new(only: Option<&[u32]>) -> HostScanner {
        HostScanner {
            known: HashMap::new(),
            only: only.map(|p| p.iter().copied().collect()),
            subprocesses: false,
            pending_timeout: Duration::from_secs(30),
            own_pid: std::process::id(),
            notices: ProcessNotices::None,
            noticed: HashSet::new(),
            scans_since_full_check: 0,
            scans_since_others_check: 0,
            // The first scan lists /proc whatever the notices.
            scans_since_listing: LIST_EVERY,
            denied_reported: 0,
        }
    }

    /// Scans the given pids' descendants too, found anew at each scan: a child is looked at
    /// when it appears, again after it execs (a shell's fork on its way to Python), and until
    /// its interpreter is initialized.
    pub fn follow_subprocesses(&mut self) {
        self.subprocesses = true;
    }

    /// From now on what `notices` says is reported with [`HostScanner::notice`] (the BPF
    /// tracepoint programs): scans read less of /proc.
    pub fn use_notices(&mut self, notices: ProcessNotices) {
        self.notices = notices;
    }

    /// Process `pid` exec'd, was forked by a tracked process, or exited: the next scan looks at
    /// it (again).
    pub fn notice(&mut self, pid: u32) {
        if self.notices != ProcessNotices::None {
            self.noticed.insert(pid);
        }
    }

    /// Number of known processes per state label.
    pub fn counts(&self) -> Vec<(ProcessKind, usize)> {
        let mut counts: HashMap<ProcessKind, usize> = HashMap::new();
        for k in self.known.values() {
            *counts.entry(k.state.kind()).or_default() += 1;
        }
        let mut v: Vec<_> = counts.into_iter().collect();
        v.sort();
        v
    }

    /// Number of known unsupported processes per reason.
    pub fn unsupported_counts(&self) -> Vec<(UnsupportedReason, usize)> {
        UnsupportedReason::ALL
            .iter()
            .map(|&reason| {
                let n = self
                    .known
                    .values()
                    .filter(|k| matches!(k.state, ProcessState::Unsupported(r, _) if r == reason))
                    .count();
                (reason, n)
            })
            .collect()
    }

    /// The `limit` processes seen last that are not profiled for a reason (unsupported,
    /// failed, denied), newest first: which process, and why, without one series per pid
    /// on the host.
    pub fn not_profiled(&self, limit: usize) -> Vec<NotProfiled> {
        let mut v: Vec<(&Instant, NotProfiled)> = self
            .known
            .iter()
            .filter_map(|(pid, k)| {
                Some((
                    &k.first_seen,
                    NotProfiled {
                        pid: *pid,
                        kind: k.state.kind(),
                        reason: k.state.reason()?.to_string(),
                    },
                ))
            })
            .collect();
        // Newest first; within one scan (the same instant, near enough), higher pids first.
        v.sort_by(|a, b| b.0.cmp(a.0).then(b.1.pid.cmp(&a.1.pid)));
        v.into_iter().take(limit).map(|(_, n)| n).collect()
    }

    /// Marks a ready process as failed (e.g. the sampler could not take it), logging why.
    pub fn mark_failed(&mut self, pid: u32, why: String) {
        tracing::warn!(pid, "cannot profile: {why}");
        if let Some(k) = self.known.get_mut(&pid) {
            k.state = ProcessState::Failed(why);
        }
    }

    /// State of a pid, if known.
    pub fn state(&self, pid: u32) -> Option<&ProcessState> {
        self.known.get(&pid).map(|k| &k.state)
    }

    fn pids(&self) -> Vec<u32> {
        if let Some(only) = &self.only {
            let mut pids: Vec<u32> = only.iter().copied().collect();
            if self.subprocesses {
                pids.extend(super::procfs_util::descendants(&pids));
                // A child outlives its parent as an orphan, no longer a descendant: still
                // followed until it exits (the identity check below sees that).
                pids.extend(self.known.keys());
                pids.sort_unstable();
                pids.dedup();
            }
            return pids;
        }
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect()
    }

    /// One pass over /proc (or over the noticed processes, see [`ProcessNotices`]): new
    /// processes are located, exited or exec'd ones reported gone.
    pub fn scan(&mut self) -> ScanChanges {
        let mut changes = ScanChanges::default();
        let listing = self.notices != ProcessNotices::Lifetimes
            || self.only.is_some()
            || self.scans_since_listing + 1 >= LIST_EVERY;
        self.scans_since_listing = if listing {
            0
        } else {
            self.scans_since_listing + 1
        };
        let live: Option<HashSet<u32>> = listing.then(|| {
            self.pids()
                .into_iter()
                .filter(|&p| p != self.own_pid)
                .collect()
        });
        // Exits (and PID reuse: a different start time is a different process).
        let full_check = self.notices == ProcessNotices::None
            || self.scans_since_full_check + 1 >= FULL_CHECK_EVERY;
        self.scans_since_full_check = if full_check {
            0
        } else {
            self.scans_since_full_check + 1
        };
        let others_check = self.notices == ProcessNotices::None
            || self.scans_since_others_check + 1 >= OTHERS_CHECK_EVERY;
        self.scans_since_others_check = if others_check {
            0
        } else {
            self.scans_since_others_check + 1
        };
        let noticed = std::mem::take(&mut self.noticed);
        let mut dropped = Vec::new();
        for (&pid, k) in &self.known {
            if live.as_ref().is_some_and(|live| !live.contains(&pid)) {
                dropped.push(pid);
                continue;
            }
            let ready = k.state == ProcessState::Ready;
            let due = if ready || k.state == ProcessState::Pending {
                full_check
            } else {
                others_check
            };
            if !due && !noticed.contains(&pid) {
                continue;
            }
            // A process seen before its exec (a shell or `chroot` about to run Python) must be
            // looked at again after it, whatever state it was given.
            let same = StatIdentity::read(pid).is_some_and(|now| k.stat.same_program(&now, !ready))
                && (!ready || super::procfs_util::exe_path(pid) == k.exe);
            if !same {
                dropped.push(pid);
            }
        }
        for pid in dropped {
            if let Some(k) = self.known.remove(&pid) {
                if k.state == ProcessState::Ready {
                    tracing::info!(
                        pid,
                        by_notice = noticed.contains(&pid),
                        "profiled process gone"
                    );
                    changes.gone.push(pid);
                }
            }
        }
        // Without a listing, the candidates are the noticed processes and the pending ones (an
        // interpreter not initialized yet when last looked at).
        let candidates = live.unwrap_or_else(|| {
            let mut c = noticed.clone();
            c.extend(
                self.known
                    .iter()
                    .filter(|(_, k)| k.state == ProcessState::Pending)
                    .map(|(&pid, _)| pid),
            );
            c.remove(&self.own_pid);
            c
        });
        for pid in candidates {
            // A pending process is looked at again once its age has doubled since the last look:
            // an interpreter is initialized moments after its exec, while a program that links
            // libpython without starting it (`perf`, `gdb`) stays pending until the timeout, and
            // each look reads its maps and symbols again (every scan, that was a tenth of the
            // agent's time while one `perf` ran).
            let retry = match self.known.get(&pid) {
                None => true,
                Some(k) => {
                    k.state == ProcessState::Pending
                        && look_again(k.looked_at_age, k.first_seen.elapsed())
                }
            };
            if !retry {
                continue;
            }
            let Some(stat) = StatIdentity::read(pid) else {
                continue;
            };
            // Kernel threads have no executable, so no maps worth reading; a process whose
            // executable cannot be read for lack of permission is denied, not "not Python".
            if let (Err(e), None) = (
                std::fs::read_link(format!("/proc/{pid}/exe")),
                self.only.as_ref(),
            ) {
                let state =
                    if e.kind() == std::io::ErrorKind::PermissionDenied && !stat.kernel_thread {
                        ProcessState::Denied(format!(
                            "permission denied reading /proc/{pid}/exe: {}",
                            super::privileges::denied_hint()
                        ))
                    } else {
                        ProcessState::NotPython
                    };
                self.known.insert(
                    pid,
                    Known {
                        stat,
                        exe: None,
                        state,
                        first_seen: Instant::now(),
                        looked_at_age: Duration::ZERO,
                    },
                );
                continue;
            }
            let first_seen = self
                .known
                .get(&pid)
                .map(|k| k.first_seen)
                .unwrap_or_else(Instant::now);
            // Its age when the look began: the next look's time is reckoned from it.
            let looked_at_age = first_seen.elapsed();
            let exe = super::procfs_util::exe_path(pid);
            let state = match locate_runtime(pid) {
                Ok(target) => {
                    tracing::info!(pid, version = %target.version(), object = %target.object_path.display(), by_notice = noticed.contains(&pid), "profiling CPython process");
                    changes.ready.push(target);
                    ProcessState::Ready
                }
                Err(e) => match classify(&e) {
                    None => continue,
                    Some(ProcessState::Pending) if first_seen.elapsed() >= self.pending_timeout => {
                        ProcessState::Failed(e.to_string())
                    }
                    Some(s) => s,
                },
            };
            match &state {
                ProcessState::Unsupported(_, why) => tracing::warn!(pid, "not profiling: {why}"),
                ProcessState::Failed(why) => tracing::warn!(pid, "cannot profile: {why}"),
                ProcessState::Denied(why) => tracing::debug!(pid, "cannot inspect: {why}"),
                _ => {}
            }
            self.known.insert(
                pid,
                Known {
                    stat,
                    exe,
                    state,
                    first_seen,
                    looked_at_age,
                },
            );
        }
        let denied = self.denied_count();
        if denied > self.denied_reported {
            // Info, not warn: the service logs it; a one-shot run says it in its summary (and
            // fails when nothing else can be profiled for lack of privileges).
            tracing::info!(
                pids = ?self.denied_pids(),
                "{} cannot be inspected: permission denied (without CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH, or protected from any reader); not profiled",
                count_processes(denied)
            );
        }
        self.denied_reported = denied;
        if !changes.ready.is_empty() {
            // Children forked before their parent was tracked sent no notice.
            self.scans_since_listing = LIST_EVERY;
        }
        changes
    }

    /// The processes that could not be inspected for lack of permission, in pid order.
    pub fn denied_pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .known
            .iter()
            .filter(|(_, k)| matches!(k.state, ProcessState::Denied(_)))
            .map(|(&pid, _)| pid)
            .collect();
        pids.sort_unstable();
        pids
    }

    /// Processes that could not be inspected for lack of permission.
    pub fn denied_count(&self) -> usize {
        self.known
            .values()
            .filter(|k| matches!(k.state, ProcessState::Denied(_)))
            .count()
    }
}

/// "1 process", "2 processes".
pub fn count_processes(n: usize) -> String {
    if n == 1 {
        "1 process".to_string()
    } else {
        format!("{n} processes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At a scan every 500 ms, a pending process is looked at when 0, 0.5, 1, 2, 4, 8, 16, 24
    /// and 32 s old: eight looks before it is given up at 30 s (the ninth gives it up), where
    /// every scan made sixty.
    #[test]
    fn pending_processes_are_looked_at_as_their_age_doubles() {
        let scan = Duration::from_millis(500);
        let mut looks = vec![Duration::ZERO];
        let mut age = Duration::ZERO;
        while age < Duration::from_secs(32) {
            age += scan;
            if look_again(*looks.last().unwrap(), age) {
                looks.push(age);
            }
        }
        let secs: Vec<f64> = looks.iter().map(Duration::as_secs_f64).collect();
        assert_eq!(secs, [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 24.0, 32.0]);
    }

    #[test]
    fn process_counts_read_as_english() {
        assert_eq!(count_processes(1), "1 process");
        assert_eq!(count_processes(0), "0 processes");
        assert_eq!(count_processes(3), "3 processes");
    }

    /// Without `CAP_SYS_PTRACE` a kernel thread's `exe` answers EACCES like a process that may
    /// not be read; its stat flags tell it apart, so it is not counted as denied.
    #[test]
    fn kernel_threads_are_told_apart_by_their_flags() {
        // kthreadd is pid 2 wherever the host's PID namespace is visible.
        if let Some(kthreadd) = StatIdentity::read(2) {
            assert!(kthreadd.kernel_thread, "kthreadd");
        }
        let me = StatIdentity::read(std::process::id()).expect("our own stat");
        assert!(!me.kernel_thread);
    }
}
