//! Enumerates interpreters and their thread states.

use crate::memory::{MemoryError, ProcessMemory, StructBytes};
use crate::offsets::{GcBase, GilLocation, NativeThreadId, Offsets};

/// Most interpreters and threads we follow: bounds the list walks against cycles and garbage.
pub const MAX_INTERPRETERS: usize = 256;
/// Most thread states per interpreter.
pub const MAX_THREADS: usize = 8192;

/// `PyThreadState.state` of a thread attached to its interpreter (`_Py_THREAD_ATTACHED`).
const ATTACHED: u32 = 1;

/// What one sample needs of an interpreter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterpreterInfo {
    /// `PyInterpreterState*`
    pub addr: u64,
    /// newest thread state
    pub threads_head: u64,
    /// `code_object_generation` (3.14+)
    pub code_generation: Option<u64>,
    /// a collection is running
    pub gc_collecting: bool,
    /// 3.15: frame that started the collection
    pub gc_frame: Option<u64>,
    /// before 3.15 (no `gc.frame`): the thread state running the collection, when it can be
    /// told (see [`collecting_thread`]); set once the interpreter's threads are read
    pub gc_thread: Option<u64>,
    /// tstate holding this interpreter's GIL, if locked (3.6–3.14)
    pub gil_holder: Option<u64>,
    /// whether [`InterpreterInfo::gil_holder`] says who holds the GIL: not on builds whose GIL
    /// words are not known, nor on 3.6 before a second thread made it create its GIL (until
    /// then the one thread runs without one)
    pub gil_known: bool,
}

/// What one sample needs of a thread state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadInfo {
    /// `PyThreadState*`
    pub addr: u64,
    /// gettid() in the target's namespace
    pub native_thread_id: u32,
    /// pthread_t
    pub pthread_id: u64,
    /// top `_PyInterpreterFrame*` (0: not running Python)
    pub top_frame: u64,
    /// 3.15 anchor and its sequence
    pub anchor: Option<(u64, u64)>,
    /// 3.15 bottom sentinel frame
    pub base_frame: Option<u64>,
    /// holds the GIL (None: the build cannot tell)
    pub holds_gil: Option<bool>,
    /// free-threaded builds: the thread is attached to its interpreter (`state` 1)
    pub attached: Option<bool>,
    /// next (older) thread state
    pub next: u64,
}

/// Reads the interpreter at `addr`.
pub fn read_interpreter(
    mem: &mut impl ProcessMemory,
    o: &Offsets,
    runtime: u64,
    addr: u64,
) -> Result<(InterpreterInfo, u64), MemoryError> {
    let i = &o.interpreter_state;
    let next = mem.read_u64(addr.wrapping_add(i.next))?;
    let threads_head = mem.read_u64(addr.wrapping_add(i.threads_head))?;
    let code_generation = match i.code_object_generation {
        Some(off) => Some(mem.read_u64(addr.wrapping_add(off))?),
        None => None,
    };
    let gc_state = match o.gc.base {
        GcBase::Interpreter => Some(addr.wrapping_add(i.gc)),
        GcBase::Runtime(at) => Some(runtime.wrapping_add(at)),
        GcBase::Process => Some(0),
        GcBase::Unknown => None,
    };
    let gc_collecting = match gc_state {
        Some(state) => mem.read_u32(state.wrapping_add(o.gc.collecting))? != 0,
        None => false,
    };
    let gc_frame = match (gc_state, o.gc.frame) {
        (Some(state), Some(off)) => {
            Some(mem.read_u64(state.wrapping_add(off))?).filter(|&f| f != 0)
        }
        _ => None,
    };
    let gil = match o.gil {
        GilLocation::Runtime { locked, holder } => {
            read_gil_holder(mem, runtime + locked, runtime + holder)?
        }
        GilLocation::Interpreter { locked, holder } => {
            read_gil_holder(mem, addr + locked, addr + holder)?
        }
        GilLocation::Statics { locked, holder, .. } => read_gil_holder(mem, locked, holder)?,
        // 3.15's flag is each thread state's own; free-threaded builds have none.
        GilLocation::ThreadFlag { .. } | GilLocation::Disabled { .. } => Some(None),
        GilLocation::Unknown => None,
    };
    let (gil_known, gil_holder) = match gil {
        Some(holder) => (true, holder),
        None => (false, None),
    };
    Ok((
        InterpreterInfo {
            addr,
            threads_head,
            code_generation,
            gc_collecting,
            gc_frame,
            gc_thread: None,
            gil_holder,
            gil_known,
        },
        next,
    ))
}

/// The thread state running the interpreter's collection, for versions that do not say which
/// frame started it (`gc.frame`, 3.15+). With a GIL, the collector holds it. Free-threaded
/// builds have none: the collector stops the world (every other thread state is suspended, or
/// detached) for most of a collection, so the one attached thread is the collector. Finalizers
/// and `tp_clear` run with the world started again; while other threads are attached then, the
/// collector cannot be told apart and none is marked, rather than a wrong one.
pub fn collecting_thread(interp: &InterpreterInfo, threads: &[ThreadInfo]) -> Option<u64> {
    if !interp.gc_collecting {
        return None;
    }
    if let Some(holder) = threads.iter().find(|t| t.holds_gil == Some(true)) {
        return Some(holder.addr);
    }
    let mut attached = threads.iter().filter(|t| t.attached == Some(true));
    match (attached.next(), attached.next()) {
        (Some(only), None) => Some(only.addr),
        _ => None,
    }
}

/// Who holds the GIL: `last_holder` is only the current holder while `locked` is set. `None`
/// while the GIL is not created yet (`locked` is -1 then: 3.6 creates it with a second thread).
fn read_gil_holder(
    mem: &mut impl ProcessMemory,
    locked_addr: u64,
    holder_addr: u64,
) -> Result<Option<Option<u64>>, MemoryError> {
    let locked = mem.read_u32(locked_addr)? as i32;
    if locked < 0 {
        return Ok(None);
    }
    let holder = mem.read_u64(holder_addr)?;
    Ok(Some((locked != 0).then_some(holder).filter(|&h| h != 0)))
}

/// The tid the C library keeps at `offset` of the thread descriptor `pthread` (3.6–3.10, whose
/// thread states hold only the `pthread_t`): 0 for a thread state with no thread yet, or
/// before the offset is known.
pub fn pthread_tid(
    mem: &mut impl ProcessMemory,
    pthread: u64,
    offset: u64,
) -> Result<u32, MemoryError> {
    if pthread == 0 || offset == 0 {
        return Ok(0);
    }
    mem.read_u32(pthread.wrapping_add(offset))
}

/// Reads the thread state at `addr`.
pub fn read_thread(
    mem: &mut impl ProcessMemory,
    o: &Offsets,
    interp: &InterpreterInfo,
    addr: u64,
) -> Result<ThreadInfo, MemoryError> {
    let t = &o.thread_state;
    let mut buf = [0u8; 512];
    let buf = &mut buf[..o.thread_read_len().min(512)];
    mem.read(addr, buf)?;
    let mut top_frame = buf.u64_at(t.current_frame);
    if let Some(off) = t.cframe_current_frame {
        // 3.11/3.12: `current_frame` is a `_PyCFrame*`; the frame is one more hop away.
        top_frame = if top_frame == 0 {
            0
        } else {
            mem.read_u64(top_frame.wrapping_add(off))?
        };
    }
    let anchor = match (t.last_profiled_frame, t.last_profiled_frame_seq) {
        (Some(f), Some(s)) => Some((buf.u64_at(f), buf.u64_at(s))),
        _ => None,
    };
    let holds_gil = match o.gil {
        GilLocation::ThreadFlag { holds_gil, .. } => Some(buf.u32_at(holds_gil) != 0),
        GilLocation::Disabled { .. } => None,
        _ if !interp.gil_known => None,
        _ => Some(interp.gil_holder == Some(addr)),
    };
    let attached = match o.gil {
        GilLocation::Disabled { thread_state } => Some(buf.u32_at(thread_state) == ATTACHED),
        _ => None,
    };
    let pthread_id = buf.u64_at(t.thread_id);
    let native_thread_id = match t.native_thread_id {
        NativeThreadId::Field(off) => buf.u64_at(off) as u32,
        NativeThreadId::InPthread { offset } => pthread_tid(mem, pthread_id, offset)?,
    };
    Ok(ThreadInfo {
        addr,
        attached,
        native_thread_id,
        pthread_id,
        top_frame,
        anchor,
        base_frame: t.base_frame.map(|off| buf.u64_at(off)),
        holds_gil,
        next: buf.u64_at(t.next),
    })
}
