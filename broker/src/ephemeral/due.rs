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

use super::ring::Ring;

/// One entry's cost besides its ring's name: a B-tree slot with its share of the node.
pub const DUE_COST: u64 = 64;
/// A group's cost besides its name: the map slot, `seen`, the two sets' headers.
pub const DUE_GROUP_COST: u64 = 128;
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
    /// What the index holds, as the node's cap counts it.
    bytes: u64,
    /// Index entries a push, nack or forgotten cursor touched, for the bound tests.
    #[cfg(test)]
    pub touched: u64,
}

fn entry(ring: &str) -> u64 {
    DUE_COST + ring.len() as u64
}

fn group_cost(group: &str) -> u64 {
    DUE_GROUP_COST + group.len() as u64
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
        if !self.groups.contains_key(group) {
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
        }
        if let Some(g) = self.groups.get_mut(group) {
            g.used = now;
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

    /// The sweep's repair: states of groups idle for `idle` go (a group without one reads the
    /// log from its beginning, so nothing is lost), entries of rings gone go, and lease ends
    /// that are no longer a cursor's soonest go.
    pub fn sweep(&mut self, rings: &BTreeMap<String, Ring>, now: Instant, idle: Duration) {
        self.groups
            .retain(|_, g| now.saturating_duration_since(g.used) < idle);
        for (name, g) in self.groups.iter_mut() {
            g.rings.retain(|r| rings.contains_key(r));
            g.ends.retain(|(at, r)| {
                rings
                    .get(r)
                    .is_some_and(|ring| ring.soonest(name) == Some(*at))
            });
        }
        self.log.retain(|_, r| rings.contains_key(r));
        let log = &self.log;
        self.stamps.retain(|r, at| log.get(at) == Some(r));
        self.bytes = self.recount();
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
        d.sweep(
            &BTreeMap::new(),
            t1 + Duration::from_secs(300),
            Duration::from_secs(300),
        );
        assert_eq!((d.bytes(), d.knows("g")), (0, false));
    }
}
