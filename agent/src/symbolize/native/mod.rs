//! Native code objects: one ELF file mapped by a process → what unwinding and naming its code
//! need.
//!
//! In: an opened ELF file (the agent reads it through `/proc/PID/root`, so container and chroot
//! interpreters work). Out: an [`ElfObject`]: its build ID, load segments, the sections framehop
//! unwinds with (`.eh_frame`, `.eh_frame_hdr`, `.text`, `.got`, kept as slices of one shared
//! mapping of the file), its function symbols, and where CPython's eval loop lies in it. Cached
//! by (device, inode) in [`ObjectCache`], bounded: every process that maps libc or a libpython
//! shares one parse.
//!
//! Function names come from the object's `.dynsym` (exported functions, kept by stripping) and
//! from the first of these that has any: the object's own `.symtab`; else a separate debug file
//! ([`debug_file`]: by build ID, or `.gnu_debuglink`); else MiniDebugInfo ([`minidebuginfo`],
//! `.gnu_debugdata`). A debug file's `.symtab` is the whole one stripping removed, which holds
//! everything MiniDebugInfo has, so it is not decompressed then. Only symbols come from a debug
//! file: its code sections are empty (`NOBITS`), and unwinding uses the object's own tables.

mod debug_file;
mod minidebuginfo;
mod symbols;

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::ops::{Deref, Range};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use goblin::elf::{program_header::PT_LOAD, section_header::SHT_NOBITS, Elf};
#[cfg(target_arch = "x86_64")]
use iced_x86::{Decoder, DecoderOptions};

use super::eval_loop::{eval_ranges, fde_range, is_eval_symbol, UnwindTables};
pub use debug_file::{hex, DebugDirs, DebugSearch, FoundBy, DEFAULT_DEBUG_DIR};
pub use minidebuginfo::MiniDebugInfoError;
pub use symbols::SymbolHit;
use symbols::{functions, Symbol, SymbolTable, Table};

/// Why an object could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NativeObjectError {
    /// The file could not be opened, stat'ed or mapped.
    #[error("cannot read {path}")]
    Io {
        /// the path opened
        path: String,
        /// the cause
        #[source]
        error: std::io::Error,
    },
    /// Not an ELF file goblin can parse.
    #[error("cannot parse {path} as ELF")]
    Parse {
        /// the path opened
        path: String,
        /// the cause
        #[source]
        error: goblin::error::Error,
    },
}

/// The name of a native object as profiles show it: its path in the process and its build ID.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectName {
    /// Path as the process maps it (`/usr/lib/x86_64-linux-gnu/libz.so.1.2.13`), or `[kernel]`.
    pub path: Arc<str>,
    /// GNU build ID, lowercase hex.
    pub build_id: Option<Arc<str>>,
    /// The process's executable (not a shared library): a pprof profile lists its mapping
    /// first, since `go tool pprof` takes the first mapping for the main binary.
    pub executable: bool,
}

impl ObjectName {
    /// The last path component (`libz.so.1.2.13`).
    pub fn file_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

/// A byte range of a mapped file, shared: what framehop reads sections through.
#[derive(Debug, Clone)]
pub struct SectionBytes {
    map: Arc<memmap2::Mmap>,
    range: Range<usize>,
}

impl Deref for SectionBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.map.get(self.range.clone()).unwrap_or(&[])
    }
}

/// One section: its link-time address range and its bytes.
#[derive(Debug, Clone)]
pub struct Section {
    /// link-time (stated virtual memory) addresses
    pub svma: Range<u64>,
    /// the bytes (empty for a section without file contents)
    pub bytes: SectionBytes,
}

/// What the agent keeps of one ELF object.
#[derive(Debug)]
pub struct ElfObject {
    /// build ID, lowercase hex
    pub build_id: Option<Arc<str>>,
    /// PT_LOAD segments: (p_offset, p_vaddr)
    pub loads: Vec<(u64, u64)>,
    /// `.text`
    pub text: Option<Section>,
    /// `.eh_frame`
    pub eh_frame: Option<Section>,
    /// `.eh_frame_hdr`
    pub eh_frame_hdr: Option<Section>,
    /// `.got` (address range only matters)
    pub got: Option<Range<u64>>,
    /// where the names beyond `.dynsym` came from
    pub symbol_source: SymbolSource,
    /// function symbols by start address
    symbols: SymbolTable,
    /// link-time ranges of CPython's eval loop (`_PyEval_EvalFrameDefault` and its `.cold`
    /// parts): a native frame in there runs Python frames
    eval_ranges: Vec<Range<u64>>,
    /// heap bytes held (the symbol table, counted once at the parse); the sections are mapped
    /// from the file, shared with the page cache
    heap_bytes: u64,
}

/// Where an object's names beyond its `.dynsym` came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SymbolSource {
    /// its own `.symtab` (not stripped)
    OwnSymtab,
    /// a separate debug file's `.symtab`
    DebugFile {
        /// the file as opened (under `/proc/PID/root` or the host's root)
        path: PathBuf,
        /// how it was found
        found_by: FoundBy,
    },
    /// the `.symtab` of its `.gnu_debugdata`
    MiniDebugInfo,
    /// nowhere: stripped, with no debug file found and no MiniDebugInfo (or unreadable
    /// MiniDebugInfo); its other functions are named `object+offset`
    DynsymOnly,
}

/// Counters of where names came from, over every object parsed by this process.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SymbolSourceStats {
    /// objects named by their own `.symtab`
    pub own_symtab: u64,
    /// objects named by a separate debug file
    pub debug_file: u64,
    /// objects named by MiniDebugInfo
    pub mini_debug_info: u64,
    /// stripped objects with `.dynsym` alone
    pub dynsym_only: u64,
    /// `.gnu_debugdata` sections that could not be read (bad xz, too large, not ELF)
    pub mini_debug_info_errors: u64,
    /// files where a debug file was looked for that were not the object's (another build ID,
    /// another CRC-32, not ELF)
    pub debug_files_rejected: u64,
}

impl SymbolSourceStats {
    /// Objects by where their names came from, with the metric's `source` label values.
    pub fn objects_by_source(&self) -> [(&'static str, u64); 4] {
        [
            ("own_symtab", self.own_symtab),
            ("debug_file", self.debug_file),
            ("mini_debug_info", self.mini_debug_info),
            ("dynsym_only", self.dynsym_only),
        ]
    }

    /// Symbol files refused, with the metric's `kind` label values.
    pub fn refused_by_kind(&self) -> [(&'static str, u64); 2] {
        [
            ("mini_debug_info", self.mini_debug_info_errors),
            ("debug_file", self.debug_files_rejected),
        ]
    }
}

impl std::fmt::Display for SymbolSourceStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "objects named by their own .symtab {}, by a separate debug file {}, by MiniDebugInfo {}, by .dynsym alone {}; {} MiniDebugInfo sections unreadable, {} debug files rejected (another build ID or CRC)",
            self.own_symtab,
            self.debug_file,
            self.mini_debug_info,
            self.dynsym_only,
            self.mini_debug_info_errors,
            self.debug_files_rejected
        )
    }
}

/// [`SymbolSourceStats`] as they are counted, process-wide like the [`ObjectCache`].
#[derive(Debug, Default)]
struct SourceCounters {
    own_symtab: AtomicU64,
    debug_file: AtomicU64,
    mini_debug_info: AtomicU64,
    dynsym_only: AtomicU64,
    mini_debug_info_errors: AtomicU64,
    debug_files_rejected: AtomicU64,
}

static SOURCE_COUNTERS: SourceCounters = SourceCounters {
    own_symtab: AtomicU64::new(0),
    debug_file: AtomicU64::new(0),
    mini_debug_info: AtomicU64::new(0),
    dynsym_only: AtomicU64::new(0),
    mini_debug_info_errors: AtomicU64::new(0),
    debug_files_rejected: AtomicU64::new(0),
};

/// Where the names of the objects this process parsed came from.
pub fn symbol_source_stats() -> SymbolSourceStats {
    let c = &SOURCE_COUNTERS;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    SymbolSourceStats {
        own_symtab: get(&c.own_symtab),
        debug_file: get(&c.debug_file),
        mini_debug_info: get(&c.mini_debug_info),
        dynsym_only: get(&c.dynsym_only),
        mini_debug_info_errors: get(&c.mini_debug_info_errors),
        debug_files_rejected: get(&c.debug_files_rejected),
    }
}

fn count(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl ElfObject {
    /// Parses the object in `file` (opened as `path`), looking for its debug file as `search`
    /// says if it is stripped.
    pub fn read(
        path: &str,
        file: &File,
        search: Option<&DebugSearch<'_>>,
    ) -> Result<ElfObject, NativeObjectError> {
        // SAFETY: a read-only private mapping; a file truncated under us can fault a read, the
        // risk every profiler that reads mapped objects takes (the discovery stage does too).
        let map = unsafe { memmap2::Mmap::map(file) }.map_err(|error| NativeObjectError::Io {
            path: path.to_owned(),
            error,
        })?;
        Self::parse(Arc::new(map), search).map_err(|error| NativeObjectError::Parse {
            path: path.to_owned(),
            error,
        })
    }

    /// Parses an ELF image; a stripped one's debug file is looked for as `search` says (`None`:
    /// not looked for).
    pub fn parse(
        map: Arc<memmap2::Mmap>,
        search: Option<&DebugSearch<'_>>,
    ) -> Result<ElfObject, goblin::error::Error> {
        let elf = Elf::parse(&map)?;
        let section = |name: &str| -> Option<Section> {
            let sh = elf
                .section_headers
                .iter()
                .find(|sh| elf.shdr_strtab.get_at(sh.sh_name) == Some(name))?;
            let svma = sh.sh_addr..sh.sh_addr.checked_add(sh.sh_size)?;
            let range = if sh.sh_type == SHT_NOBITS {
                0..0
            } else {
                let start = usize::try_from(sh.sh_offset).ok()?;
                start..start.checked_add(usize::try_from(sh.sh_size).ok()?)?
            };
            if range.end > map.len() {
                return None;
            }
            Some(Section {
                svma,
                bytes: SectionBytes {
                    map: Arc::clone(&map),
                    range,
                },
            })
        };
        let loads = elf
            .program_headers
            .iter()
            .filter(|ph| ph.p_type == PT_LOAD)
            .map(|ph| (ph.p_offset, ph.p_vaddr))
            .collect();
        let build_id = debug_file::build_id(&elf, &map);
        let (symbol_source, mut symbols) =
            static_symbols(&elf, build_id.as_deref(), search, section);
        symbols.extend(functions(&elf, Table::Dynamic));
        let symbols = SymbolTable::new(symbols);
        let text = section(".text");
        let eh_frame = section(".eh_frame");
        let eh_frame_hdr = section(".eh_frame_hdr");
        let named_eval = symbols
            .iter()
            .filter(|s| is_eval_symbol(&s.name))
            .map(|s| s.start..s.end.max(s.start + 1))
            .collect();
        let unwind =
            eh_frame
                .as_ref()
                .zip(eh_frame_hdr.as_ref())
                .map(|(eh_frame, eh_frame_hdr)| UnwindTables {
                    eh_frame,
                    eh_frame_hdr,
                });
        let eval_ranges = eval_ranges(named_eval, text.as_ref(), unwind);
        let heap_bytes = symbols.heap_bytes();
        Ok(ElfObject {
            build_id: build_id.map(Arc::from),
            loads,
            text,
            eh_frame,
            eh_frame_hdr,
            got: section(".got").map(|s| s.svma),
            symbol_source,
            symbols,
            eval_ranges,
            heap_bytes,
        })
    }

    /// Heap bytes the object holds: its symbol table (its sections are mapped from the file).
    pub fn heap_bytes(&self) -> u64 {
        self.heap_bytes
    }

    /// The function holding link-time address `svma`. A symbol without a size covers nothing
    /// beyond its first byte: naming an address after it would guess, and a wrong name is
    /// worse than `object+offset`.
    pub fn symbol(&self, svma: u64) -> Option<SymbolHit<'_>> {
        self.symbols.lookup(svma)
    }

    /// How many function symbols the object has, from all its sources.
    pub fn symbol_count(&self) -> usize {
        self.symbols.len()
    }

    /// The start of the code (function, or a part the compiler split off one) that holds
    /// link-time address `svma`, from its unwind entry: what names an address no symbol
    /// covers, so that the samples of one function without a symbol add up.
    pub fn code_start(&self, svma: u64) -> Option<u64> {
        let unwind = UnwindTables {
            eh_frame: self.eh_frame.as_ref()?,
            eh_frame_hdr: self.eh_frame_hdr.as_ref()?,
        };
        Some(fde_range(&unwind, svma)?.start)
    }

    /// Whether an unwind entry (`.eh_frame`) covers link-time address `svma`: where none does
    /// (hand-written assembly such as BLAS kernels), the caller can only be guessed.
    pub fn has_cfi(&self, svma: u64) -> bool {
        let (Some(eh_frame), Some(eh_frame_hdr)) = (&self.eh_frame, &self.eh_frame_hdr) else {
            return false;
        };
        let unwind = UnwindTables {
            eh_frame,
            eh_frame_hdr,
        };
        fde_range(&unwind, svma).is_some_and(|r| r.contains(&svma))
    }

    /// Whether link-time address `svma` directly follows a near call in `.text`: what every
    /// return address does, and a stray code address on the stack seldom does.
    pub fn follows_call(&self, svma: u64) -> bool {
        let Some(text) = &self.text else {
            return false;
        };
        let Some(end) = svma
            .checked_sub(text.svma.start)
            .and_then(|o| usize::try_from(o).ok())
        else {
            return false;
        };
        let start = end.saturating_sub(MAX_CALL_LEN);
        text.bytes
            .get(start..end)
            .is_some_and(|before| ends_with_call(before, svma))
    }

    /// Whether link-time address `svma` lies in CPython's eval loop.
    pub fn in_eval_loop(&self, svma: u64) -> bool {
        self.eval_ranges.iter().any(|r| r.contains(&svma))
    }

    /// Whether the object has CPython's eval loop at all.
    pub fn has_eval_loop(&self) -> bool {
        !self.eval_ranges.is_empty()
    }
}

/// Longest near call: `call [r12+disp32]`, REX prefix and SIB byte, 8 bytes (`call rax` is 2).
#[cfg(target_arch = "x86_64")]
const MAX_CALL_LEN: usize = 8;
/// A64 instructions are one word each.
#[cfg(target_arch = "aarch64")]
const MAX_CALL_LEN: usize = super::aarch64::INSTRUCTION_LEN;

/// Whether the code `before` (the bytes right before address `at`) ends with a call.
#[cfg(target_arch = "aarch64")]
fn ends_with_call(before: &[u8], _at: u64) -> bool {
    super::aarch64::ends_with_call(before)
}

/// Whether the code `before` (the bytes right before address `at`) ends with a near call
/// instruction, direct or indirect: the bytes before a return address.
#[cfg(target_arch = "x86_64")]
fn ends_with_call(before: &[u8], at: u64) -> bool {
    (2..=before.len().min(MAX_CALL_LEN)).any(|len| {
        let code = &before[before.len() - len..];
        let mut decoder = Decoder::with_ip(64, code, at - len as u64, DecoderOptions::NONE);
        let ins = decoder.decode();
        !ins.is_invalid() && ins.len() == len && (ins.is_call_near() || ins.is_call_near_indirect())
    })
}

/// The function symbols of `elf` beyond its `.dynsym`, and where they came from: its own
/// `.symtab`, else its debug file's (looked for as `search` says), else its MiniDebugInfo's.
/// `section` gives a section of `elf` by name.
fn static_symbols(
    elf: &Elf<'_>,
    build_id: Option<&str>,
    search: Option<&DebugSearch<'_>>,
    section: impl Fn(&str) -> Option<Section>,
) -> (SymbolSource, Vec<Symbol>) {
    let own: Vec<Symbol> = functions(elf, Table::Static).collect();
    if !own.is_empty() {
        count(&SOURCE_COUNTERS.own_symtab, 1);
        return (SymbolSource::OwnSymtab, own);
    }
    let link = section(".gnu_debuglink").and_then(|s| debug_file::DebugLink::parse(&s.bytes));
    if let Some(found) = search.and_then(|s| debug_file_symbols(s, build_id, link.as_ref())) {
        count(&SOURCE_COUNTERS.debug_file, 1);
        return found;
    }
    if let Some(data) = section(".gnu_debugdata") {
        match minidebuginfo::symbols(&data.bytes) {
            Ok(symbols) => {
                count(&SOURCE_COUNTERS.mini_debug_info, 1);
                return (SymbolSource::MiniDebugInfo, symbols);
            }
            Err(error) => {
                count(&SOURCE_COUNTERS.mini_debug_info_errors, 1);
                let object = search.map(|s| s.object_path.display().to_string());
                let cause = std::error::Error::source(&error).map(ToString::to_string);
                tracing::debug!(object, cause, "MiniDebugInfo ignored: {error}");
            }
        }
    }
    count(&SOURCE_COUNTERS.dynsym_only, 1);
    (SymbolSource::DynsymOnly, Vec::new())
}

/// The function symbols of the debug file `search` finds for an object with `build_id` and
/// `link`, if it has any.
fn debug_file_symbols(
    search: &DebugSearch<'_>,
    build_id: Option<&str>,
    link: Option<&debug_file::DebugLink>,
) -> Option<(SymbolSource, Vec<Symbol>)> {
    let mut rejected = debug_file::Rejected::default();
    let found = debug_file::find(search, build_id, link, &mut rejected);
    count(
        &SOURCE_COUNTERS.debug_files_rejected,
        rejected.build_id + rejected.crc,
    );
    let file = found?;
    let debug = match Elf::parse(&file.map) {
        Ok(debug) => debug,
        Err(error) => {
            // Its build ID or CRC matched, so the file is the object's: damaged.
            count(&SOURCE_COUNTERS.debug_files_rejected, 1);
            tracing::debug!(path = %file.path.display(), "debug file does not parse: {error}");
            return None;
        }
    };
    let symbols: Vec<Symbol> = functions(&debug, Table::Static).collect();
    let source = SymbolSource::DebugFile {
        path: file.path.clone(),
        found_by: file.found_by,
    };
    (!symbols.is_empty()).then_some((source, symbols))
}

/// A symbol name as profiles show it: C++ and Rust names demangled, C names as they are.
pub fn demangle(name: &str) -> String {
    if name.starts_with("_R") || name.starts_with("_ZN") {
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            // `{:#}` drops the hash suffix of legacy Rust names.
            let text = format!("{d:#}");
            if !name.starts_with("_ZN") || !text.contains(' ') {
                return text;
            }
        }
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(text) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return text;
            }
        }
    }
    name.to_owned()
}

/// Objects parsed so far, by the (device, inode) of their file, shared by every process.
#[derive(Debug, Default)]
pub struct ObjectCache {
    objects: HashMap<(u64, u64), Arc<ElfObject>>,
    /// insertion order, for eviction
    order: VecDeque<(u64, u64)>,
}

/// Objects kept at most; a host with more distinct native objects in use re-parses some.
const MAX_OBJECTS: usize = 512;

static OBJECTS: LazyLock<Mutex<ObjectCache>> = LazyLock::new(Mutex::default);

impl ObjectCache {
    /// The object in `file` (opened as `path`), parsed once per (device, inode); a stripped
    /// one's debug file is looked for as `search` says at that parse. The first process to map
    /// an object decides where its debug file is found: the same file in another container
    /// shares the parse.
    pub fn get(
        path: &str,
        file: &File,
        search: &DebugSearch<'_>,
    ) -> Result<Arc<ElfObject>, NativeObjectError> {
        let meta = file.metadata().map_err(|error| NativeObjectError::Io {
            path: path.to_owned(),
            error,
        })?;
        let key = (meta.dev(), meta.ino());
        if let Some(o) = Self::lock().objects.get(&key) {
            return Ok(Arc::clone(o));
        }
        let object = Arc::new(ElfObject::read(path, file, Some(search))?);
        let mut cache = Self::lock();
        if cache.objects.len() >= MAX_OBJECTS {
            if let Some(old) = cache.order.pop_front() {
                cache.objects.remove(&old);
            }
        }
        cache.order.push_back(key);
        cache.objects.insert(key, Arc::clone(&object));
        Ok(object)
    }

    /// Objects held, and the heap bytes they hold: the native objects of every process, shared.
    pub fn memory() -> (usize, u64) {
        let cache = Self::lock();
        let bytes = cache.objects.values().map(|o| o.heap_bytes()).sum();
        (cache.objects.len(), bytes)
    }

    fn lock() -> std::sync::MutexGuard<'static, ObjectCache> {
        // A panic while holding it leaves a consistent map: keep using it.
        OBJECTS.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_cpp_and_rust_and_keeps_c() {
        assert_eq!(demangle("deflate"), "deflate");
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_Zgarbage"), "_Zgarbage");
    }

    // x86_64 code; symbolize/aarch64.rs tests aarch64's.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_return_address_follows_a_call_of_any_form() {
        let at = 0x1000;
        let mov_rbx_rsp = [0x48, 0x89, 0xe3];
        for call in [
            &[0xe8, 0x10, 0x20, 0x00, 0x00][..],               // call rel32
            &[0xff, 0xd0],                                     // call rax
            &[0x41, 0xff, 0xd3],                               // call r11
            &[0xff, 0x15, 0x10, 0x20, 0x00, 0x00],             // call [rip+disp32]
            &[0xff, 0x54, 0x24, 0x08],                         // call [rsp+8]
            &[0x41, 0xff, 0x94, 0x24, 0x00, 0x01, 0x00, 0x00], // call [r12+0x100]
        ] {
            // What precedes the call does not matter.
            let before = [&mov_rbx_rsp[..], call].concat();
            assert!(ends_with_call(&before, at), "{call:02x?}");
        }
        for not_a_call in [
            &[0x48, 0x89, 0xe5][..],               // mov rbp, rsp
            &[0x90, 0x90, 0x90, 0x90, 0x90],       // nops
            &[0xe9, 0x10, 0x20, 0x00, 0x00],       // jmp rel32
            &[0xff, 0xe0],                         // jmp rax
            &[0xe8, 0x10, 0x20, 0x00, 0x00, 0x90], // a call, then one more byte
            &[0xd0],                               // too short for any call
        ] {
            assert!(!ends_with_call(not_a_call, at), "{not_a_call:02x?}");
        }
    }

    #[test]
    fn reads_this_test_binary_with_symbols_and_unwind_sections() {
        let exe = std::env::current_exe().unwrap();
        let file = File::open(&exe).unwrap();
        let dirs = DebugDirs::default();
        let search = DebugSearch {
            pid: std::process::id(),
            object_path: &exe,
            dirs: &dirs,
        };
        let o = ObjectCache::get(&exe.to_string_lossy(), &file, &search).unwrap();
        assert_eq!(o.symbol_source, SymbolSource::OwnSymtab);
        assert!(o.eh_frame.is_some() && o.eh_frame_hdr.is_some() && o.text.is_some());
        assert!(!o.loads.is_empty());
        assert!(!o.has_eval_loop());
        // Some function in .text is named, and an address past every symbol is not.
        let text = o.text.as_ref().unwrap().svma.clone();
        let named = (text.start..text.end)
            .step_by(4096)
            .filter(|a| o.symbol(*a).is_some())
            .count();
        assert!(named > 0);
        assert_eq!(o.symbol(u64::MAX), None);
        // An address inside a function: its unwind entry starts where its symbol does (what
        // names the addresses of stripped functions).
        let inside: Vec<(u64, u64)> = (text.start..text.end)
            .step_by(4096)
            .filter_map(|a| {
                o.symbol(a)
                    .filter(|h| h.offset > 0)
                    .map(|h| (a, a - h.offset))
            })
            .collect();
        assert!(!inside.is_empty());
        let agree = inside
            .iter()
            .filter(|(a, start)| o.code_start(*a) == Some(*start))
            .count();
        assert!(
            agree * 10 >= inside.len() * 9,
            "{agree} of {}",
            inside.len()
        );
        // The second lookup is the same parse.
        let again = ObjectCache::get(&exe.to_string_lossy(), &file, &search).unwrap();
        assert!(Arc::ptr_eq(&o, &again));
    }
}
