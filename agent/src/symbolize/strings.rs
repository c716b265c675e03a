//! Reads `str` and `bytes` objects out of a target.

use crate::memory::{MemoryError, ProcessMemory, StructBytes};
use crate::offsets::Offsets;

/// Longest name or file name we read, in code points; longer ones are cut.
pub const MAX_STRING_CHARS: u64 = 4096;
/// Longest `bytes` (line tables) we read.
pub const MAX_BYTES_LEN: u64 = 1 << 20;

/// Why an object could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The read itself failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The header makes no sense (kind, length): a torn read or not a str.
    #[error("malformed object at {addr:#x}")]
    Malformed {
        /// remote address
        addr: u64,
    },
}

/// Reads a `str` object at `addr` (compact ASCII, compact 1/2/4-byte kinds, or legacy).
pub fn read_str(
    mem: &mut impl ProcessMemory,
    o: &Offsets,
    addr: u64,
) -> Result<String, ObjectError> {
    let u = &o.unicode_object;
    let header_len = u
        .compactunicodeobject_size
        .max(u.state + 4)
        .max(u.length + 8)
        + 8;
    let mut header = [0u8; 128];
    let header = &mut header[..header_len.min(128) as usize];
    mem.read(addr, header)?;
    let length = header.u64_at(u.length);
    let state = header.u32_at(u.state);
    let bits = &u.state_bits;
    let kind = (state >> bits.kind_shift) & 7;
    let compact = state >> bits.compact_bit & 1 == 1;
    let ascii = state >> bits.ascii_bit & 1 == 1;
    if !matches!(kind, 1 | 2 | 4) || length > (1 << 30) {
        return Err(ObjectError::Malformed { addr });
    }
    let chars = length.min(MAX_STRING_CHARS);
    let data = match (compact, ascii) {
        (true, true) => field_addr(addr, u.asciiobject_size)?,
        (true, false) => field_addr(addr, u.compactunicodeobject_size)?,
        // Legacy (non-compact) strings keep a data pointer right after the compact header.
        (false, _) => header.u64_at(u.compactunicodeobject_size),
    };
    let raw = mem.read_vec(data, (chars * kind as u64) as usize)?;
    Ok(match kind {
        1 => raw.iter().map(|&b| b as char).collect(),
        2 => raw
            .chunks_exact(2)
            .map(|c| char::from_u32(u16::from_le_bytes([c[0], c[1]]) as u32).unwrap_or('\u{fffd}'))
            .collect(),
        _ => raw
            .chunks_exact(4)
            .map(|c| {
                char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).unwrap_or('\u{fffd}')
            })
            .collect(),
    })
}

/// Reads the contents of a `bytes` object at `addr`.
pub fn read_bytes(
    mem: &mut impl ProcessMemory,
    o: &Offsets,
    addr: u64,
) -> Result<Vec<u8>, ObjectError> {
    let len = read_bytes_len(mem, o, addr)?;
    Ok(mem.read_vec(field_addr(addr, o.bytes_object.ob_sval)?, len as usize)?)
}

/// The length of the `bytes` object at `addr`, without its contents.
pub fn read_bytes_len(
    mem: &mut impl ProcessMemory,
    o: &Offsets,
    addr: u64,
) -> Result<u64, ObjectError> {
    let len = mem.read_u64(field_addr(addr, o.bytes_object.ob_size)?)?;
    if len > MAX_BYTES_LEN {
        return Err(ObjectError::Malformed { addr });
    }
    Ok(len)
}

/// Address of the field at `offset` in the object at `addr`. The address comes from the target,
/// so one that wraps past the end of the address space is a malformed object, not a panic.
fn field_addr(addr: u64, offset: u64) -> Result<u64, ObjectError> {
    addr.checked_add(offset)
        .ok_or(ObjectError::Malformed { addr })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::FakeMemory;
    use crate::offsets::{builtin_offsets, PythonVersion};

    fn put(mem: &mut FakeMemory, at: u64, bytes: &[u8]) {
        let o = (at - mem.base) as usize;
        mem.bytes[o..o + bytes.len()].copy_from_slice(bytes);
    }

    #[test]
    fn reads_every_kind() {
        let o = builtin_offsets(PythonVersion::new(3, 12, 1)).expect("table");
        let mut mem = FakeMemory {
            base: 0x1000,
            bytes: vec![0; 4096],
        };
        // compact ASCII "abc": state kind=1, compact, ascii
        put(&mut mem, 0x1000 + 16, &3u64.to_le_bytes());
        put(
            &mut mem,
            0x1000 + 32,
            &((1u32 << 2) | (1 << 5) | (1 << 6)).to_le_bytes(),
        );
        put(&mut mem, 0x1000 + 40, b"abc");
        assert_eq!(read_str(&mut mem, &o, 0x1000).expect("str"), "abc");
        // compact UCS-2 "é€"
        put(&mut mem, 0x1100 + 16, &2u64.to_le_bytes());
        put(
            &mut mem,
            0x1100 + 32,
            &((2u32 << 2) | (1 << 5)).to_le_bytes(),
        );
        put(&mut mem, 0x1100 + 56, &[0xe9, 0x00, 0xac, 0x20]);
        assert_eq!(read_str(&mut mem, &o, 0x1100).expect("str"), "é€");
        // garbage kind
        put(&mut mem, 0x1200 + 32, &(3u32 << 2).to_le_bytes());
        assert!(read_str(&mut mem, &o, 0x1200).is_err());
    }

    /// Fuzz crash: a `bytes` pointer near the top of the address space overflowed when the
    /// size field's offset was added to it.
    #[test]
    fn object_at_the_top_of_the_address_space_is_malformed() {
        let o = builtin_offsets(PythonVersion::new(3, 12, 1)).expect("table");
        let mut mem = FakeMemory {
            base: 0x1000,
            bytes: vec![0; 64],
        };
        assert!(matches!(
            read_bytes(&mut mem, &o, u64::MAX - 7),
            Err(ObjectError::Malformed { .. })
        ));
    }
}
