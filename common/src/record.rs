//! Ring-buffer record parsing: `&[u8]` from the kernel -> header + frames, without panics on
//! short or garbage input and without `unsafe`.

use std::mem::{offset_of, size_of};

use crate::{
    PaFrame, PaNativeHdr, PaSampleHdr, KERNEL_FRAMES, MAX_FRAMES, NATIVE_STACK_BYTES,
    SAMPLE_NATIVE, SHORT_FRAMES, SHORT_RECORD_BYTES,
};

const HDR: usize = size_of::<PaSampleHdr>();
const FRAME: usize = size_of::<PaFrame>();
const NATIVE_HDR: usize = size_of::<PaNativeHdr>();

/// Why a ring-buffer record was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Shorter than the header.
    #[error("record of {len} bytes is shorter than the {HDR}-byte header")]
    TooShort {
        /// Record length in bytes.
        len: usize,
    },
    /// The header claims more frames than the BPF program records.
    #[error("record claims {nframes} frames, more than the limit {MAX_FRAMES}")]
    TooManyFrames {
        /// The header's frame count.
        nframes: u32,
    },
    /// The length does not match header plus frames.
    #[error("record of {len} bytes, expected {expected} for {nframes} frames")]
    LengthMismatch {
        /// Record length in bytes.
        len: usize,
        /// Length implied by the frame count.
        expected: usize,
        /// The header's frame count.
        nframes: u32,
    },
    /// The native section is cut short or claims more than the program copies.
    #[error("native section of {len} bytes does not hold {kernel_frames} kernel frames and {stack_bytes} stack bytes")]
    BadNativeSection {
        /// Bytes after the frames.
        len: usize,
        /// The section's kernel frame count.
        kernel_frames: u32,
        /// The section's stack byte count.
        stack_bytes: u32,
    },
}

/// The native section of a record ([`SAMPLE_NATIVE`]): user registers, kernel return
/// addresses and the copied user stack, still in the ring buffer.
#[derive(Debug, Clone, Copy)]
pub struct NativeSection<'a> {
    /// Registers and counts.
    pub hdr: PaNativeHdr,
    kernel: &'a [u8],
    /// The user stack from `hdr.sp` up.
    pub stack: &'a [u8],
}

impl<'a> NativeSection<'a> {
    /// A section read from userspace (ptrace registers and a copy of the stack, no kernel
    /// frames): `stack` holds the bytes from `ip`'s thread's `sp` up.
    pub fn from_user_copy(ip: u64, sp: u64, bp: u64, stack: &'a [u8]) -> NativeSection<'a> {
        NativeSection {
            hdr: PaNativeHdr {
                ip,
                sp,
                bp,
                kernel_frames: 0,
                stack_bytes: u32::try_from(stack.len()).unwrap_or(u32::MAX),
            },
            kernel: &[],
            stack,
        }
    }

    /// Kernel return addresses, innermost first.
    pub fn kernel_frames(&self) -> impl Iterator<Item = u64> + '_ {
        self.kernel.chunks_exact(8).map(|c| u64_at(c, 0))
    }

    fn parse(bytes: &'a [u8]) -> Result<NativeSection<'a>, RecordError> {
        let bad = |hdr: &PaNativeHdr| RecordError::BadNativeSection {
            len: bytes.len(),
            kernel_frames: hdr.kernel_frames,
            stack_bytes: hdr.stack_bytes,
        };
        let Some((head, rest)) = bytes.split_first_chunk::<NATIVE_HDR>() else {
            return Err(bad(&PaNativeHdr::default()));
        };
        let hdr = PaNativeHdr {
            ip: u64_at(head, offset_of!(PaNativeHdr, ip)),
            sp: u64_at(head, offset_of!(PaNativeHdr, sp)),
            bp: u64_at(head, offset_of!(PaNativeHdr, bp)),
            kernel_frames: u32_at(head, offset_of!(PaNativeHdr, kernel_frames)),
            stack_bytes: u32_at(head, offset_of!(PaNativeHdr, stack_bytes)),
        };
        if hdr.kernel_frames > KERNEL_FRAMES || hdr.stack_bytes > NATIVE_STACK_BYTES {
            return Err(bad(&hdr));
        }
        let kbytes = hdr.kernel_frames as usize * 8;
        if rest.len() != kbytes + hdr.stack_bytes as usize {
            return Err(bad(&hdr));
        }
        let (kernel, stack) = rest.split_at(kbytes);
        Ok(NativeSection { hdr, kernel, stack })
    }
}

/// One parsed record: the header, and the frames still in the ring buffer (top frame first).
#[derive(Debug, Clone, Copy)]
pub struct SampleRecord<'a> {
    hdr: PaSampleHdr,
    frames: &'a [u8],
    native: Option<NativeSection<'a>>,
}

impl<'a> SampleRecord<'a> {
    /// Parses a record: a `struct pa_sample_hdr` followed by exactly `nframes` `struct pa_frame`,
    /// or a short record ([`SHORT_RECORD_BYTES`] whatever its `nframes`, at most
    /// [`SHORT_FRAMES`]), whose unused frame slots are ignored.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, RecordError> {
        let Some((head, frames)) = bytes.split_first_chunk::<HDR>() else {
            return Err(RecordError::TooShort { len: bytes.len() });
        };
        let hdr = PaSampleHdr {
            pid: u32_at(head, offset_of!(PaSampleHdr, pid)),
            tid: u32_at(head, offset_of!(PaSampleHdr, tid)),
            tstate: u64_at(head, offset_of!(PaSampleHdr, tstate)),
            generation: u64_at(head, offset_of!(PaSampleHdr, generation)),
            anchor_frame: u64_at(head, offset_of!(PaSampleHdr, anchor_frame)),
            anchor_seq: u64_at(head, offset_of!(PaSampleHdr, anchor_seq)),
            base_frame: u64_at(head, offset_of!(PaSampleHdr, base_frame)),
            cpu: u32_at(head, offset_of!(PaSampleHdr, cpu)),
            nframes: u32_at(head, offset_of!(PaSampleHdr, nframes)),
            flags: u32_at(head, offset_of!(PaSampleHdr, flags)),
            wait: u32_at(head, offset_of!(PaSampleHdr, wait)),
            time_ns: u64_at(head, offset_of!(PaSampleHdr, time_ns)),
            wait_addr: u64_at(head, offset_of!(PaSampleHdr, wait_addr)),
            carried_ns: u64_at(head, offset_of!(PaSampleHdr, carried_ns)),
            trace_id: bytes_at(head, offset_of!(PaSampleHdr, trace_id)),
            span_id: bytes_at(head, offset_of!(PaSampleHdr, span_id)),
            gil_holder: u64_at(head, offset_of!(PaSampleHdr, gil_holder)),
            gil_holder_code: u64_at(head, offset_of!(PaSampleHdr, gil_holder_code)),
            task_frame: u64_at(head, offset_of!(PaSampleHdr, task_frame)),
        };
        if hdr.nframes > MAX_FRAMES {
            return Err(RecordError::TooManyFrames {
                nframes: hdr.nframes,
            });
        }
        let expected = HDR + hdr.nframes as usize * FRAME;
        if hdr.flags & SAMPLE_NATIVE != 0 {
            // Always a long record: header, exactly `nframes` frames, then the section.
            let Some((frames, native)) = frames.split_at_checked(expected - HDR) else {
                return Err(RecordError::LengthMismatch {
                    len: bytes.len(),
                    expected,
                    nframes: hdr.nframes,
                });
            };
            return Ok(SampleRecord {
                hdr,
                frames,
                native: Some(NativeSection::parse(native)?),
            });
        }
        let short = bytes.len() == SHORT_RECORD_BYTES && hdr.nframes <= SHORT_FRAMES;
        if bytes.len() != expected && !short {
            return Err(RecordError::LengthMismatch {
                len: bytes.len(),
                expected,
                nframes: hdr.nframes,
            });
        }
        Ok(SampleRecord {
            hdr,
            frames: &frames[..expected - HDR],
            native: None,
        })
    }

    /// The native section, when the record has one ([`SAMPLE_NATIVE`]).
    pub fn native(&self) -> Option<&NativeSection<'a>> {
        self.native.as_ref()
    }

    /// The header.
    pub fn header(&self) -> &PaSampleHdr {
        &self.hdr
    }

    /// Number of frames (`header().nframes`).
    pub fn len(&self) -> usize {
        self.frames.len() / FRAME
    }

    /// No frames (a read failure on the top frame).
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Frame `i` (0 = top, the thread's current frame).
    pub fn frame(&self, i: usize) -> Option<PaFrame> {
        let start = i.checked_mul(FRAME)?;
        self.frames
            .get(start..start.checked_add(FRAME)?)
            .map(frame_from)
    }

    /// The frames, top first.
    pub fn frames(&self) -> Frames<'a> {
        Frames {
            chunks: self.frames.chunks_exact(FRAME),
        }
    }
}

/// Iterator over a record's frames, top first.
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    chunks: std::slice::ChunksExact<'a, u8>,
}

impl Iterator for Frames<'_> {
    type Item = PaFrame;

    fn next(&mut self) -> Option<PaFrame> {
        self.chunks.next().map(frame_from)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chunks.size_hint()
    }
}

impl ExactSizeIterator for Frames<'_> {}

fn frame_from(b: &[u8]) -> PaFrame {
    PaFrame {
        addr: u64_at(b, offset_of!(PaFrame, addr)),
        executable: u64_at(b, offset_of!(PaFrame, executable)),
        instr_ptr: u64_at(b, offset_of!(PaFrame, instr_ptr)),
        owner: u32_at(b, offset_of!(PaFrame, owner)),
        is_entry: u32_at(b, offset_of!(PaFrame, is_entry)),
    }
}

// Callers pass slices of at least `off + N` bytes (a header or a frame chunk); a shorter one
// yields zeros rather than a panic.
fn bytes_at<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    b.get(off..off + N)
        .and_then(|s| s.try_into().ok())
        .unwrap_or([0; N])
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(bytes_at(b, off))
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(bytes_at(b, off))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SAMPLE_COMPLETE, SAMPLE_OFF_CPU, SAMPLE_SPAN};

    fn record(hdr: &PaSampleHdr, frames: &[PaFrame]) -> Vec<u8> {
        let mut v = Vec::new();
        for x in [hdr.pid, hdr.tid] {
            v.extend_from_slice(&x.to_ne_bytes());
        }
        for x in [
            hdr.tstate,
            hdr.generation,
            hdr.anchor_frame,
            hdr.anchor_seq,
            hdr.base_frame,
        ] {
            v.extend_from_slice(&x.to_ne_bytes());
        }
        for x in [hdr.cpu, hdr.nframes, hdr.flags, hdr.wait] {
            v.extend_from_slice(&x.to_ne_bytes());
        }
        for x in [hdr.time_ns, hdr.wait_addr, hdr.carried_ns] {
            v.extend_from_slice(&x.to_ne_bytes());
        }
        v.extend_from_slice(&hdr.trace_id);
        v.extend_from_slice(&hdr.span_id);
        for x in [hdr.gil_holder, hdr.gil_holder_code, hdr.task_frame] {
            v.extend_from_slice(&x.to_ne_bytes());
        }
        for f in frames {
            for x in [f.addr, f.executable, f.instr_ptr] {
                v.extend_from_slice(&x.to_ne_bytes());
            }
            v.extend_from_slice(&f.owner.to_ne_bytes());
            v.extend_from_slice(&f.is_entry.to_ne_bytes());
        }
        v
    }

    fn frames(n: u64) -> Vec<PaFrame> {
        (0..n)
            .map(|i| PaFrame {
                addr: 0x1000 + i * 88,
                executable: 0x7000 + i,
                instr_ptr: 0x9000 + i,
                owner: 1,
                is_entry: 0,
            })
            .collect()
    }

    #[test]
    fn parses_header_and_frames() {
        let fr = frames(3);
        let hdr = PaSampleHdr {
            pid: 7,
            tid: 8,
            tstate: 0xabc,
            generation: 5,
            anchor_frame: 0x1058,
            anchor_seq: 41,
            base_frame: 0,
            cpu: 1,
            nframes: 3,
            flags: SAMPLE_COMPLETE | SAMPLE_OFF_CPU | SAMPLE_SPAN,
            wait: crate::WAIT_FUTEX,
            time_ns: 123_456_789,
            wait_addr: 0x7f00_0000_1000,
            carried_ns: 987_654,
            trace_id: [
                0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80,
                0x31, 0x9c,
            ],
            span_id: *b"\xb7\xad\x6b\x71\x69\x20\x33\x31",
            gil_holder: 0x7f00_0000_2000,
            gil_holder_code: 0x7f00_0000_3000,
            task_frame: 0x7f00_0000_4000,
        };
        let bytes = record(&hdr, &fr);
        let rec = SampleRecord::parse(&bytes).expect("valid record");
        assert_eq!(*rec.header(), hdr);
        assert!(rec.header().is_complete());
        assert!(rec.header().is_off_cpu() && !rec.header().is_wake());
        // The ids keep the record's byte order (the W3C ids as written).
        assert_eq!(
            rec.header().trace_context(),
            Some((
                [
                    0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c,
                    0x80, 0x31, 0x9c
                ],
                [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31]
            ))
        );
        assert_eq!(
            rec.header().gil_holder(),
            Some((0x7f00_0000_2000, 0x7f00_0000_3000))
        );
        assert_eq!(rec.len(), 3);
        assert_eq!(rec.frames().collect::<Vec<_>>(), fr);
        assert_eq!(rec.frames().len(), 3);
        assert_eq!(rec.frame(2), Some(fr[2]));
        assert_eq!(rec.frame(3), None);
        assert_eq!(rec.frame(usize::MAX), None);
    }

    #[test]
    fn parses_a_native_section_after_the_frames() {
        let hdr = PaSampleHdr {
            nframes: 2,
            flags: SAMPLE_NATIVE,
            ..PaSampleHdr::default()
        };
        let mut bytes = record(&hdr, &frames(2));
        for x in [0x401000u64, 0x7ffd_0000_1000, 0x7ffd_0000_1100] {
            bytes.extend_from_slice(&x.to_ne_bytes());
        }
        bytes.extend_from_slice(&1u32.to_ne_bytes());
        bytes.extend_from_slice(&24u32.to_ne_bytes());
        bytes.extend_from_slice(&0xffff_ffff_8100_0000u64.to_ne_bytes());
        bytes.extend_from_slice(&[7; 24]);
        let rec = SampleRecord::parse(&bytes).expect("native record");
        assert_eq!(rec.len(), 2);
        let native = rec.native().expect("native section");
        assert_eq!(native.hdr.ip, 0x401000);
        assert_eq!(native.hdr.sp, 0x7ffd_0000_1000);
        assert_eq!(
            native.kernel_frames().collect::<Vec<_>>(),
            [0xffff_ffff_8100_0000]
        );
        assert_eq!(native.stack, &[7; 24]);
        // Every prefix, and a count the bytes do not hold: errors, not panics.
        for n in 0..bytes.len() {
            assert!(SampleRecord::parse(&bytes[..n]).is_err(), "prefix {n}");
        }
        bytes.extend_from_slice(&[0; 8]);
        assert!(matches!(
            SampleRecord::parse(&bytes),
            Err(RecordError::BadNativeSection { .. })
        ));
    }

    #[test]
    fn rejects_short_and_garbage_input() {
        assert_eq!(
            SampleRecord::parse(&[]).unwrap_err(),
            RecordError::TooShort { len: 0 }
        );
        assert_eq!(
            SampleRecord::parse(&[0; HDR - 1]).unwrap_err(),
            RecordError::TooShort { len: HDR - 1 }
        );
        let empty = SampleRecord::parse(&[0; HDR]).expect("zero frames is valid");
        assert!(empty.is_empty() && empty.frames().next().is_none());

        let hdr = PaSampleHdr {
            nframes: 2,
            ..PaSampleHdr::default()
        };
        let mut bytes = record(&hdr, &frames(2));
        bytes.pop();
        assert_eq!(
            SampleRecord::parse(&bytes).unwrap_err(),
            RecordError::LengthMismatch {
                len: HDR + 2 * FRAME - 1,
                expected: HDR + 2 * FRAME,
                nframes: 2
            }
        );
        bytes.extend_from_slice(&[0; 9]);
        assert!(matches!(
            SampleRecord::parse(&bytes),
            Err(RecordError::LengthMismatch { .. })
        ));

        // A short record: fixed length, unused slots ignored; more frames than fit is garbage.
        let short = |n: u32| {
            let mut b = record(
                &PaSampleHdr {
                    nframes: n,
                    ..PaSampleHdr::default()
                },
                &frames(u64::from(n.min(SHORT_FRAMES))),
            );
            b.resize(SHORT_RECORD_BYTES, 0xee);
            b
        };
        let two = short(2);
        let rec = SampleRecord::parse(&two).expect("short record");
        assert_eq!(rec.len(), 2);
        assert_eq!(rec.frames().count(), 2);
        assert_eq!(SampleRecord::parse(&short(SHORT_FRAMES)).unwrap().len(), 8);
        assert!(matches!(
            SampleRecord::parse(&short(SHORT_FRAMES + 1)),
            Err(RecordError::LengthMismatch { .. })
        ));

        let hdr = PaSampleHdr {
            nframes: u32::MAX,
            ..PaSampleHdr::default()
        };
        assert_eq!(
            SampleRecord::parse(&record(&hdr, &[])).unwrap_err(),
            RecordError::TooManyFrames { nframes: u32::MAX }
        );
        // Every prefix and a few garbage buffers: errors, never panics.
        let good = record(
            &PaSampleHdr {
                nframes: 4,
                ..PaSampleHdr::default()
            },
            &frames(4),
        );
        for n in 0..good.len() {
            assert!(SampleRecord::parse(&good[..n]).is_err());
        }
        for seed in 0u8..=255 {
            let junk: Vec<u8> = (0..200u16)
                .map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed))
                .collect();
            let _ = SampleRecord::parse(&junk);
        }
    }
}
