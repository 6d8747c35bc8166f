//! The store's sweep in slices (review s19 ephemeral M3: one pass walked every cursor and
//! index entry of the node under the store's one lock). A slice does at most a budget of
//! entries (a queue, a ring, a cursor or a gate looked at) and remembers where it stopped;
//! the next slice resumes there, so a pass over N entries takes about N / budget slices and
//! the lock is let go between them. A ring's idle cursors are found in last-use order and
//! forgotten up to the slice's budget, the rest in the next (review s20 ephemeral M1: a ring
//! counted as one entry while its step walked all its cursors); a unit may pass the budget
//! by the walks of one ring (trimming its cursors, at most `MAX_GROUPS`, and its gates). The
//! charges stay incremental: a slice moves the tenant's and the node's by what it changed,
//! never recounts them.
//!
//! What a pass does, queue by queue: removes an implicit queue idle too long (not while a pop
//! waits on it), ages out messages past the ttl, forgets idle groups' states (not while a pop
//! of theirs is parked), rings the waiters a lease's end gives something; then ring by ring:
//! forgets idle cursors, gives back drained slots, drops vacant rings and the gates no waiter
//! holds, and rings the partition's waiters that a lease's end gives something.

use std::ops::Bound;
use std::time::Instant;

use super::{age_out, count_drops, lock, ring_charge, Inner, Queue, Store};

/// Entries one slice does at most; the sweeper runs one slice a second.
pub const SWEEP_BUDGET: u64 = 8_192;

/// Where a pass stands: the tenant and queue it is at (or the least name of the next), and
/// how far into the queue.
#[derive(Default)]
pub struct SweepAt {
    tenant: String,
    queue: String,
    /// The creation number of the queue it is at: one made again under the same name
    /// between two slices starts at its own step, not at the old one's rings.
    born: u64,
    stage: Stage,
    /// Messages of the queues the pass finished, for the gauge at its end.
    messages: u64,
}

#[derive(Default)]
enum Stage {
    /// The queue's own work is next.
    #[default]
    Queue,
    /// Its idle groups' states are being forgotten, a budget at a time (review s20
    /// ephemeral M2), then its queue-wide gates are looked at.
    Idle,
    /// Its rings after this one (None: from the first).
    Rings(Option<String>),
}

/// The least name after `name`.
fn after(name: &str) -> String {
    format!("{name}\0")
}

/// The next piece of work of a pass.
enum Unit {
    Queue,
    Idle,
    Ring(String),
}

impl Store {
    /// One slice of the sweep: up to `budget` entries from where the last stopped. True
    /// when it finished a pass (the next starts over).
    pub fn sweep_slice(&self, now: Instant, budget: u64) -> bool {
        let mut guard = lock(&self.inner);
        let inner = &mut *guard;
        let idle = self.limits.implicit_idle;
        let mut spent = 0;
        let done = loop {
            let Some(unit) = next_unit(inner) else {
                break true;
            };
            if spent >= budget {
                break false;
            }
            let Inner {
                tenants,
                bytes,
                sweep: at,
                ..
            } = inner;
            let Some(t) = tenants.get_mut(&at.tenant) else {
                break true;
            };
            let Some(q) = t.queues.get_mut(&at.queue) else {
                break true;
            };
            let before = q.charge();
            let (cost, kept) = match unit {
                Unit::Queue => {
                    let idle_for = now.saturating_duration_since(q.used);
                    if !q.declared && idle_for >= idle && !q.gates.waited_on() {
                        count_drops("removed", q.length);
                        t.queues.remove(&at.queue);
                        at.queue = after(&at.queue);
                        (1, false)
                    } else {
                        age_out(q, now);
                        at.stage = Stage::Idle;
                        (1, true)
                    }
                }
                Unit::Idle => {
                    let (looked, done) = idle_step(q, now, idle, budget - spent);
                    if done {
                        at.stage = Stage::Rings(None);
                    }
                    // The queue's unit paid for the queue: this one for what it looked at.
                    (looked, true)
                }
                Unit::Ring(name) => {
                    let (looked, done) = ring_step(q, &name, now, idle, budget - spent);
                    // A ring left with idle cursors is this pass's next unit again.
                    if done {
                        at.stage = Stage::Rings(Some(name));
                    }
                    (1 + looked, true)
                }
            };
            let after_charge = match kept {
                true => t.queues.get(&at.queue).map_or(0, Queue::charge),
                false => 0,
            };
            t.charged = (t.charged + after_charge).saturating_sub(before);
            *bytes = (*bytes + after_charge).saturating_sub(before);
            spent += cost;
        };
        if done {
            let messages = std::mem::take(&mut inner.sweep).messages;
            metrics::gauge!("queen_ephemeral_messages").set(messages as f64);
        }
        self.publish(inner);
        done
    }

    /// The bytes gauge and the memory pool.
    fn publish(&self, inner: &Inner) {
        metrics::gauge!("queen_ephemeral_bytes").set(inner.bytes as f64);
        if let Some(m) = &self.memory {
            let held = usize::try_from(inner.bytes).unwrap_or(usize::MAX);
            m.pools.set(crate::memory::Pool::Ephemeral, held);
        }
    }
}

/// Moves the pass to its next unit of work, past the queues and tenants it finished; None
/// when the pass is done.
fn next_unit(inner: &mut Inner) -> Option<Unit> {
    let at = &mut inner.sweep;
    loop {
        let from = (Bound::Included(at.tenant.as_str()), Bound::Unbounded);
        let (tenant, t) = inner.tenants.range::<str, _>(from).next()?;
        if *tenant != at.tenant {
            at.tenant.clone_from(tenant);
            at.queue.clear();
            at.stage = Stage::Queue;
        }
        let from = (Bound::Included(at.queue.as_str()), Bound::Unbounded);
        let Some((queue, q)) = t.queues.range::<str, _>(from).next() else {
            at.tenant = after(tenant);
            at.queue.clear();
            at.stage = Stage::Queue;
            continue;
        };
        if *queue != at.queue || q.born != at.born {
            at.queue.clone_from(queue);
            at.born = q.born;
            at.stage = Stage::Queue;
        }
        let last = match &at.stage {
            Stage::Queue => return Some(Unit::Queue),
            Stage::Idle => return Some(Unit::Idle),
            Stage::Rings(last) => last.as_deref(),
        };
        if let Some(ring) = q.rings.name_after(last) {
            return Some(Unit::Ring(ring.clone()));
        }
        at.messages += q.length;
        at.queue = after(queue);
        at.stage = Stage::Queue;
    }
}

/// The queue's idle groups' states forgotten, up to `budget` of them; once none is left,
/// the waiters a lease's end gives something are rung. (Groups and gates looked at, whether
/// it finished.)
fn idle_step(q: &mut Queue, now: Instant, idle: std::time::Duration, budget: u64) -> (u64, bool) {
    let gates = &q.gates;
    let (looked, done) = q
        .due
        .forget_idle(now, idle, |group| gates.waits_any(group), budget);
    if !done {
        return (looked, false);
    }
    // A lease's end is found only by a pop: the waiters of its group are rung, so one pops
    // rather than sleeping to its timeout (review s18 ephemeral M3).
    let due = &q.due;
    let rung = q.gates.ring_queue_wide(|group| due.ended_by(group, now));
    let rings = &q.rings;
    let pruned = q.gates.prune_ringless(|p| rings.contains_key(p));
    (looked + rung + pruned, true)
}

/// One ring's part of a pass, its idle cursors forgotten up to `budget` of them; (the
/// cursors and gates it looked at, whether it finished the ring).
fn ring_step(
    q: &mut Queue,
    name: &str,
    now: Instant,
    idle: std::time::Duration,
    budget: u64,
) -> (u64, bool) {
    let Some((forgot, n, freed, empty)) = q.on_ring(name, |ring| {
        let forgot = ring.forget_idle(now, idle, budget);
        let before = ring.items.len() as u64;
        // Trimming walks the cursors left.
        let (freed, trimmed) = match forgot.gone > 0 {
            true => (ring.trim(), ring.cursors()),
            false => (0, 0),
        };
        ring.shrink();
        let forgot = (forgot.gone > 0, forgot.looked + trimmed, forgot.done);
        (
            forgot,
            before - ring.items.len() as u64,
            freed,
            ring.items.is_empty(),
        )
    }) else {
        return (0, true);
    };
    let (forgot, mut looked, done) = forgot;
    q.length -= n.min(q.length);
    q.bytes -= freed.min(q.bytes);
    // A forgotten group starts over at the ring's head: the ring is due again for it, as
    // after a push, and its waiters are rung.
    if forgot && !empty {
        q.due.pushed(name);
        looked += q.gates.arrived(name, None);
    }
    if !done {
        return (looked, false);
    }
    if q.rings.get(name).is_some_and(|r| r.is_vacant()) {
        if let Some(ring) = q.rings.remove(name) {
            q.rings_charged -= ring_charge(name, &ring).min(q.rings_charged);
        }
    }
    let rings = &q.rings;
    looked += q.gates.ring_partition(name, |group| {
        rings.get(name).is_some_and(|r| r.due_for(group, now))
    });
    (looked, true)
}
