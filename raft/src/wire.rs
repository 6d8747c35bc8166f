//! The frames of the Raft network between nodes: the first layer of issue 13's transport
//! (docs/raft-storage.md "Next: the Raft network"). Everything read off a peer's connection is
//! checked here before a byte of it is allocated; the connections on top are `tcp_client`
//! (the `RaftNetworkFactory`) and `tcp_server` (the listener), the bodies `rpc_codec`.
//!
//! A frame is a kind (1 byte), a request id (8 bytes, little-endian), a body length (4 bytes,
//! little-endian) and the body. The first frame on a connection is `Hello` (id 0) with the
//! cluster token; a connection whose first frame is anything else, or whose token differs, is
//! closed by the caller without an answer. Every request carries an id the client has not used
//! on that connection, and its `Reply` echoes it: openraft drops an RPC future at its timeout,
//! possibly after the request went out, and the answer then still arrives. A reply read with
//! another id than the one awaited ([`read_reply`]) is a protocol error and the caller drops
//! the connection, so a stale `Success` is never counted for another request.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Hello = 1,
    Append = 2,
    Vote = 3,
    Snapshot = 4,
    Reply = 5,
    /// "Elect now": the leader of a group asks a caught-up voter to campaign at once (a
    /// hand-over, `hand_over`).
    Elect = 6,
    /// "Commit read": a joining node asks a peer that leads the group for its committed index,
    /// confirmed by a read-index (`commit_read`, the joining horizon, review s28 M-3).
    CommitRead = 7,
}

impl Kind {
    fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Hello,
            2 => Kind::Append,
            3 => Kind::Vote,
            4 => Kind::Snapshot,
            5 => Kind::Reply,
            6 => Kind::Elect,
            7 => Kind::CommitRead,
            _ => return None,
        })
    }
}

/// The largest body of each kind this node accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub append: u32,
    pub vote: u32,
    pub snapshot: u32,
    pub reply: u32,
}

/// A token longer than this is not a token.
const HELLO_MAX: u32 = 1024;
/// Room for the encoding around the entries of an append and a snapshot chunk's header.
pub const ENVELOPE: u32 = 64 * 1024;
/// The largest append body whatever the record limit: about 17 ms at 1 Gbit/s, a fifth of
/// openraft's append timeout (`heartbeat_ms`, 100 ms), which must also cover the follower's
/// write and fsync (review s14 F2: 16 MiB took 134 ms, over the timeout, and never arrived).
/// The client also halves its own budget after an append times out. `max_record_bytes` (256 MiB by default) times
/// `max_payload_entries` would be 4 GiB; the client must shrink a batch to this budget
/// (openraft retries with fewer entries on `PayloadTooLarge`), and a single record bigger than
/// `APPEND_MAX - ENVELOPE` cannot go by append at all: it needs a chunked path (as snapshot
/// chunks are), not built yet, so a clustered group must keep its records under it.
pub const APPEND_MAX: u32 = 2 * 1024 * 1024;
/// The entry bytes one append carries at most: what the log reader hands openraft per batch
/// (`LogStore::limited_get_log_entries`), so a batch is never read and encoded only to be
/// refused (review s14 F4).
pub const APPEND_ENTRIES_MAX: u32 = APPEND_MAX - ENVELOPE;
/// What a body reserves before its bytes arrive; the buffer grows as they do, so a declared
/// length costs memory only once the peer actually sends it.
const READ_CHUNK: usize = 64 * 1024;

impl Limits {
    /// From what openraft may send: at most `max_entries` entries of at most `max_entry_bytes`
    /// each per append (openraft's `max_payload_entries`, the log's record limit), capped at
    /// [`APPEND_MAX`]; snapshot chunks of `snapshot_chunk` bytes (`snapshot_max_chunk_size`),
    /// saturating at 4 GiB - 1, the largest length a frame can state.
    pub fn new(max_entry_bytes: u32, max_entries: u32, snapshot_chunk: u32) -> Limits {
        Limits {
            append: max_entry_bytes
                .saturating_mul(max_entries)
                .saturating_add(ENVELOPE)
                .min(APPEND_MAX),
            vote: 1024,
            snapshot: snapshot_chunk.saturating_add(ENVELOPE),
            // An append reply names a log id or a conflict: small; errors carry text.
            reply: ENVELOPE,
        }
    }

    /// The largest body a listener reads (a request of any kind).
    pub fn largest_request(&self) -> u32 {
        self.append.max(self.snapshot).max(self.vote)
    }

    fn of(&self, kind: Kind) -> u32 {
        match kind {
            Kind::Hello => HELLO_MAX,
            Kind::Append => self.append,
            // A group name and a term (or only the name): as small as a vote request.
            Kind::Vote | Kind::Elect | Kind::CommitRead => self.vote,
            Kind::Snapshot => self.snapshot,
            Kind::Reply => self.reply,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("the peer connection failed: {0}")]
    Io(#[from] io::Error),
    #[error("a frame of unknown kind {0}")]
    UnknownKind(u8),
    #[error("a {kind:?} frame of {len} bytes is over the limit of {max}")]
    TooLarge { kind: Kind, len: u64, max: u32 },
    #[error("expected a {expected:?} frame, got {got:?}")]
    Unexpected { expected: Kind, got: Kind },
    #[error("a reply to request {got} while awaiting request {expected}")]
    ReplyMismatch { expected: u64, got: u64 },
    #[error("the peer's cluster token is wrong")]
    BadToken,
    #[error("the configured cluster token is shorter than {MIN_TOKEN} bytes")]
    WeakToken,
    #[error("no Hello within the deadline")]
    HelloTimeout,
    #[error("the listener's configuration is unusable: {0}")]
    Config(&'static str),
}

/// The shortest cluster token this node runs with: an empty or short token would let anyone
/// who reaches the cluster port vote and append in every tenant's group.
pub const MIN_TOKEN: usize = 32;

/// One frame read off a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: Kind,
    /// The request's id, echoed by its `Reply`; 0 for the `Hello`.
    pub id: u64,
    pub body: Vec<u8>,
}

const HEAD: usize = 13;

/// Reads one frame; its length is checked against `limits` before the body is read.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    limits: &Limits,
) -> Result<Frame, WireError> {
    let Head { kind, id, len } = read_head(r, limits).await?;
    let mut body = Vec::new();
    read_body(r, len, &mut body).await?;
    Ok(Frame { kind, id, body })
}

/// A frame's header: what it is and how long its body is (already checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub kind: Kind,
    pub id: u64,
    pub len: u32,
}

/// Reads a frame's header and checks its length against `limits`; the caller reads the body
/// ([`read_body`]), so it can bound what bodies hold first (the listener's `BodyBudget`).
pub async fn read_head<R: AsyncRead + Unpin>(
    r: &mut R,
    limits: &Limits,
) -> Result<Head, WireError> {
    let mut head = [0u8; HEAD];
    r.read_exact(&mut head).await?;
    let kind = Kind::from_byte(head[0]).ok_or(WireError::UnknownKind(head[0]))?;
    let mut id = [0u8; 8];
    id.copy_from_slice(&head[1..9]);
    let id = u64::from_le_bytes(id);
    let len = u32::from_le_bytes([head[9], head[10], head[11], head[12]]);
    let max = limits.of(kind);
    if len > max {
        return Err(WireError::TooLarge {
            kind,
            len: len.into(),
            max,
        });
    }
    Ok(Head { kind, id, len })
}

/// Reads the answer to request `id`: anything but a `Reply` with that id is an error, after
/// which the caller must drop the connection (its stream holds another request's answer, or
/// is out of step).
pub async fn read_reply<R: AsyncRead + Unpin>(
    r: &mut R,
    limits: &Limits,
    id: u64,
) -> Result<Vec<u8>, WireError> {
    let f = read_frame(r, limits).await?;
    if f.kind != Kind::Reply {
        return Err(WireError::Unexpected {
            expected: Kind::Reply,
            got: f.kind,
        });
    }
    if f.id != id {
        return Err(WireError::ReplyMismatch {
            expected: id,
            got: f.id,
        });
    }
    Ok(f.body)
}

/// Reads exactly `len` bytes into `body`, growing it as they arrive (never reserving `len` up
/// front: a peer that declares a large body and sends little holds little).
pub async fn read_body<R: AsyncRead + Unpin>(
    r: &mut R,
    len: u32,
    body: &mut Vec<u8>,
) -> Result<(), WireError> {
    let len = len as usize;
    body.reserve(len.min(READ_CHUNK));
    let mut chunk = [0u8; 8 * 1024];
    while body.len() < len {
        let want = (len - body.len()).min(chunk.len());
        let n = r.read(&mut chunk[..want]).await?;
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok(())
}

/// Writes one frame; a body whose length does not fit the 4-byte field is refused unsent.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    kind: Kind,
    id: u64,
    body: &[u8],
) -> Result<(), WireError> {
    let len = u32::try_from(body.len()).map_err(|_| WireError::TooLarge {
        kind,
        len: body.len() as u64,
        max: u32::MAX,
    })?;
    let mut head = [0u8; HEAD];
    head[0] = kind as u8;
    head[1..9].copy_from_slice(&id.to_le_bytes());
    head[9..].copy_from_slice(&len.to_le_bytes());
    w.write_all(&head).await?;
    w.write_all(body).await?;
    w.flush().await?;
    Ok(())
}

/// Who a `Hello` says it comes from and which node it is meant for (review s14 F1): openraft
/// counts an ack or a vote for the id it called, so a listener must never answer as a node it
/// is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloIds {
    pub from: u64,
    pub to: u64,
}

/// The bytes of a Hello before the token: the sender's id, then the intended receiver's.
const HELLO_IDS: usize = 16;

/// The longest cluster token a Hello can carry (the Hello frame is capped at `HELLO_MAX`).
pub const MAX_TOKEN: usize = HELLO_MAX as usize - HELLO_IDS;

/// The body of a Hello from node `from` to node `to`.
pub fn hello_body(from: u64, to: u64, token: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(HELLO_IDS + token.len());
    b.extend_from_slice(&from.to_le_bytes());
    b.extend_from_slice(&to.to_le_bytes());
    b.extend_from_slice(token);
    b
}

/// Reads the connection's first frame and checks it is a `Hello` with `token`, within
/// `deadline` (a peer that connects and then sends nothing, or trickles its Hello, holds a
/// connection only that long; the caller closes it on any error). A configured token shorter
/// than [`MIN_TOKEN`] refuses every peer before a byte is read, so an unset token never opens
/// the port. The comparison takes the same time wherever the first difference is (only the
/// length can leak, and the token's length is not the secret).
pub async fn accept_hello<R: AsyncRead + Unpin>(
    r: &mut R,
    token: &[u8],
    deadline: Duration,
) -> Result<HelloIds, WireError> {
    if token.len() < MIN_TOKEN {
        return Err(WireError::WeakToken);
    }
    // Only the Hello limit applies before the peer is known.
    let before_hello = Limits {
        append: 0,
        vote: 0,
        snapshot: 0,
        reply: 0,
    };
    let Frame { kind, body, .. } = tokio::time::timeout(deadline, read_frame(r, &before_hello))
        .await
        .map_err(|_| WireError::HelloTimeout)??;
    if kind != Kind::Hello {
        return Err(WireError::Unexpected {
            expected: Kind::Hello,
            got: kind,
        });
    }
    let (ids, given) = body.split_at(HELLO_IDS.min(body.len()));
    if ids.len() == HELLO_IDS && bool::from(subtle::ConstantTimeEq::ct_eq(given, token)) {
        let id = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
        Ok(HelloIds {
            from: id(&ids[..8]),
            to: id(&ids[8..]),
        })
    } else {
        Err(WireError::BadToken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(10);

    fn limits() -> Limits {
        Limits::new(1 << 20, 300, 3 << 20)
    }

    fn frame(kind: u8, len: u32, body: &[u8]) -> Vec<u8> {
        let mut f = vec![kind];
        f.extend_from_slice(&0u64.to_le_bytes());
        f.extend_from_slice(&len.to_le_bytes());
        f.extend_from_slice(body);
        f
    }

    #[tokio::test]
    async fn frames_of_every_kind_read_back() {
        let mut buf = Vec::new();
        let kinds = [
            Kind::Hello,
            Kind::Append,
            Kind::Vote,
            Kind::Snapshot,
            Kind::Reply,
            Kind::Elect,
            Kind::CommitRead,
        ];
        for (i, k) in kinds.iter().enumerate() {
            write_frame(&mut buf, *k, i as u64 * 1000, &vec![i as u8; i * 3])
                .await
                .unwrap();
        }
        let mut r = buf.as_slice();
        for (i, k) in kinds.iter().enumerate() {
            let f = read_frame(&mut r, &limits()).await.unwrap();
            assert_eq!(
                (f.kind, f.id, f.body),
                (*k, i as u64 * 1000, vec![i as u8; i * 3])
            );
        }
        assert!(r.is_empty());
    }

    /// A length over the kind's limit is refused from the 5-byte header alone: the body is
    /// neither allocated nor read (here there is none to read).
    #[tokio::test]
    async fn an_oversized_length_is_refused_before_the_body() {
        let l = limits();
        for (kind, max) in [
            (2u8, l.append),
            (3, l.vote),
            (4, l.snapshot),
            (5, l.reply),
            (6, l.vote),
            (7, l.vote),
        ] {
            let bytes = frame(kind, max + 1, b"");
            let err = read_frame(&mut bytes.as_slice(), &l).await.unwrap_err();
            assert!(
                matches!(err, WireError::TooLarge { len, max: m, .. } if len == u64::from(max) + 1 && m == max),
                "{err}"
            );
            // At the limit the length is fine and the missing body is what fails.
            let bytes = frame(kind, max, b"");
            let err = read_frame(&mut bytes.as_slice(), &l).await.unwrap_err();
            assert!(
                matches!(err, WireError::Io(ref e) if e.kind() == io::ErrorKind::UnexpectedEof),
                "{err}"
            );
        }
        let huge = frame(2, u32::MAX, b"");
        assert!(matches!(
            read_frame(&mut huge.as_slice(), &l).await,
            Err(WireError::TooLarge { .. })
        ));
    }

    #[tokio::test]
    async fn a_short_body_an_unknown_kind_and_a_short_header_fail() {
        let short = frame(3, 10, b"abc");
        assert!(matches!(
            read_frame(&mut short.as_slice(), &limits()).await,
            Err(WireError::Io(_))
        ));
        let unknown = frame(9, 0, b"");
        assert!(matches!(
            read_frame(&mut unknown.as_slice(), &limits()).await,
            Err(WireError::UnknownKind(9))
        ));
        let head: &[u8] = &[2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(matches!(
            read_frame(&mut &head[..], &limits()).await,
            Err(WireError::Io(_))
        ));
    }

    #[test]
    fn limits_saturate_instead_of_wrapping() {
        let l = Limits::new(u32::MAX, 2, u32::MAX);
        assert_eq!((l.append, l.snapshot), (APPEND_MAX, u32::MAX));
    }

    /// Review s13 F2: under the shipped defaults (256 MiB records, 300 entries per append) the
    /// append limit was 4 GiB - 1, i.e. no limit; it is the byte budget now.
    #[test]
    fn the_append_limit_is_a_byte_budget_under_the_default_record_limit() {
        let max_record = queenmq_storage::LogOptions::default().max_record_bytes;
        let l = Limits::new(max_record, 300, 3 << 20);
        assert_eq!(l.append, APPEND_MAX);
        assert!(Limits::new(1024, 300, 3 << 20).append < APPEND_MAX);
    }

    /// Review s13 F2: a frame declaring the whole budget whose peer then sends 1000 bytes and
    /// stops costs about what arrived, not the declared length.
    #[tokio::test]
    async fn a_declared_body_is_not_reserved_before_it_arrives() {
        let mut bytes = vec![7u8; 1000];
        let mut body = Vec::new();
        let err = read_body(&mut bytes.as_slice(), APPEND_MAX, &mut body)
            .await
            .unwrap_err();
        assert!(
            matches!(err, WireError::Io(ref e) if e.kind() == io::ErrorKind::UnexpectedEof),
            "{err}"
        );
        assert_eq!(body.len(), 1000);
        assert!(body.capacity() <= 2 * READ_CHUNK, "{}", body.capacity());
        // And a complete body reads back whole.
        bytes.truncate(600);
        let mut body = Vec::new();
        read_body(&mut bytes.as_slice(), 600, &mut body)
            .await
            .unwrap();
        assert_eq!(body, vec![7u8; 600]);
    }

    #[tokio::test]
    async fn only_a_hello_with_the_token_opens_a_connection() {
        let token = b"0123456789abcdef0123456789abcdef";
        let body = hello_body(3, 4, token);
        let ok = frame(1, body.len() as u32, &body);
        let ids = accept_hello(&mut ok.as_slice(), token, WAIT).await.unwrap();
        assert_eq!(ids, HelloIds { from: 3, to: 4 });
        // The token alone, without the ids, is not a Hello.
        let bare = frame(1, token.len() as u32, token);
        assert!(matches!(
            accept_hello(&mut bare.as_slice(), token, WAIT).await,
            Err(WireError::BadToken)
        ));

        let mut wrong = *token;
        wrong[31] ^= 1;
        let bad = frame(1, 32, &wrong);
        assert!(matches!(
            accept_hello(&mut bad.as_slice(), token, WAIT).await,
            Err(WireError::BadToken)
        ));
        let short = frame(1, 31, &token[..31]);
        assert!(matches!(
            accept_hello(&mut short.as_slice(), token, WAIT).await,
            Err(WireError::BadToken)
        ));
        // Anything before the Hello is refused, and an append is held to the Hello's size.
        let first_append = frame(2, 4, b"data");
        assert!(matches!(
            accept_hello(&mut first_append.as_slice(), token, WAIT).await,
            Err(WireError::TooLarge { max: 0, .. })
        ));
        let empty_append = frame(2, 0, b"");
        assert!(matches!(
            accept_hello(&mut empty_append.as_slice(), token, WAIT).await,
            Err(WireError::Unexpected { .. })
        ));
        let big_hello = frame(1, HELLO_MAX + 1, b"");
        assert!(matches!(
            accept_hello(&mut big_hello.as_slice(), token, WAIT).await,
            Err(WireError::TooLarge { .. })
        ));
    }

    /// Review s14 F2: a full append crosses a 1 Gbit/s link in at most a fifth of the default
    /// append timeout (the heartbeat), leaving the rest for the follower's fsync.
    #[test]
    fn a_full_append_fits_well_inside_the_append_timeout() {
        let heartbeat_ms = crate::RaftConfig::default().heartbeat_ms;
        let wire_ms = u64::from(APPEND_MAX) * 8 * 1000 / 1_000_000_000;
        assert!(
            wire_ms * 5 <= heartbeat_ms,
            "{wire_ms} ms of {heartbeat_ms} ms"
        );
    }

    /// Review s13 F4: an empty configured token admitted an empty Hello (`ct_eq` of two empty
    /// slices is true); a short one is refused too, before anything is read.
    #[tokio::test]
    async fn an_empty_or_short_token_refuses_every_hello() {
        let empty_hello = frame(1, 0, b"");
        assert!(matches!(
            accept_hello(&mut empty_hello.as_slice(), b"", WAIT).await,
            Err(WireError::WeakToken)
        ));
        let short = [7u8; MIN_TOKEN - 1];
        let hello = frame(1, short.len() as u32, &short);
        assert!(matches!(
            accept_hello(&mut hello.as_slice(), &short, WAIT).await,
            Err(WireError::WeakToken)
        ));
        // An empty Hello against a real token is a wrong token.
        let token = [7u8; MIN_TOKEN];
        assert!(matches!(
            accept_hello(&mut empty_hello.as_slice(), &token, WAIT).await,
            Err(WireError::BadToken)
        ));
    }

    /// Review s13 F4: a peer that connects and sends nothing (or part of a Hello) is cut at
    /// the deadline instead of holding the connection for ever.
    #[tokio::test]
    async fn a_silent_or_trickling_peer_is_cut_at_the_deadline() {
        let token = [7u8; MIN_TOKEN];
        let (_silent, mut server) = tokio::io::duplex(64);
        let r = accept_hello(&mut server, &token, Duration::from_millis(20)).await;
        assert!(matches!(r, Err(WireError::HelloTimeout)), "{r:?}");

        let (mut trickle, mut server) = tokio::io::duplex(64);
        trickle.write_all(&[1, 0, 0, 0]).await.unwrap();
        let r = accept_hello(&mut server, &token, Duration::from_millis(20)).await;
        assert!(matches!(r, Err(WireError::HelloTimeout)), "{r:?}");
    }

    /// Review s13 F1: openraft cancels an append at its timeout after the request went out;
    /// the peer still answers it. The next request on that connection must not take that
    /// answer for its own: the id differs, the read fails, and the caller drops the connection.
    #[tokio::test]
    async fn a_reply_to_a_cancelled_request_is_not_taken_for_the_next_one() {
        let (mut client, mut peer) = tokio::io::duplex(4096);
        let l = limits();
        write_frame(&mut client, Kind::Append, 1, b"entries 1..=300")
            .await
            .unwrap();
        // The client gives up on request 1 (its future dropped) and sends request 2.
        write_frame(&mut client, Kind::Append, 2, b"entries 1..=400")
            .await
            .unwrap();
        // The peer answers in order: request 1 first.
        let first = read_frame(&mut peer, &l).await.unwrap();
        assert_eq!((first.kind, first.id), (Kind::Append, 1));
        write_frame(&mut peer, Kind::Reply, first.id, b"Success")
            .await
            .unwrap();
        let r = read_reply(&mut client, &l, 2).await;
        assert!(
            matches!(
                r,
                Err(WireError::ReplyMismatch {
                    expected: 2,
                    got: 1
                })
            ),
            "{r:?}"
        );
        // The matching reply is accepted, and a request is never taken for a reply.
        write_frame(&mut peer, Kind::Reply, 2, b"Success")
            .await
            .unwrap();
        assert_eq!(read_reply(&mut client, &l, 2).await.unwrap(), b"Success");
        write_frame(&mut peer, Kind::Vote, 3, b"").await.unwrap();
        assert!(matches!(
            read_reply(&mut client, &l, 3).await,
            Err(WireError::Unexpected { .. })
        ));
    }
}
