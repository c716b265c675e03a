//! The task readers against memory that is not what they expect: random bytes, and hostile
//! shapes (cycles, huge counts, bad pointers). Every walk must end within its bound, and what
//! makes no sense must be an [`ObjectError`], never a panic.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::chain::{self, First, MAX_AWAIT_DEPTH};
use super::instant::{Reads, Recorder};
use super::objects::{self, Layouts, RawTask, MAX_CHAIN, MAX_TASKS};
use crate::memory::FakeMemory;
use crate::offsets::{
    builtin_offsets, AsyncioDebugOffsets, CoroutineOffsets, FrameStateCodes, LongFormat,
    LongObjectOffsets, PythonVersion, TPFLAGS_LONG_SUBCLASS,
};
use crate::symbolize::ObjectError;

/// Where the fake process's memory starts.
const BASE: u64 = 0x10_0000;

/// 3.15's asyncio table (Debian 3.15.2), the interpreter layout of 3.12 (a built-in one: the
/// readers take only the object header, frame and string fields from it), and 3.15's
/// coroutine and set layouts.
pub(super) fn layouts() -> Layouts {
    let table: Vec<u8> = [
        168u64, 136, 96, 108, 109, 128, 152, 226240, 10856, 1104, 1024, 1032, 1048,
    ]
    .iter()
    .flat_map(|v| v.to_le_bytes())
    .collect();
    Layouts {
        o: builtin_offsets(PythonVersion::new(3, 12, 0)).expect("a built-in layout"),
        c: CoroutineOffsets {
            gi_iframe: 80,
            gi_frame_state: 67,
            frame_states: FrameStateCodes::V3_15,
            stackpointer: 64,
            awaited_below_sp: 2,
            set_used: 24,
            set_table: 40,
            set_mask: 32,
            llist_next: 0,
            tp_flags: 168,
        },
        a: AsyncioDebugOffsets::parse(&table).expect("the real table"),
    }
}

fn long() -> LongObjectOffsets {
    LongObjectOffsets {
        lv_tag: 16,
        ob_digit: 24,
        format: LongFormat::LvTag,
    }
}

/// `len` bytes at [`BASE`]: random, with one word in four an aligned pointer back into the
/// image (so that walks go somewhere) and one byte in sixteen a valid coroutine state.
fn garbage(rng: &mut StdRng, len: usize) -> FakeMemory {
    let mut bytes = vec![0u8; len];
    rng.fill(&mut bytes[..]);
    for word in bytes.chunks_exact_mut(8) {
        if rng.random_ratio(1, 4) {
            let target = BASE + rng.random_range(0..len as u64 / 8) * 8;
            word.copy_from_slice(&target.to_le_bytes());
        }
    }
    for b in bytes.iter_mut() {
        if rng.random_ratio(1, 16) {
            *b = rng.random_range(0..6);
        }
    }
    FakeMemory { base: BASE, bytes }
}

/// `len` zero bytes at [`BASE`].
fn zeroed(len: usize) -> FakeMemory {
    FakeMemory {
        base: BASE,
        bytes: vec![0; len],
    }
}

/// A task at `addr` awaited by what `awaited_by` points at (a set when `is_set`).
fn awaited_task(addr: u64, awaited_by: u64, is_set: bool) -> RawTask {
    RawTask {
        addr,
        is_task: true,
        name: 0,
        coro: 0,
        awaited_by,
        awaited_by_is_set: is_set,
    }
}

fn put(mem: &mut FakeMemory, addr: u64, value: u64) {
    let at = (addr - BASE) as usize;
    mem.bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// Every reader on every kind of address of random images: bounded results, no panic.
#[test]
fn random_memory_gives_bounded_walks_or_errors() {
    let l = layouts();
    let mut rng = StdRng::seed_from_u64(14);
    for _ in 0..300 {
        let len = 1 << rng.random_range(8..16);
        let mut mem = garbage(&mut rng, len);
        for _ in 0..20 {
            let addr = match rng.random_range(0..4) {
                0 => BASE + rng.random_range(0..len as u64 / 8) * 8,
                1 => BASE + rng.random_range(0..len as u64),
                2 => rng.random(),
                _ => 0,
            };
            if let Ok(tasks) = objects::list_tasks(&mut mem, &l, addr) {
                assert!(tasks.len() <= MAX_TASKS);
            }
            if let Ok(task) = objects::read_task(&mut mem, &l, addr) {
                if let Ok(awaiters) = objects::awaiters(&mut mem, &l, &task) {
                    assert!(awaiters.len() <= 1 << 16);
                }
                let _ = objects::task_name(&mut mem, &l, &long(), task.name);
                if let Ok(chain) = objects::coroutine_chain(&mut mem, &l, task.coro) {
                    assert!(chain.len() <= MAX_CHAIN);
                }
            }
            for first in [First::Waiting, First::Running] {
                let mut reads = Reads::default();
                let mut rec = Recorder::new(&mut mem, &mut reads);
                if let Ok(Some(links)) = chain::read_chain(&mut rec, &l, &long(), addr, first) {
                    assert!(!links.is_empty() && links.len() <= MAX_AWAIT_DEPTH + 1);
                    assert!(links.iter().all(|k| k.frames.len() <= MAX_CHAIN));
                }
            }
            let _ = objects::coroutine_live(&mut mem, &l, addr);
            if let Ok(chain) = objects::coroutine_chain(&mut mem, &l, addr) {
                assert!(chain.len() <= MAX_CHAIN);
            }
        }
    }
}

/// Null, misaligned and unmapped addresses are errors, not reads of whatever is there.
#[test]
fn bad_pointers_are_errors() {
    let l = layouts();
    let mut mem = zeroed(4096);
    for addr in [0, 7, BASE + 3, u64::MAX - 7, 8] {
        assert!(objects::read_task(&mut mem, &l, addr).is_err(), "{addr:#x}");
        assert!(
            objects::list_tasks(&mut mem, &l, addr).is_err(),
            "{addr:#x}"
        );
        assert!(
            objects::coroutine_live(&mut mem, &l, addr).is_err(),
            "{addr:#x}"
        );
        assert!(
            objects::task_name(&mut mem, &l, &long(), addr).is_err(),
            "{addr:#x}"
        );
    }
    // An awaiter that is a misaligned pointer, and a set whose table is nowhere.
    let task = |awaited_by, is_set| awaited_task(BASE, awaited_by, is_set);
    assert!(objects::awaiters(&mut mem, &l, &task(BASE + 1, false)).is_err());
    put(&mut mem, BASE + 256 + l.c.set_mask, 7);
    put(&mut mem, BASE + 256 + l.c.set_used, 1);
    put(&mut mem, BASE + 256 + l.c.set_table, 0xdead_0000);
    assert!(matches!(
        objects::awaiters(&mut mem, &l, &task(BASE + 256, true)),
        Err(ObjectError::Memory(_))
    ));
}

/// A list that loops without coming back to its head, and one longer than the bound, end in
/// an error after at most [`MAX_TASKS`] steps.
#[test]
fn task_lists_that_loop_or_never_end_are_errors() {
    let l = layouts();
    let head = BASE;
    let mut mem = zeroed(64);
    // head → a → b → a → …
    let (a, b) = (BASE + 16, BASE + 32);
    put(&mut mem, head, a);
    put(&mut mem, a, b);
    put(&mut mem, b, a);
    assert!(matches!(
        objects::list_tasks(&mut mem, &l, head),
        Err(ObjectError::Malformed { .. })
    ));
    // A node pointing at itself.
    put(&mut mem, head, head + 8);
    put(&mut mem, head + 8, head + 8);
    assert!(objects::list_tasks(&mut mem, &l, head).is_err());
    // A chain of MAX_TASKS + 1 nodes that never comes back.
    let nodes = MAX_TASKS as u64 + 2;
    let mut mem = zeroed((nodes * 16) as usize);
    for k in 0..nodes - 1 {
        put(&mut mem, BASE + k * 16, BASE + (k + 1) * 16);
    }
    assert!(matches!(
        objects::list_tasks(&mut mem, &l, BASE),
        Err(ObjectError::Malformed { .. })
    ));
}

/// An awaiter set claiming a huge table, or more members than slots, is refused before any
/// table is read.
#[test]
fn awaiter_sets_with_huge_counts_are_errors() {
    let l = layouts();
    let set = BASE;
    let mut mem = zeroed(256);
    let task = awaited_task(BASE + 128, set, true);
    put(&mut mem, set + l.c.set_table, BASE + 64);
    for (mask, used) in [(1 << 40, 1), (u64::MAX, 0), (3, 5), (7, u64::MAX)] {
        put(&mut mem, set + l.c.set_mask, mask);
        put(&mut mem, set + l.c.set_used, used);
        assert!(
            matches!(
                objects::awaiters(&mut mem, &l, &task),
                Err(ObjectError::Malformed { .. })
            ),
            "mask {mask}, used {used}"
        );
    }
}

/// A coroutine awaiting itself, or two awaiting each other, is followed once each; a chain
/// longer than the bound stops at it.
#[test]
fn coroutine_chains_that_loop_or_run_deep_are_bounded() {
    let l = layouts();
    // Coroutines 512 bytes apart, each suspended in `await` (3.15: state 2) on the next.
    let stride = 512u64;
    let count = MAX_CHAIN as u64 + 10;
    let mut mem = zeroed((stride * (count + 1)) as usize);
    let coro = |k: u64| BASE + k * stride;
    let link = |mem: &mut FakeMemory, from: u64, to: u64| {
        let frame = from + l.c.gi_iframe;
        // The awaited coroutine sits 2 words below the stack pointer (3.15).
        let sp = frame + 200;
        put(mem, frame + l.c.stackpointer, sp);
        put(mem, sp - 16, to);
    };
    for k in 0..count {
        put(&mut mem, coro(k) + l.o.pyobject.ob_type, 0x77_0000);
        mem.bytes[(coro(k) - BASE + l.c.gi_frame_state) as usize] = 2;
        link(&mut mem, coro(k), coro(k + 1));
    }
    let deep = objects::coroutine_chain(&mut mem, &l, coro(0));
    assert!(deep.is_ok_and(|c| c.len() <= MAX_CHAIN));
    // 0 → 1 → 0
    link(&mut mem, coro(1), coro(0));
    let cycle = objects::coroutine_chain(&mut mem, &l, coro(0));
    assert!(cycle.is_ok_and(|c| c.len() <= 2));
    // 0 → 0
    link(&mut mem, coro(0), coro(0));
    let own = objects::coroutine_chain(&mut mem, &l, coro(0));
    assert!(own.is_ok_and(|c| c.len() <= 1));
    // A state byte no version uses.
    mem.bytes[(coro(0) - BASE + l.c.gi_frame_state) as usize] = 0x7f;
    assert!(matches!(
        objects::coroutine_chain(&mut mem, &l, coro(0)),
        Err(ObjectError::Malformed { .. })
    ));
}

/// A name object whose type says int but whose digits never end, or a str of a billion
/// characters, is an error; a real int name reads as `Task-N`.
#[test]
fn hostile_task_names_are_errors() {
    let l = layouts();
    let (name, ty) = (BASE, BASE + 256);
    let mut mem = zeroed(1024);
    put(&mut mem, name + l.o.pyobject.ob_type, ty);
    put(&mut mem, ty + l.c.tp_flags, TPFLAGS_LONG_SUBCLASS);
    // 7, one digit, positive.
    put(&mut mem, name + long().lv_tag, 1 << 3);
    put(&mut mem, name + long().ob_digit, 7);
    assert_eq!(
        objects::task_name(&mut mem, &l, &long(), name).expect("Task-7"),
        "Task-7"
    );
    // 2^40 digits.
    put(&mut mem, name + long().lv_tag, 1 << 43);
    assert!(objects::task_name(&mut mem, &l, &long(), name).is_err());
    // Neither an int nor a str.
    put(&mut mem, ty + l.c.tp_flags, 0);
    assert!(matches!(
        objects::task_name(&mut mem, &l, &long(), name),
        Err(ObjectError::Malformed { .. })
    ));
    // A str claiming a billion and more characters.
    put(&mut mem, ty + l.c.tp_flags, 1 << 28);
    put(&mut mem, name + l.o.unicode_object.length, 1 << 40);
    assert!(objects::task_name(&mut mem, &l, &long(), name).is_err());
    // A type pointer to nowhere.
    put(&mut mem, name + l.o.pyobject.ob_type, 0xdead_0000);
    assert!(matches!(
        objects::task_name(&mut mem, &l, &long(), name),
        Err(ObjectError::Memory(_))
    ));
}
