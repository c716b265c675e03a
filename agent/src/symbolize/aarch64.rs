//! What the symbolizer decodes of aarch64 code: whether the instruction before an address is a
//! call (a return address follows one), and the direct branches of a function (the eval loop's
//! split-off parts, [`super::eval_loop`]). The x86_64 build decodes with iced-x86 instead.
//!
//! Every A64 instruction is one little-endian 32-bit word, 4-aligned, so one word is decoded
//! per question (Arm ARM, C4.1 "A64 instruction set encoding").

/// The bytes of one instruction.
pub const INSTRUCTION_LEN: usize = 4;

/// Whether the code `before` (the bytes right before a return address) ends with a call: BL,
/// BLR, or a pointer-authenticating BLRAA, BLRAAZ, BLRAB, BLRABZ.
pub fn ends_with_call(before: &[u8]) -> bool {
    let Some(word) = before.last_chunk::<INSTRUCTION_LEN>() else {
        return false;
    };
    let ins = u32::from_le_bytes(*word);
    // BL imm26
    ins & 0xfc00_0000 == 0x9400_0000
        // BLR Xn
        || ins & 0xffff_fc1f == 0xd63f_0000
        // BLRAA/BLRAB Xn, Xm and BLRAAZ/BLRABZ Xn: bit 24 says Z, bit 10 the key
        || ins & 0xfeff_f800 == 0xd63f_0800
}

/// The targets of the direct branches (B, B.cond, CBZ/CBNZ, TBZ/TBNZ) in `code`, which starts
/// at address `start`. BL is a call, not a branch into the function's own parts.
pub fn branch_targets(code: &[u8], start: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for (i, word) in code.chunks_exact(INSTRUCTION_LEN).enumerate() {
        let ins = u32::from_le_bytes(word.try_into().expect("chunks of 4 bytes"));
        let at = start.wrapping_add((i * INSTRUCTION_LEN) as u64);
        let words = if ins & 0xfc00_0000 == 0x1400_0000 {
            // B imm26
            sign_extend(ins & 0x03ff_ffff, 26)
        } else if ins & 0xff00_0010 == 0x5400_0000 || ins & 0x7e00_0000 == 0x3400_0000 {
            // B.cond imm19, CBZ/CBNZ imm19
            sign_extend((ins >> 5) & 0x7_ffff, 19)
        } else if ins & 0x7e00_0000 == 0x3600_0000 {
            // TBZ/TBNZ imm14
            sign_extend((ins >> 5) & 0x3fff, 14)
        } else {
            continue;
        };
        out.push(at.wrapping_add_signed(words * INSTRUCTION_LEN as i64));
    }
    out
}

/// The `bits`-bit two's complement field `value` as an i64.
fn sign_extend(value: u32, bits: u32) -> i64 {
    let shift = 64 - bits;
    (i64::from(value) << shift) >> shift
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn a_return_address_follows_a_call_of_any_form() {
        let mov_x29_sp = 0x9100_03fd;
        for call in [
            0x9400_0010, // bl +0x40
            0x97ff_fff0, // bl -0x40
            0xd63f_0020, // blr x1
            0xd63f_091f, // blraaz x8
            0xd73f_0c41, // blrab x2, x1
        ] {
            assert!(ends_with_call(&code(&[mov_x29_sp, call])), "{call:08x}");
        }
        for not_a_call in [
            0xd65f_03c0, // ret
            0xd61f_0020, // br x1
            0x1400_0010, // b +0x40
            0xd503_201f, // nop
        ] {
            assert!(!ends_with_call(&code(&[not_a_call])), "{not_a_call:08x}");
        }
        assert!(!ends_with_call(&[0x10, 0x00, 0x00]));
    }

    #[test]
    fn direct_branches_forward_and_back() {
        let words = [
            0x1400_0004, // 0x1000: b 0x1010
            0x54ff_ffe1, // 0x1004: b.ne 0x1000
            0xb400_0040, // 0x1008: cbz x0, 0x1010
            0x3700_0040, // 0x100c: tbnz w0, #0, 0x1014
            0x9400_0010, // 0x1010: bl (a call: not listed)
            0xd65f_03c0, // 0x1014: ret
        ];
        assert_eq!(
            branch_targets(&code(&words), 0x1000),
            [0x1010, 0x1000, 0x1010, 0x1014]
        );
    }
}
