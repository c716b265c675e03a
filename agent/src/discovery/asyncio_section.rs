//! Where a process keeps `_Py_AsyncioModuleDebugOffsets`: the `.AsyncioDebug` section of the
//! object that holds the `_asyncio` module, the `_asyncio` extension (`_asyncio.cpython-314-….so`,
//! loaded when the program first imports asyncio) or the executable or libpython it is built into
//! (Debian's 3.15). Read the table there with the process's memory; until asyncio is imported there
//! is none, so callers look again later.

use super::{elf, procfs_util, DiscoveryError};

/// The section's name.
const SECTION: &str = ".AsyncioDebug";

/// The address of the `.AsyncioDebug` table in process `pid`; `Ok(None)` when no loaded
/// object has one (asyncio not imported yet, or a version without it). An object that cannot
/// be read is skipped: another may hold the section.
pub fn asyncio_debug_address(pid: u32) -> Result<Option<u64>, DiscoveryError> {
    let maps = procfs_util::read_maps(pid)?;
    let exe = procfs_util::exe_path(pid);
    for (path, entries) in procfs_util::candidate_objects(&maps, exe.as_deref()) {
        match elf::section_address(pid, &path, &entries, SECTION) {
            Ok(Some(addr)) => return Ok(Some(addr)),
            Ok(None) => {}
            Err(e) => tracing::debug!(pid, error = %e, "looking for .AsyncioDebug"),
        }
    }
    Ok(None)
}
