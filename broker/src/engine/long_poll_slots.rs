//! The node's cap on parked long polls, shared by every group's waiters.
//!
//! Each group used to cap its own waiters at `max_long_polls`, so a node with many tenant
//! groups could park that many per group, past the memory share the cap was computed from
//! (docs/memory.md, "connections"). A slot is taken when a pop first parks, travels with it
//! while it is re-planned and parked again, and is given back when the poll is answered or
//! forgotten, whichever way it leaves. So that one tenant cannot hold every slot, a tenant
//! may hold at most its part of the cap (`group_quota`), its durable polls and its ephemeral
//! waits counted together in one count (`try_take_for`; they were counted apart, so a tenant
//! could hold twice its part: review s14 R2); and a refusal at the node's cap asks every
//! group to forget the polls whose clients are gone (`sweep_epoch`), not only the group that
//! refused.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The least quota of a group, however many groups share the cap (bounded by the cap).
const QUOTA_FLOOR: usize = 64;

#[derive(Debug)]
pub struct LongPollSlots {
    held: AtomicUsize,
    max: usize,
    /// Waiter sets (one per running group engine).
    groups: AtomicUsize,
    /// Bumped when the node's cap refused a poll: each group then drops its closed polls.
    sweep_epoch: AtomicU64,
    /// Slots held per tenant (durable and ephemeral together); a tenant at 0 has no row, so
    /// the map holds at most one row per slot held.
    tenants: Mutex<HashMap<Arc<str>, usize>>,
}

/// One parked poll's place (and its tenant's count, when taken for one); given back on drop.
#[derive(Debug)]
pub struct LongPollSlot {
    node: Arc<LongPollSlots>,
    tenant: Option<Arc<str>>,
}

/// Why no slot was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoSlot {
    /// The tenant holds its part of the cap.
    TenantQuota,
    /// The node holds `max` polls.
    NodeCap,
}

impl LongPollSlots {
    pub fn new(max: usize) -> Arc<LongPollSlots> {
        Arc::new(LongPollSlots {
            held: AtomicUsize::new(0),
            max,
            groups: AtomicUsize::new(0),
            sweep_epoch: AtomicU64::new(0),
            tenants: Mutex::new(HashMap::new()),
        })
    }

    fn lock_tenants(&self) -> MutexGuard<'_, HashMap<Arc<str>, usize>> {
        self.tenants.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Slots a tenant holds now, durable and ephemeral.
    pub fn tenant_held(&self, tenant: &str) -> usize {
        self.lock_tenants().get(tenant).copied().unwrap_or(0)
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Polls parked on the node now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// The most polls one group may hold: an equal part of the cap, at least `QUOTA_FLOOR`.
    pub fn group_quota(&self) -> usize {
        let groups = self.groups.load(Ordering::Relaxed).max(1);
        (self.max / groups).max(QUOTA_FLOOR.min(self.max))
    }

    pub fn sweep_epoch(&self) -> u64 {
        self.sweep_epoch.load(Ordering::Relaxed)
    }

    /// Asks every group to forget its polls whose clients are gone.
    pub fn ask_sweep(&self) {
        self.sweep_epoch.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a group's waiters in the quota until the returned guard is dropped.
    pub fn join(self: &Arc<Self>) -> GroupMembership {
        self.groups.fetch_add(1, Ordering::Relaxed);
        GroupMembership(self.clone())
    }

    /// A slot outside any tenant's count, or None when the node's polls are at the cap.
    pub fn try_take(self: &Arc<Self>) -> Option<LongPollSlot> {
        self.take_node().then(|| LongPollSlot {
            node: self.clone(),
            tenant: None,
        })
    }

    /// A slot counted in `tenant`'s part, or why there is none.
    pub fn try_take_for(self: &Arc<Self>, tenant: &Arc<str>) -> Result<LongPollSlot, NoSlot> {
        // The tenant's count is checked and raised under its lock, so two pops of one tenant
        // cannot both pass at its last slot.
        let mut tenants = self.lock_tenants();
        if tenants.get(tenant).copied().unwrap_or(0) >= self.group_quota() {
            return Err(NoSlot::TenantQuota);
        }
        if !self.take_node() {
            return Err(NoSlot::NodeCap);
        }
        *tenants.entry(tenant.clone()).or_insert(0) += 1;
        Ok(LongPollSlot {
            node: self.clone(),
            tenant: Some(tenant.clone()),
        })
    }

    fn take_node(&self) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held < self.max).then_some(held + 1)
            })
            .is_ok()
    }
}

impl Drop for LongPollSlot {
    fn drop(&mut self) {
        if let Some(tenant) = &self.tenant {
            let mut tenants = self.node.lock_tenants();
            if let Some(n) = tenants.get_mut(tenant) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    tenants.remove(tenant);
                }
            }
        }
        self.node.held.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A group's place in the quota's division.
#[derive(Debug)]
pub struct GroupMembership(Arc<LongPollSlots>);

impl GroupMembership {
    pub fn slots(&self) -> &Arc<LongPollSlots> {
        &self.0
    }
}

impl Drop for GroupMembership {
    fn drop(&mut self) {
        self.0.groups.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_shared_and_given_back_on_drop() {
        let node = LongPollSlots::new(2);
        let a = node.try_take();
        let b = node.clone().try_take();
        assert!(a.is_some() && b.is_some());
        assert!(
            node.try_take().is_none(),
            "the cap is the node's, not a group's"
        );
        assert_eq!(node.held(), 2);
        drop(a);
        assert!(node.try_take().is_some());
    }

    #[test]
    fn a_group_quota_is_its_part_of_the_cap_with_a_floor() {
        let node = LongPollSlots::new(1_000);
        assert_eq!(node.group_quota(), 1_000, "no group yet: the whole cap");
        let one = node.join();
        assert_eq!(node.group_quota(), 1_000);
        let more: Vec<_> = (0..3).map(|_| node.join()).collect();
        assert_eq!(node.group_quota(), 250);
        let many: Vec<_> = (0..96).map(|_| node.join()).collect();
        assert_eq!(node.group_quota(), 64, "the floor");
        drop((one, more, many));
        assert_eq!(node.group_quota(), 1_000);
        assert_eq!(
            LongPollSlots::new(10).group_quota(),
            10,
            "floor bounded by the cap"
        );
    }

    #[test]
    fn a_tenant_holds_its_part_across_kinds_and_gives_it_back() {
        let node = LongPollSlots::new(1_000);
        let _groups: Vec<_> = (0..10).map(|_| node.join()).collect();
        assert_eq!(node.group_quota(), 100);
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        // Durable polls and ephemeral waits of one tenant take from one count.
        let held: Vec<_> = (0..100)
            .filter_map(|_| node.try_take_for(&a).ok())
            .collect();
        assert_eq!(held.len(), 100);
        assert_eq!(node.try_take_for(&a).err(), Some(NoSlot::TenantQuota));
        assert!(
            node.try_take_for(&b).is_ok(),
            "another tenant still gets its part"
        );
        assert_eq!(node.tenant_held("a"), 100);
        drop(held);
        assert_eq!(node.tenant_held("a"), 0);
        assert!(
            node.lock_tenants().get("a").is_none(),
            "no row is kept at 0"
        );
        assert!(node.try_take_for(&a).is_ok());
    }

    #[test]
    fn the_node_cap_is_told_apart_from_the_tenant_part() {
        let node = LongPollSlots::new(2);
        let t: Arc<str> = Arc::from("t");
        let _plain = node.try_take();
        let _one = node.try_take_for(&t).ok();
        assert_eq!(node.try_take_for(&t).err(), Some(NoSlot::NodeCap));
        assert_eq!(node.tenant_held("t"), 1, "a refusal takes nothing");
    }
}
