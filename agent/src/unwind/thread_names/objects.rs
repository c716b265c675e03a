//! Decoding CPython objects in the target's memory, for the thread names: dicts (combined and
//! split keys tables, as of 3.11 to 3.15) and finding their str keys, non-negative ints of up to
//! 64 bits, strs, and the attributes of plain-class instances (in shared-keys values, inline
//! values or a `__dict__`), by the layouts of [`ThreadNameOffsets`].
//!
//! Every read is untrusted: the target changes under the reader and may hold anything (freed
//! objects, torn writes, user code's surprises). Sizes, counts and indices are checked against
//! bounds and against each other, address arithmetic is checked, and what does not fit is an
//! [`ObjectError`], never a panic or an unbounded read.

// foldhash: caches keyed by addresses, looked up for every object read.
use foldhash::{HashMap, HashMapExt};

use crate::memory::{MemoryError, ProcessMemory, StructBytes};
use crate::offsets::{
    DictKeysHeader, LongFormat, LongObjectOffsets, ManagedDict, Offsets, ThreadNameOffsets,
    DICT_KEYS_GENERAL, DICT_KEYS_SPLIT, TPFLAGS_INLINE_VALUES, TPFLAGS_MANAGED_DICT,
};
use crate::symbolize::{read_str, ObjectError};

/// Largest dict read: `1 << MAX_DICT_LOG2` slots (`sys.modules` of a large application is
/// about 2^12).
const MAX_DICT_LOG2: u8 = 16;
/// Bytes of a `PyDictValues` header read for its `capacity` and `valid` bytes (3.13+).
const VALUES_HEADER: usize = 8;

/// What the last search of a keys object for a key found: (keys object, key) → [`KeyHint`].
/// Finding a key in a big dict (`sys.modules`) means reading every key; the next read checks
/// the remembered entry first, or skips the search where nothing was added since it failed.
pub(super) type KeyHints = HashMap<(u64, &'static str), KeyHint>;

/// What a search of one keys object for one key found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyHint {
    /// the key object at entry `index`
    At {
        /// entry index
        index: u64,
        /// the key object found there
        key: u64,
    },
    /// not there among its first `nentries` entries: a program that never imports
    /// `threading` would otherwise have all of `sys.modules` read every second, and entries
    /// are only ever appended (an insertion makes `dk_nentries` grow)
    Absent {
        /// `dk_nentries` when it was searched
        nentries: u64,
    },
}

/// A dict's entries, located: enough to read entry `i`'s key and value.
#[derive(Debug, Clone, Copy)]
pub(super) struct Table {
    /// `PyDictKeysObject*`
    keys: u64,
    /// entries used (`dk_nentries`)
    nentries: u64,
    /// address of entry 0
    entries: u64,
    /// a general dict's entries carry the hash first
    general: bool,
    /// split tables: `values[]` and how many of its slots may be read
    values: Option<(u64, u64)>,
}

/// Reads the objects of one process for one read of the names: what it learns on the way (the
/// str type, the types' layouts) lasts as long as it does; the key hints, which the caller
/// keeps, last across reads.
pub(super) struct Reader<'a, M> {
    mem: &'a mut M,
    o: &'a Offsets,
    n: &'a ThreadNameOffsets,
    hints: &'a mut KeyHints,
    /// `ob_type` of a key found by name: `str`, which a name must be
    str_type: Option<u64>,
    /// (type, attribute) → what its instances need, for this read
    types: HashMap<(u64, &'static str), TypeInfo>,
}

impl<'a, M: ProcessMemory> Reader<'a, M> {
    /// A reader of `mem` by the layouts `o` and `n` (`o.thread_names`), remembering where it
    /// found keys in `hints`.
    pub(super) fn new(
        mem: &'a mut M,
        o: &'a Offsets,
        n: &'a ThreadNameOffsets,
        hints: &'a mut KeyHints,
    ) -> Self {
        Reader {
            mem,
            o,
            n,
            hints,
            str_type: None,
            types: HashMap::new(),
        }
    }

    /// Fills `buf` from `addr`: a struct that is not an object (a thread state).
    pub(super) fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), ObjectError> {
        Ok(self.mem.read(addr, buf)?)
    }

    /// The u64 at `addr + off`; an address past the end of the address space is malformed.
    pub(super) fn u64_at(&mut self, addr: u64, off: u64) -> Result<u64, ObjectError> {
        Ok(self.mem.read_u64(offset(addr, off)?)?)
    }

    /// The first `max_chars` characters of the str at `obj`; `None` if it is not a str (its
    /// type is not that of the keys found by name, so a lookup by name must come first).
    pub(super) fn str_prefix(
        &mut self,
        obj: u64,
        max_chars: usize,
    ) -> Result<Option<String>, ObjectError> {
        let ty = self.u64_at(obj, self.o.pyobject.ob_type)?;
        if Some(ty) != self.str_type {
            return Ok(None);
        }
        Ok(Some(
            read_str(self.mem, self.o, obj)?
                .chars()
                .take(max_chars)
                .collect(),
        ))
    }

    /// `dict[name]` of a str-keyed lookup, if present.
    pub(super) fn dict_get(
        &mut self,
        dict: u64,
        name: &'static str,
    ) -> Result<Option<u64>, ObjectError> {
        if dict == 0 {
            return Ok(None);
        }
        let table = self.open_dict(dict)?;
        self.table_get(&table, name)
    }

    /// The value of key `name` in `table`, if present.
    fn table_get(&mut self, table: &Table, name: &'static str) -> Result<Option<u64>, ObjectError> {
        let Some(i) = self.find_str(table, name)? else {
            return Ok(None);
        };
        let value = self.value(table, i)?;
        Ok((value != 0).then_some(value))
    }

    /// Locates a dict's entries (and, for a split dict, its values).
    pub(super) fn open_dict(&mut self, dict: u64) -> Result<Table, ObjectError> {
        let d = &self.n.dict_object;
        let mut buf = [0u8; 64];
        let len = (d.ma_keys.max(d.ma_values) + 8).min(64) as usize;
        let buf = &mut buf[..len];
        self.mem.read(dict, buf)?;
        let mut table = self.read_keys(buf.u64_at(d.ma_keys))?;
        let values = buf.u64_at(d.ma_values);
        if values != 0 {
            table.values = Some(self.values_array(values, table.nentries)?);
        }
        Ok(table)
    }

    /// `values[]` of the `PyDictValues` at `values` and how many of its slots may be read: at
    /// most `nentries`, and in 3.13+ at most its `capacity`.
    fn values_array(&mut self, values: u64, nentries: u64) -> Result<(u64, u64), ObjectError> {
        let mut len = nentries;
        if let ManagedDict::InlineValues { capacity, .. } = self.n.managed_dict {
            let mut h = [0u8; VALUES_HEADER];
            self.mem.read(values, &mut h)?;
            len = len.min(u64::from(h.u8_at(capacity)));
        }
        Ok((offset(values, self.n.dict_values)?, len))
    }

    /// Reads and checks a `PyDictKeysObject` header.
    fn read_keys(&mut self, keys: u64) -> Result<Table, ObjectError> {
        let k = &self.n.dict_keys;
        let malformed = ObjectError::Malformed { addr: keys };
        let mut buf = [0u8; 64];
        let header_end = match k.header {
            DictKeysHeader::Log2 { kind, .. } => kind + 1,
            DictKeysHeader::Slots { size } => size + 8,
        };
        let len = (k.nentries + 8).max(header_end).min(64) as usize;
        let buf = &mut buf[..len];
        self.mem.read(keys, buf)?;
        let nentries = buf.u64_at(k.nentries);
        let (slots, index_bytes, general) = match k.header {
            DictKeysHeader::Log2 {
                log2_size,
                log2_index_bytes,
                kind,
            } => {
                let log2_size = buf.u8_at(log2_size);
                let log2_index_bytes = buf.u8_at(log2_index_bytes);
                let kind = buf.u8_at(kind);
                if log2_size > MAX_DICT_LOG2 || kind > DICT_KEYS_SPLIT {
                    return Err(malformed);
                }
                // 1-byte indices up to 128 slots, 2 bytes up to 2^15, then 4
                // (`dk_log2_index_bytes`, `Objects/dictobject.c` `new_keys_object`).
                let index_width_log2 = match log2_size {
                    0..8 => 0,
                    8..16 => 1,
                    _ => 2,
                };
                if log2_index_bytes != log2_size + index_width_log2 {
                    return Err(malformed);
                }
                (
                    1u64 << log2_size,
                    1u64 << log2_index_bytes,
                    kind == DICT_KEYS_GENERAL,
                )
            }
            DictKeysHeader::Slots { size } => {
                let slots = buf.u64_at(size);
                if !slots.is_power_of_two() || slots > 1 << MAX_DICT_LOG2 {
                    return Err(malformed);
                }
                // `DK_IXSIZE`: 1 byte per index up to 0xff slots, 2 up to 0xffff, then 4.
                let width = match slots {
                    0..=0xff => 1,
                    0x100..=0xffff => 2,
                    _ => 4,
                };
                (slots, slots * width, true)
            }
        };
        if nentries > slots {
            return Err(malformed);
        }
        let entries = offset(keys, k.indices)?;
        let entries = offset(entries, index_bytes)?;
        Ok(Table {
            keys,
            nentries,
            entries,
            general,
            values: None,
        })
    }

    fn entry_size(&self, table: &Table) -> u64 {
        if table.general {
            self.n.dict_keys.general_entry_size
        } else {
            self.n.dict_keys.unicode_entry_size
        }
    }

    /// Where `me_key` is in an entry (after `me_hash` in a general one).
    fn key_offset(table: &Table) -> u64 {
        if table.general {
            8
        } else {
            0
        }
    }

    /// The key of entry `i` (NULL for a deleted one).
    fn key(&mut self, table: &Table, i: u64) -> Result<u64, ObjectError> {
        let at = offset(table.entries, i * self.entry_size(table))?;
        self.u64_at(at, Self::key_offset(table))
    }

    /// The value of entry `i`: in the entry, or in the split values.
    fn value(&mut self, table: &Table, i: u64) -> Result<u64, ObjectError> {
        match table.values {
            Some((_, len)) if i >= len => Ok(0),
            Some((values, _)) => self.u64_at(values, 8 * i),
            None => {
                let at = offset(table.entries, i * self.entry_size(table))?;
                self.u64_at(at, Self::key_offset(table) + 8)
            }
        }
    }

    /// Every (key, value) with both set of the first `max` entries of a combined dict, from one
    /// read of its entries.
    pub(super) fn entries(
        &mut self,
        table: &Table,
        max: u64,
    ) -> Result<Vec<(u64, u64)>, ObjectError> {
        if table.values.is_some() {
            // Only instance dicts are split, and those are read by attribute, never whole
            // (`_active` is not one).
            return Err(ObjectError::Malformed { addr: table.keys });
        }
        let size = self.entry_size(table);
        let n = table.nentries.min(max);
        let bytes = self.mem.read_vec(table.entries, (n * size) as usize)?;
        let key_at = Self::key_offset(table);
        Ok(bytes
            .chunks_exact(size as usize)
            .map(|e| (e.u64_at(key_at), e.u64_at(key_at + 8)))
            .filter(|&(k, v)| k != 0 && v != 0)
            .collect())
    }

    /// The index of the entry whose key is the str `name`: the remembered one if it still is,
    /// else found by reading the keys in order.
    fn find_str(&mut self, table: &Table, name: &'static str) -> Result<Option<u64>, ObjectError> {
        match self.hints.get(&(table.keys, name)) {
            Some(&KeyHint::At { index, key }) => {
                if index < table.nentries
                    && self.key(table, index)? == key
                    && self.key_is(key, name)?
                {
                    return Ok(Some(index));
                }
            }
            Some(&KeyHint::Absent { nentries }) if nentries == table.nentries => return Ok(None),
            Some(KeyHint::Absent { .. }) | None => {}
        }
        let size = self.entry_size(table);
        let bytes = self
            .mem
            .read_vec(table.entries, (table.nentries * size) as usize)?;
        let key_at = Self::key_offset(table);
        for (i, e) in bytes.chunks_exact(size as usize).enumerate() {
            let key = e.u64_at(key_at);
            if key != 0 && self.key_is(key, name)? {
                let index = i as u64;
                self.hints
                    .insert((table.keys, name), KeyHint::At { index, key });
                return Ok(Some(index));
            }
        }
        let nentries = table.nentries;
        self.hints
            .insert((table.keys, name), KeyHint::Absent { nentries });
        Ok(None)
    }

    /// Whether the object at `key` is the str `name` (anything unreadable as a str is not).
    fn key_is(&mut self, key: u64, name: &str) -> Result<bool, ObjectError> {
        match read_str(self.mem, self.o, key) {
            Ok(s) if s == name => {
                if self.str_type.is_none() {
                    self.str_type = Some(self.u64_at(key, self.o.pyobject.ob_type)?);
                }
                Ok(true)
            }
            Ok(_) | Err(ObjectError::Malformed { .. }) => Ok(false),
            Err(e @ ObjectError::Memory(MemoryError::Gone { .. } | MemoryError::Denied { .. })) => {
                Err(e)
            }
            // A key object freed under us: not the one looked for.
            Err(ObjectError::Memory(_)) => Ok(false),
        }
    }

    /// The value of an int that fits 64 bits and is not negative (a pthread ident).
    pub(super) fn read_int(&mut self, addr: u64) -> Result<Option<u64>, ObjectError> {
        read_u64_int(self.mem, &self.n.long_object, addr)
    }

    /// What instances of the type at `ty` need for finding their attribute `name`, read once
    /// per read of the names (every `Thread` has one of a few types).
    fn type_info(&mut self, ty: u64, name: &'static str) -> Result<TypeInfo, ObjectError> {
        if let Some(info) = self.types.get(&(ty, name)) {
            return Ok(*info);
        }
        let n = self.n;
        let mut buf = [0u8; 256];
        let len = (n.tp_flags.max(n.tp_basicsize) + 8).min(256) as usize;
        let buf = &mut buf[..len];
        self.mem.read(ty, buf)?;
        let flags = buf.u64_at(n.tp_flags);
        let basicsize = buf.u64_at(n.tp_basicsize);
        if basicsize > 1 << 20 {
            return Err(ObjectError::Malformed { addr: ty });
        }
        let mut info = TypeInfo {
            managed_dict: flags & TPFLAGS_MANAGED_DICT != 0,
            inline_values: flags & TPFLAGS_INLINE_VALUES != 0,
            basicsize,
            dict_at: 0,
            shared: None,
        };
        if let ManagedDict::AtDictOffset { tp_dictoffset } = n.managed_dict {
            // Signed: a negative one counts from the end of a variable-size object, which a
            // `Thread` is not.
            let at = self.u64_at(ty, tp_dictoffset)? as i64;
            if at > 0 && (at as u64) < basicsize.max(1 << 12) {
                info.dict_at = at as u64;
            }
            self.types.insert((ty, name), info);
            return Ok(info);
        }
        if info.managed_dict {
            // The keys its instances' values go with; a type without them has no values.
            let keys = self.u64_at(ty, n.ht_cached_keys)?;
            if keys != 0 {
                let table = self.read_keys(keys)?;
                info.shared = Some((table, self.find_str(&table, name)?));
            }
        }
        self.types.insert((ty, name), info);
        Ok(info)
    }

    /// The attribute `name` of an instance of a `Py_TPFLAGS_MANAGED_DICT` type (a plain class),
    /// from its values or its dict.
    pub(super) fn instance_attr(
        &mut self,
        obj: u64,
        name: &'static str,
    ) -> Result<Option<u64>, ObjectError> {
        let ty = self.u64_at(obj, self.o.pyobject.ob_type)?;
        let info = self.type_info(ty, name)?;
        if let ManagedDict::AtDictOffset { .. } = self.n.managed_dict {
            if info.dict_at == 0 {
                return Ok(None);
            }
            let dict = self.u64_at(obj, info.dict_at)?;
            return if dict == 0 {
                Ok(None)
            } else {
                self.dict_get(dict, name)
            };
        }
        if !info.managed_dict {
            return Ok(None);
        }
        let before = |b: u64| {
            obj.checked_sub(b)
                .ok_or(ObjectError::Malformed { addr: obj })
        };
        // The `PyDictValues` (not yet turned into a dict) and how many values it may hold,
        // else the dict.
        let (values, dict) = match self.n.managed_dict {
            ManagedDict::ValuesOrDict {
                values_before,
                dict_before,
            } => match self.mem.read_u64(before(values_before)?)? {
                0 => (None, self.mem.read_u64(before(dict_before)?)?),
                values => (Some((values, u64::MAX)), 0),
            },
            ManagedDict::AtDictOffset { .. } => return Ok(None),
            ManagedDict::TaggedDictOrValues { before: at } => {
                let word = self.mem.read_u64(before(at)?)?;
                if word & 1 == 1 {
                    (Some((offset(word, 1)?, u64::MAX)), 0)
                } else {
                    (None, word)
                }
            }
            ManagedDict::InlineValues {
                dict_before,
                capacity,
                valid,
            } => {
                let mut inline = None;
                if info.inline_values {
                    let at = offset(obj, info.basicsize)?;
                    let mut h = [0u8; VALUES_HEADER];
                    self.mem.read(at, &mut h)?;
                    inline = (h.u8_at(valid) != 0).then(|| (at, u64::from(h.u8_at(capacity))));
                }
                match inline {
                    Some(values) => (Some(values), 0),
                    None => (None, self.mem.read_u64(before(dict_before)?)?),
                }
            }
        };
        match (values, info.shared) {
            (Some((values, len)), Some((table, index))) => {
                let Some(i) = index else { return Ok(None) };
                if i >= len.min(table.nentries) {
                    return Ok(None);
                }
                let value = self.u64_at(offset(values, self.n.dict_values)?, 8 * i)?;
                Ok((value != 0).then_some(value))
            }
            (Some(_), None) => Ok(None),
            (None, _) if dict != 0 => self.dict_get(dict, name),
            (None, _) => Ok(None),
        }
    }
}

/// What a type says about where its instances' attributes are.
#[derive(Debug, Clone, Copy)]
struct TypeInfo {
    /// `Py_TPFLAGS_MANAGED_DICT`
    managed_dict: bool,
    /// `Py_TPFLAGS_INLINE_VALUES` (3.13+)
    inline_values: bool,
    /// `tp_basicsize`: where inline values start
    basicsize: u64,
    /// 3.6–3.10: `tp_dictoffset`, where the instance dict pointer is (0: none)
    dict_at: u64,
    /// the shared keys (`ht_cached_keys`) and the index of the attribute in them
    shared: Option<(Table, Option<u64>)>,
}

/// `addr + off`, or malformed if that leaves the address space.
fn offset(addr: u64, off: u64) -> Result<u64, ObjectError> {
    addr.checked_add(off).ok_or(ObjectError::Malformed { addr })
}

/// The value of the int at `addr` if it fits 64 bits and is not negative; `None` otherwise
/// (a thread ident, a task's counter name).
pub(in crate::unwind) fn read_u64_int(
    mem: &mut impl ProcessMemory,
    l: &LongObjectOffsets,
    addr: u64,
) -> Result<Option<u64>, ObjectError> {
    // Three 30-bit digits hold any u64.
    let mut buf = [0u8; 64];
    let len = (l.lv_tag + 8).max(l.ob_digit + 12).min(64) as usize;
    let buf = &mut buf[..len];
    mem.read(addr, buf)?;
    let tag = buf.u64_at(l.lv_tag);
    let (ndigits, negative) = match l.format {
        LongFormat::SignedSize => ((tag as i64).unsigned_abs(), (tag as i64) < 0),
        LongFormat::LvTag => (tag >> 3, tag & 3 == 2),
    };
    if negative || ndigits > 3 {
        return Ok(None);
    }
    let mut value: u64 = 0;
    for i in 0..ndigits {
        let digit = u64::from(buf.u32_at(l.ob_digit + 4 * i));
        if digit >= 1 << 30 {
            return Err(ObjectError::Malformed { addr });
        }
        let Some(part) = digit
            .checked_shl(30 * i as u32)
            .filter(|p| p >> (30 * i) == digit)
        else {
            return Ok(None);
        };
        value |= part;
    }
    Ok(Some(value))
}
