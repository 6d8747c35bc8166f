//! The Fetch request as this door reads it (v4..=v12): every count checked against the
//! bytes left before it is used.

use crate::fetch_sessions::session::Forgotten;
use crate::fetch_sessions::{FINAL_EPOCH, MAX_PARTITIONS, NO_SESSION};
use crate::wire::{Malformed, Reader};

/// Topic entries one request may list, and partitions (and topic entries) it may forget.
/// An entry is a few bytes on the wire but a name and a list on the heap; without a count
/// cap a frame of empty entries would decode to many times its size, outside the request
/// bytes accounting. A partition listed costs no more decoded than on the wire, so listed
/// partitions need no cap of their own. No Kafka client lists or forgets more than its
/// assignment, and a session holds at most [`MAX_PARTITIONS`].
pub const MAX_ENTRIES: usize = MAX_PARTITIONS;

/// Reserves one more batch of `n` against what is left of `cap`, before allocating.
fn take(left: &mut usize, n: usize, what: &'static str) -> Result<usize, Malformed> {
    *left = left.checked_sub(n).ok_or(Malformed(what))?;
    Ok(n)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartition {
    pub index: i32,
    pub offset: i64,
    pub max_bytes: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub max_bytes: i32,
    /// KIP-227 (v7+; before, a sessionless fetch: id 0, epoch -1).
    pub session_id: i32,
    pub session_epoch: i32,
    /// Isolation level 1: stop at the last stable offset, list aborted transactions.
    pub read_committed: bool,
    pub topics: Vec<(String, Vec<FetchPartition>)>,
    /// Partitions that leave the session (v7+).
    pub forgotten: Vec<Forgotten>,
}

pub fn decode(version: i16, r: &mut Reader) -> Result<FetchRequest, Malformed> {
    let _replica_id = r.i32()?;
    let max_wait_ms = r.i32()?;
    let min_bytes = r.i32()?;
    let max_bytes = r.i32()?;
    let read_committed = match r.i8()? {
        0 => false,
        1 => true,
        _ => return Err(Malformed("isolation level is 0 or 1")),
    };
    let (session_id, session_epoch) = if version >= 7 {
        (r.i32()?, r.i32()?)
    } else {
        (NO_SESSION, FINAL_EPOCH)
    };
    let mut topics = Vec::new();
    let mut entries_left = MAX_ENTRIES;
    let too_many = "too many topics in one fetch";
    for _ in 0..take(&mut entries_left, r.array_len()?.unwrap_or(0), too_many)? {
        let name = r.string()?;
        let mut parts = Vec::new();
        for _ in 0..r.array_len()?.unwrap_or(0) {
            let index = r.i32()?;
            if version >= 9 {
                let _current_leader_epoch = r.i32()?;
            }
            let offset = r.i64()?;
            if version >= 12 {
                let _last_fetched_epoch = r.i32()?;
            }
            if version >= 5 {
                let _log_start_offset = r.i64()?;
            }
            let max_bytes = r.i32()?;
            r.skip_tags()?;
            parts.push(FetchPartition {
                index,
                offset,
                max_bytes,
            });
        }
        r.skip_tags()?;
        topics.push((name, parts));
    }
    let mut forgotten = Vec::new();
    if version >= 7 {
        let (mut entries_left, mut parts_left) = (MAX_ENTRIES, MAX_PARTITIONS);
        let too_many = "too many forgotten topics in one fetch";
        for _ in 0..take(&mut entries_left, r.array_len()?.unwrap_or(0), too_many)? {
            let topic = r.string()?;
            let mut indexes = Vec::new();
            let n = r.array_len()?.unwrap_or(0);
            for _ in 0..take(
                &mut parts_left,
                n,
                "too many forgotten partitions in one fetch",
            )? {
                indexes.push(r.i32()?);
            }
            r.skip_tags()?;
            forgotten.push((topic, indexes));
        }
    }
    if version >= 11 {
        let _rack_id = r.string()?;
    }
    r.skip_tags()?;
    Ok(FetchRequest {
        max_wait_ms,
        min_bytes,
        max_bytes,
        session_id,
        session_epoch,
        read_committed,
        topics,
        forgotten,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, Bytes, BytesMut};

    /// A v12 (flexible) Fetch body with `topics` empty topic entries and `forgotten` empty
    /// forgotten entries, each 3 bytes on the wire (a compact name, array and tags).
    fn v12(topics: usize, forgotten: usize, forgotten_parts: usize) -> Reader {
        let mut b = BytesMut::new();
        b.put_i32(-1); // replica
        b.put_i32(0); // max wait
        b.put_i32(1); // min bytes
        b.put_i32(1 << 20); // max bytes
        b.put_i8(0); // isolation
        b.put_i32(0); // session id
        b.put_i32(-1); // epoch
        let uvarint = |b: &mut BytesMut, mut n: usize| loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                b.put_u8(byte);
                break;
            }
            b.put_u8(byte | 0x80);
        };
        uvarint(&mut b, topics + 1);
        for _ in 0..topics {
            b.put_slice(&[1, 1, 0]);
        }
        uvarint(&mut b, forgotten + 1);
        for i in 0..forgotten {
            b.put_u8(1); // empty name
            let n = if i == 0 { forgotten_parts } else { 0 };
            uvarint(&mut b, n + 1);
            for p in 0..n {
                b.put_i32(p as i32);
            }
            b.put_u8(0);
        }
        b.put_u8(1); // rack
        b.put_u8(0); // tags
        Reader::new(Bytes::from(b), true)
    }

    #[test]
    fn entry_counts_are_capped_before_they_are_decoded() {
        let at_cap = decode(12, &mut v12(MAX_ENTRIES, MAX_ENTRIES, MAX_PARTITIONS));
        let at_cap = at_cap.map(|r| (r.topics.len(), r.forgotten.len()));
        assert_eq!(at_cap, Ok((MAX_ENTRIES, MAX_ENTRIES)));
        for (t, f, p) in [
            (MAX_ENTRIES + 1, 0, 0),
            (0, MAX_ENTRIES + 1, 0),
            (0, 1, MAX_PARTITIONS + 1),
            (0, 1_000_000, 0),
        ] {
            assert!(decode(12, &mut v12(t, f, p)).is_err(), "{t} {f} {p}");
        }
    }
}
