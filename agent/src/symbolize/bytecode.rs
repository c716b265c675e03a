//! Where a frame's bytecode lives: the instruction pointer is an address inside it, and the
//! line table is indexed from its start.

use crate::memory::{MemoryError, ProcessMemory};
use crate::offsets::{BytecodeLayout, CodeObjectOffsets};

/// Most thread-local bytecode copies believed: the index array's size is read from the target.
const MAX_TLBC_COPIES: u64 = 2048;

/// Where the bytecode of the code object at `code` starts for a frame running copy
/// `tlbc_index`: the code object's own copy (`co_code_adaptive`), or on free-threaded 3.14+ the
/// thread-local copy that index selects in `co_tlbc` (index 0, an empty slot or an index past
/// the array is the code object's own). Where the bytecode is an object of its own (3.6–3.10),
/// frames hold an offset into it, not an address, and the base is 0.
pub fn bytecode_base(
    mem: &mut impl ProcessMemory,
    c: &CodeObjectOffsets,
    code: u64,
    tlbc_index: u32,
) -> Result<u64, MemoryError> {
    let own = match c.bytecode {
        BytecodeLayout::Inline {
            co_code_adaptive, ..
        } => code + co_code_adaptive,
        BytecodeLayout::Object { .. } => return Ok(0),
    };
    match c.co_tlbc {
        Some(off) if tlbc_index > 0 => {
            let array = mem.read_u64(code + off)?;
            if array == 0 {
                return Ok(own);
            }
            let size = mem.read_u64(array)?;
            if u64::from(tlbc_index) >= size.min(MAX_TLBC_COPIES) {
                return Ok(own);
            }
            let entry = mem.read_u64(array + 8 + 8 * u64::from(tlbc_index))?;
            Ok(if entry == 0 { own } else { entry })
        }
        _ => Ok(own),
    }
}
