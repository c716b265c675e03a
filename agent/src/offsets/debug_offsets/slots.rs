//! The slot order of `_Py_DebugOffsets` in each minor version (after the 8-byte cookie, one u64
//! each), from `Include/internal/pycore_debug_offsets.h` (3.14/3.15) and `pycore_runtime.h` (3.13).
//!
//! CPython has so far only added slots, each run after an existing one, so a minor's order is
//! written as the previous minor's plus what it added: the diff of the header, and no slot is listed
//! twice. The orders are still whole arrays, built at compile time; a slot an addition names that the
//! previous order lacks fails the build. A minor that removes a slot gets a whole list of its own.

use crate::offsets::PythonVersion;

/// Slot order of `_Py_DebugOffsets` in 3.13 (after the 8-byte cookie, one u64 each).
pub(super) const SLOTS_3_13: &[&str] = &[
    "version",
    "free_threaded",
    "runtime_state.size",
    "runtime_state.finalizing",
    "runtime_state.interpreters_head",
    "interpreter_state.size",
    "interpreter_state.id",
    "interpreter_state.next",
    "interpreter_state.threads_head",
    "interpreter_state.gc",
    "interpreter_state.imports_modules",
    "interpreter_state.sysdict",
    "interpreter_state.builtins",
    "interpreter_state.ceval_gil",
    "interpreter_state.gil_runtime_state",
    "interpreter_state.gil_runtime_state_enabled",
    "interpreter_state.gil_runtime_state_locked",
    "interpreter_state.gil_runtime_state_holder",
    "thread_state.size",
    "thread_state.prev",
    "thread_state.next",
    "thread_state.interp",
    "thread_state.current_frame",
    "thread_state.thread_id",
    "thread_state.native_thread_id",
    "thread_state.datastack_chunk",
    "thread_state.status",
    "interpreter_frame.size",
    "interpreter_frame.previous",
    "interpreter_frame.executable",
    "interpreter_frame.instr_ptr",
    "interpreter_frame.localsplus",
    "interpreter_frame.owner",
    "code_object.size",
    "code_object.filename",
    "code_object.name",
    "code_object.qualname",
    "code_object.linetable",
    "code_object.firstlineno",
    "code_object.argcount",
    "code_object.localsplusnames",
    "code_object.localspluskinds",
    "code_object.co_code_adaptive",
    "pyobject.size",
    "pyobject.ob_type",
    "type_object.size",
    "type_object.tp_name",
    "type_object.tp_repr",
    "type_object.tp_flags",
    "tuple_object.size",
    "tuple_object.ob_item",
    "tuple_object.ob_size",
    "list_object.size",
    "list_object.ob_item",
    "list_object.ob_size",
    "dict_object.size",
    "dict_object.ma_keys",
    "dict_object.ma_values",
    "float_object.size",
    "float_object.ob_fval",
    "long_object.size",
    "long_object.lv_tag",
    "long_object.ob_digit",
    "bytes_object.size",
    "bytes_object.ob_size",
    "bytes_object.ob_sval",
    "unicode_object.size",
    "unicode_object.state",
    "unicode_object.length",
    "unicode_object.asciiobject_size",
    "gc.size",
    "gc.collecting",
];

/// What 3.14 added to the 3.13 order: each run of new slots, after the slot it follows.
const ADDED_IN_3_14: Additions = &[
    (
        "interpreter_state.threads_head",
        &["interpreter_state.threads_main"],
    ),
    (
        "interpreter_state.gil_runtime_state_holder",
        &[
            "interpreter_state.code_object_generation",
            "interpreter_state.tlbc_generation",
        ],
    ),
    (
        "interpreter_frame.owner",
        &[
            "interpreter_frame.stackpointer",
            "interpreter_frame.tlbc_index",
        ],
    ),
    ("code_object.co_code_adaptive", &["code_object.co_tlbc"]),
    (
        "list_object.ob_size",
        &[
            "set_object.size",
            "set_object.used",
            "set_object.table",
            "set_object.mask",
        ],
    ),
    (
        "gc.collecting",
        &[
            "gen_object.size",
            "gen_object.gi_name",
            "gen_object.gi_iframe",
            "gen_object.gi_frame_state",
            "llist_node.next",
            "llist_node.prev",
            "debugger_support.eval_breaker",
            "debugger_support.remote_debugger_support",
            "debugger_support.remote_debugging_enabled",
            "debugger_support.debugger_pending_call",
            "debugger_support.debugger_script_path",
            "debugger_support.debugger_script_path_size",
        ],
    ),
];

/// Slot order of `_Py_DebugOffsets` in 3.14 (after the 8-byte cookie, one u64 each).
pub(super) const SLOTS_3_14: &[&str] =
    &with_additions::<{ added_len(SLOTS_3_13, ADDED_IN_3_14) }>(SLOTS_3_13, ADDED_IN_3_14);

/// What 3.15 added to the 3.14 order: each run of new slots, after the slot it follows.
const ADDED_IN_3_15: Additions = &[
    (
        "thread_state.current_frame",
        &[
            "thread_state.base_frame",
            "thread_state.last_profiled_frame",
            "thread_state.last_profiled_frame_seq",
        ],
    ),
    (
        "thread_state.status",
        &[
            "thread_state.holds_gil",
            "thread_state.gil_requested",
            "thread_state.current_exception",
            "thread_state.exc_state",
            "err_stackitem.exc_value",
        ],
    ),
    (
        "type_object.tp_flags",
        &[
            "type_object.tp_basicsize",
            "type_object.tp_dictoffset",
            "heap_type_object.size",
            "heap_type_object.ht_cached_keys",
        ],
    ),
    (
        "unicode_object.asciiobject_size",
        &["unicode_object.compactunicodeobject_size"],
    ),
    (
        "gc.collecting",
        &[
            "gc.frame",
            "gc.generation_stats_size",
            "gc.generation_stats",
        ],
    ),
];

/// Slot order of `_Py_DebugOffsets` in 3.15 (after the 8-byte cookie, one u64 each).
pub(super) const SLOTS_3_15: &[&str] =
    &with_additions::<{ added_len(SLOTS_3_14, ADDED_IN_3_15) }>(SLOTS_3_14, ADDED_IN_3_15);

/// The slot order for a minor version, if we know it.
pub(super) fn slots_for(version: PythonVersion) -> Option<&'static [&'static str]> {
    match version.minor_version() {
        (3, 13) => Some(SLOTS_3_13),
        (3, 14) => Some(SLOTS_3_14),
        (3, 15) => Some(SLOTS_3_15),
        _ => None,
    }
}

/// What a minor version added to the previous one's order: (the slot a run follows, the run).
type Additions = &'static [(&'static str, &'static [&'static str])];

/// How many slots `base` has once `additions` are in.
const fn added_len(base: &[&str], additions: Additions) -> usize {
    let mut len = base.len();
    let mut i = 0;
    while i < additions.len() {
        len += additions[i].1.len();
        i += 1;
    }
    len
}

/// `base` with each run of `additions` right after the slot it follows. Evaluated at compile time,
/// so an addition after a slot `base` lacks (or has twice) fails the build.
const fn with_additions<const N: usize>(
    base: &[&'static str],
    additions: Additions,
) -> [&'static str; N] {
    let mut out = [""; N];
    let mut len = 0;
    let mut placed = 0;
    let mut i = 0;
    while i < base.len() {
        out[len] = base[i];
        len += 1;
        let mut j = 0;
        while j < additions.len() {
            let (after, run) = additions[j];
            if same(after, base[i]) {
                let mut k = 0;
                while k < run.len() {
                    out[len] = run[k];
                    len += 1;
                    k += 1;
                }
                placed += 1;
            }
            j += 1;
        }
        i += 1;
    }
    assert!(
        placed == additions.len(),
        "an addition follows a slot the previous order lacks or has twice"
    );
    assert!(len == N, "the slot count is not base plus additions");
    out
}

/// `a == b`, which a `const fn` cannot write for `str`.
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}
