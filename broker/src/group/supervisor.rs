//! Starting a group and keeping it up: when its engine ends with a failure, the supervisor
//! stops its Raft node, waits until nothing holds its files any more, and opens the group again
//! from checkpoint and log, as a start of the process would (without `accept_data_loss`: the
//! operator accepted a loss for one start, not for every rebuild). Requests keep arriving in
//! the group's job queue meanwhile: the rebuilt engine serves them; while rebuilding fails they
//! are answered `unavailable` (retriable) and the rebuild is tried again, less and less often.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use queenmq_protocol::QueenError;
use queenmq_raft::{RaftConfig, RaftNode};
use queenmq_storage::{SegmentLog, StateStore};
use tokio::sync::watch;

use super::open::{forget_lost_messages, open_storage, Opened};
use super::{Live, LiveSlot};
use crate::config::Config;
use crate::engine::apply_handler::EngineApply;
use crate::engine::log::SharedLog;
use crate::engine::{Engine, EngineConfig, JobQueue, Shared};
use crate::raft_log::RaftLog;

/// The first wait between two failed rebuilds; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A rebuilt incarnation that served this long before failing was healthy: the next rebuild
/// starts at once. One that failed sooner (a full disk that fails the first proposal again, a request
/// that panics the planner each time it is retried) waits the backoff first, so a failure that
/// repeats costs a replay every 30 s at most, not one per retried request.
const STABLE: Duration = Duration::from_secs(60);
/// How often a group whose engine ended at the hand-over's fence looks whether the fence
/// opened again (the hand-over failed).
const FENCE_LOOK: Duration = Duration::from_millis(100);
/// How long a failed incarnation may hold its files before the supervisor says so.
const HOLD_WARNING: Duration = Duration::from_secs(10);

/// What a start keeps of the log's tail.
#[derive(Debug, Clone, Copy)]
pub enum Tail {
    /// A start of the process: what recovery finds on disk.
    AsFound,
    /// A rebuild after a failure: only what the failed incarnation's log had synced (its
    /// `synced_through`, None for nothing). Records appended after its last successful fsync
    /// were never acknowledged, and after a failed fsync the page cache may show bytes the
    /// disk does not hold: reading them back would build on them.
    SyncedThrough(Option<u64>),
}

/// A started group: its engine (not running yet), its Raft node and its files.
pub struct Started {
    pub engine: Engine,
    pub node: RaftNode,
    pub live: Live,
    store: Arc<StateStore>,
}

/// Opens the group's storage (refusing, or with `cfg.accept_data_loss` accepting, what is
/// missing), starts its Raft node (which replays the log) and builds its engine on `jobs`.
pub async fn start(
    cfg: &Config,
    ecfg: &EngineConfig,
    jobs: &JobQueue,
    tail: Tail,
) -> anyhow::Result<Started> {
    let started = Instant::now();
    let opening = cfg.clone();
    let backend = ecfg.log_backend.clone().map(|b| b.0);
    let store_cache = ecfg.store_cache_bytes;
    // Tenants are declared in the `default` group's log only (docs/cluster.md "Tenants").
    let declarations = ecfg
        .cluster
        .as_ref()
        .and_then(|m| m.declarations.clone())
        .filter(|_| &*ecfg.tenant == queenmq_protocol::DEFAULT_TENANT);
    let declared = declarations.clone();
    let Opened {
        log,
        report,
        store,
        state,
        reclaim_bound,
        checkpoint_bytes,
    } = tokio::task::spawn_blocking(move || {
        let mut opened = open_storage(&opening, backend, store_cache)?;
        // Before Raft starts: the checkpoint may hold declarations whose entries this node
        // never applied (caught up by a snapshot past them), and they must stand before
        // anything later is applied, as their replay would have made them stand.
        if let Some(d) = &declared {
            let applied = opened.state.applied.map(|(index, _)| index);
            super::checkpoint_declarations::backfill_from_records(
                d.data_dir(),
                &mut opened.state.tenants,
                applied,
            )
            .map_err(|e| anyhow!("{e}"))?;
            super::checkpoint_declarations::record_missing(d, &opened.state.tenants)
                .map_err(|e| anyhow!("writing the hosted records the checkpoint declares: {e}"))?;
        }
        Ok::<_, anyhow::Error>(opened)
    })
    .await
    .map_err(|e| anyhow!("opening the storage stopped: {e}"))??;
    if let Some(t) = report
        .truncated
        .as_ref()
        .filter(|t| t.accepted_loss.is_none())
    {
        tracing::warn!(
            tenant = %ecfg.tenant,
            segment = %t.segment.display(), offset = t.offset, cut_bytes = t.cut_bytes,
            reason = %t.reason, "torn tail cut from the log"
        );
    }
    if let Tail::SyncedThrough(synced) = tail {
        drop_unsynced_tail(&log, &state, synced)?;
    }
    let log = Arc::new(log);
    let store = Arc::new(store);
    let shared = Shared::new(state);
    let mut handler = EngineApply::new(shared.clone(), ecfg.tenant.clone());
    if let Some(d) = declarations {
        handler = handler.with_declarations(d);
    }
    let handler = Arc::new(handler);
    let node = match &ecfg.cluster {
        None => RaftNode::start_single(RaftConfig::default(), log.clone(), store.clone(), handler)
            .await
            .map_err(|e| anyhow!("starting raft: {e}"))?,
        Some(member) => member
            .start(
                &ecfg.tenant,
                log.clone(),
                store.clone(),
                handler,
                ecfg.record_limit as u64,
                crate::cluster_member::GroupFiles {
                    data_dir: &cfg.data_dir,
                    log_opts: queenmq_storage::LogOptions {
                        segment_bytes: cfg.segment_bytes,
                        ..queenmq_storage::LogOptions::default()
                    },
                    tenant_voters: ecfg.tenant_voters.clone(),
                    tenant_lost: ecfg.tenant_lost,
                },
            )
            .await
            .map_err(|e| anyhow!("starting raft as cluster node {}: {e}", member.node_id))?,
    };
    // Read after the start: when the log ended below the checkpoint, openraft's start-up purge
    // deleted every record left (raft LogStore::purge), and the messages in them are lost too.
    let log_first = log.first_index();
    if let (true, Some(first)) = (cfg.accept_data_loss, log_first) {
        if let Err(e) = forget_lost_messages(&shared, &store, first) {
            if let Err(stop) = node.shutdown().await {
                tracing::warn!(error = %stop, "stopping raft after a failed start failed too");
            }
            return Err(e);
        }
    }
    tracing::info!(
        tenant = %ecfg.tenant,
        records = report.records,
        segments = report.segments,
        elapsed_ms = started.elapsed().as_millis() as u64,
        clustered = ecfg.cluster.is_some(),
        "log replayed; the group is ready"
    );
    let rlog: SharedLog = Arc::new(RaftLog::new(
        node.clone(),
        ecfg.cluster.as_ref().map(|m| m.timing),
    ));
    let rlog = match &ecfg.log_wrap {
        Some(wrap) => (wrap.0)(rlog),
        None => rlog,
    };
    // The previous engine let go of the queue when it ended (or unwound).
    let rx = jobs.clone().lock_owned().await;
    let engine = Engine::new(
        shared.clone(),
        rlog.clone(),
        store.clone(),
        ecfg.clone(),
        rx,
    )
    .reclaiming_from(reclaim_bound)
    .expecting_checkpoint(checkpoint_bytes);
    Ok(Started {
        engine,
        node: node.clone(),
        live: Live {
            shared,
            log: rlog,
            segments: log,
            node,
        },
        store,
    })
}

/// Runs the group until `stop` turns true, rebuilding it whenever its engine fails.
pub async fn supervise(
    cfg: Config,
    ecfg: EngineConfig,
    first: Started,
    live: Arc<LiveSlot>,
    jobs: JobQueue,
    stop: watch::Receiver<bool>,
) {
    // Exported at 0 from the start, so a dashboard tells "never" from "not scraped".
    let restarts =
        metrics::counter!("queen_group_restarts_total", "tenant" => ecfg.tenant.to_string());
    restarts.increment(0);
    for series in [
        "queen_log_reclaim_failures_total",
        "queen_kafka_producer_evictions_total",
        // Review C8: absent until the first copy, a dashboard could not tell off from idle.
        "queen_compaction_bytes_copied_total",
        "queen_compaction_runs_copied_total",
        "queen_compaction_segments_total",
        // A cluster leader's requests answered "may or may not be done" at the write limit.
        "queen_writes_answered_at_limit_total",
        // Copies at first write of blocks a checkpoint still shares, and snapshot catch-up
        // (0 unless `cluster_snapshot_catch_up`): a dashboard's rate() needs the series.
        "queen_checkpoint_cow_copies_total",
        "queen_raft_snapshot_sent_total",
        "queen_raft_snapshot_installs_total",
        // Checkpoints deferred for a snapshot stream reading their slot (review s28 snap M2).
        "queen_checkpoint_deferred_total",
    ] {
        metrics::counter!(series, "tenant" => ecfg.tenant.to_string()).increment(0);
    }
    // Node-wide, but exported at 0 from the first start so a dashboard's rate() has a series.
    metrics::counter!("queen_payload_decrypt_failures_total").increment(0);
    // A joining horizon kept because its removal failed (group/hosted.rs; review s32 t1 M-4).
    metrics::counter!("queen_join_horizon_remove_failures_total").increment(0);
    // 1 while the joining `default` member reads its horizon (review s33 M-2); registered at
    // 0 without touching a value the read already set (raft/src/join_read.rs).
    metrics::gauge!("queen_join_horizon_pending").increment(0.0);
    // The reasons of the engine's `count_refusal` (plan/kafka_txns.rs; docs/metrics.md).
    for reason in ["aborted_cap", "stretch_cap", "open_cap", "ids_cap"] {
        metrics::counter!("queen_kafka_txn_refused_total", "reason" => reason).increment(0);
    }
    // The histogram is registered without a sample, so its family is exported from the start.
    let _ = metrics::histogram!("queen_checkpoint_cow_copy_seconds", "tenant" => ecfg.tenant.to_string());
    for block in crate::state::cow_clock::Block::ALL {
        let _ = metrics::histogram!("queen_checkpoint_cow_block_seconds", "tenant" => ecfg.tenant.to_string(), "block" => block.label());
        let _ = metrics::histogram!("queen_checkpoint_cow_stretch_copies", "tenant" => ecfg.tenant.to_string(), "block" => block.label());
    }
    // The dedup index off the heap (state/txn_spill.rs, id_store.rs, dedup_filter/ring.rs).
    for series in [
        "queen_dedup_spilled_ids_total",
        "queen_dedup_spill_failures_total",
        "queen_dedup_id_files_damaged_total",
        "queen_dedup_filter_lookups_total",
        "queen_dedup_filter_maybes_total",
        "queen_dedup_by_time_bucket_searches_total",
        "queen_dedup_by_time_refusals_total",
        "queen_dedup_id_file_opens_total",
        "queen_dedup_id_file_reads_total",
        "queen_dedup_id_file_descriptors_exhausted_total",
    ] {
        metrics::counter!(series).increment(0);
    }
    for reason in ["share", "evicted"] {
        metrics::counter!("queen_dedup_window_shortened_total", "reason" => reason).increment(0);
    }
    let _ = metrics::histogram!("queen_dedup_spill_lock_seconds");
    // Counted by the engine's ListTransactions read (reads/kafka_txns.rs; docs/metrics.md).
    metrics::counter!("queen_kafka_txn_list_truncated_total").increment(0);
    metrics::counter!(
        "queen_log_reclaim_refused_total",
        "tenant" => ecfg.tenant.to_string(),
        "reason" => "multi_node"
    )
    .increment(0);
    let mut cfg = cfg;
    cfg.accept_data_loss = false;
    let mut current = first;
    let mut backoff = FIRST_BACKOFF;
    // Whether the incarnation running was itself a rebuild (the first one the process started
    // is rebuilt at once whenever it fails).
    let mut rebuilt = false;
    loop {
        let Started {
            engine,
            node,
            live: running,
            store,
        } = current;
        let born = Instant::now();
        let end = engine.run(stop.clone()).await;
        let mut stopped_early = None;
        // Nothing may read the failed state from here on.
        match &end {
            Err(why) if why.stopping => {
                // Not a failure (review s20 lead B2): the node stops, the restart replays.
                tracing::warn!(tenant = %ecfg.tenant, reason = %why, "stopping without a final checkpoint: the restart replays the log");
                live.set(Err(format!("the node is stopping: {why}")));
                // A cycle refused at the hand-over's fence ends the engine before the stop
                // is sent: the Raft node must keep running while the lead is handed over,
                // or it is lost in a crash-style failover (review s23 handover H1).
                // Meanwhile the requests that reach the group are answered at once.
                let mut until = stop.clone();
                while node.status().handing_over
                    && !node.status().abandoned
                    && refuse_while_waiting(
                        &jobs,
                        &ecfg,
                        FENCE_LOOK,
                        "this node is stopping",
                        &mut until,
                    )
                    .await
                {}
                // The fence open again: the hand-over failed and this node would lead on,
                // heartbeating, with no engine, so nobody else campaigns until it exits
                // (review s23 lead2 M1). Its Raft node stops now, and the others elect.
                // Or abandoned: the others were asked to campaign and none was seen to
                // lead; the fence stays closed and the node stops now (review s25 failover M2).
                let st = node.status();
                if !*until.borrow() && (!st.handing_over || st.abandoned) {
                    tracing::warn!(tenant = %ecfg.tenant, "the hand-over did not move the lead and the engine has ended: stopping this group's raft node now");
                    stopped_early = Some(node.shutdown().await);
                }
                while refuse_while_waiting(
                    &jobs,
                    &ecfg,
                    Duration::from_secs(3_600),
                    "this node is stopping",
                    &mut until,
                )
                .await
                {}
            }
            Err(why) => {
                live.set(Err(format!("the group is being rebuilt: {why}")));
                restarts.increment(1);
            }
            Ok(()) => {}
        }
        let stopped = match stopped_early {
            Some(r) => r,
            None => node.shutdown().await,
        };
        if let Err(e) = &stopped {
            tracing::warn!(error = %e, "raft shutdown");
        }
        // A lost lead is a cluster event: once Raft has stopped, the node is healthy (not
        // ready) through the reload (review s17 C2). Not before: a shutdown that hangs on
        // this node's own disk keeps it unhealthy, so a liveness probe restarts it (s18 K1).
        if let (Err(why), Ok(())) = (&end, &stopped) {
            if why.deposed {
                live.set_reloading(format!("the group is being reloaded: {why}"));
            }
        }
        // Read once Raft has stopped: its last flush (and the commit it allows) is in.
        let synced = running.segments.synced_through();
        // A staged snapshot install replaces the log at the reopen (its records were synced
        // by the stage): the failed incarnation's synced index says nothing of the new log,
        // and cutting by it would refuse the rebuild for ever (review s22 snapshot M1).
        let tail = if node.install_staged() {
            Tail::AsFound
        } else {
            Tail::SyncedThrough(synced)
        };
        let failure = match end {
            // Stopped: the doors may still read the slot until the process ends.
            Ok(()) => return,
            Err(f) if f.stopping => return,
            Err(f) => f,
        };
        let segments = running.segments.clone();
        join_spill_writer(&running.shared).await;
        drop((node, running));
        let_go(segments, store).await;
        let first_wait = if failure.deposed {
            // Losing the lead is an event of a cluster, not a crash that may repeat: the
            // node rejoins at once, as a voter (review s16 B2), and the count starts over.
            tracing::warn!(tenant = %ecfg.tenant, reason = %failure, "this node lost the lead: reloading the group from checkpoint and log");
            backoff = FIRST_BACKOFF;
            None
        } else if rebuilt && born.elapsed() < STABLE {
            tracing::error!(tenant = %ecfg.tenant, reason = %failure, "the group's engine failed: rebuilding it from checkpoint and log");
            let wait = backoff;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            Some(wait)
        } else {
            tracing::error!(tenant = %ecfg.tenant, reason = %failure, "the group's engine failed: rebuilding it from checkpoint and log");
            backoff = FIRST_BACKOFF;
            None
        };
        match rebuild(&cfg, &ecfg, &live, &jobs, tail, first_wait, stop.clone()).await {
            Some(s) => {
                rebuilt = true;
                tracing::info!(tenant = %ecfg.tenant, "the group is rebuilt and serving again");
                live.set(Ok(s.live.clone()));
                current = s;
            }
            None => return,
        }
    }
}

/// Starts the group again until it starts or the node stops (`None`).
async fn rebuild(
    cfg: &Config,
    ecfg: &EngineConfig,
    live: &LiveSlot,
    jobs: &JobQueue,
    tail: Tail,
    first_wait: Option<Duration>,
    mut stop: watch::Receiver<bool>,
) -> Option<Started> {
    let mut backoff = FIRST_BACKOFF;
    if let Some(wait) = first_wait {
        tracing::warn!(
            wait_ms = wait.as_millis() as u64,
            "the group failed soon after it started: waiting before the rebuild"
        );
        let why = "the group failed again soon after it was rebuilt; it is rebuilt after a pause";
        if !refuse_while_waiting(jobs, ecfg, wait, why, &mut stop).await {
            return None;
        }
    }
    loop {
        if *stop.borrow() {
            return None;
        }
        let why = match start(cfg, ecfg, jobs, tail).await {
            Ok(s) => return Some(s),
            Err(e) => format!("rebuilding the group failed: {e:#}"),
        };
        tracing::error!(tenant = %ecfg.tenant, reason = %why, retry_ms = backoff.as_millis() as u64, "the group stays down");
        live.set(Err(why.clone()));
        if !refuse_while_waiting(jobs, ecfg, backoff, &why, &mut stop).await {
            return None;
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Answers what arrives in the job queue `unavailable` for `wait`; false when the node stops.
async fn refuse_while_waiting(
    jobs: &JobQueue,
    ecfg: &EngineConfig,
    wait: Duration,
    why: &str,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    if *stop.borrow() {
        return false;
    }
    let until = tokio::time::Instant::now() + wait;
    let mut queue = jobs.clone().lock_owned().await;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(until) => return true,
            _ = stop.changed() => return false,
            job = queue.recv() => match job {
                Some(job) => {
                    if let Some(m) = &ecfg.memory {
                        m.pools.sub(
                            crate::memory::Pool::Requests,
                            crate::memory::size::request_bytes(&job.cmd),
                        );
                    }
                    let _ = job.reply.send(Err(QueenError::unavailable(format!(
                        "{why}; retry later"
                    ))));
                }
                None => return false,
            },
        }
    }
}

/// Cuts what the failed incarnation appended after its last successful sync. Refuses when that
/// would cut below what the checkpoint covers (the checkpoint only covers synced entries, so
/// that is a broken promise, not a tail).
fn drop_unsynced_tail(
    log: &SegmentLog,
    state: &crate::state::State,
    synced: Option<u64>,
) -> anyhow::Result<()> {
    let Some((last, _)) = log.last() else {
        return Ok(());
    };
    let from = match synced {
        // Exact: the log never holds u64::MAX (`queenmq_storage::HIGHEST_INDEX`).
        Some(s) => s.saturating_add(1),
        None => log.first_index().unwrap_or(1),
    };
    if from > last {
        return Ok(());
    }
    if let Some((applied, _)) = state.applied {
        if from <= applied {
            return Err(anyhow!(
                "the failed log vouched for no record at or after {from} but the checkpoint \
                 covers {applied}: refusing to rebuild on records that may not be on disk"
            ));
        }
    }
    tracing::warn!(
        from,
        to = last,
        "dropping log records appended after the last successful fsync (never acknowledged)"
    );
    log.truncate_from(from)
        .map_err(|e| anyhow!("cutting the unsynced tail from the log: {e}"))
}

/// Ends the failed incarnation's id-file writer (state/txn_spill.rs) before the next one opens
/// `ids/` (review s27 M3): `let_go` waits only for the log and the store, and anything still
/// holding the failed state would keep a second writer merging and naming files in the same
/// directory. Dropping the spill closes its queue and joins the thread after its last job.
pub(super) async fn join_spill_writer(shared: &Shared) {
    let spill = shared.lock().txn_spill.take();
    if let Some(spill) = spill {
        // The join waits out a merge in progress: not on a runtime worker.
        if let Err(e) = tokio::task::spawn_blocking(move || drop(spill)).await {
            tracing::warn!(error = %e, "stopping the dedup spill writer");
        }
    }
}

/// Waits until the failed incarnation's tasks (Raft, a checkpoint being written, a scrape in
/// progress) have dropped its files: the state store cannot be opened twice.
async fn let_go(segments: Arc<SegmentLog>, store: Arc<StateStore>) {
    let started = Instant::now();
    let mut warned = false;
    while Arc::strong_count(&segments) > 1 || Arc::strong_count(&store) > 1 {
        if !warned && started.elapsed() > HOLD_WARNING {
            tracing::warn!(
                log_holders = Arc::strong_count(&segments) - 1,
                store_holders = Arc::strong_count(&store) - 1,
                "the failed group's files are still held; its rebuild waits for them"
            );
            warned = true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
