//! Native stacks: the registers and user-stack copy of a BPF record → the native frames of the
//! sample, named, innermost first, kernel frames at the leaf; and their merge with the Python
//! frames ([`merge`]).
//!
//! In: a record's native section, where it lies in the ring buffer (registers, kernel return
//! addresses, stack bytes from `sp` up). Out: [`NativeFrame`]s. The copy is unwound with framehop over each object's `.eh_frame` (no
//! frame pointers needed; framehop falls back to them where CFI has no rule). Caches: the
//! process's objects ([`modules`]; parsed objects are shared by all processes) and one named
//! frame per address, bounded.

mod arch;
pub mod merge;
mod mix;
mod modules;

pub use mix::{NativeMix, NativeMixer};

use std::sync::Arc;

use common::NativeSection;
use foldhash::{HashMap, HashMapExt};
use framehop::Unwinder as _;

use crate::symbolize::kernel::KernelSymbols;
use crate::symbolize::native::{demangle, DebugDirs, ObjectName};
use crate::symbolize::{CodeName, Frame, FrameKind};

use arch::Cache;
use modules::Modules;

/// Native frames unwound per sample at most.
pub const MAX_NATIVE_FRAMES: usize = 256;
/// Named addresses kept per process; the cache starts again when full.
const MAX_NAMED: usize = 1 << 16;
/// Addresses whose unwind-entry coverage is kept per process; the cache starts again when full.
const MAX_CFI_KNOWN: usize = 1 << 16;

/// The native frames of one sample.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NativeStack {
    /// innermost first: kernel frames, then user frames
    pub frames: Vec<NativeFrame>,
    /// the unwind reached the thread's first frame (framehop found no caller), rather than
    /// stopping at the copy's end or at code it could not unwind
    pub reached_root: bool,
    /// frames outside every object the process maps, as of the last read of its maps (a
    /// library unloaded since, a JIT): named `[unknown]`
    pub unmapped_frames: u32,
    /// the unwind stopped at a frame no unwind entry covers (hand-written assembly, a JIT),
    /// whose caller, guessed from the frame pointer, was not a return address
    pub stopped_without_cfi: bool,
}

/// One native frame of a sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeFrame {
    /// named frame (kind [`FrameKind::NativeCode`] or [`FrameKind::Kernel`])
    pub frame: Frame,
    /// the frame runs CPython's eval loop: the Python frames of one evaluation go here
    pub eval: bool,
}

/// Counters of native unwinding.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NativeStats {
    /// captures unwound
    pub stacks: u64,
    /// native frames produced
    pub frames: u64,
    /// frames outside every object the process maps
    pub unmapped_frames: u64,
    /// frames in an object without a symbol for them (`object+offset`)
    pub unnamed_frames: u64,
}

/// Unwinds and names the native stacks of one process.
pub struct NativeUnwinder {
    modules: Modules,
    cache: Cache,
    named: HashMap<u64, NativeFrame>,
    /// lookup address → an unwind entry covers it (addresses of mapped objects only)
    cfi: HashMap<u64, bool>,
    /// the maps' generation `named` and `cfi` were filled under: a library unloaded, and
    /// another mapped at its addresses, must not keep the old one's answers
    known_generation: u64,
    stats: NativeStats,
    /// the last sample's lookup addresses and frames: reused, so that a sample allocates
    /// nothing here once they have grown to the deepest stack
    addrs: Vec<u64>,
    stack: NativeStack,
}

impl std::fmt::Debug for NativeUnwinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeUnwinder")
            .field("modules", &self.modules)
            .field("stats", &self.stats)
            .finish()
    }
}

impl NativeUnwinder {
    /// Heap bytes of this process's named frames and unwind cache (the objects themselves are
    /// shared by every process: [`crate::symbolize::native::ObjectCache::memory`]).
    pub fn bytes(&self) -> u64 {
        use std::mem::size_of;
        let named = self.named.capacity() * size_of::<(u64, NativeFrame)>();
        let cfi = self.cfi.capacity() * size_of::<(u64, bool)>();
        (named + cfi + size_of::<Cache>() + self.addrs.capacity() * size_of::<u64>()) as u64
    }

    /// An unwinder for process `pid` (its maps are read at the first capture), which looks
    /// for the debug files of stripped objects in `debug_dirs`.
    pub fn new(pid: u32, debug_dirs: DebugDirs) -> NativeUnwinder {
        NativeUnwinder {
            modules: Modules::new(pid, debug_dirs),
            cache: Cache::new(),
            named: HashMap::new(),
            cfi: HashMap::new(),
            known_generation: 0,
            stats: NativeStats::default(),
            addrs: Vec::new(),
            stack: NativeStack::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> NativeStats {
        self.stats
    }

    /// The native frames of the section `n`, innermost first: kernel frames, then the user
    /// frames the copied stack unwinds to (as far as the copy and the objects' CFI reach).
    /// Valid until the next call.
    pub fn stack(&mut self, n: &NativeSection<'_>) -> &NativeStack {
        self.stats.stacks += 1;
        let unmapped_before = self.stats.unmapped_frames;
        let mut addrs = std::mem::take(&mut self.addrs);
        let (reached_root, stopped_without_cfi) = self.unwind(n, &mut addrs);
        let mut frames = std::mem::take(&mut self.stack.frames);
        frames.clear();
        // Off-CPU, the kernel stack is taken inside the program, which the switch calls: its
        // first frames are the program and the tracepoint machinery, the profiler's own.
        let mut ours = true;
        for k in n.kernel_frames() {
            let f = self.kernel_frame(k);
            ours = ours && runs_bpf_programs(&f.frame.code.function);
            if !ours {
                frames.push(f);
            }
        }
        for &a in &addrs {
            frames.push(self.user_frame(a));
        }
        self.stats.frames += frames.len() as u64;
        self.addrs = addrs;
        self.stack = NativeStack {
            frames,
            reached_root,
            unmapped_frames: (self.stats.unmapped_frames - unmapped_before) as u32,
            stopped_without_cfi,
        };
        &self.stack
    }

    /// Puts the lookup addresses (the ip, then each return address minus one) of the user
    /// stack into `addrs`; returns whether the unwind reached the root, and whether it stopped
    /// at a frame without unwind entries.
    ///
    /// The caller of a frame no unwind entry covers comes from framehop's frame-pointer step,
    /// a guess where the code keeps no frame pointer (BLAS kernels use `rbp` as a register):
    /// it is kept only if it is a return address (in a mapped object, right after a call),
    /// and a root found that way is not one. Otherwise the stack ends at the frame, which the
    /// merge keeps as a cut stack, not as a mismatch that loses every native frame.
    fn unwind(&mut self, n: &NativeSection<'_>, addrs: &mut Vec<u64>) -> (bool, bool) {
        addrs.clear();
        let (ip, sp) = (n.hdr.ip, n.hdr.sp);
        self.modules.cover([ip]);
        self.forget_if_remapped();
        let stack = n.stack;
        let mut read = |addr: u64| -> Result<u64, ()> {
            let off = usize::try_from(addr.checked_sub(sp).ok_or(())?).map_err(|_| ())?;
            let bytes = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let regs = arch::start_regs(ip, sp, n.hdr.bp);
        let mut it = self
            .modules
            .unwinder
            .iter_frames(ip, regs, &mut self.cache, &mut read);
        // An error ends the stack where it is: the copy's end, or code without CFI.
        let mut reached_root = false;
        // The last frame pushed is covered by an unwind entry: its caller is not a guess.
        let mut exact = true;
        loop {
            match it.next() {
                Ok(Some(f)) => {
                    if !exact && !self.modules.is_return_address(f.address()) {
                        break;
                    }
                    let lookup = f.address_for_lookup();
                    addrs.push(lookup);
                    if self.cfi.len() >= MAX_CFI_KNOWN {
                        self.cfi.clear();
                    }
                    exact = match self.cfi.get(&lookup) {
                        Some(&known) => known,
                        // Outside the maps as last read: not remembered, the next read may
                        // find the library.
                        None if self.modules.find(lookup).is_none() => false,
                        None => *self
                            .cfi
                            .entry(lookup)
                            .or_insert_with(|| self.modules.has_cfi(lookup)),
                    };
                }
                Ok(None) => {
                    reached_root = exact;
                    break;
                }
                Err(_) => break,
            }
            if addrs.len() >= MAX_NATIVE_FRAMES {
                break;
            }
        }
        let stopped_without_cfi = !exact;
        // A library loaded since the maps were read: the next capture sees it.
        if addrs.iter().any(|&a| self.modules.find(a).is_none()) {
            self.modules.cover(addrs.iter().copied());
            self.forget_if_remapped();
        }
        (reached_root, stopped_without_cfi)
    }

    /// Forgets the names and unwind-entry answers of the previous maps once they were read
    /// again.
    fn forget_if_remapped(&mut self) {
        if self.known_generation != self.modules.generation {
            self.known_generation = self.modules.generation;
            self.named.clear();
            self.cfi.clear();
        }
    }

    fn remember(&mut self, addr: u64, f: NativeFrame) -> NativeFrame {
        if self.named.len() >= MAX_NAMED {
            self.named.clear();
        }
        self.named.insert(addr, f.clone());
        f
    }

    fn user_frame(&mut self, addr: u64) -> NativeFrame {
        if let Some(f) = self.named.get(&addr) {
            return f.clone();
        }
        let Some(m) = self.modules.find(addr) else {
            self.stats.unmapped_frames += 1;
            // Not remembered: the address may belong to an object loaded after the last read.
            return NativeFrame {
                frame: native_frame("[unknown]", unknown_object(), FrameKind::NativeCode),
                eval: false,
            };
        };
        let svma = m.svma(addr);
        let name = match m.object.symbol(svma) {
            Some(hit) => demangle(hit.name),
            None => {
                self.stats.unnamed_frames += 1;
                let start = m.object.code_start(svma).unwrap_or(svma);
                format!("{}+{start:#x}", m.name.file_name())
            }
        };
        let f = NativeFrame {
            frame: native_frame(&name, Arc::clone(&m.name), FrameKind::NativeCode),
            eval: m.object.in_eval_loop(svma),
        };
        self.remember(addr, f)
    }

    fn kernel_frame(&mut self, addr: u64) -> NativeFrame {
        if let Some(f) = self.named.get(&addr) {
            return f.clone();
        }
        let name = KernelSymbols::host()
            .name(addr)
            .map_or_else(|| "[unknown kernel]".to_owned(), |n| n.to_string());
        let f = NativeFrame {
            frame: native_frame(&name, kernel_object(), FrameKind::Kernel),
            eval: false,
        };
        self.remember(addr, f)
    }
}

/// Whether a kernel function is a BPF program or the tracepoint code that runs one (the
/// profiler's own frames above a switch's stack).
fn runs_bpf_programs(function: &str) -> bool {
    ["bpf_prog_", "bpf_trace_run", "__bpf_trace_", "__traceiter_"]
        .iter()
        .any(|p| function.starts_with(p))
}

fn native_frame(name: &str, object: Arc<ObjectName>, kind: FrameKind) -> Frame {
    Frame {
        code: Arc::new(CodeName::native(name, object)),
        line: None,
        kind,
    }
}

/// The object of kernel frames: `[kernel]`, so that they can be filtered.
pub fn kernel_object() -> Arc<ObjectName> {
    static KERNEL: std::sync::LazyLock<Arc<ObjectName>> = std::sync::LazyLock::new(|| {
        Arc::new(ObjectName {
            path: Arc::from("[kernel]"),
            build_id: None,
            executable: false,
        })
    });
    Arc::clone(&KERNEL)
}

fn unknown_object() -> Arc<ObjectName> {
    static UNKNOWN: std::sync::LazyLock<Arc<ObjectName>> = std::sync::LazyLock::new(|| {
        Arc::new(ObjectName {
            path: Arc::from("[unknown]"),
            build_id: None,
            executable: false,
        })
    });
    Arc::clone(&UNKNOWN)
}

#[cfg(test)]
mod tests {
    use super::runs_bpf_programs;

    #[test]
    fn the_programs_own_kernel_frames_are_told_from_the_threads() {
        for ours in [
            "bpf_prog_a87ecdee1bfc8e82_pa_switch",
            "bpf_trace_run4",
            "__bpf_trace_sched_switch",
            "__traceiter_sched_switch",
        ] {
            assert!(runs_bpf_programs(ours), "{ours}");
        }
        for theirs in [
            "__schedule",
            "schedule",
            "do_nanosleep",
            "bpf_check",
            "[unknown kernel]",
        ] {
            assert!(!runs_bpf_programs(theirs), "{theirs}");
        }
    }
}
