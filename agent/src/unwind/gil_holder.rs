//! Who holds the GIL a waiting thread waits for: the `gil_holder` label. The BPF program reads
//! the holder's thread state and current code object as the waiter blocks ([`HolderRead`]);
//! a userspace read takes every thread of a process at one instant, so the holder is the one
//! read holding the GIL then ([`label_gil_waiters`]).

use std::sync::Arc;

use super::{GilHolder, GilState, ThreadSample, Unwinder};
use crate::symbolize::FrameKind;

/// The GIL's holder as the BPF program read it when a thread blocked waiting for the GIL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HolderRead {
    /// `PyThreadState*` of the holder
    pub tstate: u64,
    /// the code object its current frame ran (0: not read)
    pub code: u64,
}

impl Unwinder {
    /// The holder a record names: its thread (by its thread state, as the process's thread
    /// list last read it) and its function (the code object, through the code-object cache).
    /// `None` for a thread state not in that list: a thread started since, named next time.
    pub fn gil_holder(&mut self, read: HolderRead) -> Option<GilHolder> {
        let ns_tid = self.records.thread_of(read.tstate)?;
        let name = self.thread_name(ns_tid);
        let function = self
            .symbolizer
            .code_info(&mut self.mem, read.code)
            .ok()
            .flatten()
            .map(|info| info.name.function.clone());
        Some(GilHolder::new(ns_tid, name, function))
    }
}

/// The thread of `samples` (one process's threads, read at one instant) read holding the GIL,
/// and the function of its innermost Python frame. `None` when no thread, or more than one,
/// reads as the holder (a read across a hand-over).
pub fn holder_in_read<'a>(
    samples: impl IntoIterator<Item = &'a ThreadSample>,
) -> Option<GilHolder> {
    let mut holders = samples
        .into_iter()
        .filter(|s| s.thread.gil == Some(GilState::Held));
    let (Some(holder), None) = (holders.next(), holders.next()) else {
        return None;
    };
    let function: Option<Arc<str>> = holder
        .frames
        .iter()
        .find(|f| f.kind == FrameKind::Python)
        .map(|f| f.code.function.clone());
    Some(GilHolder::new(
        holder.thread.ns_tid(),
        holder.thread.thread_name.clone(),
        function,
    ))
}

/// Labels each sample of `samples` (one read) that waits for the GIL with the holder of that
/// read ([`holder_in_read`]).
pub fn label_gil_waiters<'a>(samples: impl IntoIterator<Item = &'a mut ThreadSample>) {
    let mut samples: Vec<&mut ThreadSample> = samples.into_iter().collect();
    let Some(holder) = holder_in_read(samples.iter().map(|s| &**s)) else {
        return;
    };
    for s in samples
        .iter_mut()
        .filter(|s| s.thread.gil == Some(GilState::Waiting))
    {
        s.thread.gil_holder = Some(holder.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::tests::{frame, sample};

    fn with_gil(mut s: ThreadSample, gil: GilState) -> ThreadSample {
        s.thread.gil = Some(gil);
        s
    }

    /// Waiters get the one holder of the read, by name and innermost Python function; a read
    /// with two holders (torn across a hand-over) labels nobody.
    #[test]
    fn waiters_are_labelled_with_the_one_holder_of_their_read() {
        let mut holder = sample(1, 10, Some("holder"), vec![frame("spin", "app.py", 3, 1)]);
        holder = with_gil(holder, GilState::Held);
        let waiter = with_gil(
            sample(1, 11, Some("w"), vec![frame("want", "app.py", 9, 1)]),
            GilState::Waiting,
        );
        let other = with_gil(
            sample(1, 12, None, vec![frame("io", "app.py", 20, 1)]),
            GilState::Released,
        );
        let mut read = vec![holder.clone(), waiter.clone(), other];
        label_gil_waiters(&mut read);
        let label = read[1].thread.gil_holder.as_ref().map(GilHolder::label);
        assert_eq!(label.as_deref(), Some("holder in spin"));
        assert_eq!(read[0].thread.gil_holder, None);
        assert_eq!(read[2].thread.gil_holder, None);

        let mut torn = vec![holder.clone(), holder, waiter];
        label_gil_waiters(&mut torn);
        assert_eq!(torn[2].thread.gil_holder, None);
    }

    #[test]
    fn a_holder_without_a_name_is_its_thread_id() {
        let h = GilHolder::new(42, None, None);
        assert_eq!(h.label(), "thread 42");
    }
}
