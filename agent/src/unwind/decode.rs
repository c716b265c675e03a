//! A BPF sample record read off the ring buffer, decoded into what the unwinder resolves: the
//! walk's outcome and its raw frames, or a wake-up, which carries no stack. The wire format
//! (`common::SampleRecord`) stops here: past this point a record is typed values. A record's
//! native section (registers, stack copy) is not decoded: it is unwound where it lies in the
//! ring buffer ([`super::native::NativeUnwinder::stack`]), not copied.

use common::SampleRecord;

use super::{ExternalWalk, GilState, HolderRead, RawFrame, TraceContext};
use crate::offsets::{InstrPointer, Offsets};

/// What one record says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// A cpu-clock tick.
    OnCpu {
        /// the thread's time on a run queue, runnable after leaving the CPU, since its
        /// previous tick record (off-CPU profiling on; 0 otherwise)
        queued_ns: u64,
    },
    /// A thread blocking: its stack, the `common::WAIT_*` class of its system call, the futex
    /// word for futex waits, when, and the time of its unrecorded waits since its last
    /// recorded one (the program times short waits without walking them).
    OffCpu {
        /// `common::WAIT_*`
        wait: u32,
        /// the futex word of a futex wait
        wait_addr: u64,
        /// when it blocked (CLOCK_MONOTONIC ns)
        at_ns: u64,
        /// blocked time of the repeats the program only timed
        carried_ns: u64,
        /// who held the GIL, for a thread blocked waiting for it while another held it
        gil_holder: Option<HolderRead>,
    },
    /// A blocked thread running again, and when.
    Wake {
        /// host TID
        tid: u32,
        /// when it woke (CLOCK_MONOTONIC ns)
        at_ns: u64,
    },
}

/// One record, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedRecord {
    /// host PID of the process
    pub pid: u32,
    /// what happened
    pub kind: RecordKind,
    /// how the walk ended (default for a wake-up)
    pub walk: ExternalWalk,
    /// the walked frames, innermost first (empty for a wake-up)
    pub raw: Vec<RawFrame>,
}

impl DecodedRecord {
    /// Reads the frames' fields as the process's layout `o` means them: the program records
    /// the raw instruction field and a byte at the owner offset, which a layout without owners
    /// (3.6–3.10) does not have.
    pub fn adopt_layout(&mut self, o: &Offsets) {
        let has_owner = o.interpreter_frame.owner.is_some();
        if has_owner && o.frame.ip == InstrPointer::Address {
            return; // 3.11+: the fields are what the program recorded
        }
        for f in &mut self.raw {
            f.ip = o.frame.instruction(f.ip);
            if !has_owner {
                f.owner = 0;
            }
        }
    }

    /// Decodes `rec` into `raw`'s allocation (its frames are dropped): a drain hands each
    /// record's frames back for the next one, instead of an allocation per record. Each frame's
    /// `previous` is the next recorded frame; past the last one it is known to be NULL only when
    /// the walk was complete (`u64::MAX`: unknown).
    pub fn decode(rec: &SampleRecord<'_>, mut raw: Vec<RawFrame>) -> DecodedRecord {
        raw.clear();
        let h = rec.header();
        let kind = if h.is_wake() {
            return DecodedRecord {
                pid: h.pid,
                kind: RecordKind::Wake {
                    tid: h.tid,
                    at_ns: h.time_ns,
                },
                walk: ExternalWalk::default(),
                raw,
            };
        } else if h.is_off_cpu() {
            RecordKind::OffCpu {
                wait: h.wait,
                wait_addr: h.wait_addr,
                at_ns: h.time_ns,
                carried_ns: h.carried_ns,
                gil_holder: h
                    .gil_holder()
                    .map(|(tstate, code)| HolderRead { tstate, code }),
            }
        } else {
            RecordKind::OnCpu {
                queued_ns: h.carried_ns,
            }
        };
        raw.reserve(rec.len());
        let mut frames = rec.frames().peekable();
        while let Some(f) = frames.next() {
            let previous = match frames.peek() {
                Some(next) => next.addr,
                None if h.is_complete() => 0,
                None => u64::MAX,
            };
            raw.push(RawFrame {
                addr: f.addr,
                code: f.executable,
                ip: f.instr_ptr,
                previous,
                owner: f.owner as u8,
                is_entry: f.is_entry != 0,
                tlbc_index: 0,
            });
        }
        DecodedRecord {
            pid: h.pid,
            kind,
            walk: ExternalWalk {
                tstate: h.tstate,
                host_tid: h.tid,
                complete: h.is_complete(),
                reached_base: h.reached_base(),
                truncated: h.is_truncated(),
                read_failed: h.read_failed(),
                cyclic: h.is_cyclic(),
                anchor_hit: h.anchor_hit(),
                anchor: (h.anchor_frame, h.anchor_seq),
                task_frame: h.task_frame(),
                gil: h.holds_gil().map(GilState::from_held),
                trace: h
                    .trace_context()
                    .map(|(trace_id, span_id)| TraceContext { trace_id, span_id }),
            },
            raw,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use common::{PaSampleHdr, SAMPLE_COMPLETE, SAMPLE_SPAN};

    use super::*;

    /// A header-only record with `flags`, `trace_id` and `span_id` where the program writes
    /// them.
    fn record(flags: u32, trace_id: [u8; 16], span_id: [u8; 8]) -> Vec<u8> {
        let mut bytes = vec![0u8; size_of::<PaSampleHdr>()];
        let mut put = |off: usize, data: &[u8]| bytes[off..off + data.len()].copy_from_slice(data);
        put(offset_of!(PaSampleHdr, pid), &7u32.to_ne_bytes());
        put(offset_of!(PaSampleHdr, flags), &flags.to_ne_bytes());
        put(offset_of!(PaSampleHdr, trace_id), &trace_id);
        put(offset_of!(PaSampleHdr, span_id), &span_id);
        bytes
    }

    /// The trace and span the program read at the tick reach the walk, bytes in the record's
    /// order (the labels' hex); without the flag the fields are not a span, whatever they hold.
    #[test]
    fn a_record_carries_its_span_only_when_flagged() {
        let span = [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31];
        let trace_id = [
            0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80,
            0x31, 0x9c,
        ];
        let bytes = record(SAMPLE_COMPLETE | SAMPLE_SPAN, trace_id, span);
        let decoded =
            DecodedRecord::decode(&SampleRecord::parse(&bytes).expect("a record"), Vec::new());
        assert_eq!(decoded.pid, 7);
        let trace = decoded.walk.trace.expect("a span");
        assert_eq!(trace.span_id_hex(), "b7ad6b7169203331");
        assert_eq!(trace.trace_id_hex(), "0af7651916cd43dd8448eb211c80319c");
        assert!(decoded.walk.complete);

        let bytes = record(SAMPLE_COMPLETE, trace_id, span);
        let decoded =
            DecodedRecord::decode(&SampleRecord::parse(&bytes).expect("a record"), Vec::new());
        assert_eq!(decoded.walk.trace, None);
    }
}
