//! Review s27 snap HIGH: with snapshot catch-up on, a leader restarted on a checkpoint whose
//! recorded membership was applied past its `A` (declined) offered a position-only snapshot
//! at `A` with the newer membership, and the sender streamed the declined generation under
//! it. Now it offers a snapshot that covers nothing, and the sender streams nothing that is
//! not the checkpoint generation it was offered, membership included.

use std::collections::BTreeSet;
use std::io::Cursor;
use std::time::Duration;

use openraft::error::StreamingError;
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::{BasicNode, ErrorSubject, Snapshot, SnapshotMeta, Vote};

use super::fixtures::{fill, open_small_segments, open_stores, reclaim, start_fresh, Recorder};
use super::tcp_cluster::{limits, listen, server_config, GROUP, TOKEN};
use crate::meta;
use crate::state_machine::StateMachine;
use crate::tcp_server::{Groups, CHECKPOINT_STREAM};
use crate::types::{log_id, Membership, StoredMembership, TypeConfig};
use crate::{SnapshotFeed, TcpNetwork};

/// A safety bound on the one send that reaches the (silent) peer, never an assertion.
const BOUND: Duration = Duration::from_secs(1);

fn snapshot(meta: SnapshotMeta<u64, BasicNode>) -> Snapshot<TypeConfig> {
    Snapshot {
        meta,
        snapshot: Box::new(Cursor::new(Vec::new())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_restarted_on_a_declined_checkpoint_streams_nothing_to_a_lagging_peer() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_small_segments(dir.path());
    let node = start_fresh(&log, &store).await;
    fill(&node, &log).await;
    let (applied, term) = log.last().unwrap();
    // A node added after the last application entry, as in an idle group: the checkpoint
    // saved next records a membership applied past its `A`.
    let later = StoredMembership::new(
        Some(log_id(term, applied + 2)),
        Membership::new(vec![BTreeSet::from([1, 2])], ()),
    );
    meta::put(&store, meta::MEMBERSHIP, &later, ErrorSubject::StateMachine).unwrap();
    store
        .save_checkpoint_with_floor(applied, term, 60, |sink| sink.write(&[3; 5000]))
        .unwrap();
    assert!(reclaim(&node, 40).await > 0);
    assert!(
        meta::get::<crate::types::RaftLogId>(&store, meta::PURGED, ErrorSubject::Logs)
            .unwrap()
            .is_some()
    );

    // The restart: the state machine at the checkpoint, its log purged, the key on.
    let (mut sm, _gone) =
        StateMachine::open(Recorder::new(Some((applied, term))), store.clone()).unwrap();
    sm.offer_durable_snapshots();
    let current = sm
        .get_current_snapshot()
        .await
        .unwrap()
        .expect("a purged log has a snapshot (openraft stops on none)");
    assert_eq!(current.meta.last_log_id, None, "{:?}", current.meta);
    assert!(!current.meta.snapshot_id.starts_with(CHECKPOINT_STREAM));
    assert!(!current.meta.snapshot_id.starts_with("position-only"));
    let built = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    assert_eq!(built.meta.last_log_id, None, "{:?}", built.meta);

    // The sender, towards a peer that never accepts: a connection would wait in its backlog.
    let peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    peer.set_nonblocking(true).unwrap();
    let feed = SnapshotFeed::new(GROUP, 1000);
    feed.attach(node.log_store().clone());
    let mut net = TcpNetwork::new(1, GROUP, TOKEN, limits()).with_snapshots(feed);
    let mut client = net
        .new_client(2, &BasicNode::new(peer.local_addr().unwrap().to_string()))
        .await;
    let ls = node.log_store().clone();
    let head = *tokio::task::spawn_blocking(move || ls.snapshot_source(applied))
        .await
        .unwrap()
        .unwrap()
        .header();
    let at = Some(log_id(term, applied));
    let forged = [
        // What it offered before the fix.
        SnapshotMeta {
            last_log_id: at,
            last_membership: later.clone(),
            snapshot_id: "position-only-1".to_string(),
        },
        // The declined generation named as a checkpoint stream would name it.
        SnapshotMeta {
            last_log_id: at,
            last_membership: later.clone(),
            snapshot_id: format!(
                "{CHECKPOINT_STREAM}{term}-{applied}-{}-{:08x}",
                head.first_record, head.state_crc
            ),
        },
    ];
    let vote = Vote::new_committed(term, 1);
    for meta in std::iter::once(current.meta).chain(forged) {
        let r = client
            .full_snapshot(
                vote,
                snapshot(meta.clone()),
                std::future::pending(),
                RPCOption::new(BOUND),
            )
            .await;
        assert!(
            matches!(r, Err(StreamingError::Unreachable(_))),
            "{meta:?}: {r:?}"
        );
        let accepted = peer.accept();
        assert!(
            matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "{meta:?} reached the peer: {accepted:?}"
        );
    }

    // The control: once a checkpoint records the membership in force at its `A`, it is
    // offered, and the sender does reach the peer with it.
    let earlier = StoredMembership::new(
        Some(log_id(term, 1)),
        Membership::new(vec![BTreeSet::from([1])], ()),
    );
    meta::put(
        &store,
        meta::MEMBERSHIP,
        &earlier,
        ErrorSubject::StateMachine,
    )
    .unwrap();
    store
        .save_checkpoint_with_floor(applied, term, 60, |sink| sink.write(&[3; 5000]))
        .unwrap();
    let (mut sm, _gone) =
        StateMachine::open(Recorder::new(Some((applied, term))), store.clone()).unwrap();
    sm.offer_durable_snapshots();
    let offered = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(offered.meta.last_log_id, at);
    assert_eq!(offered.meta.last_membership, earlier);
    assert!(offered.meta.snapshot_id.starts_with(CHECKPOINT_STREAM));
    let r = client
        .full_snapshot(vote, offered, std::future::pending(), RPCOption::new(BOUND))
        .await;
    assert!(r.is_err(), "the silent peer answered: {r:?}");
    assert!(peer.accept().is_ok(), "the offered checkpoint was not sent");
    node.shutdown().await.unwrap();
}

/// Review s27 snap, the key turned back off: a node that reclaimed with the key on offers a
/// position only (no state) once restarted with it off. openraft's chunked path would send it
/// and the peer's install would fail, stopping its core; it is Unreachable, nothing sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_only_snapshot_is_never_sent_through_openraft_s_path() {
    let peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    peer.set_nonblocking(true).unwrap();
    let mut net = TcpNetwork::new(1, GROUP, TOKEN, limits());
    let mut client = net
        .new_client(2, &BasicNode::new(peer.local_addr().unwrap().to_string()))
        .await;
    let at = Some(log_id(3, 500));
    let position_only = SnapshotMeta {
        last_log_id: at,
        last_membership: StoredMembership::new(
            Some(log_id(3, 10)),
            Membership::new(vec![BTreeSet::from([1, 2])], ()),
        ),
        snapshot_id: "position-only-1".to_string(),
    };
    let r = client
        .full_snapshot(
            Vote::new_committed(3, 1),
            snapshot(position_only),
            std::future::pending(),
            RPCOption::new(BOUND),
        )
        .await;
    assert!(matches!(r, Err(StreamingError::Unreachable(_))), "{r:?}");
    let accepted = peer.accept();
    assert!(
        matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "a position only reached the peer: {accepted:?}"
    );
}

/// Review s27 snap: a peer with the key off refuses checkpoint streams, and openraft retries
/// every 500 ms; each retry read and shipped a whole chunk (~6 MB/s per such peer, for ever).
/// After its refusal the sender answers locally, with no disk read and nothing sent, for a
/// wait that doubles at each refusal up to a cap, and forgets it once the peer takes a chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_an_inbox_is_not_sent_to_again_before_its_wait() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_small_segments(dir.path());
    let node = start_fresh(&log, &store).await;
    fill(&node, &log).await;
    let (applied, term) = log.last().unwrap();
    let one = StoredMembership::new(
        Some(log_id(term, 1)),
        Membership::new(vec![BTreeSet::from([1])], ()),
    );
    meta::put(&store, meta::MEMBERSHIP, &one, ErrorSubject::StateMachine).unwrap();
    store
        .save_checkpoint_with_floor(applied, term, 60, |sink| sink.write(&[3; 5000]))
        .unwrap();
    let (mut sm, _gone) =
        StateMachine::open(Recorder::new(Some((applied, term))), store.clone()).unwrap();
    sm.offer_durable_snapshots();
    let offered = sm.get_current_snapshot().await.unwrap().unwrap().meta;
    assert!(offered.snapshot_id.starts_with(CHECKPOINT_STREAM));

    // The peer: a listener with no inbox for the group (its key off).
    let peer_dir = tempfile::tempdir().unwrap();
    let (plog, pstore) = open_stores(peer_dir.path());
    let peer = start_fresh(&plog, &pstore).await;
    let groups = Groups::default();
    groups.add(GROUP, peer.raft().clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _stop = listen(
        listener,
        server_config(2, Duration::from_secs(10), 64),
        groups,
    );

    let feed = SnapshotFeed::new(GROUP, 1000);
    feed.attach(node.log_store().clone());
    let mut net = TcpNetwork::new(1, GROUP, TOKEN, limits()).with_snapshots(feed);
    let mut client = net.new_client(2, &BasicNode::new(addr.to_string())).await;
    let vote = Vote::new_committed(term, 1);
    let refused = unreachable_text(&mut client, vote, &offered).await;
    assert!(refused.contains(crate::tcp_server::NO_INBOX), "{refused}");
    assert!(client.no_inbox_wait().is_some());
    // Asked again at once (openraft's 500 ms backoff): answered here, not by the peer.
    let local = unreachable_text(&mut client, vote, &offered).await;
    assert!(!local.contains(crate::tcp_server::NO_INBOX), "{local}");
    assert!(local.contains("not asked again"), "{local}");

    // Each further refusal doubles the wait, up to the cap; a chunk taken forgets it.
    let mut last = Duration::ZERO;
    for _ in 0..12 {
        let wait = client.note_no_inbox();
        assert!(wait >= last && wait <= Duration::from_secs(300), "{wait:?}");
        last = wait;
    }
    assert_eq!(last, Duration::from_secs(300));
    client.note_snapshot_taken();
    assert_eq!(client.no_inbox_wait(), None);
    node.shutdown().await.unwrap();
    peer.shutdown().await.unwrap();
}

/// Sends `meta`'s snapshot through `client`; the text of the Unreachable it must end in.
async fn unreachable_text(
    client: &mut crate::tcp_client::PeerClient,
    vote: Vote<u64>,
    meta: &SnapshotMeta<u64, BasicNode>,
) -> String {
    let r = client
        .full_snapshot(
            vote,
            snapshot(meta.clone()),
            std::future::pending(),
            RPCOption::new(Duration::from_secs(20)),
        )
        .await;
    match r {
        Err(StreamingError::Unreachable(u)) => u.to_string(),
        other => panic!("{other:?}"),
    }
}

/// Review s25 H2: a node added to an idle group. The checkpoint saved after the change is at
/// the last application entry and records the membership applied past it; the membership
/// history names the one in force at its `A`, so it is offered at once (no write needed), and
/// the sender's check of the generation against the offer gives the same meta.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_recorded_with_a_later_membership_is_offered_with_the_one_at_its_index() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_small_segments(dir.path());
    let node = start_fresh(&log, &store).await;
    fill(&node, &log).await;
    let (applied, term) = log.last().unwrap();
    let at_a: StoredMembership = meta::get(&store, meta::MEMBERSHIP, ErrorSubject::StateMachine)
        .unwrap()
        .unwrap();
    assert!(at_a.log_id().unwrap().index <= applied);
    // The learner's entry applied after `A`, as the state machine applies it.
    let later = StoredMembership::new(
        Some(log_id(term, applied + 2)),
        Membership::new(
            vec![BTreeSet::from([1])],
            std::collections::BTreeMap::from([(2, BasicNode::default())]),
        ),
    );
    crate::membership_history::record(&store, &later).unwrap();
    meta::put(&store, meta::MEMBERSHIP, &later, ErrorSubject::StateMachine).unwrap();
    store
        .save_checkpoint_with_floor(applied, term, 60, |sink| sink.write(&[3; 5000]))
        .unwrap();

    let (mut sm, _gone) =
        StateMachine::open(Recorder::new(Some((applied, term))), store.clone()).unwrap();
    sm.offer_durable_snapshots();
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta.last_log_id, Some(log_id(term, applied)));
    assert_eq!(current.meta.last_membership, at_a);
    assert!(current.meta.snapshot_id.starts_with(CHECKPOINT_STREAM));

    // What the sender derives from the generation it opens and the history.
    let ls = node.log_store().clone();
    let (head, recorded, history) = tokio::task::spawn_blocking(move || {
        let s = ls.snapshot_source(applied).unwrap();
        (
            *s.header(),
            s.membership().map(<[u8]>::to_vec),
            ls.membership_history(),
        )
    })
    .await
    .unwrap();
    let opened = crate::state_machine::checkpoint_meta(
        head.applied_term,
        head.applied_index,
        head.first_record,
        head.state_crc,
        recorded.as_deref(),
        &history,
    );
    assert_eq!(opened.as_ref(), Some(&current.meta));
    // Without the history it is declined, as before.
    let declined = crate::state_machine::checkpoint_meta(
        head.applied_term,
        head.applied_index,
        head.first_record,
        head.state_crc,
        recorded.as_deref(),
        &[],
    );
    assert_eq!(declined, None);
    node.shutdown().await.unwrap();
}
