//! Separate debug files: a stripped object's `.symtab` kept in a file of its own (what
//! `objcopy --only-keep-debug` makes, and `-dbg`/`-debuginfo` packages install).
//!
//! In: the object's GNU build ID and `.gnu_debuglink`, where the process maps it, and the debug
//! directories. Out: the debug file, checked to belong to the object (its build ID, or the
//! link's CRC-32 of its contents), or nothing. The places looked at, in order, as gdb looks:
//!
//! - `<debug-dir>/.build-id/ab/cdef….debug` for build ID `abcdef…`, in each debug directory;
//! - the link's name in the object's directory, in its `.debug/` subdirectory, and in
//!   `<debug-dir>/<the object's directory>/`.
//!
//! Each place is looked at under the process's root (`/proc/PID/root`: a container's or a
//! chroot's own debug files) before the host's.

use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use goblin::elf::Elf;

/// Where separate debug files are looked for when none are configured.
pub const DEFAULT_DEBUG_DIR: &str = "/usr/lib/debug";

/// The directories separate debug files are looked for in (`/usr/lib/debug` by default), each
/// as a path in the target process's filesystem, then in the host's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugDirs(Arc<[PathBuf]>);

impl Default for DebugDirs {
    fn default() -> DebugDirs {
        DebugDirs(Arc::from([PathBuf::from(DEFAULT_DEBUG_DIR)]))
    }
}

impl DebugDirs {
    /// These directories, in order (none: no separate debug files are looked for).
    pub fn new(dirs: impl IntoIterator<Item = PathBuf>) -> DebugDirs {
        DebugDirs(dirs.into_iter().collect())
    }

    /// The directories, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Path> {
        self.0.iter().map(PathBuf::as_path)
    }
}

/// Where to look for the debug file of one object: the process that maps it (whose root is
/// searched first), the object's path in that process, and the debug directories.
#[derive(Debug, Clone, Copy)]
pub struct DebugSearch<'a> {
    /// the process
    pub pid: u32,
    /// the object's path as the process maps it
    pub object_path: &'a Path,
    /// the debug directories
    pub dirs: &'a DebugDirs,
}

/// `.gnu_debuglink`: the debug file's name and the CRC-32 of its whole contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DebugLink {
    pub name: String,
    pub crc: u32,
}

impl DebugLink {
    /// The section's contents: the name, NUL-terminated, padded to 4 bytes, then the CRC
    /// (little-endian: the objects read here are x86-64). A name with a `/` in it (it is a
    /// file name) or that is not UTF-8 is refused.
    pub fn parse(section: &[u8]) -> Option<DebugLink> {
        let nul = section.iter().position(|&b| b == 0)?;
        let name = std::str::from_utf8(&section[..nul]).ok()?;
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return None;
        }
        let at = (nul + 1).next_multiple_of(4);
        let crc = section.get(at..at.checked_add(4)?)?;
        Some(DebugLink {
            name: name.to_owned(),
            crc: u32::from_le_bytes(crc.try_into().ok()?),
        })
    }
}

/// How a debug file was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundBy {
    /// under `.build-id/` of a debug directory, with the object's build ID
    BuildId,
    /// by `.gnu_debuglink`'s name, with its CRC
    DebugLink,
}

/// A debug file that belongs to the object.
#[derive(Debug)]
pub(super) struct DebugFile {
    pub path: PathBuf,
    pub map: memmap2::Mmap,
    pub found_by: FoundBy,
}

/// Candidates that were opened but did not belong to the object (counted).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rejected {
    /// by build ID: another build ID, or not an ELF file
    pub build_id: u64,
    /// by debug link: another CRC-32
    pub crc: u64,
}

/// The debug file of the object `search` names, with build ID `build_id` (lowercase hex) and
/// debug link `link`; `rejected` counts the files that were there but not the object's.
pub(super) fn find(
    search: &DebugSearch<'_>,
    build_id: Option<&str>,
    link: Option<&DebugLink>,
    rejected: &mut Rejected,
) -> Option<DebugFile> {
    let views = views(search.pid, search.object_path);
    if let Some(id) = build_id.filter(|id| id.len() > 2 && id.is_ascii()) {
        let (head, tail) = id.split_at(2);
        let relative = format!(".build-id/{head}/{tail}.debug");
        for view in &views {
            for dir in search.dirs.iter() {
                let path = under(&view.root, &dir.join(&relative));
                let Some(map) = map_file(&path) else { continue };
                if build_id_of(&map).as_deref() == Some(id) {
                    return Some(DebugFile {
                        path,
                        map,
                        found_by: FoundBy::BuildId,
                    });
                }
                rejected.build_id += 1;
            }
        }
    }
    let link = link?;
    for view in &views {
        let Some(object_dir) = view.object_path.parent() else {
            continue;
        };
        let mut places = vec![object_dir.to_owned(), object_dir.join(".debug")];
        places.extend(search.dirs.iter().map(|d| under(d, object_dir)));
        for place in &places {
            let path = under(&view.root, &place.join(&link.name));
            let Some(map) = map_file(&path) else { continue };
            if crc32fast::hash(&map) == link.crc {
                return Some(DebugFile {
                    path,
                    map,
                    found_by: FoundBy::DebugLink,
                });
            }
            rejected.crc += 1;
        }
    }
    None
}

/// A root to look under, and the object's path as seen from it.
#[derive(Debug, PartialEq, Eq)]
struct View {
    root: PathBuf,
    object_path: PathBuf,
}

/// The process's view (its root, `/proc/PID/root`), then the host's unless it is the same.
/// `maps_path` is the object's path in `/proc/PID/maps`, which the kernel gives as the reader
/// sees it: a chrooted process's objects are under its root's host path
/// (`/srv/chroot/usr/lib/libz.so`), which the process sees without that prefix.
fn views(pid: u32, maps_path: &Path) -> Vec<View> {
    let process = PathBuf::from(format!("/proc/{pid}/root"));
    let host = PathBuf::from("/");
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    if matches!((id(&process), id(&host)), (Some(a), Some(b)) if a == b) {
        return vec![View {
            root: process,
            object_path: maps_path.to_owned(),
        }];
    }
    let in_process = std::fs::read_link(&process)
        .ok()
        .and_then(|root| process_path(&root, maps_path))
        .unwrap_or_else(|| maps_path.to_owned());
    vec![
        View {
            root: process,
            object_path: in_process,
        },
        View {
            root: host,
            object_path: maps_path.to_owned(),
        },
    ]
}

/// `maps_path` as a process whose root is `root` (as the reader sees it) sees it; `None` when
/// it is not under that root (another mount namespace: the path is the process's own already).
fn process_path(root: &Path, maps_path: &Path) -> Option<PathBuf> {
    if root == Path::new("/") {
        return None;
    }
    let inside = maps_path.strip_prefix(root).ok()?;
    Some(Path::new("/").join(inside))
}

/// `path` (absolute, or relative to the root) under `root`. A `..` is dropped: a place under a
/// root stays under it.
fn under(root: &Path, path: &Path) -> PathBuf {
    let mut out = root.to_owned();
    out.extend(path.components().filter_map(|c| match c {
        Component::Normal(part) => Some(part),
        _ => None,
    }));
    out
}

/// The regular file at `path`, mapped; `None` if there is none (or it cannot be read).
fn map_file(path: &Path) -> Option<memmap2::Mmap> {
    // Non-blocking: a FIFO planted where a debug file is looked for must not hang the agent
    // (it is refused as not a regular file).
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() == 0 {
        return None;
    }
    // SAFETY: read-only and private, as the objects themselves are mapped (`ElfObject::read`).
    unsafe { memmap2::Mmap::map(&file) }.ok()
}

/// The GNU build ID of the ELF file in `bytes`, lowercase hex: from its note segments, else
/// (a debug file's segments may have no contents) its note sections.
pub(super) fn build_id_of(bytes: &[u8]) -> Option<String> {
    build_id(&Elf::parse(bytes).ok()?, bytes)
}

/// [`build_id_of`] for an ELF file already parsed.
pub(super) fn build_id(elf: &Elf<'_>, bytes: &[u8]) -> Option<String> {
    let is_build_id = |n: &goblin::elf::note::Note<'_>| {
        n.n_type == goblin::elf::note::NT_GNU_BUILD_ID && n.name == "GNU" && !n.desc.is_empty()
    };
    let from_segments = elf
        .iter_note_headers(bytes)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .find(is_build_id)
        .map(|n| hex(n.desc));
    from_segments.or_else(|| {
        elf.iter_note_sections(bytes, None)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .find(is_build_id)
            .map(|n| hex(n.desc))
    })
}

/// `bytes` as lowercase hex digits (build IDs, trace and span ids).
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link_section(name: &str, crc: u32) -> Vec<u8> {
        let mut s = name.as_bytes().to_vec();
        s.push(0);
        s.resize(s.len().next_multiple_of(4), 0);
        s.extend(crc.to_le_bytes());
        s
    }

    #[test]
    fn debug_links_parse_and_bad_ones_are_refused() {
        let link = DebugLink::parse(&link_section("libz.so.1.debug", 0xdead_beef)).unwrap();
        assert_eq!(link.name, "libz.so.1.debug");
        assert_eq!(link.crc, 0xdead_beef);
        // A name whose NUL ends at a multiple of 4: no padding.
        let link = DebugLink::parse(&link_section("abc", 7)).unwrap();
        assert_eq!((link.name.as_str(), link.crc), ("abc", 7));
        let mut cut = link_section("libz.so.1.debug", 1);
        cut.truncate(cut.len() - 1);
        for bad in [
            cut,
            link_section("../../etc/passwd", 1),
            link_section("..", 1),
            link_section("", 1),
            b"no terminator".to_vec(),
        ] {
            assert_eq!(DebugLink::parse(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn places_stay_under_their_root() {
        let root = Path::new("/proc/1/root");
        assert_eq!(
            under(root, Path::new("/usr/lib/debug/x.debug")),
            Path::new("/proc/1/root/usr/lib/debug/x.debug")
        );
        assert_eq!(
            under(root, Path::new("/usr/../../etc/x")),
            Path::new("/proc/1/root/usr/etc/x")
        );
    }

    #[test]
    fn a_chrooted_process_sees_its_objects_without_its_roots_prefix() {
        let root = Path::new("/srv/chroot");
        assert_eq!(
            process_path(root, Path::new("/srv/chroot/usr/lib/libz.so")),
            Some(PathBuf::from("/usr/lib/libz.so"))
        );
        assert_eq!(process_path(root, Path::new("/usr/lib/libz.so")), None);
        assert_eq!(
            process_path(Path::new("/"), Path::new("/usr/lib/libz.so")),
            None
        );
        // This process shares the host's root: one view, the maps path as it is.
        let object = Path::new("/usr/lib/libz.so");
        assert_eq!(
            views(std::process::id(), object),
            [View {
                root: PathBuf::from(format!("/proc/{}/root", std::process::id())),
                object_path: object.to_owned(),
            }]
        );
    }

    /// A debug link is followed to a file with its CRC, and a file with another CRC where it
    /// points is counted and passed over for the next place.
    #[test]
    fn a_debug_link_needs_the_crc_of_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let object = tmp.path().join("lib/libx.so");
        std::fs::create_dir_all(tmp.path().join("lib/.debug")).unwrap();
        let contents = b"the debug file's bytes";
        // The object's own directory has a stale file of that name; `.debug/` the right one.
        std::fs::write(tmp.path().join("lib/libx.so.debug"), b"stale").unwrap();
        std::fs::write(tmp.path().join("lib/.debug/libx.so.debug"), contents).unwrap();
        let dirs = DebugDirs::new([]);
        let search = DebugSearch {
            pid: std::process::id(),
            object_path: &object,
            dirs: &dirs,
        };
        let link = DebugLink {
            name: "libx.so.debug".into(),
            crc: crc32fast::hash(contents),
        };
        let mut rejected = Rejected::default();
        let found = find(&search, None, Some(&link), &mut rejected).unwrap();
        assert_eq!(found.found_by, FoundBy::DebugLink);
        assert!(found.path.ends_with("lib/.debug/libx.so.debug"));
        assert_eq!(
            rejected,
            Rejected {
                build_id: 0,
                crc: 1
            }
        );

        let wrong = DebugLink {
            crc: link.crc ^ 1,
            ..link
        };
        let mut rejected = Rejected::default();
        assert!(find(&search, None, Some(&wrong), &mut rejected).is_none());
        assert_eq!(rejected.crc, 2);
    }

    /// By build ID: the file must have that build ID (this test binary is the "debug file").
    #[test]
    fn a_build_id_path_needs_the_build_id_inside() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let id = build_id_of(&exe).expect("the test binary has a build ID");
        let tmp = tempfile::tempdir().unwrap();
        let place = |id: &str| {
            let dir = tmp.path().join(".build-id").join(&id[..2]);
            std::fs::create_dir_all(&dir).unwrap();
            dir.join(format!("{}.debug", &id[2..]))
        };
        std::fs::write(place(&id), &exe).unwrap();
        let other = "00".repeat(20);
        std::fs::write(place(&other), &exe).unwrap();
        let dirs = DebugDirs::new([tmp.path().to_owned()]);
        let object = Path::new("/nonexistent/libx.so");
        let search = DebugSearch {
            pid: std::process::id(),
            object_path: object,
            dirs: &dirs,
        };
        let mut rejected = Rejected::default();
        let found = find(&search, Some(&id), None, &mut rejected).unwrap();
        assert_eq!(found.found_by, FoundBy::BuildId);
        assert_eq!(rejected, Rejected::default());
        // A file at another build ID's place that is not that build: refused, counted.
        assert!(find(&search, Some(&other), None, &mut rejected).is_none());
        assert_eq!(rejected.build_id, 1);
        // No file at all is no rejection.
        let mut rejected = Rejected::default();
        assert!(find(&search, Some(&"11".repeat(20)), None, &mut rejected).is_none());
        assert_eq!(rejected, Rejected::default());
    }
}
