//! The tenants' ephemeral queues behind one lock: every call is a few ring operations, never
//! I/O, so one mutex keeps the byte budget and the rings consistent without ordering rules.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use queenmq_native_api::ephemeral_door::{
    AckOutcome, AckStatus, EphemeralDoor, EphemeralMessage, EphemeralRefusal, PopAsk, WaitSlot,
};
use queenmq_protocol::{EphemeralOptions, DEFAULT_PARTITION, QUEUE_MODE_GROUP};
use serde_json::{json, Value};

use super::ring::{Dropped, Nack, Ring, ITEM_OVERHEAD};

/// Partitions one queue keeps at most: each is a ring with its own cursors.
pub const MAX_PARTITIONS: usize = 10_000;
/// Queues one tenant keeps at most, declared and implicit.
pub const MAX_QUEUES: usize = 10_000;

#[derive(Debug, Clone, Copy)]
pub struct StoreLimits {
    pub enabled: bool,
    /// Bytes every tenant's queues hold at most together.
    pub max_bytes: u64,
    pub implicit_idle: Duration,
    /// Pops waiting at once.
    pub max_waiters: usize,
}

pub struct Store {
    limits: StoreLimits,
    /// Told what the rings hold (capacities), as the `ephemeral` pool.
    memory: Option<Arc<crate::memory::Memory>>,
    incarnation: String,
    inner: Mutex<Inner>,
    waiters: Arc<AtomicUsize>,
}

#[derive(Default)]
struct Inner {
    tenants: HashMap<String, Tenant>,
    bytes: u64,
}

#[derive(Default)]
struct Tenant {
    loaded: bool,
    queues: BTreeMap<String, Queue>,
}

struct Queue {
    options: EphemeralOptions,
    declared: bool,
    used: Instant,
    rings: BTreeMap<String, Ring>,
    bytes: u64,
    length: u64,
    wake: Arc<tokio::sync::Notify>,
    /// Where a pop without a partition starts, so one busy partition does not starve others.
    turn: usize,
}

impl Queue {
    fn new(options: EphemeralOptions, declared: bool, now: Instant) -> Queue {
        Queue {
            options,
            declared,
            used: now,
            rings: BTreeMap::new(),
            bytes: 0,
            length: 0,
            wake: Arc::new(tokio::sync::Notify::new()),
            turn: 0,
        }
    }
}

impl Queue {
    /// What the queue's rings hold: slots by capacity, payload allocations, cursor maps.
    fn held_bytes(&self) -> usize {
        self.rings.values().fold(0usize, |a, r| {
            a.saturating_add(r.held_bytes()).saturating_add(64)
        })
    }
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

struct WaitGuard(Arc<AtomicUsize>);

impl Drop for WaitGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Store {
    pub fn new(limits: StoreLimits, memory: Option<Arc<crate::memory::Memory>>) -> Store {
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
            waiters: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Bytes held by every ephemeral queue of the node.
    pub fn bytes(&self) -> u64 {
        lock(&self.inner).bytes
    }

    /// The gauges and the memory pool, from the sweep: a walk of every ring, once a second.
    fn publish(&self, inner: &Inner) {
        let (mut messages, mut held) = (0u64, 0usize);
        for q in inner.tenants.values().flat_map(|t| t.queues.values()) {
            messages += q.length;
            held = held.saturating_add(q.held_bytes());
        }
        metrics::gauge!("queen_ephemeral_bytes").set(inner.bytes as f64);
        metrics::gauge!("queen_ephemeral_messages").set(messages as f64);
        if let Some(m) = &self.memory {
            m.pools.set(crate::memory::Pool::Ephemeral, held);
        }
    }

    /// Ages out messages past their ttl and removes implicit queues idle too long.
    pub fn sweep(&self, now: Instant) {
        let mut guard = lock(&self.inner);
        let inner = &mut *guard;
        let idle = self.limits.implicit_idle;
        let mut freed = 0;
        for t in inner.tenants.values_mut() {
            t.queues.retain(|_, q| {
                if !q.declared && now.saturating_duration_since(q.used) >= idle {
                    count_drops("removed", q.length);
                    freed += q.bytes;
                    return false;
                }
                freed += age_out(q, now);
                true
            });
        }
        inner.bytes -= freed.min(inner.bytes);
        self.publish(inner);
    }

    fn parse_id<'a>(&self, id: &'a str) -> Result<(&'a str, u64), AckOutcome> {
        let rest = id.strip_prefix("e:").ok_or(AckOutcome::Unknown)?;
        let (inc, rest) = rest.split_once(':').ok_or(AckOutcome::Unknown)?;
        let (partition, n) = rest.rsplit_once(':').ok_or(AckOutcome::Unknown)?;
        let n: u64 = n.parse().map_err(|_| AckOutcome::Unknown)?;
        if inc != self.incarnation {
            return Err(AckOutcome::Stale);
        }
        Ok((partition, n))
    }
}

/// Drops the messages older than the queue's ttl; bytes freed.
fn age_out(q: &mut Queue, now: Instant) -> u64 {
    if q.options.ttl_seconds == 0 {
        return 0;
    }
    let ttl = Duration::from_secs(q.options.ttl_seconds.into());
    let (mut n, mut freed) = (0, 0);
    for ring in q.rings.values_mut() {
        while ring
            .oldest_at()
            .is_some_and(|at| now.saturating_duration_since(at) >= ttl)
        {
            freed += ring.drop_oldest().unwrap_or(0);
            n += 1;
        }
    }
    q.length -= n.min(q.length);
    q.bytes -= freed.min(q.bytes);
    count_drops("ttl", n);
    freed
}

/// After consumption: items every group is past leave, their bytes given back.
fn trim(q: &mut Queue, partition: &str) -> (u64, u64) {
    let Some(ring) = q.rings.get_mut(partition) else {
        return (0, 0);
    };
    let before = ring.items.len() as u64;
    let freed = ring.trim();
    let n = before - ring.items.len() as u64;
    q.length -= n.min(q.length);
    q.bytes -= freed.min(q.bytes);
    (n, freed)
}

impl Inner {
    fn queue(
        &mut self,
        tenant: &str,
        queue: &str,
        now: Instant,
    ) -> Result<&mut Queue, EphemeralRefusal> {
        let t = self.tenants.entry(tenant.to_string()).or_default();
        if !t.queues.contains_key(queue) && t.queues.len() >= MAX_QUEUES {
            return Err(EphemeralRefusal::Unavailable(format!(
                "a tenant holds at most {MAX_QUEUES} ephemeral queues"
            )));
        }
        let q = t
            .queues
            .entry(queue.to_string())
            .or_insert_with(|| Queue::new(EphemeralOptions::default(), false, now));
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
        let now = Instant::now();
        let mut inner = lock(&self.inner);
        let t = inner.tenants.entry(tenant.to_string()).or_default();
        if t.loaded {
            return;
        }
        t.loaded = true;
        for (name, options) in declared {
            let q = t
                .queues
                .entry(name)
                .or_insert_with(|| Queue::new(options, true, now));
            q.options = options;
            q.declared = true;
        }
    }

    fn declare(&self, tenant: &str, queue: &str, options: EphemeralOptions) {
        let now = Instant::now();
        let mut inner = lock(&self.inner);
        let t = inner.tenants.entry(tenant.to_string()).or_default();
        let q = t
            .queues
            .entry(queue.to_string())
            .or_insert_with(|| Queue::new(options, true, now));
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
        inner.bytes -= q.bytes.min(inner.bytes);
        // A pop waiting on it answers now rather than at its timeout.
        q.wake.notify_waiters();
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
        inner.bytes -= q.bytes.min(inner.bytes);
        q.rings.clear();
        q.bytes = 0;
        q.length = 0;
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
        let now = Instant::now();
        let partition = partition.unwrap_or(DEFAULT_PARTITION);
        let n = payloads.len() as u64;
        let bytes: u64 = payloads
            .iter()
            .map(|p| p.len() as u64 + ITEM_OVERHEAD)
            .sum();
        let mut guard = lock(&self.inner);
        let inner = &mut *guard;
        if inner.bytes.saturating_add(bytes) > self.limits.max_bytes {
            return Err(EphemeralRefusal::Unavailable(format!(
                "the node's ephemeral queues hold {} of {} bytes (ephemeral_max_bytes)",
                inner.bytes, self.limits.max_bytes
            )));
        }
        let q = inner.queue(tenant, queue, now)?;
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
        let over =
            |q: &Queue| q.length + n > u64::from(o.max_length) || q.bytes + bytes > o.max_bytes;
        let mut freed = age_out(q, now);
        if over(q) && !o.drop_oldest {
            inner.bytes -= freed.min(inner.bytes);
            return Err(EphemeralRefusal::Full(format!(
                "queue {queue} is full (maxLength {}, maxBytes {}, policy reject)",
                o.max_length, o.max_bytes
            )));
        }
        // dropOldest: the oldest message of the whole queue goes first, ring by ring.
        let mut pushed_out = 0;
        while over(q) {
            let oldest = q
                .rings
                .iter()
                .filter_map(|(name, r)| r.oldest_at().map(|at| (at, name.clone())))
                .min();
            let Some((_, name)) = oldest else { break };
            let b = q
                .rings
                .get_mut(&name)
                .and_then(Ring::drop_oldest)
                .unwrap_or(0);
            q.bytes -= b.min(q.bytes);
            q.length = q.length.saturating_sub(1);
            freed += b;
            pushed_out += 1;
        }
        count_drops("drop_oldest", pushed_out);
        let ring = q.rings.entry(partition.to_string()).or_default();
        for p in payloads {
            ring.push(Arc::from(p), now);
        }
        q.length += n;
        q.bytes += bytes;
        q.wake.notify_waiters();
        inner.bytes = inner.bytes - freed.min(inner.bytes) + bytes;
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
        let now = Instant::now();
        let group = ask.group.unwrap_or(QUEUE_MODE_GROUP);
        let mut guard = lock(&self.inner);
        let inner = &mut *guard;
        let q = inner.queue(tenant, ask.queue, now)?;
        let mut freed = age_out(q, now);
        let names: Vec<String> = match ask.partition {
            Some(p) => vec![p.to_string()],
            None => {
                let mut all: Vec<String> = q.rings.keys().cloned().collect();
                if !all.is_empty() {
                    let k = q.turn % all.len();
                    all.rotate_left(k);
                    q.turn = q.turn.wrapping_add(1);
                }
                all
            }
        };
        let lease = (!ask.auto_ack).then(|| Duration::from_secs(q.options.lease_seconds.into()));
        let retry_limit = q.options.retry_limit;
        let mut out = Vec::new();
        let mut dropped = Dropped::default();
        let mut refused = None;
        for name in names {
            if out.len() >= ask.batch {
                break;
            }
            let Some(ring) = q.rings.get_mut(&name) else {
                continue;
            };
            let want = ask.batch - out.len();
            let Ok(got) = ring.take(group, want, lease, retry_limit, now, &mut dropped) else {
                refused = Some(EphemeralRefusal::Unavailable(format!(
                    "partition {name} keeps cursors for at most {} groups",
                    super::ring::MAX_GROUPS
                )));
                break;
            };
            for d in got {
                out.push(EphemeralMessage {
                    id: format!("e:{}:{}:{}", self.incarnation, name, d.seq),
                    partition: name.clone(),
                    payload: d.payload,
                    attempts: d.attempts,
                });
            }
            freed += trim(q, &name).1;
        }
        count_drops("retry_limit", dropped.retries);
        inner.bytes -= freed.min(inner.bytes);
        match refused {
            Some(r) => Err(r),
            None => Ok(out),
        }
    }

    fn wake(&self, tenant: &str, queue: &str) -> Arc<tokio::sync::Notify> {
        let mut inner = lock(&self.inner);
        match inner.queue(tenant, queue, Instant::now()) {
            Ok(q) => q.wake.clone(),
            // Past the queue bound nothing will push to it: a gate nobody rings.
            Err(_) => Arc::new(tokio::sync::Notify::new()),
        }
    }

    fn wait_slot(&self) -> Option<WaitSlot> {
        let held = self.waiters.fetch_add(1, Ordering::AcqRel);
        let guard = WaitGuard(self.waiters.clone());
        if held >= self.limits.max_waiters {
            return None;
        }
        Some(Box::new(guard))
    }

    fn window(&self, tenant: &str, queue: &str) -> (u32, u32) {
        lock(&self.inner)
            .tenants
            .get(tenant)
            .and_then(|t| t.queues.get(queue))
            .map_or((0, 0), |q| (q.options.window_ms, q.options.window_count))
    }

    fn ack(
        &self,
        tenant: &str,
        queue: &str,
        group: Option<&str>,
        acks: &[(String, AckStatus)],
    ) -> Vec<AckOutcome> {
        let group = group.unwrap_or(QUEUE_MODE_GROUP);
        let now = Instant::now();
        let mut guard = lock(&self.inner);
        let inner = &mut *guard;
        let mut out = Vec::with_capacity(acks.len());
        let mut touched: Vec<String> = Vec::new();
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
        let retry_limit = q.options.retry_limit;
        let mut dropped = 0;
        for (id, status) in acks {
            let (partition, seq) = match self.parse_id(id) {
                Ok(v) => v,
                Err(o) => {
                    out.push(o);
                    continue;
                }
            };
            let Some(ring) = q.rings.get_mut(partition) else {
                out.push(AckOutcome::Unknown);
                continue;
            };
            let outcome = match status {
                AckStatus::Completed if ring.ack(group, seq) => AckOutcome::Acked,
                AckStatus::Completed => AckOutcome::Unknown,
                AckStatus::Failed | AckStatus::Retry => match ring.nack(group, seq, retry_limit) {
                    Nack::Redelivered if ring.holds(seq) => AckOutcome::Redelivered,
                    // Pushed out of the ring meanwhile: nothing comes back.
                    Nack::Redelivered => AckOutcome::Acked,
                    Nack::Dropped => {
                        dropped += 1;
                        AckOutcome::Acked
                    }
                    Nack::Unknown => AckOutcome::Unknown,
                },
            };
            if outcome != AckOutcome::Unknown && !touched.iter().any(|t| t == partition) {
                touched.push(partition.to_string());
            }
            out.push(outcome);
        }
        count_drops("retry_limit", dropped);
        let mut freed = 0;
        for p in &touched {
            freed += trim(q, p).1;
        }
        // A nacked message is due again: a waiting pop may take it.
        q.wake.notify_waiters();
        inner.bytes -= freed.min(inner.bytes);
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
        for ring in q.rings.values() {
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
