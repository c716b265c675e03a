//! The directory sink's picture of its directory, kept in memory.
//!
//! The directory is read once, when the sink starts; from then on every write, deletion and bound check
//! goes through this index, so a write costs the same whether the directory holds ten files or a hundred
//! thousand (re-reading it after each write made the agent's CPU grow with the directory). Files are
//! ordered oldest first (modification time, then name), which is the order both bounds delete in.
//! What the index does not see: files other programs add after the start (they are neither counted nor
//! deleted until the next start) and files others delete (found missing when this sink deletes them).

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

/// Where a file sits in the oldest-first order.
type Key = (SystemTime, String);

/// One profile file as the index knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct IndexedFile {
    /// Size in bytes.
    pub len: u64,
    /// Last modification.
    pub modified: SystemTime,
}

/// The profile files of one directory, by age and by name, and their total size.
#[derive(Debug, Default)]
pub(super) struct DirectoryIndex {
    by_age: BTreeMap<Key, u64>,
    modified_by_name: HashMap<String, SystemTime>,
    total_bytes: u64,
}

impl DirectoryIndex {
    /// Records `name`, replacing what was known of a file of the same name.
    pub fn insert(&mut self, name: &str, file: IndexedFile) {
        self.remove(name);
        self.by_age
            .insert((file.modified, name.to_owned()), file.len);
        self.modified_by_name.insert(name.to_owned(), file.modified);
        self.total_bytes = self.total_bytes.saturating_add(file.len);
    }

    /// Forgets `name`; returns what was known of it.
    pub fn remove(&mut self, name: &str) -> Option<IndexedFile> {
        let modified = self.modified_by_name.remove(name)?;
        let len = self.by_age.remove(&(modified, name.to_owned()))?;
        self.total_bytes -= len;
        Some(IndexedFile { len, modified })
    }

    /// Whether `name` is known.
    pub fn contains(&self, name: &str) -> bool {
        self.modified_by_name.contains_key(name)
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.by_age.len()
    }

    /// Total size of the files.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// The files, oldest first.
    pub fn oldest_first(&self) -> impl Iterator<Item = (&str, IndexedFile)> {
        self.by_age.iter().map(|((modified, name), &len)| {
            (
                name.as_str(),
                IndexedFile {
                    len,
                    modified: *modified,
                },
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn at(secs: u64, len: u64) -> IndexedFile {
        IndexedFile {
            len,
            modified: UNIX_EPOCH + Duration::from_secs(secs),
        }
    }

    #[test]
    fn orders_by_age_then_name_and_sums_sizes() {
        let mut index = DirectoryIndex::default();
        index.insert("b", at(20, 5));
        index.insert("a", at(20, 7));
        index.insert("c", at(10, 1));
        let names: Vec<&str> = index.oldest_first().map(|(name, _)| name).collect();
        assert_eq!(names, ["c", "a", "b"]);
        assert_eq!(index.total_bytes(), 13);

        // Rewriting a name moves it and replaces its size.
        index.insert("c", at(30, 100));
        let names: Vec<&str> = index.oldest_first().map(|(name, _)| name).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(index.total_bytes(), 112);

        assert_eq!(index.remove("a"), Some(at(20, 7)));
        assert_eq!(index.remove("a"), None);
        assert!(!index.contains("a"));
        assert_eq!(index.len(), 2);
        assert_eq!(index.total_bytes(), 105);
    }
}
