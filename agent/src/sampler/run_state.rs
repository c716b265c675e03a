//! Whether a target's threads are on a CPU, for the userspace sampler: the state letter of
//! `/proc/PID/task/TID/stat`, read through files kept open.
//!
//! At 1 kHz the sampler asks at every tick. Opening the process, listing its threads and
//! opening each thread's file every time cost more than unwinding a shallow stack (path walks,
//! permission checks, a directory read, one file open and close per thread). A `stat` file kept
//! open is generated again by every `pread` at offset 0, so a tick costs one system call per
//! thread. A file whose thread has exited fails its read and is dropped; a thread ID used again
//! by a new thread then gets a new file.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// Most files kept open per process: beyond, a thread's file is opened and closed each time.
const MAX_OPEN: usize = 256;

/// The open `stat` files of one process's threads.
#[derive(Debug)]
pub struct RunStates {
    pid: u32,
    /// host TID → its `stat` file, and the tick it was last read at
    files: HashMap<u32, (File, u64)>,
    tick: u64,
    buf: Vec<u8>,
}

impl RunStates {
    /// No file open yet.
    pub fn new(pid: u32) -> RunStates {
        RunStates {
            pid,
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

    /// Whether the thread `tid` is running or runnable (state `R`); false when it has exited.
    pub fn is_running(&mut self, tid: u32) -> bool {
        self.state(tid) == Some(b'R')
    }

    /// The thread's state letter, `None` if it cannot be read (exited).
    fn state(&mut self, tid: u32) -> Option<u8> {
        if let Some((file, read_at)) = self.files.get_mut(&tid) {
            if let Some(state) = read_state(file, &mut self.buf) {
                *read_at = self.tick;
                return Some(state);
            }
            // Exited, or its ID now names another thread: open again below.
            self.files.remove(&tid);
        }
        let file = File::open(format!("/proc/{}/task/{tid}/stat", self.pid)).ok()?;
        let state = read_state(&file, &mut self.buf)?;
        if self.files.len() < MAX_OPEN {
            self.files.insert(tid, (file, self.tick));
        }
        Some(state)
    }
}

/// The state letter of a `stat` file read whole from its start: the field after the command
/// name, which is in parentheses and may itself hold `)` and spaces.
fn read_state(file: &File, buf: &mut [u8]) -> Option<u8> {
    let n = file.read_at(buf, 0).ok()?;
    let line = &buf[..n];
    let close = line.iter().rposition(|&b| b == b')')?;
    line.get(close + 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test's own thread is running while it asks; a thread parked on a channel is not;
    /// once it has exited its state cannot be read, and the file is dropped at the next tick.
    #[test]
    fn reads_its_own_threads_states_through_open_files() {
        let pid = std::process::id();
        let me = nix::unistd::gettid().as_raw() as u32;
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let parked = std::thread::spawn(move || {
            tid_tx
                .send(nix::unistd::gettid().as_raw() as u32)
                .expect("send");
            go_rx.recv().ok();
        });
        let other = tid_rx.recv().expect("the thread's id");
        let mut states = RunStates::new(pid);
        states.begin_tick();
        assert!(states.is_running(me));
        // Kept open: the second read is a pread of the same file.
        assert!(states.is_running(me));
        assert_eq!(states.files.len(), 1);
        // The parked thread blocks in its receive; wait (bounded) until it is asleep.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while states.state(other) != Some(b'S') {
            assert!(
                std::time::Instant::now() < deadline,
                "the parked thread never slept"
            );
            std::thread::yield_now();
        }
        assert!(!states.is_running(other));
        go_tx.send(()).expect("send");
        parked.join().expect("join");
        assert!(!states.is_running(other));
        states.begin_tick();
        states.begin_tick();
        assert!(states.files.is_empty());
    }
}
