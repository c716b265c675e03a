//! The contract between the BPF program (`ebpf/`, C) and userspace: `#[repr(C)]` mirrors of
//! `common/include/pyagent.h`, with compile-time layout checks.
//!
//! In: nothing (plain data). Out: the map value [`PaProc`], the ring-buffer record
//! ([`PaSampleHdr`] + [`PaFrame`]s, parsed safely by [`SampleRecord::parse`]), the counter ids
//! with their Prometheus names ([`Counter`], [`COUNTERS`]) and the limits. The header is the
//! source of truth; `tests/layout.rs` compiles a probe against it and compares every size,
//! offset and value with this crate.
//!
//! With the `userspace` feature, the map types implement `aya::Pod`.

#![deny(missing_docs)]

mod counters;
mod record;

pub use counters::{Counter, CounterInfo, COUNTERS, COUNTER_COUNT};
pub use record::{Frames, NativeSection, RecordError, SampleRecord};

use std::mem::{offset_of, size_of};

/// Frames recorded per sample at most (`PA_MAX_FRAMES`, also the walk's `bpf_loop` bound).
pub const MAX_FRAMES: u32 = 1024;
/// Bytes of each `_PyInterpreterFrame` read at once (`PA_FRAME_READ_BYTES`): every frame field
/// the walk uses must lie inside it.
pub const FRAME_READ_BYTES: u32 = 80;
/// Bytes of each `PyFrameObject` read at once (3.6–3.10, [`PROC_FRAME_OBJECTS`];
/// `PA_FRAME_OBJECT_READ_BYTES`).
pub const FRAME_OBJECT_READ_BYTES: u32 = 128;
/// Bytes of the `PyThreadState` read at once (`PA_TSTATE_READ_BYTES`), starting at the lowest
/// thread-state offset in use: every thread-state field the walk uses must lie inside it.
pub const TSTATE_READ_BYTES: u32 = 64;

/// [`PaProc::flags`]: `current_frame` is reached through `tstate->cframe` (3.11, 3.12).
pub const PROC_CFRAME: u32 = 1 << 0;
/// [`PaProc::flags`]: stop at `tstate->last_profiled_frame` and report the anchor (3.15).
pub const PROC_ANCHOR: u32 = 1 << 1;
/// [`PaProc::flags`]: read `tstate->base_frame` and report it (3.15).
pub const PROC_BASE_FRAME: u32 = 1 << 2;
/// [`PaProc::flags`]: the process publishes OpenTelemetry's thread context (OTEP 4947); read
/// the interrupted thread's span through [`PaProc::otel`] (`PA_PROC_TRACE_CONTEXT`).
pub const PROC_TRACE_CONTEXT: u32 = 1 << 3;
/// `PA_PROC_NATIVE`: on-CPU records carry a native section (user registers, a copy of the user
/// stack, the kernel stack).
pub const PROC_NATIVE: u32 = 1 << 4;
/// `PA_PROC_IS_ENTRY` (3.11): each frame records the byte before its owner, `is_entry`.
pub const PROC_IS_ENTRY: u32 = 1 << 5;
/// `PA_PROC_FRAME_OBJECTS` (3.6–3.10): frames are heap `PyFrameObject`s, read
/// [`FRAME_OBJECT_READ_BYTES`] at a time.
pub const PROC_FRAME_OBJECTS: u32 = 1 << 6;
/// Every defined [`PaProc::flags`] bit (`PA_PROC__ALL`).
pub const PROC_ALL: u32 = PROC_CFRAME
    | PROC_ANCHOR
    | PROC_BASE_FRAME
    | PROC_TRACE_CONTEXT
    | PROC_NATIVE
    | PROC_IS_ENTRY
    | PROC_FRAME_OBJECTS;

/// Offset of the span id in an OTEP 4947 record (`PA_OTEL_SPAN_ID_OFFSET`); the trace id is at
/// 0, its 16 bytes just before.
pub const OTEL_SPAN_ID_OFFSET: u32 = 16;
/// Offset of the record's `valid` byte (`PA_OTEL_VALID_OFFSET`): 1 when it may be used.
pub const OTEL_VALID_OFFSET: u32 = 24;
/// Bytes the program reads of a record, from its start (`PA_OTEL_READ_BYTES`): the trace id,
/// the span id and `valid`, in one read.
pub const OTEL_READ_BYTES: u32 = 25;

/// `pa_notices` value bit: a tracked process ran a thread that is not in `pa_threads`.
pub const NOTICE_UNKNOWN_THREAD: u32 = 1 << 0;
/// `pa_notices` value bit: the process called execve.
pub const NOTICE_EXEC: u32 = 1 << 1;
/// `pa_notices` value bit: a tracked process forked this one (the notice is the child's).
pub const NOTICE_FORK: u32 = 1 << 2;
/// `pa_notices` value bit: the tracked process's main thread exited.
pub const NOTICE_EXIT: u32 = 1 << 3;
/// `pa_notices` value bit: another thread of the tracked process exited.
pub const NOTICE_THREAD_EXIT: u32 = 1 << 4;

/// [`PaSampleHdr::flags`]: the walk reached a frame whose `previous` is 0.
pub const SAMPLE_COMPLETE: u32 = 1 << 0;
/// [`PaSampleHdr::flags`]: the walk stopped at the frame-count bound.
pub const SAMPLE_TRUNCATED: u32 = 1 << 1;
/// [`PaSampleHdr::flags`]: reading the next frame failed; the chain is cut, not complete.
pub const SAMPLE_READ_FAILED: u32 = 1 << 2;
/// [`PaSampleHdr::flags`]: the last recorded frame is the anchor (`last_profiled_frame`).
pub const SAMPLE_ANCHOR_HIT: u32 = 1 << 3;
/// [`PaSampleHdr::flags`]: complete, and the last frame is `tstate->base_frame`.
pub const SAMPLE_REACHED_BASE: u32 = 1 << 4;
/// [`PaSampleHdr::flags`]: a frame's `previous` looped back to a recent frame; the walk stopped.
pub const SAMPLE_CYCLIC: u32 = 1 << 5;
/// `PA_SAMPLE_OFF_CPU`: taken as the thread left the CPU to wait.
pub const SAMPLE_OFF_CPU: u32 = 1 << 6;
/// `PA_SAMPLE_WAKE`: no stack; the thread of an earlier off-CPU record runs again.
pub const SAMPLE_WAKE: u32 = 1 << 7;
/// `PA_SAMPLE_GIL_KNOWN`: the process has a GIL and the record says whether the thread held it.
pub const SAMPLE_GIL_KNOWN: u32 = 1 << 8;
/// `PA_SAMPLE_GIL_HELD`: the thread held the GIL (with [`SAMPLE_GIL_KNOWN`]).
pub const SAMPLE_GIL_HELD: u32 = 1 << 9;
/// `PA_SAMPLE_SPAN`: the thread was in a span; [`PaSampleHdr::span_id`] is its id and
/// [`PaSampleHdr::trace_id`] its trace's.
pub const SAMPLE_SPAN: u32 = 1 << 10;
/// `PA_SAMPLE_NATIVE`: a native section ([`PaNativeHdr`], kernel frames, user stack) follows the
/// frames.
pub const SAMPLE_NATIVE: u32 = 1 << 11;
/// `PA_SAMPLE_TASK`: the thread was running an asyncio task at the tick;
/// [`PaSampleHdr::task_frame`] is its coroutine's frame.
pub const SAMPLE_TASK: u32 = 1 << 12;
/// `PA_SAMPLE_TASK_AWAITED`: with [`SAMPLE_TASK`], something awaited the task at the tick.
pub const SAMPLE_TASK_AWAITED: u32 = 1 << 13;

/// `PA_WAIT_NONE`: an on-CPU record.
pub const WAIT_NONE: u32 = 0;
/// `PA_WAIT_OTHER`: any other call, or none.
pub const WAIT_OTHER: u32 = 1;
/// `PA_WAIT_IO`: a call on descriptors.
pub const WAIT_IO: u32 = 2;
/// `PA_WAIT_SLEEP`: a sleep, or select/poll without descriptors.
pub const WAIT_SLEEP: u32 = 3;
/// `PA_WAIT_FUTEX`: a futex (lock, condition or GIL), `wait_addr` its word.
pub const WAIT_FUTEX: u32 = 4;

/// How the BPF program walks one process's frame chain (`struct pa_proc`, the value of the
/// `pa_procs` map, keyed by host tgid). Offsets are bytes, named after `_Py_DebugOffsets`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaProc {
    /// Chosen by userspace (e.g. the process start time); copied into every record.
    pub generation: u64,
    /// Bits cleared from `f_executable`/`f_code`: 3 on 3.14+, 0 before.
    pub executable_tag_mask: u64,
    /// `PROC_*` bits.
    pub flags: u32,
    /// `PyThreadState.current_frame` (3.13+), or `PyThreadState.cframe` with [`PROC_CFRAME`].
    pub thread_state_current_frame: u32,
    /// `_PyCFrame.current_frame` (only with [`PROC_CFRAME`]).
    pub cframe_current_frame: u32,
    /// `PyThreadState.base_frame` (only with [`PROC_BASE_FRAME`]).
    pub thread_state_base_frame: u32,
    /// `PyThreadState.last_profiled_frame` (only with [`PROC_ANCHOR`]).
    pub thread_state_last_profiled_frame: u32,
    /// `PyThreadState.last_profiled_frame_seq` (only with [`PROC_ANCHOR`]).
    pub thread_state_last_profiled_frame_seq: u32,
    /// `_PyInterpreterFrame.previous`.
    pub interpreter_frame_previous: u32,
    /// `_PyInterpreterFrame.f_executable` (`f_code` before 3.13).
    pub interpreter_frame_executable: u32,
    /// `_PyInterpreterFrame.instr_ptr` (`prev_instr` before 3.13).
    pub interpreter_frame_instr_ptr: u32,
    /// `_PyInterpreterFrame.owner` (one byte).
    pub interpreter_frame_owner: u32,
    /// Address of the main interpreter's GIL `locked` int (with [`GIL_HOLDER`], and with
    /// [`GIL_THREAD_FLAG`] where off-CPU records name the holder; 0: not known).
    pub gil_locked_addr: u64,
    /// Address of the main interpreter's GIL `last_holder` pointer (as `gil_locked_addr`).
    pub gil_holder_addr: u64,
    /// `GIL_*`: how records learn whether the sampled thread holds the GIL.
    pub gil_model: u32,
    /// `PyThreadState.holds_gil` (only with [`GIL_THREAD_FLAG`]).
    pub thread_state_holds_gil: u32,
    /// Where each thread's OTEP 4947 context is (only with [`PROC_TRACE_CONTEXT`]).
    pub otel: PaOtelCtx,
    /// Where the GIL's futex words (its mutex and conditions) begin: a thread blocked on a futex
    /// within [`GIL_WAIT_BYTES`] from here waits for the GIL (0: not known).
    pub gil_waits_addr: u64,
    /// `_PyThreadStateImpl.asyncio_running_task` (3.14+, once the program imported asyncio, with
    /// task-aware stacks; 0: not read): with [`PaProc::task_coro`] and
    /// [`PaProc::coroutine_iframe`], where records find the running task's coroutine frame
    /// ([`SAMPLE_TASK`]).
    pub thread_state_running_task: u32,
    /// The task's coroutine pointer (`.AsyncioDebug`'s `task_coro`).
    pub task_coro: u32,
    /// The coroutine's embedded frame (`_Py_DebugOffsets`' `gi_iframe`).
    pub coroutine_iframe: u32,
    /// The task's awaited-by pointer (`.AsyncioDebug`'s `task_awaited_by`).
    pub task_awaited_by: u32,
}

/// Where a thread's `otel_thread_ctx_v1` is, from its thread pointer (glibc's `pthread_t`):
/// `struct pa_otel_ctx`, part of [`PaProc`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaOtelCtx {
    /// Where the publisher's TLS block sits below the thread pointer, when it is in static TLS
    /// (0: reached through the DTV).
    pub static_offset: u64,
    /// Offset of `otel_thread_ctx_v1` in the publisher's TLS block.
    pub offset_in_block: u64,
    /// Offset of the DTV pointer in glibc's `struct pthread`.
    pub dtv_in_pthread: u32,
    /// Bytes per DTV entry (the entry count is at `dtv[-1]`).
    pub dtv_entry_size: u32,
    /// Offset of the block pointer in a DTV entry.
    pub pointer_in_entry: u32,
    /// The publisher's TLS module id: its index in the DTV.
    pub module_id: u32,
}

/// `PA_GIL_WAIT_BYTES`: how many bytes from [`PaProc::gil_waits_addr`] hold the GIL's futex
/// words, so that a thread blocked on a futex in there waits for the GIL. 3.7+ keep the whole
/// `_gil_runtime_state` within [`GIL_BYTES_BEFORE_LOCKED`] before its `locked` word and the
/// rest after it (the interval and last holder before; the switch number, condition and mutex
/// after, about 200 bytes in every supported version); 3.6's separate statics (its mutexes and
/// conditions) lie within 256 bytes.
pub const GIL_WAIT_BYTES: u64 = 288;
/// Where the GIL's state starts before its `locked` word in 3.7+ (see [`GIL_WAIT_BYTES`]).
pub const GIL_BYTES_BEFORE_LOCKED: u64 = 32;

/// `PA_GIL_NONE`: free-threaded (no GIL) or unknown; records carry no GIL bits.
pub const GIL_NONE: u32 = 0;
/// `PA_GIL_HOLDER`: 3.11-3.14, held when `locked` != 0 and `last_holder` is the thread state.
pub const GIL_HOLDER: u32 = 1;
/// `PA_GIL_THREAD_FLAG`: 3.15, held when the thread state's `holds_gil` int != 0.
pub const GIL_THREAD_FLAG: u32 = 2;

const _: () = {
    assert!(size_of::<PaProc>() == 136);
    assert!(offset_of!(PaProc, generation) == 0);
    assert!(offset_of!(PaProc, executable_tag_mask) == 8);
    assert!(offset_of!(PaProc, flags) == 16);
    assert!(offset_of!(PaProc, thread_state_current_frame) == 20);
    assert!(offset_of!(PaProc, cframe_current_frame) == 24);
    assert!(offset_of!(PaProc, thread_state_base_frame) == 28);
    assert!(offset_of!(PaProc, thread_state_last_profiled_frame) == 32);
    assert!(offset_of!(PaProc, thread_state_last_profiled_frame_seq) == 36);
    assert!(offset_of!(PaProc, interpreter_frame_previous) == 40);
    assert!(offset_of!(PaProc, interpreter_frame_executable) == 44);
    assert!(offset_of!(PaProc, interpreter_frame_instr_ptr) == 48);
    assert!(offset_of!(PaProc, interpreter_frame_owner) == 52);
    assert!(offset_of!(PaProc, gil_locked_addr) == 56);
    assert!(offset_of!(PaProc, gil_holder_addr) == 64);
    assert!(offset_of!(PaProc, gil_model) == 72);
    assert!(offset_of!(PaProc, thread_state_holds_gil) == 76);
    assert!(offset_of!(PaProc, otel) == 80);
    assert!(offset_of!(PaProc, gil_waits_addr) == 112);
    assert!(offset_of!(PaProc, thread_state_running_task) == 120);
    assert!(offset_of!(PaProc, task_coro) == 124);
    assert!(offset_of!(PaProc, coroutine_iframe) == 128);
    assert!(offset_of!(PaProc, task_awaited_by) == 132);
    assert!(size_of::<PaOtelCtx>() == 32);
    assert!(offset_of!(PaOtelCtx, offset_in_block) == 8);
    assert!(offset_of!(PaOtelCtx, dtv_in_pthread) == 16);
    assert!(offset_of!(PaOtelCtx, dtv_entry_size) == 20);
    assert!(offset_of!(PaOtelCtx, pointer_in_entry) == 24);
    assert!(offset_of!(PaOtelCtx, module_id) == 28);
};

/// Why the BPF program would refuse a [`PaProc`] (it counts `pyagent_bpf_bad_config_total` and
/// drops the sample); [`PaProc::validate`] says so before the map is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcError {
    /// A flag bit outside [`PROC_ALL`].
    #[error("unknown pa_proc flags {flags:#x}")]
    UnknownFlags {
        /// The flags given.
        flags: u32,
    },
    /// A GIL model outside the `GIL_*` values.
    #[error("unknown pa_proc GIL model {model}")]
    UnknownGilModel {
        /// The model given.
        model: u32,
    },
    /// A thread-context layout ([`PaProc::otel`]) the program cannot follow through the DTV.
    #[error("pa_proc.otel: DTV entries of {entry_size} bytes with the pointer at {pointer}, module {module_id}")]
    BadOtelCtx {
        /// Bytes per DTV entry.
        entry_size: u32,
        /// Offset of the block pointer in an entry.
        pointer: u32,
        /// The module id.
        module_id: u32,
    },
    /// A pointer field is misaligned or does not fit in its read window.
    #[error("{field} at offset {offset} is not an 8-byte aligned pointer inside the {window}-byte read window")]
    FieldOutsideWindow {
        /// The `PaProc` field name.
        field: &'static str,
        /// Its offset, relative to the window start.
        offset: u32,
        /// The window size in bytes.
        window: u32,
    },
}

impl PaProc {
    /// Bytes of each frame the program reads for this process.
    pub fn frame_read_bytes(&self) -> u32 {
        if self.flags & PROC_FRAME_OBJECTS != 0 {
            FRAME_OBJECT_READ_BYTES
        } else {
            FRAME_READ_BYTES
        }
    }

    /// Checks the offsets the way the BPF program does: frame pointer fields 8-byte aligned in
    /// the first [`FRAME_READ_BYTES`] bytes, the owner byte there too, and the thread-state fields
    /// in use 8-byte aligned within [`TSTATE_READ_BYTES`] of the lowest one.
    pub fn validate(&self) -> Result<(), ProcError> {
        if self.flags & !PROC_ALL != 0 {
            return Err(ProcError::UnknownFlags { flags: self.flags });
        }
        if self.gil_model > GIL_THREAD_FLAG {
            return Err(ProcError::UnknownGilModel {
                model: self.gil_model,
            });
        }
        let o = &self.otel;
        let dtv_ok = (8..=64).contains(&o.dtv_entry_size)
            && o.pointer_in_entry.saturating_add(8) <= o.dtv_entry_size
            && o.module_id >= 1;
        if self.flags & PROC_TRACE_CONTEXT != 0 && o.static_offset == 0 && !dtv_ok {
            return Err(ProcError::BadOtelCtx {
                entry_size: o.dtv_entry_size,
                pointer: o.pointer_in_entry,
                module_id: o.module_id,
            });
        }
        let ptr_ok = |off: u32, window: u32| off.is_multiple_of(8) && off <= window - 8;
        let window = self.frame_read_bytes();
        for (field, off) in [
            (
                "interpreter_frame_previous",
                self.interpreter_frame_previous,
            ),
            (
                "interpreter_frame_executable",
                self.interpreter_frame_executable,
            ),
            (
                "interpreter_frame_instr_ptr",
                self.interpreter_frame_instr_ptr,
            ),
        ] {
            if !ptr_ok(off, window) {
                return Err(ProcError::FieldOutsideWindow {
                    field,
                    offset: off,
                    window,
                });
            }
        }
        if self.interpreter_frame_owner >= window {
            return Err(ProcError::FieldOutsideWindow {
                field: "interpreter_frame_owner",
                offset: self.interpreter_frame_owner,
                window,
            });
        }
        let fields = self.thread_state_fields();
        let lo = fields
            .iter()
            .flatten()
            .map(|&(_, off)| off)
            .min()
            .unwrap_or(0);
        for &(field, off) in fields.iter().flatten() {
            if !ptr_ok(off - lo, TSTATE_READ_BYTES) {
                return Err(ProcError::FieldOutsideWindow {
                    field,
                    offset: off - lo,
                    window: TSTATE_READ_BYTES,
                });
            }
        }
        Ok(())
    }

    /// The thread-state fields the BPF program reads with these flags.
    fn thread_state_fields(&self) -> [Option<(&'static str, u32)>; 4] {
        let anchor = self.flags & PROC_ANCHOR != 0;
        let base = self.flags & PROC_BASE_FRAME != 0;
        [
            Some((
                "thread_state_current_frame",
                self.thread_state_current_frame,
            )),
            anchor.then_some((
                "thread_state_last_profiled_frame",
                self.thread_state_last_profiled_frame,
            )),
            anchor.then_some((
                "thread_state_last_profiled_frame_seq",
                self.thread_state_last_profiled_frame_seq,
            )),
            base.then_some(("thread_state_base_frame", self.thread_state_base_frame)),
        ]
    }
}

/// The fixed part of a ring-buffer record (`struct pa_sample_hdr`); `nframes` [`PaFrame`]s
/// follow it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaSampleHdr {
    /// Host (initial pid namespace) tgid of the interrupted task.
    pub pid: u32,
    /// Host tid of the interrupted task.
    pub tid: u32,
    /// `PyThreadState` address, from `pa_threads`.
    pub tstate: u64,
    /// [`PaProc::generation`] at sampling time.
    pub generation: u64,
    /// `last_profiled_frame` read before the walk (0 without [`PROC_ANCHOR`]).
    pub anchor_frame: u64,
    /// `last_profiled_frame_seq` read with the anchor (0 without [`PROC_ANCHOR`]).
    pub anchor_seq: u64,
    /// `tstate->base_frame` (0 without [`PROC_BASE_FRAME`]).
    pub base_frame: u64,
    /// CPU that took the sample.
    pub cpu: u32,
    /// Number of frames following the header (at most [`MAX_FRAMES`]).
    pub nframes: u32,
    /// `SAMPLE_*` bits.
    pub flags: u32,
    /// `WAIT_*` ([`SAMPLE_OFF_CPU`] records; [`WAIT_NONE`] otherwise).
    pub wait: u32,
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) when the record was taken.
    pub time_ns: u64,
    /// The futex word waited on ([`WAIT_FUTEX`]), 0 otherwise.
    pub wait_addr: u64,
    /// [`SAMPLE_OFF_CPU`] records: the thread's running total of waits timed, not walked
    /// ([`PaOffCpuThread::carried_ns`]) as this wait began; its growth since the previous
    /// record goes to that record's stack and reason (those waits repeated it). On-CPU
    /// records: run-queue time since the thread's previous on-CPU record.
    pub carried_ns: u64,
    /// The trace the thread was in, bytes as the OTEP 4947 record has them ([`SAMPLE_SPAN`];
    /// zeros otherwise).
    pub trace_id: [u8; 16],
    /// The span the thread was in, bytes as the OTEP 4947 record has them ([`SAMPLE_SPAN`];
    /// zeros otherwise).
    pub span_id: [u8; 8],
    /// Off-CPU records of a thread blocked on the GIL's futex while another thread held it:
    /// that thread state (0 otherwise).
    pub gil_holder: u64,
    /// With [`PaSampleHdr::gil_holder`]: the code object (tag bits cleared) the holder's
    /// current frame ran at the switch (0 when that read failed).
    pub gil_holder_code: u64,
    /// [`SAMPLE_TASK`]: the frame of the coroutine of the asyncio task the thread ran, read at
    /// the tick (0 otherwise).
    pub task_frame: u64,
}

/// `PA_OFF_CPU_RECORDED`: the thread's current wait was recorded; its wake-up will be.
pub const OFF_CPU_RECORDED: u32 = 1 << 0;

/// The off-CPU state of a tracked thread (`struct pa_off_cpu_thread`, the value of
/// `pa_off_cpu_threads`, keyed by host tid).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaOffCpuThread {
    /// ktime of the thread's last recorded wait (0: none yet).
    pub last_recorded_ns: u64,
    /// ktime the current unrecorded wait began (0: not in one).
    pub blocked_ns: u64,
    /// Time of every unrecorded wait of the thread so far (a running total, never reset).
    pub carried_ns: u64,
    /// The futex word of the last recorded wait.
    pub last_wait_addr: u64,
    /// The `WAIT_*` class of the last recorded wait.
    pub last_wait: u32,
    /// Host tgid of the thread.
    pub tgid: u32,
    /// `OFF_CPU_*` bits.
    pub flags: u32,
    /// Zero.
    pub _pad: u32,
    /// ktime the thread left the CPU still runnable (0 once it runs again).
    pub queued_since_ns: u64,
    /// Run-queue time not yet carried by an on-CPU record.
    pub queued_ns: u64,
    /// Where the last recorded wait waited from (a digest; 0: unknown).
    pub last_place: u64,
}

const _: () = {
    assert!(size_of::<PaOffCpuThread>() == 72);
    assert!(offset_of!(PaOffCpuThread, last_place) == 64);
    assert!(offset_of!(PaOffCpuThread, queued_since_ns) == 48);
    assert!(offset_of!(PaOffCpuThread, queued_ns) == 56);
    assert!(offset_of!(PaOffCpuThread, blocked_ns) == 8);
    assert!(offset_of!(PaOffCpuThread, carried_ns) == 16);
    assert!(offset_of!(PaOffCpuThread, last_wait_addr) == 24);
    assert!(offset_of!(PaOffCpuThread, last_wait) == 32);
    assert!(offset_of!(PaOffCpuThread, tgid) == 36);
    assert!(offset_of!(PaOffCpuThread, flags) == 40);
};

const _: () = {
    assert!(size_of::<PaSampleHdr>() == 136);
    assert!(offset_of!(PaSampleHdr, pid) == 0);
    assert!(offset_of!(PaSampleHdr, tid) == 4);
    assert!(offset_of!(PaSampleHdr, tstate) == 8);
    assert!(offset_of!(PaSampleHdr, generation) == 16);
    assert!(offset_of!(PaSampleHdr, anchor_frame) == 24);
    assert!(offset_of!(PaSampleHdr, anchor_seq) == 32);
    assert!(offset_of!(PaSampleHdr, base_frame) == 40);
    assert!(offset_of!(PaSampleHdr, cpu) == 48);
    assert!(offset_of!(PaSampleHdr, nframes) == 52);
    assert!(offset_of!(PaSampleHdr, flags) == 56);
    assert!(offset_of!(PaSampleHdr, wait) == 60);
    assert!(offset_of!(PaSampleHdr, time_ns) == 64);
    assert!(offset_of!(PaSampleHdr, wait_addr) == 72);
    assert!(offset_of!(PaSampleHdr, carried_ns) == 80);
    assert!(offset_of!(PaSampleHdr, trace_id) == 88);
    assert!(offset_of!(PaSampleHdr, span_id) == 104);
    assert!(offset_of!(PaSampleHdr, gil_holder) == 112);
    assert!(offset_of!(PaSampleHdr, gil_holder_code) == 120);
    assert!(offset_of!(PaSampleHdr, task_frame) == 128);
};

impl PaSampleHdr {
    /// The walk reached a frame whose `previous` is 0 ([`SAMPLE_COMPLETE`]).
    pub fn is_complete(&self) -> bool {
        self.flags & SAMPLE_COMPLETE != 0
    }
    /// The walk stopped at the frame-count bound ([`SAMPLE_TRUNCATED`]).
    pub fn is_truncated(&self) -> bool {
        self.flags & SAMPLE_TRUNCATED != 0
    }
    /// A frame read failed; the chain is cut ([`SAMPLE_READ_FAILED`]).
    pub fn read_failed(&self) -> bool {
        self.flags & SAMPLE_READ_FAILED != 0
    }
    /// The last frame is the anchor ([`SAMPLE_ANCHOR_HIT`]).
    pub fn anchor_hit(&self) -> bool {
        self.flags & SAMPLE_ANCHOR_HIT != 0
    }
    /// Complete and ending at `base_frame` ([`SAMPLE_REACHED_BASE`]).
    pub fn reached_base(&self) -> bool {
        self.flags & SAMPLE_REACHED_BASE != 0
    }
    /// Taken as the thread left the CPU to wait ([`SAMPLE_OFF_CPU`]).
    pub fn is_off_cpu(&self) -> bool {
        self.flags & SAMPLE_OFF_CPU != 0
    }
    /// The end of a wait: no stack ([`SAMPLE_WAKE`]).
    pub fn is_wake(&self) -> bool {
        self.flags & SAMPLE_WAKE != 0
    }
    /// The chain looped back to a recent frame ([`SAMPLE_CYCLIC`]).
    pub fn is_cyclic(&self) -> bool {
        self.flags & SAMPLE_CYCLIC != 0
    }
    /// Whether the thread held the GIL ([`SAMPLE_GIL_HELD`]), when the record says
    /// ([`SAMPLE_GIL_KNOWN`]: not on free-threaded builds).
    pub fn holds_gil(&self) -> Option<bool> {
        (self.flags & SAMPLE_GIL_KNOWN != 0).then_some(self.flags & SAMPLE_GIL_HELD != 0)
    }
    /// The thread state holding the GIL this off-CPU record's thread waits for, and the code
    /// object its current frame ran (0: that read failed), read at the switch.
    pub fn gil_holder(&self) -> Option<(u64, u64)> {
        (self.gil_holder != 0).then_some((self.gil_holder, self.gil_holder_code))
    }
    /// The frame of the coroutine of the asyncio task the thread ran at the tick
    /// ([`SAMPLE_TASK`]), and whether something awaited the task ([`SAMPLE_TASK_AWAITED`]).
    pub fn task_frame(&self) -> Option<(u64, bool)> {
        (self.flags & SAMPLE_TASK != 0 && self.task_frame != 0)
            .then_some((self.task_frame, self.flags & SAMPLE_TASK_AWAITED != 0))
    }
    /// The trace and span the thread was in ([`SAMPLE_SPAN`]), where the process publishes
    /// them.
    pub fn trace_context(&self) -> Option<([u8; 16], [u8; 8])> {
        (self.flags & SAMPLE_SPAN != 0).then_some((self.trace_id, self.span_id))
    }
}

/// One `_PyInterpreterFrame` as read from the target (`struct pa_frame`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PaFrame {
    /// Address of the frame.
    pub addr: u64,
    /// `f_executable`/`f_code` with the tag bits cleared.
    pub executable: u64,
    /// `instr_ptr` (3.13+) / `prev_instr` (3.11, 3.12), raw.
    pub instr_ptr: u64,
    /// The frame's owner byte (`FRAME_OWNED_BY_*`).
    pub owner: u32,
    /// With [`PROC_IS_ENTRY`] (3.11): the frame's `is_entry` byte; 0 otherwise.
    pub is_entry: u32,
}

const _: () = {
    assert!(size_of::<PaFrame>() == 32);
    assert!(offset_of!(PaFrame, addr) == 0);
    assert!(offset_of!(PaFrame, executable) == 8);
    assert!(offset_of!(PaFrame, instr_ptr) == 16);
    assert!(offset_of!(PaFrame, owner) == 24);
    assert!(offset_of!(PaFrame, is_entry) == 28);
};

/// Bytes of user stack a native section holds at most (`PA_NATIVE_STACK_BYTES`).
pub const NATIVE_STACK_BYTES: u32 = 16384;
/// Kernel return addresses a native section holds at most (`PA_KERNEL_FRAMES`).
pub const KERNEL_FRAMES: u32 = 32;
/// The largest native section (`PA_NATIVE_MAX_BYTES`).
pub const NATIVE_MAX_BYTES: usize =
    size_of::<PaNativeHdr>() + 8 * KERNEL_FRAMES as usize + NATIVE_STACK_BYTES as usize;

/// The fixed part of a record's native section (`struct pa_native_hdr`): the user registers at
/// the tick, then `kernel_frames` kernel return addresses and `stack_bytes` of user stack copied
/// from `sp` up.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaNativeHdr {
    /// User instruction pointer.
    pub ip: u64,
    /// User stack pointer: the address of the first copied byte.
    pub sp: u64,
    /// User frame pointer (rbp; aarch64: x29).
    pub bp: u64,
    /// Kernel return addresses following (innermost first).
    pub kernel_frames: u32,
    /// Bytes of user stack following the kernel frames.
    pub stack_bytes: u32,
}

const _: () = {
    assert!(size_of::<PaNativeHdr>() == 32);
    assert!(offset_of!(PaNativeHdr, ip) == 0);
    assert!(offset_of!(PaNativeHdr, sp) == 8);
    assert!(offset_of!(PaNativeHdr, bp) == 16);
    assert!(offset_of!(PaNativeHdr, kernel_frames) == 24);
    assert!(offset_of!(PaNativeHdr, stack_bytes) == 28);
};

/// Frames of a short record (`PA_SHORT_FRAMES`): walks that stop within this many frames are
/// written straight into a ring-buffer reservation of [`SHORT_RECORD_BYTES`].
pub const SHORT_FRAMES: u32 = 8;
/// Bytes of every short record (`PA_SHORT_RECORD_BYTES`), whatever its frame count.
pub const SHORT_RECORD_BYTES: usize =
    size_of::<PaSampleHdr>() + SHORT_FRAMES as usize * size_of::<PaFrame>();

/// The stages of a run, for [`STAGES`]: with the loader's `stop_after` knob set to one, the
/// program returns right after it (`PA_STAGE_*`). Entered, nothing done yet.
pub const STAGE_ENTERED: u32 = 1;
/// Run counted (the per-CPU counters looked up).
pub const STAGE_COUNTED: u32 = 2;
/// Process found (`pa_proc_slots`, or `pa_procs` for a shared slot).
pub const STAGE_PROCESS: u32 = 3;
/// Thread state found (`pa_thread_slots`, or `pa_threads` for a shared slot).
pub const STAGE_THREAD: u32 = 4;
/// Thread-state window read, current frame known.
pub const STAGE_THREAD_STATE: u32 = 5;
/// Short record reserved in the ring buffer, header filled.
pub const STAGE_RESERVED: u32 = 6;
/// The span read ([`PROC_TRACE_CONTEXT`]; nothing to do without it).
pub const STAGE_SPAN: u32 = 7;
/// The first [`SHORT_FRAMES`] frames walked.
pub const STAGE_SHORT_WALK: u32 = 8;
/// The last stage (`PA_STAGE__LAST`).
pub const STAGE_LAST: u32 = STAGE_SHORT_WALK;
/// Every stage with what it adds, in run order.
pub const STAGES: [(u32, &str); 8] = [
    (STAGE_ENTERED, "enter the program"),
    (STAGE_COUNTED, "count the run"),
    (STAGE_PROCESS, "look up the process"),
    (STAGE_THREAD, "look up the thread"),
    (STAGE_THREAD_STATE, "read the thread state"),
    (STAGE_RESERVED, "reserve the record"),
    (STAGE_SPAN, "read the span"),
    (STAGE_SHORT_WALK, "walk the frames"),
];

/// Bytes of the largest record (`sizeof(struct pa_record)`): header plus [`MAX_FRAMES`] frames.
pub const RECORD_MAX_BYTES: usize =
    size_of::<PaSampleHdr>() + MAX_FRAMES as usize * size_of::<PaFrame>();

/// Slots of the direct-mapped process table (`PA_PROC_SLOTS`): slot `tgid % PROC_SLOTS`.
pub const PROC_SLOTS: u32 = 4096;
/// Slots of the direct-mapped thread table (`PA_THREAD_SLOTS`): slot `tid % THREAD_SLOTS`.
pub const THREAD_SLOTS: u32 = 4096;
/// The key of a slot several keys fall in (`PA_SLOT_SHARED`): the program looks in the hash map.
pub const SLOT_SHARED: u32 = u32::MAX;

/// One slot of `pa_proc_slots` (`struct pa_proc_slot`): a process's walk configuration, its
/// key last (empty: 0, several: [`SLOT_SHARED`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaProcSlot {
    /// The walk configuration (meaningful when `tgid` is a process's).
    pub proc: PaProc,
    /// Host tgid, 0 or [`SLOT_SHARED`].
    pub tgid: u32,
    /// Zero.
    pub _pad: u32,
}

/// One slot of `pa_thread_slots` (`struct pa_thread_slot`): a thread's `PyThreadState`, its key
/// last (empty: 0, several: [`SLOT_SHARED`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaThreadSlot {
    /// `PyThreadState` address (0: a thread known to run no Python).
    pub tstate: u64,
    /// Host tid, 0 or [`SLOT_SHARED`].
    pub tid: u32,
    /// Zero.
    pub _pad: u32,
}

/// Thread states the program searches at most for an unregistered thread, by default
/// (`PA_THREAD_SEARCH_MAX`, the knob `pa_thread_search_max`).
pub const THREAD_SEARCH_MAX: u32 = 64;

/// One entry of `pa_thread_lists` (`struct pa_thread_list`): where the program looks for a
/// thread of the process that the agent has not registered yet.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaThreadList {
    /// Address of the main interpreter's `threads.head` pointer.
    pub threads_head_addr: u64,
    /// `st_dev` of `/proc/PID/ns/pid`.
    pub pidns_dev: u64,
    /// `st_ino` of `/proc/PID/ns/pid`.
    pub pidns_ino: u64,
    /// `PyThreadState.next`.
    pub thread_state_next: u32,
    /// `PyThreadState.native_thread_id` (3.11+), or `thread_id` (3.6–3.10: a `pthread_t`).
    pub thread_state_native_thread_id: u32,
    /// 3.6–3.10 (non-zero): the offset of the tid in the C library's thread descriptor, which
    /// `thread_state_native_thread_id` names the pointer to.
    pub pthread_tid: u32,
    /// padding
    pub _pad: u32,
}

const _: () = {
    assert!(size_of::<PaThreadList>() == 40);
    assert!(offset_of!(PaThreadList, pthread_tid) == 32);
    assert!(offset_of!(PaThreadList, pidns_dev) == 8);
    assert!(offset_of!(PaThreadList, pidns_ino) == 16);
    assert!(offset_of!(PaThreadList, thread_state_next) == 24);
    assert!(offset_of!(PaThreadList, thread_state_native_thread_id) == 28);
};

const _: () = {
    assert!(size_of::<PaProcSlot>() == 144);
    assert!(offset_of!(PaProcSlot, proc) == 0);
    assert!(offset_of!(PaProcSlot, tgid) == 136);
    assert!(offset_of!(PaProcSlot, _pad) == 140);
    assert!(size_of::<PaThreadSlot>() == 16);
    assert!(offset_of!(PaThreadSlot, tstate) == 0);
    assert!(offset_of!(PaThreadSlot, tid) == 8);
    assert!(offset_of!(PaThreadSlot, _pad) == 12);
};

// Safety: `#[repr(C)]`, only integer fields, no implicit padding (sizes asserted above).
#[cfg(feature = "userspace")]
unsafe impl aya::Pod for PaProc {}
// Safety: as above.
#[cfg(feature = "userspace")]
unsafe impl aya::Pod for PaOtelCtx {}
// Safety: as above.
#[cfg(feature = "userspace")]
unsafe impl aya::Pod for PaProcSlot {}
// Safety: as above.
#[cfg(feature = "userspace")]
unsafe impl aya::Pod for PaThreadSlot {}
// Safety: as above.
#[cfg(feature = "userspace")]
unsafe impl aya::Pod for PaThreadList {}
// Safety: as above.
#[cfg(feature = "userspace")]
unsafe impl aya::Pod for PaSampleHdr {}
// Safety: as above.
#[cfg(feature = "userspace")]
unsafe impl aya::Pod for PaFrame {}
// Safety: as above.
#[cfg(feature = "userspace")]
unsafe impl aya::Pod for PaOffCpuThread {}

#[cfg(test)]
mod tests {
    use super::*;

    /// 3.15 default build: current_frame 72, base_frame 80, anchor 88/96; frame 0/8/56/74.
    fn py315() -> PaProc {
        PaProc {
            generation: 1,
            executable_tag_mask: 3,
            flags: PROC_ANCHOR | PROC_BASE_FRAME,
            thread_state_current_frame: 72,
            cframe_current_frame: 0,
            thread_state_base_frame: 80,
            thread_state_last_profiled_frame: 88,
            thread_state_last_profiled_frame_seq: 96,
            interpreter_frame_previous: 8,
            interpreter_frame_executable: 0,
            interpreter_frame_instr_ptr: 56,
            interpreter_frame_owner: 74,
            gil_model: GIL_THREAD_FLAG,
            thread_state_holds_gil: 232,
            ..PaProc::default()
        }
    }

    #[test]
    fn validate_refuses_an_unknown_gil_model() {
        let p = PaProc {
            gil_model: 3,
            ..py315()
        };
        assert_eq!(p.validate(), Err(ProcError::UnknownGilModel { model: 3 }));
    }

    #[test]
    fn validate_accepts_real_layouts() {
        py315().validate().expect("3.15 layout");
        // 3.11: cframe at 56, _PyCFrame.current_frame at 8; frame f_code 32, previous 48,
        // prev_instr 56, owner 69.
        let py311 = PaProc {
            flags: PROC_CFRAME,
            executable_tag_mask: 0,
            thread_state_current_frame: 56,
            cframe_current_frame: 8,
            interpreter_frame_previous: 48,
            interpreter_frame_executable: 32,
            interpreter_frame_instr_ptr: 56,
            interpreter_frame_owner: 69,
            ..PaProc::default()
        };
        py311.validate().expect("3.11 layout");
    }

    #[test]
    fn validate_rejects_out_of_window() {
        let mut p = py315();
        p.interpreter_frame_instr_ptr = 76;
        assert!(matches!(
            p.validate(),
            Err(ProcError::FieldOutsideWindow {
                field: "interpreter_frame_instr_ptr",
                ..
            })
        ));
        let mut p = py315();
        p.interpreter_frame_owner = 80;
        assert!(p.validate().is_err());
        let mut p = py315();
        p.thread_state_last_profiled_frame_seq = 72 + 64;
        assert!(matches!(
            p.validate(),
            Err(ProcError::FieldOutsideWindow { offset: 64, .. })
        ));
        let mut p = py315();
        p.interpreter_frame_previous = 12;
        assert!(p.validate().is_err());
        let mut p = py315();
        p.flags |= 1 << 7;
        assert_eq!(
            p.validate(),
            Err(ProcError::UnknownFlags { flags: p.flags })
        );
        // A thread context reached through the DTV needs a DTV layout; one in static TLS not.
        let mut p = py315();
        p.flags |= PROC_TRACE_CONTEXT;
        assert!(matches!(p.validate(), Err(ProcError::BadOtelCtx { .. })));
        p.otel = PaOtelCtx {
            dtv_in_pthread: 8,
            dtv_entry_size: 16,
            pointer_in_entry: 0,
            module_id: 2,
            offset_in_block: 0x10,
            static_offset: 0,
        };
        p.validate().expect("a DTV layout");
        p.otel = PaOtelCtx {
            static_offset: 0x180,
            ..PaOtelCtx::default()
        };
        p.validate().expect("static TLS");
        // Fields of disabled features are not checked.
        let mut p = py315();
        p.flags = 0;
        p.thread_state_base_frame = 4096;
        p.validate().expect("base frame unused");
    }
}
