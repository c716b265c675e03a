//! Decoders for the line tables of code objects: `co_linetable` of 3.11+ (location entries),
//! 3.10's `co_linetable` (line deltas) and `co_lnotab` of 3.6–3.9. Each becomes the same table of
//! code-unit ranges.
//!
//! 3.11+ format (CPython `InternalDocs/code_objects.md`, `Objects/locations.md`): a sequence of entries
//! tiling the bytecode; a header byte with bit 7 set, a 4-bit kind and a length of 1–8 code
//! units, then kind-specific bytes. Kinds 0–9 (short) and 10–12 (one-line) carry line deltas of
//! 0 and 0–2; 13 a signed varint delta without columns; 14 a signed delta plus three varints;
//! 15 "no location".

use crate::offsets::LineTableFormat;

/// One decoded range: code units `[start, end)` run at `line` (None for "no location").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRange {
    /// first code unit
    pub start: u32,
    /// one past the last code unit
    pub end: u32,
    /// source line
    pub line: Option<u32>,
}

/// A fully decoded location table, searched by binary search.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineTable {
    ranges: Vec<LineRange>,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn varint(&mut self) -> Option<u32> {
        let mut value: u32 = 0;
        let mut shift = 0u32;
        loop {
            let b = self.byte()?;
            if b & 0x80 != 0 || shift > 28 {
                return None; // a header byte inside a varint: corrupt
            }
            value |= ((b & 0x3f) as u32) << shift;
            if b & 0x40 == 0 {
                return Some(value);
            }
            shift += 6;
        }
    }

    fn svarint(&mut self) -> Option<i64> {
        let u = self.varint()?;
        Some(if u & 1 != 0 {
            -((u >> 1) as i64)
        } else {
            (u >> 1) as i64
        })
    }
}

impl LineTable {
    /// Heap bytes of the decoded table.
    pub fn heap_bytes(&self) -> usize {
        self.ranges.capacity() * std::mem::size_of::<LineRange>()
    }

    /// Decodes `table`, in `format`, for a code object whose first line is `first_line`.
    pub fn decode_as(format: LineTableFormat, table: &[u8], first_line: u32) -> LineTable {
        match format {
            LineTableFormat::Locations => LineTable::decode(table, first_line),
            LineTableFormat::LineDeltas => LineTable::decode_line_deltas(table, first_line),
            LineTableFormat::Lnotab => LineTable::decode_lnotab(table, first_line),
        }
    }

    /// The table of byte ranges `bytes` (in order, neighbours on one line already merged):
    /// the ranges in code units. Merging first matters: a jump of more than 255 bytes is split
    /// into steps that end at odd offsets.
    fn from_byte_ranges(bytes: Vec<(u32, u32, Option<u32>)>) -> LineTable {
        let ranges = bytes
            .into_iter()
            .map(|(start, end, line)| LineRange {
                start: start / 2,
                end: end.div_ceil(2),
                line,
            })
            .filter(|r| r.end > r.start)
            .collect();
        LineTable { ranges }
    }

    /// Appends the byte range `[start, end)` at `line` to `out`, merged into the last one when
    /// they meet on the same line.
    fn push_bytes(out: &mut Vec<(u32, u32, Option<u32>)>, start: u32, end: u32, line: Option<u32>) {
        if end <= start {
            return;
        }
        match out.last_mut() {
            Some(last) if last.1 == start && last.2 == line => last.1 = end,
            _ => out.push((start, end, line)),
        }
    }

    /// 3.10's `co_linetable`: each pair of bytes is one range of the bytecode, `sdelta` bytes
    /// long (unsigned), at the line moved by `ldelta` (signed), or at no line when `ldelta` is
    /// -128. Offsets in the table are bytes; the ranges are code units.
    pub fn decode_line_deltas(table: &[u8], first_line: u32) -> LineTable {
        let mut t = Vec::new();
        let mut line = i64::from(first_line);
        let mut end: u32 = 0;
        for pair in table.chunks_exact(2) {
            let start = end;
            end = end.saturating_add(u32::from(pair[0]));
            let ldelta = pair[1] as i8;
            let at = if ldelta == -128 {
                None
            } else {
                line += i64::from(ldelta);
                u32::try_from(line).ok()
            };
            LineTable::push_bytes(&mut t, start, end, at);
        }
        LineTable::from_byte_ranges(t)
    }

    /// 3.6–3.9's `co_lnotab`: pairs of (bytes advanced, unsigned; lines advanced, signed); the
    /// line changes at each advanced offset and holds to the end of the bytecode, so the last
    /// range is open (its end is the largest offset: the code object's own length bounds it).
    pub fn decode_lnotab(table: &[u8], first_line: u32) -> LineTable {
        let mut t = Vec::new();
        let mut line = i64::from(first_line);
        let mut start: u32 = 0;
        for pair in table.chunks_exact(2) {
            let next = start.saturating_add(u32::from(pair[0]));
            LineTable::push_bytes(&mut t, start, next, u32::try_from(line).ok());
            start = next;
            line += i64::from(pair[1] as i8);
        }
        LineTable::push_bytes(&mut t, start, u32::MAX - 1, u32::try_from(line).ok());
        LineTable::from_byte_ranges(t)
    }

    /// Decodes `table` for a code object whose first line is `first_line`. Decoding stops at
    /// the first malformed entry; what came before stays usable.
    pub fn decode(table: &[u8], first_line: u32) -> LineTable {
        let mut cur = Cursor {
            bytes: table,
            pos: 0,
        };
        let mut line = first_line as i64;
        let mut addr: u32 = 0;
        let mut ranges = Vec::new();
        while let Some(header) = cur.byte() {
            if header & 0x80 == 0 {
                break;
            }
            let kind = (header >> 3) & 0xf;
            let len = (header & 7) as u32 + 1;
            let this_line = match kind {
                15 => None,
                14 => {
                    let delta = match cur.svarint() {
                        Some(d) => d,
                        None => break,
                    };
                    if cur.varint().is_none() || cur.varint().is_none() || cur.varint().is_none() {
                        break;
                    }
                    line += delta;
                    Some(line)
                }
                13 => {
                    match cur.svarint() {
                        Some(d) => line += d,
                        None => break,
                    }
                    Some(line)
                }
                10..=12 => {
                    line += (kind - 10) as i64;
                    if cur.byte().is_none() || cur.byte().is_none() {
                        break;
                    }
                    Some(line)
                }
                _ => {
                    if cur.byte().is_none() {
                        break;
                    }
                    Some(line)
                }
            };
            let line = this_line.and_then(|l| u32::try_from(l).ok());
            // Merge neighbours on the same line: fewer ranges, same answers.
            match ranges.last_mut() {
                Some(LineRange {
                    end, line: last, ..
                }) if *end == addr && *last == line => *end += len,
                _ => ranges.push(LineRange {
                    start: addr,
                    end: addr + len,
                    line,
                }),
            }
            addr += len;
        }
        LineTable { ranges }
    }

    /// Line of the instruction at code unit `addrq`; None when the table says "no location"
    /// or the offset is past the end.
    pub fn line_at(&self, addrq: u32) -> Option<u32> {
        let idx = self.ranges.partition_point(|r| r.end <= addrq);
        let r = self.ranges.get(idx)?;
        if r.start <= addrq {
            r.line
        } else {
            None
        }
    }

    /// Number of code units the table covers.
    pub fn len_units(&self) -> u32 {
        self.ranges.last().map(|r| r.end).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Table of:
    /// ```python
    /// def f(x):        # line 1
    ///     y = x + 1    # line 2
    ///     return y     # line 3
    /// ```
    /// as CPython 3.12 writes it (`f.__code__.co_linetable`).
    #[test]
    fn decodes_kinds() {
        // 0x80|(13<<3)|0 = NO_COLUMNS len1, svarint 0 (line 1: RESUME)
        // 0x80|(11<<3)|2 = ONE_LINE1 len3, cols 8,13 (line 2)
        // 0x80|(10<<3)|1 = ONE_LINE0 len2 (line 2)
        // 0x80|(11<<3)|0 = ONE_LINE1 len1 (line 3)
        // 0x80|(15<<3)|1 = NONE len2
        // 0x80|(14<<3)|0 = LONG len1, delta -2 (svarint 5), end line 0, cols 1, 1 (line 1)
        // 0x80|(0<<3)|0  = SHORT0 len1 (line 1)
        let table = [
            0xe8, 0x00, 0xda, 8, 13, 0xd1, 4, 9, 0xd8, 4, 12, 0xf9, 0xf0, 0x05, 0x00, 0x01, 0x01,
            0x80, 0x12,
        ];
        let t = LineTable::decode(&table, 1);
        let lines: Vec<_> = (0..12).map(|a| t.line_at(a)).collect();
        assert_eq!(
            lines,
            vec![
                Some(1),
                Some(2),
                Some(2),
                Some(2),
                Some(2),
                Some(2),
                Some(3),
                None,
                None,
                Some(1),
                Some(1),
                None
            ]
        );
        assert_eq!(t.len_units(), 11);
    }

    #[test]
    fn long_varints_and_negative_deltas() {
        // NO_COLUMNS with delta +200 (svarint 400 = 0x190: groups 0x10|0x40, 0x06)
        let t = LineTable::decode(&[0xe8, 0x50, 0x06, 0xe8, 0x03], 10);
        assert_eq!(t.line_at(0), Some(210));
        assert_eq!(t.line_at(1), Some(209));
    }

    /// `co_lnotab` of (3.8, `python3.8 -c 'import dis'`-style):
    /// ```python
    /// def f(x):          # line 1
    ///     y = x + 1      # line 2 (bytes 0-7)
    ///                    # line 3 blank
    ///     return y       # line 4 (bytes 8-11)
    /// ```
    /// is `[0, 1, 8, 2]`: at byte 0 one line on, at byte 8 two more.
    #[test]
    fn decodes_lnotab() {
        let t = LineTable::decode_lnotab(&[0, 1, 8, 2], 1);
        let lines: Vec<_> = (0..6).map(|a| t.line_at(a)).collect();
        assert_eq!(
            lines,
            [Some(2), Some(2), Some(2), Some(2), Some(4), Some(4)]
        );
        // A line going back (3.6+ allows negative deltas) and a jump of more than 255 bytes.
        let t = LineTable::decode_lnotab(&[255, 0, 1, 5, 4, 0xfe], 10);
        assert_eq!(t.line_at(0), Some(10));
        assert_eq!(t.line_at(128), Some(15));
        assert_eq!(t.line_at(130), Some(13));
    }

    /// 3.10's `co_linetable`: ranges of `sdelta` bytes at the line moved by `ldelta`.
    #[test]
    fn decodes_line_deltas() {
        // bytes 0-1 at line 1 (+0 → 1), 2-9 at line 2, 10-11 no line, 12-15 at line 3.
        let t = LineTable::decode_line_deltas(&[2, 0, 8, 1, 2, 0x80, 4, 1], 1);
        let lines: Vec<_> = (0..9).map(|a| t.line_at(a)).collect();
        assert_eq!(
            lines,
            [
                Some(1),
                Some(2),
                Some(2),
                Some(2),
                Some(2),
                None,
                Some(3),
                Some(3),
                None
            ]
        );
    }

    #[test]
    fn garbage_does_not_panic() {
        for seed in 0..200u32 {
            let bytes: Vec<u8> = (0..64)
                .map(|i| (seed.wrapping_mul(2654435761).wrapping_add(i * 97) >> 7) as u8)
                .collect();
            let t = LineTable::decode(&bytes, 1);
            let _ = t.line_at(seed);
        }
        assert_eq!(LineTable::decode(&[], 5).line_at(0), None);
        for seed in 0..50u32 {
            let bytes: Vec<u8> = (0..64).map(|i| (seed * 31 + i * 7) as u8).collect();
            let _ = LineTable::decode_lnotab(&bytes, 1).line_at(seed);
            let _ = LineTable::decode_line_deltas(&bytes, 1).line_at(seed);
        }
    }
}
