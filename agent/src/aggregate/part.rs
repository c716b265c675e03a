//! Where a thread's wall time went: the parts the `pyagent spans` report and the
//! `pyagent_python_wall_seconds_total` metric split it into, from a sample's labels.

use serde::Serialize;

use super::WaitReason;
use crate::unwind::{CpuState, GilState};

/// A part of a thread's wall time: on a CPU (with the GIL or not), or waiting, by what for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WallPart {
    /// On a CPU, holding the GIL: Python code running.
    CpuGilHeld,
    /// On a CPU without the GIL (C code that released it, a free-threaded build), or with no
    /// `gil` label to tell.
    CpuNoGil,
    /// Waiting to take the GIL: off-CPU with `wait=gil`, or on-CPU with `gil=waiting` (a thread
    /// spinning or about to block in `take_gil`).
    GilWait,
    /// Off-CPU in a call on descriptors (`wait=io`).
    Io,
    /// Off-CPU on a futex that is not the GIL's (`wait=lock`).
    Lock,
    /// Off-CPU sleeping (`wait=sleep`).
    Sleep,
    /// Runnable, waiting for a CPU (`wait=cpu`): preempted, or throttled by a CPU limit.
    CpuWait,
    /// Off-CPU for any other reason, or for none the profile names.
    Other,
}

impl WallPart {
    /// Every part, in report order.
    pub const ALL: [WallPart; 8] = [
        WallPart::CpuGilHeld,
        WallPart::CpuNoGil,
        WallPart::GilWait,
        WallPart::CpuWait,
        WallPart::Io,
        WallPart::Lock,
        WallPart::Sleep,
        WallPart::Other,
    ];

    /// The `reason` label value (and the JSON key of `pyagent spans`).
    pub fn label(self) -> &'static str {
        match self {
            WallPart::CpuGilHeld => "cpu_gil_held",
            WallPart::CpuNoGil => "cpu_no_gil",
            WallPart::GilWait => "gil_wait",
            WallPart::CpuWait => "cpu_wait",
            WallPart::Io => "io",
            WallPart::Lock => "lock",
            WallPart::Sleep => "sleep",
            WallPart::Other => "other",
        }
    }

    /// What the part is, for people.
    pub fn describe(self) -> &'static str {
        match self {
            WallPart::CpuGilHeld => "on CPU, GIL held",
            WallPart::CpuNoGil => "on CPU, no GIL",
            WallPart::GilWait => "waiting for the GIL",
            WallPart::Io => "io",
            WallPart::Lock => "lock",
            WallPart::Sleep => "sleep",
            WallPart::CpuWait => "waiting for a CPU",
            WallPart::Other => "other",
        }
    }

    /// The part of on-CPU-typed time with these labels. Userspace `--idle` profiles put the
    /// time of threads off a CPU (`state=off_cpu`) in the same sample type, without a wait
    /// reason.
    pub fn of_on_cpu(gil: Option<GilState>, state: Option<CpuState>) -> WallPart {
        match (gil, state) {
            (Some(GilState::Waiting), _) => WallPart::GilWait,
            (_, Some(CpuState::OffCpu)) => WallPart::Other,
            (Some(GilState::Held), _) => WallPart::CpuGilHeld,
            _ => WallPart::CpuNoGil,
        }
    }

    /// The part of off-CPU time with this `wait` label.
    pub fn of_off_cpu(wait: Option<WaitReason>) -> WallPart {
        match wait {
            Some(WaitReason::Gil) => WallPart::GilWait,
            Some(WaitReason::Io) => WallPart::Io,
            Some(WaitReason::Lock) => WallPart::Lock,
            Some(WaitReason::Sleep) => WallPart::Sleep,
            Some(WaitReason::Cpu) => WallPart::CpuWait,
            Some(WaitReason::Other) | None => WallPart::Other,
        }
    }
}
