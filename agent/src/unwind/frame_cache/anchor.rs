//! The 3.15 anchor protocol (`last_profiled_frame` and its sequence) as the agent speaks it:
//! reading the live pair, writing the anchor after a walk, checking the write did not race a
//! return, clearing anchors at attach, and the refresh that anchors every thread for BPF walks.

use super::MAX_CACHED_FRAMES;

/// Calls a thread may have made on top of its walked top frame since an anchor write for the
/// write's check to still find the anchored frame on its stack (deeper: the stored stack is
/// dropped, costing a miss, not a lie).
const LIVENESS_DEPTH: usize = 8;

/// `PYAGENT_TEST_ANCHOR_RACE_US`: a pause after the walk and after the anchor write, for the
/// stress test that must meet the write races an idle machine rarely shows (a thread that
/// returns and calls again in the instant between them). Read once; unset in production.
fn race_window_for_tests() {
    static PAUSE: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
    let pause = PAUSE.get_or_init(|| {
        std::env::var("PYAGENT_TEST_ANCHOR_RACE_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(std::time::Duration::from_micros)
    });
    if let Some(pause) = pause {
        std::thread::sleep(*pause);
    }
}
use crate::memory::{MemoryError, StructBytes};
use crate::unwind::error::{AttemptError, UnwindError};
use crate::unwind::{walk, InterpreterInfo, ThreadInfo, Unwinder};

/// Whether `frame` can be an anchor whose sequence vouches for its callers: see
/// [`Unwinder::anchor_vouches`].
pub(in crate::unwind) fn can_anchor(o: &crate::offsets::Offsets, frame: &walk::RawFrame) -> bool {
    frame.owner != o.frame.generator_owner && Some(frame.owner) != o.frame.entry_owner
}

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

    /// Whether the anchor's sequence can vouch for the callers of `anchor` (the frame a walk
    /// stopped at): not when it is a frame that can leave the chain without moving the anchor
    /// (the updates missed in generators and coroutines, gh-151436), and come back at the same
    /// address under other callers:
    /// - a generator's or coroutine's frame leaves when it yields, and comes back under
    ///   whoever resumes it;
    /// - an entry frame (on the C stack) leaves when its evaluation returns, and the next
    ///   evaluation at the same C stack depth pushes one at the same address.
    ///
    /// Seen on 3.15 with the anchor on either: a generator resumed by `b_drive` spliced under
    /// `a_drive`, which resumed it before. A userspace walk goes on below such an anchor; BPF
    /// records that stop there are lost (and the thread walked whole by BPF after a few).
    pub(in crate::unwind) fn anchor_vouches(&self, anchor: &walk::RawFrame) -> bool {
        can_anchor(&self.target.offsets, anchor)
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
        if frame != 0 {
            race_window_for_tests();
        }
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

    /// After an anchor write: whether the stored stack describes the callers of the frame the
    /// anchor names, for as long as it names it. Reads the frames of the last walk
    /// (`self.raw`), then the thread's current frame and anchor pair, in one vectored read.
    ///
    /// Between the walk and the write the walked frames may have returned and another chain been
    /// pushed at their addresses (no sequence moves while the old anchor is further down), or
    /// the top alone may have returned; the write then names a frame of another chain, or no
    /// live frame, and a frame pushed there later has callers of its own. Every record that
    /// stops at the anchor would splice the stored stack under that frame (`b_leaf` under
    /// `a_parent`). So the stored stack is kept only when this read proves it right:
    /// - the anchor still names the written frame with the sequence the walk read: no frame at
    ///   that address has left the stack since the write (each would have moved the anchor);
    /// - that frame is on the stack now (the thread's current frame, or within a few calls of
    ///   it): so every record that stopped at it since the write met this very frame;
    /// - its callers are the walked ones, call for call (code, caller, call site): what the
    ///   stored stack says. Below the walked frames, a spliced part is the last walked frame's,
    ///   which the sequence kept in place from the walk to the write.
    ///
    /// An anchor that moved proves nothing: the thread may be back on a chain that matches the
    /// walk after running another under the anchor.
    pub(in crate::unwind) fn walk_still_live(
        &mut self,
        tstate: u64,
        seq: u64,
        depth: usize,
    ) -> Result<bool, MemoryError> {
        let o = self.target.offsets;
        let ts = &o.thread_state;
        let (Some(f_off), Some(s_off)) = (ts.last_profiled_frame, ts.last_profiled_frame_seq)
        else {
            return Ok(true);
        };
        race_window_for_tests();
        let len = o.frame_read_len();
        // Bounded like the walk; a longer chain is not cached anyway.
        let frames = &self.raw[..self.raw.len().min(MAX_CACHED_FRAMES)];
        let Some(anchored) = frames.get(depth).copied() else {
            return Ok(false);
        };
        let ranges: Vec<(u64, usize)> = frames
            .iter()
            .map(|f| (f.addr, len))
            .chain([
                (tstate + ts.current_frame, 8),
                (tstate + f_off, 8),
                (tstate + s_off, 8),
            ])
            .collect();
        let mut bytes = vec![0u8; frames.len() * len + 24];
        if self.mem.remote().read_ranges(&ranges, &mut bytes)? < bytes.len() {
            return Ok(false);
        }
        let live = &bytes[frames.len() * len..];
        let (current, anchor, live_seq) = (live.u64_at(0), live.u64_at(8), live.u64_at(16));
        if anchor != anchored.addr || live_seq != seq {
            return Ok(false);
        }
        // A caller's instruction pointer is its call site, fixed while the callee runs.
        let callers_match = frames.iter().enumerate().skip(depth + 1).all(|(i, raw)| {
            let now = walk::parse_frame(&o, raw.addr, &bytes[i * len..(i + 1) * len]);
            now.same_call(raw) && now.ip == raw.ip
        });
        Ok(
            callers_match
                && self.on_stack_within(current, anchored.addr, LIVENESS_DEPTH + depth)?,
        )
    }

    /// Whether frame `target` is `current` or one of its callers at most `calls` down.
    fn on_stack_within(
        &mut self,
        current: u64,
        target: u64,
        calls: usize,
    ) -> Result<bool, MemoryError> {
        let o = self.target.offsets;
        let mut frame = current;
        for _ in 0..=calls {
            if frame == target {
                return Ok(true);
            }
            if frame == 0 {
                return Ok(false);
            }
            // Read live (not through the page cache): the frames above the anchored one are
            // newer than any cached page.
            frame = walk::read_frame(self.mem.remote(), &o, frame)?.previous;
        }
        Ok(false)
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
