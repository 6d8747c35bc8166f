//! The sending side of a snapshot, as the network's `full_snapshot`: openraft hands over the
//! meta of the snapshot it wants sent (the newest durable checkpoint generation,
//! `StateMachine::durable`, no bytes), and this streams that generation and its records
//! `F..=A` (`LogStore::snapshot_source`, under a floor lease for the stream's life) in chunks
//! of the peers' `snapshot` frame limit.
//!
//! A local read failure (the generation's slot saved over, a flipped byte, a redb error) is
//! `Unreachable`, never a storage error: openraft 0.9 stops the leader's whole core on a
//! `StorageError` from the snapshot it sends (review s25 H1), whereas `Unreachable` makes it
//! back off and ask the state machine again, which offers the newest generation.

// openraft's errors (~200 bytes) are returned by value to its traits' boundary.
#![allow(clippy::result_large_err)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    Fatal, InstallSnapshotError, RPCError, RaftError, ReplicationClosed, StreamingError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork};
use openraft::raft::{InstallSnapshotRequest, SnapshotResponse};
use openraft::{Snapshot, Vote};

use crate::snapshot_feed::SnapshotFeed;
use crate::state_machine::checkpoint_meta;
use crate::tcp_client::PeerClient;
use crate::tcp_server::{CHECKPOINT_STREAM, NO_INBOX};
use crate::types::{NodeId, TypeConfig};

type Streamed = Result<SnapshotResponse<NodeId>, StreamingError<TypeConfig, Fatal<NodeId>>>;

/// The slowest disk and link a chunk's deadline allows for: 10 MB/s.
const BYTES_PER_SEC: u64 = 10_000_000;
/// On top of that, for the receiver's fsyncs (the first chunk creates a file, the last one
/// renames it and stages the install, which reads the whole file again: its share is the
/// stream length at the same rate).
const FIXED: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
#[error("snapshot to node {target}: {why}")]
struct SendError {
    target: NodeId,
    why: String,
}

/// Streams the durable generation `snapshot.meta` names to the peer of `client`; `chunk` is
/// the most data one request carries. The feed counts the snapshots the peer accepted whole.
pub(crate) async fn send(
    client: &mut PeerClient,
    feed: &SnapshotFeed,
    chunk: usize,
    (vote, snapshot): (Vote<NodeId>, Snapshot<TypeConfig>),
    cancel: impl Future<Output = ReplicationClosed>,
    option: RPCOption,
) -> Streamed {
    let target = client.target();
    let unreachable =
        |why: String| StreamingError::Unreachable(Unreachable::new(&SendError { target, why }));
    if let Some(wait) = client.no_inbox_wait() {
        // Answered here: no disk read, nothing sent (review s27 snap, 6 MB/s per such peer).
        return Err(unreachable(format!(
            "the peer takes no snapshot streams (cluster_snapshot_catch_up off there); \
             not asked again for {wait:?}"
        )));
    }
    let Some(store) = feed.store() else {
        return Err(unreachable("the group is opening or closed".into()));
    };
    let meta = snapshot.meta;
    // Only a checkpoint generation offered as one (`StateMachine::durable`) is streamed: any
    // other snapshot openraft holds (one that covers nothing while no generation can be
    // offered) is answered Unreachable, so openraft backs off and asks again (review s27 snap
    // HIGH: a position-only snapshot named a declined generation's `A`).
    if !meta.snapshot_id.starts_with(CHECKPOINT_STREAM) {
        return Err(unreachable(format!(
            "snapshot {} is not a checkpoint generation",
            meta.snapshot_id
        )));
    }
    let Some(last) = meta.last_log_id else {
        return Err(unreachable("the snapshot covers no log entry".into()));
    };
    let ids = feed.ids();
    let opened = tokio::task::spawn_blocking(move || {
        store
            .snapshot_source_with_ids(last.index, ids)
            .map(|s| (s, store.membership_history()))
    })
    .await;
    let (source, history) = match opened {
        Ok(Ok((s, history))) => (Arc::new(s), history),
        Ok(Err(e)) => {
            return Err(unreachable(format!(
                "cannot open checkpoint {}: {e}",
                last.index
            )))
        }
        Err(e) => {
            return Err(unreachable(format!(
                "opening checkpoint {}: {e}",
                last.index
            )))
        }
    };
    let head = *source.header();
    // The generation opened must be the one offered, membership included, declined as the
    // offer is (a membership applied past `A`): never a stream under another's meta.
    let opened = checkpoint_meta(
        head.applied_term,
        head.applied_index,
        head.first_record,
        head.state_crc,
        source.membership(),
        &history,
    );
    if opened.as_ref() != Some(&meta) {
        return Err(unreachable(format!(
            "checkpoint {} (term {}) is not the generation offered as {}",
            last.index, head.applied_term, meta.snapshot_id
        )));
    }
    let len = head.stream_len();
    let chunk = chunk.max(1);
    tokio::pin!(cancel);
    let mut offset = 0u64;
    let mut restarted = false;
    loop {
        let src = source.clone();
        let want = usize::try_from(len - offset)
            .unwrap_or(usize::MAX)
            .min(chunk);
        let read = tokio::task::spawn_blocking(move || {
            let mut data = vec![0u8; want];
            let mut got = 0;
            while got < want {
                let n = src.read_at(offset + got as u64, &mut data[got..])?;
                if n == 0 {
                    break;
                }
                got += n;
            }
            data.truncate(got);
            Ok::<_, queenmq_storage::StorageError>(data)
        })
        .await;
        let data = match read {
            Ok(Ok(d)) if d.len() == want => d,
            Ok(Ok(d)) => {
                return Err(unreachable(format!(
                    "the stream ended at {} of {len} bytes",
                    offset + d.len() as u64
                )))
            }
            Ok(Err(e)) => return Err(unreachable(format!("reading at {offset}: {e}"))),
            Err(e) => return Err(unreachable(format!("reading at {offset}: {e}"))),
        };
        let n = data.len() as u64;
        let done = offset + n == len;
        let mut budget = FIXED + Duration::from_millis(n.saturating_mul(1000) / BYTES_PER_SEC);
        if done {
            budget += Duration::from_millis(len.saturating_mul(1000) / BYTES_PER_SEC);
        }
        let ttl = option.hard_ttl().max(budget);
        let req = InstallSnapshotRequest {
            vote,
            meta: meta.clone(),
            offset,
            data,
            done,
        };
        let answer = tokio::select! {
            closed = &mut cancel => return Err(StreamingError::Closed(closed)),
            a = client.install_snapshot(req, RPCOption::new(ttl)) => a,
        };
        match answer {
            Ok(resp) if resp.vote > vote => {
                client.note_snapshot_taken();
                return Ok(SnapshotResponse::new(resp.vote));
            }
            Ok(resp) if done => {
                client.note_snapshot_taken();
                feed.count_sent();
                return Ok(SnapshotResponse::new(resp.vote));
            }
            Ok(_) => {
                client.note_snapshot_taken();
                offset += n;
            }
            Err(RPCError::RemoteError(e))
                if matches!(
                    e.source,
                    RaftError::APIError(InstallSnapshotError::SnapshotMismatch(_))
                ) =>
            {
                // The peer lost the stream (it restarted, or took another): from the start,
                // once. A second loss is left to openraft's backoff, so two senders can never
                // replace each other's stream in a tight loop (review s26 snap M3).
                if restarted {
                    return Err(unreachable("the peer lost the stream twice".into()));
                }
                restarted = true;
                offset = 0;
            }
            Err(RPCError::Unreachable(u)) if u.to_string().contains(NO_INBOX) => {
                let wait = client.note_no_inbox();
                return Err(unreachable(format!("{u}; not asked again for {wait:?}")));
            }
            Err(RPCError::Timeout(t)) => return Err(StreamingError::Timeout(t)),
            Err(RPCError::Network(e)) => return Err(StreamingError::Network(e)),
            Err(e) => return Err(unreachable(e.to_string())),
        }
    }
}
