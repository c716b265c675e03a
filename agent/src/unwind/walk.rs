//! Walks the raw `_PyInterpreterFrame` chain of one thread: addresses only, no symbols.

use crate::memory::{MemoryError, ProcessMemory, StructBytes};
use crate::offsets::Offsets;

/// One frame as found in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawFrame {
    /// address of the `_PyInterpreterFrame`
    pub addr: u64,
    /// `f_executable` / `f_code`, tag bits cleared
    pub code: u64,
    /// `instr_ptr` / `prev_instr`, or 3.6–3.10's `f_lasti` as a byte offset
    /// ([`crate::offsets::FrameModel::instruction`])
    pub ip: u64,
    /// `previous`
    pub previous: u64,
    /// `owner` (0 where frames have none)
    pub owner: u8,
    /// 3.11 `is_entry`
    pub is_entry: bool,
    /// free-threaded 3.14+: `tlbc_index`
    pub tlbc_index: u32,
}

/// How a walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkEnd {
    /// reached a frame whose `previous` is NULL
    Bottom,
    /// stopped right after the frame that is the frame-cache anchor
    Anchor,
    /// hit the depth bound
    DepthLimit,
    /// a frame pointer made no sense (misaligned)
    Corrupt,
    /// a frame's `previous` led back to a frame already walked
    Cycle,
}

/// Brent's cycle detection over the frame addresses of one walk: O(1) memory and one compare a
/// frame, and a loop of length λ entered after μ frames is found within about μ + 2λ frames. A
/// live chain never names a frame twice, so a repeat means corrupt memory (or a frame reused
/// while we read), never a deep stack.
#[derive(Debug, Clone, Copy)]
struct CycleCheck {
    /// the address every later one is compared with
    saved: u64,
    /// steps taken since `saved` was taken
    steps: usize,
    /// `saved` moves to the current address after this many steps, which then doubles
    power: usize,
}

impl CycleCheck {
    fn new(start: u64) -> CycleCheck {
        CycleCheck {
            saved: start,
            steps: 0,
            power: 1,
        }
    }

    /// Whether the walk, moving on to `next`, has come back to a frame it walked.
    fn seen_again(&mut self, next: u64) -> bool {
        if next == self.saved {
            return true;
        }
        self.steps += 1;
        if self.steps == self.power {
            self.saved = next;
            self.power *= 2;
            self.steps = 0;
        }
        false
    }
}

/// Whether `f` is the first frame of a C-level evaluation, where every thread's chain ends:
/// 3.11 flags it (`is_entry`), 3.12+ push an entry frame owned by the C stack. Before 3.11 no
/// frame is marked, and a heap frame's `f_back` is set before the frame runs: the chain's last
/// frame is the thread's first.
pub fn starts_evaluation(o: &Offsets, f: &RawFrame) -> bool {
    f.is_entry || o.frame.entry_owner == Some(f.owner) || (o.frame.heap_frames && f.previous == 0)
}

/// Reads one frame at `addr`.
pub fn read_frame(
    mem: &mut impl ProcessMemory,
    o: &Offsets,
    addr: u64,
) -> Result<RawFrame, MemoryError> {
    let mut buf = [0u8; 128];
    let buf = &mut buf[..o.frame_read_len().min(128)];
    mem.read(addr, buf)?;
    Ok(parse_frame(o, addr, buf))
}

/// The frame at `addr` from its bytes (`Offsets::frame_read_len` of them).
pub fn parse_frame(o: &Offsets, addr: u64, buf: &[u8]) -> RawFrame {
    let f = &o.interpreter_frame;
    RawFrame {
        addr,
        code: buf.u64_at(f.executable) & !o.frame.executable_tag_mask,
        ip: o.frame.instruction(buf.u64_at(f.instr_ptr)),
        previous: buf.u64_at(f.previous),
        owner: f.owner.map_or(0, |off| buf.u8_at(off)),
        is_entry: o.frame.is_entry.is_some_and(|off| buf.u8_at(off) != 0),
        tlbc_index: f.tlbc_index.map(|off| buf.u32_at(off)).unwrap_or(0),
    }
}

impl RawFrame {
    /// Whether `other` is the same frame still in the same call: same code, same caller.
    pub fn same_call(&self, other: &RawFrame) -> bool {
        self.code == other.code && self.previous == other.previous
    }
}

/// Walks from `top` towards the bottom, appending to `out`; stops after `stop_at` if given.
pub fn walk_frames(
    mem: &mut impl ProcessMemory,
    o: &Offsets,
    top: u64,
    stop_at: Option<u64>,
    max_depth: usize,
    out: &mut Vec<RawFrame>,
) -> Result<WalkEnd, MemoryError> {
    let mut addr = top;
    let start_len = out.len();
    let mut cycle = CycleCheck::new(top);
    loop {
        if out.len() - start_len >= max_depth {
            return Ok(WalkEnd::DepthLimit);
        }
        if !addr.is_multiple_of(8) {
            return Ok(WalkEnd::Corrupt);
        }
        let frame = read_frame(mem, o, addr)?;
        out.push(frame);
        if stop_at == Some(addr) {
            return Ok(WalkEnd::Anchor);
        }
        if frame.previous == 0 {
            return Ok(WalkEnd::Bottom);
        }
        if cycle.seen_again(frame.previous) {
            return Ok(WalkEnd::Cycle);
        }
        addr = frame.previous;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::FakeMemory;
    use crate::offsets::{builtin_offsets, PythonVersion};

    const BASE: u64 = 0x10000;

    /// Frames of the 3.12 layout (80 bytes, previous @8) at BASE + 128*i, linked as `links`
    /// says: `links[i]` is the index of frame i's caller, None for the bottom.
    fn chain(links: &[Option<usize>]) -> FakeMemory {
        let mut mem = FakeMemory {
            base: BASE,
            bytes: vec![0; 128 * links.len() + 128],
        };
        for (i, link) in links.iter().enumerate() {
            let at = 128 * i;
            let prev = link.map(|j| BASE + 128 * j as u64).unwrap_or(0);
            mem.bytes[at..at + 8].copy_from_slice(&(0x9000u64 + i as u64).to_le_bytes());
            mem.bytes[at + 8..at + 16].copy_from_slice(&prev.to_le_bytes());
        }
        mem
    }

    fn offsets() -> Offsets {
        builtin_offsets(PythonVersion::new(3, 12, 1)).expect("table")
    }

    #[test]
    fn walks_to_the_bottom() {
        let mut mem = chain(&[Some(1), Some(2), None]);
        let mut out = Vec::new();
        let end = walk_frames(&mut mem, &offsets(), BASE, None, 100, &mut out).expect("readable");
        assert_eq!(end, WalkEnd::Bottom);
        assert_eq!(
            out.iter().map(|f| f.code).collect::<Vec<_>>(),
            [0x9000, 0x9001, 0x9002]
        );
    }

    #[test]
    fn cycles_are_found_not_walked_to_the_depth_bound() {
        // 0 → 1 → 2 → 0 → …: never reaches a NULL `previous`.
        let mut mem = chain(&[Some(1), Some(2), Some(0)]);
        let mut out = Vec::new();
        let end = walk_frames(&mut mem, &offsets(), BASE, None, 50, &mut out).expect("readable");
        assert_eq!(end, WalkEnd::Cycle);
        assert!(out.len() <= 8, "found within a few laps: {}", out.len());
        // A frame that is its own caller is caught at once.
        let mut mem = chain(&[Some(0)]);
        out.clear();
        assert_eq!(
            walk_frames(&mut mem, &offsets(), BASE, None, 50, &mut out),
            Ok(WalkEnd::Cycle)
        );
        assert_eq!(out.len(), 1);
        // A loop entered deep down: 0 → … → 9 → 5 → ….
        let links: Vec<Option<usize>> = (0..10)
            .map(|i| Some(if i == 9 { 5 } else { i + 1 }))
            .collect();
        let mut mem = chain(&links);
        out.clear();
        assert_eq!(
            walk_frames(&mut mem, &offsets(), BASE, None, 100, &mut out),
            Ok(WalkEnd::Cycle)
        );
    }

    #[test]
    fn a_long_chain_is_not_a_cycle() {
        let links: Vec<Option<usize>> = (0..200).map(|i| (i < 199).then_some(i + 1)).collect();
        let mut mem = chain(&links);
        let mut out = Vec::new();
        assert_eq!(
            walk_frames(&mut mem, &offsets(), BASE, None, 1000, &mut out),
            Ok(WalkEnd::Bottom)
        );
        assert_eq!(out.len(), 200);
    }

    #[test]
    fn garbage_pointers_fail_cleanly() {
        let mut mem = chain(&[Some(1), None]);
        // Frame 1's `previous` points far outside the image.
        mem.bytes[128 + 8..128 + 16].copy_from_slice(&0xdead_0000u64.to_le_bytes());
        let mut out = Vec::new();
        let r = walk_frames(&mut mem, &offsets(), BASE, None, 50, &mut out);
        assert!(matches!(r, Err(MemoryError::Fault { .. })), "{r:?}");
        // Misaligned pointer.
        let mut mem = chain(&[None]);
        out.clear();
        assert_eq!(
            walk_frames(&mut mem, &offsets(), BASE + 3, None, 50, &mut out),
            Ok(WalkEnd::Corrupt)
        );
    }

    #[test]
    fn stops_after_the_anchor() {
        let mut mem = chain(&[Some(1), Some(2), None]);
        let mut out = Vec::new();
        let end = walk_frames(&mut mem, &offsets(), BASE, Some(BASE + 128), 100, &mut out);
        assert_eq!(end, Ok(WalkEnd::Anchor));
        assert_eq!(out.len(), 2, "the anchor frame itself is read fresh");
    }
}
