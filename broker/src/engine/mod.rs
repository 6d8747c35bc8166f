//! The engine: one task that drains the bus into group-commit cycles, plans each command
//! against the state, proposes ONE Raft entry per cycle, and answers after it commits.
//!
//! Planning applies each effect to the in-memory state at once (the same `apply` replay uses),
//! so later commands of the cycle see earlier ones; the entry's cycle number lets the Raft apply
//! callback skip what the planner already applied. If a proposal fails, memory is ahead of the
//! log: the engine stops the process (fail-stop), and a restart rebuilds from checkpoint + log.

pub mod apply_handler;
mod bus;
mod bus_waits;
mod compactor;
mod failure;
mod long_poll_slots;
#[cfg(test)]
mod loop_tests;
mod metrics_sample;
mod panic_guard;
pub(crate) mod reclaim;
mod waiters;

pub use queenmq_engine::log;
use queenmq_engine::{cache, cycle, limits, plan, reader};

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use queenmq_protocol::{Command, Outcome, PopResult, QueenError, RequestCtx};
use queenmq_storage::StateStore;
use tokio::sync::{mpsc, oneshot, watch};

pub use bus::EngineBus;
pub use bus_waits::BusWaits;
pub use failure::Failure;
pub use long_poll_slots::{LongPollSlot, LongPollSlots, NoSlot};
pub mod bus_prometheus {
    pub use super::bus::PrometheusRender as Render;
}
use cache::EntryCache;
use cycle::Cycle;
use limits::Limits;
use log::SharedLog;
pub use metrics_sample::MetricsSample;
use plan::{Planner, PopPlan};
use waiters::Waiters;

use crate::state::{
    begin_checkpoint, cow_clock, State, CURSOR_FOLDS_PER_CYCLE, PARTITION_FOLDS_PER_CYCLE,
};

/// The engine's copies of blocks a checkpoint still shared, in one stretch it held the state
/// lock (`cow_clock`): the part of the checkpoint's pause that moved to the first writes.
/// Each kind of block's share too, so a slow stretch names the block that made it slow.
fn record_cow_copies(tenant: &str, copies: cow_clock::Copies) {
    if copies.copies == 0 {
        return;
    }
    metrics::histogram!("queen_checkpoint_cow_copy_seconds", "tenant" => tenant.to_string())
        .record(copies.took.as_secs_f64());
    metrics::counter!("queen_checkpoint_cow_copies_total", "tenant" => tenant.to_string())
        .increment(copies.copies);
    for block in cow_clock::Block::ALL {
        let (n, took) = copies.by_block[block as usize];
        if n > 0 {
            metrics::histogram!("queen_checkpoint_cow_block_seconds", "tenant" => tenant.to_string(), "block" => block.label())
                .record(took.as_secs_f64());
            // How many: a slow stretch of many small copies (scattered first writes) and one
            // of a few slow ones (a preempted thread) look alike in the seconds (session 30).
            metrics::histogram!("queen_checkpoint_cow_stretch_copies", "tenant" => tenant.to_string(), "block" => block.label())
                .record(n as f64);
        }
    }
}

pub type Reply = oneshot::Sender<Result<Outcome, QueenError>>;

pub struct Job {
    pub ctx: RequestCtx,
    pub cmd: Command,
    pub reply: Reply,
}

/// State shared by the engine task, the Raft apply callback and node-local reads.
pub struct Shared {
    state: Mutex<State>,
    /// What `/metrics` renders, copied out of the state by the engine on its own schedule, so
    /// a scrape never walks the state under its lock.
    pub sample: metrics_sample::SampleSlot,
}

impl Shared {
    pub fn new(state: State) -> Arc<Self> {
        Arc::new(Shared {
            state: Mutex::new(state),
            sample: Default::default(),
        })
    }

    /// The state lock; a poisoned lock means a panic mid-apply, and the state is still the
    /// best we have: the process is about to stop anyway.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub max_batch: usize,
    pub max_bytes: usize,
    pub checkpoint_interval: Duration,
    /// Time between the starts of two retention sweeps (plan/retention.rs).
    pub retention_interval: Duration,
    pub cache_bytes: usize,
    /// The page cache of the group's state store (redb).
    pub store_cache_bytes: usize,
    pub queue_depth: usize,
    /// The log's largest record: no cycle's entry may pass it.
    pub record_limit: usize,
    /// Partitions one push or transaction may create.
    pub max_new_partitions: usize,
    /// Long-poll pops parked at once on this node: one set of slots shared by every group
    /// (each group's config is a clone of the node's).
    pub long_polls: Arc<LongPollSlots>,
    /// What this group holds in the node's held pools (its `Accountant` sets it, the bus
    /// reads it for fair admission); one per group, set by the registry.
    pub group_held: Arc<std::sync::atomic::AtomicUsize>,
    /// The node's memory pools and budget; None (tests) accounts nothing.
    pub memory: Option<Arc<crate::memory::Memory>>,
    /// The time of each cycle and of the timers it checks.
    pub clock: Arc<dyn crate::time::Clock>,
    /// The tenant whose group this engine runs: the `tenant` label of its metrics.
    pub tenant: Arc<str>,
    /// Where the group's log lives when not in files under its directory: tests inject a
    /// backend that can fail its fsyncs (storage's `MemBackend`).
    pub log_backend: Option<LogBackend>,
    /// The node's free-space gate; None (tests) refuses nothing.
    pub disk: Option<Arc<crate::disk_gate::DiskGate>>,
    /// Whether dead log segments are deleted after checkpoints, and the file that pauses it.
    pub reclaim: reclaim::Reclaimer,
    /// `compaction_enabled`: false copies nothing (reclamation off copies nothing either).
    pub compaction_enabled: bool,
    /// The broker key that seals the payloads of encrypted queues; None refuses them.
    pub encryption: Option<Arc<crate::encryption::PayloadKey>>,
    /// A transactional id with no open transaction and nothing done this long is forgotten
    /// (`kafka_transactional_id_expiration_ms`).
    pub kafka_transactional_id_expiration_ms: u64,
    /// This node as a cluster member (the `default` group then runs over TCP and plans only
    /// while it leads); None: the single-node broker.
    pub cluster: Option<crate::cluster_member::Member>,
    /// A tenant's group of a cluster member (`cluster_tenant_groups`): its declared voters
    /// and their addresses (`cluster_member::GroupFiles::tenant_voters`).
    pub tenant_voters: Option<std::collections::BTreeMap<u64, queenmq_raft::BasicNode>>,
    /// With `tenant_voters`: the group's directory was lost since its first open here.
    pub tenant_lost: bool,
    /// Tests: wraps the group's log as each incarnation starts (a log that fails on cue).
    pub log_wrap: Option<LogWrap>,
}

/// Wraps a group's log (tests: the supervisor's reaction to a log's failures).
#[derive(Clone)]
pub struct LogWrap(pub Arc<dyn Fn(log::SharedLog) -> log::SharedLog + Send + Sync>);

impl std::fmt::Debug for LogWrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogWrap")
    }
}

/// A group's log backend, shown by name only.
#[derive(Clone)]
pub struct LogBackend(pub Arc<dyn queenmq_storage::IoBackend>);

impl std::fmt::Debug for LogBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogBackend")
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_batch: 4096,
            max_bytes: 4 << 20,
            checkpoint_interval: Duration::from_secs(30),
            retention_interval: Duration::from_secs(1),
            cache_bytes: 256 << 20,
            store_cache_bytes: queenmq_storage::STATE_CACHE_BYTES,
            queue_depth: 16_384,
            record_limit: queenmq_storage::LogOptions::default().max_record_bytes as usize,
            max_new_partitions: 10_000,
            kafka_transactional_id_expiration_ms:
                queenmq_protocol::kafka_txns::DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS,
            long_polls: LongPollSlots::new(20_000),
            group_held: Default::default(),
            memory: None,
            clock: Arc::new(crate::time::SystemClock),
            tenant: Arc::from(queenmq_protocol::DEFAULT_TENANT),
            log_backend: None,
            disk: None,
            reclaim: reclaim::Reclaimer::default(),
            compaction_enabled: true,
            encryption: None,
            cluster: None,
            tenant_voters: None,
            tenant_lost: false,
            log_wrap: None,
        }
    }
}

pub struct Engine {
    shared: Arc<Shared>,
    log: SharedLog,
    store: Arc<StateStore>,
    cfg: EngineConfig,
    rx: Jobs,
    cache: EntryCache,
    waiters: Waiters,
    limits: Limits,
    /// Jobs a full cycle (by bytes) left for the next one, in arrival order.
    carry: VecDeque<Job>,
    /// Test-only fault hook (QUEEN_TEST_PANIC_AFTER_CYCLES): panic after this many cycles.
    panic_after: Option<u64>,
    /// Queues whose parked pops should be re-planned in the next cycle.
    woken: std::collections::HashSet<String>,
    last_checkpoint: Instant,
    checkpointed_index: Option<u64>,
    /// The checkpoint being written to the state store, if any.
    saving: Option<tokio::task::JoinHandle<SaveResult>>,
    /// A checkpoint write failed: the state store must be reopened (`finish_save`).
    store_failed: Option<String>,
    memory: Option<crate::memory::Accountant>,
    /// Where the running retention sweep is, and when the last one started.
    retention: plan::RetentionSweep,
    last_retention: Instant,
    last_txn_expiry: Instant,
    /// How far the log may be reclaimed once the next checkpoint is durable: what the
    /// generation that becomes the older one kept allows (reclaim.rs). None: nothing.
    reclaim_bound: Option<u64>,
    /// The last save allowed more than it deleted: one more save, even of an unchanged
    /// state, lets it go (else an idle node keeps dead segments until something is written).
    reclaim_pending: bool,
    /// A checkpoint let go of the cursor shards: their overlays are folded a bounded number a
    /// cycle until none is left (review s30 M1).
    fold_overlays: bool,
    reclaimer: reclaim::Reclaimer,
    compactor: compactor::Compactor,
    /// This tenant's checkpoints in the disk gate's loan floor (review s17 compactor M3).
    checkpoints: Option<Arc<crate::disk_gate::CheckpointSlot>>,
    /// The shutdown signal `run` was given, for the waits inside a cycle.
    stop: Option<watch::Receiver<bool>>,
}

/// A checkpoint written, skipped for want of space (None), or failed.
type SaveResult = Result<Option<Saved>, String>;

struct Saved {
    index: u64,
    bytes: usize,
    secs: f64,
    /// How far the log may go once a later checkpoint has replaced the older generation.
    reclaim_bound: Option<u64>,
    /// How far this save's reclamation was allowed to go.
    reclaimed_upto: Option<u64>,
}

/// Long-poll answers leave this much before the client's deadline.
const REPLY_MARGIN: Duration = Duration::from_millis(50);
const TICK: Duration = Duration::from_millis(100);
/// Due timers fired per cycle at most; the rest fire in the next cycles (one per tick at
/// least), so a burst of due timers never holds the requests of a cycle behind it.
const TIMERS_FIRED_PER_CYCLE: usize = 256;
/// How often the leader looks for idle transactional ids to forget.
const TXN_EXPIRY_INTERVAL: Duration = Duration::from_secs(1);
/// Where a long poll's deadline lands when the client's timeout does not fit in an Instant.
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// A group's queue of jobs. It outlives the group's engines: the bus keeps sending into it
/// while a failed engine is replaced, and each engine holds it locked while it runs (a
/// panicking one lets go as it unwinds).
pub type JobQueue = Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>;
/// The job queue, held by the engine that runs.
pub type Jobs = tokio::sync::OwnedMutexGuard<mpsc::Receiver<Job>>;

/// A group's job queue, `depth` jobs deep (back-pressure for the doors).
pub fn job_queue(depth: usize) -> (mpsc::Sender<Job>, JobQueue) {
    let (tx, rx) = mpsc::channel(depth);
    (tx, Arc::new(tokio::sync::Mutex::new(rx)))
}

impl Engine {
    pub fn new(
        shared: Arc<Shared>,
        log: SharedLog,
        store: Arc<StateStore>,
        cfg: EngineConfig,
        rx: Jobs,
    ) -> Engine {
        let checkpointed_index = shared.lock().applied.map(|a| a.0);
        let memory = cfg
            .memory
            .clone()
            .map(|m| crate::memory::Accountant::new(m, cfg.group_held.clone()));
        Engine {
            shared,
            log,
            store,
            cache: EntryCache::new(cfg.cache_bytes),
            cfg: cfg.clone(),
            rx,
            waiters: Waiters::new(cfg.long_polls.clone(), cfg.tenant.clone()),
            limits: Limits::new(cfg.record_limit, cfg.max_bytes, cfg.max_new_partitions),
            carry: VecDeque::new(),
            panic_after: panic_guard::test_panic_after(),
            woken: Default::default(),
            last_checkpoint: Instant::now(),
            checkpointed_index,
            saving: None,
            store_failed: None,
            memory,
            retention: Default::default(),
            last_retention: Instant::now(),
            last_txn_expiry: Instant::now(),
            reclaim_bound: None,
            reclaim_pending: false,
            fold_overlays: false,
            reclaimer: reclaim::Reclaimer::new(cfg.reclaim.enabled, cfg.reclaim.pause_file.clone()),
            compactor: compactor::Compactor::new(
                cfg.reclaim.enabled && cfg.compaction_enabled,
                cfg.tenant.clone(),
            ),
            checkpoints: cfg.disk.as_ref().map(|d| Arc::new(d.checkpoint_slot())),
            stop: None,
        }
    }

    /// The state was loaded from a checkpoint of `encoded` bytes: until this engine writes
    /// its own, loans allow for one that size (review s17 compactor L1).
    pub fn expecting_checkpoint(self, encoded: u64) -> Engine {
        if let Some(c) = &self.checkpoints {
            c.anticipate(encoded);
        }
        self
    }

    /// The state was loaded from a checkpoint that allows reclaiming the log up to `bound`
    /// (`open::Opened::reclaim_bound`): the first save may go that far.
    pub fn reclaiming_from(mut self, bound: Option<u64>) -> Engine {
        self.reclaim_bound = bound;
        self.reclaim_pending = self.reclaimer.enabled && bound.is_some();
        self
    }

    /// Runs until `shutdown` turns true (or every bus handle is dropped), then answers parked
    /// pops empty and writes a final checkpoint: `Ok`. A proposal that fails, or a panic,
    /// ends it with `Err(why)` instead: the state in memory may be ahead of the log, so the
    /// group's supervisor drops it and rebuilds the group from checkpoint and log. Requests
    /// of the failed cycle are answered `unavailable` (retriable); the others wait in the
    /// job queue for the rebuilt engine.
    pub async fn run(self, shutdown: watch::Receiver<bool>) -> Result<(), Failure> {
        panic_guard::CatchPanic::new(self.run_inner(shutdown)).await
    }

    async fn run_inner(mut self, mut shutdown: watch::Receiver<bool>) -> Result<(), Failure> {
        self.stop = Some(shutdown.clone());
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // A receiver made after the stop was sent (a group that finished starting during
            // shutdown) never sees `changed()` fire: read the value too.
            if *shutdown.borrow() {
                break;
            }
            if self.log.install_staged() {
                // Its state is the old one and its log refuses appends: the reopen finishes
                // the install and starts from the installed checkpoint. No final checkpoint
                // (saves are refused until then). A reload at once, as after a lost lead.
                return Err(Failure {
                    why: "a snapshot from the leader was staged; the group reopens to install it"
                        .to_string(),
                    deposed: true,
                    stopping: false,
                });
            }
            let mut jobs: Vec<Job> = self.carry.drain(..).collect();
            // Carried jobs left the requests pool when they were first drained.
            let carried = jobs.len();
            let mut ticked = false;
            if self.woken.is_empty() && jobs.is_empty() {
                tokio::select! {
                    j = self.rx.recv() => match j {
                        Some(j) => jobs.push(j),
                        None => break,
                    },
                    _ = tick.tick() => ticked = true,
                    _ = shutdown.changed() => break,
                }
            }
            let mut bytes = 0usize;
            while jobs.len() < self.cfg.max_batch && bytes < self.cfg.max_bytes {
                match self.rx.try_recv() {
                    Ok(j) => {
                        bytes += approx_size(&j.cmd);
                        jobs.push(j);
                    }
                    Err(_) => break,
                }
            }
            // The requests stay counted until the cycle that plans them has answered: their
            // payloads live (and are copied into the entry) until then. A guard, so a cycle
            // that fails or panics gives them back too.
            let _drained = self.memory.as_ref().map(|m| {
                let bytes = jobs[carried..].iter().fold(0usize, |a, j| {
                    a.saturating_add(crate::memory::size::request_bytes(&j.cmd))
                });
                crate::memory::Queued::counted(m.memory().clone(), bytes)
            });
            match self.follower_refusal() {
                Some(refusal) => self.refuse(jobs, refusal),
                None => self.cycle(jobs, ticked).await?,
            }
            self.refresh_sample();
            if self.saving.as_ref().is_some_and(|h| h.is_finished()) {
                if let Some(h) = self.saving.take() {
                    self.finish_save(h.await);
                }
            }
            // Here, not in `cycle`: a follower checkpoints too but plans no cycle, and its
            // applies write through overlays as the leader's cycles do.
            if self.fold_overlays && self.saving.is_none() {
                self.fold_overlays();
            }
            if self.checkpoint_due() {
                self.checkpoint(false).await;
            }
            if let Some(e) = self.store_failed.take() {
                return Err(format!("writing a checkpoint failed: {e}").into());
            }
        }
        self.waiters.answer_all_empty();
        self.checkpoint(true).await;
        Ok(())
    }

    /// Whether this engine may plan a tenant declaration (effect 67): only the `default` group
    /// of a cluster member with `cluster_tenant_groups` (review s30 tenants L2). Only the
    /// registry of such a node sends one today; refused here too, a node with the key off
    /// never puts a declaration into its state, so its checkpoints keep no section 9 and stay
    /// readable by a build before s30.
    fn declares_tenants(&self) -> bool {
        &*self.cfg.tenant == queenmq_protocol::DEFAULT_TENANT
            && self
                .cfg
                .cluster
                .as_ref()
                .is_some_and(|m| m.declarations.is_some())
    }

    /// In a cluster, why this engine may not plan now (a follower, a candidate, a leader not
    /// yet caught up with its log); None when it may, and always on a single node. Committed
    /// entries reach the state through `EngineApply` meanwhile.
    fn follower_refusal(&self) -> Option<QueenError> {
        let member = self.cfg.cluster.as_ref()?;
        let s = self.log.status();
        if crate::cluster_member::may_plan(&s) {
            return None;
        }
        Some(member.refusal(&s))
    }

    /// Waits for a cycle's entry under a cluster's write limit. By the limit it is answered
    /// as usual; past it its requests are answered "may or may not be done" and the engine
    /// waits one more limit for the entry (review s18 K4), then fails (a rebuild: review s19
    /// lead M1, bounded part). Through that second wait it refuses new requests at once,
    /// answers parked polls empty and stops on shutdown without writing a checkpoint (its
    /// state is ahead of the log), rather than leaving each request to the bus's bound
    /// (review s19 lead M1, the rest). `None`: the node is stopping (its requests are
    /// answered already).
    async fn late_entry(
        &mut self,
        mut proposed: log::ProposeFuture,
        limit: Duration,
        replies: &mut Vec<(Reply, Result<Outcome, QueenError>, bool)>,
        number: u64,
    ) -> Option<Result<(u64, u64), log::LogError>> {
        let mut stop = self.stop.clone();
        // A stop during the limit is watched too (review s21 lead A3): the requests are then
        // answered at once, as at the limit, and the engine ends as in the wait below.
        let stopping = tokio::select! {
            // Biased: an entry that committed by the limit is answered as done.
            biased;
            written = &mut proposed => return Some(written),
            () = tokio::time::sleep(limit) => false,
            _ = stopped(&mut stop) => true,
        };
        if !stopping {
            tracing::warn!(cycle = number, limit_ms = limit.as_millis() as u64, "a cycle's entry did not commit within the write limit: its requests are answered, the engine waits for the entry");
        }
        // The writes whose outcome is unknown; reads and refusals keep their own answers' sense.
        let unknown = replies
            .iter()
            .filter(|(_, out, writes)| *writes && out.is_ok())
            .count();
        metrics::counter!("queen_writes_answered_at_limit_total", "tenant" => self.cfg.tenant.to_string())
            .increment(unknown as u64);
        for (reply, out, _) in replies.drain(..) {
            let _ = reply.send(out.and(Err(QueenError::unavailable(format!(
                "the write did not commit within {} ms: the request may or may not be done; retry",
                limit.as_millis()
            )))));
        }
        self.waiters.answer_all_empty();
        if stopping {
            return None;
        }
        let until = tokio::time::Instant::now() + limit;
        let mut open = true;
        loop {
            if stop.as_ref().is_some_and(|s| *s.borrow()) {
                return None;
            }
            tokio::select! {
                biased;
                written = &mut proposed => return Some(written),
                () = tokio::time::sleep_until(until) => {
                    return Some(Err(log::LogError::propose(format!(
                        "the entry did not commit within twice the write limit ({} ms each)",
                        limit.as_millis()
                    ))))
                }
                _ = stopped(&mut stop) => {}
                job = self.rx.recv(), if open => match job {
                    Some(job) => self.refuse_while_late(job, limit),
                    None => open = false,
                },
            }
        }
    }

    /// A request that arrived while the engine waits for a late entry: refused at once and
    /// retriably (its plan would stand on state the log may never hold).
    fn refuse_while_late(&self, job: Job, limit: Duration) {
        let _taken = self.memory.as_ref().map(|m| {
            crate::memory::Queued::counted(
                m.memory().clone(),
                crate::memory::size::request_bytes(&job.cmd),
            )
        });
        let _ = job.reply.send(Err(QueenError::unavailable(format!(
            "this node waits for a write that did not commit within {} ms (its write limit); \
             retry",
            limit.as_millis()
        ))));
    }

    /// Answers every job, and every parked pop, without planning anything: on a follower
    /// the state changes only by what the leader commits.
    fn refuse(&mut self, jobs: Vec<Job>, refusal: QueenError) {
        for job in jobs {
            let _ = job.reply.send(Err(refusal.clone()));
        }
        self.waiters.answer_all_empty();
        self.woken.clear();
    }

    async fn cycle(&mut self, jobs: Vec<Job>, ticked: bool) -> Result<(), Failure> {
        let started = Instant::now();
        // Each reply with whether its command writes: a cycle whose append fails answers a write
        // 507/503, a read 503 (its answer saw state the log never got), a refusal as decided.
        let mut replies: Vec<(Reply, Result<Outcome, QueenError>, bool)> =
            Vec::with_capacity(jobs.len());
        let removed: Vec<(String, u64)>;
        let compacted;
        let mut loan;
        let declares = self.declares_tenants();
        let (entry, appended, copied, number) = {
            let mut st = self.shared.lock();
            // What this thread copied before (a follower's apply) is not this cycle's.
            let _ = cow_clock::take();
            let mut cycle = Cycle::next(&st, self.cfg.clock.now_us());
            let now = cycle.now_us;
            let mut planner = Planner {
                st: &mut st,
                cycle: &mut cycle,
                cache: &mut self.cache,
                log: self.log.as_ref(),
                memory: self
                    .cfg
                    .memory
                    .as_deref()
                    .map(|m| m as &dyn plan::MemoryGate),
                tenant: &self.cfg.tenant,
                seal: self
                    .cfg
                    .encryption
                    .as_deref()
                    .map(|k| k as &dyn queenmq_engine::seal::PayloadSeal),
                max_tenants: self
                    .cfg
                    .cluster
                    .as_ref()
                    .and_then(|m| m.declarations.as_ref())
                    .map_or(u64::MAX, |d| d.max_tenants()),
            };
            // Due timers write data the gate never saw as a request: they fire only into the
            // room the gate leaves above the reserve, and otherwise stay due (no write at all).
            let (cycle_bytes, max_entry_bytes) = gated_limits(
                &self.limits,
                self.cfg.disk.as_deref(),
                planner.cycle.entry.len(),
            );
            planner.fire_timers(TIMERS_FIRED_PER_CYCLE, cycle_bytes, max_entry_bytes);
            // Transactions open past their timeout end here, as Kafka's coordinator's timer
            // aborts them; their markers are data and fit the same room as the timers.
            planner.sweep_kafka_txns(max_entry_bytes);
            // Idle transactional ids: a scan of every row, so once a second, not per cycle.
            if self.last_txn_expiry.elapsed() >= TXN_EXPIRY_INTERVAL {
                self.last_txn_expiry = Instant::now();
                planner.expire_kafka_txn_ids(
                    max_entry_bytes,
                    self.cfg.kafka_transactional_id_expiration_ms,
                );
            }
            // Before any pop of the cycle, so none delivers a message this entry removes.
            if !self.retention.running()
                && self.last_retention.elapsed() >= self.cfg.retention_interval
            {
                let since = self.last_retention.elapsed();
                self.last_retention = Instant::now();
                let since_us = i64::try_from(since.as_micros()).unwrap_or(i64::MAX);
                self.retention.start_at(now, since_us);
            }
            removed = planner.plan_retention(&mut self.retention, self.limits.max_entry_bytes);
            let woken = std::mem::take(&mut self.woken);
            let due = self.waiters.take_due(&woken, ticked, now, planner.st);
            for w in due {
                let (deadline, slot) = (w.deadline, w.slot);
                let writes = writes(&w.job.cmd);
                match plan_job(&mut planner, w.job) {
                    Planned::Reply(reply, out) => replies.push((reply, out, writes)),
                    Planned::Park(job) => {
                        if Instant::now() + REPLY_MARGIN >= deadline {
                            let empty = empty_pop(&job);
                            replies.push((job.reply, empty, writes));
                        } else {
                            self.waiters.park_holding(job, deadline, slot);
                        }
                    }
                }
            }
            // Before any pop of the cycle: the pops leave the Kafka admin reads their share
            // only when the batch holds one (review s19 kafka M2; the groups' List and
            // whole-group Fetch share the grant, review s19 kafka H2; a consumer's
            // named-partition Fetch is consumption, charged with the pops: s20 kafka L1).
            planner.cycle.has_admin_reads = jobs
                .iter()
                .any(|j| queenmq_engine::plan::kafka_txn_reads::is_admin_read(&j.cmd));
            let mut jobs = jobs.into_iter();
            // A cycle given to the compactor (review H2): its jobs wait, in order, for the
            // next one.
            let alone = self.compactor.take_cycle_alone();
            if alone {
                self.carry.extend(jobs.by_ref());
            }
            let mut planned = 0usize;
            while let Some(job) = jobs.next() {
                // The limits first: a request too big or not allowed is refused for good,
                // never with a retriable 507 that would have it retried for ever.
                let producer = job.ctx.principal.as_deref();
                let bound = match self.limits.admit(planner.st, &job.cmd, producer) {
                    Ok(b) => b,
                    Err(e) => {
                        replies.push((job.reply, Err(e), false));
                        continue;
                    }
                };
                if matches!(job.cmd, Command::DeclareTenant { .. }) && !declares {
                    replies.push((job.reply, Err(undeclarable()), false));
                    continue;
                }
                // Before planning: a write the log could not take must not touch the state.
                let planned_bytes = planner.cycle.entry.len() as u64;
                if let Some(Err(e)) = self
                    .cfg
                    .disk
                    .as_ref()
                    .map(|d| d.admit(&job.cmd, planned_bytes))
                {
                    replies.push((job.reply, Err(e), false));
                    continue;
                }
                let after = planner.cycle.entry.len().saturating_add(bound);
                // The first job of a cycle is taken whatever the cycle cap (re-planned waiters
                // may have written first: a big push must not wait behind them for ever), as
                // long as the entry stays under the record limit.
                let full = if planned == 0 {
                    after > self.limits.max_entry_bytes
                } else {
                    after > self.limits.cycle_bytes
                };
                if full {
                    // Full by bytes: this job and every later one wait for the next cycle, in
                    // order, so no entry passes the record limit however the jobs add up.
                    self.carry.push_back(job);
                    self.carry.extend(jobs.by_ref());
                    break;
                }
                planned += 1;
                let writes = writes(&job.cmd);
                match plan_job(&mut planner, job) {
                    Planned::Reply(reply, out) => replies.push((reply, out, writes)),
                    Planned::Park(job) => {
                        let now = Instant::now();
                        let deadline = match &job.cmd {
                            // A client's timeout far in the future must not overflow Instant.
                            Command::Pop(p) => now
                                .checked_add(Duration::from_millis(p.timeout_ms))
                                .unwrap_or(now + MAX_WAIT),
                            _ => now,
                        };
                        self.waiters.park(job, deadline);
                    }
                }
            }
            // Background work, after the clients' (review C4): within what the cycle cap
            // leaves, or alone in an otherwise empty entry up to the entry cap (a run longer
            // than the cycle cap was once an Append alone). After retention, so nothing it
            // removes is copied. Held to the disk gate's room like a due timer: the space a
            // copy gives back comes only at a later checkpoint, and a copy that met ENOSPC
            // would rebuild the group and be planned again (review C1, docs/storage-format.md
            // "A full disk").
            let planned = planner.cycle.entry.len();
            let (cycle_cap, entry_cap) =
                gated_limits(&self.limits, self.cfg.disk.as_deref(), planned);
            let empty = alone || planner.cycle.entry.is_empty();
            let copy_max = copy_cap(empty, cycle_cap, entry_cap);
            // A copy that empties its segment may borrow a little of the reserve: on a full
            // node it is the only way a pinning segment goes (review H1).
            let ungated = copy_cap(empty, self.limits.cycle_bytes, self.limits.max_entry_bytes);
            // Only when a look is due: a loan counts against every group's free space.
            loan = self
                .cfg
                .disk
                .as_ref()
                .filter(|_| self.compactor.is_due())
                .map(|d| d.lend(planned as u64));
            compacted = self.compactor.plan(
                &mut planner,
                self.log.as_ref(),
                (copy_max, ungated, loan.as_ref().map_or(0, |l| l.bytes())),
                || self.reclaimer.would_run(),
            );
            // What the copy did not take goes back now; the rest stays counted until the
            // entry is (`begin_write`).
            if let Some(l) = &mut loan {
                l.keep(compacted.as_ref().map_or(0, |c| c.bytes));
            }
            planner.plan_kv_sweep(plan::KV_SWEEP_PER_CYCLE, self.limits.max_entry_bytes);
            planner.plan_streams_purge(plan::STREAMS_PURGE_PER_CYCLE, self.limits.max_entry_bytes);
            if let Some(m) = &mut self.memory {
                let engine = crate::memory::account::EngineSide {
                    cache_held: self.cache.held_bytes(),
                    waiters: self.waiters.len(),
                    waiter_job_size: std::mem::size_of::<Job>(),
                };
                m.after_cycle(&st, engine);
            }
            self.woken = std::mem::take(&mut cycle.woken_queues);
            record_cow_copies(&self.cfg.tenant, cow_clock::take());
            if cycle.entry.is_empty() {
                (None, Vec::new(), Vec::new(), 0)
            } else {
                if let Some(n) = self.panic_after {
                    panic_guard::maybe_panic(n);
                }
                st.last_cycle = cycle.number;
                st.last_now_us = cycle.now_us;
                let appended = std::mem::take(&mut cycle.appended);
                let copied = std::mem::take(&mut cycle.copied);
                (Some(cycle.entry.finish()), appended, copied, cycle.number)
            }
        };
        if let Some(entry) = entry {
            let size = entry.len();
            // One copy, as before, but into an exact-size buffer for the cache: the build
            // buffer (64 KiB at least, up to twice the entry once grown) goes to the log,
            // which drops it once written. Shrinking in place is not enough: allocators keep
            // a block that shrinks by less than half (issue 15).
            let cached = entry.as_slice().to_vec();
            // The build buffer and the cache's copy are held until the log has the entry.
            let _copies = self.cfg.memory.clone().map(|m| {
                crate::memory::Transient::new(m, entry.capacity().saturating_add(cached.len()))
            });
            // Counted against the free space while it is written, and until the next
            // reading of the file system has it.
            let _writing = self.cfg.disk.as_ref().map(|d| d.begin_write(size as u64));
            drop(loan);
            let proposed = self.log.propose(entry);
            let commands = replies.len();
            let written = match self.log.answer_limit() {
                None => proposed.await,
                Some(limit) => match self.late_entry(proposed, limit, &mut replies, number).await {
                    Some(written) => written,
                    None => {
                        return Err(Failure {
                            why: format!(
                                "the node stopped while cycle {number}'s entry was past its write limit"
                            ),
                            deposed: false,
                            stopping: true,
                        })
                    }
                },
            };
            match written {
                Ok((index, _term)) => {
                    {
                        let mut st = self.shared.lock();
                        let _ = cow_clock::take();
                        st.commit_pending_runs(&appended, index);
                        st.commit_copied_runs(&copied, index);
                        record_cow_copies(&self.cfg.tenant, cow_clock::take());
                    }
                    self.cache.insert_vec(index, cached);
                    let tenant = self.cfg.tenant.to_string();
                    // Counted once the log holds the trims: a failed proposal removed nothing.
                    for (queue, n) in removed {
                        metrics::counter!("queen_retention_removed_messages_total", "queue" => queue, "tenant" => tenant.clone())
                            .increment(n);
                    }
                    if let Some(c) = compacted.filter(|c| c.runs > 0) {
                        metrics::counter!("queen_compaction_bytes_copied_total", "tenant" => tenant.clone())
                            .increment(c.bytes);
                        metrics::counter!("queen_compaction_runs_copied_total", "tenant" => tenant.clone())
                            .increment(c.runs as u64);
                        if c.segment_done {
                            metrics::counter!("queen_compaction_segments_total", "tenant" => tenant.clone())
                                .increment(1);
                        }
                    }
                    metrics::histogram!("queen_group_commit_commands", "tenant" => tenant.clone())
                        .record(commands as f64);
                    metrics::histogram!("queen_group_commit_bytes", "tenant" => tenant.clone())
                        .record(size as f64);
                    metrics::histogram!("queen_group_commit_seconds", "tenant" => tenant)
                        .record(started.elapsed().as_secs_f64());
                }
                Err(crate::engine::log::LogError::HandingOver(why)) => {
                    // Never proposed: not done, safe to send again (to the next leader). The
                    // state planned for the cycle is ahead of the log, so the engine stops
                    // here and the node stops with it; the supervisor keeps the Raft node
                    // running for the hand-over until then (review s23 handover H1).
                    tracing::warn!(cycle = number, reason = %why, "a cycle was refused at the hand-over's fence: this group plans nothing more until the node stops");
                    for (reply, out, _) in replies {
                        let _ = reply.send(out.and(Err(QueenError::not_leader(None))));
                    }
                    return Err(Failure {
                        why: format!("cycle {number} refused: {why}"),
                        deposed: false,
                        stopping: true,
                    });
                }
                Err(e @ crate::engine::log::LogError::Deposed(_)) => {
                    // The entry may still commit (a new leader may hold it), or be cut: the
                    // state planned for it is not known to match the log either way. A lost
                    // lead is reloaded without the backoff.
                    let why = e.to_string();
                    tracing::warn!(cycle = number, reason = %why, "a cluster leader gave its cycle in flight up: its state is reloaded from checkpoint and log");
                    for (reply, out, _) in replies {
                        let _ = reply.send(out.and(Err(QueenError::unavailable(format!(
                            "{why}: the request may or may not be done; retry on the leader"
                        )))));
                    }
                    return Err(Failure {
                        why: format!("cycle {number} in flight when {why}"),
                        deposed: true,
                        stopping: false,
                    });
                }
                Err(e) => {
                    tracing::error!(cycle = number, error = %e, "proposing a cycle failed: memory is ahead of the log; the group is rebuilt from checkpoint and log");
                    // The disk filled between the gate's look and the write (another process,
                    // or a gate turned off): say so, the client waits for space rather than
                    // for the rebuild alone. Any other failure (EIO, a failed fsync) is not
                    // retried here: the group is rebuilt from what the log synced.
                    let full = log_error_is_enospc(&e);
                    if full {
                        if let Some(d) = &self.cfg.disk {
                            d.ran_out();
                        }
                    }
                    for (reply, out, writes) in replies {
                        let _ = reply.send(failed_cycle_reply(out, writes, full));
                    }
                    return Err(format!("proposing cycle {number} failed: {e}").into());
                }
            }
        }
        for (reply, out, _) in replies {
            let _ = reply.send(out);
        }
        self.waiters.expire(REPLY_MARGIN);
        Ok(())
    }

    /// Folds a bounded share of the overlays a finished checkpoint left, under the lock; the
    /// flag stays up, so the next cycles go on, while the bound stopped it. Timed
    /// (`queen_checkpoint_fold_seconds`): its frees ran in the save task before session 31
    /// and now run in a cycle's lock (review s31 ckpt L3).
    fn fold_overlays(&mut self) {
        let started = Instant::now();
        let mut st = self.shared.lock();
        let partitions = st.fold_partition_overlays(PARTITION_FOLDS_PER_CYCLE);
        let cursors = st.fold_cursor_overlays(CURSOR_FOLDS_PER_CYCLE);
        drop(st);
        self.fold_overlays = partitions || cursors;
        metrics::histogram!("queen_checkpoint_fold_seconds", "tenant" => self.cfg.tenant.to_string())
            .record(started.elapsed().as_secs_f64());
    }

    /// Whether a checkpoint should begin now. While folds are left it waits, up to another
    /// interval (review s31 ckpt M1): a checkpoint begun at once shares every chunk again,
    /// so a save as long as the interval left one bounded fold between two checkpoints and
    /// the overlays carried over, copied and grew round after round. Writes do not wait for
    /// it (the folds are bounded a cycle), only the checkpoint; and it waits at most an
    /// interval, as something else may hold the chunks (a snapshot stream) for longer.
    fn checkpoint_due(&self) -> bool {
        let elapsed = self.last_checkpoint.elapsed();
        let interval = self.cfg.checkpoint_interval;
        elapsed >= interval && (!self.fold_overlays || elapsed >= interval.saturating_mul(2))
    }

    /// Takes the state (under the lock: the engine pauses for what is not shared, see
    /// `begin_checkpoint`), encodes the rest and writes it to the state store in the
    /// background, so cycles go on during the encode and the write. The `last`
    /// checkpoint at shutdown waits for its write.
    async fn checkpoint(&mut self, last: bool) {
        if let Some(h) = self.saving.take() {
            if !last && !h.is_finished() {
                // Still writing the previous one: look again after the next cycle.
                self.saving = Some(h);
                return;
            }
            self.finish_save(h.await);
        }
        self.last_checkpoint = Instant::now();
        let encoding = Instant::now();
        let (pending, applied, floor) = {
            let st = self.shared.lock();
            match st.applied {
                // Also once more over an unchanged state when the last save left space to
                // give back: that save's bound waits for a newer generation (reclaim.rs).
                Some(a) if Some(a.0) != self.checkpointed_index || self.reclaim_pending => {
                    // Shares every shard again: nothing to fold until this one is finished.
                    self.fold_overlays = false;
                    (begin_checkpoint(&st), a, st.run_floor.lowest())
                }
                _ => return,
            }
        };
        metrics::histogram!("queen_checkpoint_encode_seconds", "tenant" => self.cfg.tenant.to_string())
            .record(encoding.elapsed().as_secs_f64());
        let held = self.memory.as_ref().map(|m| {
            m.checkpoint_started(pending.held_estimate(
                m.partition_bytes(),
                queenmq_storage::CHECKPOINT_CHUNK_BYTES,
                queenmq_storage::STATE_CACHE_BYTES,
            ))
        });
        let store = self.store.clone();
        let checkpoints = self.checkpoints.clone();
        let log = self.log.clone();
        let tenant = self.cfg.tenant.to_string();
        let reclaimer = self.reclaimer.clone();
        let upto = self.reclaim_bound.filter(|_| self.reclaimer.enabled);
        let reclaim_bound = reclaim::reclaimable_upto(applied.0, floor);
        // What a Raft snapshot of this checkpoint carries from the log: records from the run
        // floor on (docs/storage-format.md "Raft snapshot").
        let snapshot_floor = floor.map_or(applied.0.saturating_add(1), |f| {
            f.min(applied.0.saturating_add(1))
        });
        let started = Instant::now();
        let disk_short = self.cfg.disk.as_ref().is_some_and(|d| d.is_full());
        let save = tokio::task::spawn_blocking(move || {
            let bytes = |b: Option<u64>| {
                b.filter(|_| reclaimer.would_run())
                    .map_or(0, |u| log.reclaimable_bytes(u))
            };
            // What the segments this save lets go repay: those this save frees, or half of
            // those the next one will (two checkpoints are written before they go).
            let frees = bytes(upto).max(bytes(reclaim_bound) / 2);
            // A snapshot stream reads the slot this save would overwrite: skipped (nothing
            // written, nothing reclaimed) a bounded number of times, so the stream can finish
            // (review s27 snap M1; `StateStore::defer_save`). Never when the disk is short,
            // the save frees log or it is the last one (review s28 snap M3, L1).
            match store.defer_save(last || disk_short || frees > 0) {
                Ok(true) => {
                    metrics::counter!("queen_checkpoint_deferred_total", "tenant" => tenant.clone())
                        .increment(1);
                    tracing::info!(
                        index = applied.0,
                        "checkpoint deferred: a snapshot stream reads the slot it would overwrite"
                    );
                    drop(held);
                    return Ok(None);
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "checkpoint slots unreadable; saving anyway"),
            }
            // The partitions and the transaction-id rows are encoded here, off the engine
            // (shared chunks and frozen blocks), the rows straight into the store's chunks:
            // the checkpoint is never held whole.
            let pending = pending.encode();
            let size = pending.encoded_len();
            // A write that fails in the state store latches redb's I/O error for every later
            // write there, the Raft metadata's included: so a checkpoint that would eat into
            // the reserve is not tried (at shutdown too: the next start needs that space).
            // The log holds everything; the next start replays more.
            // Unless the segments its save lets go repay it (a full node gets space back):
            // those this save frees, or half of those the next one will (two checkpoints are
            // written before they go).
            // Counted as being written until saved: other tenants' checkpoints see it.
            let mut writing = None;
            if let Some(c) = &checkpoints {
                match c.fits(size as u64, frees) {
                    Some(w) => writing = Some(w),
                    None => {
                        drop(held);
                        return Ok(None);
                    }
                }
            }
            store
                .save_checkpoint_with_floor(applied.0, applied.1, snapshot_floor, |sink| {
                    pending.emit(|piece| sink.write(piece))
                })
                .map_err(|e| e.to_string())?;
            drop(writing);
            let saved = Saved {
                index: applied.0,
                bytes: size,
                secs: started.elapsed().as_secs_f64(),
                reclaim_bound,
                reclaimed_upto: upto,
            };
            crate::memory::give_back_freed();
            drop(held);
            // Only now is the checkpoint durable, and the older generation kept is the one
            // `upto` was computed for: the records below it may go.
            reclaimer.after_checkpoint(log.as_ref(), &tenant, upto)?;
            Ok(Some(saved))
        });
        if last {
            self.finish_save(save.await);
        } else {
            self.saving = Some(save);
        }
    }

    /// Copies what the metrics render out of the state when a scrape asked for it.
    fn refresh_sample(&mut self) {
        if !self.shared.sample.wanted() {
            return;
        }
        let sample = MetricsSample::take(&self.shared.lock());
        self.shared.sample.put(sample);
    }

    fn finish_save(&mut self, res: Result<SaveResult, tokio::task::JoinError>) {
        // The checkpoint's shards are dropped by now, whatever became of the save.
        self.fold_overlays = true;
        match res {
            // Skipped for want of space: the compactor looks again (review s18 H1).
            Ok(Ok(None)) => self.compactor.after_skipped_checkpoint(),
            Ok(Ok(Some(Saved {
                index,
                bytes: size,
                secs,
                reclaim_bound,
                reclaimed_upto,
            }))) => {
                self.checkpointed_index = Some(index);
                self.reclaim_bound = reclaim_bound;
                self.compactor.after_checkpoint();
                self.reclaim_pending = self.reclaimer.enabled
                    && reclaim_bound.is_some_and(|b| reclaimed_upto.is_none_or(|u| u < b));
                let tenant = self.cfg.tenant.to_string();
                metrics::histogram!("queen_checkpoint_seconds", "tenant" => tenant.clone())
                    .record(secs);
                metrics::gauge!("queen_checkpoint_bytes", "tenant" => tenant).set(size as f64);
                tracing::debug!(index, bytes = size, "checkpoint written");
            }
            Ok(Err(e)) => {
                // redb latches a failed write (PreviousIo) until the store is reopened, and
                // the Raft metadata shares the store: the group is failed on purpose, so the
                // supervisor rebuilds it on a reopened store from checkpoint and log.
                tracing::error!(error = %e, "checkpoint failed; the group is rebuilt on a reopened state store (the log holds everything)");
                self.store_failed = Some(e);
            }
            Err(e) => tracing::warn!(error = %e, "checkpoint task failed"),
        }
    }
}

/// Whether a command writes to the log when it succeeds.
fn writes(cmd: &Command) -> bool {
    crate::disk_gate::need(cmd) != crate::disk_gate::Need::Nothing
}

/// The answer to a job of a cycle whose append failed: a refusal stays what was decided
/// (nothing of it was to be written); a write was not made, 507 when the disk ran out (the
/// client waits for space), 503 otherwise; a read saw state the log never got, 503.
fn failed_cycle_reply(
    out: Result<Outcome, QueenError>,
    writes: bool,
    full: bool,
) -> Result<Outcome, QueenError> {
    match out {
        Err(e) => Err(e),
        Ok(_) if writes && full => Err(crate::disk_gate::storage_full(
            "a log append found no space",
        )),
        Ok(_) => Err(QueenError::unavailable(
            "the broker's log failed; this queue group is being rebuilt, retry",
        )),
    }
}

/// Whether a failed proposal met a full disk (ENOSPC) rather than a failed one.
fn log_error_is_enospc(e: &crate::engine::log::LogError) -> bool {
    match e {
        crate::engine::log::LogError::Propose(cause)
        | crate::engine::log::LogError::Read(cause)
        | crate::engine::log::LogError::Reclaim(cause) => {
            crate::disk_gate::is_enospc(cause.as_ref())
        }
        crate::engine::log::LogError::Deposed(_) | crate::engine::log::LogError::HandingOver(_) => {
            false
        }
    }
}

/// Waits for a cycle's entry; past `limit` its requests are answered that they may or may not
/// be done, and the wait goes on for one more `limit`: the engine planned its state ahead of
/// the entry, so it may plan nothing else until the log says whether the entry is in (review
/// s18 K4).
/// Resolves when `stop` changes; never without one (or once its sender is gone).
async fn stopped(stop: &mut Option<watch::Receiver<bool>>) {
    let Some(s) = stop else {
        return std::future::pending().await;
    };
    if s.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

fn approx_size(cmd: &Command) -> usize {
    match cmd {
        Command::Push(p) => p.items.iter().map(|i| i.payload.len() + 64).sum(),
        Command::KafkaProduce(p) => p.items.iter().map(|i| i.payload.len() + 64).sum(),
        _ => 64,
    }
}

/// The answer of a parked pop that ends empty: it still echoes the conflation policy the
/// planner saw when it parked the pop.
pub fn empty_pop(job: &Job) -> Result<Outcome, QueenError> {
    let echo = match &job.cmd {
        Command::Pop(req) => req.parked_echo,
        _ => Default::default(),
    };
    Ok(Outcome::Popped(PopResult {
        echo,
        ..Default::default()
    }))
}

enum Planned {
    Reply(Reply, Result<Outcome, QueenError>),
    Park(Job),
}

/// The answer to a tenant declaration sent to an engine that does not declare tenants.
fn undeclarable() -> QueenError {
    QueenError::new(
        queenmq_protocol::ErrorCode::Unsupported,
        "unsupported: tenants are declared only through the default group of a cluster member \
         with cluster_tenant_groups on",
    )
}

fn plan_job(p: &mut Planner<'_>, mut job: Job) -> Planned {
    // A read or pop whose client went away (or whose bus wait ran out: a stalled disk) is not
    // planned: nobody would take the answer. A read's reserved room was given back when the
    // client left; a pop would lease messages to nobody, or with auto_ack consume them unseen.
    // Pushes, acks and the rest still apply: they are the client's intent, and a retry
    // with the same transaction id is deduplicated.
    if matches!(job.cmd, Command::Read(_) | Command::Pop(_)) && job.reply.is_closed() {
        return Planned::Reply(
            job.reply,
            Err(QueenError::unavailable(
                "the client went away before its request was planned",
            )),
        );
    }
    let out = match &job.cmd {
        Command::Configure(c) => p.plan_configure(c).map(Outcome::Configured),
        Command::DeleteQueue { queue } => Ok(Outcome::Deleted(p.plan_delete_queue(queue))),
        Command::Push(req) => p
            .plan_push(&req.items, job.ctx.principal.as_deref())
            .map(Outcome::Pushed),
        Command::Pop(req) => match p.plan_pop(req) {
            Ok(PopPlan::Delivered(r)) => Ok(Outcome::Popped(r)),
            Ok(PopPlan::Empty(echo))
                if req.wait && req.timeout_ms > REPLY_MARGIN.as_millis() as u64 =>
            {
                if let Command::Pop(req) = &mut job.cmd {
                    req.parked_echo = echo;
                }
                return Planned::Park(job);
            }
            Ok(PopPlan::Empty(echo)) => Ok(Outcome::Popped(PopResult {
                echo,
                ..Default::default()
            })),
            Err(e) => Err(e),
        },
        Command::Ack(req) => Ok(Outcome::Acked(p.plan_acks(&req.items, &req.group))),
        Command::ExtendLease { lease_id } => {
            let (renewed, expires) = p.plan_extend(lease_id);
            Ok(Outcome::LeaseExtended(
                queenmq_protocol::LeaseExtendResult {
                    lease_id: lease_id.clone(),
                    renewed,
                    expires_at_us: expires,
                },
            ))
        }
        Command::Transaction(t) => p
            .plan_transaction(t, job.ctx.principal.as_deref())
            .map(Outcome::Transaction),
        Command::Trace(t) => p.plan_trace(t).map(Outcome::Traced),
        Command::Timers(t) => p.plan_timers(t).map(Outcome::Timers),
        Command::GroupAdmin(g) => p.plan_group_admin(g).map(Outcome::GroupAdmin),
        Command::DlqAdmin(d) => p.plan_dlq_admin(d).map(Outcome::DlqAdmin),
        Command::Kv(k) => p.plan_kv(k).map(Outcome::Kv),
        Command::Locks(l) => p.plan_locks(l).map(Outcome::Locks),
        Command::KafkaGroups(k) => p.plan_kafka_groups(k).map(Outcome::KafkaGroups),
        Command::KafkaProducers(k) => p.plan_kafka_producers(k).map(Outcome::KafkaProducerId),
        Command::KafkaTxn(t) => p.plan_kafka_txn(t).map(Outcome::KafkaTxn),
        Command::KafkaProduce(k) => p
            .plan_kafka_produce(k, job.ctx.principal.as_deref())
            .map(Outcome::KafkaProduced),
        Command::KafkaDeleteRecords(d) => p
            .plan_kafka_delete_records(d)
            .map(Outcome::KafkaRecordsDeleted),
        Command::EphemeralConfig(e) => p.plan_ephemeral_config(e).map(Outcome::EphemeralConfig),
        Command::DeclareTenant { tenant, voters } => p
            .plan_declare_tenant(tenant, voters)
            .map(|()| Outcome::TenantDeclared),
        // The cycle's Kafka transaction reads share one answer budget (review s17 lead H1).
        Command::Read(queenmq_protocol::ReadReq::KafkaTxns(q)) => p
            .plan_kafka_txn_read(q)
            .map(|a| Outcome::Read(queenmq_protocol::ReadAnswer::KafkaTxns(a))),
        Command::Read(r) => {
            // A series without `to` ends at this cycle's time, not at the last write's.
            let now = p.now();
            let mut reader = p.reader_parts();
            crate::reads::answer_at(reader.0, &mut reader.1, r, now).map(Outcome::Read)
        }
        Command::Health | Command::Metrics(_) | Command::NodeMetrics(_) | Command::StatsRefresh => {
            Err(QueenError::new(
                queenmq_protocol::ErrorCode::Internal,
                "node-local command reached the engine",
            ))
        }
    };
    Planned::Reply(job.reply, out)
}

pub type ReaderHandle<'a> = reader::MessageReader<'a>;
pub use plan::queue_uuid as plan_queue_uuid;

/// The cycle cap and the entry cap for writes the engine makes on its own (due timers,
/// compaction copies), for an entry already holding `planned` bytes: held to the room the disk
/// gate leaves above the reserve, so none while the node is full.
fn gated_limits(
    limits: &Limits,
    disk: Option<&crate::disk_gate::DiskGate>,
    planned: usize,
) -> (usize, usize) {
    match disk {
        Some(d) => {
            let room = usize::try_from(d.data_room(planned as u64))
                .unwrap_or(usize::MAX)
                .saturating_add(planned);
            (
                limits.cycle_bytes.min(room),
                limits.max_entry_bytes.min(room),
            )
        }
        None => (limits.cycle_bytes, limits.max_entry_bytes),
    }
}

/// How large the cycle's entry may grow with compaction copies, once the clients' work of the
/// cycle is planned: the cycle cap, unless the entry holds no effect yet (then the entry cap).
fn copy_cap(empty: bool, cycle_cap: usize, entry_cap: usize) -> usize {
    if empty {
        entry_cap
    } else {
        cycle_cap
    }
}
