//! The layouts an outside reader meets, as far as the version and the threading decide them:
//! how a thread state leads to its frames ([`FrameModel`]) and where the GIL is
//! ([`GilLayout`]). The agent's offset tables have the fields; these are the shapes that pick
//! which roles a test of the agent's own behaviour needs ([`crate::Capability::Representative`]).

use crate::{Threading, Version};

/// How a thread state leads to the Python frames, by version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FrameModel {
    /// Before 3.11: `PyFrameObject`s linked by `f_back`, from `tstate->frame`.
    FrameObjects,
    /// 3.11 and 3.12: `_PyInterpreterFrame`s behind the thread's `_PyCFrame`
    /// (`tstate->cframe->current_frame`).
    CFrame,
    /// 3.13 and 3.14: `_PyInterpreterFrame`s straight from `tstate->current_frame`.
    CurrentFrame,
    /// 3.15 and later: as 3.13, and the frame cache `last_profiled_frame` the walks resume at.
    FrameCache,
}

impl FrameModel {
    /// Every frame model, oldest first.
    pub const ALL: &[FrameModel] = &[
        FrameModel::FrameObjects,
        FrameModel::CFrame,
        FrameModel::CurrentFrame,
        FrameModel::FrameCache,
    ];

    /// The frame model of `version`.
    pub fn of(version: Version) -> FrameModel {
        if version.at_least(3, 15) {
            FrameModel::FrameCache
        } else if version.at_least(3, 13) {
            FrameModel::CurrentFrame
        } else if version.at_least(3, 11) {
            FrameModel::CFrame
        } else {
            FrameModel::FrameObjects
        }
    }
}

/// Where the GIL's state is, by version and threading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum GilLayout {
    /// 3.6: statics of their own (`gil_locked`, `gil_last_holder`), created with the second
    /// thread.
    Statics,
    /// 3.7 to 3.11: one GIL for the runtime (`_PyRuntime.ceval.gil`).
    Runtime,
    /// 3.12 to 3.14: each interpreter's own (`interp->ceval.gil`).
    Interpreter,
    /// 3.15 and later: the interpreter's, and a `holds_gil` flag in each thread state.
    ThreadFlag,
    /// A free-threaded build: no GIL.
    Disabled,
}

impl GilLayout {
    /// Every GIL layout.
    pub const ALL: &[GilLayout] = &[
        GilLayout::Statics,
        GilLayout::Runtime,
        GilLayout::Interpreter,
        GilLayout::ThreadFlag,
        GilLayout::Disabled,
    ];

    /// The GIL layout of `version` built with `threading`.
    pub fn of(version: Version, threading: Threading) -> GilLayout {
        if threading == Threading::FreeThreaded {
            GilLayout::Disabled
        } else if version.at_least(3, 15) {
            GilLayout::ThreadFlag
        } else if version.at_least(3, 12) {
            GilLayout::Interpreter
        } else if version.at_least(3, 7) {
            GilLayout::Runtime
        } else {
            GilLayout::Statics
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Version as V;

    #[test]
    fn frame_models_by_version() {
        let model = |minor| FrameModel::of(V::minor(3, minor));
        assert_eq!(model(9), FrameModel::FrameObjects);
        assert_eq!(model(11), FrameModel::CFrame);
        assert_eq!(model(12), FrameModel::CFrame);
        assert_eq!(model(13), FrameModel::CurrentFrame);
        assert_eq!(model(14), FrameModel::CurrentFrame);
        assert_eq!(model(15), FrameModel::FrameCache);
        assert_eq!(model(16), FrameModel::FrameCache);
    }

    #[test]
    fn gil_layouts_by_version_and_threading() {
        let gil = |minor| GilLayout::of(V::minor(3, minor), Threading::Gil);
        assert_eq!(gil(11), GilLayout::Runtime);
        assert_eq!(gil(12), GilLayout::Interpreter);
        assert_eq!(gil(14), GilLayout::Interpreter);
        assert_eq!(gil(15), GilLayout::ThreadFlag);
        assert_eq!(
            GilLayout::of(V::minor(3, 15), Threading::FreeThreaded),
            GilLayout::Disabled
        );
    }
}
