//! Decoding asyncio's objects in the target's memory: a task (name, coroutine, who awaits it),
//! a coroutine's chain of awaited coroutines, the set of a task's awaiters, and the lists of
//! tasks a thread and an interpreter keep. Addresses only; frames are symbolized by the caller.
//!
//! Everything is untrusted: tasks come and go while we read (thousands a second in a busy
//! service), so every walk is bounded, every pointer checked, and what makes no sense is an
//! [`ObjectError`], never a panic or an endless loop.

// foldhash: small sets of addresses, per read.
use foldhash::{HashSet, HashSetExt};

use crate::memory::{ProcessMemory, StructBytes};
use crate::offsets::{
    AsyncioDebugOffsets, CoroutineOffsets, CoroutineState, LongObjectOffsets, Offsets,
    TPFLAGS_LONG_SUBCLASS, TPFLAGS_UNICODE_SUBCLASS,
};
use crate::symbolize::{read_str, ObjectError};
use crate::unwind::thread_names::objects::read_u64_int;
use crate::unwind::walk::{read_frame, RawFrame};

/// Longest coroutine chain followed (`await` inside `await` …).
pub const MAX_CHAIN: usize = 64;
/// Most tasks read from one list.
pub const MAX_TASKS: usize = 1 << 15;
/// Largest awaiter set read (`mask + 1` slots).
const MAX_SET_SLOTS: u64 = 1 << 16;
/// Longest task name kept, in characters (as CPython's own reader).
const MAX_NAME_CHARS: usize = 255;
/// Low bits a tagged pointer (`_PyStackRef`, free-threaded fields) may carry.
const TAG_BITS: u64 = 3;

/// The layouts one read needs (copies: a process's layouts do not change).
#[derive(Debug, Clone, Copy)]
pub struct Layouts {
    /// the interpreter's layout
    pub o: Offsets,
    /// its coroutine, set and list layouts
    pub c: CoroutineOffsets,
    /// the `_asyncio` module's table
    pub a: AsyncioDebugOffsets,
}

/// One task object's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawTask {
    /// the `TaskObj*`
    pub addr: u64,
    /// a `Task` (not a bare `Future` in an awaiter set)
    pub is_task: bool,
    /// its name object (an int or a str)
    pub name: u64,
    /// its coroutine (kept once done: the coroutine's state says whether it runs)
    pub coro: u64,
    /// NULL, one awaiting task, or a set of them
    pub awaited_by: u64,
    /// `awaited_by` is a set
    pub awaited_by_is_set: bool,
}

impl RawTask {
    /// The address of the task's own coroutine frame: where its frames start on the stack of
    /// the thread running it (the frame lives inside the coroutine object).
    pub fn frame(&self, c: &CoroutineOffsets) -> Option<u64> {
        (self.coro != 0).then(|| self.coro.wrapping_add(c.gi_iframe))
    }
}

fn pointer(addr: u64) -> Result<u64, ObjectError> {
    if addr == 0 || !addr.is_multiple_of(8) {
        return Err(ObjectError::Malformed { addr });
    }
    Ok(addr)
}

/// The part of a task object that [`read_task`] reads: from its first field to the end of its
/// last. Not its header: its reference count moves whenever anything takes or drops a
/// reference to it (every child a `gather` adds takes one on its caller), which says nothing
/// of its chain; whether it is alive is checked apart ([`super::instant::Reads::must_be_alive`]).
fn task_span(a: &AsyncioDebugOffsets) -> (u64, u64) {
    let fields = [
        (a.task_name, 8),
        (a.task_coro, 8),
        (a.task_awaited_by, 8),
        (a.task_is_task, 1),
        (a.task_awaited_by_is_set, 1),
    ];
    let start = fields.iter().map(|f| f.0).min().unwrap_or(0);
    let end = fields.iter().map(|f| f.0 + f.1).max().unwrap_or(0);
    (start, end)
}

/// The fields of the task at `addr`, from the bytes of its [`task_span`].
fn decode_task(a: &AsyncioDebugOffsets, addr: u64, span: &[u8]) -> RawTask {
    let start = task_span(a).0;
    let at = |off: u64| off - start;
    RawTask {
        addr,
        is_task: span.u8_at(at(a.task_is_task)) != 0,
        name: span.u64_at(at(a.task_name)) & !TAG_BITS,
        coro: span.u64_at(at(a.task_coro)) & !TAG_BITS,
        awaited_by: span.u64_at(at(a.task_awaited_by)) & !TAG_BITS,
        awaited_by_is_set: span.u8_at(at(a.task_awaited_by_is_set)) != 0,
    }
}

/// Reads the task at `addr`.
pub fn read_task(
    mem: &mut impl ProcessMemory,
    l: &Layouts,
    addr: u64,
) -> Result<RawTask, ObjectError> {
    let (start, end) = task_span(&l.a);
    let buf = mem.read_vec(pointer(addr)?.wrapping_add(start), (end - start) as usize)?;
    Ok(decode_task(&l.a, addr, &buf))
}

/// Whether the future at `addr` (a member of an awaiter set) is a task, not a bare future:
/// its flag alone is read, the rest of a future being no task's fields.
pub fn is_task(mem: &mut impl ProcessMemory, l: &Layouts, addr: u64) -> Result<bool, ObjectError> {
    let mut flag = [0u8; 1];
    mem.read(pointer(addr)?.wrapping_add(l.a.task_is_task), &mut flag)?;
    Ok(flag[0] != 0)
}

/// What a coroutine's state byte says of its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    /// created, not started
    NotStarted,
    /// started, not finished, and not running now: suspended in an `await` or a `yield`
    Suspended,
    /// running on some thread right now
    Executing,
    /// returned, raised or cleared
    Finished,
}

/// The life the coroutine at `coro` is in, from its state byte.
pub fn coroutine_life(
    mem: &mut impl ProcessMemory,
    l: &Layouts,
    coro: u64,
) -> Result<Life, ObjectError> {
    let mut state = [0u8; 1];
    mem.read(pointer(coro)?.wrapping_add(l.c.gi_frame_state), &mut state)?;
    Ok(match CoroutineState::decode(l.c.frame_states, state[0]) {
        Some(CoroutineState::Created) => Life::NotStarted,
        Some(CoroutineState::Suspended | CoroutineState::SuspendedYieldFrom) => Life::Suspended,
        Some(CoroutineState::Executing) => Life::Executing,
        Some(CoroutineState::Completed | CoroutineState::Cleared) => Life::Finished,
        None => return Err(ObjectError::Malformed { addr: coro }),
    })
}

/// A task's name: a str as it is (at most 255 characters), an int `N` as `Task-N` (the counter
/// asyncio names unnamed tasks with, kept as an int until asked for).
pub fn task_name(
    mem: &mut impl ProcessMemory,
    l: &Layouts,
    long: &LongObjectOffsets,
    name: u64,
) -> Result<String, ObjectError> {
    let ty = mem.read_u64(pointer(name)?.wrapping_add(l.o.pyobject.ob_type))?;
    let flags = mem.read_u64(pointer(ty)?.wrapping_add(l.c.tp_flags))?;
    if flags & TPFLAGS_LONG_SUBCLASS != 0 {
        return match read_u64_int(mem, long, name)? {
            Some(n) => Ok(format!("Task-{n}")),
            None => Err(ObjectError::Malformed { addr: name }),
        };
    }
    if flags & TPFLAGS_UNICODE_SUBCLASS == 0 {
        return Err(ObjectError::Malformed { addr: name });
    }
    let mut s = read_str(mem, &l.o, name)?;
    if let Some((cut, _)) = s.char_indices().nth(MAX_NAME_CHARS) {
        s.truncate(cut);
    }
    Ok(s)
}

/// The tasks awaiting `task`: none, the one it names, or the members of its set (dummy slots of
/// removed members skipped).
pub fn awaiters(
    mem: &mut impl ProcessMemory,
    l: &Layouts,
    task: &RawTask,
) -> Result<Vec<u64>, ObjectError> {
    if task.awaited_by == 0 {
        return Ok(Vec::new());
    }
    if !task.awaited_by_is_set {
        return Ok(vec![pointer(task.awaited_by)?]);
    }
    let c = &l.c;
    let set = pointer(task.awaited_by)?;
    let used = mem.read_u64(set.wrapping_add(c.set_used))?;
    let mask = mem.read_u64(set.wrapping_add(c.set_mask))?;
    let table = mem.read_u64(set.wrapping_add(c.set_table))?;
    if mask >= MAX_SET_SLOTS || used > mask + 1 {
        return Err(ObjectError::Malformed { addr: set });
    }
    // Each slot is {key, hash}; a removed member leaves a dummy key with hash -1.
    let slots = mem.read_vec(pointer(table)?, ((mask + 1) * 16) as usize)?;
    Ok(slots
        .chunks_exact(16)
        .filter(|s| s.u64_at(0) != 0 && s.u64_at(8) != u64::MAX)
        .map(|s| s.u64_at(0))
        .take(used as usize)
        .collect())
}

/// Whether the coroutine at `coro` has started and not finished: one a thread may have been
/// running. A task stays in its thread's list until it is freed, its coroutine done; and a new
/// task's coroutine, not started yet, may sit at the address of one that just finished.
pub fn coroutine_live(
    mem: &mut impl ProcessMemory,
    l: &Layouts,
    coro: u64,
) -> Result<bool, ObjectError> {
    Ok(matches!(
        coroutine_life(mem, l, coro)?,
        Life::Suspended | Life::Executing
    ))
}

/// The frames of a coroutine and of the coroutines it awaits in turn, outermost first: a
/// coroutine suspended in `await other()` keeps `other` on its value stack, which is followed
/// while it is a coroutine of the same type (an `await` of a future or an iterator ends the
/// chain). A coroutine running right now has its frames on a thread's stack instead, so its
/// frame alone is read. Bounded by [`MAX_CHAIN`] and by a repeat of a coroutine.
pub fn coroutine_chain(
    mem: &mut impl ProcessMemory,
    l: &Layouts,
    coro: u64,
) -> Result<Vec<RawFrame>, ObjectError> {
    let (o, c) = (&l.o, &l.c);
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut coro = coro;
    let mut coro_type = None;
    while coro != 0 && out.len() < MAX_CHAIN && seen.insert(coro) {
        let coro_addr = pointer(coro)?;
        let ty = mem.read_u64(coro_addr.wrapping_add(o.pyobject.ob_type))?;
        if coro_type.is_some_and(|t| t != ty) {
            break;
        }
        coro_type = Some(ty);
        let mut state = [0u8; 1];
        mem.read(coro_addr.wrapping_add(c.gi_frame_state), &mut state)?;
        let Some(state) = CoroutineState::decode(c.frame_states, state[0]) else {
            return Err(ObjectError::Malformed { addr: coro_addr });
        };
        if state == CoroutineState::Cleared || state == CoroutineState::Completed {
            break;
        }
        let frame_addr = coro_addr.wrapping_add(c.gi_iframe);
        let frame = read_frame(mem, o, frame_addr)?;
        out.push(frame);
        if state != CoroutineState::SuspendedYieldFrom {
            break;
        }
        let sp = mem.read_u64(frame_addr.wrapping_add(c.stackpointer))? & !TAG_BITS;
        let Some(slot) = sp.checked_sub(8 * c.awaited_below_sp) else {
            break;
        };
        if sp == 0 || slot <= frame_addr {
            break;
        }
        coro = mem.read_u64(slot)? & !TAG_BITS;
    }
    Ok(out)
}

/// The tasks of a circular task list whose head is at `head` (a thread's or the
/// interpreter's), in list order. A node that leads nowhere ends the list with an error.
pub fn list_tasks(
    mem: &mut impl ProcessMemory,
    l: &Layouts,
    head: u64,
) -> Result<Vec<u64>, ObjectError> {
    let mut next = |node: u64| -> Result<u64, ObjectError> {
        Ok(mem.read_u64(pointer(node)?.wrapping_add(l.c.llist_next))?)
    };
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut node = next(head)?;
    while node != head {
        if node == 0 || out.len() >= MAX_TASKS || !seen.insert(node) {
            return Err(ObjectError::Malformed { addr: node });
        }
        out.push(node.wrapping_sub(l.a.task_node));
        node = next(node)?;
    }
    Ok(out)
}
