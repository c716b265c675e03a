//! What reading asyncio tasks needs: the coroutine and set layouts of `_Py_DebugOffsets` (3.14+),
//! and `_Py_AsyncioModuleDebugOffsets`, the table the `_asyncio` module puts in its
//! `.AsyncioDebug` section (in the `_asyncio` extension or, when it is built in, the executable).
//!
//! 3.11–3.13 have neither: their tasks hang off `asyncio` module globals with no exported layout,
//! so task stacks need 3.14 or later ([`AsyncioUnsupported`]).

use super::{OffsetsError, PythonVersion};
use crate::memory::StructBytes;

/// Bytes of `_Py_AsyncioModuleDebugOffsets` (13 u64s), the same in 3.14 and 3.15.
pub const ASYNCIO_DEBUG_LEN: usize = 13 * 8;

/// `Py_TPFLAGS_LONG_SUBCLASS`: a task name that is an int (`Task-N` counters).
pub const TPFLAGS_LONG_SUBCLASS: u64 = 1 << 24;
/// `Py_TPFLAGS_UNICODE_SUBCLASS`: a task name that is a str.
pub const TPFLAGS_UNICODE_SUBCLASS: u64 = 1 << 28;

/// Coroutine frame states (`gi_frame_state`, an `int8_t`, `pycore_frame.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoroutineState {
    /// Created, never started.
    Created,
    /// Suspended at an `await` of something that is not delegated to (a future).
    Suspended,
    /// Suspended inside an `await` of another coroutine: the awaited object is on the value stack.
    SuspendedYieldFrom,
    /// Running on some thread's stack right now.
    Executing,
    /// Returned or raised (3.14; 3.15 clears at once).
    Completed,
    /// Its frame was cleared: nothing to show.
    Cleared,
}

/// How a version numbers [`CoroutineState`]: 3.15 renumbered them all (and added a locked
/// variant of `SuspendedYieldFrom` for free-threaded builds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameStateCodes {
    /// 3.14: -3 created, -2 suspended, -1 in `await`, 0 executing, 1 completed, 4 cleared
    V3_14,
    /// 3.15: 0 created, 1 suspended, 2 in `await`, 3 the same while another thread looks at
    /// it, 4 executing, 5 cleared
    V3_15,
}

impl CoroutineState {
    /// From the `gi_frame_state` byte; `None` for a value the version does not use (a torn
    /// read, or not a coroutine).
    pub fn decode(codes: FrameStateCodes, b: u8) -> Option<CoroutineState> {
        use CoroutineState::*;
        Some(match (codes, b as i8) {
            (FrameStateCodes::V3_14, -3) | (FrameStateCodes::V3_15, 0) => Created,
            (FrameStateCodes::V3_14, -2) | (FrameStateCodes::V3_15, 1) => Suspended,
            (FrameStateCodes::V3_14, -1) | (FrameStateCodes::V3_15, 2 | 3) => SuspendedYieldFrom,
            (FrameStateCodes::V3_14, 0) | (FrameStateCodes::V3_15, 4) => Executing,
            (FrameStateCodes::V3_14, 1) => Completed,
            (FrameStateCodes::V3_14, 4) | (FrameStateCodes::V3_15, 5) => Cleared,
            _ => return None,
        })
    }
}

/// Coroutine, set and list-node layouts from `_Py_DebugOffsets` (3.14+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoroutineOffsets {
    /// `PyGenObject.gi_iframe`: the coroutine's frame, inside the object
    pub gi_iframe: u64,
    /// `PyGenObject.gi_frame_state` (one byte)
    pub gi_frame_state: u64,
    /// how `gi_frame_state` numbers the states
    pub frame_states: FrameStateCodes,
    /// `_PyInterpreterFrame.stackpointer`
    pub stackpointer: u64,
    /// Where a coroutine suspended in `await coro` keeps the awaited object: this many words
    /// below its frame's stack pointer (3.14: the top of the stack; 3.15 pushes one more item
    /// above it). Checked on Debian's 3.14.10 and 3.15.2 against `python -m asyncio pstree`.
    pub awaited_below_sp: u64,
    /// `PySetObject.used`
    pub set_used: u64,
    /// `PySetObject.table`
    pub set_table: u64,
    /// `PySetObject.mask`
    pub set_mask: u64,
    /// `struct llist_node.next`
    pub llist_next: u64,
    /// `PyTypeObject.tp_flags`
    pub tp_flags: u64,
}

impl CoroutineOffsets {
    /// The layout from `_Py_DebugOffsets` slots (`get` answers a slot's value); `None` before
    /// 3.14, whose table has no coroutine or set groups.
    pub(super) fn from_slots(
        version: PythonVersion,
        opt: &impl Fn(&str) -> Option<u64>,
    ) -> Option<CoroutineOffsets> {
        Some(CoroutineOffsets {
            gi_iframe: opt("gen_object.gi_iframe")?,
            gi_frame_state: opt("gen_object.gi_frame_state")?,
            frame_states: if version.minor >= 15 {
                FrameStateCodes::V3_15
            } else {
                FrameStateCodes::V3_14
            },
            stackpointer: opt("interpreter_frame.stackpointer")?,
            awaited_below_sp: if version.minor >= 15 { 2 } else { 1 },
            set_used: opt("set_object.used")?,
            set_table: opt("set_object.table")?,
            set_mask: opt("set_object.mask")?,
            llist_next: opt("llist_node.next")?,
            tp_flags: opt("type_object.tp_flags")?,
        })
    }
}

/// `_Py_AsyncioModuleDebugOffsets`: where a task's fields and the task lists are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncioDebugOffsets {
    /// `sizeof(TaskObj)`
    pub task_size: u64,
    /// `TaskObj.task_name` (an int or a str)
    pub task_name: u64,
    /// `TaskObj.task_awaited_by`: NULL, one task, or a set of tasks
    pub task_awaited_by: u64,
    /// `TaskObj.task_is_task` (a char: a Task, not a bare Future)
    pub task_is_task: u64,
    /// `TaskObj.task_awaited_by_is_set` (a char)
    pub task_awaited_by_is_set: u64,
    /// `TaskObj.task_coro`
    pub task_coro: u64,
    /// `TaskObj.task_node`: the task's node in its thread's (or the interpreter's) list
    pub task_node: u64,
    /// `sizeof(PyInterpreterState)`
    pub interpreter_size: u64,
    /// `PyInterpreterState.asyncio_tasks_head`: tasks of threads that have exited
    pub interpreter_tasks_head: u64,
    /// `sizeof(_PyThreadStateImpl)`
    pub thread_size: u64,
    /// `_PyThreadStateImpl.asyncio_running_loop`
    pub thread_running_loop: u64,
    /// `_PyThreadStateImpl.asyncio_running_task`
    pub thread_running_task: u64,
    /// `_PyThreadStateImpl.asyncio_tasks_head`: the thread's live tasks
    pub thread_tasks_head: u64,
}

/// Largest `TaskObj` or thread state accepted.
const MAX_OBJECT: u64 = 1 << 16;
/// Largest interpreter state accepted.
const MAX_INTERPRETER: u64 = 1 << 22;

impl AsyncioDebugOffsets {
    /// Parses the section's bytes, read from a target and so untrusted: every size is bounded
    /// and every field lies inside its struct, aligned.
    pub fn parse(bytes: &[u8]) -> Result<AsyncioDebugOffsets, OffsetsError> {
        if bytes.len() < ASYNCIO_DEBUG_LEN {
            return Err(OffsetsError::Truncated {
                got: bytes.len(),
                need: ASYNCIO_DEBUG_LEN,
            });
        }
        let w = |i: u64| bytes.u64_at(8 * i);
        let o = AsyncioDebugOffsets {
            task_size: w(0),
            task_name: w(1),
            task_awaited_by: w(2),
            task_is_task: w(3),
            task_awaited_by_is_set: w(4),
            task_coro: w(5),
            task_node: w(6),
            interpreter_size: w(7),
            interpreter_tasks_head: w(8),
            thread_size: w(9),
            thread_running_loop: w(10),
            thread_running_task: w(11),
            thread_tasks_head: w(12),
        };
        o.validate()?;
        Ok(o)
    }

    fn validate(&self) -> Result<(), OffsetsError> {
        let implausible = |field, value, limit| OffsetsError::Implausible {
            field,
            value,
            limit,
        };
        for (field, size, max) in [
            ("asyncio_task_object.size", self.task_size, MAX_OBJECT),
            ("asyncio_thread_state.size", self.thread_size, MAX_OBJECT),
            (
                "asyncio_interpreter_state.size",
                self.interpreter_size,
                MAX_INTERPRETER,
            ),
        ] {
            if size == 0 || size > max {
                return Err(implausible(field, size, max));
            }
        }
        let fields: [(&'static str, u64, u64, u64); 10] = [
            ("task_name", self.task_name, 8, self.task_size),
            ("task_awaited_by", self.task_awaited_by, 8, self.task_size),
            ("task_is_task", self.task_is_task, 1, self.task_size),
            (
                "task_awaited_by_is_set",
                self.task_awaited_by_is_set,
                1,
                self.task_size,
            ),
            ("task_coro", self.task_coro, 8, self.task_size),
            // A list node is two pointers.
            ("task_node", self.task_node, 16, self.task_size),
            (
                "asyncio_tasks_head",
                self.interpreter_tasks_head,
                16,
                self.interpreter_size,
            ),
            (
                "asyncio_running_loop",
                self.thread_running_loop,
                8,
                self.thread_size,
            ),
            (
                "asyncio_running_task",
                self.thread_running_task,
                8,
                self.thread_size,
            ),
            (
                "asyncio_tasks_head",
                self.thread_tasks_head,
                16,
                self.thread_size,
            ),
        ];
        for (field, off, width, limit) in fields {
            if off.saturating_add(width) > limit || !off.is_multiple_of(width.min(8)) {
                return Err(implausible(field, off, limit));
            }
        }
        Ok(())
    }
}

/// Task stacks were asked for a version that has no layout for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "asyncio task stacks need CPython 3.14 or later (process runs {0}): drop --async for its thread stacks"
)]
pub struct AsyncioUnsupported(pub PythonVersion);

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian's 3.15.2 executable's `.AsyncioDebug`, as `objdump -s` shows it.
    fn table_3_15() -> Vec<u8> {
        [
            168u64, 136, 96, 108, 109, 128, 152, 226240, 10856, 1104, 1024, 1032, 1048,
        ]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
    }

    #[test]
    fn a_real_table_parses() {
        let o = AsyncioDebugOffsets::parse(&table_3_15()).expect("valid");
        assert_eq!(o.task_name, 136);
        assert_eq!(o.task_node, 152);
        assert_eq!(o.thread_tasks_head, 1048);
        assert_eq!(o.interpreter_tasks_head, 10856);
    }

    #[test]
    fn garbage_tables_are_refused() {
        assert!(matches!(
            AsyncioDebugOffsets::parse(&table_3_15()[..64]),
            Err(OffsetsError::Truncated { .. })
        ));
        for (slot, value) in [
            (0, 0u64),         // no task size
            (0, 1 << 40),      // a huge one
            (1, 4096),         // a name past the task
            (6, 160),          // a node that does not fit
            (2, 97),           // misaligned
            (12, 1100),        // past the thread state
            (8, u64::MAX - 4), // wraps
        ] {
            let mut t = table_3_15();
            t[8 * slot..8 * slot + 8].copy_from_slice(&value.to_le_bytes());
            assert!(
                AsyncioDebugOffsets::parse(&t).is_err(),
                "slot {slot} = {value} accepted"
            );
        }
    }

    #[test]
    fn frame_states_are_read_by_the_versions_numbering() {
        use CoroutineState::*;
        let v14 = FrameStateCodes::V3_14;
        let v15 = FrameStateCodes::V3_15;
        assert_eq!(CoroutineState::decode(v14, 0xff), Some(SuspendedYieldFrom));
        assert_eq!(CoroutineState::decode(v14, 0), Some(Executing));
        assert_eq!(CoroutineState::decode(v14, 4), Some(Cleared));
        assert_eq!(CoroutineState::decode(v15, 2), Some(SuspendedYieldFrom));
        assert_eq!(CoroutineState::decode(v15, 3), Some(SuspendedYieldFrom));
        assert_eq!(CoroutineState::decode(v15, 4), Some(Executing));
        assert_eq!(CoroutineState::decode(v15, 5), Some(Cleared));
        assert_eq!(CoroutineState::decode(v15, 0xff), None);
        assert_eq!(CoroutineState::decode(v14, 7), None);
    }
}
