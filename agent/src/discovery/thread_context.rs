//! Where a process publishes OpenTelemetry's thread context (OTEP 4947): the thread-local
//! `otel_thread_ctx_v1` some loaded object exports, and how to reach it in any thread's TLS
//! without stopping the thread.
//!
//! In: a process. Out: a [`ThreadContextLayout`], the offsets that lead from a thread's
//! `pthread_t` to its copy of the variable. glibc only (x86_64): a `pthread_t` is the address
//! of the thread's `struct pthread`, which holds the thread's DTV (dynamic thread vector);
//! `dtv[module id]` points to the module's TLS block, and the variable's `st_value` is its
//! offset in that block. The offsets inside glibc's structures are not guessed: glibc exports
//! them for libthread_db as `_thread_db_*` descriptors in libc.so.6's `.dynsym`, three u32
//! each (size in bits, element count, offset; nptl_db/db_info.c). The module id is read from
//! the dynamic linker's `link_map` of the object (`_r_debug.r_map`, matched on `l_addr`, the
//! load bias).
//!
//! Everything read is untrusted: a failed or implausible read means "not published".

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::elf::{exported_symbols, load_bias, ExportedSymbols};
use super::procfs_util::read_maps;
use super::MapsEntry;
use crate::memory::ProcessMemory;

/// The thread-local variable OTEP 4947 names: a pointer to the thread's current record.
pub const TLS_SYMBOL: &str = "otel_thread_ctx_v1";
/// Offset of `struct pthread`'s DTV pointer (`header.dtv`).
const DTV_IN_PTHREAD: &str = "_thread_db_pthread_dtvp";
/// `dtv_t dtv[]`: its element size is the size of one DTV entry.
const DTV_ENTRIES: &str = "_thread_db_dtv_dtv";
/// Offset of the block pointer in a DTV entry (`dtv_t.pointer.val`).
const POINTER_IN_ENTRY: &str = "_thread_db_dtv_t_pointer_val";
/// Offset of `link_map.l_tls_modid`.
const MODULE_ID_IN_LINK_MAP: &str = "_thread_db_link_map_l_tls_modid";
/// Offset of `link_map.l_tls_offset`: where the module's block sits in static TLS, if it does.
const STATIC_OFFSET_IN_LINK_MAP: &str = "_thread_db_link_map_l_tls_offset";
/// The dynamic linker's debug interface: `r_map` at 8 is the first `link_map`.
const R_DEBUG: &str = "_r_debug";
const WANTED: [&str; 7] = [
    TLS_SYMBOL,
    DTV_IN_PTHREAD,
    DTV_ENTRIES,
    POINTER_IN_ENTRY,
    MODULE_ID_IN_LINK_MAP,
    STATIC_OFFSET_IN_LINK_MAP,
    R_DEBUG,
];
/// `STT_TLS`: the symbol's value is an offset in its module's TLS block.
const STT_TLS: u8 = 6;
/// `link_map.l_next`.
const L_NEXT: u64 = 24;
/// Objects walked in the dynamic linker's list before giving up (a cycle, garbage).
const MAX_LINK_MAPS: usize = 4096;
/// Objects whose exports are remembered before the memo is cleared.
const MAX_OBJECTS: usize = 4096;
/// Highest module id believed: glibc numbers modules with TLS from 1, one per object.
const MAX_MODULE_ID: u64 = 1 << 20;
/// Largest static TLS offset believed (static TLS is a few KB to a few MB below the thread
/// pointer); 0 (`NO_TLS_OFFSET`) and -1 (`FORCED_DYNAMIC_TLS_OFFSET`) mean "not in static TLS".
const MAX_STATIC_OFFSET: u64 = 1 << 30;

/// How to reach a thread's `otel_thread_ctx_v1` from its `pthread_t` (glibc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadContextLayout {
    /// offset of the DTV pointer in `struct pthread`
    pub dtv_in_pthread: u64,
    /// bytes per DTV entry (`dtv[-1]` holds the entry count, `dtv[0]` the generation)
    pub dtv_entry_size: u64,
    /// offset of the TLS block pointer in a DTV entry
    pub pointer_in_entry: u64,
    /// the publishing object's TLS module id: its index in the DTV
    pub module_id: u64,
    /// the variable's offset in that object's TLS block (its `st_value`)
    pub offset_in_block: u64,
    /// where the object's block sits below the thread pointer when it is in static TLS
    /// (`l_tls_offset`; x86_64 puts static TLS below the TCB). glibc gives a `dlopen`ed object
    /// static TLS when it fits (always for TLSDESC, the model OTEP 4947 asks for) and then
    /// never fills the DTV entry of threads that already ran: the block is reached this way.
    pub static_offset: Option<u64>,
}

/// glibc 2.36's x86_64 layout (DTV pointer at 8 in `struct pthread`, 16-byte entries, the block
/// pointer first) for a variable at 0x18 in module 3's block: what the tests find and use.
#[cfg(test)]
pub(crate) const GLIBC_236_MODULE_3: ThreadContextLayout = ThreadContextLayout {
    dtv_in_pthread: 8,
    dtv_entry_size: 16,
    pointer_in_entry: 0,
    module_id: 3,
    offset_in_block: 0x18,
    static_offset: None,
};

/// Finds a process's [`ThreadContextLayout`], remembering what each mapped object exports so
/// that looking again (for an object `dlopen`ed since) parses only the new ones.
#[derive(Debug, Default)]
pub struct ThreadContextFinder {
    /// (path, inode) → the object's exports among the wanted names (`None`: unreadable)
    objects: HashMap<(PathBuf, u64), Option<ExportedSymbols>>,
}

/// One mapped object's exports and where it was loaded.
struct LoadedObject {
    exports: ExportedSymbols,
    bias: u64,
}

impl ThreadContextFinder {
    /// The layout of process `pid`'s thread context, read through `mem`; `None` when no object
    /// exports it, the C library is not glibc, or a read failed.
    pub fn find(&mut self, pid: u32, mem: &mut impl ProcessMemory) -> Option<ThreadContextLayout> {
        let mut by_path: BTreeMap<PathBuf, Vec<MapsEntry>> = BTreeMap::new();
        for (path, entry) in read_maps(pid).ok()? {
            by_path.entry(path).or_default().push(entry);
        }
        if self.objects.len() > MAX_OBJECTS {
            self.objects.clear();
        }
        let mut loaded = Vec::new();
        for (path, entries) in by_path.into_iter().filter(|(p, e)| loaded_object(p, e)) {
            let inode = entries.first().map_or(0, |e| e.inode);
            let exports = self
                .objects
                .entry((path.clone(), inode))
                .or_insert_with(|| exported_symbols(pid, &path, &entries, &WANTED).ok());
            let Some(exports) = exports.as_ref().filter(|e| !e.symbols.is_empty()) else {
                continue;
            };
            if let Some(bias) = load_bias(&exports.loads, &entries) {
                loaded.push(LoadedObject {
                    exports: exports.clone(),
                    bias,
                });
            }
        }
        layout_of(&loaded, mem)
    }
}

/// Whether the file mapped at `path` by `entries` is a loaded object worth reading symbols from:
/// mapped executable (its text), still on disk, and not a device or a memfd. Anything else a
/// process maps (data files, shared memory, a JIT's memfd) is not parsed: it is not an object,
/// and a file its owner can shrink under our read is one we do not map.
fn loaded_object(path: &Path, entries: &[MapsEntry]) -> bool {
    let text = path.to_string_lossy();
    entries.iter().any(|e| e.executable)
        && !entries.iter().any(|e| e.deleted)
        && !text.starts_with("/dev/")
        && !text.starts_with("/memfd:")
}

/// The layout, given the loaded objects that export any of the wanted names.
fn layout_of(loaded: &[LoadedObject], mem: &mut impl ProcessMemory) -> Option<ThreadContextLayout> {
    let symbol = |name: &str| {
        loaded.iter().find_map(|o| {
            o.exports
                .symbols
                .get(name)
                .map(|s| (o.bias, s.value, s.kind))
        })
    };
    let (module_bias, offset_in_block, kind) = symbol(TLS_SYMBOL)?;
    if kind != STT_TLS {
        return None;
    }
    let mut descriptor = |name: &str| -> Option<Descriptor> {
        let (bias, value, _) = symbol(name)?;
        let mut b = [0u8; 12];
        mem.read(bias.checked_add(value)?, &mut b).ok()?;
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(Descriptor {
            bits: word(0),
            offset: u64::from(word(8)),
        })
    };
    let dtv = descriptor(DTV_IN_PTHREAD)?.pointer()?;
    let entries = descriptor(DTV_ENTRIES)?;
    let pointer = descriptor(POINTER_IN_ENTRY)?.pointer()?;
    let module_id_field = descriptor(MODULE_ID_IN_LINK_MAP)?;
    let dtv_entry_size = u64::from(entries.bits / 8);
    if !(8..=64).contains(&dtv_entry_size) || pointer + 8 > dtv_entry_size {
        return None;
    }
    let static_offset_field = descriptor(STATIC_OFFSET_IN_LINK_MAP);
    let (ld_bias, r_debug, _) = symbol(R_DEBUG)?;
    let link_map = link_map_of(mem, ld_bias.checked_add(r_debug)?, module_bias)?;
    let module_id = read_field(mem, link_map, module_id_field)?;
    if !(1..MAX_MODULE_ID).contains(&module_id) {
        return None;
    }
    let static_offset = static_offset_field
        .and_then(|field| read_field(mem, link_map, field))
        .filter(|off| (1..MAX_STATIC_OFFSET).contains(off));
    Some(ThreadContextLayout {
        dtv_in_pthread: dtv,
        dtv_entry_size,
        pointer_in_entry: pointer,
        module_id,
        offset_in_block,
        static_offset,
    })
}

/// A libthread_db field descriptor: (size in bits, count, offset); the count is not needed.
#[derive(Debug, Clone, Copy)]
struct Descriptor {
    bits: u32,
    offset: u64,
}

impl Descriptor {
    /// The offset of a 64-bit field; `None` for any other size (not the layout this reads).
    fn pointer(self) -> Option<u64> {
        (self.bits == 64 && self.offset < 1 << 16).then_some(self.offset)
    }
}

/// The `link_map` of the object loaded with bias `bias`, found by walking `_r_debug.r_map`.
fn link_map_of(mem: &mut impl ProcessMemory, r_debug: u64, bias: u64) -> Option<u64> {
    let mut link_map = mem.read_u64(r_debug.checked_add(8)?).ok()?;
    for _ in 0..MAX_LINK_MAPS {
        if link_map == 0 {
            return None;
        }
        // l_addr, at 0, is the load bias.
        if mem.read_u64(link_map).ok()? == bias {
            return Some(link_map);
        }
        link_map = mem.read_u64(link_map.checked_add(L_NEXT)?).ok()?;
    }
    None
}

/// A 32- or 64-bit field of the structure at `base`, as a descriptor places it.
fn read_field(mem: &mut impl ProcessMemory, base: u64, field: Descriptor) -> Option<u64> {
    let at = base.checked_add(field.offset)?;
    match field.bits {
        64 => mem.read_u64(at).ok(),
        32 => mem.read_u32(at).ok().map(u64::from),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::elf::DefinedSymbol;
    use crate::memory::FakeMemory;

    const BASE: u64 = 0x10_000;

    fn put(bytes: &mut [u8], addr: u64, data: &[u8]) {
        let at = (addr - BASE) as usize;
        bytes[at..at + data.len()].copy_from_slice(data);
    }

    fn descriptor(bits: u32, offset: u32) -> Vec<u8> {
        [bits, 1, offset]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }

    fn object(symbols: &[(&'static str, u64, u8)], bias: u64) -> LoadedObject {
        LoadedObject {
            exports: ExportedSymbols {
                symbols: symbols
                    .iter()
                    .map(|&(n, value, kind)| (n, DefinedSymbol { value, kind }))
                    .collect(),
                loads: vec![],
            },
            bias,
        }
    }

    /// glibc 2.36's x86_64 layout: a libc with the descriptors, an ld.so whose list holds two
    /// objects, the second the publisher (bias 0x5000, module id 3).
    fn process() -> (Vec<LoadedObject>, FakeMemory) {
        let mut bytes = vec![0u8; 0x10_000];
        let libc = BASE + 0x1000;
        put(&mut bytes, libc + 0x10, &descriptor(64, 8));
        put(&mut bytes, libc + 0x20, &descriptor(128, 0));
        put(&mut bytes, libc + 0x30, &descriptor(64, 0));
        put(&mut bytes, libc + 0x40, &descriptor(64, 0x480));
        let r_debug = BASE + 0x2000;
        let (first, second) = (BASE + 0x3000, BASE + 0x4000);
        put(&mut bytes, r_debug + 8, &first.to_le_bytes());
        put(&mut bytes, first, &0x7777u64.to_le_bytes());
        put(&mut bytes, first + L_NEXT, &second.to_le_bytes());
        put(&mut bytes, second, &0x5000u64.to_le_bytes());
        put(&mut bytes, second + 0x480, &3u64.to_le_bytes());
        let objects = vec![
            object(
                &[
                    (DTV_IN_PTHREAD, 0x10, 1),
                    (DTV_ENTRIES, 0x20, 1),
                    (POINTER_IN_ENTRY, 0x30, 1),
                    (MODULE_ID_IN_LINK_MAP, 0x40, 1),
                ],
                libc,
            ),
            object(&[(R_DEBUG, 0x2000, 1)], BASE),
            object(&[(TLS_SYMBOL, 0x18, STT_TLS)], 0x5000),
        ];
        (objects, FakeMemory { base: BASE, bytes })
    }

    #[test]
    fn the_layout_comes_from_the_descriptors_and_the_link_map() {
        let (objects, mut mem) = process();
        assert_eq!(layout_of(&objects, &mut mem), Some(GLIBC_236_MODULE_3));
    }

    #[test]
    fn a_symbol_that_is_not_thread_local_or_an_unlisted_object_publishes_nothing() {
        let (mut objects, mut mem) = process();
        objects[2] = object(&[(TLS_SYMBOL, 0x18, 1)], 0x5000);
        assert_eq!(layout_of(&objects, &mut mem), None);
        objects[2] = object(&[(TLS_SYMBOL, 0x18, STT_TLS)], 0x6000);
        assert_eq!(layout_of(&objects, &mut mem), None);
    }

    #[test]
    fn a_cyclic_link_map_list_ends() {
        let (objects, mut mem) = process();
        let first = BASE + 0x3000;
        put(&mut mem.bytes, first + L_NEXT, &first.to_le_bytes());
        assert_eq!(layout_of(&objects, &mut mem), None);
    }
}
