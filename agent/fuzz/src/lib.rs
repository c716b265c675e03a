//! Helpers shared by the fuzz targets.

use pyagent::memory::{MemoryError, ProcessMemory};
use pyagent::offsets::{builtin_offsets, Offsets, PythonVersion};

/// A target process whose whole memory is the fuzz input, mapped at address 0: pointers the
/// fuzzer writes are small offsets into its own input, so it reaches objects it can shape.
pub struct ImageMemory<'a> {
    /// the bytes at addresses `0..len`
    pub image: &'a [u8],
}

impl ProcessMemory for ImageMemory<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let fault = MemoryError::Fault {
            pid: 0,
            addr,
            len: buf.len(),
        };
        let start = usize::try_from(addr).map_err(|_| fault.clone())?;
        let end = start.checked_add(buf.len()).ok_or(fault.clone())?;
        buf.copy_from_slice(self.image.get(start..end).ok_or(fault)?);
        Ok(())
    }
}

/// One of the built-in layouts (3.11, 3.12), picked by `selector`.
pub fn layout(selector: u8) -> Offsets {
    let minor = if selector & 1 == 0 { 11 } else { 12 };
    builtin_offsets(PythonVersion::new(3, minor, 0)).expect("built-in layouts are valid")
}

/// A little-endian u64 from the first 8 bytes of `b` (zero-padded).
pub fn u64_prefix(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    let n = b.len().min(8);
    w[..n].copy_from_slice(&b[..n]);
    u64::from_le_bytes(w)
}
