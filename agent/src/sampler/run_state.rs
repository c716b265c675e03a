//! Whether a target's threads are on a CPU, for the userspace sampler: read from
//! `/proc/PID/task/TID/syscall` through files kept open (`stat` where that cannot be read).
//!
//! At 1 kHz the sampler asks at every tick. Opening the process, listing its threads and
//! opening each thread's file every time cost more than unwinding a shallow stack (path walks,
//! permission checks, a directory read, one file open and close per thread). A file kept open
//! is generated again by every `pread` at offset 0, so a tick costs one system call per thread.
//! A file whose thread has exited fails its read and is dropped; a thread ID used again by a new
//! thread then gets a new file.
//!
//! `syscall` reads `running` exactly when the thread's state is running or runnable (`R` in
//! `stat`), and otherwise names the system call it sleeps in. Here it costs 0.9 µs a read for a
//! running thread and 1.8 µs for a sleeping one, `stat` 3.2 µs for either (a C loop of 50,000
//! `pread`s against a busy and a sleeping 3.13 process): `stat` formats some fifty fields. It
//! needs the access `process_vm_readv` needs (ptrace attach); where that is refused the process's
//! states come from `stat`, which anyone may read.

use std::collections::HashMap;
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;

use crate::sampler::off_cpu::{parse_syscall, BlockedIn};

/// Most files kept open per process: beyond, a thread's file is opened and closed each time.
const MAX_OPEN: usize = 256;

/// Which `/proc/PID/task/TID/` file gives a process's thread states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StateFile {
    /// `syscall`: `running`, or the system call the thread sleeps in.
    Syscall,
    /// `stat`: the state letter.
    Stat,
}

impl StateFile {
    fn name(self) -> &'static str {
        match self {
            StateFile::Syscall => "syscall",
            StateFile::Stat => "stat",
        }
    }

    /// Whether the file's text says the thread is running or runnable.
    fn says_running(self, text: &[u8]) -> bool {
        match self {
            StateFile::Syscall => text.starts_with(b"running"),
            StateFile::Stat => stat_state(text) == Some(b'R'),
        }
    }
}

/// The open state files of one process's threads.
#[derive(Debug)]
pub struct RunStates {
    pid: u32,
    source: StateFile,
    /// host TID → its state file, and the tick it was last read at
    files: HashMap<u32, (File, u64)>,
    tick: u64,
    buf: Vec<u8>,
}

impl RunStates {
    /// No file open yet.
    pub fn new(pid: u32) -> RunStates {
        RunStates {
            pid,
            source: StateFile::Syscall,
            files: HashMap::new(),
            tick: 0,
            buf: vec![0; 512],
        }
    }

    /// Starts a tick; files not read during the previous one (threads that left the
    /// interpreter's list) are closed.
    pub fn begin_tick(&mut self) {
        let last = self.tick;
        self.files.retain(|_, (_, read_at)| *read_at == last);
        self.tick += 1;
    }

    /// Whether the thread `tid` is running or runnable; false when it has exited.
    pub fn is_running(&mut self, tid: u32) -> bool {
        let source = self.source;
        self.read(tid).is_some_and(|text| source.says_running(text))
    }

    /// What thread `tid` is blocked in: its `syscall` file, kept open, read again (the text of
    /// this tick's read is gone, the buffer serves every thread). `None` when it runs, has
    /// exited, or the process's states come from `stat` (its `syscall` refused or missing).
    pub fn blocked_in(&mut self, tid: u32) -> Option<BlockedIn> {
        if self.source != StateFile::Syscall {
            return None;
        }
        let text = self.read(tid)?;
        parse_syscall(std::str::from_utf8(text).ok()?)
    }

    /// The text of the thread's state file, `None` if it cannot be read (exited).
    fn read(&mut self, tid: u32) -> Option<&[u8]> {
        let kept = match self.files.get_mut(&tid) {
            Some((file, read_at)) => match read_whole(file, &mut self.buf) {
                Ok(n) => {
                    *read_at = self.tick;
                    Some(n)
                }
                Err(e) => {
                    self.refused(&e);
                    None
                }
            },
            None => None,
        };
        if let Some(n) = kept {
            return Some(&self.buf[..n]);
        }
        // Exited, or its ID now names another thread (or the source changed): open again,
        // and once more from `stat` if `syscall` is refused.
        self.files.remove(&tid);
        let mut opened = None;
        for _ in 0..2 {
            let path = format!("/proc/{}/task/{tid}/{}", self.pid, self.source.name());
            match File::open(path).and_then(|file| Ok((read_whole(&file, &mut self.buf)?, file))) {
                Ok(read) => {
                    opened = Some(read);
                    break;
                }
                Err(e) if self.refused(&e) || self.missing(&e, tid) => continue,
                Err(_) => return None,
            }
        }
        let (n, file) = opened?;
        if self.files.len() < MAX_OPEN {
            self.files.insert(tid, (file, self.tick));
        }
        Some(&self.buf[..n])
    }

    /// Whether `e` says this kernel has no `syscall` file (built without it) while the thread
    /// is there: then the process's states come from `stat`, as when refused.
    fn missing(&mut self, e: &std::io::Error, tid: u32) -> bool {
        let missing = self.source == StateFile::Syscall
            && e.kind() == ErrorKind::NotFound
            && std::path::Path::new(&format!("/proc/{}/task/{tid}/stat", self.pid)).exists();
        if missing {
            self.use_stat(e);
        }
        missing
    }

    /// Whether `e` is the kernel refusing a `syscall` file (at open, or at read, where it checks
    /// ptrace access): then the process's states come from `stat` from now on. A read refused
    /// must not pass for a thread that exited: the thread would never be sampled.
    fn refused(&mut self, e: &std::io::Error) -> bool {
        let refused = self.source == StateFile::Syscall
            && (e.kind() == ErrorKind::PermissionDenied
                || e.raw_os_error() == Some(nix::libc::EPERM));
        if refused {
            self.use_stat(e);
        }
        refused
    }

    /// Moves the process to `stat`, its `syscall` files closed.
    fn use_stat(&mut self, why: &std::io::Error) {
        tracing::debug!(pid = self.pid, "thread states from stat: syscall ({why})");
        self.source = StateFile::Stat;
        self.files.clear();
    }
}

/// Reads a state file whole from its start (an error, or nothing read: the thread is gone).
fn read_whole(file: &File, buf: &mut [u8]) -> std::io::Result<usize> {
    match file.read_at(buf, 0)? {
        0 => Err(ErrorKind::UnexpectedEof.into()),
        n => Ok(n),
    }
}

/// The state letter of a `stat` line: the field after the command name, which is in
/// parentheses and may itself hold `)` and spaces.
fn stat_state(line: &[u8]) -> Option<u8> {
    let close = line.iter().rposition(|&b| b == b')')?;
    line.get(close + 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// A thread that spins, its host TID, and the flag that stops it.
    fn spinner() -> (u32, Arc<AtomicBool>, std::thread::JoinHandle<()>) {
        let stop = Arc::new(AtomicBool::new(false));
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            tid_tx
                .send(nix::unistd::gettid().as_raw() as u32)
                .expect("send");
            while !flag.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        (tid_rx.recv().expect("the thread's id"), stop, handle)
    }

    /// A thread parked on a channel until told to go, its host TID, and the sender that frees it.
    fn parked() -> (
        u32,
        std::sync::mpsc::Sender<()>,
        std::thread::JoinHandle<()>,
    ) {
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            tid_tx
                .send(nix::unistd::gettid().as_raw() as u32)
                .expect("send");
            go_rx.recv().ok();
        });
        (tid_rx.recv().expect("the thread's id"), go_tx, handle)
    }

    /// Waits (bounded) until `tid` reads as `running`.
    fn until(states: &mut RunStates, tid: u32, running: bool, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while states.is_running(tid) != running {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::yield_now();
        }
    }

    /// A spinning thread is running, a thread parked on a channel is not; once a thread has
    /// exited its state cannot be read, and the file is dropped at the next tick. (A thread
    /// reading its own `syscall` file sees itself in the read: the sampler reads other
    /// processes.)
    fn reads_states_through_open_files(source: StateFile) {
        let pid = std::process::id();
        let (spinning, stop, spin) = spinner();
        let (other, go_tx, parked) = parked();
        let mut states = RunStates::new(pid);
        states.source = source;
        states.begin_tick();
        until(&mut states, spinning, true, "the spinning thread never ran");
        // Kept open: the next read is a pread of the same file.
        assert_eq!(states.files.len(), 1);
        until(&mut states, other, false, "the parked thread never slept");
        assert_eq!(states.files.len(), 2);
        go_tx.send(()).expect("send");
        parked.join().expect("join");
        stop.store(true, Ordering::Relaxed);
        spin.join().expect("join");
        // A joined thread may still be in the kernel's exit path for a moment, runnable.
        until(&mut states, other, false, "the parked thread never left");
        until(
            &mut states,
            spinning,
            false,
            "the spinning thread never left",
        );
        states.begin_tick();
        states.begin_tick();
        assert!(states.files.is_empty());
        assert_eq!(states.source, source);
    }

    #[test]
    fn reads_thread_states_from_syscall() {
        reads_states_through_open_files(StateFile::Syscall);
    }

    /// A thread parked on a channel is blocked in a futex, read from its open `syscall` file; a
    /// spinning thread is blocked in nothing; with states from `stat` nothing is known.
    #[test]
    fn a_parked_thread_is_blocked_in_a_futex() {
        let (spinning, stop, spin) = spinner();
        let (other, go_tx, parked) = parked();
        let mut states = RunStates::new(std::process::id());
        states.begin_tick();
        until(&mut states, other, false, "the parked thread never slept");
        let deadline = Instant::now() + Duration::from_secs(10);
        while states.blocked_in(other).map(|b| b.class) != Some(common::WAIT_FUTEX) {
            assert!(
                Instant::now() < deadline,
                "the parked thread never waited on a futex"
            );
            std::thread::yield_now();
        }
        until(&mut states, spinning, true, "the spinning thread never ran");
        // A thread read as running may be preempted before the second read: ask until it runs.
        while states.blocked_in(spinning).is_some() {
            assert!(
                Instant::now() < deadline,
                "the spinning thread stayed blocked"
            );
            std::thread::yield_now();
        }
        states.source = StateFile::Stat;
        assert_eq!(states.blocked_in(other), None);
        go_tx.send(()).expect("send");
        parked.join().expect("join");
        stop.store(true, Ordering::Relaxed);
        spin.join().expect("join");
    }

    #[test]
    fn reads_thread_states_from_stat() {
        reads_states_through_open_files(StateFile::Stat);
    }

    /// A `syscall` file refused (EACCES at open, EPERM at read) moves the process to `stat`; a
    /// thread that is gone does not.
    #[test]
    fn a_refused_syscall_file_moves_the_process_to_stat() {
        let mut states = RunStates::new(std::process::id());
        assert!(!states.refused(&ErrorKind::NotFound.into()));
        assert!(!states.refused(&ErrorKind::UnexpectedEof.into()));
        assert_eq!(states.source, StateFile::Syscall);
        assert!(states.refused(&std::io::Error::from_raw_os_error(nix::libc::EPERM)));
        assert_eq!(states.source, StateFile::Stat);
        // Stat is never refused for access: a second refusal changes nothing.
        assert!(!states.refused(&std::io::Error::from_raw_os_error(nix::libc::EACCES)));
        let mut states = RunStates::new(std::process::id());
        assert!(states.refused(&std::io::Error::from_raw_os_error(nix::libc::EACCES)));
        assert_eq!(states.source, StateFile::Stat);
    }

    #[test]
    fn the_state_letter_follows_the_last_parenthesis() {
        assert_eq!(stat_state(b"12 (a) b) R 1 2"), Some(b'R'));
        assert_eq!(stat_state(b"12 (x) S 1"), Some(b'S'));
        assert_eq!(stat_state(b"garbage"), None);
    }
}
