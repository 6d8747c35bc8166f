//! One (queue, partition) ring and its groups' cursors. FIFO by sequence number; a group
//! takes redeliveries first, then what it never saw. An item leaves the ring once every
//! group is past it, or when a bound or its age pushes it out.
//!
//! The ring prices what it holds ([`Ring::charge`]) so the store can count it against the
//! node's cap: slots by capacity, payloads, cursors with their names, lease and redelivery
//! entries, each at a fixed per-entry cost.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes an item costs besides its payload (the ring slot, the sequence, the time).
pub const ITEM_OVERHEAD: u64 = 64;
/// Groups one partition keeps cursors for; past it a new group's pop is refused.
pub const MAX_GROUPS: usize = 1_024;
/// A ring's fixed cost besides its slots: the map entry, the deque and cursor map headers.
pub const RING_COST: u64 = 256;
/// A cursor's fixed cost besides its group name (held twice: the map and the idle order):
/// the map slot, the two maps' headers, the idle order's slot.
pub const CURSOR_COST: u64 = 192;
/// One lease or redelivery entry (a B-tree slot with its share of the node).
pub const ENTRY_COST: u64 = 64;
/// A ring keeps at least this many slots when it shrinks, so a steady trickle does not
/// reallocate on every message.
const MIN_SLOTS: usize = 16;
pub const SLOT: u64 = std::mem::size_of::<Item>() as u64;
/// The cursor map keeps at least this many slots when it shrinks.
const MIN_CURSOR_SLOTS: usize = 16;

/// What `group`'s cursor costs before any lease or redelivery entry.
pub fn cursor_cost(group: &str) -> u64 {
    CURSOR_COST + 2 * group.len() as u64
}

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
    /// No lease ends after this (settling one does not lower it): an idle cursor is kept
    /// until then without a walk of its leases.
    latest: Option<Instant>,
    /// Its key in the ring's idle order: the last pop, ack or nack of the group here, or,
    /// for one found idle while a lease could still be live, that lease's end less the idle
    /// bound.
    used: Instant,
}

impl Cursor {
    fn new(next: u64, now: Instant) -> Cursor {
        Cursor {
            next,
            leased: BTreeMap::new(),
            again: BTreeMap::new(),
            soonest: None,
            latest: None,
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
}

/// Moves `group`'s cursor to `at` in the idle order.
fn touch(idle: &mut BTreeSet<(Instant, String)>, group: &str, cursor: &mut Cursor, at: Instant) {
    if cursor.used != at {
        idle.remove(&(cursor.used, group.to_string()));
        cursor.used = at;
        idle.insert((at, group.to_string()));
    }
}

/// What one call of [`Ring::forget_idle`] did.
pub struct Forgot {
    /// Cursors forgotten.
    pub gone: usize,
    /// Cursors looked at: those forgotten and those kept for a lease.
    pub looked: u64,
    /// False when it stopped at its budget with idle cursors left.
    pub done: bool,
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
    /// (`used`, group) of every cursor: the sweep forgets the idle ones from its front, so
    /// its work is the cursors it looks at, not every cursor of the ring (review s20
    /// ephemeral M1).
    idle: BTreeSet<(Instant, String)>,
    /// Σ [`cursor_cost`], kept as cursors come and go.
    cursor_bytes: u64,
    /// Σ lease and redelivery entries of every cursor.
    entries: u64,
}

#[cfg(test)]
thread_local! {
    /// Cursors walked or looked at (forget, trim, drop) on this thread, for the bound tests:
    /// kept outside the rings, which the sweep may remove.
    static VISITS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn visited(_n: u64) {
    #[cfg(test)]
    VISITS.set(VISITS.get() + _n);
}

/// The cursor visits counted on this thread since the last call.
#[cfg(test)]
pub fn take_visits() -> u64 {
    VISITS.take()
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
        self.forget_before_head();
        Some(b)
    }

    /// The oldest items out while `drop(at)` holds (a ttl), their leases and redeliveries
    /// with them, the cursors walked once for all of them rather than once an item (review
    /// s21 ephemeral H1: a million expiring messages in a ring of 1 024 groups walked a
    /// billion cursors under the store's lock). Answers (items dropped, bytes freed).
    pub fn drop_oldest_while(&mut self, mut drop: impl FnMut(Instant) -> bool) -> (u64, u64) {
        let (mut n, mut freed) = (0, 0);
        while self.items.front().is_some_and(|i| drop(i.at)) {
            freed += self.pop_front().unwrap_or(0);
            n += 1;
        }
        if n > 0 {
            self.forget_before_head();
        }
        (n, freed)
    }

    /// Drops the leases and redeliveries of items the ring no longer holds.
    fn forget_before_head(&mut self) {
        let head = self.head();
        let mut gone = 0;
        visited(self.groups.len() as u64);
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
            self.cursor_bytes += cursor_cost(group);
            self.idle.insert((now, group.to_string()));
        }
        let head = self.head();
        let cursor = self
            .groups
            .entry(group.to_string())
            .or_insert_with(|| Cursor::new(head, now));
        touch(&mut self.idle, group, cursor, now);
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
                cursor.latest = Some(cursor.latest.map_or(expires, |l| l.max(expires)));
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
        touch(&mut self.idle, group, c, now);
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
        visited(self.groups.len() as u64);
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

    /// Forgets the groups without a pop, ack or nack for `idle` and without a lease that
    /// could be live: their leases and redeliveries go, and they no longer hold items back.
    /// Looks at the idle cursors only, oldest use first, and at most `budget` of them; one
    /// kept for a lease is looked at again when that lease has ended.
    pub fn forget_idle(&mut self, now: Instant, idle: Duration, budget: u64) -> Forgot {
        let mut out = Forgot {
            gone: 0,
            looked: 0,
            done: true,
        };
        let mut kept = Vec::new();
        while let Some((used, _)) = self.idle.first() {
            if now.saturating_duration_since(*used) < idle {
                break;
            }
            if out.looked >= budget {
                out.done = false;
                break;
            }
            let Some((_, name)) = self.idle.pop_first() else {
                break;
            };
            out.looked += 1;
            // Only while it still holds a lease: an ack does not lower `latest`, and a cursor
            // whose leases are all settled is idle now (review s21 ephemeral M2).
            let latest = self
                .groups
                .get(&name)
                .filter(|c| !c.leased.is_empty())
                .and_then(|c| c.latest);
            if let Some(end) = latest.filter(|end| *end > now) {
                kept.push((end.checked_sub(idle).unwrap_or(now), name));
                continue;
            }
            if let Some(c) = self.groups.remove(&name) {
                self.cursor_bytes -= cursor_cost(&name).min(self.cursor_bytes);
                self.entries -= c.entries().min(self.entries);
                out.gone += 1;
            }
        }
        for (at, name) in kept {
            if let Some(c) = self.groups.get_mut(&name) {
                c.used = at;
                self.idle.insert((at, name));
            }
        }
        visited(out.looked);
        let (len, cap) = (self.groups.len(), self.groups.capacity());
        if cap > MIN_CURSOR_SLOTS && len < cap / 4 {
            self.groups.shrink_to((len * 2).max(MIN_CURSOR_SLOTS));
        }
        out
    }

    /// Cursors the ring keeps.
    pub fn cursors(&self) -> u64 {
        self.groups.len() as u64
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
        assert_eq!(r.charge(), RING_COST + spare + cursor_cost("g"));
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
        assert_eq!(
            r.forget_idle(t0 + Duration::from_secs(30), idle, 10).gone,
            0
        );
        assert_eq!(r.forget_idle(t0 + idle, idle, u64::MAX).gone, MAX_GROUPS);
        assert_eq!(r.entries(), 0);
        assert_eq!(
            r.charge(),
            RING_COST + r.bytes + (r.items.capacity() - 1) as u64 * SLOT
        );
        assert!(r
            .take("fresh", 1, None, 1, t0 + idle, &mut d, &mut n)
            .is_ok());
    }

    /// Review s20 ephemeral M1: forgetting looks at the idle cursors only, at most a budget
    /// of them a call, and a cursor whose lease may be live is kept until that lease ends.
    #[test]
    fn forgetting_looks_at_idle_cursors_only_within_a_budget() {
        let mut r = ring(1);
        let t0 = Instant::now();
        let idle = Duration::from_secs(60);
        for g in 0..100 {
            take(&mut r, &format!("old-{g}"), 1, None, t0);
        }
        take(&mut r, "z-leased", 1, Some(600), t0);
        let t1 = t0 + Duration::from_secs(30);
        for g in 0..900 {
            take(&mut r, &format!("busy-{g}"), 1, None, t1);
        }
        let at = t0 + idle;
        take_visits();
        let first = r.forget_idle(at, idle, 40);
        assert_eq!((first.gone, first.looked, first.done), (40, 40, false));
        let rest = r.forget_idle(at, idle, u64::MAX);
        assert!(rest.done);
        assert_eq!((rest.gone, rest.looked), (60, 61), "the leased one is kept");
        assert_eq!(
            take_visits(),
            101,
            "the 900 busy cursors were never looked at"
        );
        let after_lease = t0 + Duration::from_secs(600);
        assert_eq!(r.forget_idle(after_lease, idle, u64::MAX).gone, 1 + 900);
        assert_eq!(r.charge(), RING_COST + r.bytes + spare_slots(&r));
    }

    fn spare_slots(r: &Ring) -> u64 {
        (r.items.capacity() - r.items.len()) as u64 * SLOT
    }

    /// Review s21 ephemeral H1: a thousand items aging out of a ring of 1 024 groups walk the
    /// cursors once, not once an item.
    #[test]
    fn items_aging_out_together_walk_the_cursors_once() {
        let mut r = ring(1_000);
        let now = Instant::now();
        for g in 0..MAX_GROUPS {
            take(&mut r, &format!("g{g}"), 1, Some(86_400), now);
        }
        take_visits();
        let (n, _) = r.drop_oldest_while(|_| true);
        assert_eq!(n, 1_000);
        assert!(take_visits() <= MAX_GROUPS as u64, "cursors walked once");
        assert!(r.items.is_empty());
        assert_eq!(r.entries(), 0, "the leases went with their items");
    }

    /// Review s21 ephemeral M2: a cursor whose lease was acked is forgotten at the idle limit,
    /// not kept until the acked lease would have ended.
    #[test]
    fn an_acked_lease_does_not_keep_its_cursor() {
        let mut r = ring(1);
        let t0 = Instant::now();
        let d = take(&mut r, "g", 1, Some(86_400), t0).remove(0);
        assert!(r.ack("g", d.seq, d.delivery, t0));
        let idle = Duration::from_secs(300);
        assert_eq!(r.forget_idle(t0 + idle, idle, u64::MAX).gone, 1);
    }
}
