//! The native objects one process maps: `/proc/PID/maps` → framehop modules (unwind sections)
//! and an address → object lookup for naming, re-read when an address falls outside them
//! (a library loaded since), at most once per [`RELOAD_INTERVAL`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use framehop::{ExplicitModuleSectionInfo, Module, Unwinder as _};

use super::arch::Unwinder;
use crate::discovery::{load_bias, open_mapped_file, read_maps, MapsEntry};
use crate::symbolize::native::{
    DebugDirs, DebugSearch, ElfObject, ObjectCache, ObjectName, SectionBytes,
};

/// A process's maps are read again for an unknown address at most this often: a JIT or an
/// anonymous executable mapping would otherwise cost a maps read per sample.
const RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// One object mapped executable in the process.
#[derive(Debug, Clone)]
pub(super) struct Mapped {
    /// addresses of its executable mappings (first start to last end)
    pub avma: std::ops::Range<u64>,
    /// process address minus link-time address
    pub bias: u64,
    pub object: Arc<ElfObject>,
    pub name: Arc<ObjectName>,
}

impl Mapped {
    /// The link-time address of process address `avma`.
    pub fn svma(&self, avma: u64) -> u64 {
        avma.wrapping_sub(self.bias)
    }
}

/// The objects of one process and the framehop unwinder over them.
pub(super) struct Modules {
    pid: u32,
    /// where stripped objects' debug files are looked for
    debug_dirs: DebugDirs,
    pub unwinder: Unwinder<SectionBytes>,
    /// by start address
    mapped: Vec<Mapped>,
    loaded_at: Option<Instant>,
    /// objects that could not be read at the last load (stripped of unwind info, gone, denied)
    pub unreadable: u64,
    /// how many times the maps were read: what is known of an address is stale once it moves
    pub generation: u64,
}

impl std::fmt::Debug for Modules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Modules")
            .field("pid", &self.pid)
            .field("mapped", &self.mapped.len())
            .finish()
    }
}

impl Modules {
    pub fn new(pid: u32, debug_dirs: DebugDirs) -> Modules {
        Modules {
            pid,
            debug_dirs,
            unwinder: Unwinder::new(),
            mapped: Vec::new(),
            loaded_at: None,
            unreadable: 0,
            generation: 0,
        }
    }

    /// The object mapped at `avma`.
    pub fn find(&self, avma: u64) -> Option<&Mapped> {
        let i = self.mapped.partition_point(|m| m.avma.start <= avma);
        self.mapped
            .get(i.checked_sub(1)?)
            .filter(|m| m.avma.contains(&avma))
    }

    /// Whether an unwind entry of the object mapped at `avma` covers it.
    pub fn has_cfi(&self, avma: u64) -> bool {
        self.find(avma)
            .is_some_and(|m| m.object.has_cfi(m.svma(avma)))
    }

    /// Whether `avma` can be a return address: in a mapped object, right after a call.
    pub fn is_return_address(&self, avma: u64) -> bool {
        self.find(avma)
            .is_some_and(|m| m.object.follows_call(m.svma(avma)))
    }

    /// Makes sure every address of `addrs` is covered if the process maps it: reads the maps
    /// the first time, and again when one is not covered and the last read is old enough.
    pub fn cover(&mut self, addrs: impl IntoIterator<Item = u64>) {
        let due = match self.loaded_at {
            None => true,
            Some(at) => {
                at.elapsed() >= RELOAD_INTERVAL
                    && addrs.into_iter().any(|a| a != 0 && self.find(a).is_none())
            }
        };
        if due {
            self.load();
        }
    }

    fn load(&mut self) {
        self.loaded_at = Some(Instant::now());
        self.generation += 1;
        let Ok(maps) = read_maps(self.pid) else {
            return;
        };
        let mut by_path: BTreeMap<PathBuf, Vec<MapsEntry>> = BTreeMap::new();
        for (path, entry) in maps {
            by_path.entry(path).or_default().push(entry);
        }
        // The executable's inode, to tell it from the libraries.
        let exe_inode = std::fs::metadata(format!("/proc/{}/exe", self.pid))
            .ok()
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m));
        let mut unwinder = Unwinder::new();
        let mut mapped = Vec::new();
        let mut unreadable = 0;
        for (path, entries) in by_path {
            let exec: Vec<&MapsEntry> = entries.iter().filter(|e| e.executable).collect();
            let (Some(first), Some(last)) = (exec.first(), exec.last()) else {
                continue;
            };
            let avma = first.start..last.end;
            let executable = exe_inode.is_some_and(|i| entries.iter().any(|e| e.inode == i));
            let Some(m) = self.read_object(&path, &entries, avma, executable) else {
                unreadable += 1;
                continue;
            };
            unwinder.add_module(framehop_module(&m));
            mapped.push(m);
        }
        mapped.sort_by_key(|m| m.avma.start);
        self.unwinder = unwinder;
        self.mapped = mapped;
        self.unreadable = unreadable;
    }

    fn read_object(
        &self,
        path: &std::path::Path,
        entries: &[MapsEntry],
        avma: std::ops::Range<u64>,
        executable: bool,
    ) -> Option<Mapped> {
        let (opened, file) = open_mapped_file(self.pid, path, entries).ok()?;
        let search = DebugSearch {
            pid: self.pid,
            object_path: path,
            dirs: &self.debug_dirs,
        };
        let object = ObjectCache::get(&opened, &file, &search).ok()?;
        let bias = load_bias(&object.loads, entries)?;
        let name = Arc::new(ObjectName {
            path: Arc::from(path.to_string_lossy().as_ref()),
            build_id: object.build_id.clone(),
            executable,
        });
        Some(Mapped {
            avma,
            bias,
            object,
            name,
        })
    }
}

/// The framehop module of a mapped object: its CFI and text, at its process addresses.
fn framehop_module(m: &Mapped) -> Module<SectionBytes> {
    let o = &m.object;
    let info = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: o.text.as_ref().map(|s| s.svma.clone()),
        text: o.text.as_ref().map(|s| s.bytes.clone()),
        stubs_svma: None,
        stub_helper_svma: None,
        got_svma: o.got.clone(),
        unwind_info: None,
        eh_frame_svma: o.eh_frame.as_ref().map(|s| s.svma.clone()),
        eh_frame: o.eh_frame.as_ref().map(|s| s.bytes.clone()),
        eh_frame_hdr_svma: o.eh_frame_hdr.as_ref().map(|s| s.svma.clone()),
        eh_frame_hdr: o.eh_frame_hdr.as_ref().map(|s| s.bytes.clone()),
        debug_frame: None,
        text_segment_svma: None,
        text_segment: None,
    };
    Module::new(m.name.path.to_string(), m.avma.clone(), m.bias, info)
}
