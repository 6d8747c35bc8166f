//! The 56-byte header of a Raft snapshot stream, encoder and decoder side by side.
//! docs/storage-format.md ("Raft snapshot") gives its bytes.

use crate::format::{le_u32, le_u64, record_len, HIGHEST_INDEX};

pub const SNAPSHOT_HEADER_LEN: usize = 56;
const MAGIC: [u8; 4] = *b"QMQS";
const VERSION: u8 = 1;
/// Bytes covered by the header's own CRC32C (everything before it).
const COVERED: usize = 52;
/// Neither the state nor the records may claim more: a header past it is corrupt, refused
/// before the free-space check could even be asked.
pub const SNAPSHOT_PART_CAP: u64 = 1 << 40;

/// What a snapshot stream holds: the checkpoint state as of `applied_index` followed by the
/// records `first_record..=applied_index` (`first_record == applied_index + 1` when none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotHeader {
    pub applied_index: u64,
    pub applied_term: u64,
    pub first_record: u64,
    pub state_len: u64,
    /// Byte size of the records, each in the segment record encoding.
    pub records_len: u64,
    /// CRC32C of the state bytes.
    pub state_crc: u32,
}

impl SnapshotHeader {
    /// How many records follow the state. Only meaningful for a header that decoded (the
    /// arithmetic saturates on one that did not).
    pub fn record_count(&self) -> u64 {
        self.applied_index
            .saturating_add(1)
            .saturating_sub(self.first_record)
    }

    /// Header, state and records: the whole stream's length.
    pub fn stream_len(&self) -> u64 {
        (SNAPSHOT_HEADER_LEN as u64)
            .saturating_add(self.state_len)
            .saturating_add(self.records_len)
    }

    /// The disk an install needs above what the node holds: the incoming file (S + R), the
    /// new log (R) and the state in both checkpoint slots (2S). Within the caps of a decoded
    /// header it cannot saturate.
    pub fn install_peak_bytes(&self) -> u64 {
        self.state_len
            .saturating_mul(3)
            .saturating_add(self.records_len.saturating_mul(2))
    }

    pub fn encode(&self) -> [u8; SNAPSHOT_HEADER_LEN] {
        let mut b = [0u8; SNAPSHOT_HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[8..16].copy_from_slice(&self.applied_index.to_le_bytes());
        b[16..24].copy_from_slice(&self.applied_term.to_le_bytes());
        b[24..32].copy_from_slice(&self.first_record.to_le_bytes());
        b[32..40].copy_from_slice(&self.state_len.to_le_bytes());
        b[40..48].copy_from_slice(&self.records_len.to_le_bytes());
        b[48..52].copy_from_slice(&self.state_crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[..COVERED]);
        b[52..56].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks everything a header alone can show; `max_record_bytes` (what the
    /// records' sizes are judged against) is the receiver's to apply.
    pub fn decode(b: &[u8]) -> Result<SnapshotHeader, String> {
        if b.len() != SNAPSHOT_HEADER_LEN {
            return Err(format!(
                "header is {} bytes, expected {SNAPSHOT_HEADER_LEN}",
                b.len()
            ));
        }
        if b[0..4] != MAGIC {
            return Err("header magic is not QMQS".into());
        }
        if b[4] != VERSION {
            return Err(format!(
                "header version {} is not one this build reads ({VERSION})",
                b[4]
            ));
        }
        if b[5..8] != [0, 0, 0] {
            return Err("header reserved bytes are not zero".into());
        }
        let stored = le_u32(&b[52..]);
        let actual = crc32c::crc32c(&b[..COVERED]);
        if stored != actual {
            return Err(format!(
                "header crc32c {actual:#010x} does not match the stored {stored:#010x}"
            ));
        }
        let h = SnapshotHeader {
            applied_index: le_u64(&b[8..]),
            applied_term: le_u64(&b[16..]),
            first_record: le_u64(&b[24..]),
            state_len: le_u64(&b[32..]),
            records_len: le_u64(&b[40..]),
            state_crc: le_u32(&b[48..]),
        };
        h.check()?;
        Ok(h)
    }

    fn check(&self) -> Result<(), String> {
        if self.applied_index > HIGHEST_INDEX {
            return Err(format!(
                "applied index {} is above the highest a log holds ({HIGHEST_INDEX})",
                self.applied_index
            ));
        }
        if self.first_record > self.applied_index + 1 {
            return Err(format!(
                "first record {} is past applied index {} + 1",
                self.first_record, self.applied_index
            ));
        }
        for (what, len) in [("state", self.state_len), ("records", self.records_len)] {
            if len > SNAPSHOT_PART_CAP {
                return Err(format!(
                    "{what} length {len} is above the cap of {SNAPSHOT_PART_CAP} bytes"
                ));
            }
        }
        // Every record is at least its fixed fields: the count bounds the length from below.
        let least = self.record_count().checked_mul(record_len(0));
        if least.is_none_or(|least| self.records_len < least) {
            return Err(format!(
                "records length {} cannot hold the {} records {}..={}",
                self.records_len,
                self.record_count(),
                self.first_record,
                self.applied_index
            ));
        }
        if self.record_count() == 0 && self.records_len != 0 {
            return Err(format!(
                "records length {} with no record to carry",
                self.records_len
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SnapshotHeader {
        SnapshotHeader {
            applied_index: 10,
            applied_term: 3,
            first_record: 8,
            state_len: 100,
            records_len: 3 * record_len(5),
            state_crc: 0xdead_beef,
        }
    }

    #[test]
    fn round_trips() {
        let h = sample();
        assert_eq!(SnapshotHeader::decode(&h.encode()), Ok(h));
        assert_eq!(h.record_count(), 3);
        assert_eq!(h.install_peak_bytes(), 300 + 2 * h.records_len);
        let wild = SnapshotHeader {
            applied_index: u64::MAX,
            state_len: u64::MAX,
            ..h
        };
        assert_eq!(
            (
                wild.record_count(),
                wild.stream_len(),
                wild.install_peak_bytes()
            ),
            (u64::MAX - 8, u64::MAX, u64::MAX)
        );
        let none = SnapshotHeader {
            first_record: 11,
            records_len: 0,
            ..h
        };
        assert_eq!(SnapshotHeader::decode(&none.encode()), Ok(none));
    }

    #[test]
    fn a_flipped_bit_anywhere_is_refused() {
        let b = sample().encode();
        for byte in 0..SNAPSHOT_HEADER_LEN {
            let mut bad = b;
            bad[byte] ^= 0x10;
            assert!(SnapshotHeader::decode(&bad).is_err(), "byte {byte}");
        }
    }

    /// A header whose own CRC is right but whose fields break a rule.
    fn refused(h: SnapshotHeader) -> String {
        SnapshotHeader::decode(&h.encode()).unwrap_err()
    }

    #[test]
    fn each_rule_is_enforced() {
        let h = sample();
        assert!(refused(SnapshotHeader {
            state_len: SNAPSHOT_PART_CAP + 1,
            ..h
        })
        .contains("state length"));
        assert!(refused(SnapshotHeader {
            records_len: SNAPSHOT_PART_CAP + 1,
            ..h
        })
        .contains("records length"));
        assert!(refused(SnapshotHeader {
            first_record: 12,
            ..h
        })
        .contains("past applied index"));
        assert!(refused(SnapshotHeader {
            applied_index: u64::MAX,
            ..h
        })
        .contains("highest"));
        assert!(refused(SnapshotHeader {
            records_len: 3 * record_len(0) - 1,
            ..h
        })
        .contains("cannot hold"));
        assert!(refused(SnapshotHeader {
            first_record: 11,
            ..h
        })
        .contains("no record"));
        assert!(refused(SnapshotHeader {
            first_record: 0,
            applied_index: HIGHEST_INDEX,
            ..h
        })
        .contains("cannot hold"));
    }

    #[test]
    fn wrong_size_magic_version_and_reserved_are_refused() {
        let b = sample().encode();
        assert!(SnapshotHeader::decode(&b[..55]).unwrap_err().contains("55"));
        let recrc = |mut x: [u8; SNAPSHOT_HEADER_LEN]| {
            let crc = crc32c::crc32c(&x[..COVERED]);
            x[52..].copy_from_slice(&crc.to_le_bytes());
            SnapshotHeader::decode(&x).unwrap_err()
        };
        let mut x = b;
        x[0] = b'X';
        assert!(recrc(x).contains("magic"));
        x = b;
        x[4] = 2;
        assert!(recrc(x).contains("version 2"));
        x = b;
        x[6] = 1;
        assert!(recrc(x).contains("reserved"));
    }
}
