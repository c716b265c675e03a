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
    /// `instr_ptr` / `prev_instr`
    pub ip: u64,
    /// `previous`
    pub previous: u64,
    /// `owner`
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
    /// a frame pointed to itself or the chain did not make sense
    Corrupt,
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
        ip: buf.u64_at(f.instr_ptr),
        previous: buf.u64_at(f.previous),
        owner: buf.u8_at(f.owner),
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
        if frame.previous == addr {
            return Ok(WalkEnd::Corrupt);
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
    fn cycles_are_bounded() {
        // 0 → 1 → 2 → 0 → …: never reaches a NULL `previous`.
        let mut mem = chain(&[Some(1), Some(2), Some(0)]);
        let mut out = Vec::new();
        let end = walk_frames(&mut mem, &offsets(), BASE, None, 50, &mut out).expect("readable");
        assert_eq!(end, WalkEnd::DepthLimit);
        assert_eq!(out.len(), 50);
        // A frame that is its own caller is caught at once.
        let mut mem = chain(&[Some(0)]);
        out.clear();
        assert_eq!(
            walk_frames(&mut mem, &offsets(), BASE, None, 50, &mut out),
            Ok(WalkEnd::Corrupt)
        );
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
