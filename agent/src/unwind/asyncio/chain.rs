//! A task's chain: the task, the task awaiting it, the one awaiting that, … up to a root task,
//! each with its name and its coroutine frames, decoded from raw memory. Addresses only; frames
//! are symbolized by the caller once the chain is known to be of one instant
//! ([`super::instant`]).

use foldhash::{HashSet, HashSetExt};

use super::instant::Recorder;
use super::objects::{self, Layouts, Life, RawTask};
use crate::memory::ProcessMemory;
use crate::offsets::LongObjectOffsets;
use crate::symbolize::ObjectError;
use crate::unwind::walk::RawFrame;

/// Most awaiting tasks followed above a task.
pub const MAX_AWAIT_DEPTH: usize = 64;

/// One task of a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// the task's fields
    pub task: RawTask,
    /// its name
    pub name: String,
    /// its coroutine frames, innermost first (none for a running task: its frames are its
    /// thread's)
    pub frames: Vec<RawFrame>,
    /// how many tasks await it (the chain goes on under the lowest-addressed one)
    pub awaiters: usize,
}

/// What the first task of a chain must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum First {
    /// A task that waits: created and not started, or suspended. Its coroutine frames are read.
    /// A running one is no waiting task (its thread's sample shows it).
    Waiting,
    /// The task a thread is running, or ran when a record was taken: started and not finished.
    /// Its frames are the thread's, not read here.
    Running,
}

/// The chain of the task at `addr`, first that task, then each awaiting task up to the root,
/// read through `mem` with every range recorded for
/// [`super::instant::Reads::hold`]. `Ok(None)` when the task
/// is not what `first` asks for (finished, or running when a waiting one is asked for, or not
/// started when a running one is): no chain to show, and no error. An awaiting task that is not
/// started, or finished, is an error: an awaiter is in its `await` while it awaits, and one
/// that is not has let go of the task below.
pub fn read_chain(
    mem: &mut Recorder<'_, impl ProcessMemory>,
    l: &Layouts,
    long: &LongObjectOffsets,
    addr: u64,
    first: First,
) -> Result<Option<Vec<Link>>, ObjectError> {
    let task = objects::read_task(mem, l, addr)?;
    if task.coro == 0 {
        return Ok(None);
    }
    let life = objects::coroutine_life(mem, l, task.coro)?;
    let frames = match (first, life) {
        (_, Life::Finished)
        | (First::Waiting, Life::Executing)
        | (First::Running, Life::NotStarted) => return Ok(None),
        (First::Waiting, _) => coroutine_frames(mem, l, task.coro)?,
        (First::Running, _) => Vec::new(),
    };
    let mut chain = Vec::new();
    let mut up = link(mem, l, long, task, frames, &mut chain)?;
    let mut seen = HashSet::new();
    seen.insert(addr);
    for _ in 0..MAX_AWAIT_DEPTH {
        let Some(addr) = up else { break };
        if !seen.insert(addr) {
            break;
        }
        // A bare future in an awaiter set ends the chain: it has no frames or name.
        if !objects::is_task(mem, l, addr)? {
            break;
        }
        let awaiter = objects::read_task(mem, l, addr)?;
        if !matches!(
            objects::coroutine_life(mem, l, awaiter.coro)?,
            Life::Suspended | Life::Executing
        ) {
            return Err(ObjectError::Malformed { addr });
        }
        let frames = coroutine_frames(mem, l, awaiter.coro)?;
        up = link(mem, l, long, awaiter, frames, &mut chain)?;
    }
    Ok(Some(chain))
}

/// Adds `task` to `chain` with its name and awaiters (it must be alive at the chain's
/// instant); returns the awaiter the chain goes on under: of several, the one at the lowest
/// address, as CPython's sampler does.
fn link(
    mem: &mut Recorder<'_, impl ProcessMemory>,
    l: &Layouts,
    long: &LongObjectOffsets,
    task: RawTask,
    frames: Vec<RawFrame>,
    chain: &mut Vec<Link>,
) -> Result<Option<u64>, ObjectError> {
    mem.reads.must_be_alive(task.addr);
    let name = objects::task_name(mem, l, long, task.name)?;
    let awaiters = objects::awaiters(mem, l, &task)?;
    let up = awaiters.iter().copied().min();
    chain.push(Link {
        task,
        name,
        frames,
        awaiters: awaiters.len(),
    });
    Ok(up)
}

/// The frames of the coroutine at `coro` and of those it awaits, innermost first.
fn coroutine_frames(
    mem: &mut impl ProcessMemory,
    l: &Layouts,
    coro: u64,
) -> Result<Vec<RawFrame>, ObjectError> {
    let mut frames = objects::coroutine_chain(mem, l, coro)?;
    frames.reverse();
    Ok(frames)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryError, RemoteMemory};
    use crate::offsets::{LongFormat, TPFLAGS_LONG_SUBCLASS};
    use crate::unwind::asyncio::garbage_tests::layouts;
    use crate::unwind::asyncio::instant::Reads;

    /// A task, its coroutine and its name laid out in this process's own memory and read back
    /// through `process_vm_readv`, as the agent reads a target, by a reader during whose reads
    /// the "target" runs on: after the `n`th read, the patches planned for it are written.
    struct Moving {
        image: Box<Aligned>,
        remote: RemoteMemory,
        reads: usize,
        /// (after this many reads, offset, bytes)
        plan: Vec<(usize, usize, Vec<u8>)>,
    }

    #[repr(C, align(8))]
    struct Aligned([u8; 1024]);

    const CORO: usize = 256;
    const NAME: usize = 512;
    const INT_TYPE: usize = 640;
    /// The code object the coroutine's frame runs (never read: frames stay raw here).
    const CODE: u64 = 0x7000_0000;
    /// 3.15's codes.
    const CREATED: u8 = 0;
    const SUSPENDED: u8 = 1;

    impl Moving {
        /// Task `Task-7`, not awaited, whose coroutine was created and has not started.
        fn new() -> Moving {
            let l = layouts();
            let mut m = Moving {
                image: Box::new(Aligned([0; 1024])),
                remote: RemoteMemory::new(std::process::id()),
                reads: 0,
                plan: Vec::new(),
            };
            let base = m.addr(0);
            m.put(0, &1u64.to_le_bytes());
            m.put(l.a.task_coro as usize, &(base + CORO as u64).to_le_bytes());
            m.put(l.a.task_name as usize, &(base + NAME as u64).to_le_bytes());
            m.put(l.a.task_is_task as usize, &[1]);
            m.put(
                CORO + l.o.pyobject.ob_type as usize,
                &0x5000u64.to_le_bytes(),
            );
            m.put(CORO + l.c.gi_frame_state as usize, &[CREATED]);
            let frame = CORO + l.c.gi_iframe as usize;
            m.put(
                frame + l.o.interpreter_frame.executable as usize,
                &CODE.to_le_bytes(),
            );
            m.put(
                frame + l.o.interpreter_frame.instr_ptr as usize,
                &0x10u64.to_le_bytes(),
            );
            m.put(
                NAME + l.o.pyobject.ob_type as usize,
                &(base + INT_TYPE as u64).to_le_bytes(),
            );
            m.put(
                INT_TYPE + l.c.tp_flags as usize,
                &TPFLAGS_LONG_SUBCLASS.to_le_bytes(),
            );
            m.put(NAME + 16, &(1u64 << 3).to_le_bytes());
            m.put(NAME + 24, &7u32.to_le_bytes());
            m
        }

        fn addr(&self, off: usize) -> u64 {
            self.image.0.as_ptr() as u64 + off as u64
        }

        fn put(&mut self, off: usize, bytes: &[u8]) {
            self.image.0[off..off + bytes.len()].copy_from_slice(bytes);
        }

        /// The coroutine's life as its state byte and its frame's instruction say.
        fn life(state: u8, ip: u64) -> Vec<(usize, Vec<u8>)> {
            let l = layouts();
            let frame = CORO + l.c.gi_iframe as usize;
            vec![
                (CORO + l.c.gi_frame_state as usize, vec![state]),
                (
                    frame + l.o.interpreter_frame.instr_ptr as usize,
                    ip.to_le_bytes().to_vec(),
                ),
            ]
        }

        fn after(&mut self, reads: usize, patches: Vec<(usize, Vec<u8>)>) {
            self.plan
                .extend(patches.into_iter().map(|(off, b)| (reads, off, b)));
        }
    }

    impl ProcessMemory for Moving {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
            let due: Vec<(usize, Vec<u8>)> = self
                .plan
                .iter()
                .filter(|p| p.0 == self.reads)
                .map(|p| (p.1, p.2.clone()))
                .collect();
            for (off, bytes) in due {
                self.put(off, &bytes);
            }
            self.reads += 1;
            self.remote.read(addr, buf)
        }
    }

    fn long() -> LongObjectOffsets {
        LongObjectOffsets {
            lv_tag: 16,
            ob_digit: 24,
            format: LongFormat::LvTag,
        }
    }

    /// The waiting chain of the image's task, and whether what it was read from holds now.
    fn read(m: &mut Moving) -> (Option<Vec<Link>>, bool) {
        let l = layouts();
        let task = m.addr(0);
        let mut reads = Reads::default();
        let chain = read_chain(
            &mut Recorder::new(m, &mut reads),
            &l,
            &long(),
            task,
            First::Waiting,
        )
        .expect("a well-formed task");
        let held = reads.hold(&mut m.remote, false).expect("own memory");
        (chain, held)
    }

    #[test]
    fn a_task_read_while_nothing_moves_is_one_instant_s() {
        let mut m = Moving::new();
        let (chain, held) = read(&mut m);
        let chain = chain.expect("a waiting task");
        assert!(held);
        assert_eq!(chain.len(), 1);
        assert_eq!(chain[0].name, "Task-7");
        assert_eq!(chain[0].frames.len(), 1);
        assert_eq!(chain[0].frames[0].code, CODE);
    }

    /// The churn defect (issue 46): a freed task's blocks go to the next task made, in the
    /// same order, so the task at one address goes through lives that read the same. Here the
    /// task's life is read as "created, not awaited"; its coroutine then starts (another life
    /// at the same addresses, started and suspended); its frame is read; then that life ends and
    /// a new one is created at the same addresses, not awaited yet. The task's bytes read the
    /// same before and after the frames (what a second copy of the task checked), and the
    /// chain decoded, a started coroutine's frame with no awaiter, never existed: it must not
    /// hold.
    #[test]
    fn frames_of_one_life_under_another_s_task_do_not_hold() {
        let l = layouts();
        let mut m = Moving::new();
        let task = m.addr(0);
        let before = objects::read_task(&mut m, &l, task).expect("task");
        m.reads = 0;
        // Reads: task, its life, then the coroutine's type, state and frame.
        m.after(2, Moving::life(SUSPENDED, 0x40));
        m.after(5, Moving::life(CREATED, 0x10));
        let (chain, held) = read(&mut m);
        let chain = chain.expect("decoded");
        assert_eq!(chain[0].frames[0].ip, 0x40, "the started life's frame");
        assert_eq!(chain[0].task.awaited_by, 0);
        let after = objects::read_task(&mut m, &l, task).expect("task");
        assert_eq!(before, after, "the task reads the same in both lives");
        assert!(!held, "frames of one life under another's task");
    }

    /// A task freed between the decode and the check keeps its fields, and its coroutine's
    /// block may hold a live one again: only its count says it is gone.
    #[test]
    fn a_task_freed_since_it_was_read_does_not_hold() {
        let mut m = Moving::new();
        m.after(6, vec![(0, 0u64.to_le_bytes().to_vec())]);
        let (chain, held) = read(&mut m);
        assert!(chain.is_some());
        assert!(!held);
    }

    /// A task awaited when its frames were read and let go of before its awaiters were: the
    /// awaiter link read is not the one its frames went with.
    #[test]
    fn an_awaiter_link_changed_under_the_read_does_not_hold() {
        let l = layouts();
        let mut m = Moving::new();
        let parent = m.addr(768);
        m.put(l.a.task_awaited_by as usize, &parent.to_le_bytes());
        // The parent is a bare future: the chain ends at it.
        m.put(768 + l.a.task_is_task as usize, &[0]);
        m.put(CORO + l.c.gi_frame_state as usize, &[SUSPENDED]);
        m.after(
            3,
            vec![(l.a.task_awaited_by as usize, 0u64.to_le_bytes().to_vec())],
        );
        let (chain, held) = read(&mut m);
        assert!(chain.is_some());
        assert!(!held);
    }
}
