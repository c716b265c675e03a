//! What reading a Python thread's name (`threading._active[ident]._name`) needs beyond a stack walk:
//! the layouts of dicts, ints, type flags and instance attributes, which change between versions.

/// `PyDictObject` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DictObjectOffsets {
    /// `PyDictKeysObject*`
    pub ma_keys: u64,
    /// `PyDictValues*` of a split dict (NULL for a combined one)
    pub ma_values: u64,
}

/// How a `PyDictKeysObject` says how big its tables are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DictKeysHeader {
    /// 3.11+: u8 `dk_log2_size` (the hash table has `1 << dk_log2_size` slots), u8
    /// `dk_log2_index_bytes` (the index table takes `1 << dk_log2_index_bytes` bytes) and u8
    /// `dk_kind` ([`DICT_KEYS_GENERAL`], [`DICT_KEYS_UNICODE`] or [`DICT_KEYS_SPLIT`]).
    Log2 {
        /// offset of `dk_log2_size`
        log2_size: u64,
        /// offset of `dk_log2_index_bytes`
        log2_index_bytes: u64,
        /// offset of `dk_kind`
        kind: u64,
    },
    /// 3.6–3.10: Py_ssize_t `dk_size`, the number of slots; each index is 1, 2, 4 or 8 bytes
    /// as the size needs, and every entry is a `PyDictKeyEntry` {hash, key, value}.
    Slots {
        /// offset of `dk_size`
        size: u64,
    },
}

/// `PyDictKeysObject` fields (3.11+: `Include/internal/pycore_dict.h`; 3.6–3.10:
/// `Objects/dict-common.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DictKeysOffsets {
    /// how the table sizes are given
    pub header: DictKeysHeader,
    /// Py_ssize_t `dk_nentries`: entries used so far (deleted ones included, their key NULL)
    pub nentries: u64,
    /// `dk_indices`: the index table, followed by the entries
    pub indices: u64,
    /// sizeof(PyDictKeyEntry) {hash, key, value}: entries of a general dict
    pub general_entry_size: u64,
    /// sizeof(PyDictUnicodeEntry) {key, value}: entries of a str-keyed or split dict (3.11+)
    pub unicode_entry_size: u64,
}

/// `dk_kind` of a dict with keys of any type: entries are `PyDictKeyEntry`.
pub const DICT_KEYS_GENERAL: u8 = 0;
/// `dk_kind` of a dict with only str keys: entries are `PyDictUnicodeEntry`.
pub const DICT_KEYS_UNICODE: u8 = 1;
/// `dk_kind` of keys shared by instances (values live apart, `PyDictValues`).
pub const DICT_KEYS_SPLIT: u8 = 2;

/// The `PyDictKeysObject` layout of 3.11 to 3.15 and of 3.13t, where `dk_mutex` takes the
/// byte after `dk_kind` (offsetof() against the 3.11.7, 3.12.1, 3.13.0, 3.13.15 and 3.13.15t
/// headers; dicts of the 3.14.10 and 3.15.2 interpreters read with these numbers).
pub const DICT_KEYS: DictKeysOffsets = DictKeysOffsets {
    header: DictKeysHeader::Log2 {
        log2_size: 8,
        log2_index_bytes: 9,
        kind: 10,
    },
    nentries: 24,
    indices: 32,
    general_entry_size: 24,
    unicode_entry_size: 16,
};

/// The `PyDictKeysObject` layout of 3.6 to 3.10 (`Objects/dict-common.h`, the same in each):
/// `dk_refcnt`, `dk_size`, `dk_lookup`, `dk_usable`, `dk_nentries`, then `dk_indices`.
pub const DICT_KEYS_SLOTS: DictKeysOffsets = DictKeysOffsets {
    header: DictKeysHeader::Slots { size: 8 },
    nentries: 32,
    indices: 40,
    general_entry_size: 24,
    unicode_entry_size: 24,
};

/// How an int's size and sign are stored (`PyLongObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongFormat {
    /// 3.11: `ob_size` is the digit count, negative for a negative number.
    SignedSize,
    /// 3.12+: `lv_tag` = digit count << 3 | sign (0 positive, 1 zero, 2 negative).
    LvTag,
}

/// `PyLongObject` fields: 30-bit digits in u32s, least significant first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongObjectOffsets {
    /// `lv_tag` (3.12+) or `ob_size` (3.11)
    pub lv_tag: u64,
    /// `ob_digit[0]`
    pub ob_digit: u64,
    /// what `lv_tag` holds
    pub format: LongFormat,
}

/// `Py_TPFLAGS_MANAGED_DICT`: the instance dict (or its values) lives at a fixed place outside
/// the object rather than at `tp_dictoffset` (3.11+, `Include/object.h`).
pub const TPFLAGS_MANAGED_DICT: u64 = 1 << 4;
/// `Py_TPFLAGS_INLINE_VALUES`: the attribute values follow the object (3.13+).
pub const TPFLAGS_INLINE_VALUES: u64 = 1 << 2;

/// Where the attributes of an instance of a `Py_TPFLAGS_MANAGED_DICT` type are: the
/// version-specific part of reading `Thread._name`. "Values" are a `PyDictValues`, whose
/// `values[i]` is the value of entry `i` of the type's shared keys (`ht_cached_keys`); a
/// "dict" is a `PyDictObject*` (NULL until someone asks for `__dict__`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManagedDict {
    /// 3.11: `PyDictValues*` at `values_before` bytes before the object (`_PyObject_ValuesPointer`:
    /// `((PyDictValues **)obj) - 4`), the dict at `dict_before` (`_PyObject_ManagedDictPointer`:
    /// `- 3`); the values pointer is NULL once the dict exists.
    ValuesOrDict {
        /// bytes between the values pointer and the object
        values_before: u64,
        /// bytes between the dict pointer and the object
        dict_before: u64,
    },
    /// 3.12: one `PyDictOrValues` word `before` bytes before the object: with its low bit set
    /// it is the `PyDictValues*` minus 1 (`_PyDictOrValues_GetValues` returns `values + 1`,
    /// `Include/internal/pycore_object.h`), else the dict.
    TaggedDictOrValues {
        /// bytes between the word and the object
        before: u64,
    },
    /// 3.6–3.10: the dict pointer at the type's `tp_dictoffset` bytes into the object (a
    /// class of plain instances has a positive one; 0: no dict), no managed-dict flag.
    AtDictOffset {
        /// offset of `tp_dictoffset` in `PyTypeObject`
        tp_dictoffset: u64,
    },
    /// 3.13+: with `Py_TPFLAGS_INLINE_VALUES` the `PyDictValues` follows the object, at
    /// `tp_basicsize`: u8 `capacity`, `size`, `embedded`, `valid`, padding, then `values[]`. Once
    /// `valid` is 0 (the values moved to a dict) or without the flag, the dict pointer at
    /// `dict_before` bytes before the object (`MANAGED_DICT_OFFSET`) holds the attributes.
    InlineValues {
        /// bytes between the dict pointer and the object: 24, or 8 in free-threaded builds
        /// (no `PyGC_Head` before objects)
        dict_before: u64,
        /// u8 `capacity` in `PyDictValues`: the number of `values` slots
        capacity: u64,
        /// u8 `valid` in `PyDictValues`
        valid: u64,
    },
}

/// What reading Python thread names (`threading._active[ident]._name`) needs: `sys.modules`,
/// module dicts, dicts, ints and instance attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadNameOffsets {
    /// `PyInterpreterState.imports.modules` (3.11: `.modules`): the `sys.modules` dict
    pub imports_modules: u64,
    /// `PyModuleObject.md_dict`: right after the object header
    pub md_dict: u64,
    /// `PyDictObject`
    pub dict_object: DictObjectOffsets,
    /// `PyDictKeysObject`
    pub dict_keys: DictKeysOffsets,
    /// offset of `values[]` in `PyDictValues`: 0 (3.11, 3.12), 8 (3.13+: a header comes first)
    pub dict_values: u64,
    /// `PyTypeObject.tp_flags` (unsigned long)
    pub tp_flags: u64,
    /// `PyTypeObject.tp_basicsize` (where inline values start, 3.13+)
    pub tp_basicsize: u64,
    /// `PyHeapTypeObject.ht_cached_keys`: the keys its instances share
    pub ht_cached_keys: u64,
    /// `PyLongObject`
    pub long_object: LongObjectOffsets,
    /// where instance attributes are
    pub managed_dict: ManagedDict,
}
