//! One checkpoint generation held open for reading piece by piece, for a snapshot stream:
//! the state is never loaded whole (docs/storage-format.md "Never whole in memory").

use redb::{ReadOnlyTable, ReadableDatabase};

use super::checkpoint::CheckpointHead;
use super::generations::SLOTS;
use super::{StateStore, CHECKPOINT_HEAD};
use crate::StorageError;

/// A generation as of one redb read transaction, which the table keeps open: a later save
/// over its slot does not change what this reads.
pub struct StateView {
    pub applied_index: u64,
    pub applied_term: u64,
    pub state_len: u64,
    pub state_crc: u32,
    chunks: ReadOnlyTable<u32, &'static [u8]>,
    /// Where each chunk starts in the state: one u64 per chunk (per MiB of state).
    starts: Vec<u64>,
}

impl StateStore {
    /// The generation whose applied index is `applied_index`, verified whole (every chunk
    /// read once, its length and CRC32C checked against the header) so that a damaged one is
    /// never streamed.
    pub fn state_view(&self, applied_index: u64) -> Result<StateView, StorageError> {
        let op = "open the checkpoint for a snapshot";
        let txn = self.db.begin_read().map_err(StorageError::state(op))?;
        let heads = txn
            .open_table(CHECKPOINT_HEAD)
            .map_err(StorageError::state(op))?;
        for slot in &SLOTS {
            let Some(raw) = heads.get(slot.head_key).map_err(StorageError::state(op))? else {
                continue;
            };
            let Ok(head) = CheckpointHead::decode(raw.value()) else {
                continue;
            };
            if head.applied_index != applied_index {
                continue;
            }
            let chunks = txn
                .open_table(slot.chunks)
                .map_err(StorageError::state(op))?;
            let (mut total, mut crc) = (0u64, 0u32);
            let mut starts = Vec::new();
            for i in 0..head.chunk_count {
                let chunk = chunks
                    .get(i)
                    .map_err(StorageError::state(op))?
                    .ok_or_else(|| StorageError::CorruptCheckpoint {
                        reason: format!("chunk {i} of {} is missing", head.chunk_count),
                    })?;
                starts.push(total);
                total += chunk.value().len() as u64;
                crc = crc32c::crc32c_append(crc, chunk.value());
            }
            if total != head.state_len || crc != head.crc {
                return Err(StorageError::CorruptCheckpoint {
                    reason: format!(
                        "the generation at index {applied_index} holds {total} bytes with crc32c \
                         {crc:#010x}; its header says {} bytes, {:#010x}",
                        head.state_len, head.crc
                    ),
                });
            }
            return Ok(StateView {
                applied_index,
                applied_term: head.applied_term,
                state_len: head.state_len,
                state_crc: head.crc,
                chunks,
                starts,
            });
        }
        Err(StorageError::SnapshotUnavailable {
            reason: format!("no checkpoint generation is at applied index {applied_index}"),
        })
    }
}

impl StateView {
    /// Copies state bytes from `offset` into `buf`; the count copied (0 at the end).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        let op = "read the checkpoint for a snapshot";
        let mut done = 0;
        let mut at = offset;
        while done < buf.len() && at < self.state_len {
            let i = self.starts.partition_point(|&s| s <= at) - 1;
            let chunk = self
                .chunks
                .get(i as u32)
                .map_err(StorageError::state(op))?
                .ok_or_else(|| StorageError::CorruptCheckpoint {
                    reason: format!("chunk {i} went missing under a read transaction"),
                })?;
            let bytes = chunk.value();
            let from = (at - self.starts[i]) as usize;
            let n = (bytes.len() - from).min(buf.len() - done);
            if n == 0 {
                return Err(StorageError::CorruptCheckpoint {
                    reason: format!("chunk {i} ends before byte {at} its place promised"),
                });
            }
            buf[done..done + n].copy_from_slice(&bytes[from..from + n]);
            done += n;
            at += n as u64;
        }
        Ok(done)
    }
}
