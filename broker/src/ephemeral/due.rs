//! Per group of a queue, the rings where it may have something to take, so a pop without a
//! partition visits those rather than every partition (review s14 R3).
//!
//! The promise: a ring where the group could take something now is in its `rings`, or has an
//! entry in its `ends` at or before now (a lease that ends there). Entries may be stale (the
//! ring has nothing for the group after all): a visit finds that and removes them. So the set
//! is filled by whatever makes a ring due — a push (for every group), a nack (for its group),
//! a forgotten cursor (the group starts over there) — and each ring's soonest lease end is
//! kept in `ends`, moved into `rings` by the first pop after it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::time::Instant;

use super::ring::Ring;

/// One entry's cost besides its ring's name: a B-tree slot with its share of the node.
pub const DUE_COST: u64 = 64;
/// A group's cost besides its name: the map slot, the two sets' headers.
pub const DUE_GROUP_COST: u64 = 128;

#[derive(Default)]
struct GroupDue {
    rings: BTreeSet<String>,
    /// (the group's soonest lease end in the ring, the ring).
    ends: BTreeSet<(Instant, String)>,
}

#[derive(Default)]
pub struct Due {
    groups: HashMap<String, GroupDue>,
    /// What the index holds, as the node's cap counts it.
    bytes: u64,
}

fn entry(ring: &str) -> u64 {
    DUE_COST + ring.len() as u64
}

impl Due {
    /// Whether `group` has its set: a group without one starts from every ring that holds a
    /// message ([`Due::start`]).
    pub fn knows(&self, group: &str) -> bool {
        self.groups.contains_key(group)
    }

    /// Groups with a set: a push adds one entry to each.
    pub fn groups(&self) -> u64 {
        self.groups.len() as u64
    }

    /// Makes `group`'s set, if it has none, from the rings holding a message: a group with
    /// no set has no cursor in the queue, so it may take everything held.
    pub fn start<'a>(&mut self, group: &str, held: impl Iterator<Item = &'a str>) {
        if self.groups.contains_key(group) {
            return;
        }
        let mut g = GroupDue::default();
        let mut bytes = DUE_GROUP_COST + group.len() as u64;
        for ring in held {
            if g.rings.insert(ring.to_string()) {
                bytes += entry(ring);
            }
        }
        self.bytes += bytes;
        self.groups.insert(group.to_string(), g);
    }

    /// `ring` may have something new: for every group (a push, a forgotten cursor), or for
    /// one (a nack).
    pub fn arrived(&mut self, ring: &str, group: Option<&str>) {
        let mut added = 0;
        let mut add = |g: &mut GroupDue| {
            if !g.rings.contains(ring) {
                g.rings.insert(ring.to_string());
                added += entry(ring);
            }
        };
        match group {
            None => self.groups.values_mut().for_each(&mut add),
            Some(name) => self.groups.get_mut(name).into_iter().for_each(add),
        }
        self.bytes += added;
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

    /// How many rings `group`'s set holds (what a pop without a partition visits at most).
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

    /// The sweep's repair, from the rings themselves: sets of groups without a cursor go
    /// (they start again from the heads), entries of rings gone go, and lease ends that are
    /// no longer a cursor's soonest go.
    pub fn sweep(&mut self, rings: &BTreeMap<String, Ring>) {
        let cursors: HashSet<&str> = rings.values().flat_map(Ring::group_names).collect();
        self.groups
            .retain(|name, _| cursors.contains(name.as_str()));
        for (name, g) in self.groups.iter_mut() {
            g.rings.retain(|r| rings.contains_key(r));
            g.ends.retain(|(at, r)| {
                rings
                    .get(r)
                    .is_some_and(|ring| ring.soonest(name) == Some(*at))
            });
        }
        self.bytes = self.recount();
    }

    pub fn clear(&mut self) {
        *self = Due::default();
    }

    /// Whether `group` may have something left to take (a stale entry answers yes).
    pub fn any(&self, group: &str) -> bool {
        self.len(group) > 0
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// `bytes` counted from the entries.
    pub fn recount(&self) -> u64 {
        self.groups
            .iter()
            .map(|(name, g)| {
                DUE_GROUP_COST
                    + name.len() as u64
                    + g.rings.iter().map(|r| entry(r)).sum::<u64>()
                    + g.ends.iter().map(|(_, r)| entry(r)).sum::<u64>()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn entries_come_and_go_and_the_charge_follows_them() {
        let mut d = Due::default();
        d.start("g", ["a", "b"].into_iter());
        d.arrived("c", None);
        d.arrived("a", Some("g"));
        assert_eq!(d.len("g"), 3);
        assert_eq!(d.bytes(), d.recount());
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        d.visited("g", "a", false, None, Some(t1));
        d.visited("g", "b", false, None, None);
        assert_eq!(d.next_after("g", None).as_deref(), Some("c"));
        assert_eq!(d.next_after("g", Some("c")).as_deref(), Some("c"));
        d.ended("g", t0);
        assert_eq!(d.len("g"), 1, "a's lease has not ended");
        d.ended("g", t1);
        assert_eq!(d.next_after("g", Some("c")).as_deref(), Some("a"));
        assert_eq!(d.bytes(), d.recount());
        d.visited("g", "a", false, Some(t1), None);
        d.visited("g", "c", false, None, None);
        assert!(!d.any("g"));
        assert_eq!(d.bytes(), DUE_GROUP_COST + 1);
        d.sweep(&BTreeMap::new());
        assert_eq!((d.bytes(), d.knows("g")), (0, false));
    }
}
