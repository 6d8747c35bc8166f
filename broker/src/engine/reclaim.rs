//! Giving disk space back once a checkpoint is durable: the log's sealed segments that hold
//! only records both kept checkpoint generations cover and no held message lives in are
//! deleted (docs/storage-format.md "Space reclamation").
//!
//! The store keeps two generations so that a damaged newest one falls back to the older; a
//! save overwrites the older, so after the save of generation N the log may go only up to
//! what generation N-1 (now the older one kept) allows: `reclaimable_upto` of its applied
//! index and floor. The engine carries that bound from one save to the next.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use queenmq_raft::RaftError;
use queenmq_storage::StorageError;

use crate::engine::log::{LogError, ReplicatedLog};

/// In the node's data directory: while it exists no segment is deleted (docs/storage-format.md
/// "Live backups").
pub const PAUSE_FILE: &str = "RECLAIM_PAUSED";

/// Consecutive failed reclamations after which each further one is logged at ERROR.
pub const FAILURES_BEFORE_ERROR: u32 = 3;

/// The highest log index whose record is no longer needed, given the checkpoint just made
/// durable at `applied` and the lowest index a message of that same state lives in (`floor`,
/// None when it holds none): a restart reads the checkpoint and the records after `applied`,
/// and pops read the records at `floor` and above.
pub fn reclaimable_upto(applied: u64, floor: Option<u64>) -> Option<u64> {
    match floor {
        Some(f) => f.checked_sub(1).map(|below| below.min(applied)),
        None => Some(applied),
    }
}

/// The operator's switches and what a group's reclamation remembers between checkpoints.
#[derive(Debug, Clone)]
pub struct Reclaimer {
    /// `reclaim_enabled`: false deletes nothing, ever.
    pub enabled: bool,
    /// While this file exists nothing is deleted (a live backup of the data directory).
    pub pause_file: Option<PathBuf>,
    failures: Arc<AtomicU32>,
    paused: Arc<AtomicBool>,
}

impl Default for Reclaimer {
    fn default() -> Self {
        Reclaimer::new(true, None)
    }
}

impl Reclaimer {
    pub fn new(enabled: bool, pause_file: Option<PathBuf>) -> Reclaimer {
        Reclaimer {
            enabled,
            pause_file,
            failures: Default::default(),
            paused: Default::default(),
        }
    }

    /// Whether deletion would run now (switched on, not paused).
    pub fn would_run(&self) -> bool {
        self.enabled && !self.pause_file.as_ref().is_some_and(|f| f.exists())
    }

    /// Whether deletion may run now; says so in the log when a pause starts or ends.
    fn allowed(&self, tenant: &str) -> bool {
        if !self.enabled {
            return false;
        }
        let paused = !self.would_run();
        if self.paused.swap(paused, Ordering::SeqCst) != paused {
            match (&self.pause_file, paused) {
                (Some(f), true) => tracing::info!(
                    tenant,
                    file = %f.display(),
                    "log space reclamation paused: no segment is deleted while this file exists"
                ),
                _ => tracing::info!(tenant, "log space reclamation resumed"),
            }
        }
        !paused
    }

    /// Runs on the blocking thread that wrote the checkpoint, after its commit returned:
    /// deletes the sealed segments whose records are all `<= upto` and counts them. Never
    /// more: `upto` is fixed before the save. A failure leaves the files on disk (the log
    /// deletes oldest first and drops a segment from its index only once its removal is
    /// durable) and is retried after the next checkpoint; it counts in
    /// `queen_log_reclaim_failures_total`, and from the `FAILURES_BEFORE_ERROR`th in a row on
    /// it is logged at ERROR. `Err` only when the state store failed (writing the purge
    /// horizon): redb then refuses every later write, so the group must be rebuilt on a
    /// reopened store, as after a failed checkpoint.
    pub fn after_checkpoint(
        &self,
        log: &dyn ReplicatedLog,
        tenant: &str,
        upto: Option<u64>,
    ) -> Result<(), String> {
        let Some(upto) = upto else {
            return Ok(());
        };
        if !self.allowed(tenant) {
            return Ok(());
        }
        match log.reclaim(upto) {
            Ok(n) => {
                self.failures.store(0, Ordering::SeqCst);
                // Counted at 0 too, so the series exists from the first checkpoint on.
                metrics::counter!("queen_log_segments_deleted_total", "tenant" => tenant.to_owned())
                    .increment(n as u64);
                // The log store logs a refusal once; the operator sees the disk grow, and why
                // here, once per checkpoint (review s12 F2).
                if let Some(reason) = log.reclaim_refusal().filter(|_| n == 0) {
                    metrics::counter!(
                        "queen_log_reclaim_refused_total",
                        "tenant" => tenant.to_owned(),
                        "reason" => reason
                    )
                    .increment(1);
                }
                if n > 0 {
                    tracing::info!(
                        tenant,
                        segments = n,
                        upto,
                        "deleted log segments no message and no restart needs"
                    );
                }
                Ok(())
            }
            Err(e) => {
                metrics::counter!("queen_log_reclaim_failures_total", "tenant" => tenant.to_owned())
                    .increment(1);
                let failed = self
                    .failures
                    .fetch_add(1, Ordering::SeqCst)
                    .saturating_add(1);
                if state_store_failed(&e) {
                    return Err(format!("writing the log's purge horizon failed: {e}"));
                }
                if failed >= FAILURES_BEFORE_ERROR {
                    tracing::error!(
                        tenant,
                        upto,
                        failed,
                        error = %e,
                        "deleting dead log segments keeps failing: disk space is not coming \
                         back; the files stay (nothing is lost), fix the data directory's \
                         permissions or disk"
                    );
                } else {
                    tracing::warn!(
                        tenant,
                        upto,
                        error = %e,
                        "deleting dead log segments failed; they stay and are retried after \
                         the next checkpoint"
                    );
                }
                Ok(())
            }
        }
    }
}

/// A reclamation that failed in the state store (redb), not on a segment file.
fn state_store_failed(e: &LogError) -> bool {
    let LogError::Reclaim(cause) = e else {
        return false;
    };
    matches!(
        cause.downcast_ref::<RaftError>(),
        Some(RaftError::Storage(StorageError::State { .. }))
    ) || matches!(
        cause.downcast_ref::<StorageError>(),
        Some(StorageError::State { .. })
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::log::LogStatus;
    use std::sync::Mutex;

    #[test]
    fn neither_a_held_message_nor_the_restart_tail_is_reclaimed() {
        assert_eq!(reclaimable_upto(100, None), Some(100));
        assert_eq!(reclaimable_upto(100, Some(40)), Some(39));
        assert_eq!(reclaimable_upto(100, Some(500)), Some(100));
        assert_eq!(reclaimable_upto(100, Some(0)), None);
        assert_eq!(reclaimable_upto(0, Some(1)), Some(0));
    }

    /// A log whose reclaim fails as told and records what it was asked.
    #[derive(Default)]
    struct Failing {
        asked: Mutex<Vec<u64>>,
        fail: AtomicBool,
        /// Deletes nothing and says why, as the Raft log under a multi-node membership.
        refused: AtomicBool,
    }

    impl ReplicatedLog for Failing {
        fn propose(&self, _entry: Vec<u8>) -> crate::engine::log::ProposeFuture {
            Box::pin(async { Err(LogError::propose("not proposed to in these tests")) })
        }
        fn read(&self, _index: u64) -> Result<Option<Vec<u8>>, LogError> {
            Ok(None)
        }
        fn status(&self) -> LogStatus {
            LogStatus::default()
        }
        fn reclaim(&self, upto: u64) -> Result<usize, LogError> {
            self.asked.lock().unwrap().push(upto);
            if self.fail.load(Ordering::SeqCst) {
                return Err(LogError::reclaim(StorageError::Io {
                    op: "remove segment",
                    path: "seg".into(),
                    source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
                }));
            }
            if self.refused.load(Ordering::SeqCst) {
                return Ok(0);
            }
            Ok(1)
        }
        fn reclaim_refusal(&self) -> Option<&'static str> {
            self.refused.load(Ordering::SeqCst).then_some("multi_node")
        }
    }

    /// Each checkpoint a refusal lets go by counts once, under its reason; a reclamation that
    /// deletes does not.
    #[test]
    fn refused_reclamations_are_counted_with_their_reason() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let log = Failing::default();
        let r = Reclaimer::default();
        metrics::with_local_recorder(&recorder, || {
            r.after_checkpoint(&log, "t", Some(9)).unwrap();
            log.refused.store(true, Ordering::SeqCst);
            r.after_checkpoint(&log, "t", Some(9)).unwrap();
            r.after_checkpoint(&log, "t", Some(10)).unwrap();
        });
        let text = handle.render();
        let want = r#"queen_log_reclaim_refused_total{tenant="t",reason="multi_node"} 2"#;
        assert!(text.contains(want), "missing {want} in\n{text}");
    }

    #[test]
    fn failures_are_counted_and_never_widen_what_is_deleted() {
        let log = Failing::default();
        log.fail.store(true, Ordering::SeqCst);
        let r = Reclaimer::default();
        for _ in 0..FAILURES_BEFORE_ERROR + 1 {
            assert!(r.after_checkpoint(&log, "t", Some(40)).is_ok());
        }
        assert_eq!(r.failures.load(Ordering::SeqCst), FAILURES_BEFORE_ERROR + 1);
        log.fail.store(false, Ordering::SeqCst);
        r.after_checkpoint(&log, "t", Some(40)).unwrap();
        assert_eq!(r.failures.load(Ordering::SeqCst), 0);
        r.after_checkpoint(&log, "t", None).unwrap();
        assert_eq!(
            *log.asked.lock().unwrap(),
            vec![40; 5],
            "only ever what was planned"
        );
    }

    #[test]
    fn switched_off_or_paused_nothing_is_deleted() {
        let log = Failing::default();
        Reclaimer::new(false, None)
            .after_checkpoint(&log, "t", Some(9))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let pause = dir.path().join("reclaim.paused");
        let r = Reclaimer::new(true, Some(pause.clone()));
        std::fs::write(&pause, b"").unwrap();
        r.after_checkpoint(&log, "t", Some(9)).unwrap();
        assert!(log.asked.lock().unwrap().is_empty());
        std::fs::remove_file(&pause).unwrap();
        r.after_checkpoint(&log, "t", Some(9)).unwrap();
        assert_eq!(*log.asked.lock().unwrap(), vec![9]);
    }
}
