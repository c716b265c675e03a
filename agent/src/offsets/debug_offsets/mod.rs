//! Parses CPython's `_Py_DebugOffsets` (3.13+), the table at the start of `_PyRuntime`.
//!
//! The table has no size field: its layout is implied by the minor version in its second slot.
//! So the slot order of each minor is kept as data (`slots`); a new minor costs one list of what it
//! added. This module reads a table in that order into [`Offsets`], deriving what it lacks.

mod slots;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use self::slots::slots_for;
use super::{
    BytecodeLayout, BytesObjectOffsets, CodeObjectOffsets, CoroutineOffsets, DictObjectOffsets,
    FrameModel, GcBase, GcOffsets, GilLocation, InstrPointer, InterpreterFrameOffsets,
    InterpreterStateOffsets, LineTableFormat, LongFormat, LongObjectOffsets, ManagedDict,
    NativeThreadId, Offsets, OffsetsError, PyObjectOffsets, PythonVersion, RuntimeStateOffsets,
    ThreadNameOffsets, ThreadStateOffsets, UnicodeObjectOffsets, UnicodeStateBits, DICT_KEYS,
};

/// The 8 bytes that open `_Py_DebugOffsets`.
pub const DEBUG_OFFSETS_COOKIE: &[u8; 8] = b"xdebugpy";

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
            holder: get("interpreter_state.gil_runtime_state_holder"),
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
            sysdict: None,
        },
        thread_state: ThreadStateOffsets {
            size: get("thread_state.size"),
            next: get("thread_state.next"),
            interp: get("thread_state.interp"),
            current_frame: get("thread_state.current_frame"),
            cframe_current_frame: None,
            thread_id: get("thread_state.thread_id"),
            native_thread_id: NativeThreadId::Field(get("thread_state.native_thread_id")),
            base_frame: opt("thread_state.base_frame"),
            last_profiled_frame: opt("thread_state.last_profiled_frame"),
            last_profiled_frame_seq: opt("thread_state.last_profiled_frame_seq"),
        },
        interpreter_frame: InterpreterFrameOffsets {
            size: get("interpreter_frame.size"),
            previous: get("interpreter_frame.previous"),
            executable: get("interpreter_frame.executable"),
            instr_ptr: get("interpreter_frame.instr_ptr"),
            owner: Some(get("interpreter_frame.owner")),
            tlbc_index: nonzero("interpreter_frame.tlbc_index"),
        },
        code_object: CodeObjectOffsets {
            size: get("code_object.size"),
            bytecode: BytecodeLayout::Inline {
                ob_size: pyobject.size,
                co_code_adaptive: get("code_object.co_code_adaptive"),
            },
            filename: get("code_object.filename"),
            name: get("code_object.name"),
            qualname: get("code_object.qualname"),
            linetable: get("code_object.linetable"),
            firstlineno: get("code_object.firstlineno"),
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
            base: GcBase::Interpreter,
            collecting: get("gc.collecting"),
            frame: opt("gc.frame"),
        },
        gil,
        frame: FrameModel {
            heap_frames: false,
            ip: InstrPointer::Address,
            line_table: LineTableFormat::Locations,
            ip_is_prev_instr: false,
            // 3.14+ stores `f_executable` as a `_PyStackRef` with two tag bits (3.14t uses
            // only bit 0, and clearing both is still right: code objects are 8-aligned).
            executable_tag_mask: if minor >= 14 { 3 } else { 0 },
            entry_owner: Some(3),
            generator_owner: 1,
            is_entry: None,
        },
        thread_names: Some(thread_names(&get, &opt, free_threaded, pyobject.size)),
        coroutines: CoroutineOffsets::from_slots(version, &opt),
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
