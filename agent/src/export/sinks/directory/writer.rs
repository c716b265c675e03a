//! Archive writes off the sampling thread. Each file is synced before it is renamed into place,
//! and on a busy disk a sync takes tens of milliseconds: a window of 200 processes written in
//! the service loop stopped sampling for seconds (the BPF ring buffer fills meanwhile). The
//! loop hands each profile to a writer thread through a bounded queue instead; when the queue
//! is full the loop writes the profile itself, so a slow disk slows the loop as before but never
//! loses a profile. [`ArchiveWriter::finish`] writes what is queued and joins the thread.

use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::DirectorySink;
use crate::export::sinks::EncodedProfile;

/// Profiles queued for the writer: a few windows of a few hundred processes.
const QUEUE: usize = 1024;
/// Profiles written before the directory is synced, at most.
const BATCH: usize = 256;

/// The writer thread of one archive directory.
#[derive(Debug)]
pub struct ArchiveWriter {
    sink: Arc<DirectorySink>,
    /// `None` once finished: later profiles are written in the caller's thread.
    worker: Mutex<Option<(SyncSender<EncodedProfile>, JoinHandle<()>)>>,
}

impl ArchiveWriter {
    /// Starts the thread writing into `sink` (or, if no thread can be started, a writer that
    /// writes in the caller's thread).
    pub fn start(sink: Arc<DirectorySink>) -> ArchiveWriter {
        let (queue, profiles) = sync_channel::<EncodedProfile>(QUEUE);
        let thread_sink = Arc::clone(&sink);
        let worker = std::thread::Builder::new()
            .name("pyagent-archive".into())
            .spawn(move || {
                // What is queued when the thread wakes (a window's profiles, handed over
                // together) is written as one batch: one directory sync for all.
                let mut batch = Vec::new();
                while let Ok(first) = profiles.recv() {
                    batch.push(first);
                    while batch.len() < BATCH {
                        match profiles.try_recv() {
                            Ok(p) => batch.push(p),
                            Err(_) => break,
                        }
                    }
                    thread_sink.submit_batch(&batch);
                    batch.clear();
                }
            })
            .inspect_err(|e| tracing::warn!("profiles are written in the sampling loop: {e}"))
            .ok()
            .map(|handle| (queue, handle));
        ArchiveWriter {
            sink,
            worker: Mutex::new(worker),
        }
    }

    /// Queues `profile` for the thread, or writes it now when the queue is full.
    pub fn submit(&self, profile: EncodedProfile) {
        let worker = self.worker.lock().unwrap_or_else(|p| p.into_inner());
        let rejected = match worker.as_ref() {
            Some((queue, _)) => match queue.try_send(profile) {
                Ok(()) => return,
                Err(TrySendError::Full(p) | TrySendError::Disconnected(p)) => p,
            },
            None => profile,
        };
        drop(worker);
        self.sink.submit(&rejected);
    }

    /// Writes every queued profile, then stops the thread.
    pub fn finish(&self) {
        let worker = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((queue, handle)) = worker {
            drop(queue);
            if handle.join().is_err() {
                tracing::warn!("the archive writer panicked: profiles it held are lost");
            }
        }
    }
}

impl Drop for ArchiveWriter {
    fn drop(&mut self) {
        self.finish();
    }
}
