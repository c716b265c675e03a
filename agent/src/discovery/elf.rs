//! What discovery needs from an ELF object: where `_PyRuntime` (3.6's statics instead),
//! `PyCode_Type` and `Py_Version` are, and the PT_LOAD segments to compute the load bias from the maps.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

pub(super) use super::elf_headers::DefinedSymbol;
use super::elf_headers::{ElfHeaders, SymbolTable};
use super::runtime_statics::{self, RuntimeStatics};
use super::MapsEntry;

/// Reading or parsing an object failed. The cause is part of the message (discovery lists these
/// by `to_string()`), so it is a plain field rather than a `#[source]` that would print twice.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The file could not be read.
    #[error("cannot read {path}: {error}")]
    Io {
        /// path tried
        path: String,
        /// cause
        error: std::io::Error,
    },
    /// Not a parseable ELF file.
    #[error("cannot parse {path} as ELF: {error}")]
    Parse {
        /// path tried
        path: String,
        /// cause
        error: goblin::error::Error,
    },
}

/// Addresses (link-time virtual addresses) of the symbols discovery needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfFacts {
    /// `_PyRuntime` / `.PyRuntime`
    pub runtime_vaddr: u64,
    /// `PyCode_Type`
    pub code_type_vaddr: u64,
    /// `Py_Version` (absent in some stripped builds)
    pub py_version_vaddr: Option<u64>,
    /// 3.6, which has no `_PyRuntime`: its runtime globals, each a static of its own
    /// (`runtime_vaddr` is then `interp_head`'s)
    pub statics: Option<RuntimeStatics>,
    /// `ET_DYN` (a shared library or PIE)
    pub is_shared_object: bool,
    /// PT_LOAD segments: (p_offset, p_vaddr)
    pub loads: Vec<(u64, u64)>,
}

const PAGE_MASK: u64 = !0xfff;

impl ElfFacts {
    /// Load bias: how far the object was moved from its link-time addresses, found from a
    /// maps line whose file offset is the (page-aligned) offset of one of its PT_LOAD segments.
    pub fn load_bias(&self, entries: &[MapsEntry]) -> Option<u64> {
        load_bias(&self.loads, entries)
    }
}

/// Load bias of an object with PT_LOAD segments `loads` (p_offset, p_vaddr) mapped as
/// `entries`: see [`ElfFacts::load_bias`].
pub(crate) fn load_bias(loads: &[(u64, u64)], entries: &[MapsEntry]) -> Option<u64> {
    entries.iter().find_map(|e| {
        loads
            .iter()
            .find(|(off, _)| off & PAGE_MASK == e.offset)
            .map(|(_, vaddr)| e.start.wrapping_sub(vaddr & PAGE_MASK))
    })
}

/// What an object mapped in a process exports, among the names asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ExportedSymbols {
    /// name → symbol, for the asked names the object defines in `.dynsym`
    pub symbols: HashMap<&'static str, DefinedSymbol>,
    /// PT_LOAD segments: (p_offset, p_vaddr)
    pub loads: Vec<(u64, u64)>,
}

/// The defined `.dynsym` entries named in `wanted` of the object mapped at `path` in `pid`.
pub(super) fn exported_symbols(
    pid: u32,
    path: &Path,
    entries: &[MapsEntry],
    wanted: &[&'static str],
) -> Result<ExportedSymbols, ElfError> {
    let (opened, file) = open_mapped_file(pid, path, entries)?;
    // SAFETY: as in `load_facts`: read-only, private, and a parse of garbage fails cleanly.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|error| ElfError::Io {
        path: opened.clone(),
        error,
    })?;
    parse_exported(&map, wanted).map_err(|error| ElfError::Parse {
        path: opened,
        error,
    })
}

/// [`exported_symbols`] of an ELF image in memory.
pub(super) fn parse_exported(
    bytes: &[u8],
    wanted: &[&'static str],
) -> Result<ExportedSymbols, goblin::error::Error> {
    let elf = ElfHeaders::parse(bytes)?;
    Ok(ExportedSymbols {
        symbols: elf.defined(SymbolTable::Dynamic, wanted)?,
        loads: elf.load_segments(),
    })
}

/// Identity of a file's contents: device, inode, size, modification time.
type FileId = (u64, u64, u64, i64);

/// Facts per file, so a host-wide scan parses each distinct binary once, not once per process.
fn facts_cache() -> &'static Mutex<HashMap<FileId, Option<ElfFacts>>> {
    static CACHE: OnceLock<Mutex<HashMap<FileId, Option<ElfFacts>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Most files remembered.
const MAX_CACHED_FILES: usize = 4096;

/// Opens the object mapped at `path` in process `pid`. The maps file names it as seen from
/// *our* root when it is reachable from there (a chroot) and as seen from the target's mount
/// namespace otherwise (a container), so try `/proc/PID/root/PATH`, then `PATH`, and take the
/// first whose inode is the mapped one; `/proc/PID/map_files` (deleted or replaced files, and
/// anything else) is the last resort.
pub(crate) fn open_mapped_file(
    pid: u32,
    path: &Path,
    entries: &[MapsEntry],
) -> Result<(String, File), ElfError> {
    let first = entries.first();
    let inode = first.map(|e| e.inode).unwrap_or(0);
    let open = |p: &str| {
        File::open(p).map_err(|error| ElfError::Io {
            path: p.to_string(),
            error,
        })
    };
    if !entries.iter().any(|e| e.deleted) {
        for candidate in [
            format!("/proc/{pid}/root{}", path.display()),
            path.display().to_string(),
        ] {
            if std::fs::metadata(&candidate).is_ok_and(|m| m.ino() == inode) {
                return Ok((candidate.clone(), open(&candidate)?));
            }
        }
    }
    let Some(e) = first else {
        return Err(ElfError::Io {
            path: path.display().to_string(),
            error: std::io::ErrorKind::NotFound.into(),
        });
    };
    let via = format!("/proc/{pid}/map_files/{:x}-{:x}", e.start, e.end);
    Ok((via.clone(), open(&via)?))
}

/// The address in process `pid` of the section `name` of the object mapped at `path`: its
/// link-time address moved by the object's load bias. `Ok(None)` when the object has no such
/// section or no maps line matches one of its segments.
pub(super) fn section_address(
    pid: u32,
    path: &Path,
    entries: &[MapsEntry],
    name: &str,
) -> Result<Option<u64>, ElfError> {
    mapped_address(pid, path, entries, |elf| Ok(elf.section_address(name)))
}

/// The address in process `pid` of the exported (dynamic) symbol `name` of the object mapped
/// at `path`, moved by its load bias. `Ok(None)` when the object does not define it or no maps
/// line matches one of its segments.
pub(super) fn dynamic_symbol_address(
    pid: u32,
    path: &Path,
    entries: &[MapsEntry],
    name: &'static str,
) -> Result<Option<u64>, ElfError> {
    mapped_address(pid, path, entries, |elf| {
        let found = elf.defined(SymbolTable::Dynamic, &[name])?;
        Ok(found.get(name).map(|s| s.value).filter(|&v| v != 0))
    })
}

/// The link-time address `find` gives in the object mapped at `path`, moved by its load bias.
fn mapped_address(
    pid: u32,
    path: &Path,
    entries: &[MapsEntry],
    find: impl FnOnce(&ElfHeaders) -> Result<Option<u64>, goblin::error::Error>,
) -> Result<Option<u64>, ElfError> {
    let (opened, file) = open_mapped_file(pid, path, entries)?;
    // SAFETY: as in `load_facts`: read-only, private, and a parse of garbage fails cleanly.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|error| ElfError::Io {
        path: opened.clone(),
        error,
    })?;
    let parse = |error| ElfError::Parse {
        path: opened.clone(),
        error,
    };
    let elf = ElfHeaders::parse(&map).map_err(parse)?;
    let Some(vaddr) = find(&elf).map_err(parse)? else {
        return Ok(None);
    };
    Ok(load_bias(&elf.load_segments(), entries).map(|bias| bias.wrapping_add(vaddr)))
}

/// Parses the object mapped at `path` in process `pid`. `Ok(None)` when it holds no CPython
/// runtime.
pub fn load_facts(
    pid: u32,
    path: &Path,
    entries: &[MapsEntry],
) -> Result<Option<ElfFacts>, ElfError> {
    let (opened, file) = open_mapped_file(pid, path, entries)?;
    let io = |error| ElfError::Io {
        path: opened.clone(),
        error,
    };
    let meta = file.metadata().map_err(io)?;
    let id: FileId = (meta.dev(), meta.ino(), meta.len(), meta.mtime());
    if let Some(hit) = facts_cache().lock().expect("facts cache lock").get(&id) {
        return Ok(hit.clone());
    }
    // Mapped, not read: only the pages the parser touches (headers, symbol tables) are loaded,
    // so looking at a 40 MB non-Python executable costs a few pages, not 40 MB of RSS.
    // SAFETY: the mapping is read-only and private to this call; a file truncated meanwhile can
    // only make the parse see garbage or fail, which it handles.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    let facts = parse_facts(&map).map_err(|error| ElfError::Parse {
        path: opened.clone(),
        error,
    })?;
    drop(map);
    let mut cache = facts_cache().lock().expect("facts cache lock");
    if cache.len() >= MAX_CACHED_FILES {
        cache.clear();
    }
    cache.insert(id, facts.clone());
    Ok(facts)
}

/// The facts of an ELF image in memory.
pub fn parse_facts(bytes: &[u8]) -> Result<Option<ElfFacts>, goblin::error::Error> {
    const NAMES: [&str; 3] = ["_PyRuntime", "PyCode_Type", "Py_Version"];
    let elf = ElfHeaders::parse(bytes)?;
    // Exported first; the full table (when not stripped) only for what is not.
    let mut found = elf.defined(SymbolTable::Dynamic, &NAMES)?;
    if NAMES.iter().any(|n| !found.contains_key(n)) {
        for (name, sym) in elf.defined(SymbolTable::Full, &NAMES)? {
            found.entry(name).or_insert(sym);
        }
    }
    let find = |name: &str| found.get(name).map(|s| s.value).filter(|&v| v != 0);
    let Some(code_type_vaddr) = find("PyCode_Type") else {
        return Ok(None);
    };
    let (runtime_vaddr, statics) =
        match find("_PyRuntime").or_else(|| elf.section_address(".PyRuntime")) {
            Some(at) => (at, None),
            None => match runtime_statics::find(&elf)? {
                Some(statics) => (statics.interp_head, Some(statics)),
                None => return Ok(None),
            },
        };
    Ok(Some(ElfFacts {
        runtime_vaddr,
        code_type_vaddr,
        py_version_vaddr: find("Py_Version"),
        statics,
        is_shared_object: elf.header.e_type == goblin::elf::header::ET_DYN,
        loads: elf.load_segments(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_from_maps() {
        let facts = ElfFacts {
            runtime_vaddr: 0x5000,
            code_type_vaddr: 0x6000,
            py_version_vaddr: None,
            statics: None,
            is_shared_object: true,
            loads: vec![(0, 0), (0x1234, 0x2234)],
        };
        let entries = [MapsEntry {
            start: 0x7f0000001000,
            end: 0x7f0000002000,
            offset: 0x1000,
            inode: 1,
            deleted: false,
            executable: true,
        }];
        assert_eq!(facts.load_bias(&entries), Some(0x7f0000001000 - 0x2000));
    }

    #[test]
    fn host_python_has_runtime() {
        let bytes = std::fs::read("/usr/bin/python3.11").expect("Debian's python3.11 is installed");
        let f = parse_facts(&bytes).expect("ELF").expect("has _PyRuntime");
        assert!(!f.is_shared_object, "Debian's python3.11 is ET_EXEC");
        assert!(f.py_version_vaddr.is_some());
    }
}
