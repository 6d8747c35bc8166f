//! The bodies of the Raft network's frames (`wire`): what an Append, a Vote, a Snapshot chunk
//! and a Reply carry. Entry payloads and snapshot data are raw bytes (serde_json would write a
//! byte vector as an array of numbers, up to 4 bytes a byte, and break the frame limits);
//! only the small headers are JSON. Every length read is checked against what remains of the
//! frame before anything is allocated for it.
//!
//! Every request starts with the name of the tenant's group it is for (u16 length + bytes).
//!
//! | request | after the group |
//! |---------|-----------------|
//! | Append | u32 header length, header JSON (vote, prev_log_id, leader_commit), u32 entry count, then per entry u64 index, u64 term, u32 length, the `entry_codec` record payload |
//! | Vote | JSON of openraft's `VoteRequest` |
//! | Snapshot | u32 header length, header JSON (vote, meta, offset, done), then the chunk's data to the end |
//! | Elect | u64 the sender's term as leader, nothing after it (`hand_over`) |
//! | CommitRead | nothing after the group (`commit_read`); answered with the JSON of a [`CommitRead`] |
//!
//! A Reply is a status byte then: 0 the JSON of the response, 1 the JSON of openraft's
//! `RaftError` (the peer refused), 2 UTF-8 text (the peer cannot serve the group now).

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{BasicNode, LogId, SnapshotMeta, Vote};
use serde::{Deserialize, Serialize};

use crate::entry_codec;
use crate::types::{NodeId, TypeConfig};

/// The longest group name on the wire.
pub const GROUP_MAX: usize = 255;

#[derive(Debug, thiserror::Error)]
#[error("a malformed Raft frame body: {0}")]
pub struct DecodeError(pub String);

fn bad(what: impl Into<String>) -> DecodeError {
    DecodeError(what.into())
}

/// Reads a body front to back; every take is checked against what remains.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        if n > self.rest.len() {
            return Err(bad(format!(
                "{what} of {n} bytes, only {} remain",
                self.rest.len()
            )));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u16(&mut self, what: &str) -> Result<u16, DecodeError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64, DecodeError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_le_bytes(a))
    }

    fn sized(&mut self, what: &str) -> Result<&'a [u8], DecodeError> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }
}

fn json<T: for<'de> Deserialize<'de>>(bytes: &[u8], what: &str) -> Result<T, DecodeError> {
    serde_json::from_slice(bytes).map_err(|e| bad(format!("{what}: {e}")))
}

fn put_group(out: &mut Vec<u8>, group: &str) -> Result<(), DecodeError> {
    if group.len() > GROUP_MAX {
        return Err(bad(format!("a group name of {} bytes", group.len())));
    }
    out.extend_from_slice(&(group.len() as u16).to_le_bytes());
    out.extend_from_slice(group.as_bytes());
    Ok(())
}

fn put_sized(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), DecodeError> {
    let n = u32::try_from(bytes.len()).map_err(|_| bad("a field over 4 GiB"))?;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(bytes);
    Ok(())
}

fn to_json<T: Serialize>(v: &T) -> Result<Vec<u8>, DecodeError> {
    serde_json::to_vec(v).map_err(|e| bad(format!("cannot encode: {e}")))
}

/// Splits the group name off a request body.
pub fn group_of(body: &[u8]) -> Result<(&str, &[u8]), DecodeError> {
    let mut r = Reader { rest: body };
    let n = r.u16("group length")? as usize;
    if n > GROUP_MAX {
        return Err(bad(format!("a group name of {n} bytes")));
    }
    let name = std::str::from_utf8(r.take(n, "group")?).map_err(|_| bad("group not UTF-8"))?;
    Ok((name, r.rest))
}

#[derive(Serialize, Deserialize)]
struct AppendHead {
    vote: Vote<NodeId>,
    prev_log_id: Option<LogId<NodeId>>,
    leader_commit: Option<LogId<NodeId>>,
}

/// Bytes an entry costs besides its payload: index, term, length.
pub const ENTRY_HEAD: usize = 20;

/// The length `encode_append` would give, from the payload lengths, encoding nothing: the
/// client checks it against the peers' append budget before building the body (review s14 F4).
pub fn append_len(group: &str, rpc: &AppendEntriesRequest<TypeConfig>) -> Result<u64, DecodeError> {
    let head = AppendHead {
        vote: rpc.vote,
        prev_log_id: rpc.prev_log_id,
        leader_commit: rpc.leader_commit,
    };
    let mut len = (2 + group.len() + 4 + to_json(&head)?.len() + 4) as u64;
    for e in &rpc.entries {
        let payload = entry_codec::encoded_len(e).map_err(|e| bad(e.to_string()))?;
        len = len.saturating_add((ENTRY_HEAD + payload) as u64);
    }
    Ok(len)
}

pub fn encode_append(
    group: &str,
    rpc: &AppendEntriesRequest<TypeConfig>,
) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    put_group(&mut out, group)?;
    let head = AppendHead {
        vote: rpc.vote,
        prev_log_id: rpc.prev_log_id,
        leader_commit: rpc.leader_commit,
    };
    put_sized(&mut out, &to_json(&head)?)?;
    let count = u32::try_from(rpc.entries.len()).map_err(|_| bad("too many entries"))?;
    out.extend_from_slice(&count.to_le_bytes());
    for e in &rpc.entries {
        let payload = entry_codec::encode(e).map_err(|e| bad(e.to_string()))?;
        out.extend_from_slice(&e.log_id.index.to_le_bytes());
        out.extend_from_slice(&e.log_id.leader_id.term.to_le_bytes());
        put_sized(&mut out, &payload)?;
    }
    Ok(out)
}

/// An append after its group name.
pub fn decode_append(body: &[u8]) -> Result<AppendEntriesRequest<TypeConfig>, DecodeError> {
    let mut r = Reader { rest: body };
    let head: AppendHead = json(r.sized("append header")?, "append header")?;
    let count = r.u32("entry count")? as usize;
    if count > r.rest.len() / ENTRY_HEAD {
        return Err(bad(format!("{count} entries in {} bytes", r.rest.len())));
    }
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let index = r.u64("entry index")?;
        let term = r.u64("entry term")?;
        let payload = r.sized("entry payload")?.to_vec();
        entries.push(entry_codec::decode(index, term, payload).map_err(|e| bad(e.to_string()))?);
    }
    if !r.rest.is_empty() {
        return Err(bad(format!("{} bytes after the entries", r.rest.len())));
    }
    Ok(AppendEntriesRequest {
        vote: head.vote,
        prev_log_id: head.prev_log_id,
        entries,
        leader_commit: head.leader_commit,
    })
}

pub fn encode_vote(group: &str, rpc: &VoteRequest<NodeId>) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    put_group(&mut out, group)?;
    out.extend_from_slice(&to_json(rpc)?);
    Ok(out)
}

pub fn decode_vote(body: &[u8]) -> Result<VoteRequest<NodeId>, DecodeError> {
    json(body, "vote")
}

/// An "elect now" request: the sender leads `group` in `term` and asks the receiver to
/// campaign at once.
pub fn encode_elect(group: &str, term: u64) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    put_group(&mut out, group)?;
    out.extend_from_slice(&term.to_le_bytes());
    Ok(out)
}

/// The term of an "elect now" request: exactly 8 bytes after the group, a term above 0 (no
/// node leads in term 0).
pub fn decode_elect(body: &[u8]) -> Result<u64, DecodeError> {
    let mut r = Reader { rest: body };
    let term = r.u64("elect term")?;
    if !r.rest.is_empty() {
        return Err(bad(format!(
            "{} bytes after an elect request's term",
            r.rest.len()
        )));
    }
    if term == 0 {
        return Err(bad("an elect request for term 0"));
    }
    Ok(term)
}

/// A "commit read" request for `group`: the group's name and nothing else.
pub fn encode_commit_read(group: &str) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    put_group(&mut out, group)?;
    Ok(out)
}

/// A "commit read" request after its group: nothing may follow the name.
pub fn decode_commit_read(body: &[u8]) -> Result<(), DecodeError> {
    if body.is_empty() {
        Ok(())
    } else {
        Err(bad(format!(
            "{} bytes after a commit read's group",
            body.len()
        )))
    }
}

/// The answer to a "commit read" (`commit_read`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommitRead {
    /// The answering node leads the group, confirmed by a majority in its term after the
    /// request arrived (openraft's `get_read_log_id`), and every entry committed before
    /// then lies at or below this index.
    Committed(u64),
    /// The answering node does not lead; the leader it knows, if any.
    NotLeader(Option<LeaderAt>),
}

/// The leader a follower names, with its cluster address from the follower's membership: the
/// asker may know neither (a leader added after the asker's `peers` were written, review s33
/// M-1). `addr` is None when the follower's membership does not name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderAt {
    pub id: u64,
    pub addr: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct SnapshotHead {
    vote: Vote<NodeId>,
    meta: SnapshotMeta<NodeId, BasicNode>,
    offset: u64,
    done: bool,
}

pub fn encode_snapshot(
    group: &str,
    rpc: &InstallSnapshotRequest<TypeConfig>,
) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    put_group(&mut out, group)?;
    let head = SnapshotHead {
        vote: rpc.vote,
        meta: rpc.meta.clone(),
        offset: rpc.offset,
        done: rpc.done,
    };
    put_sized(&mut out, &to_json(&head)?)?;
    out.extend_from_slice(&rpc.data);
    Ok(out)
}

pub fn decode_snapshot(body: &[u8]) -> Result<InstallSnapshotRequest<TypeConfig>, DecodeError> {
    let mut r = Reader { rest: body };
    let head: SnapshotHead = json(r.sized("snapshot header")?, "snapshot header")?;
    Ok(InstallSnapshotRequest {
        vote: head.vote,
        meta: head.meta,
        offset: head.offset,
        data: r.rest.to_vec(),
        done: head.done,
    })
}

const OK: u8 = 0;
const REFUSED: u8 = 1;
const UNAVAILABLE: u8 = 2;
/// A vote request refused because the candidate is not a member (review s21 membership M6):
/// the candidate stops calling elections.
const NOT_MEMBER: u8 = 3;

/// The reply to a request the peer's Raft answered, with its answer or its error.
pub fn encode_reply<T: Serialize, E: Serialize>(r: &Result<T, E>) -> Vec<u8> {
    let (status, body) = match r {
        Ok(v) => (OK, serde_json::to_vec(v)),
        Err(e) => (REFUSED, serde_json::to_vec(e)),
    };
    match body {
        Ok(body) => {
            let mut out = Vec::with_capacity(1 + body.len());
            out.push(status);
            out.extend_from_slice(&body);
            out
        }
        Err(e) => encode_unavailable(&format!("the answer did not encode: {e}")),
    }
}

/// The reply when this node cannot answer for the group (not hosted here, shutting down).
pub fn encode_unavailable(why: &str) -> Vec<u8> {
    let mut out = vec![UNAVAILABLE];
    out.extend_from_slice(why.as_bytes());
    out
}

/// The reply to a vote request from a candidate this node's membership does not name.
pub fn encode_not_member(why: &str) -> Vec<u8> {
    let mut out = vec![NOT_MEMBER];
    out.extend_from_slice(why.as_bytes());
    out
}

/// What a reply said.
#[derive(Debug)]
pub enum Reply<T, E> {
    Ok(T),
    Refused(E),
    Unavailable(String),
    NotMember(String),
}

pub fn decode_reply<T, E>(body: &[u8]) -> Result<Reply<T, E>, DecodeError>
where
    T: for<'de> Deserialize<'de>,
    E: for<'de> Deserialize<'de>,
{
    let (status, rest) = body.split_first().ok_or_else(|| bad("an empty reply"))?;
    match *status {
        OK => Ok(Reply::Ok(json(rest, "reply")?)),
        REFUSED => Ok(Reply::Refused(json(rest, "refusal")?)),
        UNAVAILABLE => Ok(Reply::Unavailable(
            String::from_utf8_lossy(rest).into_owned(),
        )),
        NOT_MEMBER => Ok(Reply::NotMember(String::from_utf8_lossy(rest).into_owned())),
        s => Err(bad(format!("reply status {s}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::log_id;
    use openraft::{CommittedLeaderId, EntryPayload, Membership};
    use std::collections::BTreeSet;

    /// Review s28 M-3: a commit read is its group and nothing after it; its answer round-trips
    /// and a truncated or garbled one is an error, not a guess.
    #[test]
    fn a_commit_read_is_its_group_alone_and_its_answer_round_trips() {
        let body = encode_commit_read("default").unwrap();
        let (group, rest) = group_of(&body).unwrap();
        assert_eq!(group, "default");
        decode_commit_read(rest).unwrap();
        assert!(decode_commit_read(b"x").is_err(), "bytes after the group");
        assert!(
            group_of(&body[..body.len() - 1]).is_err(),
            "a truncated group"
        );
        assert!(group_of(&body[..1]).is_err(), "a truncated length");
        assert!(encode_commit_read(&"g".repeat(GROUP_MAX + 1)).is_err());
        let mut long = vec![0xff, 0xff];
        long.extend_from_slice(&[b'g'; 300]);
        assert!(group_of(&long).is_err(), "a group over GROUP_MAX");
        for answer in [
            CommitRead::Committed(u64::MAX),
            CommitRead::Committed(0),
            CommitRead::NotLeader(Some(LeaderAt {
                id: 3,
                addr: Some("10.0.0.3:7000".into()),
            })),
            CommitRead::NotLeader(Some(LeaderAt { id: 3, addr: None })),
            CommitRead::NotLeader(None),
        ] {
            let reply = encode_reply(&Ok::<_, String>(answer.clone()));
            match decode_reply::<CommitRead, String>(&reply).unwrap() {
                Reply::Ok(got) => assert_eq!(got, answer),
                other => panic!("{other:?}"),
            }
            assert!(
                decode_reply::<CommitRead, String>(&reply[..reply.len() - 1]).is_err(),
                "a truncated answer"
            );
        }
        assert!(decode_reply::<CommitRead, String>(b"\0{\"Committed\":-1}").is_err());
        assert!(
            decode_reply::<CommitRead, String>(b"\0{\"Committed\":18446744073709551616}").is_err()
        );
    }

    #[test]
    fn an_elect_request_is_a_group_and_a_term_range_checked() {
        let body = encode_elect("default", 7).unwrap();
        let (group, rest) = group_of(&body).unwrap();
        assert_eq!((group, decode_elect(rest).unwrap()), ("default", 7));
        assert!(decode_elect(&rest[..7]).is_err(), "a short term");
        let mut long = rest.to_vec();
        long.push(0);
        assert!(decode_elect(&long).is_err(), "bytes after the term");
        assert!(decode_elect(&0u64.to_le_bytes()).is_err(), "term 0");
        assert!(encode_elect(&"g".repeat(GROUP_MAX + 1), 1).is_err());
    }

    fn append() -> AppendEntriesRequest<TypeConfig> {
        let m = Membership::new(vec![BTreeSet::from([1, 2, 3])], ());
        AppendEntriesRequest {
            vote: Vote::new_committed(3, 1),
            prev_log_id: Some(log_id(2, 9)),
            entries: vec![
                openraft::Entry {
                    log_id: log_id(3, 10),
                    payload: EntryPayload::Blank,
                },
                openraft::Entry {
                    log_id: log_id(3, 11),
                    payload: EntryPayload::Normal(vec![0, 255, 7]),
                },
                openraft::Entry {
                    log_id: LogId::new(CommittedLeaderId::new(3, 0), 12),
                    payload: EntryPayload::Membership(m),
                },
            ],
            leader_commit: Some(log_id(3, 10)),
        }
    }

    #[test]
    fn an_append_round_trips_with_raw_payloads() {
        let rpc = append();
        let body = encode_append("tenant-a", &rpc).unwrap();
        // The application bytes appear as themselves, not as a JSON array.
        assert!(body.windows(4).any(|w| w == [1, 0, 255, 7]));
        let (group, rest) = group_of(&body).unwrap();
        assert_eq!(group, "tenant-a");
        let back = decode_append(rest).unwrap();
        assert_eq!(format!("{back:?}"), format!("{rpc:?}"));
    }

    #[test]
    fn every_truncation_of_an_append_fails_cleanly() {
        let body = encode_append("g", &append()).unwrap();
        let (_, rest) = group_of(&body).unwrap();
        for n in 0..rest.len() {
            assert!(decode_append(&rest[..n]).is_err(), "{n}");
        }
        let mut longer = rest.to_vec();
        longer.push(0);
        assert!(decode_append(&longer).is_err());
    }

    #[test]
    fn an_entry_count_beyond_the_bytes_is_refused_before_allocating() {
        let head = to_json(&AppendHead {
            vote: Vote::new(1, 1),
            prev_log_id: None,
            leader_commit: None,
        })
        .unwrap();
        let mut body = Vec::new();
        put_sized(&mut body, &head).unwrap();
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        let err = decode_append(&body).unwrap_err();
        assert!(err.0.contains("entries in"), "{err}");
        // An entry declaring more payload than remains.
        let mut body2 = Vec::new();
        put_sized(&mut body2, &head).unwrap();
        body2.extend_from_slice(&1u32.to_le_bytes());
        body2.extend_from_slice(&[0u8; 16]);
        body2.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_append(&body2).is_err());
    }

    #[test]
    fn a_snapshot_chunk_carries_its_data_raw() {
        let rpc = InstallSnapshotRequest::<TypeConfig> {
            vote: Vote::new_committed(2, 1),
            meta: SnapshotMeta::default(),
            offset: 4096,
            data: vec![9; 1000],
            done: true,
        };
        let body = encode_snapshot("g", &rpc).unwrap();
        assert!(body.len() < 1000 + 400, "{}", body.len());
        let (_, rest) = group_of(&body).unwrap();
        let back = decode_snapshot(rest).unwrap();
        assert_eq!(
            (back.offset, back.done, back.data),
            (4096, true, vec![9; 1000])
        );
    }

    #[test]
    fn a_group_name_and_a_reply_are_checked() {
        assert!(group_of(&[5, 0, b'a']).is_err());
        assert!(group_of(&[1, 0, 0xff]).is_err());
        assert!(put_group(&mut Vec::new(), &"x".repeat(GROUP_MAX + 1)).is_err());
        let ok: Result<u64, String> = Ok(7);
        assert!(matches!(
            decode_reply::<u64, String>(&encode_reply(&ok)).unwrap(),
            Reply::Ok(7)
        ));
        let no: Result<u64, String> = Err("no".into());
        assert!(matches!(
            decode_reply::<u64, String>(&encode_reply(&no)).unwrap(),
            Reply::Refused(s) if s == "no"
        ));
        assert!(matches!(
            decode_reply::<u64, String>(&encode_unavailable("gone")).unwrap(),
            Reply::Unavailable(s) if s == "gone"
        ));
        assert!(decode_reply::<u64, String>(&[]).is_err());
        assert!(decode_reply::<u64, String>(&[9]).is_err());
        assert!(decode_reply::<u64, String>(&[0, b'{']).is_err());
    }
}
