//! Reads of the engine's "fetch by offset" for the Kafka door: one bus call per chunk of
//! partitions, every number the client sent bounded first.

use queenmq_protocol::fetch::*;
use queenmq_protocol::{Command, Outcome, QueenError, ReadAnswer, ReadReq};

use crate::{topics, Door};

/// Reads `entries` (in chunks the engine takes) under one byte budget for the whole call.
/// The answer is index-aligned with `entries`.
pub async fn fetch(
    door: &Door,
    entries: Vec<FetchEntry>,
    max_bytes: usize,
    read_committed: bool,
) -> Result<Vec<FetchedEntry>, QueenError> {
    let mut left = max_bytes.clamp(1, MAX_FETCH_BYTES);
    let mut out = Vec::with_capacity(entries.len());
    let mut delivered = false;
    for chunk in entries.chunks(MAX_FETCH_ENTRIES) {
        // Once the budget is spent (after the first record), the rest answer their bounds
        // only: a chunk asked with a budget of one byte serves nothing but its first record.
        let req = FetchReq {
            entries: chunk.to_vec(),
            max_bytes: left.max(1),
            read_committed,
        };
        let answer = match door
            .bus
            .call(door.ctx.clone(), Command::Read(ReadReq::Fetch(req)))
            .await?
        {
            Outcome::Read(ReadAnswer::Fetch(a)) => a,
            other => return Err(topics::unexpected(&other)),
        };
        for mut e in answer.entries {
            if delivered && left == 0 {
                e.records.clear();
            }
            let spent: usize = e
                .records
                .iter()
                .map(|r| r.payload.len().saturating_add(FETCH_RECORD_OVERHEAD))
                .sum();
            delivered |= !e.records.is_empty();
            left = left.saturating_sub(spent);
            out.push(e);
        }
    }
    Ok(out)
}

pub async fn offsets(
    door: &Door,
    queries: Vec<OffsetQuery>,
) -> Result<Vec<OffsetFound>, QueenError> {
    match door
        .bus
        .call(
            door.ctx.clone(),
            Command::Read(ReadReq::ListOffsets(queries)),
        )
        .await?
    {
        Outcome::Read(ReadAnswer::Offsets(found)) => Ok(found),
        other => Err(topics::unexpected(&other)),
    }
}
