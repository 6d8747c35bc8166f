//! openraft's `RaftLogStorage` on a `SegmentLog` plus the StateStore's meta table.
//!
//! ### The contract this store keeps (openraft `storage/v2`, restated for our layout)
//! - **No holes.** Records are consecutive by index; SegmentLog refuses anything else. Purge
//!   moves only the Raft horizon (meta `raft/purged`), because message bytes live in the log:
//!   segment files are deleted only by `reclaim_upto`, which the engine calls once a durable
//!   checkpoint covers them and nothing points into them.
//! - **Two horizons, one answer per index.** openraft's horizon moves only through `purge`
//!   (and is read at open); `reclaim_upto` moves the durable one past it behind openraft's
//!   back. A read below openraft's horizon starts at the horizon, as openraft's contract and
//!   suite ask; a read of an index openraft still believes present but which reclamation
//!   deleted is an error, never a vector that starts later than asked (docs/raft-storage.md).
//! - **No reclamation under a multi-node membership, no new node after a reclamation.** A peer
//!   may need any entry openraft has not purged; until snapshots carry the log (issue 13)
//!   `reclaim_upto` refuses for good once a membership naming more than one node was seen
//!   (meta `raft/multi_node`, sticky, written by the append of such a membership before its
//!   record), and `begin_widening` refuses to name a new node once anything was reclaimed and
//!   holds reclamation off, in memory, while openraft handles the change. With snapshot
//!   catch-up (`bound_by_raft_purge`) reclamation is bounded by openraft's purge horizon
//!   instead, and a new node is refused only when the log was deleted past it.
//! - **Serialised writes.** Appends and truncations go through the single log-writer thread in
//!   call order; openraft itself never overlaps calls on `&mut self`.
//! - **Readable on return, durable on callback.** `append` returns once the records are written;
//!   the `LogFlushed` callback fires after the group fsync that covers them.
//! - **Vote durable before return.** `save_vote` waits for redb's commit.
//! - **Committed may lag, never lead.** See `committed_saver`; `read_committed` also never
//!   names an index beyond the last record present, so a torn tail cannot make openraft
//!   re-apply entries that are gone.
//! - **Purge horizon durable before return**, so a restart never reads below it.

// openraft's storage traits return `openraft::StorageError` (~200 bytes) by value; helpers
// return the same type so `?` reaches the trait boundary without boxing and unboxing.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, ErrorSubject, ErrorVerb, OptionalSend, RaftLogReader, Vote};

use crate::append_gate::AppendGate;
use crate::backend::{SegmentLog, StateStore};
use crate::committed_saver::CommittedSaver;
use crate::entry_codec;
use crate::horizons::{at_horizon, later, AtHorizon, Horizons};
use crate::log_writer::{LogWriter, Record, WriterError};
use crate::meta;
use crate::types::{
    io_err, is_multi_node, log_id, term_of, Entry, NodeId, OrStorageError, RaftLogId, TypeConfig,
};

/// Reclamation stays refused while this lives (`LogStore::begin_widening`).
pub(crate) struct Widening(Arc<Inner>);

impl Drop for Widening {
    fn drop(&mut self) {
        self.0.widening.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Cheap to clone: every clone is the same store (openraft's log reader is a clone).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Inner>,
}

/// A `LogStore` that does not keep it open (`SnapshotFeed`): the group's reopen waits until
/// nothing holds its files, and the listener's inbox outlives the group.
#[derive(Clone)]
pub(crate) struct WeakLogStore(std::sync::Weak<Inner>);

impl WeakLogStore {
    pub(crate) fn upgrade(&self) -> Option<LogStore> {
        self.0.upgrade().map(|inner| LogStore { inner })
    }
}

struct Inner {
    log: Arc<SegmentLog>,
    store: Arc<StateStore>,
    writer: LogWriter,
    committed: CommittedSaver,
    /// std Mutex, never held across an await.
    horizons: Mutex<Horizons>,
    /// A membership naming more than one node was seen (meta `raft/multi_node`, sticky, read
    /// again while false because the state machine writes it too): reclamation is refused.
    multi_node: AtomicBool,
    /// Membership changes naming a new node that openraft is handling (`Widening` guards):
    /// reclamation is refused while any is. In memory only: a change openraft refuses, or a
    /// crash before its proposal, leaves nothing behind, and one that reached the log set the
    /// sticky `multi_node` in `append` before its record was written.
    widening: AtomicUsize,
    /// Held by `reclaim_upto` for its whole run, and taken once by an append that carries a
    /// multi-node membership after it set `multi_node`: so no reclamation is still deleting
    /// when openraft, after that append, starts replicating to the new node.
    reclaim_gate: tokio::sync::Mutex<()>,
    /// The refusal is logged once per process, not after every checkpoint.
    refusal_logged: AtomicBool,
    /// An append met ENOSPC: openraft keeps only the text of a storage error, and the node's
    /// callers must tell a full disk (retriable once space is freed) from a failed one.
    out_of_space: AtomicBool,
    /// A snapshot install was staged through this store (`stage_install`): until the group is
    /// reopened (which finishes it, replacing `log/` when the stage built `log-incoming`),
    /// appends fail and reclamation is refused.
    installing: AtomicBool,
    /// Closed by a stage before it decides whether the log is kept (appends wait), then opened
    /// again or, once it staged, sealed: appends then fail (review s22 snapshot H2).
    appends: Arc<AppendGate>,
    /// Held by `stage_install` for its whole run: one stage's refusal must not reopen the
    /// append gate under another.
    staging: Mutex<()>,
    /// The group catches lagging peers up by snapshot (`SnapshotFeed`): under a multi-node
    /// membership reclamation is not refused but bounded by openraft's purge horizon, which
    /// openraft moves only behind a snapshot it built (the durable checkpoint generation), so
    /// a peer that needs a deleted entry is sent that snapshot instead.
    raft_bounded: AtomicBool,
}

impl LogStore {
    /// Loads the persisted horizon and committed id and starts the writer threads. Blocking
    /// (redb reads, thread spawn): call before the runtime is busy or from a blocking context.
    pub fn open(log: Arc<SegmentLog>, store: Arc<StateStore>) -> Result<LogStore, OrStorageError> {
        let purged: Option<RaftLogId> = meta::get(&store, meta::PURGED, ErrorSubject::Logs)?;
        let committed: Option<RaftLogId> =
            meta::get(&store, meta::COMMITTED, ErrorSubject::Store)?.flatten();
        // Both are checked before anything acts on them: a purge horizon past the last record
        // makes the finish below delete the whole log.
        within_index_space(meta::PURGED, purged)?;
        within_index_space(meta::COMMITTED, committed)?;
        finish_interrupted_purge(&log, purged)?;
        let membership: Option<crate::types::StoredMembership> =
            meta::get(&store, meta::MEMBERSHIP, ErrorSubject::StateMachine)?;
        let applied_multi = membership.is_some_and(|m| is_multi_node(m.membership()));
        // The applied membership of a store written before the sticky key existed counts too.
        let noted = meta::multi_node_noted(&store)?;
        if applied_multi && !noted {
            meta::note_multi_node(&store)?;
        }
        let multi_node = applied_multi || noted;
        let writer = LogWriter::spawn(log.clone())
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Write, &e))?;
        let committed = CommittedSaver::spawn(store.clone(), committed)
            .map_err(|e| io_err(ErrorSubject::Store, ErrorVerb::Write, &e))?;
        Ok(LogStore {
            inner: Arc::new(Inner {
                log,
                store,
                writer,
                committed,
                horizons: Mutex::new(Horizons {
                    raft: purged,
                    durable: purged,
                }),
                multi_node: AtomicBool::new(multi_node),
                widening: AtomicUsize::new(0),
                reclaim_gate: tokio::sync::Mutex::new(()),
                refusal_logged: AtomicBool::new(false),
                out_of_space: AtomicBool::new(false),
                installing: AtomicBool::new(false),
                appends: Arc::default(),
                staging: Mutex::new(()),
                raft_bounded: AtomicBool::new(false),
            }),
        })
    }

    pub(crate) fn downgrade(&self) -> WeakLogStore {
        WeakLogStore(Arc::downgrade(&self.inner))
    }

    /// The newest committed log id openraft reported (in memory; disk may lag).
    pub fn committed(&self) -> Option<RaftLogId> {
        self.inner.committed.latest()
    }

    /// Whether an append met ENOSPC since the store was opened.
    pub fn out_of_space(&self) -> bool {
        self.inner.out_of_space.load(Ordering::SeqCst)
    }

    /// Flushes and stops the writer threads; later writes fail. Blocking.
    pub fn stop(&self) {
        self.inner.writer.stop_and_join();
        self.inner.committed.stop_and_join();
    }

    /// Deletes the sealed segments whose records are all `<= upto`, for space: the caller
    /// vouches that a durable checkpoint covers `upto` and that no state still points into
    /// them (docs/storage-format.md "Space reclamation"). The durable purge horizon is written
    /// first, then each file is unlinked with a directory fsync after it, so a crash between
    /// any two steps leaves a horizon at or above what the log still holds and a contiguous
    /// suffix of it. The segment appends go to always stays. openraft's own horizon does not
    /// move: reads it makes of the deleted range fail instead (`try_get_log_entries`).
    /// Refused (0 files, nothing changed) once a membership naming more than one node was
    /// seen: a peer may need any entry openraft has not purged; unless the group catches peers
    /// up by snapshot (`bound_by_raft_purge`), where it stops at openraft's purge horizon
    /// instead. Blocking (redb commit, unlinks): never call it from a runtime worker. The
    /// number of segment files deleted.
    pub fn reclaim_upto(&self, upto: u64) -> Result<usize, crate::backend::StorageError> {
        let _gate = self.inner.reclaim_gate.blocking_lock();
        let Some(upto) = self.reclaim_bound(upto) else {
            return Ok(0);
        };
        let log = &self.inner.log;
        let Some(through) = log.sealed_through(upto) else {
            return Ok(0);
        };
        let Some(term) = log.term_of(through) else {
            return Ok(0);
        };
        let horizon = log_id(term, through);
        if self.horizons().durable.is_none_or(|p| p.index < through) {
            let bytes =
                serde_json::to_vec(&horizon).map_err(|e| crate::backend::StorageError::Io {
                    op: "encode the purge horizon",
                    path: std::path::PathBuf::from(meta::PURGED),
                    source: std::io::Error::other(e),
                })?;
            self.inner.store.put_meta(meta::PURGED, &bytes)?;
            self.lock_horizons().durable = Some(horizon);
        }
        log.purge_upto(through)
    }

    /// Opens the snapshot stream of the checkpoint generation at `applied_index`, with the
    /// records from the run floor saved with it (docs/storage-format.md "Raft snapshot"). Under
    /// the reclaim gate, so no reclamation is deleting while its floor lease is taken; from
    /// then on every reclamation stops below the floor until the stream is dropped. The gate
    /// covers the generation's headers and first chunk only: the state is verified as it is
    /// streamed (review s20 M1). Blocking (redb reads): never call it from a runtime worker.
    pub fn snapshot_source(
        &self,
        applied_index: u64,
    ) -> Result<queenmq_storage::SnapshotSource, crate::backend::StorageError> {
        self.snapshot_source_with_ids(applied_index, None)
    }

    /// As `snapshot_source`, with the id files of `ids` after the records (version 2 when
    /// there is any).
    pub fn snapshot_source_with_ids(
        &self,
        applied_index: u64,
        ids: Option<Arc<dyn queenmq_storage::IoBackend>>,
    ) -> Result<queenmq_storage::SnapshotSource, crate::backend::StorageError> {
        let _gate = self.inner.reclaim_gate.blocking_lock();
        queenmq_storage::SnapshotSource::open_with_ids(
            &self.inner.store,
            &self.inner.log,
            applied_index,
            ids,
        )
    }

    /// Stages the snapshot received whole into `dir`'s `snapshot-incoming` (steps 2 and 3 of
    /// docs/storage-format.md "Install on the receiver"), with `meta`'s last log id as the
    /// purge horizon and its membership as the applied one, in step 3's transaction. The
    /// checks that read no record run first, with appends flowing: a snapshot at or below the
    /// committed index (review s22 H1: this node is past it), a file that is not the one
    /// announced (review s23 M2). Then the append gate closes and every append already past
    /// it finishes writing, so the keep decision sees every record that could be acknowledged
    /// (review s22 H2); appends that arrive meanwhile wait for the outcome. Under the reclaim
    /// gate, so no reclamation deletes between the keep check and the commit. On Ok (and when
    /// an earlier stage is still unfinished) this store refuses every append and reclamation
    /// from then on: the group must be closed and reopened, whose open finishes the install
    /// (`finish_interrupted_install`) before `log/` is read; an append here could be
    /// acknowledged and then lost with the replaced log. Any other error changed nothing (the
    /// files of the stream are deleted) and opens the gate again. Blocking (waits for appends,
    /// reads the file, redb commit): never call it from a runtime worker. `me` is this node:
    /// step 3 also records whether the snapshot's membership names it
    /// (`meta::INSTALLED_BEFORE_ADDITION`, review s27 snap second pass M2).
    pub fn stage_install(
        &self,
        dir: &dyn queenmq_storage::DataDir,
        opts: queenmq_storage::LogOptions,
        snapshot: &openraft::SnapshotMeta<NodeId, openraft::BasicNode>,
        me: NodeId,
    ) -> Result<queenmq_storage::Installed, crate::backend::StorageError> {
        let encode = |what: &'static str, e: serde_json::Error| crate::backend::StorageError::Io {
            op: what,
            path: std::path::PathBuf::from(meta::MEMBERSHIP),
            source: std::io::Error::other(e),
        };
        let Some(last) = snapshot.last_log_id else {
            return Err(crate::backend::StorageError::SnapshotRefused {
                offset: 0,
                reason: "a snapshot that covers no log entry has nothing to install".into(),
            });
        };
        let purged =
            serde_json::to_vec(&last).map_err(|e| encode("encode the purge horizon", e))?;
        let membership = serde_json::to_vec(&snapshot.last_membership)
            .map_err(|e| encode("encode the membership", e))?;
        // The memberships between this node's and the snapshot's were never applied here.
        let history = serde_json::to_vec(&crate::membership_history::restart_at(
            &snapshot.last_membership,
        ))
        .map_err(|e| encode("encode the membership history", e))?;
        let named = snapshot
            .last_membership
            .membership()
            .get_node(&me)
            .is_some();
        let before_addition: &[u8] = if named { b"false" } else { b"true" };
        let mut rows: Vec<(&str, &[u8])> = vec![
            (meta::PURGED, &purged),
            (meta::MEMBERSHIP, &membership),
            (meta::INSTALLED_BEFORE_ADDITION, before_addition),
            (crate::membership_history::MEMBERSHIP_HISTORY, &history),
        ];
        if is_multi_node(snapshot.last_membership.membership()) {
            rows.push((meta::MULTI_NODE, b"true"));
        }
        let _one_at_a_time = self.inner.staging.lock().unwrap_or_else(|p| p.into_inner());
        let expect = (last.index, term_of(&last));
        self.refuse_if_committed(dir, last)?;
        queenmq_storage::precheck_install(dir, &self.inner.store, &self.inner.log, expect)?;
        let mut outcome = GateAfterStage {
            store: self,
            staged: false,
        };
        self.inner.appends.close_and_drain();
        let staged = self.stage_closed(dir, opts, &rows, last);
        outcome.staged = matches!(
            staged,
            Ok(_) | Err(crate::backend::StorageError::InstallPending { .. })
        );
        staged
    }

    /// The committed check of a stage (review s22 H1), before and again after the gate
    /// closes; on a refusal the files of the stream are deleted (review s23 M3).
    fn refuse_if_committed(
        &self,
        dir: &dyn queenmq_storage::DataDir,
        last: RaftLogId,
    ) -> Result<(), crate::backend::StorageError> {
        let Some(c) = self.committed().filter(|c| c.index >= last.index) else {
            return Ok(());
        };
        // An unfinished install owns `log-incoming`: nothing of it is deleted.
        if matches!(self.inner.store.installing(), Ok(None)) {
            queenmq_storage::discard_incoming(dir);
        }
        Err(crate::backend::StorageError::SnapshotRefused {
            offset: 0,
            reason: format!(
                "this node committed index {} already, at or past the snapshot's last index {}",
                c.index, last.index
            ),
        })
    }

    /// `stage_install` once the append gate is closed and drained.
    fn stage_closed(
        &self,
        dir: &dyn queenmq_storage::DataDir,
        opts: queenmq_storage::LogOptions,
        rows: &[(&str, &[u8])],
        last: RaftLogId,
    ) -> Result<queenmq_storage::Installed, crate::backend::StorageError> {
        // Appends that passed before the close may have moved the committed index past A.
        self.refuse_if_committed(dir, last)?;
        let _gate = self.inner.reclaim_gate.blocking_lock();
        queenmq_storage::stage_install(
            dir,
            &self.inner.store,
            &self.inner.log,
            opts,
            rows,
            (last.index, term_of(&last)),
        )
    }

    /// A pass through the append gate, as an append in flight holds it (tests).
    #[cfg(test)]
    pub(crate) async fn hold_append(&self) -> Option<crate::append_gate::Pass> {
        self.inner.appends.enter().await
    }

    /// Clears the in-memory "staged" flag, as it is between a stage's commit of
    /// `raft/installing` and the gate's drop that sets the flag (tests: that window, through
    /// the store that staged, review s30 L6).
    #[cfg(test)]
    pub(crate) fn forget_staged_flag(&self) {
        self.inner.installing.store(false, Ordering::SeqCst);
    }

    /// Whether a stage has closed the append gate and not yet decided (tests).
    #[cfg(test)]
    pub(crate) fn appends_closing(&self) -> bool {
        self.inner.appends.is_closing()
    }

    /// The membership history (`membership_history`), for the sender to name the membership
    /// in force at a checkpoint's `A` as the offer did; unreadable is empty (the checkpoint is
    /// then declined: not streamed). Blocking (redb read).
    pub(crate) fn membership_history(&self) -> Vec<crate::types::StoredMembership> {
        crate::membership_history::read(&self.inner.store).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "the membership history cannot be read");
            Vec::new()
        })
    }

    /// Whether a snapshot install was staged through this store (the group must be reopened).
    pub fn install_staged(&self) -> bool {
        self.inner.installing.load(Ordering::SeqCst)
    }

    /// Whether a snapshot install is staged, by this store or by an earlier incarnation
    /// (`raft/installing` committed): the store's horizons are then the replaced log's. An
    /// unreadable key is an error, not a guess either way.
    async fn install_pending(&self) -> Result<bool, OrStorageError> {
        if self.inner.installing.load(Ordering::SeqCst) {
            return Ok(true);
        }
        meta::blocking(&self.inner.store, ErrorSubject::Logs, |s| {
            s.installing()
                .map(|i| i.is_some())
                .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, &e))
        })
        .await
    }

    /// Bytes `reclaim_upto(upto)` would free now: the files of the sealed segments whose
    /// records are all `<= upto`; 0 while reclamation is refused (a multi-node membership), so
    /// the disk gate never lets a checkpoint into the reserve on space nothing will free.
    pub fn reclaimable_bytes(&self, upto: u64) -> u64 {
        match self.reclaim_bound(upto) {
            Some(upto) => self.inner.log.sealed_bytes_through(upto),
            None => 0,
        }
    }

    /// (first, last, bytes) of the sealed segment holding `index`; None while reclamation is
    /// refused, since a compaction would then free nothing.
    pub fn sealed_segment_of(&self, index: u64) -> Option<(u64, u64, u64)> {
        // The bound of the whole log (not of `index`: a segment whose last entry is past
        // `index` may still be compacted), less where openraft's purge holds it back.
        let bound = self.reclaim_bound(u64::MAX)?;
        self.inner
            .log
            .sealed_segment_of(index)
            .filter(|(_, last, _)| *last <= bound)
    }

    /// What `reclaim_upto(upto)` may delete through now: `upto`, or less when the group
    /// catches peers up by snapshot and openraft's purge horizon is below it; None when
    /// reclamation is refused (`reclaim_refusal`; the multi-node refusal logged once).
    fn reclaim_bound(&self, upto: u64) -> Option<u64> {
        let Some(reason) = self.refusal() else {
            return Some(upto);
        };
        if reason == "multi_node" && self.inner.raft_bounded.load(Ordering::SeqCst) {
            // A change naming a new node holds reclamation off as it does on any group.
            if self.inner.widening.load(Ordering::SeqCst) > 0 {
                return None;
            }
            return self.horizons().raft.map(|h| h.index.min(upto));
        }
        if reason == "multi_node" && !self.inner.refusal_logged.swap(true, Ordering::SeqCst) {
            tracing::warn!(
                upto,
                "log segments are not reclaimed: the membership names more than one node, and \
                 a peer may still need them (snapshot catch-up is off for this group)"
            );
        }
        None
    }

    /// From now on reclamation under a multi-node membership is bounded by openraft's purge
    /// horizon instead of refused (`SnapshotFeed`: a peer behind it is sent a snapshot).
    pub(crate) fn bound_by_raft_purge(&self) {
        self.inner.raft_bounded.store(true, Ordering::SeqCst);
    }

    /// Why `reclaim_upto` deletes nothing whatever it is given, if it does not (the metric label
    /// of `queen_log_reclaim_refused_total`): `"multi_node"` (sticky), `"widening"` (a
    /// membership change naming a new node is in openraft's hands), `"installing"` (a snapshot
    /// install is staged and not yet finished by a reopen) or `"meta_unreadable"` (a key could
    /// not be read: refused this time, read again next time). Redb reads while not refused.
    pub fn reclaim_refusal(&self) -> Option<&'static str> {
        match self.refusal() {
            Some("multi_node") if self.inner.raft_bounded.load(Ordering::SeqCst) => {
                (self.inner.widening.load(Ordering::SeqCst) > 0).then_some("widening")
            }
            r => r,
        }
    }

    /// A staged snapshot install (its records are not yet the log's), else the in-memory flag,
    /// else the sticky meta key (the state machine writes it on apply and install without
    /// telling this store), else a change in progress. An unreadable key refuses, since a
    /// wrong "no" deletes what a peer may need, but is not latched.
    fn refusal(&self) -> Option<&'static str> {
        if self.inner.installing.load(Ordering::SeqCst) {
            return Some("installing");
        }
        match self.inner.store.installing() {
            Ok(None) => {}
            Ok(Some(_)) => return Some("installing"),
            Err(e) => {
                tracing::warn!(error = %e, "reading raft/installing: reclamation is refused");
                return Some("meta_unreadable");
            }
        }
        if self.inner.multi_node.load(Ordering::SeqCst) {
            return Some("multi_node");
        }
        match meta::multi_node_noted(&self.inner.store) {
            Ok(true) => {
                self.inner.multi_node.store(true, Ordering::SeqCst);
                return Some("multi_node");
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, "reading {}: reclamation is refused", meta::MULTI_NODE);
                return Some("meta_unreadable");
            }
        }
        (self.inner.widening.load(Ordering::SeqCst) > 0).then_some("widening")
    }

    /// Before a membership change that names a node the membership does not (review s12 F1):
    /// refused once anything was reclaimed or purged (`raft/purged` set), because openraft
    /// still believes those entries present (its horizon is not moved by reclamation), would
    /// read them to replicate to the new node, fail, and stop the whole group; and a snapshot
    /// cannot carry the log yet. Otherwise reclamation is refused, under the gate, until the
    /// returned guard is dropped: the caller holds it across openraft's call, so none can run
    /// between this check and the membership's append, which makes the refusal sticky before
    /// the record is written (review s13 F3). A change openraft refuses before appending
    /// anything (not the leader, a change in progress, an unknown learner), or a crash before
    /// the proposal, leaves reclamation as it was.
    /// With snapshot catch-up (`bound_by_raft_purge`) a log deleted only up to openraft's own
    /// purge horizon does not refuse: openraft knows those entries are gone and sends the new
    /// node a snapshot instead (review s26 snap M2). One deleted past that horizon (a
    /// single-node reclamation, which openraft's purge does not bound) still refuses.
    pub(crate) async fn begin_widening(&self) -> Result<Widening, crate::RaftError> {
        let _gate = self.inner.reclaim_gate.lock().await;
        let horizons = self.horizons();
        let known_gone = |h: RaftLogId| {
            self.inner.raft_bounded.load(Ordering::SeqCst)
                && horizons.raft.is_some_and(|r| r.index >= h.index)
        };
        if let Some(h) = horizons.durable.filter(|h| !known_gone(*h)) {
            return Err(crate::RaftError::Membership(format!(
                "this node deleted its log up to index {} (space reclamation or a purge), and a \
                 new node could not be sent those entries: adding a node is refused unless \
                 cluster_snapshot_catch_up is on and openraft's purge covers the deletion \
                 (issue 13)",
                h.index
            )));
        }
        self.inner.widening.fetch_add(1, Ordering::SeqCst);
        Ok(Widening(self.inner.clone()))
    }

    /// What `append` stores of `entries`: their records, and whether one is a membership naming
    /// more than one node. At or below openraft's horizon an entry of the stored term is dropped
    /// (already purged), and one of another term is an error (review s12 F7), never dropped.
    pub(crate) fn records_to_store<I>(
        &self,
        entries: I,
    ) -> Result<(Vec<Record>, bool), OrStorageError>
    where
        I: IntoIterator<Item = Entry>,
    {
        let mut records: Vec<Record> = Vec::new();
        let mut widens = false;
        // At or below openraft's horizon an entry is purged by definition (covered by the
        // applied state): it is not stored, so the log still continues right after the horizon.
        let horizon = self.horizons().raft;
        let mut below = 0u64;
        for entry in entries {
            let (term, index) = (entry.log_id.leader_id.term, entry.log_id.index);
            match at_horizon(term, index, horizon, |i| self.inner.log.term_of(i)) {
                AtHorizon::Store => {}
                AtHorizon::Drop => {
                    below += 1;
                    continue;
                }
                AtHorizon::Conflict { known } => {
                    return Err(io_err(
                        ErrorSubject::Log(entry.log_id),
                        ErrorVerb::Write,
                        AnyError::error(format!(
                            "append of ({term}, {index}) at or below the purge horizon \
                             {horizon:?}, where term {known} is already applied: two entries \
                             with one index and two terms (a Raft safety violation)"
                        )),
                    ));
                }
            }
            if let openraft::EntryPayload::Membership(m) = &entry.payload {
                widens |= is_multi_node(m);
            }
            let payload = entry_codec::encode(&entry)
                .map_err(|e| io_err(ErrorSubject::Log(entry.log_id), ErrorVerb::Write, &e))?;
            records.push((entry.log_id.index, entry.log_id.leader_id.term, payload));
        }
        if below > 0 {
            tracing::warn!(
                entries = below, horizon = ?horizon,
                "append at or below the purge horizon: those entries are already purged and are not stored"
            );
        }
        Ok((records, widens))
    }

    fn lock_horizons(&self) -> std::sync::MutexGuard<'_, Horizons> {
        // Plain data: a panic while holding the lock leaves a usable value behind.
        self.inner
            .horizons
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn horizons(&self) -> Horizons {
        *self.lock_horizons()
    }

    /// Records in meta `raft/multi_node`, then in memory, that a membership naming more than
    /// one node was seen: reclamation is refused for good. A failed write is returned and
    /// retried by the next call (the in-memory flag is set only once the key is durable).
    pub(crate) async fn note_multi_node(&self) -> Result<(), OrStorageError> {
        if self.inner.multi_node.load(Ordering::SeqCst) {
            return Ok(());
        }
        meta::blocking(
            &self.inner.store,
            ErrorSubject::Store,
            meta::note_multi_node,
        )
        .await?;
        self.inner.multi_node.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn last_present(&self) -> Option<RaftLogId> {
        self.inner
            .log
            .last()
            .map(|(index, term)| log_id(term, index))
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, OrStorageError> {
        self.read_entries(range, u64::MAX)
    }

    /// What replication reads for one append: the entries from `start` up to the one that
    /// would take the batch over `wire::APPEND_ENTRIES_MAX` (at least one), counted from the
    /// record lengths before anything is decoded, so openraft never reads 300 large records
    /// that the client then refuses to send (review s14 F4).
    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, OrStorageError> {
        self.read_entries(start..end, u64::from(crate::wire::APPEND_ENTRIES_MAX))
    }
}

impl LogStore {
    /// The entries of `range`, stopping before the one whose record would take the sum of
    /// record lengths (each with its wire head) over `max_bytes`; the first is always read.
    fn read_entries<RB: RangeBounds<u64>>(
        &self,
        range: RB,
        max_bytes: u64,
    ) -> Result<Vec<Entry>, OrStorageError> {
        let Some((last, _)) = self.inner.log.last() else {
            return Ok(Vec::new());
        };
        // Below openraft's own horizon openraft knows nothing is left: its contract (and its
        // suite) wants the entries from the horizon on.
        let h = self.horizons();
        let floor = h.raft.map_or(0, |p| p.index.saturating_add(1));
        let start = match range.start_bound() {
            Bound::Included(s) => *s,
            Bound::Excluded(s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        }
        .max(floor);
        let end = match range.end_bound() {
            Bound::Included(e) => e.saturating_add(1),
            Bound::Excluded(e) => *e,
            Bound::Unbounded => u64::MAX,
        }
        // Exact, not saturated: the log never holds u64::MAX (`queenmq_storage::HIGHEST_INDEX`).
        .min(last.saturating_add(1));
        // Between openraft's horizon and the durable one openraft believes entries present
        // that reclamation deleted: the read fails, because a vector starting later than
        // asked would be taken for `start..`.
        let reclaimed_through = h.durable.map_or(0, |p| p.index.saturating_add(1));
        if start < end && start < reclaimed_through {
            return Err(io_err(
                ErrorSubject::LogIndex(start),
                ErrorVerb::Read,
                AnyError::error(format!(
                    "log entries {start}..{reclaimed_through} were reclaimed above the horizon \
                     openraft knows ({floor}); they can no longer be read"
                )),
            ));
        }
        // Below the first record and above both horizons nothing was ever stored (a log that
        // began past 0): "not found" is allowed, so the answer starts at the first record.
        let start = start.max(self.inner.log.first_index().unwrap_or(0));

        let mut out = Vec::with_capacity(end.saturating_sub(start).min(1024) as usize);
        let mut bytes = 0u64;
        for index in start..end {
            let record = self
                .inner
                .log
                .read(index)
                .map_err(|e| io_err(ErrorSubject::LogIndex(index), ErrorVerb::Read, &e))?;
            // A record can vanish under us only through a concurrent truncate; stop at the gap
            // rather than return a log with a hole.
            let Some((term, payload)) = record else { break };
            bytes = bytes.saturating_add((payload.len() + crate::rpc_codec::ENTRY_HEAD) as u64);
            if bytes > max_bytes && !out.is_empty() {
                break;
            }
            let entry = entry_codec::decode(index, term, payload)
                .map_err(|e| io_err(ErrorSubject::LogIndex(index), ErrorVerb::Read, &e))?;
            out.push(entry);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, OrStorageError> {
        // openraft reads this at start, when both horizons are the durable one.
        let purged = self.horizons().raft;
        let last = match (self.last_present(), purged) {
            (Some(last), Some(p)) if last.index <= p.index => Some(p),
            (Some(last), _) => Some(last),
            (None, p) => p,
        };
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), OrStorageError> {
        let vote = *vote;
        meta::blocking(&self.inner.store, ErrorSubject::Vote, move |s| {
            meta::put(s, meta::VOTE, &vote, ErrorSubject::Vote)
        })
        .await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, OrStorageError> {
        meta::get(&self.inner.store, meta::VOTE, ErrorSubject::Vote)
    }

    async fn save_committed(&mut self, committed: Option<RaftLogId>) -> Result<(), OrStorageError> {
        self.inner
            .committed
            .set(committed)
            .map_err(|e| io_err(ErrorSubject::Store, ErrorVerb::Write, AnyError::error(e)))
    }

    async fn read_committed(&mut self) -> Result<Option<RaftLogId>, OrStorageError> {
        let committed = self.inner.committed.latest();
        let last = self.last_present().map(|l| l.index);
        Ok(match committed {
            Some(c) if Some(c.index) > last => {
                tracing::warn!(committed = %c, last = ?last, "persisted committed id is past the log end; ignoring it");
                None
            }
            c => c,
        })
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), OrStorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // Held until the records are written (by the writer thread), so a stage closing the
        // gate waits for them; while a stage decides, this waits for its outcome.
        let Some(pass) = self.inner.appends.enter().await else {
            // Appended after a stage that replaces `log/` at the reopen, the entry would be
            // acknowledged and then lost with the old log: the error stops the group, whose
            // reopen finishes the install.
            return Err(io_err(
                ErrorSubject::Logs,
                ErrorVerb::Write,
                AnyError::error(
                    "a snapshot install is being staged or is staged: the group must be reopened",
                ),
            ));
        };
        let (records, widens) = self.records_to_store(entries)?;
        if records.is_empty() {
            callback.log_io_completed(Ok(()));
            return Ok(());
        }
        if widens {
            // Flag first, then wait out a reclamation already running: openraft replicates to
            // the new node only after this append returns.
            self.note_multi_node().await?;
            drop(self.inner.reclaim_gate.lock().await);
        }
        self.inner
            .writer
            .append(records, callback, pass)
            .await
            .map_err(|e| {
                if is_enospc(&e) {
                    self.inner.out_of_space.store(true, Ordering::SeqCst);
                }
                io_err(ErrorSubject::Logs, ErrorVerb::Write, &e)
            })
    }

    async fn truncate(&mut self, log_id: RaftLogId) -> Result<(), OrStorageError> {
        self.inner
            .writer
            .truncate(log_id.index)
            .await
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, &e))
    }

    async fn purge(&mut self, upto: RaftLogId) -> Result<(), OrStorageError> {
        // Horizon first: if we crash right after, the restart reads from the new horizon and
        // the records below it are merely unreachable, never a hole.
        // The durable horizon never moves back below what a reclamation already deleted; the
        // gate keeps one from writing it between our read and our write.
        let _gate = self.inner.reclaim_gate.lock().await;
        // A staged install wrote the snapshot's horizon in its commit; this store's horizons
        // are the replaced log's, below it. Writing one of them now would put the horizon
        // back under the installed records, and the reopen would read entries that are gone
        // (openraft "try to get log at index …": the s28 CI failure). Staging and this check
        // both hold the gate, so the commit is either seen here or comes after this write.
        if self.install_pending().await? {
            tracing::info!(%upto, "purge skipped: a staged snapshot install owns the horizon");
            return Ok(());
        }
        let durable = later(self.horizons().durable, Some(upto));
        if durable != self.horizons().durable {
            meta::blocking(&self.inner.store, ErrorSubject::Logs, move |s| {
                meta::put(s, meta::PURGED, &durable, ErrorSubject::Logs)
            })
            .await?;
        }
        {
            let mut h = self.lock_horizons();
            h.durable = later(h.durable, durable);
            h.raft = later(h.raft, Some(upto));
        }

        // Purging past the last record (a follower installing a snapshot) makes every record
        // stale, and the next append starts at upto+1: clear the log so it accepts that index.
        let last = self.inner.log.last().map(|(i, _)| i);
        if let (Some(last), Some(first)) = (last, self.inner.log.first_index()) {
            if upto.index > last {
                tracing::warn!(
                    purge_upto = %upto, first, last,
                    "purging past the last record: every record in the log is stale and is deleted"
                );
                self.inner
                    .writer
                    .truncate(first)
                    .await
                    .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, &e))?;
            }
        }
        Ok(())
    }
}

/// A stored log id naming an index past `HIGHEST_INDEX` was never written by this store (no
/// record can hold such an index): it is damage, refused naming the key, with nothing changed.
/// Taken as it is, openraft would resume past the reserved index (review s17 S2).
fn within_index_space(key: &str, id: Option<RaftLogId>) -> Result<(), OrStorageError> {
    match id {
        Some(id) if id.index > crate::backend::HIGHEST_INDEX => Err(io_err(
            ErrorSubject::Store,
            ErrorVerb::Read,
            AnyError::error(format!(
                "the state store is damaged: meta key {key} names log index {}, past the \
                 highest index a log holds ({}); nothing was changed",
                id.index,
                crate::backend::HIGHEST_INDEX
            )),
        )),
        _ => Ok(()),
    }
}

/// `purge` past the last record commits the horizon before it deletes the records (so a crash
/// never leaves a hole below a horizon that is not durable yet). A kill -9 between the two
/// leaves records that all lie at or below the horizon, and the next append (horizon + 1)
/// could never follow them: delete them now, as the interrupted purge would have, before
/// openraft reads the log state. Deleting the whole log cannot fail half-way into a state this
/// check does not finish next time: removal is newest first and every survivor stays stale.
fn finish_interrupted_purge(
    log: &SegmentLog,
    purged: Option<RaftLogId>,
) -> Result<(), OrStorageError> {
    let (Some(p), Some((last, _)), Some(first)) = (purged, log.last(), log.first_index()) else {
        return Ok(());
    };
    if p.index <= last {
        return Ok(());
    }
    tracing::warn!(
        purge_horizon = %p, first, last,
        "finishing a purge a crash interrupted: every record is at or below the purge horizon \
         and is deleted"
    );
    log.truncate_from(first)
        .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, &e))
}

/// Decides the append gate when a stage ends, however it ends (an unwinding panic too,
/// review s23 L2): sealed when it staged or when `raft/installing` is committed or cannot be
/// read (a commit that errs after its header reached the disk), else opened again.
struct GateAfterStage<'s> {
    store: &'s LogStore,
    staged: bool,
}

impl Drop for GateAfterStage<'_> {
    fn drop(&mut self) {
        let inner = &self.store.inner;
        let committed = !matches!(inner.store.installing(), Ok(None));
        if self.staged || committed || inner.installing.load(Ordering::SeqCst) {
            inner.installing.store(true, Ordering::SeqCst);
            inner.appends.seal();
        } else {
            inner.appends.open();
        }
    }
}

fn is_enospc(e: &WriterError) -> bool {
    matches!(e, WriterError::Storage(crate::backend::StorageError::Io { source, .. })
        if source.kind() == std::io::ErrorKind::StorageFull)
}
