//! The row a snapshot needs beside a checkpoint generation's header: its run floor `F` (the
//! first record a snapshot of it carries) and its save number, written in the same redb
//! transaction as the header (docs/storage-format.md "Raft snapshot", "Which checkpoint").
//! A generation without a row that matches its header cannot be streamed: builds before this
//! row, and saves that name no floor, leave none, and an old row is never read for a new head.

use redb::TableDefinition;

use crate::format::{le_u32, le_u64};

/// Keyed by the slot's `head_key`, like `checkpoint_head`.
pub(crate) const CHECKPOINT_FLOOR: TableDefinition<&str, &[u8]> =
    TableDefinition::new("checkpoint_floor");

const VERSION: u8 = 1;
pub(crate) const FLOOR_ROW_LEN: usize = 32;
/// Bytes covered by the row's own CRC32C.
const COVERED: usize = 28;

/// version u8 | 3 reserved zero bytes | first_record u64 | save number u64 |
/// crc32c of the header row it belongs to u32 | crc32c of bytes 0..28 u32, little-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FloorRow {
    /// `F`: records `F..=A` go with a snapshot of this generation (`A + 1`: none).
    pub first_record: u64,
    /// One more than the highest of any row when it was saved: which of two generations at
    /// one applied index is newer, and whether a slot was saved over since it was read.
    pub save_number: u64,
    /// Binds the row to the exact header bytes saved with it.
    pub head_crc: u32,
}

impl FloorRow {
    pub fn encode(&self) -> [u8; FLOOR_ROW_LEN] {
        let mut b = [0u8; FLOOR_ROW_LEN];
        b[0] = VERSION;
        b[4..12].copy_from_slice(&self.first_record.to_le_bytes());
        b[12..20].copy_from_slice(&self.save_number.to_le_bytes());
        b[20..24].copy_from_slice(&self.head_crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[..COVERED]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The row, if it is one this build wrote whole; None for anything else (never guessed).
    pub fn decode(b: &[u8]) -> Option<FloorRow> {
        if b.len() != FLOOR_ROW_LEN || b[0] != VERSION || b[1..4] != [0, 0, 0] {
            return None;
        }
        if b[24..28] != [0, 0, 0, 0] || le_u32(&b[28..]) != crc32c::crc32c(&b[..COVERED]) {
            return None;
        }
        Some(FloorRow {
            first_record: le_u64(&b[4..]),
            save_number: le_u64(&b[12..]),
            head_crc: le_u32(&b[20..]),
        })
    }

    /// The row when it belongs to the header bytes `head`.
    pub fn of_head(raw: &[u8], head: &[u8]) -> Option<FloorRow> {
        FloorRow::decode(raw).filter(|r| r.head_crc == crc32c::crc32c(head))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_round_trips_and_any_flipped_bit_is_no_row() {
        let r = FloorRow {
            first_record: 17,
            save_number: 3,
            head_crc: crc32c::crc32c(b"head"),
        };
        let b = r.encode();
        assert_eq!(FloorRow::decode(&b), Some(r));
        assert_eq!(FloorRow::of_head(&b, b"head"), Some(r));
        assert_eq!(FloorRow::of_head(&b, b"other head"), None);
        for byte in 0..FLOOR_ROW_LEN {
            let mut bad = b;
            bad[byte] ^= 0x04;
            assert_eq!(FloorRow::decode(&bad), None, "byte {byte}");
        }
        assert_eq!(FloorRow::decode(&b[..31]), None);
    }
}
