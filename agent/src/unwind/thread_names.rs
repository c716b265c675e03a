//! Thread names: each thread's `threading.Thread.name`, read from the target's memory, as
//! py-spy shows them; the OS name from /proc where there is none (a thread `threading` does not
//! know, a process that never imported it, a read that failed).
//!
//! In: a thread id in the target's PID namespace. Out: its name, and its host TID. The Python
//! names come from `sys.modules["threading"]._active`, a dict {pthread ident → `Thread`}: each
//! `Thread`'s `_name` attribute, matched to a native thread id through the `thread_id` of the
//! thread states. Cached: read again when a thread id shows up that the last read did not see
//! (at most every [`MIN_REREAD`]) and when the names are [`MAX_AGE`] old (a renamed thread), never
//! per sample. A read goes through a page cache of its own, so it neither disturbs the sampler's
//! (and the prefetch plan it keeps) nor counts in its syscalls. Everything read is untrusted:
//! sizes and counts are bounded, and a failure means "no Python names", never a panic.

use std::sync::Arc;
use std::time::{Duration, Instant};

// foldhash: looked up on every sample, keyed by thread ids.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use super::threads::{MAX_INTERPRETERS, MAX_THREADS};
use crate::discovery::{task_ids, thread_name, PythonTarget};
use crate::memory::{MemoryError, PageCache, ProcessMemory, RemoteMemory, StructBytes};
use crate::offsets::{
    LongFormat, ManagedDict, Offsets, ThreadNameOffsets, DICT_KEYS_GENERAL, DICT_KEYS_SPLIT,
    TPFLAGS_INLINE_VALUES, TPFLAGS_MANAGED_DICT,
};
use crate::symbolize::{read_str, ObjectError};

/// How long Python names are used before they are read again, for threads renamed after they
/// started (`thread.name = ...`).
const MAX_AGE: Duration = Duration::from_secs(1);
/// Shortest time between two reads made for a thread the last one did not see: bounds the cost
/// when threads come and go faster than that.
const MIN_REREAD: Duration = Duration::from_millis(20);
/// Largest dict read: `1 << MAX_DICT_LOG2` slots (`sys.modules` of a large application is
/// about 2^12).
const MAX_DICT_LOG2: u8 = 16;
/// Longest thread name kept, in characters.
const MAX_NAME_CHARS: usize = 256;
/// Pages one read of the names may cache.
const NAME_READ_PAGES: usize = 1024;
/// Positions of found keys remembered before the memo is cleared.
const MAX_HINTS: usize = 1024;
/// Bytes of a `PyDictValues` header read for its `capacity` and `valid` bytes (3.13+).
const VALUES_HEADER: usize = 8;

/// Host TIDs and names of one process's threads.
#[derive(Debug, Default)]
pub(super) struct ThreadNames {
    /// namespace TID → (host TID, /proc name), reloaded when an unknown thread shows up
    by_ns_tid: HashMap<u32, (u32, Option<Arc<str>>)>,
    /// host TID → namespace TID, for BPF records (which carry host TIDs)
    ns_of_host: HashMap<u32, u32>,
    python: PythonNames,
}

impl ThreadNames {
    /// Host TID and /proc name of a thread, reading /proc again if it is not known.
    fn lookup(&mut self, pid: u32, ns_tid: u32) -> Option<&(u32, Option<Arc<str>>)> {
        if !self.by_ns_tid.contains_key(&ns_tid) {
            self.reload(pid);
        }
        self.by_ns_tid.get(&ns_tid)
    }

    /// The host TID of a thread given its namespace TID.
    pub(super) fn host_tid(&mut self, pid: u32, ns_tid: u32) -> Option<u32> {
        self.lookup(pid, ns_tid).map(|(host, _)| *host)
    }

    /// The name of thread `ns_tid`: its `threading` name, else the OS one.
    pub(super) fn name(&mut self, target: &PythonTarget, ns_tid: u32) -> Option<Arc<str>> {
        if let Some(name) = self.python.name(target, ns_tid) {
            return Some(name);
        }
        self.lookup(target.pid, ns_tid).and_then(|(_, n)| n.clone())
    }

    /// The namespace TID of a host TID (itself outside containers).
    pub(super) fn ns_tid_of(&mut self, pid: u32, host_tid: u32) -> u32 {
        if !self.ns_of_host.contains_key(&host_tid) {
            self.reload(pid);
        }
        // A thread gone from /proc keeps its own id, without a /proc read per record.
        *self.ns_of_host.entry(host_tid).or_insert(host_tid)
    }

    /// Reads of the Python names made so far.
    pub(super) fn python_reads(&self) -> u64 {
        self.python.reads
    }

    fn reload(&mut self, pid: u32) {
        self.by_ns_tid = task_ids(pid)
            .into_iter()
            .map(|t| {
                (
                    t.ns_tid,
                    (t.host_tid, thread_name(pid, t.host_tid).map(Arc::from)),
                )
            })
            .collect();
        self.ns_of_host = self
            .by_ns_tid
            .iter()
            .map(|(ns, (host, _))| (*host, *ns))
            .collect();
    }
}

/// The `threading` names of a process, as of the last read.
#[derive(Debug, Default)]
struct PythonNames {
    /// namespace TID → name
    names: HashMap<u32, Arc<str>>,
    /// thread ids the last read found (named or not) or was made for
    seen: HashSet<u32>,
    read_at: Option<Instant>,
    hints: KeyHints,
    reads: u64,
}

impl PythonNames {
    fn name(&mut self, target: &PythonTarget, ns_tid: u32) -> Option<Arc<str>> {
        // No layout for them: /proc names only.
        target.offsets.thread_names?;
        let now = Instant::now();
        if needs_read(self.read_at, now, || self.seen.contains(&ns_tid)) {
            self.refresh(target, now);
            // Asked for and still unseen: not worth another read before the names age.
            self.seen.insert(ns_tid);
        }
        self.names.get(&ns_tid).cloned()
    }

    fn refresh(&mut self, target: &PythonTarget, now: Instant) {
        self.read_at = Some(now);
        self.reads += 1;
        let mut mem = PageCache::new(RemoteMemory::new(target.pid), NAME_READ_PAGES);
        match read_python_names(
            &mut mem,
            &target.offsets,
            target.runtime_addr,
            &mut self.hints,
        ) {
            Ok(read) => {
                self.names = read.names;
                self.seen = read.seen;
            }
            // A torn read keeps the names it would have replaced; a process that cannot be
            // read any more is the sampler's to notice.
            Err(e) => tracing::trace!(pid = target.pid, error = %e, "reading thread names failed"),
        }
    }
}

/// Whether names read at `read_at` must be read again at `now` for a thread the last read saw
/// (`seen`) or not.
fn needs_read(read_at: Option<Instant>, now: Instant, seen: impl FnOnce() -> bool) -> bool {
    read_at.is_none_or(|at| {
        let age = now.saturating_duration_since(at);
        age >= MAX_AGE || (age >= MIN_REREAD && !seen())
    })
}

/// Where keys were found: (keys object, key) → (entry index, key object). Finding a key in a
/// big dict (`sys.modules`) means reading every key; the next read checks the remembered entry
/// first.
type KeyHints = HashMap<(u64, &'static str), (u64, u64)>;

/// What one read of the names found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct PythonThreadNames {
    /// namespace TID → `threading` name
    pub names: HashMap<u32, Arc<str>>,
    /// every thread id of the thread lists (named or not)
    pub seen: HashSet<u32>,
}

/// Reads the `threading` name of every thread of every interpreter; the main interpreter's
/// name wins for a thread that has several. An interpreter whose names cannot be read (no
/// `threading`, a torn read) leaves its threads unnamed.
pub(super) fn read_python_names(
    mem: &mut impl ProcessMemory,
    o: &Offsets,
    runtime: u64,
    hints: &mut KeyHints,
) -> Result<PythonThreadNames, ObjectError> {
    let n = o
        .thread_names
        .as_ref()
        .ok_or(ObjectError::Malformed { addr: runtime })?;
    if hints.len() > MAX_HINTS {
        hints.clear();
    }
    let mut r = Reader {
        mem,
        o,
        n,
        hints,
        str_type: None,
        types: HashMap::new(),
    };
    let mut out = PythonThreadNames::default();
    let mut interp = r.u64_at(runtime, o.runtime_state.interpreters_head)?;
    let mut visited = HashSet::new();
    // Newest first: the main interpreter, the oldest, comes last and overrides.
    while interp != 0 && visited.len() < MAX_INTERPRETERS && visited.insert(interp) {
        let idents = r.thread_idents(interp)?;
        out.seen.extend(idents.values().copied());
        match r.active_names(interp) {
            Ok(names) => {
                for (ident, name) in names {
                    if let Some(&tid) = idents.get(&ident) {
                        out.names.insert(tid, name);
                    }
                }
            }
            Err(e) if is_fatal(&e) => return Err(e),
            Err(_) => {}
        }
        interp = r.u64_at(interp, o.interpreter_state.next)?;
    }
    Ok(out)
}

/// The process is gone or unreadable: nothing further can be read.
fn is_fatal(e: &ObjectError) -> bool {
    matches!(
        e,
        ObjectError::Memory(MemoryError::Gone { .. } | MemoryError::Denied { .. })
    )
}

/// A dict's entries, located: enough to read entry `i`'s key and value.
#[derive(Debug, Clone, Copy)]
struct Table {
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

struct Reader<'a, M> {
    mem: &'a mut M,
    o: &'a Offsets,
    n: &'a ThreadNameOffsets,
    hints: &'a mut KeyHints,
    /// `ob_type` of a key found by name: `str`, which a name must be
    str_type: Option<u64>,
    /// (type, attribute) → what its instances need, for this read
    types: HashMap<(u64, &'static str), TypeInfo>,
}

impl<M: ProcessMemory> Reader<'_, M> {
    /// The u64 at `addr + off`; an address past the end of the address space is malformed.
    fn u64_at(&mut self, addr: u64, off: u64) -> Result<u64, ObjectError> {
        Ok(self.mem.read_u64(offset(addr, off)?)?)
    }

    /// pthread ident → namespace TID of every thread state of the interpreter at `interp`.
    fn thread_idents(&mut self, interp: u64) -> Result<HashMap<u64, u32>, ObjectError> {
        let t = &self.o.thread_state;
        let mut out = HashMap::new();
        let mut visited = HashSet::new();
        let mut tstate = self.u64_at(interp, self.o.interpreter_state.threads_head)?;
        let mut buf = [0u8; 512];
        let len = (t.next.max(t.thread_id).max(t.native_thread_id) + 8).min(512) as usize;
        while tstate != 0 && visited.len() < MAX_THREADS && visited.insert(tstate) {
            let buf = &mut buf[..len];
            self.mem.read(tstate, buf)?;
            let tid = buf.u64_at(t.native_thread_id) as u32;
            if tid != 0 {
                out.insert(buf.u64_at(t.thread_id), tid);
            }
            tstate = buf.u64_at(t.next);
        }
        Ok(out)
    }

    /// pthread ident → `_name` of each `Thread` in the interpreter's `threading._active`.
    fn active_names(&mut self, interp: u64) -> Result<Vec<(u64, Arc<str>)>, ObjectError> {
        let modules = self.u64_at(interp, self.n.imports_modules)?;
        let Some(threading) = self.dict_get(modules, "threading")? else {
            return Ok(Vec::new());
        };
        let md_dict = self.u64_at(threading, self.n.md_dict)?;
        let Some(active) = self.dict_get(md_dict, "_active")? else {
            return Ok(Vec::new());
        };
        let table = self.open_dict(active)?;
        let mut out = Vec::new();
        for (key, thread) in self.entries(&table)? {
            match self.thread_name(key, thread) {
                Ok(Some(named)) => out.push(named),
                Ok(None) => {}
                Err(e) if is_fatal(&e) => return Err(e),
                // One thread torn or strange: the others still have their names.
                Err(_) => {}
            }
        }
        Ok(out)
    }

    /// The ident (an int key of `_active`) and `_name` of one `Thread`.
    fn thread_name(
        &mut self,
        key: u64,
        thread: u64,
    ) -> Result<Option<(u64, Arc<str>)>, ObjectError> {
        let Some(ident) = self.read_int(key)? else {
            return Ok(None);
        };
        let Some(name) = self.instance_attr(thread, "_name")? else {
            return Ok(None);
        };
        // A `_name` that is not a str (user code can set anything) is not a name.
        let ty = self.u64_at(name, self.o.pyobject.ob_type)?;
        if Some(ty) != self.str_type {
            return Ok(None);
        }
        let name: String = read_str(self.mem, self.o, name)?
            .chars()
            .take(MAX_NAME_CHARS)
            .collect();
        Ok(Some((ident, Arc::from(name))))
    }

    /// `dict[name]` of a str-keyed lookup, if present.
    fn dict_get(&mut self, dict: u64, name: &'static str) -> Result<Option<u64>, ObjectError> {
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
    fn open_dict(&mut self, dict: u64) -> Result<Table, ObjectError> {
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
        let len = (k.nentries + 8).max(k.kind + 1).min(64) as usize;
        let buf = &mut buf[..len];
        self.mem.read(keys, buf)?;
        let log2_size = buf.u8_at(k.log2_size);
        let log2_index_bytes = buf.u8_at(k.log2_index_bytes);
        let kind = buf.u8_at(k.kind);
        let nentries = buf.u64_at(k.nentries);
        if log2_size > MAX_DICT_LOG2 || kind > DICT_KEYS_SPLIT || nentries > 1 << log2_size {
            return Err(malformed);
        }
        // 1-byte indices up to 128 slots, 2 bytes up to 2^15, then 4 (`dk_log2_index_bytes`,
        // `Objects/dictobject.c` `new_keys_object`).
        let index_width_log2 = match log2_size {
            0..8 => 0,
            8..16 => 1,
            _ => 2,
        };
        if log2_index_bytes != log2_size + index_width_log2 {
            return Err(malformed);
        }
        let entries = offset(keys, k.indices)?;
        let entries = offset(entries, 1 << log2_index_bytes)?;
        Ok(Table {
            keys,
            nentries,
            entries,
            general: kind == DICT_KEYS_GENERAL,
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

    /// Every (key, value) of a combined dict with both set, from one read of its entries.
    fn entries(&mut self, table: &Table) -> Result<Vec<(u64, u64)>, ObjectError> {
        if table.values.is_some() {
            // Only instance dicts are split; `_active` is not.
            return Err(ObjectError::Malformed { addr: table.keys });
        }
        let size = self.entry_size(table);
        let n = table.nentries.min(MAX_THREADS as u64);
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
        if let Some(&(i, key)) = self.hints.get(&(table.keys, name)) {
            if i < table.nentries && self.key(table, i)? == key && self.key_is(key, name)? {
                return Ok(Some(i));
            }
        }
        let size = self.entry_size(table);
        let bytes = self
            .mem
            .read_vec(table.entries, (table.nentries * size) as usize)?;
        let key_at = Self::key_offset(table);
        for (i, e) in bytes.chunks_exact(size as usize).enumerate() {
            let key = e.u64_at(key_at);
            if key != 0 && self.key_is(key, name)? {
                self.hints.insert((table.keys, name), (i as u64, key));
                return Ok(Some(i as u64));
            }
        }
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
    fn read_int(&mut self, addr: u64) -> Result<Option<u64>, ObjectError> {
        let l = &self.n.long_object;
        // Three 30-bit digits hold any u64.
        let mut buf = [0u8; 64];
        let len = (l.lv_tag + 8).max(l.ob_digit + 12).min(64) as usize;
        let buf = &mut buf[..len];
        self.mem.read(addr, buf)?;
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
            shared: None,
        };
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
    fn instance_attr(&mut self, obj: u64, name: &'static str) -> Result<Option<u64>, ObjectError> {
        let ty = self.u64_at(obj, self.o.pyobject.ob_type)?;
        let info = self.type_info(ty, name)?;
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
    /// the shared keys (`ht_cached_keys`) and the index of the attribute in them
    shared: Option<(Table, Option<u64>)>,
}

/// `addr + off`, or malformed if that leaves the address space.
fn offset(addr: u64, off: u64) -> Result<u64, ObjectError> {
    addr.checked_add(off).ok_or(ObjectError::Malformed { addr })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::FakeMemory;
    use crate::offsets::{builtin_offsets, PythonVersion, DICT_KEYS_UNICODE};

    const BASE: u64 = 0x10_0000;
    const STR_TYPE: u64 = 0xaaaa_0000;
    const INT_TYPE: u64 = 0xbbbb_0000;

    /// A fake process memory that objects are laid out in, bump-allocated.
    struct Image {
        mem: FakeMemory,
        top: u64,
        o: Offsets,
    }

    impl Image {
        fn new(o: Offsets) -> Image {
            Image {
                mem: FakeMemory {
                    base: BASE,
                    bytes: vec![0; 1 << 18],
                },
                top: BASE + 64,
                o,
            }
        }

        fn n(&self) -> ThreadNameOffsets {
            self.o.thread_names.expect("layout has thread names")
        }

        fn alloc(&mut self, len: u64) -> u64 {
            let at = self.top.next_multiple_of(16);
            self.top = at + len;
            at
        }

        fn put(&mut self, at: u64, bytes: &[u8]) {
            let o = (at - BASE) as usize;
            self.mem.bytes[o..o + bytes.len()].copy_from_slice(bytes);
        }

        fn put_u64(&mut self, at: u64, v: u64) {
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
        fn int(&mut self, mut v: u64) -> u64 {
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
            let size = if kind == DICT_KEYS_GENERAL {
                k.general_entry_size
            } else {
                k.unicode_entry_size
            };
            let at = self.alloc(k.indices + (1 << log2) + size * entries.len() as u64);
            self.put(at + k.log2_size, &[log2]);
            self.put(at + k.log2_index_bytes, &[log2]);
            self.put(at + k.kind, &[kind]);
            self.put_u64(at + k.nentries, entries.len() as u64);
            let first = at + k.indices + (1 << log2);
            for (i, &(key, value)) in entries.iter().enumerate() {
                let e = first + size * i as u64;
                if kind == DICT_KEYS_GENERAL {
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

        fn dict(&mut self, keys: u64, values: u64) -> u64 {
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
            }
            obj
        }

        /// A process: one interpreter, a thread state per (pthread, tid, name) (no name: the
        /// thread is not in `_active`); `threading` imported or not.
        fn process(&mut self, threads: &[(u64, u32, Option<&str>)], threading: bool) -> u64 {
            let o = self.o;
            let n = self.n();
            let runtime = self.alloc(o.runtime_state.interpreters_head + 8);
            let interp = self.alloc(4096);
            self.put_u64(runtime + o.runtime_state.interpreters_head, interp);
            let mut next = 0;
            for &(pthread, tid, _) in threads {
                let t = self.alloc(512);
                self.put_u64(t + o.thread_state.next, next);
                self.put_u64(t + o.thread_state.thread_id, pthread);
                self.put_u64(t + o.thread_state.native_thread_id, u64::from(tid));
                next = t;
            }
            self.put_u64(interp + o.interpreter_state.threads_head, next);
            let attrs = ["_target", "_name", "_daemonic"];
            let thread_type = self.class(&attrs);
            let main_type = self.class(&["_name", "_started"]);
            let mut active = Vec::new();
            for (i, &(pthread, _, name)) in threads.iter().enumerate() {
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
            let md_dict =
                self.str_dict(&[("__name__", 0x99), ("_limbo", 0x98), ("_active", active)]);
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

    fn offsets(minor: u8) -> Offsets {
        match minor {
            11 | 12 => builtin_offsets(PythonVersion::new(3, minor, 1)).expect("table"),
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

    fn names(read: &PythonThreadNames) -> Vec<(u32, &str)> {
        let mut v: Vec<(u32, &str)> = read.names.iter().map(|(t, n)| (*t, &**n)).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn reads_names_in_values_and_dicts_of_every_layout() {
        for minor in [11, 12, 13] {
            let mut img = Image::new(offsets(minor));
            let runtime = img.process(
                &[
                    (0x7f00_0000_1000, 100, Some("MainThread")),
                    (0x7f00_0000_2000, 101, Some("worker-1")),
                    (0x7f00_0000_3000, 102, Some("CustomThreadName-3")),
                    (0x7f00_0000_4000, 103, None),
                ],
                true,
            );
            let o = img.o;
            let read = read_python_names(&mut img.mem, &o, runtime, &mut KeyHints::new())
                .expect("readable");
            assert_eq!(
                names(&read),
                [
                    (100, "MainThread"),
                    (101, "worker-1"),
                    (102, "CustomThreadName-3")
                ],
                "3.{minor}"
            );
            assert_eq!(read.seen.len(), 4, "3.{minor}: the unnamed thread is seen");
        }
    }

    #[test]
    fn no_threading_module_means_no_names() {
        let mut img = Image::new(offsets(12));
        let runtime = img.process(&[(0x7f00_0000_1000, 100, Some("MainThread"))], false);
        let o = img.o;
        let read =
            read_python_names(&mut img.mem, &o, runtime, &mut KeyHints::new()).expect("readable");
        assert!(read.names.is_empty());
        assert!(read.seen.contains(&100));
    }

    /// Counts the reads that reach the image.
    struct Counting<'a>(&'a mut FakeMemory, u64);

    impl ProcessMemory for Counting<'_> {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
            self.1 += 1;
            self.0.read(addr, buf)
        }
    }

    #[test]
    fn a_second_read_checks_remembered_keys_instead_of_scanning() {
        let mut img = Image::new(offsets(13));
        let threads: Vec<(u64, u32, Option<&str>)> = (0..4)
            .map(|i| (0x7f00_0000_1000 * (i + 1), 100 + i as u32, Some("t")))
            .collect();
        let runtime = img.process(&threads, true);
        let o = img.o;
        let mut hints = KeyHints::new();
        let mut mem = Counting(&mut img.mem, 0);
        let first = read_python_names(&mut mem, &o, runtime, &mut hints).expect("readable");
        let scanned = std::mem::take(&mut mem.1);
        let second = read_python_names(&mut mem, &o, runtime, &mut hints).expect("readable");
        assert_eq!(first, second);
        assert!(mem.1 < scanned, "{} reads, then {}", scanned, mem.1);
    }

    #[test]
    fn garbage_keys_objects_are_errors() {
        let o = offsets(12);
        let k = o.thread_names.expect("names").dict_keys;
        for (log2_size, log2_index, kind, nentries) in [
            (200u8, 200u8, 1u8, 5u64), // a huge table
            (3, 3, 1, u64::MAX),       // more entries than slots
            (3, 3, 1, 9),
            (3, 7, 1, 1),   // an index table that does not match the size
            (3, 3, 9, 1),   // no such kind
            (40, 42, 0, 1), // past the bound
            (16, 17, 0, 1 << 20),
        ] {
            let mut img = Image::new(o);
            let keys = img.alloc(64);
            img.put(keys + k.log2_size, &[log2_size]);
            img.put(keys + k.log2_index_bytes, &[log2_index]);
            img.put(keys + k.kind, &[kind]);
            img.put_u64(keys + k.nentries, nentries);
            let dict = img.dict(keys, 0);
            let n = o.thread_names.expect("names");
            let mut hints = KeyHints::new();
            let mut r = Reader {
                mem: &mut img.mem,
                o: &o,
                n: &n,
                hints: &mut hints,
                str_type: None,
                types: HashMap::new(),
            };
            assert!(
                matches!(r.open_dict(dict), Err(ObjectError::Malformed { .. })),
                "{log2_size} {log2_index} {kind} {nentries}"
            );
        }
    }

    #[test]
    fn ints_beyond_64_bits_or_negative_are_not_idents() {
        for minor in [11, 12] {
            let mut img = Image::new(offsets(minor));
            let n = img.n();
            let l = n.long_object;
            let big = img.int(u64::MAX);
            let over = img.alloc(64);
            img.put_u64(over + l.lv_tag, if minor == 11 { 3 } else { 3 << 3 });
            img.put(over + l.ob_digit + 8, &(1u32 << 5).to_le_bytes()); // bit 65
            let negative = img.alloc(64);
            img.put_u64(
                negative + l.lv_tag,
                if minor == 11 {
                    (-1i64) as u64
                } else {
                    1 << 3 | 2
                },
            );
            let huge = img.alloc(64);
            img.put_u64(huge + l.lv_tag, u64::MAX - 7);
            let o = img.o;
            let mut hints = KeyHints::new();
            let mut r = Reader {
                mem: &mut img.mem,
                o: &o,
                n: &n,
                hints: &mut hints,
                str_type: None,
                types: HashMap::new(),
            };
            assert_eq!(r.read_int(big).expect("int"), Some(u64::MAX), "3.{minor}");
            assert_eq!(r.read_int(over).expect("int"), None, "3.{minor}");
            assert_eq!(r.read_int(negative).expect("int"), None, "3.{minor}");
            assert_eq!(r.read_int(huge).expect("int"), None, "3.{minor}");
        }
    }

    /// Random memory full of pointers back into itself: every read must end, without a panic.
    #[test]
    fn random_memory_neither_panics_nor_hangs() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for minor in [11, 12, 13] {
            let o = offsets(minor);
            for _ in 0..200 {
                let mut mem = FakeMemory {
                    base: BASE,
                    bytes: vec![0; 1 << 14],
                };
                for word in mem.bytes.chunks_exact_mut(8) {
                    let r = next();
                    let v = match r % 4 {
                        // a pointer into the image
                        0 | 1 => BASE + (r >> 8) % (1 << 14),
                        2 => r >> 40,
                        _ => r,
                    };
                    word.copy_from_slice(&v.to_le_bytes());
                }
                let _ = read_python_names(&mut mem, &o, BASE, &mut KeyHints::new());
            }
        }
    }

    #[test]
    fn names_are_read_again_for_new_threads_and_when_old() {
        let t0 = Instant::now();
        assert!(needs_read(None, t0, || true));
        assert!(!needs_read(Some(t0), t0 + MIN_REREAD / 2, || false));
        assert!(!needs_read(Some(t0), t0 + MAX_AGE / 2, || true));
        assert!(needs_read(Some(t0), t0 + MAX_AGE / 2, || false));
        assert!(needs_read(Some(t0), t0 + MAX_AGE, || true));
    }
}
