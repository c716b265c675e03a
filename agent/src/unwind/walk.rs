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
pub fn read_frame(mem: &mut impl ProcessMemory, o: &Offsets, addr: u64) -> Result<RawFrame, MemoryError> {
    let f = &o.interpreter_frame;
    let mut buf = [0u8; 128];
    let buf = &mut buf[..o.frame_read_len().min(128)];
    mem.read(addr, buf)?;
    Ok(RawFrame {
        addr,
        code: buf.u64_at(f.executable) & !o.frame.executable_tag_mask,
        ip: buf.u64_at(f.instr_ptr),
        previous: buf.u64_at(f.previous),
        owner: buf.u8_at(f.owner),
        is_entry: o.frame.is_entry.is_some_and(|off| buf.u8_at(off) != 0),
        tlbc_index: f.tlbc_index.map(|off| buf.u32_at(off)).unwrap_or(0),
    })
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
        if addr % 8 != 0 {
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
