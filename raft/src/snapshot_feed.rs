//! How a clustered group catches a lagging peer up by snapshot (issue 13): the handle its
//! network (`TcpNetwork::with_snapshots`, the sender) and its listener (`SnapshotInbox`, the
//! receiver) share with the group's log store, which exists only once the group is open
//! (`RaftNode::start_clustered` attaches it before the listener serves the group), and the
//! openraft settings that let openraft purge its log behind the durable checkpoint.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::log_store::{LogStore, WeakLogStore};

/// Entries openraft keeps below the snapshot it last built (`max_in_snapshot_log_to_keep`,
/// openraft's default too): a follower less than this far behind the newest checkpoint is
/// caught up by appends, not by a whole snapshot, and the log costs this many entries more
/// than the checkpoint needs (one per group-commit cycle: seconds of traffic).
pub const KEEP_BELOW_SNAPSHOT: u64 = 1000;

/// Every this many committed entries past its last snapshot (or `keep_below`, when fewer)
/// openraft asks for one, which is the newest durable checkpoint generation
/// (`StateMachine::durable`: headers read at most twice a second, no encode), and then purges
/// up to it less `keep_below`. More often than `keep_below` would gain nothing.
pub const SNAPSHOT_EVERY: u64 = 256;

/// Snapshots a peer accepted whole from this node.
const SENT: &str = "queen_raft_snapshot_sent_total";
/// Snapshots this node received and staged (each finished by the group's reopen).
const INSTALLS: &str = "queen_raft_snapshot_installs_total";

/// A clustered group's snapshot catch-up. Clones share it.
#[derive(Clone)]
pub struct SnapshotFeed {
    /// The group's name, the `tenant` label of its counters.
    group: Arc<str>,
    /// Weak: the feed lives in the listener's inbox and the network, and the group's reopen
    /// waits until nothing holds its files (a strong handle here made it wait for ever).
    store: Arc<OnceLock<WeakLogStore>>,
    sent: Arc<AtomicU64>,
    keep_below: u64,
    /// The group's id files (`<data_dir>/ids`), streamed after the records so a peer caught
    /// up this way knows the ids its leader spilled (docs/storage-format.md "The id files in
    /// the stream"). None: streams carry no ids part.
    ids: Option<Arc<dyn queenmq_storage::IoBackend>>,
}

impl std::fmt::Debug for SnapshotFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotFeed")
            .field("group", &self.group)
            .field("attached", &self.store.get().is_some())
            .field("keep_below", &self.keep_below)
            .finish()
    }
}

impl SnapshotFeed {
    /// The feed of group `group`; `keep_below`: entries openraft keeps under its snapshot
    /// (`KEEP_BELOW_SNAPSHOT` unless a test needs reclamation sooner). Exports its counters
    /// at 0 (docs/metrics.md), so a dashboard tells "never" from "not scraped".
    pub fn new(group: &str, keep_below: u64) -> SnapshotFeed {
        for name in [SENT, INSTALLS] {
            metrics::counter!(name, "tenant" => group.to_string()).increment(0);
        }
        SnapshotFeed {
            group: group.into(),
            store: Arc::default(),
            sent: Arc::default(),
            keep_below,
            ids: None,
        }
    }

    /// Streams also carry the id files of `ids` (the group's `<data_dir>/ids`).
    pub fn with_ids(mut self, ids: Arc<dyn queenmq_storage::IoBackend>) -> SnapshotFeed {
        self.ids = Some(ids);
        self
    }

    pub(crate) fn ids(&self) -> Option<Arc<dyn queenmq_storage::IoBackend>> {
        self.ids.clone()
    }

    pub(crate) fn attach(&self, store: LogStore) {
        if self.store.set(store.downgrade()).is_err() {
            tracing::warn!("a snapshot feed was attached to a second log store; the first stays");
        }
    }

    /// The group's log store while the group is open.
    pub(crate) fn store(&self) -> Option<LogStore> {
        self.store.get().and_then(WeakLogStore::upgrade)
    }

    pub(crate) fn count_sent(&self) {
        self.sent.fetch_add(1, Ordering::SeqCst);
        metrics::counter!(SENT, "tenant" => self.group.to_string()).increment(1);
    }

    pub(crate) fn count_install(&self) {
        metrics::counter!(INSTALLS, "tenant" => self.group.to_string()).increment(1);
    }

    /// Snapshots peers accepted whole from this node (the answer to the last chunk).
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }

    /// openraft's snapshot and purge settings for a group that catches peers up this way.
    pub(crate) fn tune(&self, config: &mut openraft::Config) {
        let every = SNAPSHOT_EVERY.min(self.keep_below.max(1));
        config.snapshot_policy = openraft::SnapshotPolicy::LogsSinceLast(every);
        config.max_in_snapshot_log_to_keep = self.keep_below;
    }
}
