//! One (queue, partition) ring and its groups' cursors. FIFO by sequence number; a group
//! takes redeliveries first, then what it never saw. An item leaves the ring once every
//! group is past it, or when a bound or its age pushes it out.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes an item costs besides its payload (the ring slot, the sequence, the time).
pub const ITEM_OVERHEAD: u64 = 64;
/// Groups one partition keeps cursors for; past it a new group's pop is refused.
pub const MAX_GROUPS: usize = 1_024;

pub struct Item {
    pub seq: u64,
    pub payload: Arc<str>,
    pub at: Instant,
}

impl Item {
    pub fn bytes(&self) -> u64 {
        self.payload.len() as u64 + ITEM_OVERHEAD
    }
}

#[derive(Default)]
struct Lease {
    attempts: u32,
    expires: Option<Instant>,
}

/// A group's view of the ring.
#[derive(Default)]
struct Cursor {
    /// The next sequence this group never received.
    next: u64,
    /// Delivered, not yet acked: seq → attempts so far and lease end.
    leased: BTreeMap<u64, Lease>,
    /// Due again (lease ended, or nacked), with the attempts so far.
    again: BTreeMap<u64, u32>,
}

impl Cursor {
    fn low(&self) -> u64 {
        let mut low = self.next;
        if let Some((s, _)) = self.leased.first_key_value() {
            low = low.min(*s);
        }
        if let Some((s, _)) = self.again.first_key_value() {
            low = low.min(*s);
        }
        low
    }
}

pub struct Delivered {
    pub seq: u64,
    pub payload: Arc<str>,
    pub attempts: u32,
}

/// What leaving the ring cost, by reason.
#[derive(Default, Debug, Clone, Copy, PartialEq)]
pub struct Dropped {
    pub messages: u64,
    pub bytes: u64,
    pub retries: u64,
}

#[derive(Default)]
pub struct Ring {
    pub items: VecDeque<Item>,
    pub bytes: u64,
    next_seq: u64,
    groups: HashMap<String, Cursor>,
}

pub enum Nack {
    Redelivered,
    /// At its retry limit: settled by dropping it.
    Dropped,
    Unknown,
}

impl Ring {
    pub fn push(&mut self, payload: Arc<str>, now: Instant) {
        let item = Item {
            seq: self.next_seq,
            payload,
            at: now,
        };
        self.next_seq += 1;
        self.bytes += item.bytes();
        self.items.push_back(item);
    }

    fn head(&self) -> u64 {
        self.items.front().map_or(self.next_seq, |i| i.seq)
    }

    /// The oldest item out, whatever the groups' cursors (a bound or an age).
    pub fn drop_oldest(&mut self) -> Option<u64> {
        let item = self.items.pop_front()?;
        let b = item.bytes();
        self.bytes -= b;
        Some(b)
    }

    pub fn oldest_at(&self) -> Option<Instant> {
        self.items.front().map(|i| i.at)
    }

    fn get(&self, seq: u64) -> Option<&Item> {
        self_get(&self.items, self.head(), seq)
    }

    /// Ends the leases past their time: each comes back with its attempts, or, at the retry
    /// limit (1 + `retry_limit` deliveries), is dropped for the group.
    fn expire(cursor: &mut Cursor, now: Instant, retry_limit: u32) -> u64 {
        let ended: Vec<u64> = cursor
            .leased
            .iter()
            .filter(|(_, l)| l.expires.is_some_and(|e| e <= now))
            .map(|(s, _)| *s)
            .collect();
        let mut dropped = 0;
        for seq in ended {
            if let Some(l) = cursor.leased.remove(&seq) {
                if l.attempts > retry_limit {
                    dropped += 1;
                } else {
                    cursor.again.insert(seq, l.attempts);
                }
            }
        }
        dropped
    }

    /// Up to `max` messages for `group`; `lease` None commits at delivery. Err when the
    /// partition already keeps [`MAX_GROUPS`] other groups.
    pub fn take(
        &mut self,
        group: &str,
        max: usize,
        lease: Option<Duration>,
        retry_limit: u32,
        now: Instant,
        dropped: &mut Dropped,
    ) -> Result<Vec<Delivered>, ()> {
        if !self.groups.contains_key(group) && self.groups.len() >= MAX_GROUPS {
            return Err(());
        }
        let head = self.head();
        let cursor = self.groups.entry(group.to_string()).or_insert(Cursor {
            next: head,
            ..Default::default()
        });
        dropped.retries += Self::expire(cursor, now, retry_limit);
        let mut out = Vec::new();
        // Redeliveries first, in order; those pushed out of the ring meanwhile are gone.
        while out.len() < max {
            let Some((seq, attempts)) = cursor.again.pop_first() else {
                break;
            };
            let Some(item) = self_get(&self.items, head, seq) else {
                continue;
            };
            out.push(Delivered {
                seq,
                payload: item.payload.clone(),
                attempts: attempts + 1,
            });
        }
        cursor.next = cursor.next.max(head);
        while out.len() < max {
            let Some(item) = self_get(&self.items, head, cursor.next) else {
                break;
            };
            out.push(Delivered {
                seq: item.seq,
                payload: item.payload.clone(),
                attempts: 1,
            });
            cursor.next += 1;
        }
        if let Some(lease) = lease {
            let expires = Some(now + lease);
            for d in &out {
                cursor.leased.insert(
                    d.seq,
                    Lease {
                        attempts: d.attempts,
                        expires,
                    },
                );
            }
        }
        Ok(out)
    }

    pub fn ack(&mut self, group: &str, seq: u64) -> bool {
        self.groups
            .get_mut(group)
            .is_some_and(|c| c.leased.remove(&seq).is_some())
    }

    pub fn nack(&mut self, group: &str, seq: u64, retry_limit: u32) -> Nack {
        let Some(c) = self.groups.get_mut(group) else {
            return Nack::Unknown;
        };
        match c.leased.remove(&seq) {
            None => Nack::Unknown,
            Some(l) if l.attempts > retry_limit => Nack::Dropped,
            Some(l) => {
                c.again.insert(seq, l.attempts);
                Nack::Redelivered
            }
        }
    }

    /// Removes the items every group is past. Without a group nothing is consumed yet.
    pub fn trim(&mut self) -> u64 {
        let Some(low) = self.groups.values().map(Cursor::low).min() else {
            return 0;
        };
        let mut freed = 0;
        while self.items.front().is_some_and(|i| i.seq < low) {
            freed += self.drop_oldest().unwrap_or(0);
        }
        freed
    }

    /// Messages not yet received, leased and due again, for the gauges.
    pub fn group_gauges(&self) -> Vec<(String, u64, usize, usize)> {
        let mut v: Vec<_> = self
            .groups
            .iter()
            .map(|(name, c)| {
                let behind = self.next_seq.saturating_sub(c.next.max(self.head()));
                (name.clone(), behind, c.leased.len(), c.again.len())
            })
            .collect();
        v.sort();
        v
    }

    /// Slots by capacity, each payload's allocation (with its two counts), the cursors.
    pub fn held_bytes(&self) -> usize {
        let slots = self.items.capacity() * std::mem::size_of::<Item>();
        let payloads: usize = self.items.iter().map(|i| i.payload.len() + 16).sum();
        let cursors: usize = self
            .groups
            .iter()
            .map(|(name, c)| name.len() + 64 + 48 * (c.leased.len() + c.again.len()))
            .sum();
        slots + payloads + cursors
    }

    pub fn holds(&self, seq: u64) -> bool {
        self.get(seq).is_some()
    }
}

fn self_get(items: &VecDeque<Item>, head: u64, seq: u64) -> Option<&Item> {
    let at = usize::try_from(seq.checked_sub(head)?).ok()?;
    items.get(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(n: usize) -> Ring {
        let mut r = Ring::default();
        let now = Instant::now();
        for i in 0..n {
            r.push(Arc::from(i.to_string()), now);
        }
        r
    }

    #[test]
    fn groups_fan_out_and_a_group_competes_with_itself() {
        let mut r = ring(3);
        let now = Instant::now();
        let mut d = Dropped::default();
        let a = r.take("a", 2, None, 5, now, &mut d).unwrap();
        let a2 = r.take("a", 2, None, 5, now, &mut d).unwrap();
        let b = r.take("b", 10, None, 5, now, &mut d).unwrap();
        assert_eq!((a.len(), a2.len(), b.len()), (2, 1, 3));
        assert_eq!(r.trim(), 3 * ITEM_OVERHEAD + 3);
        assert!(r.items.is_empty());
    }

    #[test]
    fn an_expired_lease_redelivers_then_drops_at_the_limit() {
        let mut r = ring(1);
        let t0 = Instant::now();
        let lease = Some(Duration::from_secs(1));
        let mut d = Dropped::default();
        let first = r.take("g", 1, lease, 1, t0, &mut d).unwrap();
        assert_eq!(first[0].attempts, 1);
        let t1 = t0 + Duration::from_secs(2);
        let second = r.take("g", 1, lease, 1, t1, &mut d).unwrap();
        assert_eq!(second[0].attempts, 2);
        let t2 = t1 + Duration::from_secs(2);
        assert!(r.take("g", 1, lease, 1, t2, &mut d).unwrap().is_empty());
        assert_eq!(d.retries, 1);
        assert!(r.trim() > 0 && r.items.is_empty());
    }
}
