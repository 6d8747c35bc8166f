//! A queue's ring heads in age order: for every ring that holds a message, the instant of its
//! oldest one. `dropOldest` and the ttl take the queue's oldest message from the first entry
//! instead of reading every ring (review s14 R3); the store moves a ring's entry whenever its
//! front changes (push to an empty ring, drop, trim, ttl, reset).

use std::collections::BTreeMap;
use std::time::Instant;

/// One instant's cost besides its names: a B-tree slot with its share of the node.
pub const HEAD_COST: u64 = 64;
/// A name's slot in an instant's list (the `String` header).
const NAME_SLOT: u64 = std::mem::size_of::<String>() as u64;

/// Rings sharing an instant are rare (two pushes within the clock's resolution), so each
/// instant keeps a short list: a lookup needs no copy of the name, only the instant.
#[derive(Default)]
pub struct Heads {
    by_age: BTreeMap<Instant, Vec<String>>,
    /// What the index holds, as the node's cap counts it: slots by capacity and names.
    bytes: u64,
}

fn cost(names: &[String], capacity: usize) -> u64 {
    HEAD_COST + capacity as u64 * NAME_SLOT + names.iter().map(|n| n.len() as u64).sum::<u64>()
}

impl Heads {
    /// The ring `partition`'s oldest message went from `was` to `now` (None: empty).
    pub fn moved(&mut self, partition: &str, was: Option<Instant>, now: Option<Instant>) {
        if was == now {
            return;
        }
        if let Some(at) = was {
            self.remove(partition, at);
        }
        if let Some(at) = now {
            let names = self
                .by_age
                .entry(at)
                .or_insert_with(|| Vec::with_capacity(1));
            // An instant's list is removed once empty: an empty one was just made.
            let before = match names.is_empty() {
                true => 0,
                false => cost(names, names.capacity()),
            };
            names.push(partition.to_string());
            let after = cost(names, names.capacity());
            self.bytes = (self.bytes + after).saturating_sub(before);
        }
    }

    fn remove(&mut self, partition: &str, at: Instant) {
        let Some(names) = self.by_age.get_mut(&at) else {
            return;
        };
        let Some(i) = names.iter().position(|n| n == partition) else {
            return;
        };
        let before = cost(names, names.capacity());
        names.swap_remove(i);
        if names.is_empty() {
            self.by_age.remove(&at);
            self.bytes = self.bytes.saturating_sub(before);
        } else {
            let after = cost(names, names.capacity());
            self.bytes = (self.bytes + after).saturating_sub(before);
        }
    }

    /// What a ring's entry costs when it has an instant of its own.
    pub fn entry_cost(partition: &str) -> u64 {
        HEAD_COST + NAME_SLOT + partition.len() as u64
    }

    /// The queue's oldest message: its instant and its ring.
    pub fn oldest(&self) -> Option<(Instant, &str)> {
        let (at, names) = self.by_age.first_key_value()?;
        names.first().map(|n| (*at, n.as_str()))
    }

    /// The rings with an entry.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_age.values().map(Vec::len).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn clear(&mut self) {
        *self = Heads::default();
    }

    /// `bytes` recounted from the entries.
    #[cfg(test)]
    pub fn recount(&self) -> u64 {
        self.by_age.values().map(|n| cost(n, n.capacity())).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn entries_follow_the_rings_and_the_charge_returns_to_zero() {
        let mut h = Heads::default();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        h.moved("b", None, Some(t1));
        h.moved("a", None, Some(t0));
        h.moved("c", None, Some(t1));
        assert_eq!(h.oldest(), Some((t0, "a")));
        assert_eq!(h.len(), 3);
        assert_eq!(h.bytes(), h.recount());
        h.moved("a", Some(t0), Some(t1 + Duration::from_secs(1)));
        assert_eq!(h.oldest().map(|(at, _)| at), Some(t1));
        h.moved("b", Some(t1), None);
        h.moved("c", Some(t1), None);
        assert_eq!(h.oldest().map(|(_, n)| n), Some("a"));
        assert_eq!(h.bytes(), h.recount());
        h.moved("a", Some(t1 + Duration::from_secs(1)), None);
        assert_eq!((h.len(), h.bytes(), h.oldest()), (0, 0, None));
    }
}
