//! A queue's rings by partition name. Every ring it hands out, one by one or by a walk, is a
//! read, and the bound tests count them here, where no caller can forget to (review s19
//! ephemeral M2: the count was kept by the callers, so a walk that did not call it went
//! unseen). Looking a name up without its ring is not a read.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::ring::Ring;

#[derive(Default)]
pub struct Rings {
    map: BTreeMap<String, Ring>,
    /// Rings handed out since the last `take_reads`.
    #[cfg(test)]
    reads: std::cell::Cell<u64>,
}

impl Rings {
    fn read(&self) {
        #[cfg(test)]
        self.reads.set(self.reads.get() + 1);
    }

    pub fn get(&self, partition: &str) -> Option<&Ring> {
        self.read();
        self.map.get(partition)
    }

    pub fn get_mut(&mut self, partition: &str) -> Option<&mut Ring> {
        self.read();
        self.map.get_mut(partition)
    }

    /// Every ring, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Ring)> {
        self.map.iter().inspect(|_| self.read())
    }

    pub fn contains_key(&self, partition: &str) -> bool {
        self.map.contains_key(partition)
    }

    /// The first ring's name after `last` (None: the first of all).
    pub fn name_after(&self, last: Option<&str>) -> Option<&String> {
        let from = match last {
            Some(r) => Bound::Excluded(r),
            None => Bound::Unbounded,
        };
        self.map
            .range::<str, _>((from, Bound::Unbounded))
            .next()
            .map(|(name, _)| name)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn insert(&mut self, partition: String, ring: Ring) {
        self.map.insert(partition, ring);
    }

    pub fn remove(&mut self, partition: &str) -> Option<Ring> {
        self.read();
        self.map.remove(partition)
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// The reads counted since the last call.
    #[cfg(test)]
    pub fn take_reads(&self) -> u64 {
        self.reads.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review s19 ephemeral M2: a walk counts every ring it hands out, a lookup one.
    #[test]
    fn every_ring_handed_out_is_a_read() {
        let mut r = Rings::default();
        for p in ["a", "b", "c"] {
            r.insert(p.to_string(), Ring::default());
        }
        assert_eq!(r.take_reads(), 0);
        assert_eq!(r.iter().count(), 3);
        assert_eq!(r.take_reads(), 3);
        assert!(r.get("b").is_some() && r.get_mut("z").is_none());
        assert!(r.contains_key("a"));
        assert_eq!(r.name_after(Some("a")).map(String::as_str), Some("b"));
        assert_eq!(r.take_reads(), 2, "names are not reads");
    }
}
