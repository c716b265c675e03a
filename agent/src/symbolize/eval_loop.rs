//! Where CPython's eval loop lies in an object: the link-time ranges whose native frames run
//! Python frames.
//!
//! In: the object's function symbols, its `.text` and its unwind tables. Out: the ranges of
//! `_PyEval_EvalFrameDefault` and its split-off parts. With full symbols the parts are named
//! (`.cold`, `.part.N`). Interpreters built with PGO and LTO and then stripped (Debian's 3.14
//! and 3.15) keep only the exported entry in `.dynsym`, a function of about a kilobyte, while
//! the body that runs the bytecode (80 KB) is a partition of it without a symbol, entered
//! directly by its callers, so the entry itself is rarely on a stack. The entry jumps into that
//! partition: each direct jump of the entry that lands inside another FDE (not at its start,
//! which would be a tail call to another function) marks that FDE as a part of the eval loop.

use std::ops::Range;

use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};
#[cfg(target_arch = "x86_64")]
use iced_x86::{Decoder, DecoderOptions, Instruction, OpKind};

use super::native::Section;

/// The unwind sections, to find the FDE that covers an address.
pub(super) struct UnwindTables<'a> {
    pub eh_frame: &'a Section,
    pub eh_frame_hdr: &'a Section,
}

/// `_PyEval_EvalFrameDefault`, and the parts the compiler split off it (`.cold`, `.part.N`).
pub(super) fn is_eval_symbol(name: &str) -> bool {
    name.strip_prefix("_PyEval_EvalFrameDefault")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// The eval loop's ranges: `named` (the ranges of its symbols) and the FDEs their code jumps
/// into, sorted and without duplicates.
pub(super) fn eval_ranges(
    named: Vec<Range<u64>>,
    text: Option<&Section>,
    unwind: Option<UnwindTables<'_>>,
) -> Vec<Range<u64>> {
    let mut ranges = named.clone();
    if let (Some(text), Some(unwind)) = (text, unwind) {
        for r in &named {
            for target in jump_targets(text, r.clone()) {
                if ranges.iter().any(|known| known.contains(&target)) {
                    continue;
                }
                match fde_range(&unwind, target) {
                    Some(fde) if fde.start != target => ranges.push(fde),
                    _ => {}
                }
            }
        }
    }
    ranges.sort_by_key(|r| r.start);
    ranges.dedup();
    ranges
}

/// Targets of the direct jumps (conditional or not) in `range` of `.text` that leave it.
fn jump_targets(text: &Section, range: Range<u64>) -> Vec<u64> {
    let (Some(start), Some(end)) = (
        range.start.checked_sub(text.svma.start),
        range.end.checked_sub(text.svma.start),
    ) else {
        return Vec::new();
    };
    let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else {
        return Vec::new();
    };
    let Some(code) = text.bytes.get(start..end) else {
        return Vec::new();
    };
    let mut out = direct_jumps(code, range.start);
    out.retain(|target| !range.contains(target));
    out
}

/// The targets of the direct jumps, conditional or not, in `code` at address `start`.
#[cfg(target_arch = "x86_64")]
fn direct_jumps(code: &[u8], start: u64) -> Vec<u64> {
    let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    let mut out = Vec::new();
    while decoder.can_decode() {
        decoder.decode_out(&mut ins);
        let jump = ins.is_jmp_short_or_near() || ins.is_jcc_short_or_near();
        if jump && ins.op0_kind() == OpKind::NearBranch64 {
            out.push(ins.near_branch_target());
        }
    }
    out
}

/// The targets of the direct branches, conditional or not, in `code` at address `start`.
#[cfg(target_arch = "aarch64")]
fn direct_jumps(code: &[u8], start: u64) -> Vec<u64> {
    super::aarch64::branch_targets(code, start)
}

/// The address range of the FDE covering `svma`: the function (or the part of one the compiler
/// split off) that holds it.
pub(super) fn fde_range(t: &UnwindTables<'_>, svma: u64) -> Option<Range<u64>> {
    let bases = BaseAddresses::default()
        .set_eh_frame_hdr(t.eh_frame_hdr.svma.start)
        .set_eh_frame(t.eh_frame.svma.start);
    let hdr = EhFrameHdr::new(&t.eh_frame_hdr.bytes, LittleEndian)
        .parse(&bases, 8)
        .ok()?;
    let eh_frame = EhFrame::new(&t.eh_frame.bytes, LittleEndian);
    let fde = hdr
        .table()?
        .fde_for_address(&eh_frame, &bases, svma, EhFrame::cie_from_offset)
        .ok()?;
    let start = fde.initial_address();
    Some(start..start.checked_add(fde.len())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eval_loop_symbols_include_split_parts_only() {
        assert!(is_eval_symbol("_PyEval_EvalFrameDefault"));
        assert!(is_eval_symbol("_PyEval_EvalFrameDefault.cold"));
        assert!(is_eval_symbol("_PyEval_EvalFrameDefault.cold.12"));
        assert!(!is_eval_symbol("_PyEval_EvalFrameDefaultX"));
        assert!(!is_eval_symbol("_PyEval_EvalFrame"));
    }
}
