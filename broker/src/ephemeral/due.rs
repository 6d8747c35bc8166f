//! What a pop without a partition visits (review s14 R3, review s18 ephemeral M2): per queue
//! one push log, each ring holding a message once, ordered by the stamp of its last push; per
//! group the stamp it has looked up to (`seen`) and a small set of the rings it must look at
//! again (a nack, a lease that ended, a pop that left something there).
//!
//! The promise: a ring where the group could take something now is in the log after its
//! `seen`, or in its `rings`, or has an entry in its `ends` at or before now. Entries may be
//! stale (the ring has nothing for the group after all): a visit finds that and moves on. A
//! push touches one log entry whatever the number of groups; a group new to the queue starts
//! at `seen = 0` and copies nothing. Each group's `ends` keeps its soonest lease end per ring,
//! moved into `rings` by the first pop after it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::time::{Duration, Instant};

/// One entry's cost besides its ring's name: a B-tree slot with its share of the node.
pub const DUE_COST: u64 = 64;
/// A group's cost besides its name (held twice: the map and the idle order): the map slot,
/// `seen`, the two sets' headers, the idle order's slot.
pub const DUE_GROUP_COST: u64 = 192;
/// The stamp map keeps at least this many slots when it shrinks.
const MIN_STAMPS: usize = 16;
/// The groups map keeps at least this many slots when it shrinks.
const MIN_GROUPS: usize = 16;
/// A log entry's cost besides its ring's name, held twice: the B-tree slot and the map slot.
const LOG_COST: u64 = 128;

struct GroupDue {
    /// Every log entry up to this stamp was looked at by a pop of the group.
    seen: u64,
    /// The rings to look at again: nacked, lease ended, left unfinished.
    rings: BTreeSet<String>,
    /// (the group's soonest lease end in the ring, the ring).
    ends: BTreeSet<(Instant, String)>,
    used: Instant,
    /// Whether the group's next pop starts from `rings` rather than the log.
    again_first: bool,
}

#[derive(Default)]
pub struct Due {
    /// stamp → the ring pushed then (its last push).
    log: BTreeMap<u64, String>,
    /// ring → its stamp in `log`.
    stamps: HashMap<String, u64>,
    stamp: u64,
    groups: HashMap<String, GroupDue>,
    /// (last use, group): the sweep forgets the idle groups from its front, without a walk
    /// of every group (review s19 ephemeral M3).
    idle_order: BTreeSet<(Instant, String)>,
    /// What the index holds, as the node's cap counts it.
    bytes: u64,
    /// Index entries a push, nack or forgotten cursor touched, for the bound tests.
    #[cfg(test)]
    pub touched: u64,
}

fn entry(ring: &str) -> u64 {
    DUE_COST + ring.len() as u64
}

/// What a group's state costs before any entry.
pub fn group_cost(group: &str) -> u64 {
    DUE_GROUP_COST + 2 * group.len() as u64
}

impl Due {
    /// What a ring's log entry costs.
    pub fn log_cost(ring: &str) -> u64 {
        LOG_COST + 2 * ring.len() as u64
    }

    /// Whether `group` has its state: a group without one starts at the log's beginning.
    pub fn knows(&self, group: &str) -> bool {
        self.groups.contains_key(group)
    }

    /// `ring` was pushed to (or a group starts over there): its log entry moves to the end.
    pub fn pushed(&mut self, ring: &str) {
        #[cfg(test)]
        {
            self.touched += 1;
        }
        self.stamp += 1;
        match self.stamps.get_mut(ring) {
            Some(at) => {
                self.log.remove(at);
                *at = self.stamp;
                self.log.insert(self.stamp, ring.to_string());
            }
            None => {
                self.stamps.insert(ring.to_string(), self.stamp);
                self.log.insert(self.stamp, ring.to_string());
                self.bytes += Due::log_cost(ring);
            }
        }
    }

    /// `ring` holds no message any more: nobody needs its log entry.
    pub fn emptied(&mut self, ring: &str) {
        if let Some(at) = self.stamps.remove(ring) {
            self.log.remove(&at);
            self.bytes -= Due::log_cost(ring).min(self.bytes);
            // The map keeps its peak capacity, which no entry's cost counts: a queue once
            // pushed to over 10 000 rings gives it back as they empty (review s19 L3).
            let (len, cap) = (self.stamps.len(), self.stamps.capacity());
            if cap > MIN_STAMPS && len < cap / 4 {
                self.stamps.shrink_to((len * 2).max(MIN_STAMPS));
            }
        }
    }

    /// A nack made `ring` due again for `group`. A group without state will read the whole
    /// log, where the ring is (it holds the message).
    pub fn arrived(&mut self, ring: &str, group: &str) {
        #[cfg(test)]
        {
            self.touched += 1;
        }
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        if g.rings.insert(ring.to_string()) {
            self.bytes += entry(ring);
        }
    }

    /// Makes `group`'s state if it has none (nothing copied), and marks it used.
    pub fn start(&mut self, group: &str, now: Instant) {
        match self.groups.get_mut(group) {
            Some(g) => {
                if g.used != now {
                    self.idle_order.remove(&(g.used, group.to_string()));
                    g.used = now;
                    self.idle_order.insert((now, group.to_string()));
                }
            }
            None => {
                self.bytes += group_cost(group);
                self.groups.insert(
                    group.to_string(),
                    GroupDue {
                        seen: 0,
                        rings: BTreeSet::new(),
                        ends: BTreeSet::new(),
                        used: now,
                        again_first: false,
                    },
                );
                self.idle_order.insert((now, group.to_string()));
            }
        }
    }

    /// The first log entry `group` has not looked at; the pop marks it seen.
    pub fn next_logged(&mut self, group: &str) -> Option<String> {
        let g = self.groups.get_mut(group)?;
        let (at, ring) = self
            .log
            .range((Bound::Excluded(g.seen), Bound::Unbounded))
            .next()?;
        g.seen = *at;
        Some(ring.clone())
    }

    /// Whether this pop of `group` starts from its rings to look at again rather than the
    /// log; its next pop starts from the other. Strict priority to the log starved the rings
    /// under steady pushes elsewhere (review s19 ephemeral H1).
    pub fn again_first(&mut self, group: &str) -> bool {
        let Some(g) = self.groups.get_mut(group) else {
            return false;
        };
        g.again_first = !g.again_first;
        !g.again_first
    }

    /// Moves the lease ends of `group` up to `now` into its rings.
    pub fn ended(&mut self, group: &str, now: Instant) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        let mut freed = 0;
        while g.ends.first().is_some_and(|(at, _)| *at <= now) {
            let Some((_, ring)) = g.ends.pop_first() else {
                break;
            };
            if g.rings.contains(&ring) {
                freed += entry(&ring);
            } else {
                g.rings.insert(ring);
            }
        }
        self.bytes -= freed.min(self.bytes);
    }

    /// Whether a lease of `group` has ended by `now` in a ring no pop has looked at since.
    pub fn ended_by(&self, group: &str, now: Instant) -> bool {
        self.groups
            .get(group)
            .and_then(|g| g.ends.first())
            .is_some_and(|(at, _)| *at <= now)
    }

    /// The ring of `group`'s set after `after` in name order, wrapping to the first (the
    /// first with no `after`).
    pub fn next_after(&self, group: &str, after: Option<&str>) -> Option<String> {
        let rings = &self.groups.get(group)?.rings;
        after
            .and_then(|a| {
                rings
                    .range::<str, _>((Bound::Excluded(a), Bound::Unbounded))
                    .next()
            })
            .or_else(|| rings.first())
            .cloned()
    }

    /// How many rings `group`'s set holds.
    pub fn len(&self, group: &str) -> usize {
        self.groups.get(group).map_or(0, |g| g.rings.len())
    }

    /// After `group` took from `ring`: `due` whether it may still take something there,
    /// `was` and `soonest` its soonest lease end there before and after.
    pub fn visited(
        &mut self,
        group: &str,
        ring: &str,
        due: bool,
        was: Option<Instant>,
        soonest: Option<Instant>,
    ) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        let (mut added, mut freed) = (0, 0);
        match due {
            true if !g.rings.contains(ring) => {
                g.rings.insert(ring.to_string());
                added += entry(ring);
            }
            false if g.rings.remove(ring) => freed += entry(ring),
            _ => {}
        }
        if let Some(at) = was {
            if g.ends.remove(&(at, ring.to_string())) {
                freed += entry(ring);
            }
        }
        if let Some(at) = soonest {
            if g.ends.insert((at, ring.to_string())) {
                added += entry(ring);
            }
        }
        self.bytes = (self.bytes + added).saturating_sub(freed);
    }

    /// Forgets the states of groups idle for `idle` (a group without one reads the log from
    /// its beginning, so nothing is lost), oldest use first, so the work is the groups it
    /// looks at, and at most `budget` of them (review s20 ephemeral M2: a million idle states
    /// went in one unit of the sweep). A group `waiting` names (a pop of it is parked on the
    /// queue) is kept: its lease ends would otherwise be found only at that pop's deadline
    /// (review s19 ephemeral L1). Entries of rings gone or lease ends no longer a cursor's
    /// soonest stay until the group's next pop visits them and finds nothing: they are charged
    /// meanwhile. Answers (groups looked at, whether no idle one is left).
    pub fn forget_idle(
        &mut self,
        now: Instant,
        idle: Duration,
        waiting: impl Fn(&str) -> bool,
        budget: u64,
    ) -> (u64, bool) {
        let (mut looked, mut done) = (0, true);
        let mut kept = Vec::new();
        while let Some((used, _)) = self.idle_order.first() {
            if now.saturating_duration_since(*used) < idle {
                break;
            }
            if looked >= budget {
                done = false;
                break;
            }
            let Some((_, name)) = self.idle_order.pop_first() else {
                break;
            };
            looked += 1;
            if waiting(&name) {
                kept.push(name);
                continue;
            }
            if let Some(g) = self.groups.remove(&name) {
                // Dropping its entries is work too: a state of thousands of rings costs what
                // it holds, not one unit (review s21 ephemeral M1).
                let held = g.rings.len().saturating_add(g.ends.len());
                looked += u64::try_from(held).unwrap_or(u64::MAX);
                let entries = g.rings.iter().chain(g.ends.iter().map(|(_, r)| r));
                let freed = group_cost(&name) + entries.map(|r| entry(r)).sum::<u64>();
                self.bytes -= freed.min(self.bytes);
            }
        }
        for name in kept {
            if let Some(g) = self.groups.get_mut(&name) {
                g.used = now;
            }
            self.idle_order.insert((now, name));
        }
        // The map keeps its peak capacity, which no state's cost counts (review s20 M2).
        let (len, cap) = (self.groups.len(), self.groups.capacity());
        if cap > MIN_GROUPS && len < cap / 4 {
            self.groups.shrink_to((len * 2).max(MIN_GROUPS));
        }
        (looked, done)
    }

    /// The slots the groups map keeps, used or not.
    #[cfg(test)]
    pub fn groups_capacity(&self) -> usize {
        self.groups.capacity()
    }

    /// Groups with a state.
    #[cfg(test)]
    pub fn groups_len(&self) -> usize {
        self.groups.len()
    }

    pub fn clear(&mut self) {
        *self = Due::default();
    }

    /// Whether `group` may have something left to take (a stale entry answers yes).
    pub fn any(&self, group: &str) -> bool {
        let Some(g) = self.groups.get(group) else {
            return !self.log.is_empty();
        };
        !g.rings.is_empty()
            || self
                .log
                .last_key_value()
                .is_some_and(|(at, _)| *at > g.seen)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// `bytes` counted from the entries.
    #[cfg(test)]
    pub fn recount(&self) -> u64 {
        let log: u64 = self.log.values().map(|r| Due::log_cost(r)).sum();
        let groups: u64 = self
            .groups
            .iter()
            .map(|(name, g)| {
                group_cost(name)
                    + g.rings.iter().map(|r| entry(r)).sum::<u64>()
                    + g.ends.iter().map(|(_, r)| entry(r)).sum::<u64>()
            })
            .sum();
        log + groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review s19 ephemeral L3: the stamp map gives its slots back as the rings empty.
    #[test]
    fn the_stamp_map_shrinks_as_rings_empty() {
        let mut d = Due::default();
        let names: Vec<String> = (0..10_000).map(|i| format!("p{i}")).collect();
        names.iter().for_each(|n| d.pushed(n));
        assert!(d.stamps.capacity() >= 10_000);
        names[1..].iter().for_each(|n| d.emptied(n));
        assert!(
            d.stamps.capacity() <= 4 * MIN_STAMPS,
            "{}",
            d.stamps.capacity()
        );
        assert_eq!(d.bytes(), d.recount());
    }

    #[test]
    fn entries_come_and_go_and_the_charge_follows_them() {
        let mut d = Due::default();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        d.pushed("a");
        d.pushed("b");
        d.pushed("a");
        d.start("g", t0);
        assert_eq!(d.next_logged("g").as_deref(), Some("b"));
        assert_eq!(
            d.next_logged("g").as_deref(),
            Some("a"),
            "a's last push is later"
        );
        assert_eq!(d.next_logged("g"), None);
        assert!(!d.any("g"));
        d.pushed("c");
        d.arrived("a", "g");
        assert_eq!(d.len("g"), 1);
        assert!(d.any("g"));
        assert_eq!(d.bytes(), d.recount());
        d.visited("g", "a", false, None, Some(t1));
        assert_eq!(d.next_logged("g").as_deref(), Some("c"));
        d.ended("g", t0);
        assert_eq!(d.len("g"), 0, "a's lease has not ended");
        assert!(d.ended_by("g", t1));
        d.ended("g", t1);
        assert_eq!(d.next_after("g", Some("c")).as_deref(), Some("a"));
        assert_eq!(d.bytes(), d.recount());
        d.visited("g", "a", false, Some(t1), None);
        assert!(!d.any("g"));
        d.emptied("a");
        d.emptied("b");
        d.emptied("c");
        assert_eq!(d.bytes(), group_cost("g"));
        let idle = Duration::from_secs(300);
        d.forget_idle(t1 + idle, idle, |g| g == "g", 10);
        assert!(d.knows("g"), "a group with a parked pop is kept");
        d.forget_idle(t1 + idle, idle, |_| false, 10);
        assert!(d.knows("g"), "kept for another idle period");
        d.forget_idle(t1 + 2 * idle, idle, |_| false, 10);
        assert_eq!((d.bytes(), d.knows("g")), (0, false));
    }
}
