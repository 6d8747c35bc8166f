//! Three nodes in one process over real loopback TCP (`TcpNetwork` + the cluster listener):
//! they elect a leader, replicate, and when the leader's node goes away the other two elect a
//! new one that still holds every committed entry.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::Raft;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::log_store::LogStore;
use crate::state_machine::StateMachine;
use crate::tcp_server::{Groups, ServerConfig};
use crate::types::TypeConfig;
use crate::wire::Limits;
use crate::{serve_cluster, RaftConfig, TcpNetwork};

use super::fixtures::{open_small_segments, Recorder};

const WAIT: Option<Duration> = Some(Duration::from_secs(30));
pub const TOKEN: &[u8] = b"a cluster token of at least 32 bytes, for tests";
pub const GROUP: &str = "tenant-1";

pub fn limits() -> Limits {
    Limits::new(1 << 20, 300, 3 << 20)
}

pub fn server_config(node_id: u64, hello_deadline: Duration, max_pre_hello: usize) -> ServerConfig {
    ServerConfig {
        node_id,
        token: TOKEN.into(),
        limits: limits(),
        hello_deadline,
        max_pre_hello,
        max_pre_hello_per_source: max_pre_hello,
        peer_sources: Default::default(),
        body_budget: crate::body_budget::BodyBudget::new(limits().snapshot as usize, None),
        body_deadline: Duration::from_secs(30),
    }
}

/// Serves `groups` on `listener` until the returned sender is dropped or fired.
pub fn listen(listener: TcpListener, cfg: ServerConfig, groups: Groups) -> oneshot::Sender<()> {
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        serve_cluster(listener, cfg, groups, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    stop
}

struct Member {
    raft: Raft<TypeConfig>,
    recorder: Arc<Recorder>,
    stop: oneshot::Sender<()>,
}

async fn member(dir: &Path, id: u64, listener: TcpListener) -> Member {
    let (log, store) = open_small_segments(&dir.join(id.to_string()));
    let log_store = LogStore::open(log, store.clone()).unwrap();
    let recorder = Recorder::new(None);
    let (sm, _gone) = StateMachine::open(recorder.clone(), store).unwrap();
    // Elections slower than the default so a loaded test machine does not change leaders
    // mid-test (the assertions count exact entries).
    let cfg = RaftConfig {
        node_id: id,
        heartbeat_ms: 100,
        election_timeout_min_ms: 1000,
        election_timeout_max_ms: 2000,
    };
    let raft = Raft::new(
        id,
        Arc::new(cfg.to_openraft().unwrap()),
        TcpNetwork::new(id, GROUP, TOKEN, limits()),
        log_store,
        sm,
    )
    .await
    .unwrap();
    // As `RaftNode` does: without it two survivors can split their votes for ever.
    crate::election_nudge::spawn(
        raft.clone(),
        id,
        (cfg.election_timeout_min_ms, cfg.election_timeout_max_ms),
        None,
    );
    let groups = Groups::default();
    groups.add(GROUP, raft.clone());
    let stop = listen(
        listener,
        server_config(id, Duration::from_secs(10), 64),
        groups,
    );
    Member {
        raft,
        recorder,
        stop,
    }
}

async fn leader_among(members: &BTreeMap<u64, Member>, not: Option<u64>) -> u64 {
    let any = members.values().next().unwrap();
    let m = any
        .raft
        .wait(WAIT)
        .metrics(
            |m| m.current_leader.is_some_and(|l| Some(l) != not),
            "a leader",
        )
        .await
        .unwrap();
    m.current_leader.unwrap()
}

async fn write(raft: &Raft<TypeConfig>, from: u32, to: u32) -> u64 {
    let mut last = 0;
    for i in from..to {
        let r = raft
            .client_write(format!("entry {i}").into_bytes())
            .await
            .unwrap();
        last = r.log_id.index;
    }
    last
}

fn payloads(r: &Recorder) -> Vec<Vec<u8>> {
    r.applied().into_iter().map(|(_, _, p)| p).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_over_tcp_replicate_and_survive_losing_the_leader() {
    let dir = tempfile::tempdir().unwrap();
    let (listeners, nodes) = super::clustered_start::three_listeners().await;
    let mut members = BTreeMap::new();
    for (id, l) in listeners {
        members.insert(id, member(dir.path(), id, l).await);
    }
    members[&1].raft.initialize(nodes).await.unwrap();

    let first = leader_among(&members, None).await;
    let last = write(&members[&first].raft, 0, 20).await;
    for m in members.values() {
        m.raft
            .wait(WAIT)
            .applied_index_at_least(Some(last), "replicated")
            .await
            .unwrap();
    }
    let written: Vec<Vec<u8>> = (0..20).map(|i| format!("entry {i}").into_bytes()).collect();
    for m in members.values() {
        assert_eq!(payloads(&m.recorder), written);
    }

    // The leader's node goes away: its Raft and its listener.
    let gone = members.remove(&first).unwrap();
    gone.raft.shutdown().await.unwrap();
    let _ = gone.stop.send(());

    let second = leader_among(&members, Some(first)).await;
    assert_ne!(second, first);
    let last = write(&members[&second].raft, 20, 25).await;
    let written: Vec<Vec<u8>> = (0..25).map(|i| format!("entry {i}").into_bytes()).collect();
    for m in members.values() {
        m.raft
            .wait(WAIT)
            .applied_index_at_least(Some(last), "replicated after the failover")
            .await
            .unwrap();
        assert_eq!(payloads(&m.recorder), written);
    }
    for m in members.values() {
        m.raft.shutdown().await.unwrap();
    }
}
