//! Debug-offsets parsing: table lengths, fixtures, garbage, and the values derived from older tables.

use super::slots::{SLOTS_3_13, SLOTS_3_14, SLOTS_3_15};
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
