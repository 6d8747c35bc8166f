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
use queenmq_storage::{LogOptions, SegmentLog, StateStore};
use tokio::sync::watch;

use crate::config::Config;
use crate::engine::apply_handler::EngineApply;
use crate::engine::log::SharedLog;
use crate::engine::{Engine, EngineBus, EngineConfig, Shared};
use crate::raft_log::RaftLog;
use crate::scrape::Scrape;
use crate::state::{decode_state, State};

/// The redb file of checkpoints and Raft metadata, in the data dir.
pub const STATE_FILE: &str = "state.redb";

/// Holds the data-dir lock for the life of the process.
pub struct DirLock(#[allow(dead_code)] File);

pub fn lock_data_dir(dir: &Path) -> anyhow::Result<DirLock> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create data dir {}", dir.display()))?;
    let path = dir.join("LOCK");
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match f.try_lock_exclusive() {
        Ok(true) => Ok(DirLock(f)),
        Ok(false) | Err(_) => Err(anyhow!(
            "data dir {} is locked by another queen process; refusing to start",
            dir.display()
        )),
    }
}

/// Loads the checkpoint unless it covers entries the log no longer has (a cut torn tail):
/// then the log alone is replayed from its start.
fn load_state(store: &StateStore, log: &SegmentLog) -> anyhow::Result<State> {
    let Some(cp) = store.load_checkpoint().context("reading the checkpoint")? else {
        return Ok(State::default());
    };
    let last = log.last().map_or(0, |(i, _)| i);
    let first = log.first_index().unwrap_or(1);
    if cp.applied_index > last || first > 1 {
        tracing::warn!(
            checkpoint = cp.applied_index,
            log_last = last,
            "the checkpoint is ahead of the log (its tail was cut); rebuilding from the log alone"
        );
        return Ok(State::default());
    }
    let mut st = decode_state(&cp.state).map_err(|e| anyhow!("checkpoint does not decode: {e}"))?;
    st.applied = Some((cp.applied_index, cp.applied_term));
    tracing::info!(index = cp.applied_index, "checkpoint loaded");
    Ok(st)
}

pub async fn serve(
    cfg: Config,
    prometheus: crate::engine::bus_prometheus::Render,
) -> anyhow::Result<()> {
    let _lock = lock_data_dir(&cfg.data_dir)?;
    let started = std::time::Instant::now();
    let opts = LogOptions {
        segment_bytes: cfg.segment_bytes,
        ..LogOptions::default()
    };
    let (log, report) = SegmentLog::open(&cfg.data_dir.join("log"), opts)
        .with_context(|| format!("opening the log in {}", cfg.data_dir.display()))?;
    if let Some(t) = &report.truncated {
        tracing::warn!(
            segment = %t.segment.display(), offset = t.offset, cut_bytes = t.cut_bytes,
            reason = %t.reason, "torn tail cut from the log"
        );
    }
    let log = Arc::new(log);
    let store =
        Arc::new(StateStore::open(&cfg.data_dir.join(STATE_FILE)).context("opening state.redb")?);
    let state = load_state(&store, &log)?;
    let shared = Shared::new(state);
    let handler = Arc::new(EngineApply::new(shared.clone()));
    let node = RaftNode::start_single(RaftConfig::default(), log.clone(), store.clone(), handler)
        .await
        .map_err(|e| anyhow!("starting raft: {e}"))?;
    tracing::info!(
        records = report.records,
        segments = report.segments,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "log replayed; this node leads"
    );
    let rlog: SharedLog = Arc::new(RaftLog(node.clone()));
    let ecfg = EngineConfig {
        max_batch: cfg.commit_max_batch as usize,
        max_bytes: cfg.commit_max_bytes as usize,
        checkpoint_interval: cfg.checkpoint_interval(),
        cache_bytes: usize::try_from(cfg.entry_cache_bytes).unwrap_or(usize::MAX),
        ..EngineConfig::default()
    };
    let (engine, tx) = Engine::new(shared.clone(), rlog.clone(), store, ecfg);
    let prometheus = Scrape {
        shared: shared.clone(),
        log: rlog.clone(),
        segments: log,
        data_dir: cfg.data_dir.clone(),
        render: prometheus,
    }
    .into_render();
    let bus = Arc::new(EngineBus::new(tx, shared, rlog, prometheus));
    let (stop_tx, stop_rx) = watch::channel(false);
    let engine_task = tokio::spawn(engine.run(stop_rx));

    let listener = tokio::net::TcpListener::bind(cfg.http_addr)
        .await
        .with_context(|| format!("binding {}", cfg.http_addr))?;
    tracing::info!(addr = %cfg.http_addr, data_dir = %cfg.data_dir.display(), "queen is serving");
    let api = ApiOptions {
        jwt_secret: cfg.jwt_secret.as_ref().map(|s| s.expose().to_string()),
        max_body_bytes: cfg.max_body_bytes as usize,
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
