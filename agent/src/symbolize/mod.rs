//! Symbolize stage: code object + instruction pointer → (qualified name, file, line).
//!
//! In: remote code-object addresses and instruction pointers from the unwinder. Out: [`Frame`]s.
//! Caches: one [`CodeInfo`] per code-object address (names, first line, decoded line table).
//! Code objects are freed and their addresses reused, so the cache is invalidated by the
//! interpreter's `code_object_generation` where it exists (3.14+); before 3.14 each entry is
//! re-validated once per sample against a fingerprint of the code object's header.

#[cfg(any(target_arch = "aarch64", test))]
mod aarch64;
mod bytecode;
mod eval_loop;
mod file_path;
mod frame;
pub mod kernel;
mod linetable;
pub mod native;
mod strings;

// foldhash: these maps are looked up several times per sample, keyed by addresses.
use foldhash::{HashMap, HashMapExt};
use std::collections::BTreeMap;
use std::sync::Arc;

pub use bytecode::bytecode_base;
pub use frame::{task_code_name, CodeName, Frame, FrameKind};
pub use linetable::{LineRange, LineTable};
pub use strings::{read_bytes, read_str, ObjectError};

use crate::memory::{ProcessMemory, StructBytes};
use crate::offsets::{BytecodeLayout, Offsets};

/// What we keep of one code object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeInfo {
    /// `co_qualname`, `co_filename` and `co_firstlineno`
    pub name: Arc<CodeName>,
    /// bytecode length in code units (`ob_size`)
    pub len_units: u64,
    /// decoded `co_linetable`
    pub lines: LineTable,
}

/// Header words that change when a code address is reused by another code object.
type Fingerprint = [u64; 5];

#[derive(Debug)]
struct CodeEntry {
    info: Arc<CodeInfo>,
    fingerprint: Fingerprint,
    /// sample epoch in which the fingerprint was last checked
    checked_epoch: u64,
}

/// Counters of the code-object cache.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SymbolizerStats {
    /// lookups answered from the cache
    pub hits: u64,
    /// code objects read from the target
    pub misses: u64,
    /// entries dropped because their address now holds another code object
    pub stale: u64,
    /// whole-cache flushes on a `code_object_generation` change
    pub flushes: u64,
}

/// The code-object cache and line lookup for one process.
#[derive(Debug)]
pub struct Symbolizer {
    offsets: Offsets,
    /// runtime address of `PyCode_Type`, to tell code objects from anything else
    code_type: u64,
    cache: HashMap<u64, CodeEntry>,
    /// where each cached code object's bytecode starts → the code object's address: which code
    /// object an instruction pointer is in ([`Symbolizer::code_running_at`])
    by_bytecode: BTreeMap<u64, u64>,
    generation: Option<u64>,
    epoch: u64,
    max_entries: usize,
    stats: SymbolizerStats,
    /// heap bytes of the cached entries ([`code_entry_bytes`]), kept as they come and go
    bytes: u64,
}

/// Heap bytes one cached code object holds: its entry in both maps, its names and its decoded
/// line table (names shared with frames in profiles are counted here once).
fn code_entry_bytes(info: &CodeInfo) -> u64 {
    use std::mem::size_of;
    let maps = size_of::<(u64, CodeEntry)>() + size_of::<(u64, u64)>() + 16;
    let name = size_of::<CodeName>() + info.name.function.len() + info.name.file.len();
    (maps + size_of::<CodeInfo>() + name + info.lines.heap_bytes()) as u64
}

impl Symbolizer {
    /// A symbolizer for a process with layout `offsets` whose `PyCode_Type` is at `code_type`.
    pub fn new(offsets: Offsets, code_type: u64) -> Symbolizer {
        Symbolizer {
            offsets,
            code_type,
            cache: HashMap::new(),
            by_bytecode: BTreeMap::new(),
            generation: None,
            epoch: 0,
            max_entries: 65536,
            stats: SymbolizerStats::default(),
            bytes: 0,
        }
    }

    /// Starts a sample. `generation` is the interpreter's `code_object_generation` (3.14+):
    /// a change means some code object was freed, so any cached address may now be another one.
    pub fn begin_sample(&mut self, generation: Option<u64>) {
        self.epoch += 1;
        if let Some(g) = generation {
            if self.generation.is_some_and(|old| old != g) {
                self.clear();
                self.stats.flushes += 1;
            }
            self.generation = Some(g);
        }
    }

    /// Cache counters.
    pub fn stats(&self) -> SymbolizerStats {
        self.stats
    }

    /// Number of cached code objects.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// The header word that says how long the bytecode is: its length (3.11+) or the bytes
    /// object holding it (3.6–3.10).
    fn length_word(&self, header: &[u8]) -> u64 {
        match self.offsets.code_object.bytecode {
            BytecodeLayout::Inline { ob_size, .. } => header.u64_at(ob_size),
            BytecodeLayout::Object { co_code } => header.u64_at(co_code),
        }
    }

    /// The bytecode's length in code units.
    fn len_units(&self, mem: &mut impl ProcessMemory, header: &[u8]) -> Result<u64, ObjectError> {
        let word = self.length_word(header);
        Ok(match self.offsets.code_object.bytecode {
            BytecodeLayout::Inline { .. } => word,
            BytecodeLayout::Object { .. } => strings::read_bytes_len(mem, &self.offsets, word)? / 2,
        })
    }

    fn fingerprint(&self, header: &[u8]) -> Fingerprint {
        let c = &self.offsets.code_object;
        [
            header.u64_at(self.offsets.pyobject.ob_type),
            header.u64_at(c.filename),
            header.u64_at(c.qualname),
            header.u64_at(c.linetable),
            header.u32_at(c.firstlineno) as u64 | self.length_word(header) << 32,
        ]
    }

    /// The code object at `addr` as last read, without validating it: for a stack resolved
    /// through [`Symbolizer::code_info`] a moment ago.
    pub fn cached_code_info(&self, addr: u64) -> Option<Arc<CodeInfo>> {
        self.cache.get(&addr).map(|entry| entry.info.clone())
    }

    /// The code object at `addr`, or `Ok(None)` if `addr` is not a code object (an entry
    /// frame's `None`, a torn read).
    pub fn code_info(
        &mut self,
        mem: &mut impl ProcessMemory,
        addr: u64,
    ) -> Result<Option<Arc<CodeInfo>>, ObjectError> {
        if addr == 0 || !addr.is_multiple_of(8) {
            return Ok(None);
        }
        let need_check = self.generation.is_none();
        if let Some(entry) = self.cache.get(&addr) {
            if !need_check || entry.checked_epoch == self.epoch {
                self.stats.hits += 1;
                return Ok(Some(entry.info.clone()));
            }
        }
        let mut header = [0u8; 512];
        let header = &mut header[..self.offsets.code_read_len().min(512)];
        mem.read(addr, header)?;
        if header.u64_at(self.offsets.pyobject.ob_type) != self.code_type {
            return Ok(None);
        }
        let fingerprint = self.fingerprint(header);
        if let Some(entry) = self.cache.get_mut(&addr) {
            if entry.fingerprint == fingerprint {
                entry.checked_epoch = self.epoch;
                self.stats.hits += 1;
                return Ok(Some(entry.info.clone()));
            }
            self.stats.stale += 1;
        }
        self.stats.misses += 1;
        let c = &self.offsets.code_object;
        let o = &self.offsets;
        let first_line = header.u32_at(c.firstlineno);
        let table = read_bytes(mem, o, header.u64_at(c.linetable))?;
        let len_units = self.len_units(mem, header)?;
        let info = Arc::new(CodeInfo {
            name: Arc::new(CodeName::from_parts(
                read_str(mem, o, header.u64_at(c.qualname))?.into(),
                file_path::tidy(read_str(mem, o, header.u64_at(c.filename))?).into(),
                first_line,
                None,
            )),
            len_units,
            lines: LineTable::decode_as(o.frame.line_table, &table, first_line),
        });
        if self.cache.len() >= self.max_entries {
            self.clear();
        }
        if let BytecodeLayout::Inline {
            co_code_adaptive, ..
        } = self.offsets.code_object.bytecode
        {
            self.by_bytecode.insert(addr + co_code_adaptive, addr);
        }
        self.bytes += code_entry_bytes(&info);
        let replaced = self.cache.insert(
            addr,
            CodeEntry {
                info: info.clone(),
                fingerprint,
                checked_epoch: self.epoch,
            },
        );
        if let Some(old) = replaced {
            self.bytes = self.bytes.saturating_sub(code_entry_bytes(&old.info));
        }
        Ok(Some(info))
    }

    fn clear(&mut self) {
        self.cache.clear();
        self.by_bytecode.clear();
        self.bytes = 0;
    }

    /// Heap bytes of the cached code objects (bounded: the cache holds at most 65,536 and
    /// starts over when full).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The cached code object whose own bytecode holds `ip`, with its address: what a frame
    /// whose executable was cleared when it returned (3.14+) was running. Only where the
    /// interpreter's `code_object_generation` vouches for the cache (3.14+), since a freed code
    /// object's memory may hold another one by now; never a thread-local bytecode copy.
    pub fn code_running_at(&self, ip: u64) -> Option<(u64, Arc<CodeInfo>)> {
        self.generation?;
        let (&start, &addr) = self.by_bytecode.range(..=ip).next_back()?;
        let entry = self.cache.get(&addr)?;
        let len = entry.info.len_units.checked_mul(2)?;
        (ip - start < len).then(|| (addr, entry.info.clone()))
    }

    /// The frame for `info` executing at `ip`, with the bytecode starting at `bytecode_base`.
    pub fn frame(&self, info: &CodeInfo, ip: u64, bytecode_base: u64) -> Frame {
        // Signed: before 3.13 a frame that has not started points one before its bytecode
        // (`prev_instr`, 3.11/3.12) or holds `f_lasti` -1 (3.6–3.10, where the base is 0).
        let line = if (ip.wrapping_sub(bytecode_base) as i64) < 0 {
            self.offsets
                .frame
                .ip_is_prev_instr
                .then_some(info.name.first_line)
        } else {
            let addrq = (ip - bytecode_base) / 2;
            if addrq < info.len_units {
                info.lines.line_at(addrq as u32)
            } else {
                None // torn read: an IP outside this code object
            }
        };
        Frame {
            code: Arc::clone(&info.name),
            line,
            kind: FrameKind::Python,
        }
    }
}
