//! openraft's `RaftStateMachine` over the broker engine (`ApplyHandler`).
//!
//! The engine owns the application state and its durable checkpoint; this adapter only keeps
//! what Raft needs on top: the last applied log id (blank and membership entries advance it
//! without touching the engine), the applied membership (meta `raft/membership`, so it is known
//! again after a restart) and the current snapshot (in memory: openraft rebuilds one on demand).
//!
//! On start, the last applied id is the engine's checkpoint, so openraft re-applies every
//! committed entry after it — that is how the engine's state is rebuilt from the log.

// openraft's storage traits return `openraft::StorageError` (~200 bytes) by value; helpers
// return the same type so `?` reaches the trait boundary without boxing and unboxing.
#![allow(clippy::result_large_err)]

use std::io::Cursor;
use std::sync::Arc;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, EntryPayload, ErrorSubject, ErrorVerb, OptionalSend, RaftSnapshotBuilder,
    SnapshotMeta,
};

use crate::apply::ApplyHandler;
use crate::backend::StateStore;
use crate::index_cell::IndexCell;
use crate::membership_history;
use crate::meta;
use crate::types::{
    io_err, is_multi_node, log_id, term_of, Entry, NodeId, OrStorageError, RaftLogId,
    StoredMembership, TypeConfig,
};

type Meta = SnapshotMeta<NodeId, openraft::BasicNode>;

/// How long a look for the newest durable checkpoint is reused (`StateMachine::durable`).
const DURABLE_FRESH: std::time::Duration = std::time::Duration::from_millis(500);

#[derive(Clone)]
struct StoredSnapshot {
    meta: Meta,
    data: Vec<u8>,
}

pub struct StateMachine {
    handler: Arc<dyn ApplyHandler>,
    store: Arc<StateStore>,
    last_applied: Option<RaftLogId>,
    /// The last application entry handed to the engine: a snapshot from the engine that covers
    /// it also covers every blank/membership entry applied since.
    last_app_applied: Option<RaftLogId>,
    membership: StoredMembership,
    snapshot: Option<StoredSnapshot>,
    snapshot_seq: u64,
    /// Whether snapshots are the durable checkpoint generations (`SnapshotFeed`); off, they
    /// are what they were before (an engine encode, or a position only at start-up).
    offer_durable: bool,
    /// The last look for a durable snapshot and when it was taken (`durable`).
    durable_seen: Option<(std::time::Instant, Option<StoredSnapshot>)>,
    /// `last_applied.index`, readable from other tasks.
    applied_cell: Arc<IndexCell>,
    /// This node, once known (`for_node`): an applied membership naming it ends the
    /// install-before-addition exemption (`meta::INSTALLED_BEFORE_ADDITION`).
    me: Option<u64>,
    /// Dropped with the state machine: openraft does not join its state-machine task on
    /// shutdown, so `RaftNode::shutdown` waits on the other end to know the engine and the
    /// state store are no longer in use.
    _alive: tokio::sync::oneshot::Sender<()>,
}

impl StateMachine {
    /// Reads the engine's checkpoint and the applied membership. Blocking (redb read).
    /// The receiver resolves (with an error) once the state machine is dropped.
    pub fn open(
        handler: Arc<dyn ApplyHandler>,
        store: Arc<StateStore>,
    ) -> Result<(StateMachine, tokio::sync::oneshot::Receiver<()>), OrStorageError> {
        let membership: StoredMembership =
            meta::get(&store, meta::MEMBERSHIP, ErrorSubject::StateMachine)?.unwrap_or_default();
        membership_history::seed(&store, &membership)?;
        let checkpoint = handler
            .checkpointed()
            .map(|(index, term)| log_id(term, index));
        let applied_cell = Arc::new(IndexCell::default());
        applied_cell.set(checkpoint.map(|c| c.index));
        let (alive, gone) = tokio::sync::oneshot::channel();
        let sm = StateMachine {
            handler,
            store,
            last_applied: checkpoint,
            last_app_applied: checkpoint,
            membership,
            snapshot: None,
            snapshot_seq: 0,
            offer_durable: false,
            durable_seen: None,
            applied_cell,
            me: None,
            _alive: alive,
        };
        Ok((sm, gone))
    }

    /// From now on snapshots are the newest durable checkpoint generation with a run floor,
    /// which the network streams with its records (`SnapshotFeed`).
    pub(crate) fn offer_durable_snapshots(&mut self) {
        self.offer_durable = true;
    }

    /// The node this state machine runs on: from now on applying a membership that names it
    /// clears the install-before-addition marker in the same write (review s28 snap M1: left
    /// to the next start, a member added by snapshot kept the exemption for its whole life,
    /// and once removed its directory got past the start check).
    pub fn for_node(&mut self, me: u64) {
        self.me = Some(me);
    }

    pub fn applied_cell(&self) -> Arc<IndexCell> {
        self.applied_cell.clone()
    }

    fn set_applied(&mut self, id: RaftLogId) {
        self.last_applied = Some(id);
        self.applied_cell.set(Some(id.index));
    }

    /// The newest durable checkpoint generation a snapshot stream can carry (a run floor saved
    /// with it), as openraft sees a snapshot: its `(A, term)` and the membership recorded with
    /// it, no bytes (the network streams the generation itself, `snapshot_sender`). None when
    /// there is none, or when its recorded membership was applied past `A` (then it does not
    /// say which membership was in force at `A`: declined rather than guessed), or on a read
    /// error (logged: openraft then falls back to what it had). Redb reads of the headers and
    /// the first chunk only.
    fn durable(&mut self) -> Option<StoredSnapshot> {
        if !self.offer_durable {
            return None;
        }
        // openraft asks again after every applied batch while its snapshot lags the committed
        // index by `SNAPSHOT_EVERY`, and the durable one moves only at a checkpoint.
        if let Some((at, known)) = &self.durable_seen {
            if at.elapsed() < DURABLE_FRESH {
                return known.clone();
            }
        }
        let found = self.read_durable();
        self.durable_seen = Some((std::time::Instant::now(), found.clone()));
        found
    }

    fn read_durable(&self) -> Option<StoredSnapshot> {
        let g = match self.store.newest_streamable() {
            Ok(Some(g)) => g,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(error = %e, "no durable checkpoint can be offered as a snapshot");
                return None;
            }
        };
        let history = match membership_history::read(&self.store) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(error = %e, "the membership history cannot be read");
                Vec::new()
            }
        };
        let meta = checkpoint_meta(
            g.applied_term,
            g.applied_index,
            g.first_record,
            g.state_crc,
            g.membership.as_deref(),
            &history,
        )?;
        Some(StoredSnapshot {
            meta,
            data: Vec::new(),
        })
    }

    /// What openraft holds while no durable generation can be offered: it covers no entry, so
    /// openraft finds nothing newer in it, and its id is not a checkpoint stream's, so the
    /// sender answers it `Unreachable` (openraft backs off and asks again) instead of streaming
    /// anything under it (review s27 snap HIGH).
    fn nothing_offered(&mut self) -> StoredSnapshot {
        self.snapshot_seq += 1;
        StoredSnapshot {
            meta: SnapshotMeta {
                last_log_id: None,
                last_membership: StoredMembership::default(),
                snapshot_id: format!("none-{}", self.snapshot_seq),
            },
            data: Vec::new(),
        }
    }

    fn build(&mut self) -> Result<StoredSnapshot, OrStorageError> {
        if let Some(durable) = self.durable() {
            self.snapshot = Some(durable.clone());
            return Ok(durable);
        }
        if self.offer_durable {
            // No durable generation to offer yet: nothing newer than before (openraft ignores
            // a snapshot no newer than its own), and never an engine encode in a cluster.
            return Ok(match self.snapshot.clone() {
                Some(s) => s,
                None => self.nothing_offered(),
            });
        }
        let (covered, data) = self.handler.snapshot();
        let covered = covered.map(|(index, term)| log_id(term, index));
        // The engine's state covers our last applied id only if it has seen every application
        // entry up to it; otherwise trust the engine's own (older) position.
        // (Then the membership below may be newer than the snapshot; only a multi-node group
        // can change membership after index 0, and it will need the engine to be current.)
        let last_log_id = if covered == self.last_app_applied {
            self.last_applied
        } else {
            covered
        };
        self.snapshot_seq += 1;
        let snapshot_id = match last_log_id {
            Some(l) => format!("{}-{}-{}", term_of(&l), l.index, self.snapshot_seq),
            None => format!("none-{}", self.snapshot_seq),
        };
        let snap = StoredSnapshot {
            meta: SnapshotMeta {
                last_log_id,
                last_membership: self.membership.clone(),
                snapshot_id,
            },
            data,
        };
        self.snapshot = Some(snap.clone());
        Ok(snap)
    }

    /// Saves the applied membership; one naming more than one node also sets the sticky
    /// `raft/multi_node` first, which the log store reads before any reclamation (an installed
    /// snapshot's membership reaches no append, review s12 F6). The membership history records
    /// it before (`membership_history`); an installed snapshot's (`installed`) starts it again.
    async fn save_membership(&self, installed: bool) -> Result<(), OrStorageError> {
        let m = self.membership.clone();
        let names_me = self
            .me
            .is_some_and(|me| m.membership().get_node(&me).is_some());
        if !installed {
            return meta::blocking(&self.store, ErrorSubject::StateMachine, move |s| {
                save_applied_membership(s, &m, names_me)
            })
            .await;
        }
        // openraft's own install (a key-off leader's snapshot): the history starts again.
        meta::blocking(&self.store, ErrorSubject::StateMachine, move |s| {
            if is_multi_node(m.membership()) {
                meta::note_multi_node(s)?;
            }
            let h = membership_history::restart_at(&m);
            meta::put(
                s,
                membership_history::MEMBERSHIP_HISTORY,
                &h,
                ErrorSubject::StateMachine,
            )?;
            meta::put(s, meta::MEMBERSHIP, &m, ErrorSubject::StateMachine)
        })
        .await
    }
}

/// An applied membership's rows (the sticky multi-node flag, the install-before-addition
/// marker cleared when it names this node, the history, the membership) in one transaction,
/// and none of them once a snapshot install is staged: the install's commit wrote the rows
/// the reopen must find, and this incarnation may still apply its replaced log until the
/// group closes (review s29 snap H1).
fn save_applied_membership(
    s: &StateStore,
    m: &StoredMembership,
    names_me: bool,
) -> Result<(), OrStorageError> {
    let encode = |what: &str, r: Result<Vec<u8>, serde_json::Error>| {
        r.map_err(|e| {
            io_err(
                ErrorSubject::StateMachine,
                ErrorVerb::Write,
                AnyError::error(format!("encoding {what}: {e}")),
            )
        })
    };
    let history = membership_history::with(s, m)?
        .map(|h| {
            encode(
                membership_history::MEMBERSHIP_HISTORY,
                serde_json::to_vec(&h),
            )
        })
        .transpose()?;
    let membership = encode(meta::MEMBERSHIP, serde_json::to_vec(m))?;
    let mut rows: Vec<(&str, &[u8])> = Vec::with_capacity(4);
    if is_multi_node(m.membership()) {
        rows.push((meta::MULTI_NODE, b"true"));
    }
    if names_me {
        rows.push((meta::INSTALLED_BEFORE_ADDITION, b"false"));
    }
    if let Some(h) = &history {
        rows.push((membership_history::MEMBERSHIP_HISTORY, h));
    }
    rows.push((meta::MEMBERSHIP, &membership));
    let wrote = s
        .put_meta_unless_installing(&rows)
        .map_err(|e| io_err(ErrorSubject::StateMachine, ErrorVerb::Write, &e))?;
    if !wrote {
        tracing::info!(
            membership = ?m.log_id(),
            "an applied membership is not saved: a staged snapshot install owns the rows"
        );
    }
    Ok(())
}

/// The snapshot meta openraft is offered for a durable checkpoint generation at `(A, term)`
/// with run floor `first_record`, state CRC `state_crc` and the `raft/membership` bytes
/// recorded with it; its id names all four, so the sender can tell that the generation it
/// opens is the one offered (`snapshot_sender`). When the recorded membership was applied past
/// `A`, the one in force at `A` is taken from the membership `history` (review s25 H2: a node
/// added to an idle group is caught up without waiting for a write); None when no membership
/// was recorded, or the history does not tell (declined rather than guessed, review s23 M1).
pub(crate) fn checkpoint_meta(
    applied_term: u64,
    applied_index: u64,
    first_record: u64,
    state_crc: u32,
    membership: Option<&[u8]>,
    history: &[StoredMembership],
) -> Option<Meta> {
    let at = log_id(applied_term, applied_index);
    let recorded = match membership.map(serde_json::from_slice::<StoredMembership>) {
        Some(Ok(m)) => m,
        _ => return None,
    };
    let membership = membership_history::in_force_at(&recorded, history, at.index)?;
    Some(SnapshotMeta {
        last_log_id: Some(at),
        last_membership: membership,
        snapshot_id: format!(
            "{}{applied_term}-{applied_index}-{first_record}-{state_crc:08x}",
            crate::tcp_server::CHECKPOINT_STREAM,
        ),
    })
}

fn to_snapshot(s: StoredSnapshot) -> Snapshot<TypeConfig> {
    Snapshot {
        meta: s.meta,
        snapshot: Box::new(Cursor::new(s.data)),
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<RaftLogId>, StoredMembership), OrStorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, OrStorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut replies = Vec::new();
        for entry in entries {
            let id = entry.log_id;
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(data) => {
                    self.handler
                        .apply(id.index, term_of(&id), &data)
                        .map_err(|e| {
                            io_err(
                                ErrorSubject::Apply(id),
                                ErrorVerb::Write,
                                AnyError::error(e),
                            )
                        })?;
                    self.last_app_applied = Some(id);
                }
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(id), m);
                    self.save_membership(false).await?;
                }
            }
            self.set_applied(id);
            replies.push(());
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            snapshot: self.build(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, OrStorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), OrStorageError> {
        let data = (*snapshot).into_inner();
        if data.is_empty() {
            // A position-only snapshot (get_current_snapshot) carries no state to install.
            return Err(io_err(
                ErrorSubject::Snapshot(Some(meta.signature())),
                ErrorVerb::Write,
                AnyError::error("a snapshot without state (a position only) cannot be installed"),
            ));
        }
        let Some(last) = meta.last_log_id else {
            return Err(io_err(
                ErrorSubject::Snapshot(Some(meta.signature())),
                ErrorVerb::Write,
                AnyError::error("a snapshot that covers no log entry cannot be installed"),
            ));
        };
        // The membership first (review s23 M1): a checkpoint the engine saves once `restore`
        // moved it to A records the `raft/membership` of that moment with its generation, and
        // it must be the one in force at A. Saved before, it is never older than A's; a save
        // before the restore records it with a state below its log id, which is never served.
        self.membership = meta.last_membership.clone();
        self.save_membership(true).await?;
        self.handler
            .restore(last.index, term_of(&last), &data)
            .map_err(|e| {
                io_err(
                    ErrorSubject::Snapshot(Some(meta.signature())),
                    ErrorVerb::Write,
                    AnyError::error(e),
                )
            })?;
        self.set_applied(last);
        self.last_app_applied = Some(last);
        self.snapshot = Some(StoredSnapshot {
            meta: meta.clone(),
            data,
        });
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, OrStorageError> {
        // openraft's start-up (`get_initial_state`) asks for one, and builds a full engine
        // snapshot if there is none while a purge horizon exists (any reclamation writes one).
        // The newest durable generation with a run floor comes first: what a peer behind the
        // purge horizon is sent (`snapshot_sender` streams it with its records).
        if let Some(durable) = self.durable() {
            self.snapshot = Some(durable.clone());
            return Ok(Some(to_snapshot(durable)));
        }
        // Key off, a single voter never sends a snapshot (and no peer can be added after a
        // reclamation), so it gets the position only: no engine encode, nothing held. Key on,
        // never a position only (review s27 snap HIGH: one built at `last_applied` over a
        // declined checkpoint named that checkpoint's `A` with a membership applied past it):
        // a snapshot that covers nothing, which is never sent. Never None once the log was
        // purged either: openraft's replication takes a missing snapshot as a storage error,
        // which stops the leader's core.
        if self.snapshot.is_none() {
            let purged: Option<RaftLogId> =
                meta::get(&self.store, meta::PURGED, ErrorSubject::Logs)?;
            if purged.is_some() && self.offer_durable {
                let none = self.nothing_offered();
                self.snapshot = Some(none);
            } else if purged.is_some() {
                self.snapshot_seq += 1;
                self.snapshot = Some(StoredSnapshot {
                    meta: SnapshotMeta {
                        last_log_id: self.last_applied,
                        last_membership: self.membership.clone(),
                        snapshot_id: format!("position-only-{}", self.snapshot_seq),
                    },
                    data: Vec::new(),
                });
            }
        }
        Ok(self.snapshot.clone().map(to_snapshot))
    }
}

/// A snapshot already taken by `get_snapshot_builder`, handed out when openraft asks.
///
/// It is taken there, on the state-machine task, rather than in `build_snapshot` (which
/// openraft runs on another task): `ApplyHandler::snapshot` reads the engine, which only the
/// state-machine task mutates, so only there do the bytes match `last_applied` exactly.
pub struct SnapshotBuilder {
    snapshot: Result<StoredSnapshot, OrStorageError>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, OrStorageError> {
        self.snapshot.clone().map(to_snapshot)
    }
}
