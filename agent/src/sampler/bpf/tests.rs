use std::io;

use aya::maps::MapError;
use aya::programs::ProgramError;
use aya::EbpfError;

use super::error::{load_error, program_error};
use super::load::validate;
use super::*;

use common::{
    PaOtelCtx, GIL_HOLDER, GIL_NONE, GIL_THREAD_FLAG, PROC_ANCHOR, PROC_BASE_FRAME, PROC_CFRAME,
    PROC_TRACE_CONTEXT,
};

use crate::discovery::thread_context::{ThreadContextLayout, GLIBC_236_MODULE_3};
use crate::offsets::{builtin_offsets, GilLocation, Offsets, PythonVersion};

/// 3.12: current frame behind `tstate->cframe`, no anchor even when asked for.
#[test]
fn pa_proc_for_312_uses_cframe() {
    let o = builtin_offsets(PythonVersion::new(3, 12, 1)).expect("3.12 table");
    let want = PaProc {
        generation: 0,
        executable_tag_mask: 0,
        flags: PROC_CFRAME,
        thread_state_current_frame: 56,
        cframe_current_frame: 0,
        thread_state_base_frame: 0,
        thread_state_last_profiled_frame: 0,
        thread_state_last_profiled_frame_seq: 0,
        interpreter_frame_previous: 8,
        interpreter_frame_executable: 0,
        interpreter_frame_instr_ptr: 56,
        interpreter_frame_owner: 70,
        ..PaProc::default()
    };
    assert_eq!(pa_proc_for(&o, false), want);
    assert!(!o.has_frame_cache_anchor());
    assert_eq!(pa_proc_for(&o, true), want, "no anchor fields in 3.12");
    want.validate().expect("3.12 PaProc is valid");
}

/// The GIL is read where each version keeps it: 3.12 in the main interpreter (its
/// `last_holder` right before `locked`, so one read), 3.15 in the thread state's flag, and
/// nowhere on a free-threaded build.
#[test]
fn set_gil_follows_the_version() {
    let o = builtin_offsets(PythonVersion::new(3, 12, 1)).expect("3.12 table");
    let GilLocation::Interpreter { locked, holder } = o.gil else {
        panic!("3.12 keeps its GIL in the interpreter: {:?}", o.gil);
    };
    let mut p = pa_proc_for(&o, false);
    set_gil(&mut p, &o, 0x1000, 0x20_0000);
    assert_eq!(p.gil_model, GIL_HOLDER);
    assert_eq!(p.gil_locked_addr, 0x20_0000 + locked);
    assert_eq!(p.gil_holder_addr, 0x20_0000 + holder);
    assert_eq!(
        p.gil_locked_addr,
        p.gil_holder_addr + 8,
        "one read covers both"
    );
    p.validate().expect("valid");

    let mut o315 = offsets_315();
    o315.gil = GilLocation::ThreadFlag {
        holds_gil: 232,
        locked: 16,
        holder: 8,
    };
    set_gil(&mut p, &o315, 0x1000, 0x20_0000);
    assert_eq!(
        (
            p.gil_model,
            p.thread_state_holds_gil,
            p.gil_locked_addr,
            p.gil_holder_addr
        ),
        (GIL_THREAD_FLAG, 232, 0x20_0010, 0x20_0008),
        "3.15 reads the flag, and the pair for who holds the GIL a thread waits for"
    );

    o315.gil = GilLocation::Disabled { thread_state: 300 };
    set_gil(&mut p, &o315, 0x1000, 0x20_0000);
    assert_eq!(p.gil_model, GIL_NONE);
}

/// A process's OTel thread-context layout goes into the program's configuration as found (the
/// DTV way, or static TLS), the flag with it; a process without one, or with an offset the map
/// cannot hold, is not read.
#[test]
fn set_trace_context_follows_the_layout() {
    let mut p = pa_proc_for(&offsets_315(), true);
    let dtv = GLIBC_236_MODULE_3;
    set_trace_context(&mut p, Some(&dtv));
    assert_eq!(p.flags & PROC_TRACE_CONTEXT, PROC_TRACE_CONTEXT);
    assert_eq!(
        p.otel,
        PaOtelCtx {
            static_offset: 0,
            offset_in_block: 0x18,
            dtv_in_pthread: 8,
            dtv_entry_size: 16,
            pointer_in_entry: 0,
            module_id: 3,
        }
    );
    p.validate().expect("valid with a DTV layout");

    let static_tls = ThreadContextLayout {
        static_offset: Some(0x1180),
        ..dtv
    };
    set_trace_context(&mut p, Some(&static_tls));
    assert_eq!(
        (p.otel.static_offset, p.otel.offset_in_block),
        (0x1180, 0x18)
    );
    p.validate().expect("valid in static TLS");

    let huge = ThreadContextLayout {
        module_id: 1 << 40,
        ..dtv
    };
    for layout in [None, Some(&huge)] {
        set_trace_context(&mut p, layout);
        assert_eq!(p.flags & PROC_TRACE_CONTEXT, 0, "{layout:?}");
        assert_eq!(p.otel, PaOtelCtx::default());
        assert_eq!(p, pa_proc_for(&offsets_315(), true), "as before");
    }
}

/// A 3.15 default-build layout (cpython-internals.md §6.1, §10), made from the 3.12 table.
fn offsets_315() -> Offsets {
    let mut o = builtin_offsets(PythonVersion::new(3, 12, 1)).expect("3.12 table");
    o.version = PythonVersion::new(3, 15, 2);
    o.thread_state.current_frame = 72;
    o.thread_state.cframe_current_frame = None;
    o.thread_state.base_frame = Some(80);
    o.thread_state.last_profiled_frame = Some(88);
    o.thread_state.last_profiled_frame_seq = Some(96);
    o.interpreter_frame.size = 88;
    o.interpreter_frame.executable = 0;
    o.interpreter_frame.previous = 8;
    o.interpreter_frame.instr_ptr = 56;
    o.interpreter_frame.owner = Some(74);
    o.frame.executable_tag_mask = 3;
    o
}

#[test]
fn pa_proc_for_315_uses_base_frame_and_anchor() {
    let o = offsets_315();
    assert!(o.has_frame_cache_anchor());
    let with = pa_proc_for(&o, true);
    assert_eq!(
        with,
        PaProc {
            generation: 0,
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
            ..PaProc::default()
        }
    );
    with.validate().expect("3.15 PaProc is valid");

    let without = pa_proc_for(&o, false);
    assert_eq!(without.flags, PROC_BASE_FRAME);
    assert_eq!(
        (
            without.thread_state_last_profiled_frame,
            without.thread_state_last_profiled_frame_seq
        ),
        (0, 0)
    );
    without.validate().expect("valid without the anchor");

    // Only one half of the anchor pair: no anchor.
    let mut half = o;
    half.thread_state.last_profiled_frame_seq = None;
    assert_eq!(pa_proc_for(&half, true).flags, PROC_BASE_FRAME);
}

/// Offsets beyond u32 saturate, and the program's checks (mirrored by validate) refuse them.
#[test]
fn pa_proc_for_saturates_huge_offsets() {
    let mut o = offsets_315();
    o.thread_state.last_profiled_frame_seq = Some(1 << 40);
    let p = pa_proc_for(&o, true);
    assert_eq!(p.thread_state_last_profiled_frame_seq, u32::MAX);
    assert!(p.validate().is_err());
}

/// The sampler moves into a tokio task (`AsyncFd<BpfSampler>`).
#[test]
fn sampler_is_send() {
    fn send<T: Send>() {}
    send::<BpfSampler>();
}

#[test]
fn config_validation() {
    validate(&BpfConfig::default()).expect("default is valid");
    for bad in [
        BpfConfig {
            rate_hz: 0,
            ..BpfConfig::default()
        },
        BpfConfig {
            ring_bytes: 3 << 20,
            ..BpfConfig::default()
        },
        BpfConfig {
            ring_bytes: 1024,
            ..BpfConfig::default()
        },
        BpfConfig {
            max_frames: 0,
            ..BpfConfig::default()
        },
        BpfConfig {
            max_frames: MAX_FRAMES + 1,
            ..BpfConfig::default()
        },
        BpfConfig {
            max_threads: 0,
            ..BpfConfig::default()
        },
    ] {
        assert!(
            matches!(validate(&bad), Err(BpfError::InvalidConfig(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn permission_errors_name_the_capabilities() {
    let e = program_error(
        "attaching to cpu 1",
        ProgramError::SyscallError(aya::sys::SyscallError {
            call: "perf_event_open",
            io_error: io::Error::from_raw_os_error(libc::EACCES),
        }),
    );
    let msg = e.to_string();
    assert!(matches!(e, BpfError::PermissionDenied { .. }));
    assert!(
        msg.contains("CAP_BPF") && msg.contains("CAP_PERFMON") && msg.contains("CAP_SYS_ADMIN"),
        "{msg}"
    );
    let e = load_error(EbpfError::MapError(MapError::CreateError {
        name: "pa_procs".to_owned(),
        io_error: io::Error::from_raw_os_error(libc::EPERM),
    }));
    assert!(matches!(e, BpfError::PermissionDenied { .. }), "{e:?}");
}
