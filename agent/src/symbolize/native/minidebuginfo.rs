//! MiniDebugInfo: the `.gnu_debugdata` section of a stripped object (Fedora, RHEL and their
//! derivatives ship libraries this way) holds an xz-compressed ELF file whose `.symtab` names
//! the functions stripping removed, those `.dynsym` does not already name.
//!
//! In: the section's bytes. Out: the embedded file's function symbols, or why not. The section
//! is untrusted input: its decompressed size is bounded ([`MAX_DECOMPRESSED`]), as is the xz
//! decoder's dictionary, so that garbage costs an error, never a large allocation.

use std::io::Read;

use goblin::elf::Elf;

use super::symbols::{functions, Symbol, Table};

/// Decompressed bytes kept at most. Real MiniDebugInfo is a symbol table and its strings: a
/// few hundred KiB for libpython, a few MiB for the largest libraries.
pub(super) const MAX_DECOMPRESSED: usize = 64 << 20;

/// The xz decoder's memory limit, in KiB: a dictionary larger than the output it may produce
/// is of no use, and refusing it before it is allocated keeps garbage cheap.
const MEMORY_LIMIT_KIB: u32 = (MAX_DECOMPRESSED >> 10) as u32 + 1024;

/// Why a `.gnu_debugdata` section gave no symbols.
#[derive(Debug, thiserror::Error)]
pub enum MiniDebugInfoError {
    /// Not a valid xz stream (or its dictionary is over the memory limit).
    #[error("cannot decompress .gnu_debugdata")]
    Xz(#[source] std::io::Error),
    /// The stream decompresses to more than [`MAX_DECOMPRESSED`] bytes.
    #[error(".gnu_debugdata decompresses to more than {MAX_DECOMPRESSED} bytes")]
    TooLarge,
    /// What it decompresses to is not an ELF file.
    #[error("the ELF file in .gnu_debugdata does not parse")]
    Parse(#[source] goblin::error::Error),
}

/// The function symbols of the MiniDebugInfo in `section` (the bytes of `.gnu_debugdata`).
pub(super) fn symbols(section: &[u8]) -> Result<Vec<Symbol>, MiniDebugInfoError> {
    let elf_bytes = decompress(section, MAX_DECOMPRESSED)?;
    let elf = Elf::parse(&elf_bytes).map_err(MiniDebugInfoError::Parse)?;
    Ok(functions(&elf, Table::Static).collect())
}

/// `xz` decompressed, at most `limit` bytes of it.
fn decompress(xz: &[u8], limit: usize) -> Result<Vec<u8>, MiniDebugInfoError> {
    let reader = lzma_rust2::XzReader::new_mem_limit(xz, false, MEMORY_LIMIT_KIB);
    let mut out = Vec::new();
    // One byte over the limit tells a stream that is too large from one that fits exactly.
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(MiniDebugInfoError::Xz)?;
    if out.len() > limit {
        return Err(MiniDebugInfoError::TooLarge);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `printf 'hello\n' | xz -9 --check=crc32`: what gdb's documentation and Fedora's
    /// find-debuginfo make (xz, not lzma; a CRC32 check).
    const HELLO_XZ: &[u8] = &[
        0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00, 0x00, 0x01, 0x69, 0x22, 0xde, 0x36, 0x02, 0x00, 0x21,
        0x01, 0x1c, 0x00, 0x00, 0x00, 0x10, 0xcf, 0x58, 0xcc, 0x01, 0x00, 0x05, 0x68, 0x65, 0x6c,
        0x6c, 0x6f, 0x0a, 0x00, 0x00, 0x00, 0x20, 0x30, 0x3a, 0x36, 0x00, 0x01, 0x1a, 0x06, 0xc5,
        0xea, 0xc8, 0x79, 0x90, 0x42, 0x99, 0x0d, 0x01, 0x00, 0x00, 0x00, 0x00, 0x01, 0x59, 0x5a,
    ];

    #[test]
    fn decompresses_within_the_bound_and_refuses_past_it() {
        assert_eq!(decompress(HELLO_XZ, 6).unwrap(), b"hello\n");
        assert!(matches!(
            decompress(HELLO_XZ, 5),
            Err(MiniDebugInfoError::TooLarge)
        ));
    }

    #[test]
    fn garbage_and_damage_are_errors() {
        assert!(matches!(
            symbols(b"not xz at all"),
            Err(MiniDebugInfoError::Xz(_))
        ));
        assert!(matches!(symbols(&[]), Err(MiniDebugInfoError::Xz(_))));
        // Cut short, and one byte of the compressed data flipped (the check catches it).
        assert!(decompress(&HELLO_XZ[..HELLO_XZ.len() - 10], 1 << 20).is_err());
        let mut flipped = HELLO_XZ.to_vec();
        flipped[28] ^= 0x40; // in "hello"
        assert!(decompress(&flipped, 1 << 20).is_err());
        // A valid stream of something that is not an ELF file.
        assert!(matches!(
            symbols(HELLO_XZ),
            Err(MiniDebugInfoError::Parse(_))
        ));
    }

    #[test]
    fn a_dictionary_over_the_memory_limit_is_refused_before_it_is_allocated() {
        // HELLO_XZ with the LZMA2 dictionary size in its block header (the filter's property
        // byte, 28: 64 MiB, what `xz -9` sets) raised to 36: 1 GiB; the header's CRC32 redone.
        let mut big = HELLO_XZ.to_vec();
        let header = 12..20;
        assert_eq!(big[header.start + 4], 28);
        big[header.start + 4] = 36;
        let crc = crc32fast::hash(&big[header.clone()]);
        big[header.end..header.end + 4].copy_from_slice(&crc.to_le_bytes());
        match decompress(&big, MAX_DECOMPRESSED) {
            Err(MiniDebugInfoError::Xz(e)) => {
                assert_eq!(e.kind(), std::io::ErrorKind::OutOfMemory, "{e}")
            }
            other => panic!("{other:?}"),
        }
        // The same stream with its own 64 MiB dictionary decodes: the limit leaves room for it.
        assert_eq!(decompress(HELLO_XZ, MAX_DECOMPRESSED).unwrap(), b"hello\n");
    }
}
