//! The header of a Raft snapshot stream (56 bytes in version 1; 72 in version 2, which
//! announces the ids part), encoder and decoder side by side. docs/storage-format.md ("Raft
//! snapshot", "The id files in the stream") gives its bytes.

use crate::format::{le_u32, le_u64, record_len, HIGHEST_INDEX};

use super::ids_part::{ENTRY_HEAD, MAX_IDS_FILES};

/// The version-1 header's length (no ids part).
pub const SNAPSHOT_HEADER_LEN: usize = 56;
/// The version-2 header's length: version 1's fields, then the ids part's size and count.
pub const SNAPSHOT_HEADER_V2_LEN: usize = 72;
const MAGIC: [u8; 4] = *b"QMQS";
/// Bytes covered by the version-1 header's own CRC32C (everything before it).
const COVERED: usize = 52;
/// Bytes covered by the version-2 header's CRC32C.
const COVERED_V2: usize = 68;
/// The least an id file takes: its header block.
const ID_FILE_MIN: u64 = 4096;
/// Neither the state nor the records may claim more: a header past it is corrupt, refused
/// before the free-space check could even be asked.
pub const SNAPSHOT_PART_CAP: u64 = 1 << 40;

/// What a snapshot stream holds: the checkpoint state as of `applied_index` followed by the
/// records `first_record..=applied_index` (`first_record == applied_index + 1` when none),
/// then, in version 2, the sender's id files (`ids_files` of them in `ids_len` bytes).
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
    /// Byte size of the ids part (0: none, a version-1 stream).
    pub ids_len: u64,
    /// Id files in the ids part (0: none).
    pub ids_files: u32,
}

/// The header length a stream whose byte 4 is `version` has; None for a version this build
/// does not read.
pub fn header_len_of(version: u8) -> Option<usize> {
    match version {
        1 => Some(SNAPSHOT_HEADER_LEN),
        2 => Some(SNAPSHOT_HEADER_V2_LEN),
        _ => None,
    }
}

impl SnapshotHeader {
    /// How many records follow the state. Only meaningful for a header that decoded (the
    /// arithmetic saturates on one that did not).
    pub fn record_count(&self) -> u64 {
        self.applied_index
            .saturating_add(1)
            .saturating_sub(self.first_record)
    }

    /// Version 2 exactly when an ids part follows.
    pub fn version(&self) -> u8 {
        if self.ids_files == 0 {
            1
        } else {
            2
        }
    }

    /// Where the state starts.
    pub fn header_len(&self) -> usize {
        if self.ids_files == 0 {
            SNAPSHOT_HEADER_LEN
        } else {
            SNAPSHOT_HEADER_V2_LEN
        }
    }

    /// Where the ids part starts: right after the records.
    pub fn ids_start(&self) -> u64 {
        (self.header_len() as u64)
            .saturating_add(self.state_len)
            .saturating_add(self.records_len)
    }

    /// Header, state, records and ids part: the whole stream's length.
    pub fn stream_len(&self) -> u64 {
        self.ids_start().saturating_add(self.ids_len)
    }

    /// The disk an install needs above what the node holds: the incoming file (S + R + I),
    /// the new log (R), the state in both checkpoint slots (2S) and `ids-incoming/` (I).
    /// Within the caps of a decoded header it cannot saturate.
    pub fn install_peak_bytes(&self) -> u64 {
        self.state_len
            .saturating_mul(3)
            .saturating_add(self.records_len.saturating_mul(2))
            .saturating_add(self.ids_len.saturating_mul(2))
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.header_len()];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = self.version();
        b[8..16].copy_from_slice(&self.applied_index.to_le_bytes());
        b[16..24].copy_from_slice(&self.applied_term.to_le_bytes());
        b[24..32].copy_from_slice(&self.first_record.to_le_bytes());
        b[32..40].copy_from_slice(&self.state_len.to_le_bytes());
        b[40..48].copy_from_slice(&self.records_len.to_le_bytes());
        b[48..52].copy_from_slice(&self.state_crc.to_le_bytes());
        if self.ids_files == 0 {
            let crc = crc32c::crc32c(&b[..COVERED]);
            b[52..56].copy_from_slice(&crc.to_le_bytes());
        } else {
            b[56..64].copy_from_slice(&self.ids_len.to_le_bytes());
            b[64..68].copy_from_slice(&self.ids_files.to_le_bytes());
            let crc = crc32c::crc32c(&b[..COVERED_V2]);
            b[68..72].copy_from_slice(&crc.to_le_bytes());
        }
        b
    }

    /// Decodes and checks everything a header alone can show; `max_record_bytes` (what the
    /// records' sizes are judged against) is the receiver's to apply.
    pub fn decode(b: &[u8]) -> Result<SnapshotHeader, String> {
        if b.len() < 5 {
            return Err(format!("header is {} bytes, too short", b.len()));
        }
        if b[0..4] != MAGIC {
            return Err("header magic is not QMQS".into());
        }
        let Some(want) = header_len_of(b[4]) else {
            return Err(format!(
                "header version {} is not one this build reads (1 or 2)",
                b[4]
            ));
        };
        if b.len() != want {
            return Err(format!(
                "header is {} bytes, expected {want} for version {}",
                b.len(),
                b[4]
            ));
        }
        if b[5..8] != [0, 0, 0] {
            return Err("header reserved bytes are not zero".into());
        }
        let (stored, actual) = if want == SNAPSHOT_HEADER_LEN {
            (le_u32(&b[52..]), crc32c::crc32c(&b[..COVERED]))
        } else {
            (le_u32(&b[68..]), crc32c::crc32c(&b[..COVERED_V2]))
        };
        if stored != actual {
            return Err(format!(
                "header crc32c {actual:#010x} does not match the stored {stored:#010x}"
            ));
        }
        let (ids_len, ids_files) = if want == SNAPSHOT_HEADER_LEN {
            (0, 0)
        } else {
            if b[52..56] != [0, 0, 0, 0] {
                return Err("header reserved bytes are not zero".into());
            }
            if le_u32(&b[64..]) == 0 {
                return Err("a version-2 header with no id file".into());
            }
            (le_u64(&b[56..]), le_u32(&b[64..]))
        };
        let h = SnapshotHeader {
            applied_index: le_u64(&b[8..]),
            applied_term: le_u64(&b[16..]),
            first_record: le_u64(&b[24..]),
            state_len: le_u64(&b[32..]),
            records_len: le_u64(&b[40..]),
            state_crc: le_u32(&b[48..]),
            ids_len,
            ids_files,
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
        for (what, len) in [
            ("state", self.state_len),
            ("records", self.records_len),
            ("ids part", self.ids_len),
        ] {
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
        if self.ids_files > MAX_IDS_FILES {
            return Err(format!(
                "{} id files, more than the {MAX_IDS_FILES} a stream may carry",
                self.ids_files
            ));
        }
        let least_ids = u64::from(self.ids_files) * (ENTRY_HEAD as u64 + ID_FILE_MIN);
        if self.ids_len < least_ids || (self.ids_files == 0 && self.ids_len != 0) {
            return Err(format!(
                "ids part length {} cannot hold {} id files",
                self.ids_len, self.ids_files
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
            ids_len: 0,
            ids_files: 0,
        }
    }

    fn sample_v2() -> SnapshotHeader {
        SnapshotHeader {
            ids_len: 2 * (ENTRY_HEAD as u64 + 8192),
            ids_files: 2,
            ..sample()
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
        for b in [sample().encode(), sample_v2().encode()] {
            for byte in 0..b.len() {
                let mut bad = b.clone();
                bad[byte] ^= 0x10;
                assert!(SnapshotHeader::decode(&bad).is_err(), "byte {byte}");
            }
        }
    }

    #[test]
    fn version_2_round_trips_and_counts_the_ids_part() {
        let h = sample_v2();
        let b = h.encode();
        assert_eq!((b.len(), b[4]), (SNAPSHOT_HEADER_V2_LEN, 2));
        assert_eq!(SnapshotHeader::decode(&b), Ok(h));
        assert_eq!(h.ids_start(), 72 + 100 + h.records_len);
        assert_eq!(h.stream_len(), h.ids_start() + h.ids_len);
        assert_eq!(
            h.install_peak_bytes(),
            300 + 2 * h.records_len + 2 * h.ids_len
        );
        // A version-1 header never names an ids part, and the two lengths are not mixed up.
        assert_eq!(sample().encode().len(), SNAPSHOT_HEADER_LEN);
        assert!(SnapshotHeader::decode(&b[..SNAPSHOT_HEADER_LEN])
            .unwrap_err()
            .contains("expected 72"));
    }

    #[test]
    fn version_2_rules_are_enforced() {
        let h = sample_v2();
        assert!(refused(SnapshotHeader {
            ids_len: SNAPSHOT_PART_CAP + 1,
            ..h
        })
        .contains("ids part length"));
        assert!(refused(SnapshotHeader {
            ids_len: 2 * (ENTRY_HEAD as u64 + 4096) - 1,
            ..h
        })
        .contains("cannot hold 2 id files"));
        assert!(refused(SnapshotHeader {
            ids_files: MAX_IDS_FILES + 1,
            ids_len: SNAPSHOT_PART_CAP,
            ..h
        })
        .contains("more than"));
        assert!(refused(SnapshotHeader {
            ids_files: u32::MAX,
            ..h
        })
        .contains("more than"));
        // A zero count with bytes, written by hand (encode would make it version 1).
        let mut b = h.encode();
        b[64..68].copy_from_slice(&0u32.to_le_bytes());
        let crc = crc32c::crc32c(&b[..COVERED_V2]);
        b[68..72].copy_from_slice(&crc.to_le_bytes());
        assert!(SnapshotHeader::decode(&b)
            .unwrap_err()
            .contains("no id file"));
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
        assert!(SnapshotHeader::decode(&b[..4])
            .unwrap_err()
            .contains("short"));
        let recrc = |mut x: Vec<u8>| {
            let crc = crc32c::crc32c(&x[..COVERED]);
            x[52..].copy_from_slice(&crc.to_le_bytes());
            SnapshotHeader::decode(&x).unwrap_err()
        };
        let mut x = b.clone();
        x[0] = b'X';
        assert!(recrc(x).contains("magic"));
        x = b.clone();
        x[4] = 3;
        assert!(recrc(x).contains("version 3"));
        x = b.clone();
        x[6] = 1;
        assert!(recrc(x).contains("reserved"));
    }
}
