//! `RaftNode`: one Raft group on this node, as the broker engine sees it.

// openraft's storage traits return `openraft::StorageError` (~200 bytes) by value; helpers
// return the same type so `?` reaches the trait boundary without boxing and unboxing.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use openraft::error::ClientWriteError;
use openraft::network::RaftNetworkFactory;
use openraft::raft::ClientWriteResponse;
use openraft::{BasicNode, ChangeMembers, Raft, ServerState};

use crate::apply::ApplyHandler;
use crate::backend::{SegmentLog, StateStore};
use crate::cluster_start::{initialised, ClusterStart, MembershipCheck};
use crate::config::RaftConfig;
use crate::core_probe::CoreProbe;
use crate::election_nudge;
use crate::entry_codec;
use crate::error::{ChangeRefusal, RaftError};
use crate::hand_over::WriteFence;
use crate::index_cell::IndexCell;
use crate::log_store::LogStore;
use crate::membership_change::{self, Change, MembershipView};
use crate::metrics_clock::MetricsClock;
use crate::network::NoPeers;
use crate::state_machine::StateMachine;
use crate::types::{is_multi_node, term_of, TypeConfig};

/// What `RaftNode::status` reports, copied out of openraft's metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftStatus {
    /// "leader", "follower", "candidate", "learner" or "shutdown".
    pub role: &'static str,
    pub term: u64,
    pub leader: Option<u64>,
    pub last_log_index: Option<u64>,
    pub committed: Option<u64>,
    pub applied: Option<u64>,
    /// On a leader, how long ago a majority last acknowledged it: openraft's
    /// `millis_since_quorum_ack` as of its last metrics report plus the time since that report
    /// (`metrics_clock`: a core frozen on its own disk reports nothing, and its last age must
    /// not stay fresh); None on any other role and on a leader not yet acknowledged. openraft 0.9 has no check-quorum:
    /// a leader cut off from the majority stays leader, and this is how a caller sees it.
    pub quorum_ack_ms: Option<u64>,
    /// This node is handing its lead over (`hand_over`): it takes no new proposal, so its
    /// engine must not plan one.
    pub handing_over: bool,
    /// A stopping leader whose hand-over and abdication both failed: its fence stays closed
    /// for good (`handing_over` stays true) and its supervisor stops it now
    /// (`RaftNode::hand_over_at_stop`).
    pub abandoned: bool,
}

/// A running Raft group member. Clones share it.
#[derive(Clone)]
pub struct RaftNode {
    inner: Arc<Inner>,
}

struct Inner {
    id: u64,
    raft: Raft<TypeConfig>,
    log: Arc<SegmentLog>,
    log_store: LogStore,
    applied: Arc<IndexCell>,
    /// Resolves once openraft has dropped the state machine (see `StateMachine::open`).
    sm_gone: tokio::sync::Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
    /// Retries campaigns stuck in a split vote (`election_nudge`); stopped by `shutdown`.
    nudge: tokio::task::JoinHandle<()>,
    /// When openraft last reported its metrics; only a cluster member reads the age it keeps
    /// (a lone voter acknowledges itself), so only one runs the watcher (review s18 K7).
    reported: Option<MetricsClock>,
    /// When the core last answered a question; a cluster member's probes read it (review
    /// s19 lead M2).
    probe: Option<CoreProbe>,
    /// Held while a membership operation of this node runs: a second one is refused at once
    /// ("in progress") rather than queued behind it.
    changing: tokio::sync::Mutex<()>,
    /// Closed while the lead is handed over: no proposal enters once the target is being
    /// caught up (`hand_over`).
    fence: WriteFence,
}

impl Drop for Inner {
    /// A node dropped without `shutdown` (a panic unwinding its owner) must not leave the
    /// nudge holding its Raft, and with it the log and the store, for ever.
    fn drop(&mut self) {
        self.nudge.abort();
    }
}

fn fatal(e: impl std::fmt::Display) -> RaftError {
    RaftError::Fatal(e.to_string())
}

impl RaftNode {
    /// Opens or bootstraps a single-voter group on `log` + `store`: on first start it
    /// initialises membership {node_id}; on restart it elects itself again.
    ///
    /// Returns only once this node leads and every entry that was in the log at start has been
    /// applied (handed to `ApplyHandler::apply` if after the checkpointed index): replay is
    /// complete and the engine's state is current.
    pub async fn start_single(
        cfg: RaftConfig,
        log: Arc<SegmentLog>,
        store: Arc<StateStore>,
        handler: Arc<dyn ApplyHandler>,
    ) -> Result<RaftNode, RaftError> {
        RaftNode::start_with(cfg, log, store, handler, NoPeers).await
    }

    /// `start_single` over a given network: what a test with peers in the same process uses
    /// (`NoPeers` answers every RPC with `Unreachable`).
    pub(crate) async fn start_with<N: RaftNetworkFactory<TypeConfig>>(
        cfg: RaftConfig,
        log: Arc<SegmentLog>,
        store: Arc<StateStore>,
        handler: Arc<dyn ApplyHandler>,
        network: N,
    ) -> Result<RaftNode, RaftError> {
        let last_at_open = log.last().map(|(index, _)| index);
        let node = RaftNode::open(cfg, log, store, handler, network, None, None).await?;
        let ready = node.lead_and_replay(last_at_open).await;
        node.started(ready, last_at_open).await
    }

    /// Opens a member of a multi-node group over `network` (a `TcpNetwork` between `queen`
    /// processes) without waiting to lead: it returns once this node has applied every entry
    /// it knew committed at open (at most its log's last, review s15 A3), whoever leads.
    /// `start.initialise`, true on one node only (the lowest id of `peers`), initialises the
    /// membership with `start.peers` when this node's log and vote are empty; a directory that
    /// already holds the group is never initialised again, and its stored membership must fit
    /// `peers` (`check_stored_membership`, A1). An entry limit a follower could not receive is
    /// refused before anything opens (A5). `serve` is handed the openraft handle as soon as
    /// openraft runs, before any wait: the cluster listener must answer for the group
    /// (`Groups::add`) for a leader to reach this node at all.
    pub async fn start_clustered<N: RaftNetworkFactory<TypeConfig>>(
        cfg: RaftConfig,
        log: Arc<SegmentLog>,
        store: Arc<StateStore>,
        handler: Arc<dyn ApplyHandler>,
        network: N,
        start: ClusterStart,
        serve: impl FnOnce(Raft<TypeConfig>),
    ) -> Result<RaftNode, RaftError> {
        start.check_entry_limit()?;
        if !start.peers.contains_key(&cfg.node_id) {
            return Err(RaftError::Config(format!(
                "peers does not name this node ({})",
                cfg.node_id
            )));
        }
        let last_at_open = log.last().map(|(index, _)| index);
        // Decided before openraft runs and before the listener serves the group: a wiped
        // voter must not grant a vote or campaign even once (review s21 membership M5).
        if let Some(gate) = &start.gate {
            gate.prepare(start.join, last_at_open.is_none())?;
            crate::join_read::check_someone_to_ask(gate, &start.peers)?;
        }
        let check = MembershipCheck {
            peers: start.peers.clone(),
            joining: start.gate.as_ref().is_some_and(crate::VoteGate::joining),
            log_empty: last_at_open.is_none(),
        };
        let clustered = Some((start.gate.clone(), check));
        let feed = start.snapshots.as_ref();
        let node = RaftNode::open(cfg, log, store, handler, network, clustered, feed).await?;
        if let Some(gate) = &start.gate {
            gate.attach(node.inner.raft.clone(), node.inner.log.clone());
        }
        serve(node.inner.raft.clone());
        // openraft ignores a stored committed id past the log's end (a cut-off tail): waiting
        // for it would never end.
        let committed_at_open = node.inner.log_store.committed().map(|c| c.index);
        let wait_for = committed_at_open.min(last_at_open);
        let ready = node.join_and_replay(start, wait_for).await;
        node.started(ready, wait_for).await
    }

    /// openraft is running once `open` returned: stop it again if start-up did not finish, so
    /// a failed start leaves no task or thread touching the log and the store.
    async fn started(
        self,
        ready: Result<(), RaftError>,
        replayed_to: Option<u64>,
    ) -> Result<RaftNode, RaftError> {
        match ready {
            Ok(()) => {
                tracing::info!(node = self.inner.id, ?replayed_to, "raft group ready");
                Ok(self)
            }
            Err(e) => {
                if let Err(stop) = self.shutdown().await {
                    tracing::warn!(error = %stop, "stopping raft after a failed start failed too");
                }
                Err(e)
            }
        }
    }

    /// The stores opened and openraft started on them; nothing waited for. `clustered` (a
    /// cluster member, with its vote gate and its membership check, or None for a lone
    /// voter): check the stored membership before openraft runs, keep the acknowledgement
    /// age current between openraft's reports (`MetricsClock`), and call elections only as
    /// the gate allows (off while joining, `VoteGate`).
    async fn open<N: RaftNetworkFactory<TypeConfig>>(
        cfg: RaftConfig,
        log: Arc<SegmentLog>,
        store: Arc<StateStore>,
        handler: Arc<dyn ApplyHandler>,
        network: N,
        clustered: Option<(Option<crate::VoteGate>, MembershipCheck)>,
        feed: Option<&crate::SnapshotFeed>,
    ) -> Result<RaftNode, RaftError> {
        let (gate, check) = match clustered {
            Some((gate, check)) => (gate, Some(check)),
            None => (None, None),
        };
        let clustered = check.is_some();
        let mut config = cfg.to_openraft()?;
        config.enable_elect = gate.as_ref().is_none_or(crate::VoteGate::may_campaign);
        if let Some(feed) = feed {
            feed.tune(&mut config);
        }
        let config = Arc::new(config);
        let id = cfg.node_id;

        let (l, s) = (log.clone(), store.clone());
        let (log_store, mut state_machine, sm_gone) = tokio::task::spawn_blocking(move || {
            let log_store = LogStore::open(l, s.clone())?;
            let (mut state_machine, sm_gone) = StateMachine::open(handler, s)?;
            state_machine.for_node(id);
            Ok::<_, openraft::StorageError<u64>>((log_store, state_machine, sm_gone))
        })
        .await
        .map_err(|e| RaftError::Startup(e.to_string()))?
        .map_err(|e| RaftError::Startup(e.to_string()))?;

        // Before openraft runs: a refused start must leave the log and its horizon as found
        // (with catch-up on openraft may snapshot and purge as soon as it runs). A refusal
        // stops the log store's threads here, as the failed start's shutdown would.
        if let Some(check) = &check {
            if let Err(e) = check.run(id, &log_store, &mut state_machine, &store).await {
                let ls = log_store.clone();
                if let Err(stop) = tokio::task::spawn_blocking(move || ls.stop()).await {
                    tracing::warn!(error = %stop, "stopping the log store after a refused start failed");
                }
                return Err(e);
            }
        }
        let applied = state_machine.applied_cell();
        // Before openraft runs: its first snapshot and purge may follow at once, and the
        // listener serves the group (and its inbox) only after this returns.
        if let Some(feed) = feed {
            state_machine.offer_durable_snapshots();
            log_store.bound_by_raft_purge();
            feed.attach(log_store.clone());
        }
        // Raft::new reads the initial state and re-applies entries up to the persisted
        // committed id; whatever follows is committed once this node leads again.
        let raft = Raft::new(id, config, network, log_store.clone(), state_machine)
            .await
            .map_err(|e| RaftError::Startup(e.to_string()))?;
        // The committed and the effective membership may sit in the log, above what the state
        // machine stored; while either names a second node, so may the one a truncation brings
        // back (review s12 F6).
        let multi = raft
            .with_raft_state(|st| {
                let m = &st.membership_state;
                is_multi_node(m.committed().membership())
                    || is_multi_node(m.effective().membership())
            })
            .await
            .map_err(|e| RaftError::Startup(e.to_string()))?;
        if multi {
            log_store
                .note_multi_node()
                .await
                .map_err(|e| RaftError::Startup(e.to_string()))?;
        }
        let nudge = election_nudge::spawn(
            raft.clone(),
            id,
            (cfg.election_timeout_min_ms, cfg.election_timeout_max_ms),
            gate,
        );
        // openraft ticks every 1.5 heartbeats (its `heartbeat_interval * 3 / 2`).
        let tick = std::time::Duration::from_millis(cfg.heartbeat_ms.saturating_mul(3) / 2);
        let reported = clustered
            .then(|| MetricsClock::spawn(raft.metrics(), |m| m.millis_since_quorum_ack, tick));
        let pause = std::time::Duration::from_millis(cfg.heartbeat_ms);
        let probe = clustered.then(|| CoreProbe::spawn(raft.clone(), pause));
        Ok(RaftNode {
            inner: Arc::new(Inner {
                id,
                nudge,
                reported,
                probe,
                raft,
                log,
                log_store,
                applied,
                changing: tokio::sync::Mutex::new(()),
                fence: WriteFence::default(),
                sm_gone: tokio::sync::Mutex::new(Some(sm_gone)),
            }),
        })
    }

    async fn join_and_replay(
        &self,
        start: ClusterStart,
        wait_for: Option<u64>,
    ) -> Result<(), RaftError> {
        let raft = &self.inner.raft;
        // Not initialised = no vote, no log, no membership: an empty directory. One that
        // holds anything of the group is never initialised again (and its stored membership
        // was checked before openraft ran, `MembershipCheck`).
        if start.initialise && !raft.is_initialized().await.map_err(fatal)? {
            initialised(self.inner.id, raft.initialize(start.peers).await)?;
        }
        let mut rx = raft.metrics();
        loop {
            let m = rx.borrow_and_update().clone();
            if let Err(e) = &m.running_state {
                return Err(fatal(e));
            }
            if m.last_applied.map(|l| l.index) >= wait_for {
                return Ok(());
            }
            rx.changed().await.map_err(|_| {
                RaftError::Fatal("the raft core stopped during start-up".to_string())
            })?;
        }
    }

    /// The openraft handle, for the cluster listener (`Groups::add`).
    pub fn raft_handle(&self) -> Raft<TypeConfig> {
        self.inner.raft.clone()
    }

    /// This node's id in the group.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    pub(crate) fn raft(&self) -> &Raft<TypeConfig> {
        &self.inner.raft
    }

    pub(crate) fn fence(&self) -> &WriteFence {
        &self.inner.fence
    }

    /// The lock a membership operation holds: a hand-over holds it too, so no membership
    /// entry lands behind the target's catch-up.
    pub(crate) fn changing(&self) -> &tokio::sync::Mutex<()> {
        &self.inner.changing
    }

    async fn lead_and_replay(&self, last_at_open: Option<u64>) -> Result<(), RaftError> {
        let raft = &self.inner.raft;
        if raft.is_initialized().await.map_err(fatal)? {
            self.check_voter()?;
            // Skip the election timeout; ignored if openraft already restored leadership.
            raft.trigger().elect().await.map_err(fatal)?;
        } else {
            let members = BTreeMap::from([(self.inner.id, BasicNode::default())]);
            raft.initialize(members)
                .await
                .map_err(|e| RaftError::Startup(e.to_string()))?;
        }
        self.wait_ready(last_at_open).await
    }

    fn check_voter(&self) -> Result<(), RaftError> {
        let m = self.inner.raft.metrics().borrow().membership_config.clone();
        if m.membership().voter_ids().any(|v| v == self.inner.id) {
            return Ok(());
        }
        Err(RaftError::Startup(format!(
            "node {} is not a voter of the stored membership {:?}, so it cannot lead this group alone",
            self.inner.id,
            m.membership()
        )))
    }

    /// Waits, on cloned metrics, until this node leads and has applied `last_at_open`.
    async fn wait_ready(&self, last_at_open: Option<u64>) -> Result<(), RaftError> {
        let mut rx = self.inner.raft.metrics();
        loop {
            let m = rx.borrow_and_update().clone();
            if let Err(e) = &m.running_state {
                return Err(fatal(e));
            }
            let leads = m.state == ServerState::Leader && m.current_leader == Some(self.inner.id);
            if leads && m.last_applied.map(|l| l.index) >= last_at_open {
                return Ok(());
            }
            rx.changed().await.map_err(|_| {
                RaftError::Fatal("the raft core stopped during start-up".to_string())
            })?;
        }
    }

    /// Proposes one application entry; resolves once it is committed (fsynced) and applied,
    /// with its (index, term).
    /// Refused with `HandingOver` while the lead is handed over (`hand_over`).
    pub async fn propose(&self, payload: Vec<u8>) -> Result<(u64, u64), RaftError> {
        let Some(_in_flight) = self.inner.fence.enter().await else {
            return Err(RaftError::HandingOver);
        };
        self.written(self.inner.raft.client_write(payload).await)
    }

    /// Adds `id` as a learner (returns once the membership entry is committed, not once the
    /// learner caught up): its (index, term). Refused while this node has reclaimed any of its
    /// log (`LogStore::begin_widening`); once the change is in the log, this node never
    /// reclaims again (a refused change leaves reclamation as it was).
    pub async fn add_learner(&self, id: u64, node: BasicNode) -> Result<(u64, u64), RaftError> {
        let _widening = self
            .guard_widening(&ChangeMembers::AddNodes(BTreeMap::from([(
                id,
                node.clone(),
            )])))
            .await?;
        self.written(self.inner.raft.add_learner(id, node, false).await)
    }

    /// openraft's `change_membership` behind the same guard as `add_learner` when the change
    /// names a node the effective membership does not.
    pub async fn change_membership(
        &self,
        changes: ChangeMembers<u64, BasicNode>,
        retain: bool,
    ) -> Result<(u64, u64), RaftError> {
        let _widening = self.guard_widening(&changes).await?;
        self.written(self.inner.raft.change_membership(changes, retain).await)
    }

    /// The effective membership, each member's matched index as this node (if it leads)
    /// knows it, and whether a change is still uncommitted.
    pub async fn membership(&self) -> Result<MembershipView, RaftError> {
        let m = self.inner.raft.metrics().borrow().clone();
        let matched: Option<BTreeMap<u64, Option<u64>>> = m.replication.as_ref().map(|r| {
            r.iter()
                .map(|(id, log_id)| (*id, log_id.map(|l| l.index)))
                .collect()
        });
        let uncommitted = self.membership_uncommitted().await?;
        Ok(membership_change::view(
            m.membership_config.membership(),
            matched.as_ref(),
            uncommitted,
        ))
    }

    /// Whether the effective membership is not yet committed (a change being written).
    async fn membership_uncommitted(&self) -> Result<bool, RaftError> {
        self.inner
            .raft
            .with_raft_state(|st| {
                st.membership_state.committed().log_id() != st.membership_state.effective().log_id()
            })
            .await
            .map_err(fatal)
    }

    /// The HTTP address member `id` was added with (`member_addr`), if any: how a follower
    /// reaches a leader that joined at run time.
    pub fn http_of(&self, id: u64) -> Option<String> {
        let m = self.inner.raft.metrics().borrow().membership_config.clone();
        let node = m.membership().get_node(&id)?;
        crate::member_addr::http_part(&node.addr).map(str::to_string)
    }

    /// Every member of the effective membership as this node knows it now: its id, its
    /// `addr` (`member_addr`), and whether it votes. Read from openraft's latest metrics, so
    /// it never waits on the core (the Kafka port's Metadata asks it on every request).
    pub fn members_now(&self) -> Vec<(u64, String, bool)> {
        let m = self.inner.raft.metrics().borrow().membership_config.clone();
        let voters: std::collections::BTreeSet<u64> = m.membership().voter_ids().collect();
        m.membership()
            .nodes()
            .map(|(id, node)| (*id, node.addr.clone(), voters.contains(id)))
            .collect()
    }

    /// Runs one membership operation on the leader; resolves once its entry (both entries of a
    /// joint change) committed. Refused with `RaftError::ChangeRefused` when `plan` refuses it
    /// or another operation of this node is running, and with `RaftError::Membership` when
    /// openraft does (a change committed meanwhile by another leader) or the node has
    /// reclaimed log (`guard_widening`).
    /// `known_http`: this node's `peer_http`, the first boot's members' HTTP addresses
    /// (`membership_change::plan`).
    pub async fn change(
        &self,
        change: Change,
        known_http: BTreeMap<u64, String>,
    ) -> Result<(u64, u64), RaftError> {
        // Owned by a task of its own: a client gone or a relay that gave up must not cut a
        // joint change between its two entries (review s21 membership M1).
        let node = self.clone();
        tokio::spawn(async move { node.change_owned(change, known_http).await })
            .await
            .map_err(|e| fatal(format!("the membership change stopped: {e}")))?
    }

    async fn change_owned(
        &self,
        change: Change,
        known_http: BTreeMap<u64, String>,
    ) -> Result<(u64, u64), RaftError> {
        if self.inner.fence.is_closed() {
            return Err(RaftError::NotLeader { leader: None });
        }
        let Ok(_one) = self.inner.changing.try_lock() else {
            return Err(RaftError::ChangeRefused {
                kind: ChangeRefusal::InProgress,
                message: "another membership change is in progress on this node; retry once \
                          it has committed"
                    .into(),
            });
        };
        let status = self.status();
        if status.role != "leader" {
            return Err(RaftError::NotLeader {
                leader: status.leader,
            });
        }
        let uncommitted = self.membership_uncommitted().await?;
        if uncommitted {
            return Err(RaftError::ChangeRefused {
                kind: ChangeRefusal::InProgress,
                message: "the last membership change has not committed yet; retry".into(),
            });
        }
        self.finish_joint_locked().await?;
        let current = self.inner.raft.metrics().borrow().membership_config.clone();
        if matches!(change, Change::Remove(id) if id == self.id()) {
            return Err(RaftError::ChangeRefused {
                kind: ChangeRefusal::Unsafe,
                message: format!(
                    "node {} leads: stop it, let the others elect a leader, and remove it \
                     there (SIGTERM hands the lead over first)",
                    self.id()
                ),
            });
        }
        let planned = membership_change::plan(current.membership(), &change, &known_http)?;
        let metrics = self.inner.raft.metrics().borrow().clone();
        membership_change::live_majorities(
            current.membership(),
            &planned,
            self.id(),
            metrics.last_log_index.unwrap_or(0),
            metrics.replication.as_ref().map(|r| {
                r.iter()
                    .map(|(id, l)| (*id, l.map(|l| l.index)))
                    .collect::<BTreeMap<u64, Option<u64>>>()
            }),
        )?;
        match planned {
            ChangeMembers::AddNodes(nodes) => {
                let Some((id, node)) = nodes.into_iter().next() else {
                    return Err(fatal("a learner change without its node"));
                };
                self.add_learner(id, node).await
            }
            // A removed voter leaves the membership whole (`retain` false): it is not kept
            // as a learner.
            changes => self.change_membership(changes, false).await,
        }
    }

    /// Finishes a joint configuration left by a change cut between its two entries, and
    /// nothing else: a rerun must judge what is left of its operation against the
    /// membership the cut change was heading for, not the union of the joint's configs
    /// (review s31 member M1: else a rerun of a cut removal finds the id gone and answers
    /// 404). Ok(true) when a joint was finished here. Refused as `change` is (not leader,
    /// another change running, an uncommitted entry).
    pub async fn finish_joint(&self) -> Result<bool, RaftError> {
        let node = self.clone();
        tokio::spawn(async move {
            if node.inner.fence.is_closed() {
                return Err(RaftError::NotLeader { leader: None });
            }
            let Ok(_one) = node.inner.changing.try_lock() else {
                return Err(RaftError::ChangeRefused {
                    kind: ChangeRefusal::InProgress,
                    message: "another membership change is in progress on this node; retry \
                              once it has committed"
                        .into(),
                });
            };
            let status = node.status();
            if status.role != "leader" {
                return Err(RaftError::NotLeader {
                    leader: status.leader,
                });
            }
            if node.membership_uncommitted().await? {
                return Err(RaftError::ChangeRefused {
                    kind: ChangeRefusal::InProgress,
                    message: "the last membership change has not committed yet; retry".into(),
                });
            }
            node.finish_joint_locked().await
        })
        .await
        .map_err(|e| fatal(format!("finishing the membership change stopped: {e}")))?
    }

    /// A joint configuration left by a change cut between its two entries (a leader lost
    /// or stopped meanwhile) is finished to its target (review s21 membership M1). The
    /// caller holds `changing`.
    async fn finish_joint_locked(&self) -> Result<bool, RaftError> {
        let joint = self.inner.raft.metrics().borrow().membership_config.clone();
        let Some(target) = membership_change::unfinished(joint.membership()) else {
            return Ok(false);
        };
        tracing::warn!(
            ?target,
            "finishing a membership change left in joint consensus"
        );
        self.change_membership(ChangeMembers::ReplaceAllVoters(target), false)
            .await?;
        Ok(true)
    }

    async fn guard_widening(
        &self,
        changes: &ChangeMembers<u64, BasicNode>,
    ) -> Result<Option<crate::log_store::Widening>, RaftError> {
        let m = self.inner.raft.metrics().borrow().membership_config.clone();
        let known: BTreeSet<u64> = m.membership().nodes().map(|(id, _)| *id).collect();
        if named_ids(changes).is_subset(&known) {
            return Ok(None);
        }
        self.inner.log_store.begin_widening().await.map(Some)
    }

    fn written(
        &self,
        res: Result<
            ClientWriteResponse<TypeConfig>,
            openraft::error::RaftError<u64, ClientWriteError<u64, BasicNode>>,
        >,
    ) -> Result<(u64, u64), RaftError> {
        match res {
            Ok(resp) => Ok((resp.log_id.index, term_of(&resp.log_id))),
            Err(openraft::error::RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(RaftError::NotLeader {
                    leader: f.leader_id,
                })
            }
            Err(openraft::error::RaftError::APIError(ClientWriteError::ChangeMembershipError(
                e,
            ))) => Err(RaftError::Membership(e.to_string())),
            Err(openraft::error::RaftError::Fatal(e)) if self.inner.log_store.out_of_space() => {
                Err(RaftError::StorageFull(e.to_string()))
            }
            Err(openraft::error::RaftError::Fatal(e)) => Err(fatal(e)),
        }
    }

    /// Reads an application payload back from the log by index: None for blank and membership
    /// entries and for an index not in the log. It ignores the Raft purge horizon, because
    /// message bytes stay readable until retention deletes them. Read only indexes already
    /// applied: a later one may still be replaced on a follower.
    pub fn read_app_payload(&self, index: u64) -> Result<Option<Vec<u8>>, RaftError> {
        let Some((_term, payload)) = self.inner.log.read(index)? else {
            return Ok(None);
        };
        entry_codec::app_body(index, payload).map_err(|e| RaftError::Corrupt(e.to_string()))
    }

    /// Deletes the log's sealed segments whose records are all `<= upto`, the purge horizon
    /// made durable first (`LogStore::reclaim_upto`); the number of files deleted. The caller
    /// vouches that a durable checkpoint covers `upto` and that nothing points into them.
    /// Blocking: call from a blocking thread (it panics on a runtime worker). openraft's own
    /// view of the horizon is not moved: it reads the log only from the applied index on (no
    /// snapshots, no peers yet), and a read of a deleted index fails. Refused (Ok(0)) once a
    /// membership names more than one node.
    pub fn reclaim_upto(&self, upto: u64) -> Result<usize, RaftError> {
        Ok(self.inner.log_store.reclaim_upto(upto)?)
    }

    /// A snapshot install was staged under this group (`SnapshotInbox`): its log refuses
    /// appends until the group is reopened, which finishes the install.
    pub fn install_staged(&self) -> bool {
        self.inner.log_store.install_staged()
    }

    /// Why `reclaim_upto` deletes nothing, if it is refused (`LogStore::reclaim_refusal`).
    pub fn reclaim_refusal(&self) -> Option<&'static str> {
        self.inner.log_store.reclaim_refusal()
    }

    /// Every id (voter or learner) of the memberships this node applied and still keeps
    /// (`membership_history`: at most its `KEPT`, started again at a snapshot install, so an
    /// id removed long ago or before this node's last install is not there): what tells a
    /// removal done from an id never a member (review s31 member L2). Blocking (redb read).
    pub fn past_members(&self) -> std::collections::BTreeSet<u64> {
        self.inner
            .log_store
            .membership_history()
            .iter()
            .flat_map(|m| {
                m.membership()
                    .nodes()
                    .map(|(id, _)| *id)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[cfg(test)]
    pub(crate) fn log_store(&self) -> &LogStore {
        &self.inner.log_store
    }

    /// The sealed segment holding `index` (`LogStore::sealed_segment_of`).
    pub fn sealed_segment_of(&self, index: u64) -> Option<(u64, u64, u64)> {
        self.inner.log_store.sealed_segment_of(index)
    }

    /// Bytes `reclaim_upto(upto)` would free now.
    pub fn reclaimable_bytes(&self, upto: u64) -> u64 {
        self.inner.log_store.reclaimable_bytes(upto)
    }

    /// How long ago the Raft core last answered a question, on a cluster member (`None` on a
    /// single node). A core blocked on its own disk (a vote or an append waiting on a hung
    /// fsync) answers nothing, while the last metrics it reported still show it following or
    /// campaigning (review s19 lead M2).
    pub fn core_silent_ms(&self) -> Option<u64> {
        self.inner.probe.as_ref().map(CoreProbe::silent_ms)
    }

    /// Role, term and leader come from openraft's metrics (cloned, the watch guard dropped at
    /// once); the three positions come from the log and the adapters, which are never behind
    /// what a `propose` caller has already been told.
    pub fn status(&self) -> RaftStatus {
        let m = self.inner.raft.metrics().borrow().clone();
        RaftStatus {
            role: match m.state {
                ServerState::Leader => "leader",
                ServerState::Follower => "follower",
                ServerState::Candidate => "candidate",
                ServerState::Learner => "learner",
                ServerState::Shutdown => "shutdown",
            },
            term: m.current_term,
            leader: m.current_leader,
            last_log_index: self.inner.log.last().map(|(index, _)| index),
            committed: self.inner.log_store.committed().map(|c| c.index),
            applied: self.inner.applied.get(),
            quorum_ack_ms: match &self.inner.reported {
                Some(clock) => clock.ack_age(),
                None => m.millis_since_quorum_ack,
            },
            handing_over: self.inner.fence.is_closed(),
            abandoned: self.inner.fence.is_abandoned(),
        }
    }

    /// Stops the Raft core, waits for openraft to drop the state machine, then syncs and stops
    /// the log threads. Once it returns nothing of this node calls the `ApplyHandler` or
    /// writes `log` or `store` any more; drop every `RaftNode` clone before reopening them.
    /// Every step runs even if an earlier one failed; the first failure is returned.
    pub async fn shutdown(&self) -> Result<(), RaftError> {
        self.inner.nudge.abort();
        if let Some(clock) = &self.inner.reported {
            clock.stop();
        }
        if let Some(probe) = &self.inner.probe {
            probe.stop();
        }
        let core = self.inner.raft.shutdown().await.map_err(fatal);
        if let Some(gone) = self.inner.sm_gone.lock().await.take() {
            // Err is the expected outcome: the sender is dropped, never used.
            let _ = gone.await;
        }
        let log_store = self.inner.log_store.clone();
        let threads = tokio::task::spawn_blocking(move || log_store.stop())
            .await
            .map_err(fatal);
        core.and(threads)
    }
}

/// Every node id a membership change would have in the membership after it (removals name
/// none).
fn named_ids(changes: &ChangeMembers<u64, BasicNode>) -> BTreeSet<u64> {
    match changes {
        ChangeMembers::RemoveVoters(_) | ChangeMembers::RemoveNodes(_) => BTreeSet::new(),
        ChangeMembers::AddVoterIds(ids) | ChangeMembers::ReplaceAllVoters(ids) => ids.clone(),
        ChangeMembers::AddVoters(nodes)
        | ChangeMembers::AddNodes(nodes)
        | ChangeMembers::SetNodes(nodes)
        | ChangeMembers::ReplaceAllNodes(nodes) => nodes.keys().copied().collect(),
    }
}
