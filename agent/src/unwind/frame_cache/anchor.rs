//! The 3.15 anchor protocol (`last_profiled_frame` and its sequence) as the agent speaks it:
//! reading the live pair, writing the anchor after a walk, checking the write did not race a
//! return, clearing anchors at attach, and the refresh that anchors every thread for BPF walks.

use super::MAX_CACHED_FRAMES;
use crate::memory::{MemoryError, StructBytes};
use crate::unwind::error::{AttemptError, UnwindError};
use crate::unwind::{walk, InterpreterInfo, ThreadInfo, Unwinder};

impl Unwinder {
    /// Whether the top frame was copied before the thread state that named it as the anchor:
    /// then that thread state is the anchor re-check. The anchor only ever moves down the stack,
    /// one caller per pop, each move adding 1 to the sequence, so finding the same anchor and
    /// sequence we wrote proves the frame stayed on the stack from our write until the thread
    /// state was copied, and so when the frame itself was copied. The next prefetch is asked to
    /// keep that order.
    pub(in crate::unwind) fn top_read_before_anchor(&mut self, t: &ThreadInfo) -> bool {
        let o = &self.target.offsets;
        let Some(anchor_off) = o.thread_state.last_profiled_frame else {
            return false;
        };
        self.mem.fetch_first(t.top_frame);
        let frame = self.mem.read_order(t.top_frame, o.frame_read_len());
        let anchor = self.mem.read_order(t.addr + anchor_off, 16);
        matches!((frame, anchor), (Some(f), Some(a)) if f < a)
    }

    /// Re-reads the live anchor pair, bypassing the page cache (one read when the two fields
    /// are adjacent, as in 3.15).
    pub(in crate::unwind) fn anchor_unchanged(
        &mut self,
        t: &ThreadInfo,
        frame: u64,
        seq: u64,
    ) -> Result<bool, MemoryError> {
        let ts = &self.target.offsets.thread_state;
        let (Some(f_off), Some(s_off)) = (ts.last_profiled_frame, ts.last_profiled_frame_seq)
        else {
            return Ok(false);
        };
        let mut b = [0u8; 16];
        let ranges = [(t.addr + f_off, 8), (t.addr + s_off, 8)];
        if self.mem.remote().read_ranges(&ranges, &mut b)? < b.len() {
            return Err(MemoryError::Fault {
                pid: self.target.pid,
                addr: t.addr + f_off,
                len: b.len(),
            });
        }
        Ok(b.u64_at(0) == frame && b.u64_at(8) == seq)
    }

    /// Writes the anchor; returns whether it was written.
    pub(in crate::unwind) fn write_anchor(&mut self, t: &ThreadInfo, frame: u64) -> bool {
        self.write_anchor_at(t.addr, frame)
    }

    /// Writes the anchor of the thread state at `tstate`; returns whether it was written.
    pub(in crate::unwind) fn write_anchor_at(&mut self, tstate: u64, frame: u64) -> bool {
        let Some(off) = self.target.offsets.thread_state.last_profiled_frame else {
            return false;
        };
        let written = self
            .mem
            .remote()
            .write(tstate + off, &frame.to_le_bytes())
            .is_ok();
        self.stats.anchor_writes += u64::from(written);
        written
    }

    /// After an anchor write: whether the stored stack still describes the callers of the
    /// frame the anchor now names. Reads the frames of the last walk (`self.raw`), then the
    /// anchor pair, in one vectored read.
    pub(in crate::unwind) fn walk_still_live(
        &mut self,
        tstate: u64,
        seq: u64,
    ) -> Result<bool, MemoryError> {
        let o = self.target.offsets;
        let ts = &o.thread_state;
        let (Some(f_off), Some(s_off)) = (ts.last_profiled_frame, ts.last_profiled_frame_seq)
        else {
            return Ok(true);
        };
        let len = o.frame_read_len();
        // Bounded like the walk; a longer chain is not cached anyway.
        let frames = &self.raw[..self.raw.len().min(MAX_CACHED_FRAMES)];
        let ranges: Vec<(u64, usize)> = frames
            .iter()
            .map(|f| (f.addr, len))
            .chain([(tstate + f_off, 8), (tstate + s_off, 8)])
            .collect();
        let mut bytes = vec![0u8; frames.len() * len + 16];
        if self.mem.remote().read_ranges(&ranges, &mut bytes)? < bytes.len() {
            return Ok(false);
        }
        // The anchor has moved k frames down since the write (k pops, each adding 1). Consumers
        // read the anchor frame itself fresh and take its callers from the stored stack, so what
        // must hold is that the frames below the anchor's position are the walked ones; being
        // callers of a frame alive since the write, they are what they were at the write.
        let pair = &bytes[frames.len() * len..];
        let (anchor, live_seq) = (pair.u64_at(0), pair.u64_at(8));
        let k = live_seq.wrapping_sub(seq);
        if k >= frames.len() as u64 {
            return Ok(true);
        }
        let k = k as usize;
        if anchor != frames[k].addr {
            return Ok(false);
        }
        Ok(frames.iter().enumerate().skip(k + 1).all(|(i, raw)| {
            walk::parse_frame(&o, raw.addr, &bytes[i * len..(i + 1) * len]).same_call(raw)
        }))
    }

    /// Writes 0 into every thread's anchor (at attach time).
    pub(in crate::unwind) fn clear_anchors(&mut self) {
        self.mem.begin_sample();
        let Ok(interpreters) = self.threads() else {
            return;
        };
        for (_, threads) in interpreters {
            for t in threads {
                if t.anchor.is_some_and(|(a, _)| a != 0) {
                    self.write_anchor(&t, 0);
                }
            }
        }
    }
    /// Like [`Unwinder::begin_batch`], and also walks every thread in userspace through the
    /// 3.15 frame cache, which stores each thread's stack and moves its anchor to the top frame
    /// right after the walk. BPF walks that stop at that anchor are spliced onto these stacks,
    /// with the sequence check guarding against reused frame addresses.
    pub fn refresh_anchors(
        &mut self,
    ) -> Result<Vec<(InterpreterInfo, Vec<ThreadInfo>)>, UnwindError> {
        let interpreters = self.begin_batch()?;
        for (interp, threads) in &interpreters {
            for t in threads {
                match self.sample_thread(interp, t) {
                    Ok(_) => {}
                    Err(AttemptError::Memory(MemoryError::Gone { .. })) => {
                        return Err(UnwindError::Gone {
                            pid: self.target.pid,
                        })
                    }
                    Err(_) => self.stats.torn += 1,
                }
            }
        }
        if let Some(fc) = self.frame_cache.as_mut() {
            fc.end_round();
        }
        Ok(interpreters)
    }
}
