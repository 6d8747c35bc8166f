//! One fetch session (KIP-227): the partitions a consumer fetches, with what it last asked
//! of each and what it was last told, so that an incremental fetch names only the partitions
//! whose position moved and its answer only the partitions with something new.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::mem::size_of;
use std::sync::Arc;

use queenmq_protocol::RequestCtx;

use crate::fetch::FetchPartition;

/// A partition of a session: its topic (shared by the session's partitions of that topic)
/// and its index.
pub type Key = (Arc<str>, i32);

/// Whom a session belongs to: a session id presented by anyone else is unknown to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub tenant: String,
    pub principal: Option<String>,
}

impl Owner {
    pub fn of(ctx: &RequestCtx) -> Self {
        Owner {
            tenant: ctx.tenant.clone(),
            principal: ctx.principal.clone(),
        }
    }

    pub fn bytes(&self) -> usize {
        self.tenant.capacity() + self.principal.as_ref().map_or(0, String::capacity)
    }
}

/// What the consumer was last told of a partition. An incremental answer repeats a
/// partition when one of these moved, or when it carries records or an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Told {
    pub high_watermark: i64,
    pub last_stable: i64,
    pub log_start: i64,
}

/// What one read of a partition found, as far as a session cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub records: bool,
    pub error: bool,
    pub told: Told,
}

impl Seen {
    /// What the consumer knows once this was sent. After an error the high watermark is
    /// remembered as -1 (as Kafka does), so the partition is sent again once it recovers.
    fn told(&self) -> Told {
        if self.error {
            Told {
                high_watermark: -1,
                ..self.told
            }
        } else {
            self.told
        }
    }
}

/// A partition of a session: the position the consumer last asked for and what it was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cached {
    pub offset: i64,
    pub max_bytes: i32,
    pub told: Told,
}

impl Cached {
    /// A partition of a new session: as a full fetch asked it and as its answer told it.
    pub fn answered(asked: &FetchPartition, seen: &Seen) -> Self {
        Cached {
            offset: asked.offset,
            max_bytes: asked.max_bytes,
            told: seen.told(),
        }
    }

    /// Whether an incremental answer must carry the partition (Kafka's
    /// `CachedPartition.maybeUpdateResponseData`).
    pub fn must_respond(&self, seen: &Seen) -> bool {
        seen.records || seen.error || self.told != seen.told()
    }
}

/// Never told anything yet: any first read differs.
const UNTOLD: Told = Told {
    high_watermark: i64::MIN,
    last_stable: i64::MIN,
    log_start: i64::MIN,
};

#[derive(Debug, Default)]
pub struct Session {
    /// The topic names the partitions share (one allocation per topic), with how many
    /// partitions of the session name each.
    names: HashMap<Arc<str>, usize>,
    /// Each partition with its place in answer order (a stamp from `next_order`):
    /// partitions that served records take a new stamp, so that a byte budget spent on the
    /// first partitions does not starve the last ones. Stamps make every change O(1); only
    /// [`Session::snapshot`] sorts, once per fetch.
    parts: HashMap<Key, (u64, Cached)>,
    next_order: u64,
}

/// Kafka's epoch after `epoch`: 1 after `i32::MAX`.
pub fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch.saturating_add(1)
    }
}

impl Session {
    /// A new session of the partitions a full fetch asked, told what its answer said.
    pub fn new(answered: &[(Key, Cached)]) -> Self {
        let mut s = Session {
            parts: HashMap::with_capacity(answered.len()),
            ..Session::default()
        };
        for ((topic, index), cached) in answered {
            s.put(topic, *index, |c| *c = *cached, *cached);
        }
        s
    }

    pub fn len(&self) -> usize {
        self.parts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    fn stamp(&mut self) -> u64 {
        self.next_order = self.next_order.wrapping_add(1);
        self.next_order
    }

    /// Adds the partition as `new`, or applies `change` to it if the session has it.
    fn put(&mut self, topic: &str, index: i32, change: impl FnOnce(&mut Cached), new: Cached) {
        let name = match self.names.get_key_value(topic) {
            Some((name, _)) => name.clone(),
            None => Arc::from(topic),
        };
        let order = self.stamp();
        match self.parts.entry((name.clone(), index)) {
            Entry::Occupied(mut e) => change(&mut e.get_mut().1),
            Entry::Vacant(e) => {
                e.insert((order, new));
                *self.names.entry(name).or_insert(0) += 1;
            }
        }
    }

    fn remove(&mut self, topic: &str, index: i32) {
        let Some((name, count)) = self.names.get_key_value(topic) else {
            return;
        };
        let (name, count) = (name.clone(), *count);
        if self.parts.remove(&(name.clone(), index)).is_none() {
            return;
        }
        if count <= 1 {
            self.names.remove(&name);
        } else {
            self.names.insert(name, count - 1);
        }
    }

    fn has(&self, topic: &str, index: i32) -> bool {
        self.names
            .get_key_value(topic)
            .is_some_and(|(name, _)| self.parts.contains_key(&(name.clone(), index)))
    }

    /// How many partitions the session would hold after [`Session::update`], found without
    /// changing anything: O(listed + forgotten).
    pub fn len_after(
        &self,
        asked: &[(String, Vec<FetchPartition>)],
        forgotten: &[Forgotten],
    ) -> usize {
        let mut added: HashSet<(&str, i32)> = HashSet::new();
        for (topic, parts) in asked {
            for p in parts {
                if !self.has(topic, p.index) {
                    added.insert((topic, p.index));
                }
            }
        }
        let mut removed: HashSet<(&str, i32)> = HashSet::new();
        for (topic, indexes) in forgotten {
            for &index in indexes {
                if added.contains(&(topic.as_str(), index)) || self.has(topic, index) {
                    removed.insert((topic, index));
                }
            }
        }
        (self.len() + added.len()).saturating_sub(removed.len())
    }

    /// An incremental fetch's changes, in Kafka's order: the partitions it lists are added
    /// or take the position it gives, then the forgotten ones leave.
    pub fn update(&mut self, asked: &[(String, Vec<FetchPartition>)], forgotten: &[Forgotten]) {
        for (topic, parts) in asked {
            for p in parts {
                let new = Cached {
                    offset: p.offset,
                    max_bytes: p.max_bytes,
                    told: UNTOLD,
                };
                self.put(
                    topic,
                    p.index,
                    |c| (c.offset, c.max_bytes) = (p.offset, p.max_bytes),
                    new,
                );
            }
        }
        for (topic, indexes) in forgotten {
            for index in indexes {
                self.remove(topic, *index);
            }
        }
    }

    /// The partitions in answer order, as the fetch reads them.
    pub fn snapshot(&self) -> Vec<(Key, Cached)> {
        let mut all: Vec<(u64, Key, Cached)> = self
            .parts
            .iter()
            .map(|(k, (order, c))| (*order, k.clone(), *c))
            .collect();
        all.sort_unstable_by_key(|(order, _, _)| *order);
        all.into_iter().map(|(_, k, c)| (k, c)).collect()
    }

    /// Remembers what an answer told, and moves the partitions that served records to the
    /// end (in the order answered). A partition forgotten meanwhile (another request of the
    /// session) stays gone.
    pub fn settle(&mut self, results: &[(Key, Seen)]) {
        for (key, seen) in results {
            let order = if seen.records {
                Some(self.stamp())
            } else {
                None
            };
            if let Some((place, cached)) = self.parts.get_mut(key) {
                cached.told = seen.told();
                if let Some(order) = order {
                    *place = order;
                }
            }
        }
    }

    /// What the session holds, counted by capacity: its table (entries and a control byte
    /// each, rounded up to a word), the names (Arc header and text).
    pub fn bytes(&self) -> usize {
        let entry = size_of::<Key>() + size_of::<(u64, Cached)>() + size_of::<usize>();
        let name_slot = size_of::<(Arc<str>, usize)>() + size_of::<usize>();
        let names: usize = self
            .names
            .keys()
            .map(|n| n.len() + 2 * size_of::<usize>())
            .sum();
        size_of::<Session>()
            + self.parts.capacity() * entry
            + self.names.capacity() * name_slot
            + names
    }
}

/// A forgotten topic of a fetch request: its name and the partitions that leave the session.
pub type Forgotten = (String, Vec<i32>);

#[cfg(test)]
mod tests {
    use super::*;

    fn told(hw: i64) -> Told {
        Told {
            high_watermark: hw,
            last_stable: hw,
            log_start: 0,
        }
    }

    fn seen(records: bool, error: bool, hw: i64) -> Seen {
        Seen {
            records,
            error,
            told: told(hw),
        }
    }

    fn part(index: i32, offset: i64) -> FetchPartition {
        FetchPartition {
            index,
            offset,
            max_bytes: 100,
        }
    }

    fn keys(s: &Session) -> Vec<(String, i32)> {
        s.snapshot()
            .into_iter()
            .map(|((t, i), _)| (t.to_string(), i))
            .collect()
    }

    #[test]
    fn a_partition_is_repeated_only_when_something_moved() {
        let c = Cached {
            offset: 5,
            max_bytes: 1,
            told: told(5),
        };
        assert!(!c.must_respond(&seen(false, false, 5)));
        assert!(c.must_respond(&seen(true, false, 5)), "records");
        assert!(c.must_respond(&seen(false, false, 6)), "high watermark");
        assert!(c.must_respond(&seen(false, true, 5)), "an error");
        let moved_start = Seen {
            told: Told {
                log_start: 3,
                ..told(5)
            },
            ..seen(false, false, 5)
        };
        assert!(c.must_respond(&moved_start), "log start");
    }

    #[test]
    fn an_error_is_remembered_as_an_unknown_high_watermark() {
        let key: Key = (Arc::from("t"), 0);
        let mut s = Session::new(&[(
            key.clone(),
            Cached {
                offset: 0,
                max_bytes: 1,
                told: told(5),
            },
        )]);
        s.settle(&[(key.clone(), seen(false, true, 5))]);
        let (_, cached) = &s.snapshot()[0];
        assert_eq!(cached.told.high_watermark, -1);
        // Recovered: the same high watermark as before the error is news again.
        assert!(cached.must_respond(&seen(false, false, 5)));
    }

    #[test]
    fn updates_add_and_move_then_forgotten_partitions_leave() {
        let mut s = Session::new(&[]);
        s.update(
            &[
                ("a".into(), vec![part(0, 0), part(1, 0)]),
                ("b".into(), vec![part(0, 0)]),
            ],
            &[],
        );
        assert_eq!(
            keys(&s),
            vec![("a".into(), 0), ("a".into(), 1), ("b".into(), 0)]
        );
        // An update keeps the position in the order and what the consumer was told.
        s.settle(&[((Arc::from("a"), 1), seen(false, false, 9))]);
        s.update(
            &[("a".into(), vec![part(1, 7)])],
            &[("b".into(), vec![0, 5])],
        );
        let snap = s.snapshot();
        assert_eq!(keys(&s), vec![("a".into(), 0), ("a".into(), 1)]);
        assert_eq!((snap[1].1.offset, snap[1].1.told), (7, told(9)));
        assert_eq!(
            s.names.len(),
            1,
            "a topic with no partition left is dropped"
        );
        // Listed and forgotten in one request: forgotten, as Kafka applies them in order.
        s.update(&[("c".into(), vec![part(0, 0)])], &[("c".into(), vec![0])]);
        assert_eq!(s.len(), 2);
        assert_eq!(s.names.len(), 1);
        // A topic never seen is ignored.
        s.update(&[], &[("zzz".into(), vec![0])]);
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn partitions_that_served_records_move_to_the_end() {
        let mut s = Session::new(&[]);
        s.update(
            &[("a".into(), vec![part(0, 0), part(1, 0), part(2, 0)])],
            &[],
        );
        s.settle(&[
            ((Arc::from("a"), 0), seen(true, false, 1)),
            ((Arc::from("a"), 1), seen(false, false, 0)),
        ]);
        assert_eq!(
            keys(&s),
            vec![("a".into(), 1), ("a".into(), 2), ("a".into(), 0)]
        );
    }

    #[test]
    fn bytes_grow_with_partitions_and_names() {
        let mut s = Session::new(&[]);
        let empty = s.bytes();
        s.update(
            &[("x".repeat(200), (0..100).map(|i| part(i, 0)).collect())],
            &[],
        );
        assert!(s.bytes() >= empty + 100 * (size_of::<Key>() + size_of::<Cached>()) + 200);
    }

    #[test]
    fn the_size_after_an_update_is_known_before_it() {
        let mut s = Session::new(&[]);
        s.update(&[("a".into(), vec![part(0, 0), part(1, 0)])], &[]);
        let asked = vec![
            ("a".to_string(), vec![part(1, 0), part(2, 0), part(2, 0)]),
            ("b".to_string(), vec![part(0, 0)]),
        ];
        let forgotten = vec![
            ("a".to_string(), vec![0, 0, 9]),
            ("b".to_string(), vec![0]),
            ("z".to_string(), vec![0]),
        ];
        let before = s.len_after(&asked, &forgotten);
        assert_eq!(s.len(), 2, "nothing changed");
        s.update(&asked, &forgotten);
        assert_eq!((before, s.len()), (2, 2));
    }

    #[test]
    fn forgetting_and_rotating_at_the_cap_touch_each_partition_once() {
        // Stamps, not shifts: rotating every partition keeps their relative order and
        // costs one stamp each (counted, not timed).
        let n = 10_000;
        let mut s = Session::new(&[]);
        s.update(&[("a".into(), (0..n).map(|i| part(i, 0)).collect())], &[]);
        let stamped = s.next_order;
        let served: Vec<(Key, Seen)> = s
            .snapshot()
            .into_iter()
            .map(|(k, _)| (k, seen(true, false, 1)))
            .collect();
        s.settle(&served);
        assert_eq!(s.next_order - stamped, n as u64);
        assert_eq!(keys(&s)[0], ("a".into(), 0));
        s.update(&[], &[("a".into(), (0..n - 1).collect())]);
        assert_eq!(keys(&s), vec![("a".into(), n - 1)]);
    }

    #[test]
    fn epochs_wrap_to_one() {
        assert_eq!(next_epoch(1), 2);
        assert_eq!(next_epoch(i32::MAX), 1);
    }
}
