//! Why a thread that was sampled yielded no stack, and how often.
//!
//! A reader that does not stop the target sees it move: a walk that cannot be vouched for is
//! rejected, never reported. But a rejected walk is re-read (see [`super::UnwindOptions`]), and
//! what still yields no stack after that is counted here by reason, so a profile always says
//! how much it is missing.

/// Why one sampled thread yielded no stack this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StackLoss {
    /// The thread's top frame (or its 3.15 anchor) changed while its callers were read, on
    /// every attempt: the stack changes faster than it can be read without stopping it.
    TopMoved,
    /// The chain did not end at the thread's base frame, or a frame pointer made no sense.
    BrokenChain,
    /// The chain loops: a frame's `previous` leads back to a frame already walked (corrupt
    /// memory, or a frame reused while read on every attempt).
    CyclicChain,
    /// A frame on the chain had no code object (being set up or torn down as we read).
    NonCodeFrame,
    /// A frame, code object or the thread state could not be read (freed while we read).
    ReadFault,
    /// A thread state was freed while the thread list was read: the threads after it were not
    /// reached this tick.
    ThreadListTorn,
    /// `dump`: the thread could not be stopped for a consistent read.
    NotPaused,
}

impl StackLoss {
    /// Every reason, in the order they are reported.
    pub const ALL: [StackLoss; 7] = [
        StackLoss::TopMoved,
        StackLoss::BrokenChain,
        StackLoss::CyclicChain,
        StackLoss::NonCodeFrame,
        StackLoss::ReadFault,
        StackLoss::ThreadListTorn,
        StackLoss::NotPaused,
    ];

    /// The `reason` label of `pyagent_samples_lost_total`.
    pub fn label(self) -> &'static str {
        match self {
            StackLoss::TopMoved => "torn_top_moved",
            StackLoss::BrokenChain => "torn_broken_chain",
            StackLoss::CyclicChain => "cyclic_chain",
            StackLoss::NonCodeFrame => "torn_non_code_frame",
            StackLoss::ReadFault => "torn_read_fault",
            StackLoss::ThreadListTorn => "torn_thread_list",
            StackLoss::NotPaused => "not_paused",
        }
    }

    /// A few words for people (summary lines, `dump`).
    pub fn describe(self) -> &'static str {
        match self {
            StackLoss::TopMoved => "top frame moved on every re-read",
            StackLoss::BrokenChain => "broken frame chain",
            StackLoss::CyclicChain => "frame chain loops back on itself",
            StackLoss::NonCodeFrame => "frame without code object",
            StackLoss::ReadFault => "unreadable frame or thread state",
            StackLoss::ThreadListTorn => "thread list changed while read",
            StackLoss::NotPaused => "thread could not be stopped",
        }
    }
}

/// Why a record of the BPF program (eBPF mode) yielded no sample: counted by the conductor, or by
/// the program itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordLoss {
    /// A read failed in the walk or while symbolizing.
    TornRead,
    /// The walk stopped at a 3.15 anchor the frame cache could not vouch for.
    AnchorMiss,
    /// A 3.15 walk did not end at the thread's base frame.
    IncompleteStack,
    /// The frame chain loops back on itself.
    CyclicChain,
    /// The record's process is no longer tracked, or its thread state belongs to no interpreter
    /// known.
    UntrackedProcess,
    /// The program met a thread neither registered nor found in its interpreter's thread list.
    UnknownThread,
    /// The program could not read a thread state or frame.
    BpfReadFailed,
    /// The program cut the walk at its depth bound.
    BpfTruncated,
    /// The kernel throttled the perf event (more samples per scheduler tick than
    /// `kernel.perf_event_max_sample_rate` allows): the program never ran for the tick.
    PerfThrottled,
}

impl RecordLoss {
    /// The `reason` label of `pyagent_samples_lost_total`.
    pub fn label(self) -> &'static str {
        match self {
            RecordLoss::TornRead => "torn_read",
            RecordLoss::AnchorMiss => "anchor_miss",
            RecordLoss::IncompleteStack => "incomplete_stack",
            RecordLoss::CyclicChain => "cyclic_chain",
            RecordLoss::UntrackedProcess => "untracked_process",
            RecordLoss::UnknownThread => "unknown_thread",
            RecordLoss::BpfReadFailed => "bpf_read_failed",
            RecordLoss::BpfTruncated => "bpf_truncated",
            RecordLoss::PerfThrottled => "perf_throttled",
        }
    }
}

/// Any reason a tick reached no profile: a thread the unwinder read without a stack, or a BPF
/// record that yielded no sample. Both kinds count in one metric, under one label each
/// (`cyclic_chain` is the same loss whoever walked the chain).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LossReason {
    /// A sampled thread without a stack (userspace walks).
    Thread(StackLoss),
    /// A BPF record without a sample.
    Record(RecordLoss),
}

impl LossReason {
    /// The `reason` label of `pyagent_samples_lost_total`.
    pub fn label(self) -> &'static str {
        match self {
            LossReason::Thread(loss) => loss.label(),
            LossReason::Record(loss) => loss.label(),
        }
    }
}

impl std::fmt::Display for StackLoss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

/// Ticks that yielded no stack, per [`StackLoss`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LossCounts {
    counts: [u64; StackLoss::ALL.len()],
}

impl LossCounts {
    /// Counts one loss.
    pub fn add(&mut self, reason: StackLoss) {
        self.counts[reason as usize] += 1;
    }

    /// Losses for `reason`.
    pub fn get(&self, reason: StackLoss) -> u64 {
        self.counts[reason as usize]
    }

    /// Losses for any reason.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Adds another set of counts to this one.
    pub fn merge(&mut self, other: &LossCounts) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
    }

    /// `(reason, count)` for every reason with a nonzero count, in report order.
    pub fn nonzero(&self) -> impl Iterator<Item = (StackLoss, u64)> + '_ {
        StackLoss::ALL
            .into_iter()
            .map(|r| (r, self.get(r)))
            .filter(|&(_, n)| n > 0)
    }

    /// `"3 top frame moved on every re-read, 1 broken frame chain"`, or `"none"`.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .nonzero()
            .map(|(r, n)| format!("{n} {}", r.describe()))
            .collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_reason_and_in_total() {
        let mut c = LossCounts::default();
        assert_eq!(c.summary(), "none");
        c.add(StackLoss::TopMoved);
        c.add(StackLoss::TopMoved);
        c.add(StackLoss::ReadFault);
        let mut d = LossCounts::default();
        d.add(StackLoss::BrokenChain);
        c.merge(&d);
        assert_eq!(c.get(StackLoss::TopMoved), 2);
        assert_eq!(c.total(), 4);
        assert_eq!(
            c.summary(),
            "2 top frame moved on every re-read, 1 broken frame chain, 1 unreadable frame or thread state"
        );
    }

    #[test]
    fn labels_are_distinct() {
        let labels: std::collections::HashSet<_> =
            StackLoss::ALL.iter().map(|r| r.label()).collect();
        assert_eq!(labels.len(), StackLoss::ALL.len());
    }
}
