//! Discovery stage: which processes run CPython, and where each one's runtime is.
//!
//! In: a PID. Out: a [`PythonTarget`]: the ELF object holding `_PyRuntime` (the executable for
//! static builds, `libpython3.X.so` for shared ones), the runtime's address after the load bias,
//! `PyCode_Type`'s address, and the target's [`Offsets`]. Files are opened through
//! `/proc/PID/root` so processes in other mount namespaces (containers, chroots) resolve; every
//! candidate runtime is validated in memory (cookie, live interpreter list) because a process can
//! map a second, never-initialised libpython (`import ctypes` and friends `dlopen` one).

pub mod asyncio_section;
pub mod cgroup_cpu;
pub mod container;
mod elf;
mod elf_headers;
pub mod greenlet_type;
pub mod host;
pub mod look_again;
mod older_versions;
pub mod privileges;
pub mod process_context;
pub mod process_env;
mod procfs_util;
mod runtime_statics;
pub mod service_name;
pub mod thread_context;

use std::path::PathBuf;

/// The facts discovery needs from an ELF image in memory (`Ok(None)`: it holds no CPython
/// runtime). Public so the fuzz targets can feed it arbitrary bytes: mapped files are untrusted.
pub use elf::parse_facts as parse_elf_facts;
pub(crate) use elf::{load_bias, open_mapped_file};
pub use elf::{ElfError, ElfFacts};
pub use host::{HostScanner, ProcessState, ScanChanges};
pub(crate) use procfs_util::read_maps;
pub use procfs_util::{
    children, exe_path, host_tids, mount_points, ns_pid, process_alive, process_exists, task_ids,
    thread_name, MapsEntry, TaskIds,
};

use crate::memory::{MemoryError, ProcessMemory, RemoteMemory};
use crate::offsets::{
    builtin_offsets, debug_offsets_len, named_release, parse_debug_offsets, LayoutSource,
    NamedRelease, Offsets, OffsetsError, PythonVersion, DEBUG_OFFSETS_COOKIE,
    DEBUG_OFFSETS_PREFIX_LEN,
};

/// Why a process is not a profilable CPython.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// No such process.
    #[error("process {pid} does not exist")]
    NoSuchProcess {
        /// pid
        pid: u32,
    },
    /// The process has exited but not been reaped (a zombie): nothing left to read.
    #[error("process {pid} has exited")]
    Exited {
        /// pid
        pid: u32,
    },
    /// /proc or memory access was refused.
    #[error(
        "permission denied inspecting process {pid}: {}",
        privileges::denied_hint()
    )]
    Denied {
        /// pid
        pid: u32,
    },
    /// No mapped object has a CPython runtime.
    #[error(
        "process {pid} ({comm}) is not a CPython process: no _PyRuntime in its mappings{skipped}"
    )]
    NotPython {
        /// pid
        pid: u32,
        /// its command name
        comm: String,
        /// objects that could not be examined, and why (empty, or `" (skipped: …)"`)
        skipped: String,
    },
    /// A runtime was found but no candidate is initialised (yet).
    #[error("process {pid}: CPython runtime at {addr:#x} is not initialised ({why})")]
    NotInitialized {
        /// pid
        pid: u32,
        /// runtime address of the last candidate tried
        addr: u64,
        /// what failed
        why: String,
    },
    // These two print their cause in their own message (callers show `to_string()` alone), so
    // the cause is a plain field, not `#[source]`: a chain printer would say it twice.
    /// The version has no layout.
    #[error("process {pid}: {layout}")]
    Offsets {
        /// pid
        pid: u32,
        /// the layout problem
        layout: OffsetsError,
    },
    /// Reading /proc failed otherwise.
    #[error("process {pid}: reading {what} failed: {error}")]
    Proc {
        /// pid
        pid: u32,
        /// which file
        what: String,
        /// the I/O error
        error: std::io::Error,
    },
}

/// A located, validated CPython runtime in a live process.
#[derive(Debug, Clone)]
pub struct PythonTarget {
    /// host pid
    pub pid: u32,
    /// pid inside the process's own PID namespace (same as `pid` outside containers)
    pub ns_pid: u32,
    /// the ELF object holding `_PyRuntime`, as the target names it
    pub object_path: PathBuf,
    /// whether that object is a shared library (libpython) rather than the executable
    pub shared_libpython: bool,
    /// address of `_PyRuntime` in the target
    pub runtime_addr: u64,
    /// address of `PyCode_Type` in the target
    pub code_type_addr: u64,
    /// the target's layout (and exact version)
    pub offsets: Offsets,
}

impl PythonTarget {
    /// The exact CPython version.
    pub fn version(&self) -> PythonVersion {
        self.offsets.version
    }
}

fn mem_error(pid: u32, e: MemoryError) -> DiscoveryError {
    match e {
        MemoryError::Gone { .. } => DiscoveryError::NoSuchProcess { pid },
        MemoryError::Denied { .. } => DiscoveryError::Denied { pid },
        other => DiscoveryError::NotInitialized {
            pid,
            addr: 0,
            why: other.to_string(),
        },
    }
}

/// Finds and validates the CPython runtime of process `pid`.
pub fn locate_runtime(pid: u32) -> Result<PythonTarget, DiscoveryError> {
    let maps = procfs_util::read_maps(pid)?;
    let exe = procfs_util::exe_path(pid);
    let mut mem = RemoteMemory::new(pid);
    let mut last_failure: Option<DiscoveryError> = None;
    let mut skipped = Vec::new();
    // A release with no layout here (2.7, 3.5), known by its file's name.
    let mut unsupported = None;
    for (path, entries) in procfs_util::candidate_objects(&maps, exe.as_deref()) {
        let facts = match elf::load_facts(pid, &path, &entries) {
            Ok(Some(f)) => f,
            Ok(None) => {
                unsupported = unsupported.or_else(|| unsupported_release(&path));
                continue;
            }
            Err(e) => {
                skipped.push(e.to_string());
                continue;
            }
        };
        let Some(bias) = facts.load_bias(&entries) else {
            skipped.push(format!(
                "{}: no maps line matches a PT_LOAD segment",
                path.display()
            ));
            continue;
        };
        let runtime_addr = bias.wrapping_add(facts.runtime_vaddr);
        match validate_candidate(&mut mem, pid, &path, &facts, bias, runtime_addr) {
            Ok(offsets) => {
                return Ok(PythonTarget {
                    pid,
                    ns_pid: ns_pid(pid).unwrap_or(pid),
                    shared_libpython: facts.is_shared_object && Some(&path) != exe.as_ref(),
                    object_path: path,
                    runtime_addr,
                    code_type_addr: bias.wrapping_add(facts.code_type_vaddr),
                    offsets,
                })
            }
            Err(e @ (DiscoveryError::NoSuchProcess { .. } | DiscoveryError::Denied { .. })) => {
                return Err(e)
            }
            Err(e) => last_failure = Some(e),
        }
    }
    if let Some(e) = last_failure {
        return Err(e);
    }
    if !process_exists(pid) {
        return Err(DiscoveryError::NoSuchProcess { pid });
    }
    if procfs_util::is_zombie(pid) {
        return Err(DiscoveryError::Exited { pid });
    }
    if let Some(layout) = unsupported {
        return Err(DiscoveryError::Offsets { pid, layout });
    }
    let skipped = if skipped.is_empty() {
        String::new()
    } else {
        format!(" (skipped: {})", skipped.join("; "))
    };
    Err(DiscoveryError::NotPython {
        pid,
        comm: procfs_util::comm(pid).unwrap_or_default(),
        skipped,
    })
}

/// The refusal of the CPython release `path` is named after (`python2.7`,
/// `libpython3.5m.so.1.0`), when pyagent has no layout for it.
fn unsupported_release(path: &std::path::Path) -> Option<OffsetsError> {
    let (major, minor) = older_versions::version_in_name(path)?;
    (named_release(major, minor) == NamedRelease::Unsupported)
        .then_some(OffsetsError::UnsupportedRelease(major, minor))
}

/// Reads the version and layout of one candidate and checks that it is the live runtime.
fn validate_candidate(
    mem: &mut RemoteMemory,
    pid: u32,
    path: &std::path::Path,
    facts: &ElfFacts,
    bias: u64,
    runtime_addr: u64,
) -> Result<Offsets, DiscoveryError> {
    let not_init = |why: String| DiscoveryError::NotInitialized {
        pid,
        addr: runtime_addr,
        why,
    };
    let mut prefix = [0u8; DEBUG_OFFSETS_PREFIX_LEN];
    mem.read(runtime_addr, &mut prefix)
        .map_err(|e| mem_error(pid, e))?;
    let offsets = if &prefix[..8] == DEBUG_OFFSETS_COOKIE {
        let len =
            debug_offsets_len(&prefix).map_err(|layout| DiscoveryError::Offsets { pid, layout })?;
        let table = mem
            .read_vec(runtime_addr, len)
            .map_err(|e| mem_error(pid, e))?;
        parse_debug_offsets(&table).map_err(|layout| DiscoveryError::Offsets { pid, layout })?
    } else if let Some(v) = facts.py_version_vaddr {
        // 3.11/3.12 have no table: the exported `Py_Version` constant says which layout.
        let hex = mem
            .read_u64(bias.wrapping_add(v))
            .map_err(|e| mem_error(pid, e))?;
        let version = PythonVersion::from_hex(hex);
        if LayoutSource::of(version) == LayoutSource::DebugOffsets {
            return Err(not_init(format!("{version} without its xdebugpy cookie")));
        }
        builtin_offsets(version).map_err(|layout| DiscoveryError::Offsets { pid, layout })?
    } else {
        // 3.6-3.10 export no `Py_Version` either: their layouts are told apart in memory.
        let tids: Vec<u32> = task_ids(pid).iter().map(|t| t.ns_tid).collect();
        match &facts.statics {
            Some(statics) => {
                older_versions::offsets_for_statics(mem, path, runtime_addr, statics, bias, &tids)
            }
            None => older_versions::offsets_for(mem, path, runtime_addr, &tids),
        }
        .map_err(|e| match e {
            older_versions::OlderVersionError::Memory(e) => mem_error(pid, e),
            older_versions::OlderVersionError::Offsets(layout) => {
                DiscoveryError::Offsets { pid, layout }
            }
            e @ older_versions::OlderVersionError::NoLayout(_) => not_init(e.to_string()),
        })?
    };
    // The cookie is in the file image too, so an uninitialised copy (a dlopen'd second
    // libpython) passes the cookie check: require a live interpreter list.
    let interp = mem
        .read_u64(runtime_addr.wrapping_add(offsets.runtime_state.interpreters_head))
        .map_err(|e| mem_error(pid, e))?;
    if interp == 0 {
        return Err(not_init("no interpreter yet".into()));
    }
    check_interpreter_list(mem, &offsets, interp).map_err(|e| match e {
        ListProblem::Memory(e @ (MemoryError::Gone { .. } | MemoryError::Denied { .. })) => {
            mem_error(pid, e)
        }
        other => not_init(other.to_string()),
    })?;
    Ok(offsets)
}

/// Why an interpreter list is not a live one.
#[derive(Debug, thiserror::Error)]
enum ListProblem {
    #[error("interpreter list unreadable: {0}")]
    Memory(MemoryError),
    #[error("interpreter pointer {0:#x} is misaligned or wraps")]
    BadPointer(u64),
    #[error("interpreter {0:#x} has no thread yet")]
    NoThread(u64),
    #[error("thread state {tstate:#x} does not belong to interpreter {interp:#x}")]
    Foreign { tstate: u64, interp: u64 },
}

/// A nonzero head is not proof of a runtime: bytes that merely look like one (a crafted or
/// foreign object named like libpython) have one too. A live runtime's first interpreter is
/// readable and its first thread state points back at it, which garbage does not do, so such a
/// candidate fails here and discovery keeps looking.
fn check_interpreter_list(
    mem: &mut impl ProcessMemory,
    offsets: &Offsets,
    interp: u64,
) -> Result<(), ListProblem> {
    let field = |base: u64, off: u64| {
        base.checked_add(off)
            .filter(|_| base.is_multiple_of(8))
            .ok_or(ListProblem::BadPointer(base))
    };
    let threads_head = field(interp, offsets.interpreter_state.threads_head)?;
    let tstate = mem.read_u64(threads_head).map_err(ListProblem::Memory)?;
    if tstate == 0 {
        return Err(ListProblem::NoThread(interp));
    }
    let back = mem
        .read_u64(field(tstate, offsets.thread_state.interp)?)
        .map_err(ListProblem::Memory)?;
    if back != interp {
        return Err(ListProblem::Foreign { tstate, interp });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::FakeMemory;

    /// Defect 11: the debug-offsets error printed its cause twice ("process 7: unsupported
    /// CPython version 3.16.0: unsupported CPython version 3.16.0") because the cause was both in
    /// the message and the error's `source`, and the CLI prints the whole chain.
    #[test]
    fn debug_offsets_error_says_its_cause_once() {
        let layout = OffsetsError::Unsupported(PythonVersion::new(3, 16, 0));
        let cause = layout.to_string();
        let e = anyhow::Error::from(DiscoveryError::Offsets { pid: 7, layout });
        let line = format!("{e:#}");
        assert_eq!(line, format!("process 7: {cause}"));
        assert_eq!(line.matches(&cause).count(), 1, "{line}");
    }

    /// Defect 8: a nonzero interpreter head is not enough, the first thread state must point
    /// back at the interpreter.
    #[test]
    fn interpreter_list_must_point_back() {
        let o = builtin_offsets(PythonVersion::new(3, 12, 1)).expect("table");
        let mut mem = FakeMemory {
            base: 0x1000,
            bytes: vec![0; 0x2000],
        };
        let interp: u64 = 0x1000;
        let tstate: u64 = 0x2000;
        let head = (o.interpreter_state.threads_head) as usize;
        let back = 0x1000 + o.thread_state.interp as usize;
        mem.bytes[head..head + 8].copy_from_slice(&tstate.to_le_bytes());
        assert!(matches!(
            check_interpreter_list(&mut mem, &o, interp),
            Err(ListProblem::Foreign { .. })
        ));
        mem.bytes[back..back + 8].copy_from_slice(&interp.to_le_bytes());
        assert!(check_interpreter_list(&mut mem, &o, interp).is_ok());
        // Garbage heads: unmapped, misaligned, wrapping.
        for garbage in [0x4141_4141_4141_4141, 0x1001, u64::MAX - 7] {
            assert!(check_interpreter_list(&mut mem, &o, garbage).is_err());
        }
    }
}
