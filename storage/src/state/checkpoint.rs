//! The checkpoint and the header row that describes its chunks. Reader and writer of the
//! header live here together; docs/storage-format.md ("State store (redb)") gives its bytes.

use crate::format::{le_u32, le_u64};
use crate::StorageError;

/// The engine's state as of `applied_index`; `state` is opaque here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub applied_index: u64,
    pub applied_term: u64,
    pub state: Vec<u8>,
}

/// The largest chunk a reader accepts (and what checkpoints were written in before chunks
/// were streamed).
pub(crate) const CHUNK_BYTES: usize = 8 * 1024 * 1024;
/// What a save writes: a chunk and its redb leaf header fit a 1 MiB page. An 8 MiB chunk took a
/// 16 MiB page (redb's pages are powers of two), held in memory until written out.
pub const WRITE_CHUNK_BYTES: usize = (1 << 20) - 4096;
/// Version 2 adds a CRC32C of the header itself: in version 1 a flipped bit in
/// `applied_index` or `applied_term` went unnoticed (the CRC covered only the state).
const HEAD_VERSION: u8 = 2;
const HEAD_LEN: usize = 40;
/// Version 1 headers are still read.
const HEAD_V1_LEN: usize = 36;

pub(crate) struct CheckpointHead {
    pub applied_index: u64,
    pub applied_term: u64,
    pub state_len: u64,
    pub chunk_count: u32,
    pub crc: u32,
}

fn corrupt(reason: String) -> StorageError {
    StorageError::CorruptCheckpoint { reason }
}

impl CheckpointHead {
    pub fn describe(cp: &Checkpoint) -> Result<CheckpointHead, StorageError> {
        let chunk_count = u32::try_from(cp.state.len().div_ceil(CHUNK_BYTES)).map_err(|_| {
            corrupt(format!(
                "a state of {} bytes needs more than u32::MAX chunks",
                cp.state.len()
            ))
        })?;
        Ok(CheckpointHead {
            applied_index: cp.applied_index,
            applied_term: cp.applied_term,
            state_len: cp.state.len() as u64,
            chunk_count,
            crc: crc32c::crc32c(&cp.state),
        })
    }

    /// version u8 | 3 reserved zero bytes | applied_index u64 | applied_term u64 |
    /// state_len u64 | chunk_count u32 | crc32c of the state u32 | crc32c of bytes 0..36 u32,
    /// all little-endian.
    pub fn encode(&self) -> [u8; HEAD_LEN] {
        let mut b = [0u8; HEAD_LEN];
        b[0] = HEAD_VERSION;
        b[4..12].copy_from_slice(&self.applied_index.to_le_bytes());
        b[12..20].copy_from_slice(&self.applied_term.to_le_bytes());
        b[20..28].copy_from_slice(&self.state_len.to_le_bytes());
        b[28..32].copy_from_slice(&self.chunk_count.to_le_bytes());
        b[32..36].copy_from_slice(&self.crc.to_le_bytes());
        let head_crc = crc32c::crc32c(&b[..HEAD_V1_LEN]);
        b[36..40].copy_from_slice(&head_crc.to_le_bytes());
        b
    }

    /// Whether raw header bytes are of the version whose `applied_term` its own CRC covers:
    /// only such a generation is streamed as a snapshot.
    pub fn is_current_version(b: &[u8]) -> bool {
        b.first() == Some(&HEAD_VERSION)
    }

    pub fn decode(b: &[u8]) -> Result<CheckpointHead, StorageError> {
        let expected_len = match b.first() {
            Some(1) => HEAD_V1_LEN,
            Some(&HEAD_VERSION) => HEAD_LEN,
            Some(v) => {
                return Err(corrupt(format!(
                    "header version {v} is not one this build reads (1 or {HEAD_VERSION})"
                )))
            }
            None => return Err(corrupt("header is empty".into())),
        };
        if b.len() != expected_len {
            return Err(corrupt(format!(
                "header is {} bytes, expected {expected_len}",
                b.len()
            )));
        }
        if b[1..4] != [0, 0, 0] {
            return Err(corrupt("header reserved bytes are not zero".into()));
        }
        if expected_len == HEAD_LEN {
            let stored = le_u32(&b[36..]);
            let actual = crc32c::crc32c(&b[..HEAD_V1_LEN]);
            if stored != actual {
                return Err(corrupt(format!(
                    "header crc32c {actual:#010x} does not match the stored {stored:#010x}"
                )));
            }
        }
        Ok(CheckpointHead {
            applied_index: le_u64(&b[4..]),
            applied_term: le_u64(&b[12..]),
            state_len: le_u64(&b[20..]),
            chunk_count: le_u32(&b[28..]),
            crc: le_u32(&b[32..]),
        })
    }

    /// The header is checked against the chunk count before its length is trusted for an
    /// allocation.
    pub fn checked_capacity(&self) -> Result<usize, StorageError> {
        let max = u64::from(self.chunk_count) * CHUNK_BYTES as u64;
        if self.state_len > max {
            return Err(corrupt(format!(
                "header claims {} bytes in {} chunks of at most {CHUNK_BYTES}",
                self.state_len, self.chunk_count
            )));
        }
        usize::try_from(self.state_len)
            .map_err(|_| corrupt(format!("{} bytes do not fit in memory", self.state_len)))
    }

    pub fn verify(&self, state: &[u8]) -> Result<(), StorageError> {
        self.verify_sum(state.len() as u64, crc32c::crc32c(state))
    }

    /// `verify` of a state read a chunk at a time: its length and CRC32C.
    pub fn verify_sum(&self, len: u64, crc: u32) -> Result<(), StorageError> {
        if len != self.state_len {
            return Err(corrupt(format!(
                "chunks hold {len} bytes, header says {}",
                self.state_len
            )));
        }
        if crc != self.crc {
            return Err(corrupt(format!(
                "crc32c {crc:#010x} does not match the stored {:#010x}",
                self.crc
            )));
        }
        Ok(())
    }
}
