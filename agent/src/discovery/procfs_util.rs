//! Small readers of /proc files: the `procfs` crate where it reads what is needed at no extra
//! cost, by hand where it would cost more on a hot path or lacks a step (each says why).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use procfs::process::{MMPermissions, MMapPath, MemoryMaps, Process};
use procfs::{FromBufRead, ProcError};

use super::DiscoveryError;

/// One line of /proc/PID/maps that maps a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsEntry {
    /// start address
    pub start: u64,
    /// end address
    pub end: u64,
    /// file offset of `start`
    pub offset: u64,
    /// inode of the mapped file
    pub inode: u64,
    /// the path was marked `(deleted)`
    pub deleted: bool,
    /// mapped executable (code, as a loaded object's text is)
    pub executable: bool,
}

/// `/proc/PID` of a process (a PID beyond `i32` names none).
fn process(pid: u32) -> Result<Process, ProcError> {
    let pid = i32::try_from(pid).map_err(|_| ProcError::NotFound(None))?;
    Process::new(pid)
}

fn io_error(pid: u32, what: &str, e: std::io::Error) -> DiscoveryError {
    match e.kind() {
        std::io::ErrorKind::NotFound => DiscoveryError::NoSuchProcess { pid },
        std::io::ErrorKind::PermissionDenied => DiscoveryError::Denied { pid },
        _ if e.raw_os_error() == Some(libc::ESRCH) => DiscoveryError::NoSuchProcess { pid },
        _ => DiscoveryError::Proc {
            pid,
            what: what.to_string(),
            error: e,
        },
    }
}

/// File-backed mappings of `pid`, grouped by path, in address order.
pub(crate) fn read_maps(pid: u32) -> Result<Vec<(PathBuf, MapsEntry)>, DiscoveryError> {
    // Read here, parsed by procfs: its own read turns a failed read (ESRCH once the process is
    // reaped between open and read) into "incomplete", which would hide that it is gone.
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| io_error(pid, "maps", e))?;
    let maps = parse_maps(&text);
    Ok(maps
        .filter_map(|m| {
            let MMapPath::Path(path) = m.pathname else {
                return None;
            };
            let bytes = path.as_os_str().as_bytes();
            if m.inode == 0 || !bytes.starts_with(b"/") {
                return None;
            }
            let (path, deleted) = match bytes.strip_suffix(b" (deleted)") {
                Some(p) => (PathBuf::from(OsStr::from_bytes(p)), true),
                None => (path, false),
            };
            let (start, end) = m.address;
            Some((
                path,
                MapsEntry {
                    start,
                    end,
                    offset: m.offset,
                    inode: m.inode,
                    deleted,
                    executable: m.perms.contains(MMPermissions::EXECUTE),
                },
            ))
        })
        .collect())
}

/// The entries of a maps file, each line parsed by procfs on its own: a line it cannot parse is
/// skipped, not the whole file. A path starting with `/SYSV` (System V shared memory, never an
/// ELF object) is skipped before procfs sees it: procfs 0.18 slices such a name at fixed
/// offsets and panics on a shorter one, and a file of that name can be made in a container.
fn parse_maps(text: &str) -> impl Iterator<Item = procfs::process::MemoryMap> + '_ {
    text.lines()
        .filter(|line| {
            !line
                .split_whitespace()
                .nth(5)
                .is_some_and(|path| path.starts_with("/SYSV"))
        })
        .filter_map(|line| MemoryMaps::from_buf_read(line.as_bytes()).ok())
        .flat_map(|maps| maps.0)
}

/// The objects worth parsing for a runtime: the executable and anything named like libpython.
/// (Every other library would cost an ELF parse for nothing.)
pub(super) fn candidate_objects(
    maps: &[(PathBuf, MapsEntry)],
    exe: Option<&Path>,
) -> Vec<(PathBuf, Vec<MapsEntry>)> {
    let mut by_path: BTreeMap<PathBuf, (u64, Vec<MapsEntry>)> = BTreeMap::new();
    for (path, entry) in maps {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        if Some(path.as_path()) == exe || name.contains("python") {
            let slot = by_path
                .entry(path.clone())
                .or_insert((entry.start, Vec::new()));
            slot.1.push(entry.clone());
        }
    }
    let mut v: Vec<_> = by_path
        .into_iter()
        .map(|(p, (start, e))| (start, p, e))
        .collect();
    // Lowest address first, like the maps file; validation picks the live one.
    v.sort_by_key(|(start, _, _)| *start);
    v.into_iter().map(|(_, p, e)| (p, e)).collect()
}

/// The executable's path as the target sees it.
pub fn exe_path(pid: u32) -> Option<PathBuf> {
    let p = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let s = p.to_string_lossy();
    Some(PathBuf::from(s.strip_suffix(" (deleted)").unwrap_or(&s)))
}

/// `/proc/PID/stat` of a process, if it still exists.
pub fn stat(pid: u32) -> Option<procfs::process::Stat> {
    procfs::process::Process::new(i32::try_from(pid).ok()?)
        .and_then(|p| p.stat())
        .ok()
}

/// Whether the process has exited and waits to be reaped (state Z or X).
pub(super) fn is_zombie(pid: u32) -> bool {
    stat(pid).is_some_and(|s| matches!(s.state, 'Z' | 'X'))
}

/// `comm` of a process.
pub(super) fn comm(pid: u32) -> Option<String> {
    Some(
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .ok()?
            .trim_end()
            .to_string(),
    )
}

/// Whether `/proc/PID` exists.
pub fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether process `pid` exists and has not exited: a zombie (exited, not yet reaped by its
/// parent) still has `/proc/PID` but will never run again.
pub fn process_alive(pid: u32) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(|pid| procfs::process::Process::new(pid).ok())
        .and_then(|p| p.stat().ok())
        .is_some_and(|s| s.state != 'Z')
}

/// A thread's ids in the host and in its own PID namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskIds {
    /// TID as this agent sees it
    pub host_tid: u32,
    /// TID inside the target's PID namespace (what CPython stores as `native_thread_id`)
    pub ns_tid: u32,
}

/// The last `NSpid:` field of a status file. By hand for [`task_ids`], which runs per thread on
/// every blocking-mode tick: procfs's `Status` parses every line of the file into a map.
fn nspid_last(status: &str) -> Option<u32> {
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// The pid of `pid` inside its own PID namespace.
pub fn ns_pid(pid: u32) -> Option<u32> {
    let nspid = process(pid).and_then(|p| p.status()).ok()?.nspid?;
    u32::try_from(*nspid.last()?).ok()
}

/// Host TIDs of the threads of `pid` (the task directory alone, no per-thread read).
// By hand: procfs's `tasks()` opens every task's directory, a system call per thread.
pub fn host_tids(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Every thread of `pid` with its namespace TID.
// By hand: see `nspid_last`; procfs's `tasks()` would also open each task's directory first.
pub fn task_ids(pid: u32) -> Vec<TaskIds> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let host_tid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/task/{host_tid}/status")).ok();
        let ns_tid = status.as_deref().and_then(nspid_last).unwrap_or(host_tid);
        Some(TaskIds { host_tid, ns_tid })
    })
    .collect()
}

/// The kernel's name of a thread (`comm`; CPython 3.14+ sets it from `Thread.name`).
pub fn thread_name(pid: u32, host_tid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{host_tid}/comm")).ok()?;
    Some(s.trim_end().to_string())
}

/// Direct children of `pid` (all threads' children).
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = process(pid).and_then(|p| p.tasks()) else {
        return Vec::new();
    };
    let mut out: Vec<u32> = tasks
        .flatten()
        .filter_map(|task| task.children().ok())
        .flatten()
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The children of `roots`, their children, and so on (not the roots), each once.
pub fn descendants(roots: &[u32]) -> Vec<u32> {
    let mut seen: std::collections::HashSet<u32> = roots.iter().copied().collect();
    let mut queue = roots.to_vec();
    let mut out = Vec::new();
    while let Some(pid) = queue.pop() {
        for kid in children(pid) {
            if seen.insert(kid) {
                out.push(kid);
                queue.push(kid);
            }
        }
    }
    out
}

/// Mount points of this process's mount namespace (`/proc/self/mountinfo`, field 5, with its
/// `\NNN` escapes of space, tab, newline and backslash undone: procfs keeps them).
pub fn mount_points() -> std::io::Result<Vec<PathBuf>> {
    let mounts = Process::myself()
        .and_then(|me| me.mountinfo())
        .map_err(|e| match e {
            ProcError::Io(e, _) => e,
            other => std::io::Error::other(other.to_string()),
        })?;
    Ok(mounts
        .into_iter()
        .map(|m| PathBuf::from(unescape_octal(&m.mount_point.to_string_lossy())))
        .collect())
}

fn unescape_octal(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = bytes
            .get(i + 1..i + 4)
            .filter(|digits| bytes[i] == b'\\' && digits.iter().all(|c| (b'0'..=b'7').contains(c)))
            .and_then(|digits| {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
                u8::try_from(value).ok()
            });
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_maps_line_procfs_cannot_take_is_skipped_not_fatal() {
        let text = "\
55d4c8a00000-55d4c8a01000 r--p 00000000 fd:01 131 /usr/bin/python3.12
7f00aa000000-7f00aa001000 rw-s 00000000 00:01 5 /SYSVx
7f00aa001000-7f00aa002000 rw-s 00000000 00:01 6 /SYSV0000002a (deleted)
not a maps line
7f00ab000000-7f00ab100000 r-xp 00001000 fd:01 4242 /usr/lib/libpython3.12.so.1.0
";
        let paths: Vec<String> = parse_maps(text)
            .filter_map(|m| match m.pathname {
                MMapPath::Path(p) => Some(p.display().to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(
            paths,
            ["/usr/bin/python3.12", "/usr/lib/libpython3.12.so.1.0"]
        );
    }

    #[test]
    fn unescapes_mountinfo_fields() {
        assert_eq!(unescape_octal("/var/cache/a\\040b"), "/var/cache/a b");
        assert_eq!(unescape_octal("/plain"), "/plain");
        assert_eq!(unescape_octal("/x\\134y\\0"), "/x\\y\\0");
        assert!(mount_points()
            .expect("mountinfo")
            .contains(&PathBuf::from("/")));
    }

    #[test]
    fn reads_maps_ids_and_children_of_this_process() {
        let me = std::process::id();
        let maps = read_maps(me).expect("own maps");
        let exe = std::env::current_exe().expect("exe");
        assert!(
            maps.iter()
                .any(|(path, e)| *path == exe && e.inode != 0 && !e.deleted && e.start < e.end),
            "{maps:?}"
        );
        assert!(matches!(
            read_maps(4_194_305),
            Err(DiscoveryError::NoSuchProcess { pid: 4_194_305 })
        ));
        assert_eq!(ns_pid(me), Some(me));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let kids = children(me);
        let _ = child.kill();
        let _ = child.wait();
        assert!(kids.contains(&child.id()), "{kids:?}");
        assert!(task_ids(me)
            .iter()
            .any(|t| t.host_tid == me && t.ns_tid == me));
    }
}
