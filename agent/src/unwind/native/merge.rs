//! Python frames + native frames → one stack that reads Python → C → Python → C.
//!
//! Each native frame of CPython's eval loop is replaced by the Python frames that evaluation
//! runs. Those come from the Python walk cut at its C boundaries: the `<native>` markers the
//! resolver puts where an entry frame (3.12+; 3.11 `is_entry`) separates one evaluation's
//! frames from the one below, so with native stacks on, the markers are always on. Native and
//! Python stacks are read at the same tick, so the k-th eval frame from the top runs the k-th
//! group of Python frames.

use std::ops::Range;

use crate::offsets::Evaluations;
use crate::symbolize::{Frame, FrameKind};

use super::NativeStack;

/// How a merge went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// every eval frame took its group of Python frames, and every group was placed
    Whole,
    /// the native unwind ended before the bottom (the copy's end, code without CFI): the
    /// groups it did not reach follow its last frame, `[truncated native]` first and `<native>`
    /// between them, then the thread's root frames when they are known
    NativeCut,
    /// more eval-loop frames than groups of Python frames (the two stacks do not describe one
    /// instant, or a boundary was missed: 3.11 records carry none), or fewer although the
    /// unwind reached the root (the eval loop is not recognised: an interpreter stripped of
    /// its symbol): the Python stack is kept alone
    Mismatch,
}

/// A merged stack.
#[derive(Debug)]
pub struct Merged {
    /// innermost first
    pub frames: Vec<Frame>,
    /// how the merge went
    pub how: Merge,
    /// [`Merge::Whole`]: the native frames below the bottom evaluation (the thread's entry:
    /// `PyEval_EvalCode` … `_start`, or a thread's start routine), to root the thread's cut
    /// stacks on, so that they join its whole ones in one tower
    pub root: Option<Vec<Frame>>,
}

/// The merged stack (innermost first) of `python` (innermost first, `<native>` between
/// evaluations) and `stack`; on [`Merge::Mismatch`], `python` unchanged. A cut stack ends with
/// `root`, the thread's frames below its bottom evaluation as a whole merge found them.
pub fn merge(
    python: Vec<Frame>,
    stack: &NativeStack,
    root: Option<&[Frame]>,
    evaluations: Evaluations,
) -> Merged {
    let native = &stack.frames;
    let bounds = evaluation_bounds(&python, evaluations);
    let groups = || bounds.iter().map(|r| &python[r.clone()]);
    let ngroups = bounds.len();
    let evals = native.iter().filter(|n| n.eval).count();
    if evals > ngroups || (evals < ngroups && stack.reached_root) {
        return Merged {
            frames: python,
            how: Merge::Mismatch,
            root: None,
        };
    }
    let mut out = Vec::with_capacity(python.len() + native.len());
    let mut next = groups();
    for n in native.iter() {
        if n.eval {
            // Counted above: there is a group for every eval frame.
            out.extend(next.next().into_iter().flat_map(|g| g.iter().cloned()));
        } else {
            out.push(n.frame.clone());
        }
    }
    let mut how = Merge::Whole;
    for (i, g) in next.enumerate() {
        how = Merge::NativeCut;
        if i == 0 && !out.is_empty() {
            out.push(Frame::pseudo(FrameKind::TruncatedNative));
        } else if i > 0 && evaluations == Evaluations::AtMarkers {
            out.push(Frame::pseudo(FrameKind::Native));
        }
        out.extend(g.iter().cloned());
    }
    let found_root = match how {
        // Only an unwind that reached the thread's first frame knows all of its root.
        Merge::Whole if evals > 0 && stack.reached_root => {
            let below = native.iter().rposition(|n| n.eval).map_or(0, |i| i + 1);
            Some(native[below..].iter().map(|n| n.frame.clone()).collect())
        }
        _ => None,
    };
    if how == Merge::NativeCut {
        out.extend(root.into_iter().flatten().cloned());
    }
    Merged {
        frames: out,
        how,
        root: found_root,
    }
}

/// The frames of each evaluation of `python` (innermost first), as index ranges: split at its
/// `<native>` markers, or one Python frame each, with the pseudo-frames above it (`<GC>`).
fn evaluation_bounds(python: &[Frame], evaluations: Evaluations) -> Vec<Range<usize>> {
    let mut bounds = Vec::new();
    let mut start = 0;
    for (i, f) in python.iter().enumerate() {
        match evaluations {
            Evaluations::AtMarkers if f.kind == FrameKind::Native => {
                if start < i {
                    bounds.push(start..i);
                }
                start = i + 1;
            }
            Evaluations::EachFrame if f.kind == FrameKind::Python => {
                bounds.push(start..i + 1);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < python.len() {
        match (evaluations, bounds.last_mut()) {
            // Pseudo-frames below the last Python frame belong to its evaluation.
            (Evaluations::EachFrame, Some(last)) => last.end = python.len(),
            _ => bounds.push(start..python.len()),
        }
    }
    bounds
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::symbolize::native::ObjectName;
    use crate::symbolize::CodeName;
    use crate::unwind::native::NativeFrame;

    fn py(name: &str) -> Frame {
        Frame {
            code: Arc::new(CodeName::new(name, "t.py", 1)),
            line: Some(1),
            kind: FrameKind::Python,
        }
    }

    fn c(name: &str, eval: bool) -> NativeFrame {
        let object = Arc::new(ObjectName {
            path: Arc::from("/lib/libx.so"),
            build_id: None,
            executable: false,
        });
        NativeFrame {
            frame: Frame {
                code: Arc::new(CodeName::native(name, object)),
                line: None,
                kind: FrameKind::NativeCode,
            },
            eval,
        }
    }

    fn stack(frames: &[NativeFrame], reached_root: bool) -> NativeStack {
        NativeStack {
            frames: frames.to_vec(),
            reached_root,
            unmapped_frames: 0,
            stopped_without_cfi: false,
        }
    }

    fn names(frames: &[Frame]) -> Vec<&str> {
        frames.iter().map(|f| f.function()).collect()
    }

    #[test]
    fn each_eval_frame_takes_its_evaluation_in_order() {
        // key() called back from sorted() called from main(); the thread is in key's C call.
        let python = vec![
            py("key"),
            Frame::pseudo(FrameKind::Native),
            py("work"),
            py("main"),
        ];
        let native = [
            c("deflate", false),
            c("zlib_compress", false),
            c("_PyEval_EvalFrameDefault", true),
            c("list_sort", false),
            c("_PyEval_EvalFrameDefault", true),
            c("Py_RunMain", false),
            c("main", false),
        ];
        let Merged {
            frames: out, how, ..
        } = merge(python, &stack(&native, true), None, Evaluations::AtMarkers);
        assert_eq!(how, Merge::Whole);
        assert_eq!(
            names(&out),
            [
                "deflate",
                "zlib_compress",
                "key",
                "list_sort",
                "work",
                "main",
                "Py_RunMain",
                "main"
            ]
        );
    }

    #[test]
    fn a_cut_native_stack_keeps_the_python_below() {
        let python = vec![
            py("key"),
            Frame::pseudo(FrameKind::Native),
            py("work"),
            Frame::pseudo(FrameKind::Native),
            py("main"),
        ];
        let native = [c("deflate", false), c("_PyEval_EvalFrameDefault", true)];
        let out = merge(
            python.clone(),
            &stack(&native, false),
            None,
            Evaluations::AtMarkers,
        );
        assert_eq!(out.how, Merge::NativeCut);
        assert_eq!(
            names(&out.frames),
            [
                "deflate",
                "key",
                "[truncated native]",
                "work",
                "<native>",
                "main"
            ]
        );
        assert!(
            out.root.is_none(),
            "a cut stack does not know the thread's root"
        );
        // Nothing unwound past the leaf: the leaf goes on top of the Python stack.
        let out = merge(
            vec![py("work")],
            &stack(&[c("deflate", false)], false),
            None,
            Evaluations::AtMarkers,
        );
        assert_eq!(out.how, Merge::NativeCut);
        assert_eq!(
            names(&out.frames),
            ["deflate", "[truncated native]", "work"]
        );
        // The same frames, but the unwind reached the root: an evaluation had no eval-loop
        // frame, so the eval loop was not recognised (a stripped interpreter).
        let out = merge(
            python.clone(),
            &stack(&native, true),
            None,
            Evaluations::AtMarkers,
        );
        assert_eq!(out.how, Merge::Mismatch);
        assert_eq!(out.frames, python);
    }

    /// A whole merge gives the frames below the bottom evaluation; a cut stack of the same
    /// thread ends with them, so that both grow from one root.
    #[test]
    fn a_cut_stack_takes_the_root_of_the_threads_whole_ones() {
        let whole = merge(
            vec![py("work"), py("main")],
            &stack(
                &[
                    c("deflate", false),
                    c("_PyEval_EvalFrameDefault", true),
                    c("Py_RunMain", false),
                    c("_start", false),
                ],
                true,
            ),
            None,
            Evaluations::AtMarkers,
        );
        assert_eq!(whole.how, Merge::Whole);
        // Whole, but the unwind stopped short of the thread's first frame: no root to keep.
        let short = merge(
            vec![py("work"), py("main")],
            &stack(
                &[c("_PyEval_EvalFrameDefault", true), c("Py_RunMain", false)],
                false,
            ),
            None,
            Evaluations::AtMarkers,
        );
        assert_eq!((short.how, short.root), (Merge::Whole, None));
        let root = whole.root.expect("the frames below the bottom evaluation");
        assert_eq!(names(&root), ["Py_RunMain", "_start"]);
        let cut = merge(
            vec![py("work"), py("main")],
            &stack(&[c("big_frame", false)], false),
            Some(&root),
            Evaluations::AtMarkers,
        );
        assert_eq!(cut.how, Merge::NativeCut);
        assert_eq!(
            names(&cut.frames),
            [
                "big_frame",
                "[truncated native]",
                "work",
                "main",
                "Py_RunMain",
                "_start"
            ]
        );
    }

    #[test]
    fn task_aware_frames_stay_with_the_running_tasks_evaluation() {
        // `--async --native`: task attribution puts `<task NAME>` and the awaiting tasks'
        // coroutine frames right below the running task's coroutine frame, above the `<native>`
        // where the event loop's C code entered it. They add no `<native>`, so the groups are
        // the thread's evaluations still, and they follow the task's frames into its eval frame.
        let task = |name: &str| Frame::task(crate::symbolize::task_code_name(name));
        let python = vec![
            py("leaf_coro"),
            py("worker"),
            task("w1"),
            py("main_coro"),
            task("Task-1"),
            Frame::pseudo(FrameKind::Native),
            py("Handle._run"),
            py("run_forever"),
        ];
        let native = [
            c("crc32_z", false),
            c("_PyEval_EvalFrameDefault", true),
            c("task_step", false),
            c("context_run", false),
            c("_PyEval_EvalFrameDefault", true),
            c("main", false),
        ];
        let Merged {
            frames: out, how, ..
        } = merge(python, &stack(&native, true), None, Evaluations::AtMarkers);
        assert_eq!(how, Merge::Whole);
        assert_eq!(
            names(&out),
            [
                "crc32_z",
                "leaf_coro",
                "worker",
                "<task w1>",
                "main_coro",
                "<task Task-1>",
                "task_step",
                "context_run",
                "Handle._run",
                "run_forever",
                "main"
            ]
        );
    }

    #[test]
    fn more_eval_frames_than_evaluations_keeps_python_alone() {
        let python = vec![py("work")];
        let native = [
            c("_PyEval_EvalFrameDefault", true),
            c("_PyEval_EvalFrameDefault", true),
        ];
        let out = merge(
            python.clone(),
            &stack(&native, false),
            None,
            Evaluations::AtMarkers,
        );
        assert_eq!(out.how, Merge::Mismatch);
        assert_eq!(out.frames, python);
    }

    /// Before 3.11 each Python frame has an eval-loop frame of its own, and no `<native>`
    /// marker: the merge gives each eval frame one Python frame, with a `<GC>` above it.
    #[test]
    fn each_frame_is_its_own_evaluation_before_3_11() {
        let gc = Frame::pseudo(FrameKind::Gc);
        let python = vec![py("leaf"), gc, py("mid"), py("main")];
        let native = [
            c("_PyEval_EvalFrameDefault", true),
            c("_PyFunction_Vectorcall", false),
            c("_PyEval_EvalFrameDefault", true),
            c("builtin_sorted", false),
            c("_PyEval_EvalFrameDefault", true),
            c("Py_RunMain", false),
        ];
        let out = merge(python, &stack(&native, true), None, Evaluations::EachFrame);
        assert_eq!(out.how, Merge::Whole);
        assert_eq!(
            names(&out.frames),
            [
                "leaf",
                "_PyFunction_Vectorcall",
                "<GC>",
                "mid",
                "builtin_sorted",
                "main",
                "Py_RunMain"
            ]
        );
    }
}
