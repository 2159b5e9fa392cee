//! The memory store's tasks by id: the entries in a slab, found through a small index of
//! their slots hashed by id.
//!
//! A store of 100,000 tasks is far from any cache, so what a lookup touches decides its
//! cost. A map of ids to entries keeps each entry in its bucket beside a `String` key: a
//! lookup reads the control bytes, the bucket and the key's heap, and growing or cleaning
//! the table (a table that inserts and removes all day fills with tombstones and is rehashed
//! in place) moves every entry and hashes every key again. Here the index holds, a bucket
//! each, a slot number and a 32-bit hash of the id (the index's own hash is made of it): a
//! probe compares that hash in the index and reads the entry's slot only on a match, and a
//! rehash moves sixteen bytes a bucket and reads nothing else; an entry found by its slot
//! (the store's eviction queue holds slots) costs no hashing and no comparing at all. Slots
//! freed are reused first, while they are still in the cache.

use foldhash::fast::RandomState;
use hashbrown::HashTable;
use slab::Slab;
use std::hash::BuildHasher;

/// An entry's place in a [`TaskTable`]: stable while the entry stays, reused after it goes.
pub(super) type SlotKey = usize;

/// One bucket of the index: the slot and its id's hash.
#[derive(Clone, Copy)]
struct Bucket {
    slot: SlotKey,
    hash: u32,
}

impl Bucket {
    /// The index's hash of the bucket: made of the id's 32 bits, which the table's probe
    /// reads from both ends (its position from the low bits, its tag from the top seven).
    fn spread(hash: u32) -> u64 {
        (u64::from(hash) << 32) | u64::from(hash)
    }
}

struct Held<E> {
    hash: u32,
    id: Box<str>,
    value: E,
}

/// Entries by task id (see the module docs).
pub(super) struct TaskTable<E> {
    index: HashTable<Bucket>,
    slots: Slab<Held<E>>,
    hasher: RandomState,
}

impl<E> Default for TaskTable<E> {
    fn default() -> Self {
        TaskTable {
            index: HashTable::new(),
            slots: Slab::new(),
            hasher: RandomState::default(),
        }
    }
}

impl<E> TaskTable<E> {
    /// How many entries it holds.
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    fn hash(&self, id: &str) -> u32 {
        // Folded, not cut: both halves of the hash count.
        let hash = self.hasher.hash_one(id);
        (hash ^ (hash >> 32)) as u32
    }

    /// The slot of `id`'s entry.
    pub(super) fn slot_of(&self, id: &str) -> Option<SlotKey> {
        let hash = self.hash(id);
        let slots = &self.slots;
        self.index
            .find(Bucket::spread(hash), |b| {
                b.hash == hash && *slots[b.slot].id == *id
            })
            .map(|b| b.slot)
    }

    /// The entry of `id`.
    pub(super) fn get(&self, id: &str) -> Option<&E> {
        self.slot_of(id).map(|slot| &self.slots[slot].value)
    }

    /// The entry of `id` and its slot, to change.
    pub(super) fn get_mut_with_slot(&mut self, id: &str) -> Option<(SlotKey, &mut E)> {
        self.slot_of(id)
            .map(|slot| (slot, &mut self.slots[slot].value))
    }

    /// The entry in `slot`.
    pub(super) fn at(&self, slot: SlotKey) -> Option<&E> {
        self.slots.get(slot).map(|held| &held.value)
    }

    /// The entry in `slot`, to change.
    pub(super) fn at_mut(&mut self, slot: SlotKey) -> Option<&mut E> {
        self.slots.get_mut(slot).map(|held| &mut held.value)
    }

    /// Adds the entry of `id`, which the table must not hold yet (see [`slot_of`](Self::slot_of)),
    /// and returns its slot.
    pub(super) fn insert_new(&mut self, id: Box<str>, value: E) -> SlotKey {
        debug_assert!(self.slot_of(&id).is_none(), "{id} is in the table already");
        let hash = self.hash(&id);
        let slot = self.slots.insert(Held { hash, id, value });
        self.index
            .insert_unique(Bucket::spread(hash), Bucket { slot, hash }, |b| {
                Bucket::spread(b.hash)
            });
        slot
    }

    /// Takes out the entry of `id`, with its id.
    pub(super) fn remove(&mut self, id: &str) -> Option<(Box<str>, E)> {
        let slot = self.slot_of(id)?;
        self.remove_at(slot)
    }

    /// Takes out the entry in `slot`, with its id.
    pub(super) fn remove_at(&mut self, slot: SlotKey) -> Option<(Box<str>, E)> {
        let hash = self.slots.get(slot)?.hash;
        if let Ok(bucket) = self
            .index
            .find_entry(Bucket::spread(hash), |b| b.slot == slot)
        {
            bucket.remove();
        }
        let held = self.slots.remove(slot);
        Some((held.id, held.value))
    }

    /// Every id and its entry, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, &E)> {
        self.slots.iter().map(|(_, held)| (&*held.id, &held.value))
    }

    /// Every entry, in no particular order.
    pub(super) fn values(&self) -> impl Iterator<Item = &E> {
        self.slots.iter().map(|(_, held)| &held.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_changes_and_removes_entries_by_id_and_by_slot() {
        let mut table = TaskTable::default();
        let a = table.insert_new("a".into(), 1);
        let b = table.insert_new("b".into(), 2);
        assert_eq!(table.len(), 2);
        assert_eq!(table.get("a"), Some(&1));
        assert_eq!(table.slot_of("b"), Some(b));
        assert_eq!(table.get("c"), None);
        *table.get_mut_with_slot("b").unwrap().1 = 20;
        assert_eq!(table.at(b), Some(&20));
        assert_eq!(table.remove("a"), Some(("a".into(), 1)));
        assert_eq!(table.get("a"), None);
        assert_eq!(table.at(a), None);
        assert_eq!(table.remove_at(a), None, "a slot emptied stays empty");
        // The freed slot is reused, and the stale slot number now names the new entry: the
        // store's queue tells them apart by its own stamps.
        let c = table.insert_new("c".into(), 3);
        assert_eq!(c, a);
        assert_eq!(table.remove_at(b), Some(("b".into(), 20)));
        let ids: Vec<&str> = table.iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["c"]);
    }

    #[test]
    fn thousands_of_inserts_and_removes_keep_every_entry_findable() {
        // Churn as the store has it: a bounded population, the oldest leaving as new ones
        // come, long enough for the index to fill with tombstones and be rehashed.
        let mut table = TaskTable::default();
        let mut live = std::collections::VecDeque::new();
        for n in 0..50_000u32 {
            let id = format!("task-{n}");
            let slot = table.insert_new(id.as_str().into(), n);
            live.push_back((id, slot, n));
            if live.len() > 1_000 {
                let (id, slot, n) = live.pop_front().unwrap();
                assert_eq!(table.remove_at(slot), Some((id.as_str().into(), n)));
            }
        }
        assert_eq!(table.len(), 1_000);
        for (id, slot, n) in &live {
            assert_eq!(table.get(id), Some(n));
            assert_eq!(table.slot_of(id), Some(*slot));
        }
        assert_eq!(table.get("task-0"), None);
    }
}
