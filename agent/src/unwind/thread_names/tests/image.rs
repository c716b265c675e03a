//! A fake process for the thread-name tests: CPython objects laid out in a [`FakeMemory`] the
//! way each layout (3.11, 3.12, 3.13+) has them, down to a whole runtime with its threads.

use crate::memory::FakeMemory;
use crate::offsets::{
    builtin_offsets, DictKeysHeader, LongFormat, ManagedDict, NativeThreadId, Offsets,
    PythonVersion, ThreadNameOffsets, DICT_KEYS_GENERAL, DICT_KEYS_SPLIT, DICT_KEYS_UNICODE,
    TPFLAGS_INLINE_VALUES, TPFLAGS_MANAGED_DICT,
};

/// Address of the image's first byte.
pub(super) const BASE: u64 = 0x10_0000;
const STR_TYPE: u64 = 0xaaaa_0000;
const INT_TYPE: u64 = 0xbbbb_0000;

/// A fake process memory that objects are laid out in, bump-allocated.
pub(super) struct Image {
    pub(super) mem: FakeMemory,
    top: u64,
    pub(super) o: Offsets,
}

impl Image {
    pub(super) fn new(o: Offsets) -> Image {
        Image {
            mem: FakeMemory {
                base: BASE,
                bytes: vec![0; 1 << 18],
            },
            top: BASE + 64,
            o,
        }
    }

    pub(super) fn n(&self) -> ThreadNameOffsets {
        self.o.thread_names.expect("layout has thread names")
    }

    pub(super) fn alloc(&mut self, len: u64) -> u64 {
        let at = self.top.next_multiple_of(16);
        self.top = at + len;
        at
    }

    pub(super) fn put(&mut self, at: u64, bytes: &[u8]) {
        let o = (at - BASE) as usize;
        self.mem.bytes[o..o + bytes.len()].copy_from_slice(bytes);
    }

    pub(super) fn put_u64(&mut self, at: u64, v: u64) {
        self.put(at, &v.to_le_bytes());
    }

    /// A compact ASCII str.
    fn str(&mut self, s: &str) -> u64 {
        let u = self.o.unicode_object;
        let at = self.alloc(u.asciiobject_size + s.len() as u64 + 1);
        self.put_u64(at + self.o.pyobject.ob_type, STR_TYPE);
        self.put_u64(at + u.length, s.len() as u64);
        let state = (1u32 << u.state_bits.kind_shift)
            | (1 << u.state_bits.compact_bit)
            | (1 << u.state_bits.ascii_bit);
        self.put(at + u.state, &state.to_le_bytes());
        self.put(at + u.asciiobject_size, s.as_bytes());
        at
    }

    /// A non-negative int.
    pub(super) fn int(&mut self, mut v: u64) -> u64 {
        let l = self.n().long_object;
        let at = self.alloc(l.ob_digit + 12);
        self.put_u64(at + self.o.pyobject.ob_type, INT_TYPE);
        let mut digits = 0;
        while v != 0 {
            let d = (v & ((1 << 30) - 1)) as u32;
            self.put(at + l.ob_digit + 4 * digits, &d.to_le_bytes());
            v >>= 30;
            digits += 1;
        }
        let tag = match l.format {
            LongFormat::SignedSize => digits,
            LongFormat::LvTag => digits << 3 | u64::from(digits == 0),
        };
        self.put_u64(at + l.lv_tag, tag);
        at
    }

    /// A keys object of `kind` holding `entries` (values ignored for split keys).
    fn keys(&mut self, kind: u8, entries: &[(u64, u64)]) -> u64 {
        let k = self.n().dict_keys;
        let mut log2 = 3u8;
        while entries.len() as u64 * 3 > (1u64 << log2) * 2 {
            log2 += 1;
        }
        // Before 3.11 every entry is a general one.
        let general = kind == DICT_KEYS_GENERAL || matches!(k.header, DictKeysHeader::Slots { .. });
        let size = if general {
            k.general_entry_size
        } else {
            k.unicode_entry_size
        };
        let at = self.alloc(k.indices + (1 << log2) + size * entries.len() as u64);
        match k.header {
            DictKeysHeader::Log2 {
                log2_size,
                log2_index_bytes,
                kind: kind_at,
            } => {
                self.put(at + log2_size, &[log2]);
                self.put(at + log2_index_bytes, &[log2]);
                self.put(at + kind_at, &[kind]);
            }
            DictKeysHeader::Slots { size } => self.put_u64(at + size, 1 << log2),
        }
        self.put_u64(at + k.nentries, entries.len() as u64);
        let first = at + k.indices + (1 << log2);
        for (i, &(key, value)) in entries.iter().enumerate() {
            let e = first + size * i as u64;
            if general {
                self.put_u64(e, 0x1234); // hash
                self.put_u64(e + 8, key);
                self.put_u64(e + 16, value);
            } else {
                self.put_u64(e, key);
                self.put_u64(e + 8, value);
            }
        }
        at
    }

    /// The word written at `addr`.
    fn get_u64(&self, addr: u64) -> u64 {
        let i = (addr - self.mem.base) as usize;
        u64::from_le_bytes(self.mem.bytes[i..i + 8].try_into().expect("8 bytes"))
    }

    pub(super) fn dict(&mut self, keys: u64, values: u64) -> u64 {
        let d = self.n().dict_object;
        let at = self.alloc(64);
        self.put_u64(at + d.ma_keys, keys);
        self.put_u64(at + d.ma_values, values);
        at
    }

    /// A str-keyed combined dict.
    fn str_dict(&mut self, items: &[(&str, u64)]) -> u64 {
        let entries: Vec<(u64, u64)> = items.iter().map(|&(k, v)| (self.str(k), v)).collect();
        let keys = self.keys(DICT_KEYS_UNICODE, &entries);
        self.dict(keys, 0)
    }

    /// A `PyDictValues` holding `values` (3.13+: behind its header) at `at`.
    fn put_values(&mut self, at: u64, values: &[u64], valid: bool) {
        let n = self.n();
        if let ManagedDict::InlineValues {
            capacity,
            valid: valid_at,
            ..
        } = n.managed_dict
        {
            self.put(at + capacity, &[values.len() as u8]);
            self.put(at + valid_at, &[u8::from(valid)]);
        }
        for (i, v) in values.iter().enumerate() {
            self.put_u64(at + n.dict_values + 8 * i as u64, *v);
        }
    }

    /// A class whose instances share the keys `attrs`.
    fn class(&mut self, attrs: &[&str]) -> u64 {
        let n = self.n();
        let entries: Vec<(u64, u64)> = attrs.iter().map(|a| (self.str(a), 0)).collect();
        let keys = self.keys(DICT_KEYS_SPLIT, &entries);
        let ty = self.alloc(1024);
        let mut flags = TPFLAGS_MANAGED_DICT;
        if matches!(n.managed_dict, ManagedDict::InlineValues { .. }) {
            flags |= TPFLAGS_INLINE_VALUES;
        }
        self.put_u64(ty + n.tp_flags, flags);
        self.put_u64(ty + n.tp_basicsize, 16);
        self.put_u64(ty + n.ht_cached_keys, keys);
        ty
    }

    /// An instance of `ty` with `values` for the class's attributes; with `as_dict`, they
    /// have moved to a dict of their own (`__dict__` was asked for, or it outgrew them).
    fn instance(&mut self, ty: u64, attrs: &[&str], values: &[u64], as_dict: bool) -> u64 {
        let n = self.n();
        let at = self.alloc(32 + 16 + 8 + 8 * values.len() as u64);
        let obj = at + 32;
        self.put_u64(obj + self.o.pyobject.ob_type, ty);
        let dict = if as_dict {
            let items: Vec<(&str, u64)> =
                attrs.iter().copied().zip(values.iter().copied()).collect();
            self.str_dict(&items)
        } else {
            0
        };
        match n.managed_dict {
            ManagedDict::ValuesOrDict {
                values_before,
                dict_before,
            } => {
                if as_dict {
                    self.put_u64(obj - dict_before, dict);
                } else {
                    let v = self.alloc(8 * values.len() as u64);
                    self.put_values(v, values, true);
                    self.put_u64(obj - values_before, v);
                }
            }
            ManagedDict::TaggedDictOrValues { before } => {
                if as_dict {
                    self.put_u64(obj - before, dict);
                } else {
                    let v = self.alloc(8 * values.len() as u64 + 16) + 16;
                    self.put_values(v, values, true);
                    self.put_u64(obj - before, v - 1);
                }
            }
            ManagedDict::InlineValues { dict_before, .. } => {
                self.put_values(obj + 16, values, !as_dict);
                self.put_u64(obj - dict_before, dict);
            }
            ManagedDict::AtDictOffset { tp_dictoffset } => {
                // A dict of its own at `tp_dictoffset` (its keys split, or not).
                let dict = if as_dict {
                    dict
                } else {
                    let keys = self.get_u64(ty + n.ht_cached_keys);
                    let v = self.alloc(8 * values.len() as u64);
                    self.put_values(v, values, true);
                    self.dict(keys, v)
                };
                self.put_u64(ty + tp_dictoffset, 16);
                self.put_u64(obj + 16, dict);
            }
        }
        obj
    }

    /// A process: one interpreter, a thread state per (pthread, tid, name) (no name: the
    /// thread is not in `_active`); `threading` imported or not.
    pub(super) fn process(&mut self, threads: &[(u64, u32, Option<&str>)], threading: bool) -> u64 {
        let o = self.o;
        let n = self.n();
        let runtime = self.alloc(o.runtime_state.interpreters_head + 8);
        let interp = self.alloc(4096);
        self.put_u64(runtime + o.runtime_state.interpreters_head, interp);
        let mut next = 0;
        let mut idents = Vec::new();
        for &(pthread, tid, _) in threads {
            let t = self.alloc(512);
            self.put_u64(t + o.thread_state.next, next);
            let ident = match o.thread_state.native_thread_id {
                NativeThreadId::Field(native) => {
                    self.put_u64(t + native, u64::from(tid));
                    pthread
                }
                // Before 3.11 the ident is the thread descriptor's address, which holds the tid.
                NativeThreadId::InPthread { offset } => {
                    let descriptor = self.alloc(offset + 8);
                    self.put_u64(descriptor + offset, u64::from(tid));
                    descriptor
                }
            };
            self.put_u64(t + o.thread_state.thread_id, ident);
            idents.push(ident);
            next = t;
        }
        self.put_u64(interp + o.interpreter_state.threads_head, next);
        let attrs = ["_target", "_name", "_daemonic"];
        let thread_type = self.class(&attrs);
        let main_type = self.class(&["_name", "_started"]);
        let mut active = Vec::new();
        for (i, (&(_, _, name), &pthread)) in threads.iter().zip(&idents).enumerate() {
            let Some(name) = name else { continue };
            let name = self.str(name);
            let thread = if i == 0 {
                self.instance(main_type, &["_name", "_started"], &[name, 1], false)
            } else {
                // Every other thread's attributes are in a dict.
                self.instance(thread_type, &attrs, &[0, name, 1], i % 2 == 0)
            };
            let ident = self.int(pthread);
            active.push((ident, thread));
        }
        let active_keys = self.keys(DICT_KEYS_GENERAL, &active);
        let active = self.dict(active_keys, 0);
        let md_dict = self.str_dict(&[("__name__", 0x99), ("_limbo", 0x98), ("_active", active)]);
        let module = self.alloc(64);
        self.put_u64(module + n.md_dict, md_dict);
        let mut modules = vec![("sys", 0x97), ("os", 0x96)];
        if threading {
            modules.push(("threading", module));
        }
        let modules = self.str_dict(&modules);
        self.put_u64(interp + n.imports_modules, modules);
        runtime
    }
}

/// The layout of 3.`minor`: 11 and 12 as shipped, anything else the 3.13+ one.
pub(super) fn offsets(minor: u8) -> Offsets {
    match minor {
        11 | 12 => builtin_offsets(PythonVersion::new(3, minor, 1)).expect("table"),
        // The C library's tid offset is found per process; any one will do here.
        7..=10 => {
            let mut o = builtin_offsets(PythonVersion::new(3, minor, 1)).expect("table");
            o.thread_state.native_thread_id = NativeThreadId::InPthread { offset: 0x2d0 };
            o
        }
        // The 3.13+ way of storing attributes, on the 3.12 table's other numbers.
        _ => {
            let mut o = builtin_offsets(PythonVersion::new(3, 12, 1)).expect("table");
            let n = o.thread_names.as_mut().expect("names");
            n.dict_values = 8;
            n.managed_dict = ManagedDict::InlineValues {
                dict_before: 24,
                capacity: 0,
                valid: 3,
            };
            o.validate().expect("valid");
            o
        }
    }
}
