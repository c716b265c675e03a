//! Where a process keeps `PyGreenlet_Type`, the type of every greenlet (gevent's greenlets are
//! of subclasses of it): an exported symbol of the greenlet package's extension
//! (`greenlet/_greenlet.cpython-312-x86_64-linux-gnu.so`), loaded when the program first imports
//! greenlet. Until then there is none.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{elf, procfs_util, DiscoveryError};

/// The symbol's name.
const SYMBOL: &str = "PyGreenlet_Type";

/// The address of `PyGreenlet_Type` in process `pid`; `Ok(None)` when no greenlet extension
/// is loaded. An object that cannot be read is skipped.
pub fn greenlet_type_address(pid: u32) -> Result<Option<u64>, DiscoveryError> {
    let mut objects: BTreeMap<PathBuf, Vec<_>> = BTreeMap::new();
    for (path, entry) in procfs_util::read_maps(pid)? {
        let is_greenlet = path
            .file_name()
            .map(|n| n.to_string_lossy())
            .is_some_and(|n| n.starts_with("_greenlet") && n.contains(".so"));
        if is_greenlet {
            objects.entry(path).or_default().push(entry);
        }
    }
    for (path, entries) in objects {
        match elf::dynamic_symbol_address(pid, &path, &entries, SYMBOL) {
            Ok(Some(addr)) => return Ok(Some(addr)),
            Ok(None) => {}
            Err(e) => tracing::debug!(pid, error = %e, "looking for PyGreenlet_Type"),
        }
    }
    Ok(None)
}
