//! The receiving side of a snapshot, outside openraft: the cluster listener hands every
//! snapshot chunk of a group to its `SnapshotInbox`, which writes it into a
//! `SnapshotReceiver` (the data directory's own `snapshot-incoming.<n>.part`, every byte judged
//! before it is written) and, at the end of the stream, finishes the file and stages the
//! install durably (`LogStore::stage_install`, steps 2-3 of docs/storage-format.md "Install on
//! the receiver").
//!
//! openraft is never told. Its own path (`Raft::install_snapshot` then
//! `RaftStateMachine::install_snapshot`) purges the log to `A` before the state machine runs,
//! and an error there stops the core (review s24 snap M1): a refused or killed stage would
//! leave `raft/purged = A` over a checkpoint below `A`, a node that cannot restart. Here a
//! refusal changes nothing (the stage deletes the stream and opens the append gate again) and
//! reaches the sender as an error it retries later; a stage that succeeded leaves a store that
//! refuses appends until the group is reopened, and the reopen (`finish_interrupted_install`,
//! then openraft's start from the installed checkpoint at `A` and horizon `A`) is the install.
//! The inbox says so on its `staged` watch; the group's owner reopens it.
//!
//! One stream at a time per group: a chunk waits for the one before it (the lock is held
//! across its write), and a chunk of a new snapshot id at offset 0 replaces the stream, whose
//! part file its receiver deletes when dropped. So at most one chunk (the listener's
//! `snapshot` frame limit) is in memory per group. A stream that gets no chunk for
//! `ABANDONED_AFTER` is dropped with its part file (review s27 snap M4: it stayed until the next
//! stream or restart); a later chunk of it is answered `SnapshotMismatch` (start again at 0).

// openraft's errors (~200 bytes) are returned by value to its traits' boundary.
#![allow(clippy::result_large_err)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::error::{Fatal, InstallSnapshotError, RaftError, SnapshotMismatch};
use openraft::raft::{InstallSnapshotRequest, InstallSnapshotResponse};
use openraft::{AnyError, ErrorSubject, ErrorVerb, Raft, Vote};
use queenmq_storage::{AdmitFn, DataDir, LogOptions, SnapshotReceiver, StorageError};

use crate::snapshot_feed::SnapshotFeed;
use crate::types::{io_err, NodeId, TypeConfig};

type Answer = Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>;

/// Far above the sender's gap between two chunks (each has a deadline of 2 s plus its bytes
/// at 10 MB/s, and a refused one is resent after openraft's backoff).
pub const ABANDONED_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// The snapshot chunks of one group, received and staged outside openraft. Clones share it.
#[derive(Clone)]
pub struct SnapshotInbox {
    inner: Arc<Inner>,
}

struct Inner {
    feed: SnapshotFeed,
    dir: Arc<dyn DataDir>,
    opts: LogOptions,
    admit: Arc<AdmitFn>,
    /// The stream being received, if any.
    current: tokio::sync::Mutex<Option<Incoming>>,
    /// Turns true once a stage succeeded: the group must be reopened.
    staged: tokio::sync::watch::Sender<bool>,
    installs: AtomicU64,
    /// The highest vote a chunk came with. openraft is never told of a stream's vote, so
    /// without it a deposed leader and the new one could each replace the other's stream for
    /// ever (review s26 snap M3); a lower one is answered with it, which makes that sender's
    /// openraft step down.
    highest: std::sync::Mutex<Option<Vote<NodeId>>>,
    /// Chunks written, counted under `current`'s lock: a stream whose count did not move for
    /// `abandon_after` is abandoned.
    chunks: AtomicU64,
    abandon_after: std::time::Duration,
}

struct Incoming {
    snapshot_id: String,
    receiver: SnapshotReceiver,
}

impl SnapshotInbox {
    /// An inbox writing into `dir` (the group's data directory, whose `log/` the feed's log
    /// store holds), judging records against `opts.max_record_bytes` and each stream's header
    /// with `admit` (free space) before any byte past it is written.
    pub fn new(
        feed: SnapshotFeed,
        dir: Arc<dyn DataDir>,
        opts: LogOptions,
        admit: Arc<AdmitFn>,
    ) -> SnapshotInbox {
        SnapshotInbox::abandoning_after(feed, dir, opts, admit, ABANDONED_AFTER)
    }

    /// `new` with another wait before an idle stream is abandoned (tests).
    pub(crate) fn abandoning_after(
        feed: SnapshotFeed,
        dir: Arc<dyn DataDir>,
        opts: LogOptions,
        admit: Arc<AdmitFn>,
        abandon_after: std::time::Duration,
    ) -> SnapshotInbox {
        SnapshotInbox {
            inner: Arc::new(Inner {
                feed,
                dir,
                opts,
                admit,
                current: tokio::sync::Mutex::new(None),
                staged: tokio::sync::watch::Sender::new(false),
                installs: AtomicU64::new(0),
                highest: std::sync::Mutex::new(None),
                chunks: AtomicU64::new(0),
                abandon_after,
            }),
        }
    }

    /// Turns true once a snapshot was staged: from then on the group's log store refuses
    /// appends, and the group must be closed and reopened (the reopen finishes the install).
    pub fn staged(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.staged.subscribe()
    }

    /// Snapshots staged by this inbox.
    pub fn installs(&self) -> u64 {
        self.inner.installs.load(Ordering::SeqCst)
    }

    /// Receives one chunk of `raft`'s group. The answer carries this node's vote, as
    /// openraft's own receiver's does. A chunk from a leader whose vote is below this node's,
    /// or below the highest a chunk came with, is answered with that vote without being
    /// written. A receiver's refusal or a refused stage is a
    /// `Fatal` answer, which the sender's client takes as `Unreachable`: it backs off and
    /// sends the snapshot again from offset 0, where a refused receiver starts afresh.
    pub async fn receive(
        &self,
        raft: &Raft<TypeConfig>,
        req: InstallSnapshotRequest<TypeConfig>,
    ) -> Answer {
        let vote = raft.metrics().borrow().vote;
        let answer = InstallSnapshotResponse { vote };
        if req.vote < vote {
            return Ok(answer);
        }
        {
            let mut highest = self.inner.highest.lock().unwrap_or_else(|p| p.into_inner());
            match *highest {
                Some(seen) if req.vote < seen => {
                    return Ok(InstallSnapshotResponse { vote: seen });
                }
                _ => *highest = Some(req.vote),
            }
        }
        if *self.inner.staged.borrow() {
            // Its `snapshot-incoming` is the reopen's to delete, not a new stream's to replace.
            return Err(refused(AnyError::error(
                "a snapshot is staged here and waits for the group's reopen",
            )));
        }
        let mut current = self.inner.current.lock().await;
        let same = current
            .as_ref()
            .is_some_and(|c| c.snapshot_id == req.meta.snapshot_id);
        if !same {
            if req.offset != 0 {
                // openraft's sender restarts the snapshot at 0 on this answer.
                return Err(RaftError::APIError(InstallSnapshotError::SnapshotMismatch(
                    SnapshotMismatch {
                        expect: openraft::SnapshotSegmentId {
                            id: req.meta.snapshot_id.clone(),
                            offset: 0,
                        },
                        got: openraft::SnapshotSegmentId {
                            id: req.meta.snapshot_id.clone(),
                            offset: req.offset,
                        },
                    },
                )));
            }
            // The old stream's receiver deletes its own part file as it drops.
            *current = None;
            let (files, admit) = (self.inner.dir.files(), self.inner.admit.clone());
            let max = self.inner.opts.max_record_bytes;
            let receiver =
                blocking(move || SnapshotReceiver::create(files, max, Box::new(move |h| admit(h))))
                    .await?;
            *current = Some(Incoming {
                snapshot_id: req.meta.snapshot_id.clone(),
                receiver,
            });
        }
        let Some(mut incoming) = current.take() else {
            return Err(refused(AnyError::error("no stream is being received")));
        };
        let (offset, data) = (req.offset, req.data);
        let (incoming, written) = blocking_keep(move || {
            let r = incoming.receiver.write_at(offset, &data);
            (incoming, r)
        })
        .await?;
        if let Err(e) = written {
            // The receiver deleted its file; a chunk at 0 starts it afresh.
            *current = Some(incoming);
            return Err(refused(AnyError::new(&e)));
        }
        if !req.done {
            *current = Some(incoming);
            let seen = self.inner.chunks.fetch_add(1, Ordering::SeqCst) + 1;
            self.abandon_if_idle(seen);
            return Ok(answer);
        }
        // The stream ends here whatever the stage decides: a refusal deleted its files.
        let me = raft.metrics().borrow().id;
        let staged = self.stage(incoming.receiver, req.meta, me).await;
        staged.map(|()| answer)
    }

    /// Drops the stream, and with it its part file, unless a chunk came in the
    /// `abandon_after` after chunk number `seen` (review s27 snap M4).
    fn abandon_if_idle(&self, seen: u64) {
        let inner = Arc::downgrade(&self.inner);
        let after = self.inner.abandon_after;
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let mut current = inner.current.lock().await;
            if inner.chunks.load(Ordering::SeqCst) != seen {
                return;
            }
            if let Some(gone) = current.take() {
                tracing::info!(
                    snapshot = %gone.snapshot_id,
                    idle_ms = after.as_millis() as u64,
                    "snapshot stream abandoned: its part file is deleted"
                );
                // The receiver unlinks its part file as it drops.
                drop(gone);
            }
        });
    }

    /// Finishes the file (fdatasync, rename, directory fsync) and stages it.
    async fn stage(
        &self,
        receiver: SnapshotReceiver,
        meta: openraft::SnapshotMeta<NodeId, openraft::BasicNode>,
        me: NodeId,
    ) -> Result<(), RaftError<NodeId, InstallSnapshotError>> {
        let inner = self.inner.clone();
        let id = meta.snapshot_id.clone();
        let Some(store) = inner.feed.store() else {
            return Err(refused(AnyError::error("the group is opening or closed")));
        };
        let installed = blocking(move || {
            receiver.finish()?;
            store.stage_install(&*inner.dir, inner.opts, &meta, me)
        })
        .await?;
        self.inner.installs.fetch_add(1, Ordering::SeqCst);
        self.inner.feed.count_install();
        tracing::info!(
            snapshot = %id,
            applied = installed.header.applied_index,
            replaced_log = installed.switched,
            "snapshot staged: the group reopens to finish the install"
        );
        self.inner.staged.send_replace(true);
        Ok(())
    }
}

fn refused(e: AnyError) -> RaftError<NodeId, InstallSnapshotError> {
    RaftError::Fatal(Fatal::StorageError(io_err(
        ErrorSubject::Snapshot(None),
        ErrorVerb::Write,
        e,
    )))
}

/// Runs `f` on the blocking pool; its error, or the pool's, is a refusal.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, RaftError<NodeId, InstallSnapshotError>> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(e)) => Err(refused(AnyError::new(&e))),
        Err(e) => Err(refused(AnyError::new(&e))),
    }
}

/// Runs `f` on the blocking pool, handing back what it owns with its result.
async fn blocking_keep<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, RaftError<NodeId, InstallSnapshotError>> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| refused(AnyError::new(&e)))
}
