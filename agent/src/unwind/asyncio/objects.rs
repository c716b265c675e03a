//! Decoding asyncio's objects in the target's memory: a task (name, coroutine, who awaits it),
//! a coroutine's chain of awaited coroutines, the set of a task's awaiters, and the lists of
//! tasks a thread and an interpreter keep. Addresses only; frames are symbolized by the caller.
//!
//! Everything is untrusted: tasks come and go while we read (thousands a second in a busy
//! service), so every walk is bounded, every pointer checked, and what makes no sense is an
//! [`ObjectError`], never a panic or an endless loop.

// foldhash: small sets of addresses, per read.
use foldhash::{HashSet, HashSetExt};

use crate::memory::{ProcessMemory, RemoteMemory, StructBytes};
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

/// Bytes of a task object that [`read_task`] reads.
fn task_len(a: &AsyncioDebugOffsets) -> u64 {
    [
        a.task_name + 8,
        a.task_coro + 8,
        a.task_awaited_by + 8,
        a.task_is_task + 1,
        a.task_awaited_by_is_set + 1,
    ]
    .into_iter()
    .max()
    .unwrap_or(0)
}

/// The fields of the task at `addr`, from its bytes.
fn decode_task(a: &AsyncioDebugOffsets, addr: u64, buf: &[u8]) -> RawTask {
    RawTask {
        addr,
        is_task: buf.u8_at(a.task_is_task) != 0,
        name: buf.u64_at(a.task_name) & !TAG_BITS,
        coro: buf.u64_at(a.task_coro) & !TAG_BITS,
        awaited_by: buf.u64_at(a.task_awaited_by) & !TAG_BITS,
        awaited_by_is_set: buf.u8_at(a.task_awaited_by_is_set) != 0,
    }
}

/// Reads the task at `addr`.
pub fn read_task(
    mem: &mut impl ProcessMemory,
    l: &Layouts,
    addr: u64,
) -> Result<RawTask, ObjectError> {
    let buf = mem.read_vec(pointer(addr)?, task_len(&l.a) as usize)?;
    Ok(decode_task(&l.a, addr, &buf))
}

/// How a task read at one instant turned out ([`read_settled_task`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettledTask {
    /// its coroutine had started and not finished: its awaiters are ones it had while it ran
    Live(RawTask),
    /// its coroutine had not started yet
    NotStarted(RawTask),
    /// its coroutine has finished (or the task holds another coroutine now)
    Finished,
    /// it changed between the two copies: read at no one instant
    Changed,
}

/// What a coroutine's state byte says of its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    NotStarted,
    Live,
    Finished,
}

fn life(c: &CoroutineOffsets, state: u8, coro: u64) -> Result<Life, ObjectError> {
    Ok(match CoroutineState::decode(c.frame_states, state) {
        Some(CoroutineState::Created) => Life::NotStarted,
        Some(
            CoroutineState::Suspended
            | CoroutineState::SuspendedYieldFrom
            | CoroutineState::Executing,
        ) => Life::Live,
        Some(CoroutineState::Completed | CoroutineState::Cleared) => Life::Finished,
        None => return Err(ObjectError::Malformed { addr: coro }),
    })
}

/// The task at `addr`, whose coroutine was `coro` when last read, read so that what awaits it
/// is what awaited it at one instant of its coroutine's life, never a value from before it was
/// awaited beside frames of after, nor one from after it finished.
///
/// A task's awaiters go from none (created) to its awaiters (a `gather` or an `await` of it,
/// before it first runs) and back to none (its awaiters let go once it is done), and a freed
/// task's memory is reused at once by the next one. So one `process_vm_readv`, which copies its
/// ranges in order, takes the coroutine's state, the task, the state again and the task again:
/// the task is taken when both states are of the same part of a life and both copies agree.
/// Within one life the first copy lies between the two states; a new life would have been
/// created and awaited in between, and its second copy would differ from the first.
pub fn read_settled_task(
    remote: &mut RemoteMemory,
    l: &Layouts,
    addr: u64,
    coro: u64,
) -> Result<SettledTask, ObjectError> {
    let len = task_len(&l.a) as usize;
    let state = pointer(coro)?.wrapping_add(l.c.gi_frame_state);
    let task = pointer(addr)?;
    let ranges = [(state, 1), (task, len), (state, 1), (task, len)];
    let mut buf = vec![0u8; 2 * (len + 1)];
    if remote.read_ranges(&ranges, &mut buf)? < buf.len() {
        return Err(ObjectError::Malformed { addr });
    }
    let (first, second) = buf.split_at(len + 1);
    let copy = decode_task(&l.a, addr, &first[1..]);
    if first[1..] != second[1..] {
        return Ok(SettledTask::Changed);
    }
    // A list read a moment earlier may lead to a task being freed, or freed: its count is
    // zero from its deallocation on, whatever its fields still say, and what they point at
    // may already be other objects.
    if copy.coro != coro || !object_alive(l.o.free_threaded, &first[1..]) {
        return Ok(SettledTask::Finished);
    }
    Ok(
        match (life(&l.c, first[0], coro)?, life(&l.c, second[0], coro)?) {
            (Life::Live, Life::Live) => SettledTask::Live(copy),
            (Life::NotStarted, Life::NotStarted) => SettledTask::NotStarted(copy),
            (_, Life::Finished) => SettledTask::Finished,
            _ => SettledTask::Changed,
        },
    )
}

/// Whether the object whose header starts `header` has references: a deallocated object's
/// count is zero (the allocator reuses a block's first words, below the count). A
/// free-threaded object is dead when both its owner's count and the shared one (above its two
/// flag bits) are.
fn object_alive(free_threaded: bool, header: &[u8]) -> bool {
    if free_threaded {
        header.u32_at(FT_REF_LOCAL) != 0 || header.u64_at(FT_REF_SHARED) >> 2 != 0
    } else {
        header.u32_at(0) != 0
    }
}

/// Free-threaded object header: `ob_ref_local` (u32) and `ob_ref_shared` offsets.
const FT_REF_LOCAL: u64 = 12;
const FT_REF_SHARED: u64 = 16;

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
    let mut state = [0u8; 1];
    mem.read(pointer(coro)?.wrapping_add(l.c.gi_frame_state), &mut state)?;
    Ok(life(&l.c, state[0], coro)? == Life::Live)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unwind::asyncio::garbage_tests::layouts;

    /// A task and its coroutine laid out in this process's own memory, read back through
    /// `process_vm_readv` as the agent reads a target.
    struct Image {
        bytes: Box<Aligned>,
    }

    /// Pointers the readers follow must be 8-aligned.
    #[repr(C, align(8))]
    struct Aligned([u8; 512]);

    const CORO_AT: usize = 256;

    impl Image {
        fn new(l: &Layouts, state: u8, awaited_by: u64) -> Image {
            let mut image = Image {
                bytes: Box::new(Aligned([0; 512])),
            };
            let coro = image.addr() + CORO_AT as u64;
            image.put(l.a.task_coro, &coro.to_le_bytes());
            image.put(l.a.task_name, &0x1000u64.to_le_bytes());
            image.put(l.a.task_awaited_by, &awaited_by.to_le_bytes());
            image.put(l.a.task_is_task, &[1]);
            image.put(0, &1u64.to_le_bytes());
            image.put(CORO_AT as u64 + l.c.gi_frame_state, &[state]);
            image
        }

        fn addr(&self) -> u64 {
            self.bytes.0.as_ptr() as u64
        }

        fn coro(&self) -> u64 {
            self.addr() + CORO_AT as u64
        }

        fn put(&mut self, off: u64, value: &[u8]) {
            self.bytes.0[off as usize..off as usize + value.len()].copy_from_slice(value);
        }

        fn read(&self, l: &Layouts, coro: u64) -> Result<SettledTask, ObjectError> {
            let mut remote = RemoteMemory::new(std::process::id());
            read_settled_task(&mut remote, l, self.addr(), coro)
        }
    }

    /// 3.15's codes: 0 created, 1 suspended, 4 executing, 5 cleared.
    #[test]
    fn a_task_is_taken_only_in_one_part_of_its_coroutine_s_life() {
        let l = layouts();
        for state in [1u8, 4] {
            let image = Image::new(&l, state, 0x2000);
            match image.read(&l, image.coro()).expect("readable") {
                SettledTask::Live(task) => assert_eq!(task.awaited_by, 0x2000),
                other => panic!("state {state}: {other:?}"),
            }
        }
        let created = Image::new(&l, 0, 0);
        assert!(matches!(
            created.read(&l, created.coro()),
            Ok(SettledTask::NotStarted(task)) if task.awaited_by == 0
        ));
        let done = Image::new(&l, 5, 0);
        assert_eq!(done.read(&l, done.coro()).ok(), Some(SettledTask::Finished));
        // The task holds another coroutine than the one last read: not the same life.
        let live = Image::new(&l, 1, 0x2000);
        assert_eq!(
            live.read(&l, live.coro() + 64).ok(),
            Some(SettledTask::Finished)
        );
        // A freed task, its fields intact, whose coroutine's memory holds a live object now.
        let mut freed = Image::new(&l, 1, 0);
        freed.put(0, &0u64.to_le_bytes());
        assert_eq!(
            freed.read(&l, freed.coro()).ok(),
            Some(SettledTask::Finished)
        );
        // A state byte that is no state: garbage, an error.
        let garbage = Image::new(&l, 0x7f, 0x2000);
        assert!(garbage.read(&l, garbage.coro()).is_err());
    }
}
