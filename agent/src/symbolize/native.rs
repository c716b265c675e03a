//! Native code objects: one ELF file mapped by a process → what unwinding and naming its code
//! need.
//!
//! In: an opened ELF file (the agent reads it through `/proc/PID/root`, so container and chroot
//! interpreters work). Out: an [`ElfObject`]: its build ID, load segments, the sections framehop
//! unwinds with (`.eh_frame`, `.eh_frame_hdr`, `.text`, `.got`, kept as slices of one shared
//! mapping of the file), its function symbols (`.symtab` and `.dynsym`), and where CPython's
//! eval loop lies in it. Cached by (device, inode) in [`ObjectCache`], bounded: every process
//! that maps libc or a libpython shares one parse.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::ops::{Deref, Range};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, LazyLock, Mutex};

use goblin::elf::{program_header::PT_LOAD, section_header::SHT_NOBITS, sym, Elf};

use super::eval_loop::{eval_ranges, fde_range, is_eval_symbol, UnwindTables};

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

/// A function symbol: link-time range and raw (mangled) name.
#[derive(Debug, Clone)]
struct Symbol {
    start: u64,
    end: u64,
    name: Box<str>,
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
    /// function symbols by start address
    symbols: Vec<Symbol>,
    /// link-time ranges of CPython's eval loop (`_PyEval_EvalFrameDefault` and its `.cold`
    /// parts): a native frame in there runs Python frames
    eval_ranges: Vec<Range<u64>>,
}

/// The symbol whose code holds an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymbolHit<'a> {
    /// raw (possibly mangled) name
    pub name: &'a str,
    /// offset of the address from the symbol's start
    pub offset: u64,
}

impl ElfObject {
    /// Parses the object in `file` (opened as `path`).
    pub fn read(path: &str, file: &File) -> Result<ElfObject, NativeObjectError> {
        // SAFETY: a read-only private mapping; a file truncated under us can fault a read, the
        // risk every profiler that reads mapped objects takes (the discovery stage does too).
        let map = unsafe { memmap2::Mmap::map(file) }.map_err(|error| NativeObjectError::Io {
            path: path.to_owned(),
            error,
        })?;
        Self::parse(Arc::new(map)).map_err(|error| NativeObjectError::Parse {
            path: path.to_owned(),
            error,
        })
    }

    /// Parses an ELF image.
    pub fn parse(map: Arc<memmap2::Mmap>) -> Result<ElfObject, goblin::error::Error> {
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
        let build_id = elf
            .iter_note_headers(&map)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .find(|n| n.n_type == goblin::elf::note::NT_GNU_BUILD_ID && n.name == "GNU")
            .map(|n| Arc::from(hex(n.desc)));

        let mut symbols = Vec::new();
        let tables = [(&elf.syms, &elf.strtab), (&elf.dynsyms, &elf.dynstrtab)];
        for (syms, strtab) in tables {
            for s in syms.iter() {
                let kind = s.st_type();
                if !(kind == sym::STT_FUNC || kind == sym::STT_GNU_IFUNC)
                    || s.st_shndx == 0
                    || s.st_value == 0
                {
                    continue;
                }
                let Some(name) = strtab.get_at(s.st_name).filter(|n| !n.is_empty()) else {
                    continue;
                };
                symbols.push(Symbol {
                    start: s.st_value,
                    end: s.st_value.saturating_add(s.st_size),
                    name: name.into(),
                });
            }
        }
        symbols.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
        // .symtab and .dynsym name most functions twice.
        symbols.dedup_by(|b, a| a.start == b.start);
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
        Ok(ElfObject {
            build_id,
            loads,
            text,
            eh_frame,
            eh_frame_hdr,
            got: section(".got").map(|s| s.svma),
            symbols,
            eval_ranges,
        })
    }

    /// The function holding link-time address `svma`. A symbol without a size covers nothing
    /// beyond its first byte: naming an address after it would guess, and a wrong name is
    /// worse than `object+offset`.
    pub fn symbol(&self, svma: u64) -> Option<SymbolHit<'_>> {
        let i = self.symbols.partition_point(|s| s.start <= svma);
        let s = self.symbols.get(i.checked_sub(1)?)?;
        (svma < s.end || svma == s.start).then(|| SymbolHit {
            name: &s.name,
            offset: svma - s.start,
        })
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

    /// Whether link-time address `svma` lies in CPython's eval loop.
    pub fn in_eval_loop(&self, svma: u64) -> bool {
        self.eval_ranges.iter().any(|r| r.contains(&svma))
    }

    /// Whether the object has CPython's eval loop at all.
    pub fn has_eval_loop(&self) -> bool {
        !self.eval_ranges.is_empty()
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
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
    /// The object in `file` (opened as `path`), parsed once per (device, inode).
    pub fn get(path: &str, file: &File) -> Result<Arc<ElfObject>, NativeObjectError> {
        let meta = file.metadata().map_err(|error| NativeObjectError::Io {
            path: path.to_owned(),
            error,
        })?;
        let key = (meta.dev(), meta.ino());
        if let Some(o) = Self::lock().objects.get(&key) {
            return Ok(Arc::clone(o));
        }
        let object = Arc::new(ElfObject::read(path, file)?);
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

    #[test]
    fn reads_this_test_binary_with_symbols_and_unwind_sections() {
        let exe = std::env::current_exe().unwrap();
        let file = File::open(&exe).unwrap();
        let o = ObjectCache::get(&exe.to_string_lossy(), &file).unwrap();
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
        let again = ObjectCache::get(&exe.to_string_lossy(), &file).unwrap();
        assert!(Arc::ptr_eq(&o, &again));
    }
}
