//! The Raft state-machine seam: committed entries are applied to the shared state. On the
//! leader the planner already applied them (same cycle number), so only the log position moves.

use std::sync::Arc;

use queenmq_raft::ApplyHandler;

use super::{record_cow_copies, Shared};
pub use queenmq_engine::apply::{apply_entry, apply_entry_noting, Committed};
use queenmq_engine::state::{cow_clock, decode_state, encode_state};

pub struct EngineApply {
    shared: Arc<Shared>,
    checkpointed: Option<(u64, u64)>,
    /// The `tenant` label of the copies a follower's apply makes.
    tenant: Arc<str>,
    /// The `default` group of a cluster member with `cluster_tenant_groups`: where the tenant
    /// declarations it commits (effect 67) are recorded and queued for opening.
    declarations: Option<crate::group::hosted::Declarations>,
}

impl EngineApply {
    pub fn new(shared: Arc<Shared>, tenant: Arc<str>) -> Self {
        let checkpointed = shared.lock().applied;
        EngineApply {
            shared,
            checkpointed,
            tenant,
            declarations: None,
        }
    }

    pub fn with_declarations(mut self, d: crate::group::hosted::Declarations) -> Self {
        self.declarations = Some(d);
        self
    }
}

/// Runs `f`, which writes hosted records (up to ~4 fsyncs each, `max_tenants` records at most
/// on a restore), so that the runtime's other tasks keep a worker meanwhile: the Raft core
/// calls `apply` and `restore` from its async tasks (review s30 tenants L3). On a
/// multi-thread runtime's worker it hands the worker's queue to another thread first
/// (`block_in_place`); where that is refused (a current-thread runtime) or pointless (no
/// runtime), `f` runs as is.
fn off_the_worker<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

impl ApplyHandler for EngineApply {
    fn apply(&self, index: u64, term: u64, payload: &[u8]) -> Result<(), String> {
        let entry = Committed::decode(payload).map_err(|e| {
            // A committed entry we cannot read means a bug or corruption past the CRC:
            // applying around it would diverge, so the group stops here and its owner
            // rebuilds it.
            tracing::error!(index, error = %e, "committed entry does not decode; stopping the group");
            format!("committed entry {index} does not decode: {e}")
        })?;
        // A declaration is recorded BEFORE the state's `applied` passes this index: a
        // checkpoint taken in between would otherwise save the entry as applied, and a kill -9
        // then would never replay it, so this node would never host the tenant (review s27
        // tenants H2). A failed record stops the group with the state still before the entry.
        let declared = entry.declarations();
        if !declared.is_empty() {
            match &self.declarations {
                Some(sink) => off_the_worker(|| {
                    for (tenant, voters) in &declared {
                        sink.applied(index, tenant, voters).map_err(|e| {
                            tracing::error!(index, tenant, error = %e, "recording a tenant declaration failed; stopping the group");
                            format!("recording the declaration of tenant {tenant:?} at {index} failed: {e}")
                        })?;
                    }
                    Ok::<(), String>(())
                })?,
                // Only a member with the key on declares. A node with it off keeps the
                // declaration in its state (the state is alike on every node: its snapshots
                // carry it to others) but hosts the tenant only once its key is on, when the
                // open writes the records its checkpoint declares (review s30 tenants L2).
                None => tracing::warn!(index, "a tenant declaration committed while cluster_tenant_groups is off here: this node hosts the tenant only once the key is on (set the key alike on every node)"),
            }
        }
        let mut st = self.shared.lock();
        // A follower's apply writes blocks a checkpoint may still share, under the lock on
        // the Raft apply thread: time its copies as a cycle's are (review s26 ckpt M4). What
        // this thread counted before is not this stretch's.
        let _ = cow_clock::take();
        entry.apply(&mut st, index, term);
        record_cow_copies(&self.tenant, cow_clock::take());
        Ok(())
    }

    fn checkpointed(&self) -> Option<(u64, u64)> {
        self.checkpointed
    }

    fn snapshot(&self) -> (Option<(u64, u64)>, Vec<u8>) {
        let st = self.shared.lock();
        (st.applied, encode_state(&st))
    }

    fn restore(&self, index: u64, term: u64, bytes: &[u8]) -> Result<(), String> {
        let mut s = decode_state(bytes).map_err(|e| {
            tracing::error!(index, error = %e, "snapshot does not decode; stopping the group");
            format!("snapshot at {index} does not decode: {e}")
        })?;
        s.applied = Some((index, term));
        // The snapshot may carry declarations whose entries this node never applied: their
        // records stand before the state moves past them, as on the apply path.
        if let Some(sink) = &self.declarations {
            off_the_worker(|| crate::group::checkpoint_declarations::record_missing(sink, &s.tenants)).map_err(|e| {
                tracing::error!(index, error = %e, "recording the snapshot's tenant declarations failed; stopping the group");
                format!("recording the tenant declarations of the snapshot at {index} failed: {e}")
            })?;
        }
        let mut st = self.shared.lock();
        // The node's own id files and filters stay: they are not state (state/txn_spill.rs).
        s.txn_spill = st.txn_spill.take();
        if let Some(spill) = s.txn_spill.as_mut() {
            spill.table_replaced();
        }
        *st = s;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::hosted::Declarations;
    use crate::state::State;
    use queenmq_engine::entry::{Effect, EntryBuilder};
    use queenmq_engine::entry_tenants::TenantDeclared;
    use std::time::Duration;

    fn declaration(tenant: &str) -> Vec<u8> {
        let mut b = EntryBuilder::new(1, 1_000);
        b.push(&Effect::TenantDeclared(TenantDeclared {
            tenant,
            voters: vec![1, 2, 3],
        }));
        b.finish()
    }

    #[test]
    fn a_declaration_that_cannot_be_recorded_leaves_the_state_before_its_entry() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the data directory should be: the record cannot be written.
        let data_dir = dir.path().join("not-a-dir");
        std::fs::write(&data_dir, b"x").unwrap();
        let shared = Shared::new(State::default());
        let apply = EngineApply::new(shared.clone(), Arc::from("default"))
            .with_declarations(Declarations::new(data_dir));
        let err = apply.apply(4, 1, &declaration("acme")).unwrap_err();
        assert!(err.contains("acme"), "{err}");
        // A checkpoint now would save nothing past the entry: a restart replays it.
        assert_eq!(shared.lock().applied, None);
        assert_eq!(shared.lock().last_cycle, 0);
    }

    #[test]
    fn a_declaration_is_recorded_by_the_time_its_entry_is_applied() {
        let dir = tempfile::tempdir().unwrap();
        let shared = Shared::new(State::default());
        let sink = Declarations::new(dir.path().to_path_buf());
        let apply = EngineApply::new(shared.clone(), Arc::from("default")).with_declarations(sink);
        apply.apply(4, 1, &declaration("acme")).unwrap();
        assert_eq!(shared.lock().applied, Some((4, 1)));
        let hosted = crate::group::hosted::read(dir.path(), "acme").unwrap();
        assert_eq!(hosted, Some(vec![1, 2, 3]));
    }

    /// A snapshot installed past a declaration (its entry never applied here) writes the
    /// record from the snapshot's tenants section before the state moves; one that cannot
    /// be written leaves the state where it was.
    #[test]
    fn a_snapshot_past_a_declaration_records_it_before_the_state_moves() {
        let mut leader = State::default();
        queenmq_engine::apply::apply_entry(&mut leader, 4, 1, &declaration("acme")).unwrap();
        let blob = encode_state(&leader);
        let dir = tempfile::tempdir().unwrap();
        let not_a_dir = dir.path().join("not-a-dir");
        std::fs::write(&not_a_dir, b"x").unwrap();
        let shared = Shared::new(State::default());
        let broken = EngineApply::new(shared.clone(), Arc::from("default"))
            .with_declarations(Declarations::new(not_a_dir));
        assert!(broken.restore(9, 2, &blob).is_err());
        assert_eq!(shared.lock().applied, None);
        let sink = Declarations::new(dir.path().to_path_buf());
        let apply =
            EngineApply::new(shared.clone(), Arc::from("default")).with_declarations(sink.clone());
        apply.restore(9, 2, &blob).unwrap();
        assert_eq!(shared.lock().applied, Some((9, 2)));
        let hosted = crate::group::hosted::read(dir.path(), "acme").unwrap();
        assert_eq!(hosted, Some(vec![1, 2, 3]));
        assert_eq!(sink.take(), ["acme"], "queued for the registry to open");
    }

    /// Review s30 tenants L3: a restore that blocks writing records (here on a record that is
    /// a FIFO, whose open waits for a writer) leaves the runtime's only worker to the other
    /// tasks, one of which is that writer. Before, the restore held the worker and the writer
    /// never ran.
    #[test]
    fn a_restore_blocked_on_its_records_leaves_the_runtime_a_worker() {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir().unwrap();
        let hosted = dir.path().join(crate::group::hosted::HOSTED_DIR);
        std::fs::create_dir(&hosted).unwrap();
        let fifo = hosted.join("acme");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let mut leader = State::default();
        queenmq_engine::apply::apply_entry(&mut leader, 4, 1, &declaration("acme")).unwrap();
        let blob = encode_state(&leader);
        let apply = EngineApply::new(Shared::new(State::default()), Arc::from("default"))
            .with_declarations(Declarations::new(dir.path().to_path_buf()));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let record = b"queen-tenant-hosted 1\nvoters=1,2,3\nopened\n";
        let restore = rt.spawn(async move { apply.restore(9, 2, &blob) });
        let path = fifo.clone();
        let writer = rt.spawn(async move {
            // Non-blocking open (refused until the restore opened it to read): this task
            // must not itself hold the worker.
            loop {
                match std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(0o4000) // O_NONBLOCK
                    .open(&path)
                {
                    Ok(mut f) => return f.write_all(record).unwrap(),
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
        });
        let started = std::time::Instant::now();
        while !(restore.is_finished() && writer.is_finished())
            && started.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let held = !writer.is_finished();
        if held {
            // Releases the stuck restore so the runtime can be dropped.
            let mut f = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            f.write_all(record).unwrap();
        }
        assert!(!held, "the restore held the runtime's only worker");
        assert_eq!(rt.block_on(restore).unwrap(), Ok(()));
        rt.shutdown_timeout(Duration::from_secs(1));
    }
}
