//! What the program is told about one process: how to walk its frames ([`PaProc`] from the
//! process's [`Offsets`]), where its GIL is, where its threads' OpenTelemetry contexts are, and
//! where to search for threads not registered.

use common::{
    PaOtelCtx, PaProc, PaThreadList, GIL_HOLDER, GIL_NONE, GIL_THREAD_FLAG, PROC_ANCHOR,
    PROC_BASE_FRAME, PROC_CFRAME, PROC_TRACE_CONTEXT,
};

use crate::discovery::thread_context::ThreadContextLayout;
use crate::offsets::{GilBase, GilLocation, NativeThreadId, Offsets};

/// Where the program looks for an unregistered thread of a process with layout `offsets`: the
/// thread list of the interpreter at `interpreter_addr`, matched by `native_thread_id` in the
/// process's PID namespace `pidns` (`st_dev`, `st_ino` of `/proc/PID/ns/pid`).
pub fn pa_thread_list_for(
    offsets: &Offsets,
    interpreter_addr: u64,
    pidns: (u64, u64),
) -> PaThreadList {
    let off = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    let t = &offsets.thread_state;
    let (native, pthread_tid) = match t.native_thread_id {
        NativeThreadId::Field(at) => (off(at), 0),
        NativeThreadId::InPthread { offset } => (off(t.thread_id), off(offset)),
    };
    PaThreadList {
        threads_head_addr: interpreter_addr.saturating_add(offsets.interpreter_state.threads_head),
        pidns_dev: pidns.0,
        pidns_ino: pidns.1,
        thread_state_next: off(offsets.thread_state.next),
        thread_state_native_thread_id: native,
        pthread_tid,
        _pad: 0,
    }
}

/// The walk configuration of a process whose CPython layout is `offsets` (generation 0: the
/// caller sets [`PaProc::generation`]). Sets [`PROC_CFRAME`] when the current frame is behind
/// `tstate->cframe` (3.11, 3.12), [`PROC_BASE_FRAME`] when `base_frame` is known (3.15), and
/// [`PROC_ANCHOR`] when `use_anchor` is true and the layout has the 3.15 frame-cache anchor
/// ([`Offsets::has_frame_cache_anchor`]). An offset too large for the map is saturated, so that
/// [`PaProc::validate`] (and [`BpfSampler::track_process`]) refuses it.
pub fn pa_proc_for(offsets: &Offsets, use_anchor: bool) -> PaProc {
    let off = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    let t = &offsets.thread_state;
    let f = &offsets.interpreter_frame;
    let mut p = PaProc {
        generation: 0,
        executable_tag_mask: offsets.frame.executable_tag_mask,
        flags: 0,
        thread_state_current_frame: off(t.current_frame),
        cframe_current_frame: 0,
        thread_state_base_frame: 0,
        thread_state_last_profiled_frame: 0,
        thread_state_last_profiled_frame_seq: 0,
        interpreter_frame_previous: off(f.previous),
        interpreter_frame_executable: off(f.executable),
        interpreter_frame_instr_ptr: off(f.instr_ptr),
        // A frame without an owner (3.6–3.10) has its first byte read instead: userspace
        // ignores the value ([`crate::unwind::DecodedRecord::adopt_layout`]).
        interpreter_frame_owner: off(f.owner.unwrap_or(0)),
        ..PaProc::default()
    };
    if offsets.frame.heap_frames {
        p.flags |= common::PROC_FRAME_OBJECTS;
    }
    if let Some(c) = t.cframe_current_frame {
        p.flags |= PROC_CFRAME;
        p.cframe_current_frame = off(c);
    }
    if let Some(b) = t.base_frame {
        p.flags |= PROC_BASE_FRAME;
        p.thread_state_base_frame = off(b);
    }
    if let (true, Some(a), Some(seq)) =
        (use_anchor, t.last_profiled_frame, t.last_profiled_frame_seq)
    {
        p.flags |= PROC_ANCHOR;
        p.thread_state_last_profiled_frame = off(a);
        p.thread_state_last_profiled_frame_seq = off(seq);
    }
    // 3.11 keeps `is_entry` right before the owner byte, where the program reads it.
    if offsets
        .frame
        .is_entry
        .is_some_and(|e| Some(e + 1) == f.owner)
    {
        p.flags |= common::PROC_IS_ENTRY;
    }
    p
}

/// Tells the program of `proc` how to read whether a sampled thread holds the GIL: the main
/// interpreter's `locked`/`last_holder` pair (3.11 in `_PyRuntime` at `runtime_addr`, 3.12-3.14
/// in the interpreter at `interpreter_addr`), or the thread state's own flag (3.15); and, with
/// the pair (3.15 too), who holds the GIL a thread blocks waiting for. Threads of
/// sub-interpreters with their own GIL read as not holding the main one. Free-threaded builds
/// have no GIL: their records carry no GIL bits.
pub fn set_gil(proc: &mut PaProc, offsets: &Offsets, runtime_addr: u64, interpreter_addr: u64) {
    proc.gil_model = GIL_NONE;
    proc.gil_locked_addr = 0;
    proc.gil_holder_addr = 0;
    proc.gil_waits_addr = 0;
    proc.thread_state_holds_gil = 0;
    let Some((base, locked, holder)) = offsets.gil.holder_words() else {
        return;
    };
    let base = match base {
        GilBase::Process => 0,
        GilBase::Runtime => runtime_addr,
        GilBase::Interpreter => interpreter_addr,
    };
    let (Some(locked), Some(holder)) = (base.checked_add(locked), base.checked_add(holder)) else {
        return;
    };
    if let GilLocation::ThreadFlag { holds_gil, .. } = offsets.gil {
        let Ok(off) = u32::try_from(holds_gil) else {
            return;
        };
        proc.gil_model = GIL_THREAD_FLAG;
        proc.thread_state_holds_gil = off;
    } else {
        proc.gil_model = GIL_HOLDER;
    }
    proc.gil_locked_addr = locked;
    proc.gil_holder_addr = holder;
    proc.gil_waits_addr = offsets.gil.waits_start(locked);
}

/// Tells the program of `proc` where each thread's OTEP 4947 context is (`layout`, found in the
/// process), so that every record carries the span its thread was in at the tick; `None`: the
/// process publishes none, and the program reads nothing. A layout field too large for the map
/// leaves the process without spans rather than with a wrong one.
pub fn set_trace_context(proc: &mut PaProc, layout: Option<&ThreadContextLayout>) {
    match layout.and_then(otel_ctx_of) {
        Some(otel) => {
            proc.flags |= PROC_TRACE_CONTEXT;
            proc.otel = otel;
        }
        None => {
            proc.flags &= !PROC_TRACE_CONTEXT;
            proc.otel = PaOtelCtx::default();
        }
    }
}

/// The program's form of a thread-context layout (`None`: an offset does not fit).
fn otel_ctx_of(l: &ThreadContextLayout) -> Option<PaOtelCtx> {
    let narrow = |v: u64| u32::try_from(v).ok();
    Some(PaOtelCtx {
        static_offset: l.static_offset.unwrap_or(0),
        offset_in_block: l.offset_in_block,
        dtv_in_pthread: narrow(l.dtv_in_pthread)?,
        dtv_entry_size: narrow(l.dtv_entry_size)?,
        pointer_in_entry: narrow(l.pointer_in_entry)?,
        module_id: narrow(l.module_id)?,
    })
}
