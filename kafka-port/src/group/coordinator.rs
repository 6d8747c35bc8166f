//! The async shell of the membership machine: one lock around [`Groups`], waits answered
//! through oneshot channels, and a tokio interval that times sessions and join phases out.
//! Generations are minted by the engine outside the lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use queenmq_protocol::{Access, Bus, RequestCtx};
use tokio::sync::watch;

use super::durable;
use super::machine::{Groups, JoinAnswer, JoinArgs, Step, SyncAnswer};
use crate::cluster::ClusterView;
use crate::errors as e;
use crate::Door;

/// How often sessions and join deadlines are checked.
pub const TICK: Duration = Duration::from_millis(100);

/// One tenant's groups: a group name means a different group in each tenant, as its offsets
/// (engine state of the tenant's group) do.
pub struct Coordinator {
    groups: Mutex<Groups>,
    start: Instant,
    /// The coordinator's own requests (generations it mints for a join phase, which any
    /// member's timer or join may complete): in its tenant, not as one member's user.
    ctx: RequestCtx,
    /// On a cluster, the Raft term under which this node last led its tenant's group: the
    /// in-memory generations and members were built under it.
    led_term: Mutex<Option<u64>>,
    /// Bumped (under the groups' lock) whenever the groups are forgotten: a generation
    /// minted for a join phase of the forgotten groups must not complete one of the new.
    epoch: AtomicU64,
}

impl Default for Coordinator {
    fn default() -> Self {
        Self::new(queenmq_protocol::DEFAULT_TENANT)
    }
}

impl Coordinator {
    pub fn new(tenant: &str) -> Self {
        // Member ids carry this so ids of an earlier run of the node are not handed out again.
        Coordinator {
            groups: Mutex::new(Groups::new(boot_stamp())),
            start: Instant::now(),
            ctx: RequestCtx {
                tenant: tenant.to_string(),
                principal: None,
                access: Access::Open,
            },
            led_term: Mutex::new(None),
            epoch: AtomicU64::new(0),
        }
    }

    fn led_term(&self) -> MutexGuard<'_, Option<u64>> {
        self.led_term
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Forgets every group in memory. Members parked in a join or a sync are answered (their
    /// senders dropped: UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS) and rejoin.
    fn forget(&self) {
        let mut groups = self.lock();
        *groups = Groups::new(boot_stamp());
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// Called when another node is known to lead this tenant's clustered group: the groups
    /// this node held while it led go now, not when it leads again, so members parked here
    /// are sent on at once instead of waiting out their rebalance timeout (review s23 lead
    /// M2). A node that merely lost the majority's contact (no leader known) keeps them.
    pub fn not_leading(&self) {
        let mut led = self.led_term();
        if led.take().is_some() {
            self.forget();
        }
    }

    /// Called whenever a coordinator API finds this node leading its tenant's clustered
    /// group under `term`. Leading under a new term forgets every in-memory group: they were
    /// built when this node led before, and meanwhile another leader may have minted newer
    /// generations whose members committed there. Kept, a zombie member of the old
    /// generation would pass `may_commit` and heartbeats here again and rewind offsets
    /// (review s22 kmeta M3); forgotten, every member rejoins and the engine mints the next
    /// generation from the replicated one.
    pub fn lead_under(&self, term: u64) {
        let mut led = self.led_term();
        if *led != Some(term) {
            if led.is_some() {
                tracing::info!(term, tenant = %self.ctx.tenant, "kafka groups forgotten: this node leads again under a new term");
            }
            self.forget();
            *led = Some(term);
        }
    }

    pub fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The machine. Its methods do not panic on client input; should one ever, the state it
    /// left is still the best there is, so a poisoned lock is taken over, not propagated.
    pub fn lock(&self) -> MutexGuard<'_, Groups> {
        self.groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub async fn join(&self, door: &Door, args: JoinArgs) -> JoinAnswer {
        let member = args.member_id.clone();
        let step = self.lock().join(args, self.now());
        self.drive(door).await;
        match step {
            Step::Now(a) => a,
            // The member was removed while it waited (it left, or was fenced).
            Step::Wait(rx) => rx
                .await
                .unwrap_or_else(|_| JoinAnswer::error(e::UNKNOWN_MEMBER_ID, &member)),
        }
    }

    pub async fn sync(&self, step: Step<SyncAnswer>) -> SyncAnswer {
        match step {
            Step::Now(a) => a,
            Step::Wait(rx) => rx
                .await
                .unwrap_or_else(|_| SyncAnswer::error(e::REBALANCE_IN_PROGRESS)),
        }
    }

    /// Completes every join phase that can complete: the engine mints the generation, then
    /// the waiting members are answered. A failed mint answers them with a retriable error.
    pub async fn drive(&self, door: &Door) {
        self.drive_on(door.bus.as_ref()).await;
    }

    async fn drive_on(&self, bus: &dyn Bus) {
        let (ready, epoch) = {
            let mut groups = self.lock();
            (
                groups.take_ready(self.now()),
                self.epoch.load(Ordering::SeqCst),
            )
        };
        for (group, ptype, pname) in ready {
            let minted =
                durable::next_generation(bus, self.ctx.clone(), &group, &ptype, &pname).await;
            let mut groups = self.lock();
            if self.epoch.load(Ordering::SeqCst) != epoch {
                // The groups were forgotten while the generation was minted: its phase is
                // gone, and a group of the same name formed since is not its.
                return;
            }
            match minted {
                Ok(generation) => groups.complete_join(&group, generation, self.now()),
                Err(err) => {
                    tracing::warn!(%group, error = %err, "kafka group generation not written; members told to retry");
                    let code = e::coordinator_refusal(&err, e::COORDINATOR_NOT_AVAILABLE);
                    groups.abort_join(&group, code);
                }
            }
        }
    }

    /// Whether this node leads the tenant's clustered group, from `view`: leading under a
    /// term, or another node leads. Neither is known: nothing changes.
    pub fn observe(&self, view: &dyn ClusterView, node: i32) {
        match view.topology(&self.ctx.tenant) {
            Some(t) if t.leader == Some(node) => self.lead_under(t.term),
            Some(t) if t.leader.is_some() => self.not_leading(),
            _ => {}
        }
    }

    /// One tick of the timers: session expiry and join deadlines. The member bytes held.
    async fn tick(&self, bus: &dyn Bus) -> usize {
        let now = self.now();
        self.lock().expire(now);
        self.drive_on(bus).await;
        self.lock().bytes()
    }
}

/// Member ids carry this so ids of an earlier run (or an earlier lead) of the node are not
/// handed out again.
fn boot_stamp() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The coordinators of the tenants seen so far. Tenants come from the configured SASL users
/// (or the one open context), so the map stays as small as that list.
#[derive(Default)]
pub struct Tenants {
    map: Mutex<HashMap<String, Arc<Coordinator>>>,
}

impl Tenants {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<Coordinator>>> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `tenant`'s coordinator, made on first use.
    pub fn get(&self, tenant: &str) -> Arc<Coordinator> {
        self.map()
            .entry(tenant.to_string())
            .or_insert_with(|| Arc::new(Coordinator::new(tenant)))
            .clone()
    }

    /// Runs until shutdown: every tenant's timers, and the member bytes of all of them. On a
    /// cluster (`cluster`: the view and this node's broker id) each tick also tells each
    /// tenant's coordinator whether this node leads its group.
    pub async fn run_timers(
        &self,
        bus: Arc<dyn Bus>,
        cluster: Option<(Arc<dyn ClusterView>, i32)>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut every = tokio::time::interval(TICK);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => {
                    let all: Vec<Arc<Coordinator>> = self.map().values().cloned().collect();
                    let mut bytes = 0usize;
                    for c in all {
                        if let Some((view, node)) = &cluster {
                            c.observe(view.as_ref(), *node);
                        }
                        bytes = bytes.saturating_add(c.tick(bus.as_ref()).await);
                    }
                    metrics::gauge!("queen_kafka_group_member_bytes").set(bytes as f64);
                }
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        break;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join_args(member: &str) -> JoinArgs {
        // A v3 member (no MEMBER_ID_REQUIRED round), so the group forms at once.
        let mut a = super::super::machine::tests::args(member, &["range"]);
        a.require_known_member = false;
        a
    }

    #[test]
    fn leading_again_under_a_new_term_forgets_the_groups_held_in_memory() {
        let c = Coordinator::default();
        c.lead_under(3);
        let _ = c.lock().join(join_args(""), c.now());
        assert!(c.lock().get("g").is_some());
        // Still the same term: the members stay.
        c.lead_under(3);
        assert!(c.lock().get("g").is_some());
        // Another node led meanwhile and this one leads again: nothing old is trusted.
        c.lead_under(5);
        assert!(c.lock().get("g").is_none());
    }

    /// A cluster whose leader and term a test sets.
    #[derive(Debug)]
    struct View(Mutex<(Option<i32>, u64)>);

    impl ClusterView for View {
        fn topology(&self, _tenant: &str) -> Option<crate::cluster::Topology> {
            let (leader, term) = *self.0.lock().unwrap();
            Some(crate::cluster::Topology {
                brokers: Vec::new(),
                leader,
                replicas: vec![1, 2, 3],
                term,
            })
        }

        fn metadata_reads(&self) -> Arc<dyn Bus> {
            unreachable!("not asked by these tests")
        }
    }

    #[test]
    fn what_the_view_says_decides_what_is_kept() {
        let c = Coordinator::default();
        let view = View(Mutex::new((Some(1), 3)));
        c.observe(&view, 1);
        let _ = c.lock().join(join_args(""), c.now());
        // A lapse of the majority's contact names no leader: the members stay.
        *view.0.lock().unwrap() = (None, 3);
        c.observe(&view, 1);
        assert!(c.lock().get("g").is_some());
        // Node 2 leads: the groups go at once, not when this node leads again.
        *view.0.lock().unwrap() = (Some(2), 4);
        c.observe(&view, 1);
        assert!(c.lock().get("g").is_none());
        // Leading again: a fresh start, and what forms now is kept under the term.
        *view.0.lock().unwrap() = (Some(1), 5);
        c.observe(&view, 1);
        let _ = c.lock().join(join_args(""), c.now());
        c.observe(&view, 1);
        assert!(c.lock().get("g").is_some());
        assert_eq!(c.epoch.load(Ordering::SeqCst), 3, "three starts afresh");
    }
}
