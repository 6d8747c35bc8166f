//! Start-up and shutdown of a node: lock the data dir, open storage, load the checkpoint,
//! start Raft (which replays the log after it), start the engine and the HTTP door; on
//! SIGTERM/SIGINT stop accepting, drain, checkpoint, exit.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use fs4::fs_std::FileExt;
use queenmq_native_api::ApiOptions;
use queenmq_raft::{RaftConfig, RaftNode};
use queenmq_storage::{
    Checkpoint, LogOptions, RecoveryReport, SegmentLog, StateStore, StorageError,
};
use tokio::sync::watch;

use crate::config::Config;
use crate::engine::apply_handler::EngineApply;
use crate::engine::log::SharedLog;
use crate::engine::{Engine, EngineBus, EngineConfig, Shared};
use crate::log_backing;
use crate::raft_log::RaftLog;
use crate::scrape::Scrape;
use crate::state::{decode_state, encode_state, State};

/// The redb file of checkpoints and Raft metadata, in the data dir.
pub const STATE_FILE: &str = "state.redb";

/// Holds the data-dir lock for the life of the process.
pub struct DirLock(#[allow(dead_code)] File);

/// Creates the data dir durably (each created level's parent fsynced, so a power cut cannot
/// leave the broker's files in a directory that no longer has a name), then takes `LOCK`.
pub fn lock_data_dir(dir: &Path) -> anyhow::Result<DirLock> {
    queenmq_storage::create_dir_durable(dir)
        .with_context(|| format!("cannot create data dir {}", dir.display()))?;
    let path = dir.join("LOCK");
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    queenmq_storage::sync_parent(&path)
        .with_context(|| format!("cannot fsync the directory of {}", path.display()))?;
    match f.try_lock_exclusive() {
        Ok(true) => Ok(DirLock(f)),
        Ok(false) | Err(_) => Err(anyhow!(
            "data dir {} is locked by another queen process; refusing to start",
            dir.display()
        )),
    }
}

/// How the refusals end: what the operator can do about them.
const REFUSAL_HINT: &str = "Restore the data directory from a backup or replica, or start once \
    with accept_data_loss=true (QUEEN_ACCEPT_DATA_LOSS=true, --accept-data-loss) to drop what \
    is missing";

/// Refuses to start over `what` (a sentence naming what is missing), unless the operator
/// accepted the loss: then it is logged once at ERROR and start-up goes on.
fn refuse_or_accept(accept: bool, what: &str) -> anyhow::Result<()> {
    if !accept {
        return Err(anyhow!("refusing to start: {what}. {REFUSAL_HINT}"));
    }
    tracing::error!("accept_data_loss: starting anyway, dropping what is missing: {what}");
    Ok(())
}

/// The storage a node starts from, checked against what it had acknowledged.
struct Opened {
    log: SegmentLog,
    report: RecoveryReport,
    store: StateStore,
    state: State,
}

/// Opens the state store, then the log with every index Raft or the checkpoint says was
/// acknowledged as `durable_through`, so that recovery refuses rather than drops it.
/// docs/storage-format.md ("Start-up checks") is the rule this implements.
fn open_storage(cfg: &Config) -> anyhow::Result<Opened> {
    let accept = cfg.accept_data_loss;
    let log_dir = cfg.data_dir.join("log");
    let log_present = log_dir.is_dir();
    let store = open_store(&cfg.data_dir, &log_dir, accept)?;
    let raft = queenmq_raft::read_persisted(&store)
        .map_err(|e| anyhow!("reading the raft metadata in {STATE_FILE}: {e}"))?;
    let checkpoint = store.load_checkpoint();
    let cp_index = match &checkpoint {
        Ok(Some(cp)) => Some(cp.applied_index),
        _ => None,
    };
    let durable_through = raft.committed.max(cp_index).unwrap_or(0);
    if !log_present {
        let mut held = Vec::new();
        if raft.vote {
            held.push("a raft vote".to_owned());
        }
        if let Some(c) = raft.committed {
            held.push(format!("committed index {c}"));
        }
        if let Some(i) = cp_index {
            held.push(format!("a checkpoint at index {i}"));
        }
        if checkpoint.is_err() {
            held.push("a checkpoint".to_owned());
        }
        if !held.is_empty() {
            refuse_or_accept(
                accept,
                &format!(
                    "{} holds {} but the log directory {} is missing, so log records 1..={durable_through} are lost",
                    cfg.data_dir.join(STATE_FILE).display(),
                    held.join(", "),
                    log_dir.display()
                ),
            )?;
        }
    }
    let opts = LogOptions {
        segment_bytes: cfg.segment_bytes,
        durable_through,
        accept_data_loss: accept,
        ..LogOptions::default()
    };
    let (log, report) = SegmentLog::open(&log_dir, opts)
        .with_context(|| format!("opening the log in {}", cfg.data_dir.display()))?;
    let state = load_state(checkpoint, &log, &log_dir, accept)?;
    if let (true, Some(first)) = (accept, log.first_index()) {
        if first > 1 {
            let Some((applied_index, applied_term)) = state.applied else {
                // Replaying a log that starts past its beginning onto an empty state would
                // build a state that never existed (its entries name queues and partitions
                // created in the lost ones): accepting the loss cannot help here.
                return Err(anyhow!(
                    "refusing to start: the log in {} starts at index {first} and there is no \
                     usable checkpoint, so the state cannot be rebuilt even with \
                     accept_data_loss; restore the data directory from a backup, or move it \
                     away to start empty",
                    log_dir.display()
                ));
            };
            // A checkpoint kept over a log whose start is gone (accepted above): Raft must
            // read the log from where it now starts. The horizon never passes what was
            // applied (openraft orders log ids by term first).
            let term = if applied_index.checked_add(1) == Some(first) {
                applied_term
            } else {
                log.term_of(first).unwrap_or(0).min(applied_term)
            };
            queenmq_raft::accept_missing_log_start(&store, first, term)
                .map_err(|e| anyhow!("{STATE_FILE}: {e}"))?;
        }
    }
    Ok(Opened {
        log,
        report,
        store,
        state,
    })
}

/// Opens `state.redb`. If redb cannot open it (a damaged file) and the log still starts at
/// its first index (0, or 1), nothing is lost by rebuilding: the file is moved aside and a new one is created.
fn open_store(data_dir: &Path, log_dir: &Path, accept: bool) -> anyhow::Result<StateStore> {
    let path = data_dir.join(STATE_FILE);
    // redb 4.6 can panic (unreachable code in its btree cursor) on some damaged pages while
    // opening; that is a damaged file like any other, not a reason to die without a word.
    let opened = std::panic::catch_unwind(|| StateStore::open(&path)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        Err(StorageError::CorruptCheckpoint {
            reason: format!("redb panicked while opening the file: {what}"),
        })
    });
    let error = match opened {
        Ok(store) => return Ok(store),
        Err(e) if path.is_file() => e,
        Err(e) => return Err(anyhow!("opening {}: {e}", path.display())),
    };
    // openraft's first entry (the initial membership) has index 0; 1 is accepted too.
    let origin = [
        "seg-00000000000000000000.qlog",
        "seg-00000000000000000001.qlog",
    ];
    if !origin.iter().any(|name| log_dir.join(name).is_file()) {
        refuse_or_accept(
            accept,
            &format!(
                "{} cannot be opened ({error}) and the log in {} no longer starts at its first \
                 index ({} is missing), so the state it held cannot be rebuilt",
                path.display(),
                log_dir.display(),
                origin[0]
            ),
        )?;
    }
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let aside = data_dir.join(format!("{STATE_FILE}.corrupt-{unix}"));
    std::fs::rename(&path, &aside)
        .and_then(|()| queenmq_storage::sync_parent(&path))
        .with_context(|| format!("moving {} aside to {}", path.display(), aside.display()))?;
    tracing::warn!(
        "{} cannot be opened ({error}); moved it to {} and rebuilding the state from the log, \
         which still starts at its first index: nothing is lost",
        path.display(),
        aside.display()
    );
    StateStore::open(&path).with_context(|| format!("creating {}", path.display()))
}

/// Loads the checkpoint. One the log cannot back (ahead of its end, with a gap before its
/// start, or with runs pointing below its start) is acknowledged state that is gone: refused
/// unless accepted. An unreadable one is rebuilt from the log when the log still starts at its
/// first index (nothing lost).
fn load_state(
    checkpoint: Result<Option<Checkpoint>, StorageError>,
    log: &SegmentLog,
    log_dir: &Path,
    accept: bool,
) -> anyhow::Result<State> {
    let last = log.last().map_or(0, |(i, _)| i);
    let first = log.first_index();
    let cp = match checkpoint {
        Ok(Some(cp)) => cp,
        Ok(None) => {
            if let Some(what) = log_backing::missing(&State::default(), false, first, log_dir) {
                refuse_or_accept(accept, &what)?;
            }
            return Ok(State::default());
        }
        // openraft's first entry has index 0; a log starting there (or at 1) is whole.
        Err(e) if first.is_none_or(|f| f <= 1) => {
            tracing::warn!(
                "the checkpoint in {STATE_FILE} is unreadable ({e}); rebuilding the state from \
                 the log, which still starts at index {}: nothing is lost",
                first.unwrap_or(1)
            );
            return Ok(State::default());
        }
        Err(e) => {
            refuse_or_accept(
                accept,
                &format!(
                    "the checkpoint in {STATE_FILE} is unreadable ({e}) and the log starts at \
                     index {}, so the state of records 0..={} cannot be rebuilt",
                    first.unwrap_or(0),
                    first.unwrap_or(1).saturating_sub(1)
                ),
            )?;
            return Ok(State::default());
        }
    };
    let gap_before = first.is_some_and(|f| f > cp.applied_index.saturating_add(1));
    if cp.applied_index > last || gap_before {
        refuse_or_accept(
            accept,
            &format!(
                "the checkpoint in {STATE_FILE} is at index {} but the log holds {}: records \
                 {}..={} are missing",
                cp.applied_index,
                match first {
                    Some(f) => format!("{f}..={last}"),
                    None => "nothing".to_owned(),
                },
                if gap_before {
                    cp.applied_index + 1
                } else {
                    last + 1
                },
                if gap_before {
                    first.unwrap_or(1).saturating_sub(1)
                } else {
                    cp.applied_index
                }
            ),
        )?;
        return Ok(State::default());
    }
    let mut st = decode_state(&cp.state).map_err(|e| anyhow!("checkpoint does not decode: {e}"))?;
    if let Some(what) = log_backing::missing(&st, true, first, log_dir) {
        // Accepted, the checkpoint is kept: rebuilding from a log without its start cannot
        // work (Raft replays from index 0), and the state past the missing records is intact.
        // The messages in them are forgotten once the log is replayed (forget_lost_messages).
        refuse_or_accept(
            accept,
            &format!(
                "the checkpoint in {STATE_FILE} at index {} cannot be served whole (the \
                 messages in the missing records are gone): {what}",
                cp.applied_index
            ),
        )?;
    }
    st.applied = Some((cp.applied_index, cp.applied_term));
    tracing::info!(index = cp.applied_index, "checkpoint loaded");
    Ok(st)
}

/// Partitions named one by one in the ERROR log when lost messages are forgotten; the rest
/// are summed up in one line (a million partitions must not mean a million lines).
const FORGOTTEN_LINES: usize = 100;

/// Once a loss is accepted and the log replayed, forgets the messages whose log records are
/// gone (state/forget.rs: no run may point below the log's start, no cursor stay below what
/// is held, or pops of the partition fail for ever), logs what at ERROR, and checkpoints the
/// repaired state before serving, so later starts find nothing missing and need no option.
fn forget_lost_messages(shared: &Shared, store: &StateStore, log_first: u64) -> anyhow::Result<()> {
    let (blob, applied) = {
        let mut st = shared.lock();
        let gone = st.forget_runs_below(log_first);
        if gone.is_empty() {
            return Ok(());
        }
        for f in gone.iter().take(FORGOTTEN_LINES) {
            let cursors = if f.groups.is_empty() {
                "no cursor stood on them".to_owned()
            } else {
                format!(
                    "the cursors of groups {} moved to offset {}",
                    f.groups.join(", "),
                    f.to
                )
            };
            tracing::error!(
                "accept_data_loss: forgot {} messages, offsets {}..={}, of partition '{}' of \
                 queue '{}': their log records are below the log's first index {log_first}; \
                 {cursors}",
                f.count(),
                f.from,
                f.to.saturating_sub(1),
                f.partition,
                f.queue
            );
        }
        let total: u64 = gone.iter().map(|f| f.count()).fold(0, u64::saturating_add);
        tracing::error!(
            "accept_data_loss: forgot {total} messages in {} partitions{}",
            gone.len(),
            if gone.len() > FORGOTTEN_LINES {
                format!(" ({} not named above)", gone.len() - FORGOTTEN_LINES)
            } else {
                String::new()
            }
        );
        let applied = st.applied.ok_or_else(|| {
            anyhow!(
                "forgot lost messages in a state that applied no log entry: nothing to checkpoint"
            )
        })?;
        (encode_state(&st), applied)
    };
    store
        .save_checkpoint(&Checkpoint {
            applied_index: applied.0,
            applied_term: applied.1,
            state: blob,
        })
        .map_err(|e| {
            anyhow!("checkpointing the state without the forgotten messages into {STATE_FILE}: {e}")
        })?;
    tracing::info!(
        index = applied.0,
        "checkpoint written without the forgotten messages: later starts need no accept_data_loss"
    );
    Ok(())
}

pub async fn serve(
    cfg: Config,
    prometheus: crate::engine::bus_prometheus::Render,
) -> anyhow::Result<()> {
    let _lock = lock_data_dir(&cfg.data_dir)?;
    let started = std::time::Instant::now();
    let Opened {
        log,
        report,
        store,
        state,
    } = open_storage(&cfg)?;
    if let Some(t) = report
        .truncated
        .as_ref()
        .filter(|t| t.accepted_loss.is_none())
    {
        tracing::warn!(
            segment = %t.segment.display(), offset = t.offset, cut_bytes = t.cut_bytes,
            reason = %t.reason, "torn tail cut from the log"
        );
    }
    let log_first = log.first_index();
    let log = Arc::new(log);
    let store = Arc::new(store);
    let shared = Shared::new(state);
    let handler = Arc::new(EngineApply::new(shared.clone()));
    let node = RaftNode::start_single(RaftConfig::default(), log.clone(), store.clone(), handler)
        .await
        .map_err(|e| anyhow!("starting raft: {e}"))?;
    if let (true, Some(first)) = (cfg.accept_data_loss, log_first) {
        if let Err(e) = forget_lost_messages(&shared, &store, first) {
            if let Err(stop) = node.shutdown().await {
                tracing::warn!(error = %stop, "stopping raft after a failed start failed too");
            }
            return Err(e);
        }
    }
    tracing::info!(
        records = report.records,
        segments = report.segments,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "log replayed; this node leads"
    );
    let rlog: SharedLog = Arc::new(RaftLog(node.clone()));
    let memory = crate::memory::Memory::from_config(cfg.memory_limit_bytes);
    let cache_bytes = memory.budget.cache_bytes(cfg.entry_cache_bytes);
    tracing::info!(
        budget = memory.budget.total,
        from = memory.budget.source,
        entry_cache = cache_bytes,
        held_share = memory.budget.held_bytes(),
        "memory budget"
    );
    let door_caps = crate::memory::door::caps(
        &memory,
        usize::try_from(cfg.http_max_connections).unwrap_or(usize::MAX),
        usize::try_from(cfg.http_probe_reserve_connections).unwrap_or(usize::MAX),
        usize::try_from(cfg.max_long_polls).unwrap_or(usize::MAX),
    );
    tracing::info!(
        connections = door_caps.connections,
        long_polls = door_caps.long_polls,
        share = memory.budget.connections_bytes(),
        "connection limits under the memory budget"
    );
    let ecfg = EngineConfig {
        max_batch: cfg.commit_max_batch as usize,
        max_bytes: cfg.commit_max_bytes as usize,
        checkpoint_interval: cfg.checkpoint_interval(),
        cache_bytes,
        memory: Some(memory.clone()),
        max_new_partitions: usize::try_from(cfg.max_new_partitions_per_request)
            .unwrap_or(usize::MAX),
        max_long_polls: door_caps.long_polls,
        ..EngineConfig::default()
    };
    let (engine, tx) = Engine::new(shared.clone(), rlog.clone(), store, ecfg);
    let prometheus = Scrape {
        shared: shared.clone(),
        log: rlog.clone(),
        segments: log,
        data_dir: cfg.data_dir.clone(),
        memory: memory.clone(),
        render: prometheus,
    }
    .into_render();
    let bus = Arc::new(EngineBus::new(tx, shared, rlog, prometheus).with_memory(memory.clone()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let engine_task = tokio::spawn(engine.run(stop_rx));

    let listener = tokio::net::TcpListener::bind(cfg.http_addr)
        .await
        .with_context(|| format!("binding {}", cfg.http_addr))?;
    tracing::info!(addr = %cfg.http_addr, data_dir = %cfg.data_dir.display(), "queen is serving");
    let api = ApiOptions {
        jwt_secret: cfg.jwt_secret.as_ref().map(|s| s.expose().to_string()),
        jwt_audience: cfg.jwt_audience.clone(),
        metrics_require_auth: cfg.metrics_need_token(),
        max_body_bytes: cfg.max_body_bytes as usize,
        header_timeout: Duration::from_millis(cfg.http_header_timeout_ms),
        body_timeout: Duration::from_millis(cfg.http_body_timeout_ms),
        idle_timeout: Duration::from_millis(cfg.http_idle_timeout_ms),
        max_connections: door_caps.connections,
        probe_reserve_connections: usize::try_from(cfg.http_probe_reserve_connections)
            .unwrap_or(usize::MAX),
        min_write_rate: cfg.http_min_write_rate_bytes,
        write_rate_window: Duration::from_millis(cfg.http_write_rate_window_ms),
        meter: Some(Arc::new(crate::memory::door::DoorMeter(memory.clone()))),
        max_push_items: cfg.max_push_items as usize,
        max_ack_items: cfg.max_ack_items as usize,
        max_txn_ops: cfg.max_txn_ops as usize,
        max_trace_bytes: cfg.max_trace_bytes as usize,
    };
    let (http_stop_tx, http_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let http = tokio::spawn(queenmq_native_api::run(listener, bus, api, async move {
        let _ = http_stop_rx.await;
    }));

    shutdown_signal().await?;
    tracing::info!("shutdown requested: draining in-flight requests");
    let _ = http_stop_tx.send(());
    let grace = cfg.shutdown_grace();
    match tokio::time::timeout(grace, http).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "http server ended with an error"),
        Ok(Err(e)) => tracing::warn!(error = %e, "http task failed"),
        Err(_) => tracing::warn!("in-flight requests outlived the grace period"),
    }
    let _ = stop_tx.send(true);
    let remaining = grace
        .saturating_sub(Duration::from_millis(100))
        .max(Duration::from_secs(1));
    if tokio::time::timeout(remaining, engine_task).await.is_err() {
        tracing::warn!("engine did not stop within the grace period");
    }
    if let Err(e) = node.shutdown().await {
        tracing::warn!(error = %e, "raft shutdown");
    }
    tracing::info!("stopped cleanly");
    Ok(())
}

/// SIGTERM (Kubernetes) or SIGINT. Refuses to run when the handler cannot be installed.
async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
