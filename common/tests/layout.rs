//! Drift test: compiles a C probe against `include/pyagent.h` with the host clang, prints every
//! size, offset, limit, flag and counter id, and compares them with the Rust mirror. Also checks
//! that every `PA_CNT_*` enumerator and `PA_*` define in the header has a mirror here.
//!
//! Uses `clang-19` (override with `PYAGENT_CLANG`); a missing compiler fails the test, naming
//! the package to install.

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use pyagent_common::{
    Counter, PaFrame, PaNativeHdr, PaOffCpuThread, PaOtelCtx, PaProc, PaProcSlot, PaSampleHdr,
    PaThreadList, PaThreadSlot, COUNTERS, COUNTER_COUNT, FRAME_OBJECT_READ_BYTES, FRAME_READ_BYTES,
    GIL_HOLDER, GIL_NONE, GIL_THREAD_FLAG, GIL_WAIT_BYTES, KERNEL_FRAMES, MAX_FRAMES,
    NATIVE_MAX_BYTES, NATIVE_STACK_BYTES, NOTICE_EXEC, NOTICE_EXIT, NOTICE_FORK,
    NOTICE_THREAD_EXIT, NOTICE_UNKNOWN_THREAD, OFF_CPU_RECORDED, OTEL_READ_BYTES,
    OTEL_SPAN_ID_OFFSET, OTEL_VALID_OFFSET, PROC_ALL, PROC_ANCHOR, PROC_BASE_FRAME, PROC_CFRAME,
    PROC_FRAME_OBJECTS, PROC_IS_ENTRY, PROC_NATIVE, PROC_SLOTS, PROC_TRACE_CONTEXT,
    RECORD_MAX_BYTES, SAMPLE_ANCHOR_HIT, SAMPLE_COMPLETE, SAMPLE_CYCLIC, SAMPLE_GIL_HELD,
    SAMPLE_GIL_KNOWN, SAMPLE_NATIVE, SAMPLE_OFF_CPU, SAMPLE_REACHED_BASE, SAMPLE_READ_FAILED,
    SAMPLE_SPAN, SAMPLE_TASK, SAMPLE_TASK_AWAITED, SAMPLE_TRUNCATED, SAMPLE_WAKE, SHORT_FRAMES,
    SHORT_RECORD_BYTES, SLOT_SHARED, STAGE_COUNTED, STAGE_ENTERED, STAGE_LAST, STAGE_PROCESS,
    STAGE_RESERVED, STAGE_SHORT_WALK, STAGE_SPAN, STAGE_THREAD, STAGE_THREAD_STATE,
    THREAD_SEARCH_MAX, THREAD_SLOTS, TSTATE_READ_BYTES, WAIT_FUTEX, WAIT_IO, WAIT_NONE, WAIT_OTHER,
    WAIT_SLEEP,
};

/// (C expression, value in Rust). The probe prints each C expression's value.
fn expectations() -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = Vec::new();
    let mut push = |c: &str, r: usize| v.push((c.to_owned(), r as u64));

    push("sizeof(struct pa_proc)", size_of::<PaProc>());
    macro_rules! fields {
        ($cty:literal, $rty:ty, [$($f:ident),* $(,)?]) => {
            $( push(&format!("offsetof(struct {}, {})", $cty, stringify!($f)), offset_of!($rty, $f)); )*
        };
    }
    fields!(
        "pa_proc",
        PaProc,
        [
            generation,
            executable_tag_mask,
            flags,
            thread_state_current_frame,
            cframe_current_frame,
            thread_state_base_frame,
            thread_state_last_profiled_frame,
            thread_state_last_profiled_frame_seq,
            interpreter_frame_previous,
            interpreter_frame_executable,
            interpreter_frame_instr_ptr,
            interpreter_frame_owner,
            gil_locked_addr,
            gil_holder_addr,
            gil_model,
            thread_state_holds_gil,
            otel,
            gil_waits_addr,
            thread_state_running_task,
            task_coro,
            coroutine_iframe,
            task_awaited_by,
        ]
    );
    push("sizeof(struct pa_otel_ctx)", size_of::<PaOtelCtx>());
    fields!(
        "pa_otel_ctx",
        PaOtelCtx,
        [
            static_offset,
            offset_in_block,
            dtv_in_pthread,
            dtv_entry_size,
            pointer_in_entry,
            module_id
        ]
    );
    push("sizeof(struct pa_sample_hdr)", size_of::<PaSampleHdr>());
    fields!(
        "pa_sample_hdr",
        PaSampleHdr,
        [
            pid,
            tid,
            tstate,
            generation,
            anchor_frame,
            anchor_seq,
            base_frame,
            cpu,
            nframes,
            flags,
            wait,
            time_ns,
            wait_addr,
            carried_ns,
            trace_id,
            span_id,
            gil_holder,
            gil_holder_code,
            task_frame,
        ]
    );
    push(
        "sizeof(struct pa_off_cpu_thread)",
        size_of::<PaOffCpuThread>(),
    );
    fields!(
        "pa_off_cpu_thread",
        PaOffCpuThread,
        [
            last_recorded_ns,
            blocked_ns,
            carried_ns,
            last_wait_addr,
            last_wait,
            tgid,
            flags,
            _pad,
            queued_since_ns,
            queued_ns
        ]
    );
    push("sizeof(struct pa_frame)", size_of::<PaFrame>());
    fields!(
        "pa_frame",
        PaFrame,
        [addr, executable, instr_ptr, owner, is_entry]
    );
    push("sizeof(struct pa_proc_slot)", size_of::<PaProcSlot>());
    fields!("pa_proc_slot", PaProcSlot, [proc, tgid, _pad]);
    push("sizeof(struct pa_thread_slot)", size_of::<PaThreadSlot>());
    fields!("pa_thread_slot", PaThreadSlot, [tstate, tid, _pad]);
    push("sizeof(struct pa_thread_list)", size_of::<PaThreadList>());
    fields!(
        "pa_thread_list",
        PaThreadList,
        [
            threads_head_addr,
            pidns_dev,
            pidns_ino,
            thread_state_next,
            thread_state_native_thread_id
        ]
    );
    push("sizeof(struct pa_record)", RECORD_MAX_BYTES);
    push("sizeof(struct pa_native_hdr)", size_of::<PaNativeHdr>());
    fields!(
        "pa_native_hdr",
        PaNativeHdr,
        [ip, sp, bp, kernel_frames, stack_bytes]
    );
    push("PA_NATIVE_MAX_BYTES", NATIVE_MAX_BYTES);
    push("sizeof(struct pa_short_record)", SHORT_RECORD_BYTES);
    push("PA_SHORT_RECORD_BYTES", SHORT_RECORD_BYTES);

    for (c, r) in [
        ("PA_MAX_FRAMES", MAX_FRAMES),
        ("PA_SHORT_FRAMES", SHORT_FRAMES),
        ("PA_PROC_SLOTS", PROC_SLOTS),
        ("PA_THREAD_SLOTS", THREAD_SLOTS),
        ("PA_THREAD_SEARCH_MAX", THREAD_SEARCH_MAX),
        ("PA_SLOT_SHARED", SLOT_SHARED),
        ("PA_STAGE_ENTERED", STAGE_ENTERED),
        ("PA_STAGE_COUNTED", STAGE_COUNTED),
        ("PA_STAGE_PROCESS", STAGE_PROCESS),
        ("PA_STAGE_THREAD", STAGE_THREAD),
        ("PA_STAGE_THREAD_STATE", STAGE_THREAD_STATE),
        ("PA_STAGE_RESERVED", STAGE_RESERVED),
        ("PA_STAGE_SPAN", STAGE_SPAN),
        ("PA_STAGE_SHORT_WALK", STAGE_SHORT_WALK),
        ("PA_STAGE__LAST", STAGE_LAST),
        ("PA_FRAME_READ_BYTES", FRAME_READ_BYTES),
        ("PA_FRAME_OBJECT_READ_BYTES", FRAME_OBJECT_READ_BYTES),
        ("PA_TSTATE_READ_BYTES", TSTATE_READ_BYTES),
        ("PA_PROC_CFRAME", PROC_CFRAME),
        ("PA_PROC_ANCHOR", PROC_ANCHOR),
        ("PA_PROC_BASE_FRAME", PROC_BASE_FRAME),
        ("PA_PROC_TRACE_CONTEXT", PROC_TRACE_CONTEXT),
        ("PA_PROC_NATIVE", PROC_NATIVE),
        ("PA_PROC_IS_ENTRY", PROC_IS_ENTRY),
        ("PA_PROC_FRAME_OBJECTS", PROC_FRAME_OBJECTS),
        ("PA_PROC__ALL", PROC_ALL),
        ("PA_OTEL_SPAN_ID_OFFSET", OTEL_SPAN_ID_OFFSET),
        ("PA_OTEL_VALID_OFFSET", OTEL_VALID_OFFSET),
        ("PA_OTEL_READ_BYTES", OTEL_READ_BYTES),
        ("PA_SAMPLE_NATIVE", SAMPLE_NATIVE),
        ("PA_SAMPLE_TASK", SAMPLE_TASK),
        ("PA_SAMPLE_TASK_AWAITED", SAMPLE_TASK_AWAITED),
        ("PA_NATIVE_STACK_BYTES", NATIVE_STACK_BYTES),
        ("PA_KERNEL_FRAMES", KERNEL_FRAMES),
        ("PA_SAMPLE_COMPLETE", SAMPLE_COMPLETE),
        ("PA_SAMPLE_TRUNCATED", SAMPLE_TRUNCATED),
        ("PA_SAMPLE_READ_FAILED", SAMPLE_READ_FAILED),
        ("PA_SAMPLE_ANCHOR_HIT", SAMPLE_ANCHOR_HIT),
        ("PA_SAMPLE_REACHED_BASE", SAMPLE_REACHED_BASE),
        ("PA_SAMPLE_CYCLIC", SAMPLE_CYCLIC),
        ("PA_SAMPLE_OFF_CPU", SAMPLE_OFF_CPU),
        ("PA_SAMPLE_WAKE", SAMPLE_WAKE),
        ("PA_SAMPLE_GIL_KNOWN", SAMPLE_GIL_KNOWN),
        ("PA_SAMPLE_GIL_HELD", SAMPLE_GIL_HELD),
        ("PA_SAMPLE_SPAN", SAMPLE_SPAN),
        ("PA_GIL_NONE", GIL_NONE),
        ("PA_GIL_HOLDER", GIL_HOLDER),
        ("PA_GIL_THREAD_FLAG", GIL_THREAD_FLAG),
        ("PA_WAIT_NONE", WAIT_NONE),
        ("PA_OFF_CPU_RECORDED", OFF_CPU_RECORDED),
        ("PA_WAIT_OTHER", WAIT_OTHER),
        ("PA_WAIT_IO", WAIT_IO),
        ("PA_WAIT_SLEEP", WAIT_SLEEP),
        ("PA_WAIT_FUTEX", WAIT_FUTEX),
        ("PA_NOTICE_UNKNOWN_THREAD", NOTICE_UNKNOWN_THREAD),
        ("PA_NOTICE_EXEC", NOTICE_EXEC),
        ("PA_NOTICE_FORK", NOTICE_FORK),
        ("PA_NOTICE_EXIT", NOTICE_EXIT),
        ("PA_NOTICE_THREAD_EXIT", NOTICE_THREAD_EXIT),
    ] {
        push(c, r as usize);
    }
    push("PA_GIL_WAIT_BYTES", GIL_WAIT_BYTES as usize);
    for info in &COUNTERS {
        push(info.c_name, info.counter.index() as usize);
    }
    push("PA_CNT__COUNT", COUNTER_COUNT);
    v
}

fn header_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

fn clang() -> String {
    std::env::var("PYAGENT_CLANG").unwrap_or_else(|_| "clang-19".to_owned())
}

/// Compiles and runs the probe; returns C expression -> value.
fn probe(exprs: &[String]) -> BTreeMap<String, u64> {
    let dir = std::env::temp_dir().join(format!("pyagent-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create probe dir");
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"pyagent.h\"\nint main(void) {\n",
    );
    for e in exprs {
        c.push_str(&format!(
            "\tprintf(\"%s\\t%llu\\n\", \"{e}\", (unsigned long long)({e}));\n"
        ));
    }
    c.push_str("\treturn 0;\n}\n");
    std::fs::write(&src, c).expect("write probe.c");

    let out = Command::new(clang())
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(header_dir())
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}): apt-get install clang-19, or set PYAGENT_CLANG",
                clang()
            )
        });
    assert!(
        out.status.success(),
        "probe did not compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().expect("run probe");
    assert!(out.status.success(), "probe failed");
    let _ = std::fs::remove_dir_all(&dir);

    String::from_utf8(out.stdout)
        .expect("probe output is ASCII")
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('\t').expect("probe line is `expr<TAB>value`");
            (k.to_owned(), v.parse().expect("probe value is a number"))
        })
        .collect()
}

#[test]
fn header_matches_rust_mirror() {
    let expected = expectations();
    let exprs: Vec<String> = expected.iter().map(|(e, _)| e.clone()).collect();
    let got = probe(&exprs);
    let mismatches: Vec<String> = expected
        .iter()
        .filter(|(e, r)| got.get(e) != Some(r))
        .map(|(e, r)| format!("{e}: C {:?}, Rust {r}", got.get(e)))
        .collect();
    assert!(
        mismatches.is_empty(),
        "pyagent.h and common/src drifted:\n{}",
        mismatches.join("\n")
    );
}

/// Every `PA_CNT_*` enumerator and `PA_*` define in the header is mirrored (and nothing else).
#[test]
fn header_names_are_all_mirrored() {
    let text = std::fs::read_to_string(header_dir().join("pyagent.h")).expect("read pyagent.h");
    let mirrored: Vec<String> = expectations().into_iter().map(|(e, _)| e).collect();
    let mut in_header = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        let name = if let Some(rest) = line.strip_prefix("#define ") {
            rest.split_whitespace().next()
        } else if line.starts_with("PA_CNT_") {
            line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
        } else {
            None
        };
        if let Some(name) = name.filter(|n| n.starts_with("PA_")) {
            in_header.push(name.to_owned());
        }
    }
    assert!(
        in_header.len() > 20,
        "header scan found too little: {in_header:?}"
    );
    let missing: Vec<&String> = in_header.iter().filter(|n| !mirrored.contains(n)).collect();
    assert!(
        missing.is_empty(),
        "header names without a Rust mirror: {missing:?}"
    );
    let counters_in_header = in_header
        .iter()
        .filter(|n| n.starts_with("PA_CNT_") && *n != "PA_CNT__COUNT")
        .count();
    assert_eq!(counters_in_header, Counter::all().len());
}
