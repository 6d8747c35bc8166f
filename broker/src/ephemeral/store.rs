//! The tenants' ephemeral queues behind one lock: every call is a few ring operations, never
//! I/O, so one mutex keeps the byte budget and the rings consistent without ordering rules.
//!
//! The node's cap counts what the store holds, not only the payloads: each ring prices its
//! slots by capacity, its cursors, leases and redeliveries ([`Ring::charge`]); each queue adds
//! its name and a fixed cost, and its indexes (ring heads) what they hold. A queue keeps the
//! sum of its rings (`rings_charged`), the tenant and the node the sums of their queues'
//! [`Queue::charge`], each moved by what a call changed: nothing recounts them (a recount
//! walked every ring of the node under the lock, review s19 ephemeral M3).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use queenmq_native_api::ephemeral_door::{
    AckOutcome, AckStatus, EphemeralDoor, EphemeralMessage, EphemeralRefusal, PopAsk, WaitSlot,
};
use queenmq_protocol::{EphemeralOptions, DEFAULT_PARTITION, QUEUE_MODE_GROUP};
use serde_json::{json, Value};

use crate::engine::{LongPollSlots, NoSlot};

use super::due::{group_cost, Due, DUE_COST};
use super::gates::Gates;
use super::heads::Heads;
use super::ring::{
    cursor_cost, Delivered, Dropped, Nack, Ring, ENTRY_COST, ITEM_OVERHEAD, MAX_GROUPS, SLOT,
};
use super::rings::Rings;
use sweep::SweepAt;
pub(super) use sweep::SWEEP_BUDGET;

/// Partitions one queue keeps at most: each is a ring with its own cursors.
pub const MAX_PARTITIONS: usize = 10_000;
/// Queues one tenant keeps at most, declared and implicit.
pub const MAX_QUEUES: usize = 10_000;
/// The next queue's creation number.
static BORN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
/// A queue's fixed cost besides its name and rings: the map entry, options, the wake gate.
const QUEUE_COST: u64 = 256;

#[derive(Debug, Clone, Copy)]
pub struct StoreLimits {
    pub enabled: bool,
    /// Bytes every tenant's queues hold at most together (pushes stop there; consumers'
    /// cursors and leases may take a quarter more, so a full node can still be drained).
    pub max_bytes: u64,
    /// Bytes one tenant's queues hold at most: its share of `max_bytes`.
    pub tenant_max_bytes: u64,
    pub implicit_idle: Duration,
}

pub struct Store {
    limits: StoreLimits,
    /// Told what the rings hold (capacities), as the `ephemeral` pool.
    memory: Option<Arc<crate::memory::Memory>>,
    incarnation: String,
    inner: Mutex<Inner>,
    /// The node's long-poll slots, shared with the engines' parked pops.
    slots: Arc<LongPollSlots>,
}

#[derive(Default)]
struct Inner {
    /// In name order: the sweep resumes a pass at a name.
    tenants: BTreeMap<String, Tenant>,
    /// What every queue of the node holds, as the cap counts it.
    bytes: u64,
    /// The last delivery number handed out: ids name a delivery, never reused in the process.
    deliveries: u64,
    /// Where the sweep's pass stands.
    sweep: SweepAt,
}

#[derive(Default)]
struct Tenant {
    loaded: bool,
    queues: BTreeMap<String, Queue>,
    /// Σ its queues' `charged`.
    charged: u64,
}

struct Queue {
    /// Its creation number, unique in the process: a queue removed and made again under the
    /// same name is another queue to the sweep (review s20 ephemeral L1).
    born: u64,
    options: EphemeralOptions,
    declared: bool,
    used: Instant,
    rings: Rings,
    /// Payloads plus [`ITEM_OVERHEAD`] each: what `maxBytes` bounds.
    bytes: u64,
    length: u64,
    /// Its name and rings as the node's cap counts them: slots, cursors, leases.
    rings_charged: u64,
    /// The rings' oldest instants in age order, for `dropOldest` and the ttl.
    heads: Heads,
    /// Waiting pops' gates, per group and scope.
    gates: Gates,
    /// The push log and, per group, where it has looked and what it must look at again.
    due: Due,
    /// The ring the last pop without a partition started at: the next starts after it, so one
    /// busy partition does not starve others.
    turn: Option<String>,
    /// No message held is smaller than this (payload plus `ITEM_OVERHEAD`): the least pushed since the
    /// queue was last empty. Lets `dropOldest` bound what a push frees without a walk.
    least_item: u64,
}

impl Queue {
    fn new(name: &str, options: EphemeralOptions, declared: bool, now: Instant) -> Queue {
        Queue {
            born: BORN.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            options,
            declared,
            used: now,
            rings: Rings::default(),
            bytes: 0,
            length: 0,
            rings_charged: queue_cost(name),
            heads: Heads::default(),
            gates: Gates::default(),
            due: Due::default(),
            turn: None,
            least_item: u64::MAX,
        }
    }
}

/// What one pop asks of every ring it visits.
struct Take<'a> {
    group: &'a str,
    /// None: committed at delivery.
    lease: Option<Duration>,
    retry_limit: u32,
    now: Instant,
}

fn queue_cost(name: &str) -> u64 {
    QUEUE_COST + name.len() as u64
}

fn ring_charge(name: &str, ring: &Ring) -> u64 {
    name.len() as u64 + ring.charge()
}

impl Queue {
    /// What the queue holds as the node's cap counts it: name, rings, cursors, leases and
    /// the indexes over its rings.
    fn charge(&self) -> u64 {
        self.rings_charged + self.heads.bytes() + self.gates.bytes() + self.due.bytes()
    }

    /// `take.group` takes up to `want` from the ring `partition`; what every group is past
    /// leaves, and the group's due set learns whether the ring still has something for it.
    /// None when there is no such ring.
    fn visit(
        &mut self,
        partition: &str,
        take: &Take<'_>,
        want: usize,
        dropped: &mut Dropped,
        deliveries: &mut u64,
    ) -> Option<Result<Vec<Delivered>, ()>> {
        let group = take.group;
        let taken = self.on_ring(partition, |ring| {
            let was = ring.soonest(group);
            let got = ring.take(
                group,
                want,
                take.lease,
                take.retry_limit,
                take.now,
                dropped,
                deliveries,
            );
            (got, was, ring.soonest(group))
        });
        let Some((got, was, soonest)) = taken else {
            self.due.visited(group, partition, false, None, None);
            return None;
        };
        trim(self, partition);
        let due = self
            .rings
            .get(partition)
            .is_some_and(|r| r.due_for(group, take.now));
        self.due.visited(group, partition, due, was, soonest);
        Some(got)
    }

    /// Runs `f` on the ring of `partition`, moves `rings_charged` by what that changed and
    /// the ring's head entry to its oldest message.
    fn on_ring<T>(&mut self, partition: &str, f: impl FnOnce(&mut Ring) -> T) -> Option<T> {
        let ring = self.rings.get_mut(partition)?;
        let (before, was) = (ring.charge(), ring.oldest_at());
        let out = f(ring);
        let (after, now) = (ring.charge(), ring.oldest_at());
        self.rings_charged = (self.rings_charged + after).saturating_sub(before);
        self.heads.moved(partition, was, now);
        if now.is_none() {
            self.due.emptied(partition);
        }
        Some(out)
    }
}

/// The store's clock is tokio's: the same instant as `Instant::now()` in the broker, and in
/// tests with paused time it moves only when the test advances it, so leases and ttls end on
/// the test's word.
pub(super) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // A panic under the lock leaves rings that are still rings: keep serving.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn count_drops(reason: &'static str, n: u64) {
    if n > 0 {
        metrics::counter!("queen_ephemeral_dropped_total", "reason" => reason).increment(n);
    }
}

/// Reasons a message leaves a ring unconsumed (the `reason` label).
const DROP_REASONS: [&str; 5] = ["drop_oldest", "ttl", "retry_limit", "reset", "removed"];

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("incarnation", &self.incarnation)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Store {
    pub fn new(
        limits: StoreLimits,
        memory: Option<Arc<crate::memory::Memory>>,
        slots: Arc<LongPollSlots>,
    ) -> Store {
        metrics::gauge!("queen_ephemeral_bytes").set(0.0);
        metrics::gauge!("queen_ephemeral_messages").set(0.0);
        for reason in DROP_REASONS {
            metrics::counter!("queen_ephemeral_dropped_total", "reason" => reason).increment(0);
        }
        Store {
            limits,
            memory,
            incarnation: uuid::Uuid::new_v4().simple().to_string()[..12].to_string(),
            inner: Mutex::new(Inner::default()),
            slots,
        }
    }

    /// What every ephemeral queue of the node holds, as the cap counts it.
    pub fn bytes(&self) -> u64 {
        lock(&self.inner).bytes
    }

    /// A whole pass of the sweep (see `sweep_slice`), the lock released between slices.
    #[cfg(test)]
    pub fn sweep(&self, now: Instant) {
        while !self.sweep_slice(now, SWEEP_BUDGET) {}
    }

    /// `e:<incarnation>:<partition>:<seq>.<delivery>` → (partition, seq, delivery).
    fn parse_id<'a>(&self, id: &'a str) -> Result<(&'a str, u64, u64), AckOutcome> {
        let rest = id.strip_prefix("e:").ok_or(AckOutcome::Unknown)?;
        let (inc, rest) = rest.split_once(':').ok_or(AckOutcome::Unknown)?;
        let (partition, n) = rest.rsplit_once(':').ok_or(AckOutcome::Unknown)?;
        let (seq, delivery) = n.split_once('.').ok_or(AckOutcome::Unknown)?;
        let seq: u64 = seq.parse().map_err(|_| AckOutcome::Unknown)?;
        let delivery: u64 = delivery.parse().map_err(|_| AckOutcome::Unknown)?;
        if inc != self.incarnation {
            return Err(AckOutcome::Stale);
        }
        Ok((partition, seq, delivery))
    }

    /// Refuses growth of `grow` bytes past the node's cap (503), then past the tenant's share
    /// (403). A pop (`consumer`) may pass both by a quarter: cursors and leases never block
    /// the drain of a full node.
    fn admit(
        &self,
        inner: &Inner,
        tenant: &str,
        grow: u64,
        consumer: bool,
    ) -> Result<(), EphemeralRefusal> {
        let room = |cap: u64| match consumer {
            true => cap.saturating_add(cap / 4),
            false => cap,
        };
        if inner.bytes.saturating_add(grow) > room(self.limits.max_bytes) {
            return Err(EphemeralRefusal::Unavailable(format!(
                "the node's ephemeral queues hold {} of {} bytes (ephemeral_max_bytes)",
                inner.bytes, self.limits.max_bytes
            )));
        }
        let held = inner.tenants.get(tenant).map_or(0, |t| t.charged);
        if held.saturating_add(grow) > room(self.limits.tenant_max_bytes) {
            return Err(EphemeralRefusal::Quota(format!(
                "the tenant's ephemeral queues hold {held} of {} bytes (ephemeral_tenant_max_bytes)",
                self.limits.tenant_max_bytes
            )));
        }
        Ok(())
    }
}

/// How long a waiting pop may hold what it took to fatten its answer: `windowBuffer.ms`, but
/// at most half the lease. The leases run from the take, so a longer hold would let them end
/// inside the handler: the same message taken again into the same answer, or given to another
/// consumer while this one still holds it (review s12 E8).
fn window_ms(o: &EphemeralOptions) -> u32 {
    o.window_ms.min(o.lease_seconds.saturating_mul(1_000) / 2)
}

/// Moves the tenant's and the node's charge by a queue's change from `before` to `after`.
fn settle(inner: &mut Inner, tenant: &str, before: u64, after: u64) {
    if let Some(t) = inner.tenants.get_mut(tenant) {
        t.charged = (t.charged + after).saturating_sub(before);
    }
    inner.bytes = (inner.bytes + after).saturating_sub(before);
}

/// Drops the messages older than the queue's ttl (with their leases); bytes freed. Only the
/// rings holding such a message are visited, oldest first, through the heads (review s14 R3).
fn age_out(q: &mut Queue, now: Instant) -> u64 {
    if q.options.ttl_seconds == 0 {
        return 0;
    }
    let ttl = Duration::from_secs(q.options.ttl_seconds.into());
    let expired = |at: Instant| now.saturating_duration_since(at) >= ttl;
    let (mut n, mut freed) = (0, 0);
    while let Some((at, name)) = q.heads.oldest().filter(|(at, _)| expired(*at)) {
        let name = name.to_string();
        let gone = q.on_ring(&name, |ring| {
            let dropped = ring.drop_oldest_while(expired);
            ring.shrink();
            dropped
        });
        let Some((k @ 1.., b)) = gone else {
            // A head naming no such message would come first for good: drop the entry.
            q.heads.moved(&name, Some(at), None);
            continue;
        };
        n += k;
        freed += b;
    }
    q.length -= n.min(q.length);
    q.bytes -= freed.min(q.bytes);
    count_drops("ttl", n);
    freed
}

/// What `dropOldest` will free, as the cap counts it, for a push of `n` messages of `bytes`,
/// read before anything is dropped so the node and tenant caps judge the push on its balance
/// (review s12 E14). A lower bound from counters, never a walk of the rings (review s14 R3):
/// the push drops at least enough messages to get back under `maxLength` (and one if it is
/// over `maxBytes`), each gives back at least the queue's least message and leaves its slot
/// empty. Leases dropped with them are not counted either: an underestimate, never more.
/// Answers (messages dropped at least, bytes freed at least).
fn drop_oldest_frees(q: &Queue, n: u64, bytes: u64) -> (u64, u64) {
    let o = &q.options;
    if !o.drop_oldest || q.length == 0 {
        return (0, 0);
    }
    let by_length = (q.length + n).saturating_sub(u64::from(o.max_length));
    let by_bytes = u64::from(q.bytes + bytes > o.max_bytes);
    let dropped = by_length.max(by_bytes).min(q.length);
    (
        dropped,
        dropped.saturating_mul(q.least_item.saturating_sub(SLOT)),
    )
}

/// After consumption: items every group is past leave, their bytes given back.
fn trim(q: &mut Queue, partition: &str) -> (u64, u64) {
    let Some((n, freed)) = q.on_ring(partition, |ring| {
        let before = ring.items.len() as u64;
        let freed = ring.trim();
        (before - ring.items.len() as u64, freed)
    }) else {
        return (0, 0);
    };
    q.length -= n.min(q.length);
    q.bytes -= freed.min(q.bytes);
    (n, freed)
}

impl Inner {
    /// The queue, made implicit if need be (its cost charged at once).
    fn queue(
        &mut self,
        tenant: &str,
        queue: &str,
        now: Instant,
    ) -> Result<&mut Queue, EphemeralRefusal> {
        let t = self.tenants.entry(tenant.to_string()).or_default();
        if !t.queues.contains_key(queue) {
            if t.queues.len() >= MAX_QUEUES {
                return Err(EphemeralRefusal::Quota(format!(
                    "a tenant holds at most {MAX_QUEUES} ephemeral queues"
                )));
            }
            t.charged += queue_cost(queue);
            self.bytes += queue_cost(queue);
        }
        let q = t
            .queues
            .entry(queue.to_string())
            .or_insert_with(|| Queue::new(queue, EphemeralOptions::default(), false, now));
        q.used = now;
        Ok(q)
    }
}

impl EphemeralDoor for Store {
    fn enabled(&self) -> bool {
        self.limits.enabled
    }

    fn loaded(&self, tenant: &str) -> bool {
        lock(&self.inner)
            .tenants
            .get(tenant)
            .is_some_and(|t| t.loaded)
    }

    fn seed(&self, tenant: &str, declared: Vec<(String, EphemeralOptions)>) {
        let now = now();
        let mut guard = lock(&self.inner);
        let inner = &mut *guard;
        let t = inner.tenants.entry(tenant.to_string()).or_default();
        if t.loaded {
            return;
        }
        t.loaded = true;
        for (name, options) in declared {
            if !t.queues.contains_key(&name) {
                t.charged += queue_cost(&name);
                inner.bytes += queue_cost(&name);
            }
            let q = t
                .queues
                .entry(name.clone())
                .or_insert_with(|| Queue::new(&name, options, true, now));
            q.options = options;
            q.declared = true;
        }
    }

    fn declare(&self, tenant: &str, queue: &str, options: EphemeralOptions) {
        let now = now();
        let mut guard = lock(&self.inner);
        let inner = &mut *guard;
        let t = inner.tenants.entry(tenant.to_string()).or_default();
        if !t.queues.contains_key(queue) {
            t.charged += queue_cost(queue);
            inner.bytes += queue_cost(queue);
        }
        let q = t
            .queues
            .entry(queue.to_string())
            .or_insert_with(|| Queue::new(queue, options, true, now));
        q.options = options;
        q.declared = true;
        q.used = now;
    }

    fn forget(&self, tenant: &str, queue: &str) -> bool {
        let mut guard = lock(&self.inner);
        let inner = &mut *guard;
        let Some(q) = inner
            .tenants
            .get_mut(tenant)
            .and_then(|t| t.queues.remove(queue))
        else {
            return false;
        };
        count_drops("removed", q.length);
        settle(inner, tenant, q.charge(), 0);
        // A pop waiting on it answers now rather than at its timeout.
        q.gates.close();
        true
    }

    fn reset(&self, tenant: &str, queue: &str) -> u64 {
        let mut guard = lock(&self.inner);
        let inner = &mut *guard;
        let Some(q) = inner
            .tenants
            .get_mut(tenant)
            .and_then(|t| t.queues.get_mut(queue))
        else {
            return 0;
        };
        let dropped = q.length;
        let before = q.charge();
        q.rings.clear();
        q.heads.clear();
        q.due.clear();
        q.bytes = 0;
        q.length = 0;
        q.rings_charged = queue_cost(queue);
        let after = q.charge();
        settle(inner, tenant, before, after);
        count_drops("reset", dropped);
        dropped
    }

    fn push(
        &self,
        tenant: &str,
        queue: &str,
        partition: Option<&str>,
        payloads: Vec<String>,
    ) -> Result<usize, EphemeralRefusal> {
        if !self.limits.enabled {
            return Err(EphemeralRefusal::Disabled);
        }
        let now = now();
        let partition = partition.unwrap_or(DEFAULT_PARTITION);
        let n = payloads.len() as u64;
        let bytes: u64 = payloads
            .iter()
            .map(|p| p.len() as u64 + ITEM_OVERHEAD)
            .sum();
        let payloads_least = payloads
            .iter()
            .map(|p| p.len() as u64 + ITEM_OVERHEAD)
            .min();
        let mut guard = lock(&self.inner);
        let inner = &mut *guard;
        let q = inner.queue(tenant, queue, now)?;
        let before = q.charge();
        let o = q.options;
        if n > u64::from(o.max_length) || bytes > o.max_bytes {
            return Err(EphemeralRefusal::Full(format!(
                "{n} messages of {bytes} bytes exceed the queue's maxLength {} or maxBytes {}",
                o.max_length, o.max_bytes
            )));
        }
        if !q.rings.contains_key(partition) && q.rings.len() >= MAX_PARTITIONS {
            return Err(EphemeralRefusal::BadRequest(format!(
                "an ephemeral queue holds at most {MAX_PARTITIONS} partitions"
            )));
        }
        age_out(q, now);
        let (dropped, frees) = drop_oldest_frees(q, n, bytes);
        // A lone ring gives the drops from its own slots, so they make room for the push
        // before the deque would double (review s14 R4).
        let dropped_here = if q.rings.len() == 1 { dropped } else { 0 };
        let grow = bytes
            + match q.rings.get(partition) {
                Some(r) => r.growth_after(
                    usize::try_from(dropped_here).unwrap_or(usize::MAX),
                    payloads.len(),
                ),
                None => {
                    ring_charge(partition, &Ring::default())
                        + Ring::default().growth_for(payloads.len())
                }
            }
            // The ring's head and push log entry if it held nothing (review s18 ephemeral M2:
            // one entry, whatever the number of groups).
            + match q.rings.get(partition).is_none_or(|r| r.items.is_empty()) {
                true => Heads::entry_cost(partition) + Due::log_cost(partition),
                false => 0,
            };
        let aged = q.charge();
        settle(inner, tenant, before, aged);
        // Judged on the balance: a dropOldest feed at its bound takes out what it brings in.
        self.admit(inner, tenant, grow.saturating_sub(frees), false)?;
        let Ok(q) = inner.queue(tenant, queue, now) else {
            return Err(EphemeralRefusal::Unavailable("the queue went away".into()));
        };
        let over =
            |q: &Queue| q.length + n > u64::from(o.max_length) || q.bytes + bytes > o.max_bytes;
        if over(q) && !o.drop_oldest {
            return Err(EphemeralRefusal::Full(format!(
                "queue {queue} is full (maxLength {}, maxBytes {}, policy reject)",
                o.max_length, o.max_bytes
            )));
        }
        // dropOldest: the oldest message of the whole queue goes first, ring by ring, taken
        // from the first of the ring heads, so a drop visits only the ring it drops from
        // (review s14 R3).
        let mut pushed_out = 0;
        while over(q) {
            let Some((at, name)) = q.heads.oldest() else {
                break;
            };
            let name = name.to_string();
            let Some(Some(b)) = q.on_ring(&name, Ring::drop_oldest) else {
                // A head naming no message would come first for good: drop the entry.
                q.heads.moved(&name, Some(at), None);
                continue;
            };
            q.bytes -= b.min(q.bytes);
            q.length = q.length.saturating_sub(1);
            pushed_out += 1;
        }
        count_drops("drop_oldest", pushed_out);
        if !q.rings.contains_key(partition) {
            let ring = Ring::default();
            q.rings_charged += ring_charge(partition, &ring);
            q.rings.insert(partition.to_string(), ring);
        }
        q.on_ring(partition, |ring| {
            for p in payloads {
                ring.push(Arc::from(p), now);
            }
            ring.shrink();
        });
        if q.length == 0 {
            q.least_item = u64::MAX;
        }
        let least = payloads_least.unwrap_or(u64::MAX);
        q.least_item = q.least_item.min(least);
        q.length += n;
        q.bytes += bytes;
        q.due.pushed(partition);
        q.gates.arrived(partition, None);
        let after = q.charge();
        settle(inner, tenant, aged, after);
        Ok(n as usize)
    }

    fn pop(
        &self,
        tenant: &str,
        ask: &PopAsk<'_>,
    ) -> Result<Vec<EphemeralMessage>, EphemeralRefusal> {
        if !self.limits.enabled {
            return Err(EphemeralRefusal::Disabled);
        }
        let now = now();
        let group = ask.group.unwrap_or(QUEUE_MODE_GROUP);
        let mut guard = lock(&self.inner);
        let inner = &mut *guard;
        // The most this pop can add: a cursor and a lease end in every ring it visits, a lease
        // per message, and a group's state (its name: nothing is copied, review s18 M2).
        let (before, grow) = {
            let q = inner
                .tenants
                .get(tenant)
                .and_then(|t| t.queues.get(ask.queue));
            if q.is_none() && ask.existing {
                return Err(EphemeralRefusal::NotFound);
            }
            let rings = match (q, ask.partition) {
                (None, _) => 0,
                (Some(_), Some(_)) => 1,
                (Some(q), None) => q.rings.len() as u64,
            };
            let leases = if ask.auto_ack {
                0
            } else {
                q.map_or(0, |q| q.length).min(ask.batch as u64)
            };
            let due = match (q, ask.partition) {
                (Some(q), None) if !q.due.knows(group) => group_cost(group),
                _ => 0,
            };
            let grow = rings * (cursor_cost(group) + DUE_COST) + leases * ENTRY_COST + due;
            (q.map_or(0, Queue::charge), grow)
        };
        self.admit(inner, tenant, grow, true)?;
        let mut deliveries = inner.deliveries;
        let q = inner.queue(tenant, ask.queue, now)?;
        let created = if before == 0 { q.charge() } else { 0 };
        age_out(q, now);
        let take = Take {
            group,
            lease: (!ask.auto_ack).then(|| Duration::from_secs(q.options.lease_seconds.into())),
            retry_limit: q.options.retry_limit,
            now,
        };
        let mut out = Vec::new();
        let mut dropped = Dropped::default();
        let mut refused = None;
        let mut visit = |q: &mut Queue, name: &str, out: &mut Vec<EphemeralMessage>| {
            let want = ask.batch - out.len();
            let Some(taken) = q.visit(name, &take, want, &mut dropped, &mut deliveries) else {
                return;
            };
            let Ok(got) = taken else {
                // What earlier rings gave is kept: the pop answers with it.
                refused.get_or_insert_with(|| {
                    EphemeralRefusal::Quota(format!(
                        "partition {name} keeps cursors for at most {MAX_GROUPS} groups"
                    ))
                });
                return;
            };
            for d in got {
                out.push(EphemeralMessage {
                    id: format!("e:{}:{}:{}.{}", self.incarnation, name, d.seq, d.delivery),
                    partition: name.to_string(),
                    payload: d.payload,
                    attempts: d.attempts,
                });
            }
        };
        match ask.partition {
            Some(p) => visit(q, p, &mut out),
            None => {
                // Only the rings where the group may have something due are visited (review
                // s14 R3): those pushed to since it last looked, oldest push first, and those
                // it must look at again (left unfinished, nacked, lease ended), in name order
                // from the one after where the last such pop started, so a busy partition does
                // not starve the others. Pops of a group alternate which of the two they start
                // from, so steady pushes elsewhere do not starve what must be looked at again
                // (review s19 ephemeral H1). One name is looked up at a time: a pop that fills
                // its batch from the first ring copies one name (review s12 E7).
                q.due.start(group, now);
                q.due.ended(group, now);
                let again_first = q.due.again_first(group);
                // A ring is visited once per pop: what it left there is for the next one (a
                // lease of no seconds would otherwise be taken twice).
                let mut looked = BTreeSet::new();
                for again in [again_first, !again_first] {
                    if !again {
                        while out.len() < ask.batch {
                            let Some(name) = q.due.next_logged(group) else {
                                break;
                            };
                            if !looked.contains(&name) {
                                visit(q, &name, &mut out);
                                looked.insert(name);
                            }
                        }
                        continue;
                    }
                    let first = q.due.next_after(group, q.turn.as_deref());
                    if first.is_some() {
                        q.turn.clone_from(&first);
                    }
                    let mut next = first.clone();
                    for _ in 0..q.due.len(group) {
                        let Some(name) = next.take() else { break };
                        if out.len() >= ask.batch {
                            break;
                        }
                        next = q
                            .due
                            .next_after(group, Some(&name))
                            .filter(|n| Some(n) != first.as_ref());
                        if !looked.contains(&name) {
                            visit(q, &name, &mut out);
                            looked.insert(name);
                        }
                    }
                }
            }
        }
        // What is due outlasts this pop: the next waiter of its gate takes its turn.
        let still_due = match ask.partition {
            Some(p) => q.rings.get(p).is_some_and(|r| r.due_for(group, now)),
            None => q.due.any(group),
        };
        if still_due {
            q.gates.still_due(group, ask.partition);
        }
        let after = q.charge();
        inner.deliveries = deliveries;
        settle(inner, tenant, before.max(created), after);
        count_drops("retry_limit", dropped.retries);
        match refused {
            Some(r) if out.is_empty() => Err(r),
            _ => Ok(out),
        }
    }

    fn wake(
        &self,
        tenant: &str,
        ask: &PopAsk<'_>,
    ) -> Result<Option<Arc<tokio::sync::Notify>>, EphemeralRefusal> {
        // Never creates the queue: the pop that waits made it already, so a missing one was
        // deleted meanwhile (review s12 E13). A new gate is admitted as the pop's own growth
        // is (review s20 ephemeral M3: it was charged without admission, so waits could push
        // the node past its cap); it lives as long as its waiters (`unwait`).
        let group = ask.group.unwrap_or(QUEUE_MODE_GROUP);
        let mut guard = lock(&self.inner);
        let inner = &mut *guard;
        let Some(q) = inner
            .tenants
            .get(tenant)
            .and_then(|t| t.queues.get(ask.queue))
        else {
            return Ok(None);
        };
        let grow = q.gates.would_cost(group, ask.partition);
        self.admit(inner, tenant, grow, true)?;
        let Some(q) = inner
            .tenants
            .get_mut(tenant)
            .and_then(|t| t.queues.get_mut(ask.queue))
        else {
            return Ok(None);
        };
        let before = q.charge();
        let gate = q.gates.gate(group, ask.partition);
        let after = q.charge();
        settle(inner, tenant, before, after);
        Ok(Some(gate))
    }

    fn unwait(&self, tenant: &str, ask: &PopAsk<'_>) {
        let group = ask.group.unwrap_or(QUEUE_MODE_GROUP);
        let mut guard = lock(&self.inner);
        let inner = &mut *guard;
        let Some(q) = inner
            .tenants
            .get_mut(tenant)
            .and_then(|t| t.queues.get_mut(ask.queue))
        else {
            return;
        };
        let before = q.charge();
        q.gates.left(group, ask.partition);
        let after = q.charge();
        settle(inner, tenant, before, after);
    }

    fn wait_slot(&self, tenant: &str) -> Option<WaitSlot> {
        // One cap for the node's parked polls, durable and ephemeral alike (the memory share
        // it was sized from holds that many), and one count per tenant for both kinds, within
        // its part of the cap, so one tenant cannot take every slot (review s12 E10) nor
        // twice its part, once per kind (review s14 R2).
        match self.slots.try_take_for(&Arc::from(tenant)) {
            Ok(slot) => Some(Box::new(slot)),
            Err(NoSlot::TenantQuota) => None,
            Err(NoSlot::NodeCap) => {
                // Durable polls whose clients are gone may hold the node's slots: every group
                // is asked to forget them, as a durable refusal does (review s14 R2).
                self.slots.ask_sweep();
                None
            }
        }
    }

    fn window(&self, tenant: &str, queue: &str) -> (u32, u32) {
        lock(&self.inner)
            .tenants
            .get(tenant)
            .and_then(|t| t.queues.get(queue))
            .map_or((0, 0), |q| (window_ms(&q.options), q.options.window_count))
    }

    fn ack(
        &self,
        tenant: &str,
        queue: &str,
        group: Option<&str>,
        acks: &[(String, AckStatus)],
    ) -> Vec<AckOutcome> {
        let group = group.unwrap_or(QUEUE_MODE_GROUP);
        let now = now();
        let mut guard = lock(&self.inner);
        let inner = &mut *guard;
        let mut out = Vec::with_capacity(acks.len());
        // The partitions the acks settled something in, and whether one came back due.
        let mut touched: Vec<(String, bool)> = Vec::new();
        let Some(q) = inner
            .tenants
            .get_mut(tenant)
            .and_then(|t| t.queues.get_mut(queue))
        else {
            return acks
                .iter()
                .map(|(id, _)| self.parse_id(id).err().unwrap_or(AckOutcome::Unknown))
                .collect();
        };
        q.used = now;
        let before = q.charge();
        let retry_limit = q.options.retry_limit;
        let mut dropped = 0;
        for (id, status) in acks {
            let (partition, seq, delivery) = match self.parse_id(id) {
                Ok(v) => v,
                Err(o) => {
                    out.push(o);
                    continue;
                }
            };
            let outcome = q
                .on_ring(partition, |ring| match status {
                    AckStatus::Completed if ring.ack(group, seq, delivery, now) => {
                        AckOutcome::Acked
                    }
                    AckStatus::Completed => AckOutcome::Unknown,
                    AckStatus::Failed | AckStatus::Retry => {
                        match ring.nack(group, seq, delivery, retry_limit, now) {
                            Nack::Redelivered if ring.holds(seq) => AckOutcome::Redelivered,
                            // Pushed out of the ring meanwhile: nothing comes back.
                            Nack::Redelivered => AckOutcome::Acked,
                            Nack::Dropped => {
                                dropped += 1;
                                AckOutcome::Acked
                            }
                            Nack::Unknown => AckOutcome::Unknown,
                        }
                    }
                })
                .unwrap_or(AckOutcome::Unknown);
            let again = outcome == AckOutcome::Redelivered;
            match touched.iter_mut().find(|(p, _)| p == partition) {
                Some((_, due)) => *due |= again,
                None if outcome != AckOutcome::Unknown => {
                    touched.push((partition.to_string(), again));
                }
                None => {}
            }
            out.push(outcome);
        }
        count_drops("retry_limit", dropped);
        // A nacked message is due again for its group: one of the group's waiters may take
        // it. A completed ack gives no waiter anything, so it wakes none.
        for (p, again) in &touched {
            trim(q, p);
            if *again {
                q.due.arrived(p, group);
                q.gates.arrived(p, Some(group));
            }
        }
        let after = q.charge();
        settle(inner, tenant, before, after);
        out
    }

    fn queues(&self, tenant: &str) -> Value {
        let inner = lock(&self.inner);
        let rows: Vec<Value> = inner
            .tenants
            .get(tenant)
            .map(|t| {
                t.queues
                    .iter()
                    .map(|(name, q)| {
                        json!({
                            "queue": name,
                            "declared": q.declared,
                            "messages": q.length,
                            "bytes": q.bytes,
                            "partitions": q.rings.len(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        json!({ "queues": rows })
    }

    fn depth(&self, tenant: &str, queue: &str) -> Option<Value> {
        let inner = lock(&self.inner);
        let q = inner.tenants.get(tenant)?.queues.get(queue)?;
        let mut groups: BTreeMap<String, (u64, usize, usize)> = BTreeMap::new();
        for (_, ring) in q.rings.iter() {
            for (g, behind, leased, again) in ring.group_gauges() {
                let e = groups.entry(g).or_default();
                e.0 += behind;
                e.1 += leased;
                e.2 += again;
            }
        }
        let o = q.options;
        let groups: Vec<Value> = groups
            .into_iter()
            .map(|(g, (behind, leased, again))| {
                json!({"group": g, "pending": behind, "leased": leased, "redeliver": again})
            })
            .collect();
        Some(json!({
            "queue": queue,
            "declared": q.declared,
            "depth": q.length,
            "messages": q.length,
            "bytes": q.bytes,
            "partitions": q.rings.len(),
            "groups": groups,
            "options": {
                "maxBytes": o.max_bytes,
                "maxLength": o.max_length,
                "policy": if o.drop_oldest { "dropOldest" } else { "reject" },
                "ttlSeconds": o.ttl_seconds,
                "leaseSeconds": o.lease_seconds,
                "retryLimit": o.retry_limit,
                "windowBuffer": {"ms": o.window_ms, "count": o.window_count},
            },
        }))
    }
}

#[path = "store_sweep.rs"]
mod sweep;

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "store_bounds_tests.rs"]
mod bounds_tests;

#[cfg(test)]
#[path = "store_fairness_tests.rs"]
mod fairness_tests;

#[cfg(test)]
#[path = "store_sweep_tests.rs"]
mod sweep_tests;

#[cfg(test)]
#[path = "store_gate_tests.rs"]
mod gate_tests;
