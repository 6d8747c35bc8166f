//! The Fetch request as this door reads it (v4..=v12): every count checked against the
//! bytes left before it is used.

use crate::fetch_sessions::session::Forgotten;
use crate::fetch_sessions::{FINAL_EPOCH, NO_SESSION};
use crate::wire::{Malformed, Reader};

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
    pub topics: Vec<(String, Vec<FetchPartition>)>,
    /// Partitions that leave the session (v7+).
    pub forgotten: Vec<Forgotten>,
}

pub fn decode(version: i16, r: &mut Reader) -> Result<FetchRequest, Malformed> {
    let _replica_id = r.i32()?;
    let max_wait_ms = r.i32()?;
    let min_bytes = r.i32()?;
    let max_bytes = r.i32()?;
    let _isolation_level = r.i8()?;
    let (session_id, session_epoch) = if version >= 7 {
        (r.i32()?, r.i32()?)
    } else {
        (NO_SESSION, FINAL_EPOCH)
    };
    let mut topics = Vec::new();
    for _ in 0..r.array_len()?.unwrap_or(0) {
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
        for _ in 0..r.array_len()?.unwrap_or(0) {
            let topic = r.string()?;
            let mut indexes = Vec::new();
            for _ in 0..r.array_len()?.unwrap_or(0) {
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
        topics,
        forgotten,
    })
}
