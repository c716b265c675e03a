//! Parses CPython's `_Py_DebugOffsets` (3.13+), the table at the start of `_PyRuntime`.
//!
//! The table has no size field: its layout is implied by the minor version in its second slot.
//! So the slot order of each minor is kept here as data (from `Include/internal/
//! pycore_debug_offsets.h`, 3.14/3.15, and `pycore_runtime.h`, 3.13); a new minor costs one list.

use std::collections::HashMap;

use super::{
    BytesObjectOffsets, CodeObjectOffsets, DictObjectOffsets, FrameModel, GcOffsets, GilLocation,
    InterpreterFrameOffsets, InterpreterStateOffsets, LongFormat, LongObjectOffsets, ManagedDict,
    Offsets, OffsetsError, PyObjectOffsets, PythonVersion, RuntimeStateOffsets, ThreadNameOffsets,
    ThreadStateOffsets, UnicodeObjectOffsets, UnicodeStateBits, DICT_KEYS,
};

/// The 8 bytes that open `_Py_DebugOffsets`.
pub const DEBUG_OFFSETS_COOKIE: &[u8; 8] = b"xdebugpy";

/// Slot order of `_Py_DebugOffsets` in 3.13 (after the 8-byte cookie, one u64 each).
const SLOTS_3_13: &[&str] = &[
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

/// Slot order of `_Py_DebugOffsets` in 3.14 (after the 8-byte cookie, one u64 each).
const SLOTS_3_14: &[&str] = &[
    "version",
    "free_threaded",
    "runtime_state.size",
    "runtime_state.finalizing",
    "runtime_state.interpreters_head",
    "interpreter_state.size",
    "interpreter_state.id",
    "interpreter_state.next",
    "interpreter_state.threads_head",
    "interpreter_state.threads_main",
    "interpreter_state.gc",
    "interpreter_state.imports_modules",
    "interpreter_state.sysdict",
    "interpreter_state.builtins",
    "interpreter_state.ceval_gil",
    "interpreter_state.gil_runtime_state",
    "interpreter_state.gil_runtime_state_enabled",
    "interpreter_state.gil_runtime_state_locked",
    "interpreter_state.gil_runtime_state_holder",
    "interpreter_state.code_object_generation",
    "interpreter_state.tlbc_generation",
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
    "interpreter_frame.stackpointer",
    "interpreter_frame.tlbc_index",
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
    "code_object.co_tlbc",
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
    "set_object.size",
    "set_object.used",
    "set_object.table",
    "set_object.mask",
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
];

/// Slot order of `_Py_DebugOffsets` in 3.15 (after the 8-byte cookie, one u64 each).
const SLOTS_3_15: &[&str] = &[
    "version",
    "free_threaded",
    "runtime_state.size",
    "runtime_state.finalizing",
    "runtime_state.interpreters_head",
    "interpreter_state.size",
    "interpreter_state.id",
    "interpreter_state.next",
    "interpreter_state.threads_head",
    "interpreter_state.threads_main",
    "interpreter_state.gc",
    "interpreter_state.imports_modules",
    "interpreter_state.sysdict",
    "interpreter_state.builtins",
    "interpreter_state.ceval_gil",
    "interpreter_state.gil_runtime_state",
    "interpreter_state.gil_runtime_state_enabled",
    "interpreter_state.gil_runtime_state_locked",
    "interpreter_state.gil_runtime_state_holder",
    "interpreter_state.code_object_generation",
    "interpreter_state.tlbc_generation",
    "thread_state.size",
    "thread_state.prev",
    "thread_state.next",
    "thread_state.interp",
    "thread_state.current_frame",
    "thread_state.base_frame",
    "thread_state.last_profiled_frame",
    "thread_state.last_profiled_frame_seq",
    "thread_state.thread_id",
    "thread_state.native_thread_id",
    "thread_state.datastack_chunk",
    "thread_state.status",
    "thread_state.holds_gil",
    "thread_state.gil_requested",
    "thread_state.current_exception",
    "thread_state.exc_state",
    "err_stackitem.exc_value",
    "interpreter_frame.size",
    "interpreter_frame.previous",
    "interpreter_frame.executable",
    "interpreter_frame.instr_ptr",
    "interpreter_frame.localsplus",
    "interpreter_frame.owner",
    "interpreter_frame.stackpointer",
    "interpreter_frame.tlbc_index",
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
    "code_object.co_tlbc",
    "pyobject.size",
    "pyobject.ob_type",
    "type_object.size",
    "type_object.tp_name",
    "type_object.tp_repr",
    "type_object.tp_flags",
    "type_object.tp_basicsize",
    "type_object.tp_dictoffset",
    "heap_type_object.size",
    "heap_type_object.ht_cached_keys",
    "tuple_object.size",
    "tuple_object.ob_item",
    "tuple_object.ob_size",
    "list_object.size",
    "list_object.ob_item",
    "list_object.ob_size",
    "set_object.size",
    "set_object.used",
    "set_object.table",
    "set_object.mask",
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
    "unicode_object.compactunicodeobject_size",
    "gc.size",
    "gc.collecting",
    "gc.frame",
    "gc.generation_stats_size",
    "gc.generation_stats",
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
];

/// The slot order for a minor version, if we know it.
fn slots_for(version: PythonVersion) -> Option<&'static [&'static str]> {
    match version.minor_version() {
        (3, 13) => Some(SLOTS_3_13),
        (3, 14) => Some(SLOTS_3_14),
        (3, 15) => Some(SLOTS_3_15),
        _ => None,
    }
}

/// Bytes to read at `_PyRuntime` before the version is known: cookie + version.
pub const DEBUG_OFFSETS_PREFIX_LEN: usize = 16;

/// Length of the whole table for the version in `prefix` (cookie + version), if known.
pub fn debug_offsets_len(prefix: &[u8]) -> Result<usize, OffsetsError> {
    let version = read_version(prefix)?;
    let slots = slots_for(version).ok_or(OffsetsError::Unsupported(version))?;
    Ok(8 + 8 * slots.len())
}

fn read_version(table: &[u8]) -> Result<PythonVersion, OffsetsError> {
    if table.len() < DEBUG_OFFSETS_PREFIX_LEN {
        return Err(OffsetsError::Truncated {
            got: table.len(),
            need: DEBUG_OFFSETS_PREFIX_LEN,
        });
    }
    if &table[..8] != DEBUG_OFFSETS_COOKIE {
        return Err(OffsetsError::NoCookie);
    }
    let hex = u64::from_le_bytes(table[8..16].try_into().expect("8 bytes"));
    Ok(PythonVersion::from_hex(hex))
}

/// Parses a `_Py_DebugOffsets` table (cookie included) into [`Offsets`], validated.
pub fn parse_debug_offsets(table: &[u8]) -> Result<Offsets, OffsetsError> {
    let version = read_version(table)?;
    if version.is_prerelease() {
        return Err(OffsetsError::PreRelease(version));
    }
    let slots = slots_for(version).ok_or(OffsetsError::Unsupported(version))?;
    let need = 8 + 8 * slots.len();
    if table.len() < need {
        return Err(OffsetsError::Truncated {
            got: table.len(),
            need,
        });
    }
    let values: HashMap<&str, u64> = slots
        .iter()
        .enumerate()
        .map(|(k, name)| {
            let at = 8 * (k + 1);
            (
                *name,
                u64::from_le_bytes(table[at..at + 8].try_into().expect("8 bytes")),
            )
        })
        .collect();
    let get = |name: &str| {
        values
            .get(name)
            .copied()
            .expect("slot list names every field read")
    };
    let opt = |name: &str| values.get(name).copied();
    // Slots that exist in the layout but hold 0 in this build (free-threaded-only fields).
    let nonzero = |name: &str| opt(name).filter(|&v| v != 0);

    let free_threaded = get("free_threaded") != 0;
    let minor = version.minor;
    let pyobject = PyObjectOffsets {
        size: get("pyobject.size"),
        ob_type: get("pyobject.ob_type"),
    };
    let ascii = get("unicode_object.asciiobject_size");
    // 3.13/3.14 do not export the non-ASCII header size: it is the ASCII header plus
    // `utf8_length` and `utf8` (two words).
    // (Saturating: a garbage size must reach `validate` and fail there, not overflow here.)
    let compact =
        opt("unicode_object.compactunicodeobject_size").unwrap_or(ascii.saturating_add(16));
    // 3.14t/3.15t widened `interned` to a whole byte, shifting the other state bits.
    let state_bits = if free_threaded && minor >= 14 {
        UnicodeStateBits {
            kind_shift: 8,
            compact_bit: 11,
            ascii_bit: 12,
        }
    } else {
        UnicodeStateBits {
            kind_shift: 2,
            compact_bit: 5,
            ascii_bit: 6,
        }
    };
    let gil = if free_threaded {
        GilLocation::Disabled {
            thread_state: thread_state_state(minor, get("thread_state.status")),
        }
    } else if let Some(holds_gil) = opt("thread_state.holds_gil") {
        GilLocation::ThreadFlag {
            holds_gil,
            locked: get("interpreter_state.gil_runtime_state_locked"),
        }
    } else {
        GilLocation::Interpreter {
            locked: get("interpreter_state.gil_runtime_state_locked"),
            holder: get("interpreter_state.gil_runtime_state_holder"),
        }
    };
    let offsets = Offsets {
        version,
        free_threaded,
        runtime_state: RuntimeStateOffsets {
            size: get("runtime_state.size"),
            interpreters_head: get("runtime_state.interpreters_head"),
        },
        interpreter_state: InterpreterStateOffsets {
            size: get("interpreter_state.size"),
            id: get("interpreter_state.id"),
            next: get("interpreter_state.next"),
            threads_head: get("interpreter_state.threads_head"),
            gc: get("interpreter_state.gc"),
            code_object_generation: opt("interpreter_state.code_object_generation"),
        },
        thread_state: ThreadStateOffsets {
            size: get("thread_state.size"),
            next: get("thread_state.next"),
            interp: get("thread_state.interp"),
            current_frame: get("thread_state.current_frame"),
            cframe_current_frame: None,
            thread_id: get("thread_state.thread_id"),
            native_thread_id: get("thread_state.native_thread_id"),
            base_frame: opt("thread_state.base_frame"),
            last_profiled_frame: opt("thread_state.last_profiled_frame"),
            last_profiled_frame_seq: opt("thread_state.last_profiled_frame_seq"),
        },
        interpreter_frame: InterpreterFrameOffsets {
            size: get("interpreter_frame.size"),
            previous: get("interpreter_frame.previous"),
            executable: get("interpreter_frame.executable"),
            instr_ptr: get("interpreter_frame.instr_ptr"),
            owner: get("interpreter_frame.owner"),
            tlbc_index: nonzero("interpreter_frame.tlbc_index"),
        },
        code_object: CodeObjectOffsets {
            size: get("code_object.size"),
            ob_size: pyobject.size,
            filename: get("code_object.filename"),
            name: get("code_object.name"),
            qualname: get("code_object.qualname"),
            linetable: get("code_object.linetable"),
            firstlineno: get("code_object.firstlineno"),
            co_code_adaptive: get("code_object.co_code_adaptive"),
            co_tlbc: nonzero("code_object.co_tlbc"),
        },
        pyobject,
        bytes_object: BytesObjectOffsets {
            ob_size: get("bytes_object.ob_size"),
            ob_sval: get("bytes_object.ob_sval"),
        },
        unicode_object: UnicodeObjectOffsets {
            state: get("unicode_object.state"),
            length: get("unicode_object.length"),
            asciiobject_size: ascii,
            compactunicodeobject_size: compact,
            state_bits,
        },
        gc: GcOffsets {
            collecting: get("gc.collecting"),
            frame: opt("gc.frame"),
        },
        gil,
        frame: FrameModel {
            ip_is_prev_instr: false,
            // 3.14+ stores `f_executable` as a `_PyStackRef` with two tag bits (3.14t uses
            // only bit 0, and clearing both is still right: code objects are 8-aligned).
            executable_tag_mask: if minor >= 14 { 3 } else { 0 },
            entry_owner: Some(3),
            generator_owner: 1,
            is_entry: None,
        },
        thread_names: Some(thread_names(&get, &opt, free_threaded, pyobject.size)),
    };
    offsets.validate()?;
    Ok(offsets)
}

/// The thread-name layout from the table. What the table lacks is derived from what it has,
/// each rule checked on 3.13.0, 3.13.15, 3.13.15t, 3.14.10 and 3.15.2 (offsetof() against the
/// 3.13 headers; ctypes reading the running 3.14 and 3.15 interpreters' own objects):
/// - `tp_basicsize` (a slot from 3.15) follows `tp_name` in `PyTypeObject`;
/// - `ht_cached_keys` (a slot from 3.15) is 464 bytes past the end of `PyTypeObject` in every
///   version from 3.11 on: the five slot tables (`as_async` … `as_buffer`), then `ht_name`,
///   `ht_slots`, `ht_qualname` (880 = 416 + 464 in 3.13 and 3.14; 896 in 3.13t; 888 = 424 + 464
///   in 3.15, as its slot says);
/// - `PyModuleObject.md_dict` comes right after the object header;
/// - the managed dict pointer is 3 words before the object, 1 in free-threaded builds, which
///   put no `PyGC_Head` there (`MANAGED_DICT_OFFSET`, 3.13t `pycore_object.h`; 3.14t and 3.15t
///   inferred, not run).
fn thread_names(
    get: &impl Fn(&str) -> u64,
    opt: &impl Fn(&str) -> Option<u64>,
    free_threaded: bool,
    header: u64,
) -> ThreadNameOffsets {
    // Saturating: a garbage table must reach `validate` and fail there, not overflow here.
    ThreadNameOffsets {
        imports_modules: get("interpreter_state.imports_modules"),
        md_dict: header,
        dict_object: DictObjectOffsets {
            ma_keys: get("dict_object.ma_keys"),
            ma_values: get("dict_object.ma_values"),
        },
        dict_keys: DICT_KEYS,
        dict_values: 8,
        tp_flags: get("type_object.tp_flags"),
        tp_basicsize: opt("type_object.tp_basicsize")
            .unwrap_or_else(|| get("type_object.tp_name").saturating_add(8)),
        ht_cached_keys: opt("heap_type_object.ht_cached_keys")
            .unwrap_or_else(|| get("type_object.size").saturating_add(464)),
        long_object: LongObjectOffsets {
            lv_tag: get("long_object.lv_tag"),
            ob_digit: get("long_object.ob_digit"),
            format: LongFormat::LvTag,
        },
        managed_dict: ManagedDict::InlineValues {
            dict_before: if free_threaded { 8 } else { 24 },
            capacity: 0,
            valid: 3,
        },
    }
}

/// Offset of `PyThreadState.state`, which the debug table does not export, from `_status`,
/// which it does: `_status` (a 4-byte bit field), then 3.14 `holds_gil`, 3.15 also
/// `gil_requested`, then `_whence`, then `state` (CPython `Include/cpython/pystate.h`).
/// Saturating: a garbage `_status` becomes an offset that validation refuses, not an overflow.
fn thread_state_state(minor: u8, status: u64) -> u64 {
    match minor {
        ..=13 => status.saturating_add(8),
        14 => status.saturating_add(12),
        _ => status.saturating_add(16),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fuzz crash: a free-threaded table whose `_status` offset is near `u64::MAX`.
    #[test]
    fn huge_thread_status_offset_does_not_overflow() {
        assert_eq!(thread_state_state(13, u64::MAX - 3), u64::MAX);
        assert_eq!(thread_state_state(15, 100), 116);
    }

    /// Builds a table for `slots` with `values` (name → value), zero elsewhere.
    fn table(version_hex: u64, slots: &[&str], values: &[(&str, u64)]) -> Vec<u8> {
        let mut out = DEBUG_OFFSETS_COOKIE.to_vec();
        for name in slots {
            let v = if *name == "version" {
                version_hex
            } else {
                values
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| *v)
                    .unwrap_or(0)
            };
            out.extend_from_slice(&v.to_le_bytes());
        }
        out
    }

    #[test]
    fn table_lengths_match_cpython() {
        assert_eq!(8 + 8 * SLOTS_3_13.len(), 584);
        assert_eq!(8 + 8 * SLOTS_3_14.len(), 760);
        assert_eq!(8 + 8 * SLOTS_3_15.len(), 888);
    }

    #[test]
    fn parses_fixture_tables() {
        for (name, minor) in [("3.13.0", 13), ("3.14", 14), ("3.15", 15)] {
            let path = format!(
                "{}/../tests/data/debug_offsets_{name}.bin",
                env!("CARGO_MANIFEST_DIR")
            );
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            let o = parse_debug_offsets(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(o.version.minor, minor);
        }
    }

    #[test]
    fn rejects_garbage() {
        assert!(matches!(
            parse_debug_offsets(b"notacookie012345"),
            Err(OffsetsError::NoCookie)
        ));
        let t = table(0x030f02f0, SLOTS_3_15, &[]);
        assert!(matches!(
            parse_debug_offsets(&t[..100]),
            Err(OffsetsError::Truncated { .. })
        ));
        // all-zero sizes are implausible
        assert!(matches!(
            parse_debug_offsets(&t),
            Err(OffsetsError::Implausible { .. })
        ));
        let beta = table(0x030f00b1, SLOTS_3_15, &[]);
        assert!(matches!(
            parse_debug_offsets(&beta),
            Err(OffsetsError::PreRelease(_))
        ));
        let old = table(0x030a00f0, SLOTS_3_15, &[]);
        assert!(matches!(
            parse_debug_offsets(&old),
            Err(OffsetsError::Unsupported(_))
        ));
    }

    /// Fuzz crash: a 3.13 table whose ASCII header size is near `u64::MAX` overflowed while
    /// deriving the non-ASCII header size, before validation could reject it.
    #[test]
    fn huge_ascii_header_size_is_an_error() {
        let t = table(
            0x030d00f0,
            SLOTS_3_13,
            &[("unicode_object.asciiobject_size", u64::MAX - 1)],
        );
        assert!(matches!(
            parse_debug_offsets(&t),
            Err(OffsetsError::Implausible { .. })
        ));
    }

    /// 3.15.2 default build values (Debian binary), the subset the unwinder reads.
    const VALUES_3_15: &[(&str, u64)] = &[
        ("runtime_state.size", 346568),
        ("runtime_state.interpreters_head", 936),
        ("interpreter_state.size", 226240),
        ("interpreter_state.id", 7272),
        ("interpreter_state.next", 7264),
        ("interpreter_state.threads_head", 7336),
        ("interpreter_state.gc", 7400),
        ("interpreter_state.code_object_generation", 7944),
        ("thread_state.size", 888),
        ("thread_state.next", 8),
        ("thread_state.interp", 16),
        ("thread_state.current_frame", 72),
        ("thread_state.base_frame", 80),
        ("thread_state.last_profiled_frame", 88),
        ("thread_state.last_profiled_frame_seq", 96),
        ("thread_state.thread_id", 176),
        ("thread_state.native_thread_id", 184),
        ("thread_state.holds_gil", 36),
        ("interpreter_frame.size", 88),
        ("interpreter_frame.previous", 8),
        ("interpreter_frame.instr_ptr", 56),
        ("interpreter_frame.owner", 74),
        ("code_object.size", 216),
        ("code_object.filename", 112),
        ("code_object.name", 120),
        ("code_object.qualname", 128),
        ("code_object.linetable", 136),
        ("code_object.firstlineno", 68),
        ("code_object.co_code_adaptive", 208),
        ("pyobject.size", 16),
        ("pyobject.ob_type", 8),
        ("bytes_object.ob_size", 16),
        ("bytes_object.ob_sval", 32),
        ("unicode_object.state", 32),
        ("unicode_object.length", 16),
        ("unicode_object.asciiobject_size", 40),
        ("unicode_object.compactunicodeobject_size", 56),
        ("gc.collecting", 112),
        ("gc.frame", 120),
        ("interpreter_state.imports_modules", 7592),
        ("dict_object.ma_keys", 32),
        ("dict_object.ma_values", 40),
        ("type_object.size", 424),
        ("type_object.tp_name", 24),
        ("type_object.tp_flags", 168),
        ("type_object.tp_basicsize", 32),
        ("heap_type_object.ht_cached_keys", 888),
        ("long_object.lv_tag", 16),
        ("long_object.ob_digit", 24),
    ];

    #[test]
    fn parses_3_15_values() {
        let o = parse_debug_offsets(&table(0x030f02f0, SLOTS_3_15, VALUES_3_15)).expect("valid");
        assert_eq!(o.version, PythonVersion::new(3, 15, 2));
        assert!(o.has_frame_cache_anchor());
        assert_eq!(o.thread_state.last_profiled_frame, Some(88));
        assert_eq!(o.frame.executable_tag_mask, 3);
        assert!(matches!(
            o.gil,
            GilLocation::ThreadFlag { holds_gil: 36, .. }
        ));
        assert_eq!(o.interpreter_frame.tlbc_index, None);
        assert_eq!(o.gc.frame, Some(120));
        assert_eq!(o.frame_read_len(), 75);
        let n = o.thread_names.expect("thread names");
        assert_eq!(n.imports_modules, 7592);
        assert_eq!((n.tp_basicsize, n.ht_cached_keys), (32, 888));
    }

    /// 3.13 and 3.14 tables have no `tp_basicsize` and `ht_cached_keys` slots: both come from
    /// the `PyTypeObject` layout (3.14.10: 32 and 880, read in the running interpreter).
    #[test]
    fn derives_what_older_tables_lack() {
        let vals: Vec<(&str, u64)> = VALUES_3_15
            .iter()
            .map(|&(k, v)| (k, if k == "type_object.size" { 416 } else { v }))
            .collect();
        let o = parse_debug_offsets(&table(0x030e0af0, SLOTS_3_14, &vals)).expect("valid");
        let n = o.thread_names.expect("thread names");
        assert_eq!((n.tp_basicsize, n.ht_cached_keys), (32, 880));
        assert_eq!(
            n.managed_dict,
            ManagedDict::InlineValues {
                dict_before: 24,
                capacity: 0,
                valid: 3
            }
        );
        // Free-threaded builds put no `PyGC_Head` before objects (3.13t).
        let mut ft = vals.clone();
        ft.push(("free_threaded", 1));
        let o = parse_debug_offsets(&table(0x030d0ff0, SLOTS_3_13, &ft)).expect("valid");
        assert!(matches!(
            o.thread_names.expect("thread names").managed_dict,
            ManagedDict::InlineValues { dict_before: 8, .. }
        ));
    }

    /// A garbage `type_object.size` must fail validation, not overflow the derivation.
    #[test]
    fn huge_type_size_is_an_error() {
        let vals: Vec<(&str, u64)> = VALUES_3_15
            .iter()
            .map(|&(k, v)| {
                (
                    k,
                    if k == "type_object.size" {
                        u64::MAX - 3
                    } else {
                        v
                    },
                )
            })
            .collect();
        assert!(matches!(
            parse_debug_offsets(&table(0x030e0af0, SLOTS_3_14, &vals)),
            Err(OffsetsError::Implausible { .. })
        ));
    }
}
