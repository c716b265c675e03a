//! Every greenlet of a process (gevent, eventlet and greenlet itself), as `dump --greenlets`
//! shows them: the running ones (their frames are their thread's stack) and the parked ones
//! with the frames they are suspended in, which no thread's stack holds.
//!
//! Nothing in greenlet or gevent lists the greenlets, so they are found in the garbage
//! collector's lists ([`gc_lists`]), by type: `PyGreenlet_Type` (exported by the greenlet
//! extension) or a subclass of it (gevent's `Greenlet`). A greenlet object points to its C++
//! state (`pimpl`), which points back to the object (`_self`), keeps where its C stack starts
//! and stops (zero before it starts and once it is dead; the stop is -1 for a thread's main
//! greenlet), and, while it is suspended, its top frame object (`_top_frame`), whose
//! interpreter frame begins its chain. greenlet 3.0.3 and later end a suspended greenlet's
//! chain with a NULL `previous`; the walk also stops at an entry frame, where earlier ones
//! left the chain running on. The offsets are those of greenlet 3.x on builds with a GIL
//! (checked by experiment on 3.12 and from the debug information of the PyPI wheels for 3.14:
//! the same in every 3.x release).

mod gc_lists;

use serde::Serialize;

use super::asyncio::TaskFrame;
use super::walk::read_frame;
use super::Unwinder;
use crate::discovery::greenlet_type::greenlet_type_address;
use crate::memory::{MemoryError, ProcessMemory, StructBytes};
use crate::symbolize::ObjectError;

pub use gc_lists::GcListError;

/// `PyGreenlet.pimpl`, after the object header, `weakreflist` and `dict`.
const PIMPL: u64 = 32;
/// `Greenlet::_self`: the greenlet object again.
const SELF: u64 = 8;
/// `Greenlet::_stack_start` and `stack_stop`.
const STACK_START: u64 = 56;
const STACK_STOP: u64 = 64;
/// `PythonState::_top_frame`, inside the `Greenlet`: the suspended greenlet's top frame
/// object.
const TOP_FRAME: u64 = 104;
/// `PyFrameObject.f_frame`: its interpreter frame (3.11+).
const F_FRAME: u64 = 24;
/// `PyTypeObject.tp_name` and `tp_base`.
const TP_NAME: u64 = 24;
const TP_BASE: u64 = 256;
/// Bases followed from a type to `PyGreenlet_Type` at most.
const MAX_BASES: usize = 16;
/// Frames of one greenlet at most.
const MAX_FRAMES: usize = 1024;

/// Where a greenlet is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GreenletState {
    /// running on a thread now: its frames are that thread's stack
    Running,
    /// switched away from, its frames kept until it is switched to again
    Parked,
    /// made and not switched to yet
    NotStarted,
    /// returned or raised
    Dead,
}

/// One greenlet of a process.
#[derive(Debug, Clone, Serialize)]
pub struct Greenlet {
    /// the greenlet object's address (its identity while it lives)
    pub id: u64,
    /// its type's name (`greenlet.greenlet`, `Greenlet` for gevent's)
    pub kind: String,
    /// a thread's main greenlet (the one the thread started in)
    pub main: bool,
    /// where it is in its life
    pub state: GreenletState,
    /// a parked greenlet's frames, innermost first (none otherwise)
    pub frames: Vec<TaskFrame>,
}

/// Why the greenlets could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GreenletError {
    /// The process has not loaded greenlet.
    #[error("process {pid} has not imported greenlet (no PyGreenlet_Type in its objects)")]
    NotLoaded {
        /// host PID
        pid: u32,
    },
    /// A free-threaded build keeps no collector lists to find them in.
    #[error("greenlets are found through the garbage collector's lists, which a free-threaded build does not keep")]
    FreeThreaded,
    /// Before 3.11 frames are objects of another layout.
    #[error("greenlets are read on CPython 3.11 and later (process runs {0})")]
    TooOld(String),
    /// Discovery failed.
    #[error(transparent)]
    Discovery(#[from] crate::discovery::DiscoveryError),
    /// Reading the interpreter failed.
    #[error(transparent)]
    Unwind(#[from] super::UnwindError),
    /// The lists could not be walked.
    #[error(transparent)]
    Lists(#[from] GcListError),
    /// A read failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

impl Unwinder {
    /// Every greenlet of the process, in the collector's list order. The lists change as the
    /// program runs; one that changed under the walk is walked again (three times at most).
    pub fn greenlets(&mut self) -> Result<Vec<Greenlet>, GreenletError> {
        let pid = self.target.pid;
        let o = self.target.offsets;
        if o.free_threaded {
            return Err(GreenletError::FreeThreaded);
        }
        if o.frame.heap_frames {
            return Err(GreenletError::TooOld(self.target.version().to_string()));
        }
        let greenlet_type = greenlet_type_address(pid)?.ok_or(GreenletError::NotLoaded { pid })?;
        let interpreters = self.threads()?;
        let mut found = Vec::new();
        for (interp, _) in &interpreters {
            let gc = interp.addr + o.interpreter_state.gc;
            let mut tries = 0;
            let objects = loop {
                self.mem.begin_without_prefetch();
                match self.greenlet_objects(gc, greenlet_type) {
                    Err(GreenletError::Lists(GcListError::Changed)) if tries < 2 => tries += 1,
                    other => break other?,
                }
            };
            for (addr, ty) in objects {
                if let Some(g) = self.read_greenlet(addr, ty)? {
                    found.push(g);
                }
            }
        }
        Ok(found)
    }

    /// The (address, type) of every object of the collector state at `gc` whose type is
    /// `greenlet_type` or a subclass of it.
    fn greenlet_objects(
        &mut self,
        gc: u64,
        greenlet_type: u64,
    ) -> Result<Vec<(u64, u64)>, GreenletError> {
        let heads = gc_lists::list_heads(&mut self.mem, gc)?;
        let mut types = std::collections::HashMap::new();
        let mut greenlets = Vec::new();
        let mut seen = std::collections::HashSet::new();
        // List by list, kept only once filtered by type: one list's objects at a time in
        // memory, not the process's every object.
        for &head in &heads {
            let mut objects = Vec::new();
            gc_lists::walk_list(&mut self.mem, head, &heads, |addr, ty| {
                objects.push((addr, ty))
            })?;
            for (addr, ty) in objects {
                let is = match types.get(&ty) {
                    Some(&is) => is,
                    None => {
                        let is = self.derives_from(ty, greenlet_type);
                        types.insert(ty, is);
                        is
                    }
                };
                // An object that moved to the next generation between two lists' walks is
                // met twice.
                if is && seen.insert(addr) {
                    greenlets.push((addr, ty));
                }
            }
        }
        Ok(greenlets)
    }

    /// Whether type `ty` is `base` or derives from it through `tp_base`.
    fn derives_from(&mut self, mut ty: u64, base: u64) -> bool {
        for _ in 0..MAX_BASES {
            if ty == base {
                return true;
            }
            match self.mem.read_u64(ty + TP_BASE) {
                Ok(next) if next != 0 && next.is_multiple_of(8) => ty = next,
                _ => return false,
            }
        }
        false
    }

    /// The greenlet at `addr` of type `ty`; `None` for one whose state does not point back to
    /// it (being made or freed as it was read).
    fn read_greenlet(&mut self, addr: u64, ty: u64) -> Result<Option<Greenlet>, GreenletError> {
        // Freed since the lists were walked, its memory perhaps unmapped: not a greenlet now.
        let Ok(pimpl) = self.mem.read_u64(addr + PIMPL) else {
            return Ok(None);
        };
        if pimpl == 0 || !pimpl.is_multiple_of(8) {
            return Ok(None);
        }
        let mut state = [0u8; 112];
        if self.mem.read(pimpl, &mut state).is_err() || state.u64_at(SELF) != addr {
            return Ok(None);
        }
        let stack_start = state.u64_at(STACK_START);
        let stack_stop = state.u64_at(STACK_STOP);
        let top_frame = state.u64_at(TOP_FRAME);
        let main = stack_stop == u64::MAX;
        let state = if stack_stop == 0 {
            GreenletState::NotStarted
        } else if stack_start == 0 && !main {
            GreenletState::Dead
        } else if top_frame == 0 {
            GreenletState::Running
        } else {
            GreenletState::Parked
        };
        let frames = match state {
            GreenletState::Parked => self.parked_frames(top_frame).unwrap_or_default(),
            _ => Vec::new(),
        };
        Ok(Some(Greenlet {
            id: addr,
            kind: self.type_name(ty),
            main,
            state,
            frames,
        }))
    }

    /// A parked greenlet's frames, innermost first, from its top frame object.
    fn parked_frames(&mut self, top_frame: u64) -> Result<Vec<TaskFrame>, ObjectError> {
        let o = self.target.offsets;
        let mut frame = self.mem.read_u64(top_frame + F_FRAME)?;
        let mut raw = Vec::new();
        while frame != 0 && raw.len() < MAX_FRAMES {
            let f = read_frame(&mut self.mem, &o, frame)?;
            // Where a C-level evaluation began the greenlet's frames end: before 3.12's entry
            // frame (not a Python one), or with 3.11's first frame (`is_entry`).
            if o.frame.entry_owner == Some(f.owner) {
                break;
            }
            frame = f.previous;
            let first = f.is_entry;
            raw.push(f);
            if first {
                break;
            }
        }
        Ok(self
            .symbolize_raw(raw.iter())?
            .iter()
            .map(TaskFrame::from)
            .collect())
    }

    /// The type's `tp_name`, or `?` when it cannot be read.
    fn type_name(&mut self, ty: u64) -> String {
        let Ok(name) = self.mem.read_u64(ty + TP_NAME) else {
            return "?".into();
        };
        let mut buf = [0u8; 96];
        if self.mem.read(name, &mut buf).is_err() {
            return "?".into();
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    }
}
