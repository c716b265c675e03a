//! Versions that export no `Py_Version` (3.6–3.10): which layout a runtime has, its exact
//! version, and where its threads' kernel thread ids are (and, for 3.6, its GIL and
//! collector statics).
//!
//! The layout is chosen among the built-in tables of those versions, the minor version the
//! object's file name says first (`libpython3.9.so.1.0`, `python3.10`), every one otherwise. A
//! table is the runtime's when the interpreter list it reads is live and `sys.hexversion`, read
//! through it from the interpreter's `sys` dict, names its own minor version: the tables place
//! `sysdict` at different offsets, so a wrong one reads no such dict.
//!
//! Those thread states hold a `pthread_t` and no kernel tid. On the C libraries this runs on
//! (glibc, musl) a `pthread_t` is the address of the thread's descriptor, which keeps the tid at
//! an offset of the C library's own: found once per process, as the one offset at which every
//! thread state's descriptor holds a tid of the process.

use std::path::Path;

use super::runtime_statics::RuntimeStatics;
use crate::memory::{MemoryError, ProcessMemory};
use crate::offsets::{
    builtin_offsets, named_release, GcBase, GcOffsets, GilLocation, NamedRelease, NativeThreadId,
    Offsets, OffsetsError, PythonVersion, UNLABELLED_MINORS,
};
use crate::symbolize::read_str;

/// Entries of a dict looked at, at most (`sys` has about 80).
const MAX_DICT_ENTRIES: u64 = 4096;

/// Bytes of a thread descriptor searched for the tid.
const DESCRIPTOR_BYTES: usize = 2048;

/// Where the tid is in the C libraries' thread descriptors, looked at first: glibc on x86_64
/// (`struct pthread.tid`) and arm64, musl.
const KNOWN_TID_OFFSETS: [u64; 3] = [0x2d0, 0xd0, 0x30];

/// Why no table of these versions fits a runtime.
#[derive(Debug, thiserror::Error)]
pub(super) enum OlderVersionError {
    /// Reading the target failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The object's name says a version no table exists for.
    #[error("{0}")]
    Offsets(#[from] OffsetsError),
    /// Nothing read through any table was a live runtime of its version.
    #[error("no layout of CPython 3.6-3.10 fits it ({0})")]
    NoLayout(String),
}

/// `(major, minor)` of the CPython an object's file name names: `python3.9`, `libpython3.10.so`,
/// `libpython3.6m.so.1.0`, `python2.7`.
pub(crate) fn version_in_name(path: &Path) -> Option<(u8, u8)> {
    let name = path.file_name()?.to_str()?;
    let at = name.find("python")? + "python".len();
    let rest = &name[at..];
    let (major, rest) = rest.split_once('.')?;
    let minor: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The layout of the runtime at `runtime` in `object`, with its exact version and the tid
/// offset of its threads; `tids` are the process's threads in its own PID namespace.
pub(super) fn offsets_for(
    mem: &mut impl ProcessMemory,
    object: &Path,
    runtime: u64,
    tids: &[u32],
) -> Result<Offsets, OlderVersionError> {
    let named =
        version_in_name(object).map(|(major, minor)| (major, minor, named_release(major, minor)));
    if let Some((major, minor, NamedRelease::Unsupported)) = named {
        return Err(OffsetsError::UnsupportedRelease(major, minor).into());
    }
    let minors = named.map_or(&UNLABELLED_MINORS[..], |(_, _, release)| {
        release.minors_to_try()
    });
    let mut why = Vec::new();
    for &minor in minors {
        let table = builtin_offsets(PythonVersion::new(3, minor, 0))?;
        let head = runtime.wrapping_add(table.runtime_state.interpreters_head);
        match read_through(mem, &table, head)? {
            Ok((version, interp)) if version.minor_version() == (3, minor) => {
                let mut offsets = builtin_offsets(version)?;
                set_tid_offset(mem, &mut offsets, interp, tids)?;
                return Ok(offsets);
            }
            Ok((other, _)) => why.push(format!("the 3.{minor} layout reads version {other}")),
            Err(reason) => why.push(reason),
        }
    }
    Err(OlderVersionError::NoLayout(why.join("; ")))
}

/// The layout of the 3.6 runtime whose interpreter list starts at `head` (the address of
/// `interp_head`), with its exact version, the addresses of its GIL and collector statics
/// (`statics`, link-time addresses moved by the object's `bias`) and the tid offset of its
/// threads; `tids` as in [`offsets_for`].
pub(super) fn offsets_for_statics(
    mem: &mut impl ProcessMemory,
    object: &Path,
    head: u64,
    statics: &RuntimeStatics,
    bias: u64,
    tids: &[u32],
) -> Result<Offsets, OlderVersionError> {
    // 2.7 and 3.5 keep the same statics: their file's name tells them apart first.
    match version_in_name(object) {
        Some((3, 6)) | None => {}
        Some((major, minor)) => return Err(OffsetsError::UnsupportedRelease(major, minor).into()),
    }
    let table = builtin_offsets(PythonVersion::new(3, 6, 0))?;
    let (version, interp) = match read_through(mem, &table, head)? {
        Ok((version, interp)) if version.minor_version() == (3, 6) => (version, interp),
        Ok((other, _)) => return Err(OffsetsError::Unsupported(other).into()),
        Err(reason) => return Err(OlderVersionError::NoLayout(reason)),
    };
    let mut offsets = builtin_offsets(version)?;
    let at = |vaddr: Option<u64>| vaddr.map(|v| bias.wrapping_add(v));
    if let (Some(locked), Some(holder), Some(waits)) = (
        at(statics.gil_locked),
        at(statics.gil_last_holder),
        at(statics.gil_waits),
    ) {
        offsets.gil = GilLocation::Statics {
            locked,
            holder,
            waits,
        };
    }
    if let Some(collecting) = at(statics.collecting) {
        offsets.gc = GcOffsets {
            base: GcBase::Process,
            collecting,
            frame: None,
        };
    }
    set_tid_offset(mem, &mut offsets, interp, tids)?;
    Ok(offsets)
}

/// The version `sys.hexversion` says, and the first interpreter, read through `table` from the
/// interpreter list head at `head`; `Err(reason)` when that layout reads no such thing.
fn read_through(
    mem: &mut impl ProcessMemory,
    table: &Offsets,
    head: u64,
) -> Result<Result<(PythonVersion, u64), String>, MemoryError> {
    let minor = table.version.minor;
    let interp = mem.read_u64(head)?;
    if interp == 0 {
        return Ok(Err(format!("no interpreter through the 3.{minor} layout")));
    }
    Ok(match sys_hexversion(mem, table, interp) {
        Ok(Some(version)) => Ok((version, interp)),
        Ok(None) => Err(format!("no sys.hexversion through the 3.{minor} layout")),
        Err(MemoryError::Fault { .. }) => {
            Err(format!("the 3.{minor} layout reads unmapped memory"))
        }
        Err(e) => return Err(e),
    })
}

/// Where the kernel tid is in the thread descriptors of the interpreter at `interp`'s threads
/// (0, read as no thread, until one has a descriptor).
fn set_tid_offset(
    mem: &mut impl ProcessMemory,
    offsets: &mut Offsets,
    interp: u64,
    tids: &[u32],
) -> Result<(), MemoryError> {
    offsets.thread_state.native_thread_id = NativeThreadId::InPthread {
        offset: tid_offset(mem, offsets, interp, tids)?.unwrap_or(0),
    };
    Ok(())
}

/// `sys.hexversion` of the interpreter at `interp`, read from its `sysdict` (`None`: no such
/// dict or entry, as when a wrong layout reads it).
fn sys_hexversion(
    mem: &mut impl ProcessMemory,
    o: &Offsets,
    interp: u64,
) -> Result<Option<PythonVersion>, MemoryError> {
    let Some(sysdict) = o.interpreter_state.sysdict else {
        return Ok(None);
    };
    let dict = mem.read_u64(interp.wrapping_add(sysdict))?;
    let Some(value) = dict_lookup(mem, o, dict, "hexversion")? else {
        return Ok(None);
    };
    // A small int: `ob_size` 1 and one 30-bit digit (`PY_VERSION_HEX` of 3.x fits in one).
    let size = mem.read_u64(value.wrapping_add(16))?;
    let digit = mem.read_u32(value.wrapping_add(24))?;
    if size != 1 {
        return Ok(None);
    }
    let version = PythonVersion::from_hex(u64::from(digit));
    Ok((version.major == 3).then_some(version))
}

/// The value of the `str` key `key` in the combined-table dict at `dict` (3.6–3.10 layout:
/// `ma_keys` at 32, keys with `dk_size` at 8, `dk_nentries` at 32 and the index array at 40,
/// then entries of hash, key and value). `None` when `dict` is no such dict.
fn dict_lookup(
    mem: &mut impl ProcessMemory,
    o: &Offsets,
    dict: u64,
    key: &str,
) -> Result<Option<u64>, MemoryError> {
    if dict == 0 || !dict.is_multiple_of(8) {
        return Ok(None);
    }
    let keys = mem.read_u64(dict.wrapping_add(32))?;
    let values = mem.read_u64(dict.wrapping_add(40))?;
    if keys == 0 || values != 0 {
        return Ok(None); // a split table: never the `sys` dict
    }
    let size = mem.read_u64(keys.wrapping_add(8))?;
    let entries = mem.read_u64(keys.wrapping_add(32))?;
    if !size.is_power_of_two() || size > 1 << 20 || entries > size.min(MAX_DICT_ENTRIES) {
        return Ok(None);
    }
    let index_bytes = match size {
        0..=0xff => 1,
        0x100..=0xffff => 2,
        _ => 4,
    };
    let first = keys.wrapping_add(40 + size * index_bytes);
    let table = mem.read_vec(first, (entries * 24) as usize)?;
    for entry in table.chunks_exact(24) {
        let word = |i: usize| u64::from_ne_bytes(entry[i..i + 8].try_into().expect("8 bytes"));
        let (k, v) = (word(8), word(16));
        if k == 0 || v == 0 {
            continue;
        }
        if read_str(mem, o, k).is_ok_and(|s| s == key) {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// The offset of the tid in the thread descriptors of the interpreter's threads: the one at
/// which each thread state's descriptor holds a distinct tid of `tids`, a known C library's
/// offset first (`None`: no thread state has a descriptor yet, or no offset fits).
fn tid_offset(
    mem: &mut impl ProcessMemory,
    o: &Offsets,
    interp: u64,
    tids: &[u32],
) -> Result<Option<u64>, MemoryError> {
    let t = &o.thread_state;
    let mut descriptors = Vec::new();
    let mut tstate = mem.read_u64(interp.wrapping_add(o.interpreter_state.threads_head))?;
    while tstate != 0 && descriptors.len() < 64 {
        let pthread = mem.read_u64(tstate.wrapping_add(t.thread_id))?;
        if pthread != 0 {
            let mut bytes = vec![0u8; DESCRIPTOR_BYTES];
            if mem.read(pthread, &mut bytes).is_ok() {
                descriptors.push(bytes);
            }
        }
        tstate = mem.read_u64(tstate.wrapping_add(t.next))?;
    }
    if descriptors.is_empty() {
        return Ok(None);
    }
    let fits = |off: usize| {
        let mut seen = Vec::with_capacity(descriptors.len());
        descriptors.iter().all(|d| {
            let tid = u32::from_ne_bytes(d[off..off + 4].try_into().expect("4 bytes"));
            let fresh = !seen.contains(&tid);
            seen.push(tid);
            tid != 0 && fresh && tids.contains(&tid)
        })
    };
    let known = KNOWN_TID_OFFSETS
        .iter()
        .map(|&o| o as usize)
        .find(|&off| fits(off));
    Ok(known
        .or_else(|| (0..DESCRIPTOR_BYTES - 4).step_by(4).find(|&off| fits(off)))
        .map(|off| off as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_in_file_names() {
        for (name, want) in [
            (
                "/usr/lib/x86_64-linux-gnu/libpython3.9.so.1.0",
                Some((3, 9)),
            ),
            (
                "/root/.pyenv/versions/3.10.13/bin/python3.10",
                Some((3, 10)),
            ),
            ("libpython3.6m.so.1.0", Some((3, 6))),
            ("/usr/bin/python2.7", Some((2, 7))),
            ("/usr/bin/python3", None),
            ("/opt/app/server", None),
        ] {
            assert_eq!(version_in_name(Path::new(name)), want, "{name}");
        }
    }
}
