//! The request ids an instance saw last, so that a QoS 1 redelivery of a request it already
//! took (the broker sends again what was not acknowledged before a reconnect) is dropped
//! instead of run twice.
//!
//! An id is kept as its 64-bit SipHash under a key drawn for the instance: no allocation per
//! request and a compact set that stays in cache, where the ids themselves would be two
//! strings each. Two ids share a fingerprint by chance about once in 2^64 pairs (with the set
//! full, one request in about 2^48 would be taken for a redelivery), and no bus client can aim
//! for it without the key.

use foldhash::HashSet;
use std::collections::VecDeque;
use std::hash::{BuildHasher, RandomState};

/// A bounded set of recently seen request ids: the oldest is forgotten first.
pub(crate) struct Dedup {
    key: RandomState,
    seen: HashSet<u64>,
    order: VecDeque<u64>,
    capacity: usize,
}

impl Dedup {
    /// An empty set that remembers the last `capacity` ids.
    pub(crate) fn new(capacity: usize) -> Dedup {
        Dedup {
            key: RandomState::new(),
            seen: HashSet::default(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// True the first time `id` is seen (among the last `capacity`).
    pub(crate) fn insert(&mut self, id: &str) -> bool {
        let fingerprint = self.key.hash_one(id);
        if !self.seen.insert(fingerprint) {
            return false;
        }
        if self.order.len() >= self.capacity
            && let Some(oldest) = self.order.pop_front()
        {
            self.seen.remove(&oldest);
        }
        self.order.push_back(fingerprint);
        true
    }

    /// How many ids it remembers now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_id_is_seen_once() {
        let mut dedup = Dedup::new(4);
        assert!(dedup.insert("a"));
        assert!(!dedup.insert("a"));
        assert!(dedup.insert("b"));
        assert!(!dedup.insert("b"));
        assert!(!dedup.insert("a"));
    }

    #[test]
    fn the_oldest_is_forgotten_past_capacity() {
        let capacity = 1000;
        let mut dedup = Dedup::new(capacity);
        assert!(dedup.insert("a"));
        for i in 0..capacity {
            assert!(dedup.insert(&i.to_string()));
        }
        assert_eq!(dedup.len(), capacity);
        assert!(dedup.insert("a"), "the oldest id was forgotten");
        assert!(
            !dedup.insert(&(capacity - 1).to_string()),
            "the newest is kept"
        );
        assert_eq!(dedup.len(), capacity);
        assert_eq!(dedup.seen.len(), capacity);
    }
}
