//! Occupancy of the BPF program's direct-mapped slot tables (`pa_proc_slots`,
//! `pa_thread_slots`, described in `common/include/pyagent.h`).
//!
//! Each key (tgid, tid) falls in slot `key % slots`. A slot holds its one occupant, nothing,
//! or the shared marker when several keys fall in it; the hash map behind stays complete, and
//! the program reads it only for shared slots. [`SlotIndex`] remembers every key per slot and
//! says what a slot must hold after each change; the sampler writes that to the kernel.

use std::collections::HashMap;

use common::SLOT_SHARED;

/// What one slot must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotContent<V> {
    /// No key falls in it.
    Empty,
    /// Exactly one key, with its value.
    One(u32, V),
    /// Several keys: look in the hash map.
    Shared,
}

impl<V: Default> SlotContent<V> {
    /// The slot value to write: `occupied(key, value)` builds one holding `key`; empty is the
    /// zero value, shared holds [`SLOT_SHARED`] with a default value.
    pub fn into_slot<S: Default>(self, occupied: impl FnOnce(u32, V) -> S) -> S {
        match self {
            SlotContent::Empty => S::default(),
            SlotContent::One(key, value) => occupied(key, value),
            SlotContent::Shared => occupied(SLOT_SHARED, V::default()),
        }
    }
}

/// Every key per slot of one table.
#[derive(Debug)]
pub struct SlotIndex<V> {
    slots: u32,
    members: HashMap<u32, Vec<(u32, V)>>,
}

impl<V: Copy> SlotIndex<V> {
    /// An empty table of `slots` slots (a power of two).
    pub fn new(slots: u32) -> Self {
        debug_assert!(slots.is_power_of_two());
        SlotIndex {
            slots,
            members: HashMap::new(),
        }
    }

    /// The slot `key` falls in.
    pub fn slot_of(&self, key: u32) -> u32 {
        key & (self.slots - 1)
    }

    /// The value of `key`, if it is in the table.
    pub fn get(&self, key: u32) -> Option<V> {
        self.members
            .get(&self.slot_of(key))?
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    /// Adds `key` or replaces its value; returns its slot and what the slot must hold now.
    pub fn insert(&mut self, key: u32, value: V) -> (u32, SlotContent<V>) {
        let slot = self.slot_of(key);
        let m = self.members.entry(slot).or_default();
        match m.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => m.push((key, value)),
        }
        (slot, Self::content(m))
    }

    /// Removes `key`; returns its slot and what the slot must hold now, or `None` if it was
    /// not there.
    pub fn remove(&mut self, key: u32) -> Option<(u32, SlotContent<V>)> {
        let slot = self.slot_of(key);
        let m = self.members.get_mut(&slot)?;
        let at = m.iter().position(|(k, _)| *k == key)?;
        m.swap_remove(at);
        let content = Self::content(m);
        if m.is_empty() {
            self.members.remove(&slot);
        }
        Some((slot, content))
    }

    fn content(m: &[(u32, V)]) -> SlotContent<V> {
        match m {
            [] => SlotContent::Empty,
            [(k, v)] => SlotContent::One(*k, *v),
            _ => SlotContent::Shared,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_holds_its_one_key_or_says_shared() {
        let mut t = SlotIndex::new(8);
        assert_eq!(t.insert(3, 'a'), (3, SlotContent::One(3, 'a')));
        assert_eq!((t.get(3), t.get(11)), (Some('a'), None));
        // Same key, new value.
        assert_eq!(t.insert(3, 'b'), (3, SlotContent::One(3, 'b')));
        // 11 falls in slot 3 too.
        assert_eq!(t.insert(11, 'c'), (3, SlotContent::Shared));
        assert_eq!(t.insert(19, 'd'), (3, SlotContent::Shared));
        assert_eq!(
            (t.get(3), t.get(11), t.get(19)),
            (Some('b'), Some('c'), Some('d'))
        );
        assert_eq!(t.remove(3), Some((3, SlotContent::Shared)));
        assert_eq!(t.remove(19), Some((3, SlotContent::One(11, 'c'))));
        assert_eq!(t.remove(19), None);
        assert_eq!(t.remove(11), Some((3, SlotContent::Empty)));
        assert_eq!(t.remove(11), None);
        // Other slots are independent.
        assert_eq!(t.insert(4, 'e'), (4, SlotContent::One(4, 'e')));
        assert_eq!(t.insert(5, 'f'), (5, SlotContent::One(5, 'f')));
    }

    #[test]
    fn slot_values_of_each_content() {
        let make = |key: u32, value: u64| (key, value);
        assert_eq!(SlotContent::Empty.into_slot(make), (0, 0));
        assert_eq!(SlotContent::One(7, 9).into_slot(make), (7, 9));
        assert_eq!(SlotContent::Shared.into_slot(make), (SLOT_SHARED, 0));
    }
}
