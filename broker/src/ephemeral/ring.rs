//! One (queue, partition) ring and its groups' cursors. FIFO by sequence number; a group
//! takes redeliveries first, then what it never saw. An item leaves the ring once every
//! group is past it, or when a bound or its age pushes it out.
//!
//! The ring prices what it holds ([`Ring::charge`]) so the store can count it against the
//! node's cap: slots by capacity, payloads, cursors with their names, lease and redelivery
//! entries, each at a fixed per-entry cost.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes an item costs besides its payload (the ring slot, the sequence, the time).
pub const ITEM_OVERHEAD: u64 = 64;
/// Groups one partition keeps cursors for; past it a new group's pop is refused.
pub const MAX_GROUPS: usize = 1_024;
/// A ring's fixed cost besides its slots: the map entry, the deque and cursor map headers.
pub const RING_COST: u64 = 256;
/// A cursor's fixed cost besides its group name: the map slot, the two maps' headers.
pub const CURSOR_COST: u64 = 192;
/// One lease or redelivery entry (a B-tree slot with its share of the node).
pub const ENTRY_COST: u64 = 64;
/// A ring keeps at least this many slots when it shrinks, so a steady trickle does not
/// reallocate on every message.
const MIN_SLOTS: usize = 16;
pub const SLOT: u64 = std::mem::size_of::<Item>() as u64;

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

struct Lease {
    attempts: u32,
    expires: Option<Instant>,
    /// The delivery it was handed out under: only an ack naming it settles this lease.
    delivery: u64,
}

/// A group's view of the ring.
struct Cursor {
    /// The next sequence this group never received.
    next: u64,
    /// Delivered, not yet acked: seq → attempts so far and lease end.
    leased: BTreeMap<u64, Lease>,
    /// Due again (lease ended, or nacked), with the attempts so far.
    again: BTreeMap<u64, u32>,
    /// No lease ends before this: `expire` skips its walk until then.
    soonest: Option<Instant>,
    /// The last pop, ack or nack of the group here: an idle cursor is forgotten.
    used: Instant,
}

impl Cursor {
    fn new(next: u64, now: Instant) -> Cursor {
        Cursor {
            next,
            leased: BTreeMap::new(),
            again: BTreeMap::new(),
            soonest: None,
            used: now,
        }
    }

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

    fn entries(&self) -> u64 {
        (self.leased.len() + self.again.len()) as u64
    }

    fn live_lease(&self, now: Instant) -> bool {
        self.leased
            .values()
            .any(|l| l.expires.is_some_and(|e| e > now))
    }
}

pub struct Delivered {
    pub seq: u64,
    pub payload: Arc<str>,
    pub attempts: u32,
    pub delivery: u64,
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
    /// Σ cursor (name + [`CURSOR_COST`]), kept as cursors come and go.
    cursor_bytes: u64,
    /// Σ lease and redelivery entries of every cursor.
    entries: u64,
}

pub enum Nack {
    Redelivered,
    /// At its retry limit: settled by dropping it.
    Dropped,
    Unknown,
}

impl Ring {
    /// What the ring holds, as the node's cap counts it (the partition name aside).
    pub fn charge(&self) -> u64 {
        let spare = self.items.capacity().saturating_sub(self.items.len()) as u64;
        RING_COST + self.bytes + spare * SLOT + self.cursor_bytes + self.entries * ENTRY_COST
    }

    /// The most `charge` can grow by when `n` more items arrive (the deque doubles).
    pub fn growth_for(&self, n: usize) -> u64 {
        self.growth_after(0, n)
    }

    /// `growth_for` when `dropped` of the ring's items leave first (a `dropOldest` push).
    pub fn growth_after(&self, dropped: usize, n: usize) -> u64 {
        let (len, cap) = (
            self.items.len().saturating_sub(dropped),
            self.items.capacity(),
        );
        if len + n <= cap {
            return 0;
        }
        let new_cap = (cap * 2).max(len + n).max(4);
        (new_cap - cap) as u64 * SLOT
    }

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

    fn pop_front(&mut self) -> Option<u64> {
        let item = self.items.pop_front()?;
        let b = item.bytes();
        self.bytes -= b;
        Some(b)
    }

    /// The oldest item out, whatever the groups' cursors (a bound or an age): the leases and
    /// redeliveries of it go with it, so they cannot outlive what they name.
    pub fn drop_oldest(&mut self) -> Option<u64> {
        let b = self.pop_front()?;
        let head = self.head();
        let mut gone = 0;
        for c in self.groups.values_mut() {
            while c.leased.first_key_value().is_some_and(|(s, _)| *s < head) {
                c.leased.pop_first();
                gone += 1;
            }
            while c.again.first_key_value().is_some_and(|(s, _)| *s < head) {
                c.again.pop_first();
                gone += 1;
            }
        }
        self.entries -= gone.min(self.entries);
        Some(b)
    }

    /// Gives drained slots back: a ring that once held a million messages does not keep
    /// their slots once it holds a few.
    pub fn shrink(&mut self) {
        let (len, cap) = (self.items.len(), self.items.capacity());
        if cap > MIN_SLOTS && len < cap / 4 {
            self.items.shrink_to((len * 2).max(MIN_SLOTS));
        }
    }

    pub fn oldest_at(&self) -> Option<Instant> {
        self.items.front().map(|i| i.at)
    }

    fn get(&self, seq: u64) -> Option<&Item> {
        self_get(&self.items, self.head(), seq)
    }

    /// Ends the leases past their time: each comes back with its attempts, or, at the retry
    /// limit (1 + `retry_limit` deliveries), is dropped for the group. Returns the drops and
    /// the change in entries.
    fn expire(cursor: &mut Cursor, now: Instant, retry_limit: u32) -> (u64, u64) {
        if cursor.soonest.is_none_or(|s| s > now) {
            return (0, 0);
        }
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
        cursor.soonest = cursor.leased.values().filter_map(|l| l.expires).min();
        (dropped, dropped)
    }

    /// Up to `max` messages for `group`; `lease` None commits at delivery. Each delivery
    /// takes the next number of `deliveries` (unique in the process). Err when the partition
    /// already keeps [`MAX_GROUPS`] other groups.
    #[allow(clippy::too_many_arguments)]
    pub fn take(
        &mut self,
        group: &str,
        max: usize,
        lease: Option<Duration>,
        retry_limit: u32,
        now: Instant,
        dropped: &mut Dropped,
        deliveries: &mut u64,
    ) -> Result<Vec<Delivered>, ()> {
        if !self.groups.contains_key(group) {
            if self.groups.len() >= MAX_GROUPS {
                return Err(());
            }
            self.cursor_bytes += group.len() as u64 + CURSOR_COST;
        }
        let head = self.head();
        let cursor = self
            .groups
            .entry(group.to_string())
            .or_insert_with(|| Cursor::new(head, now));
        cursor.used = now;
        let before = cursor.entries();
        let (retries, _) = Self::expire(cursor, now, retry_limit);
        dropped.retries += retries;
        let mut out = Vec::new();
        // Redeliveries first, in order; those pushed out of the ring meanwhile are gone.
        while out.len() < max {
            let Some((seq, attempts)) = cursor.again.pop_first() else {
                break;
            };
            let Some(item) = self_get(&self.items, head, seq) else {
                continue;
            };
            *deliveries += 1;
            out.push(Delivered {
                seq,
                payload: item.payload.clone(),
                attempts: attempts + 1,
                delivery: *deliveries,
            });
        }
        cursor.next = cursor.next.max(head);
        while out.len() < max {
            let Some(item) = self_get(&self.items, head, cursor.next) else {
                break;
            };
            *deliveries += 1;
            out.push(Delivered {
                seq: item.seq,
                payload: item.payload.clone(),
                attempts: 1,
                delivery: *deliveries,
            });
            cursor.next += 1;
        }
        if let Some(lease) = lease {
            let expires = now + lease;
            for d in &out {
                cursor.leased.insert(
                    d.seq,
                    Lease {
                        attempts: d.attempts,
                        expires: Some(expires),
                        delivery: d.delivery,
                    },
                );
            }
            if !out.is_empty() {
                cursor.soonest = Some(cursor.soonest.map_or(expires, |s| s.min(expires)));
            }
        }
        let after = cursor.entries();
        self.entries = (self.entries + after).saturating_sub(before);
        Ok(out)
    }

    /// Takes the live lease of `seq` that `delivery` handed out, if it is still that one.
    fn settle(&mut self, group: &str, seq: u64, delivery: u64, now: Instant) -> Option<u32> {
        let c = self.groups.get_mut(group)?;
        let l = c.leased.get(&seq)?;
        if l.delivery != delivery || l.expires.is_some_and(|e| e <= now) {
            return None;
        }
        let attempts = l.attempts;
        c.leased.remove(&seq);
        c.used = now;
        self.entries = self.entries.saturating_sub(1);
        Some(attempts)
    }

    /// Whether the lease `delivery` handed out was live and is now consumed.
    pub fn ack(&mut self, group: &str, seq: u64, delivery: u64, now: Instant) -> bool {
        self.settle(group, seq, delivery, now).is_some()
    }

    pub fn nack(
        &mut self,
        group: &str,
        seq: u64,
        delivery: u64,
        retry_limit: u32,
        now: Instant,
    ) -> Nack {
        let Some(attempts) = self.settle(group, seq, delivery, now) else {
            return Nack::Unknown;
        };
        if attempts > retry_limit {
            return Nack::Dropped;
        }
        if let Some(c) = self.groups.get_mut(group) {
            c.again.insert(seq, attempts);
            self.entries += 1;
        }
        Nack::Redelivered
    }

    /// Removes the items every group is past. Without a group nothing is consumed yet.
    pub fn trim(&mut self) -> u64 {
        let Some(low) = self.groups.values().map(Cursor::low).min() else {
            return 0;
        };
        let mut freed = 0;
        while self.items.front().is_some_and(|i| i.seq < low) {
            freed += self.pop_front().unwrap_or(0);
        }
        self.shrink();
        freed
    }

    /// Forgets the groups without a pop, ack or nack for `idle` and without a live lease:
    /// their leases and redeliveries go, and they no longer hold items back. Groups gone.
    pub fn forget_idle(&mut self, now: Instant, idle: Duration) -> usize {
        let before = self.groups.len();
        let (mut names, mut entries) = (0u64, 0u64);
        self.groups.retain(|name, c| {
            let keep = now.saturating_duration_since(c.used) < idle || c.live_lease(now);
            if !keep {
                names += name.len() as u64 + CURSOR_COST;
                entries += c.entries();
            }
            keep
        });
        self.cursor_bytes -= names.min(self.cursor_bytes);
        self.entries -= entries.min(self.entries);
        before - self.groups.len()
    }

    /// Holds nothing a group could still want: no item and no cursor.
    pub fn is_vacant(&self) -> bool {
        self.items.is_empty() && self.groups.is_empty()
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

    /// Whether `group` could take something here at `now`: a redelivery, a lease ended, or a
    /// message it never received (all of them, for a group without a cursor yet).
    pub fn due_for(&self, group: &str, now: Instant) -> bool {
        let Some(c) = self.groups.get(group) else {
            return !self.items.is_empty();
        };
        !c.again.is_empty()
            || c.next.max(self.head()) < self.next_seq
            || (c.soonest.is_some_and(|s| s <= now)
                && c.leased
                    .values()
                    .any(|l| l.expires.is_some_and(|e| e <= now)))
    }

    /// No lease of `group` here ends before this (None: it holds none that ends).
    pub fn soonest(&self, group: &str) -> Option<Instant> {
        self.groups.get(group).and_then(|c| c.soonest)
    }

    pub fn holds(&self, seq: u64) -> bool {
        self.get(seq).is_some()
    }

    #[cfg(test)]
    pub fn entries(&self) -> u64 {
        self.entries
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

    fn take(r: &mut Ring, g: &str, max: usize, lease: Option<u64>, now: Instant) -> Vec<Delivered> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static DELIVERIES: AtomicU64 = AtomicU64::new(0);
        let (mut d, mut n) = (Dropped::default(), DELIVERIES.load(Ordering::Relaxed));
        let lease = lease.map(Duration::from_secs);
        let out = r
            .take(g, max, lease, 1, now, &mut d, &mut n)
            .unwrap_or_default();
        DELIVERIES.fetch_max(n, Ordering::Relaxed);
        out
    }

    #[test]
    fn groups_fan_out_and_a_group_competes_with_itself() {
        let mut r = ring(3);
        let now = Instant::now();
        let a = take(&mut r, "a", 2, None, now);
        let a2 = take(&mut r, "a", 2, None, now);
        let b = take(&mut r, "b", 10, None, now);
        assert_eq!((a.len(), a2.len(), b.len()), (2, 1, 3));
        assert_eq!(r.trim(), 3 * ITEM_OVERHEAD + 3);
        assert!(r.items.is_empty());
    }

    #[test]
    fn an_expired_lease_redelivers_then_drops_at_the_limit() {
        let mut r = ring(1);
        let t0 = Instant::now();
        let lease = Some(Duration::from_secs(1));
        let (mut d, mut n) = (Dropped::default(), 0);
        let first = r.take("g", 1, lease, 1, t0, &mut d, &mut n).unwrap();
        assert_eq!(first[0].attempts, 1);
        let t1 = t0 + Duration::from_secs(2);
        let second = r.take("g", 1, lease, 1, t1, &mut d, &mut n).unwrap();
        assert_eq!(second[0].attempts, 2);
        assert_ne!(first[0].delivery, second[0].delivery);
        let t2 = t1 + Duration::from_secs(2);
        assert!(r
            .take("g", 1, lease, 1, t2, &mut d, &mut n)
            .unwrap()
            .is_empty());
        assert_eq!(d.retries, 1);
        assert!(r.trim() > 0 && r.items.is_empty());
        assert_eq!(r.entries(), 0);
    }

    /// E1: a drained ring gives its slots back, and its charge says what it keeps.
    #[test]
    fn a_drained_ring_shrinks_and_its_charge_counts_capacity() {
        let mut r = ring(100_000);
        let full = r.charge();
        assert!(full >= r.items.capacity() as u64 * SLOT);
        let now = Instant::now();
        while !take(&mut r, "g", 10_000, None, now).is_empty() {
            r.trim();
        }
        assert!(
            r.items.capacity() <= 4 * MIN_SLOTS,
            "{}",
            r.items.capacity()
        );
        let spare = (r.items.capacity() - r.items.len()) as u64 * SLOT;
        assert_eq!(r.charge(), RING_COST + spare + CURSOR_COST + 1);
    }

    /// E3: leases of messages a bound pushes out go with them.
    #[test]
    fn dropping_the_oldest_takes_its_leases_along() {
        let mut r = Ring::default();
        let now = Instant::now();
        for _ in 0..1_000 {
            for i in 0..10 {
                r.push(Arc::from(i.to_string()), now);
            }
            while r.items.len() > 10 {
                r.drop_oldest();
            }
            assert_eq!(take(&mut r, "g", 10, Some(86_400), now).len(), 10);
        }
        assert!(r.entries() <= 10, "{}", r.entries());
        assert!(r.charge() < 10_000, "{}", r.charge());
    }

    /// E5/E6: an ack settles only the lease its delivery made, and only while it is live.
    #[test]
    fn a_late_ack_or_nack_does_not_touch_a_newer_lease() {
        let mut r = ring(1);
        let t0 = Instant::now();
        let a = take(&mut r, "w", 1, Some(1), t0).remove(0);
        let t2 = t0 + Duration::from_secs(2);
        // A's lease ended: its ack is unknown even before anyone pops again.
        assert!(!r.ack("w", a.seq, a.delivery, t2));
        let b = take(&mut r, "w", 1, Some(1), t2).remove(0);
        assert_eq!(b.attempts, 2);
        assert!(matches!(
            r.nack("w", a.seq, a.delivery, 5, t2),
            Nack::Unknown
        ));
        assert!(
            take(&mut r, "w", 1, Some(1), t2).is_empty(),
            "B's lease is live"
        );
        assert!(r.ack("w", b.seq, b.delivery, t2));
    }

    /// E4: an idle group without a live lease is forgotten and stops pinning items.
    #[test]
    fn idle_groups_are_forgotten() {
        let mut r = ring(1);
        let t0 = Instant::now();
        for g in 0..MAX_GROUPS {
            take(&mut r, &format!("tail-{g}"), 1, Some(1), t0);
        }
        let (mut d, mut n) = (Dropped::default(), 0);
        assert!(r.take("fresh", 1, None, 1, t0, &mut d, &mut n).is_err());
        let idle = Duration::from_secs(60);
        assert_eq!(r.forget_idle(t0 + Duration::from_secs(30), idle), 0);
        assert_eq!(r.forget_idle(t0 + idle, idle), MAX_GROUPS);
        assert_eq!(r.entries(), 0);
        assert_eq!(
            r.charge(),
            RING_COST + r.bytes + (r.items.capacity() - 1) as u64 * SLOT
        );
        assert!(r
            .take("fresh", 1, None, 1, t0 + idle, &mut d, &mut n)
            .is_ok());
    }
}
