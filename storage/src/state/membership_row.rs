//! The Raft membership recorded beside a checkpoint generation, in the save's own redb
//! transaction: a snapshot of the generation at applied index `A` must name the membership in
//! force at `A`, and the live `raft/membership` may be newer by the time it is sent
//! (docs/storage-format.md "Raft snapshot", "Which checkpoint"). The row is the bytes of
//! `raft/membership` as they were in that transaction, bound to the header bytes saved with
//! it; the Raft crate decodes it and serves the generation only when the membership's own log
//! id is at or below `A` (otherwise the one at `A` is not known).

use redb::TableDefinition;

use crate::format::le_u32;

/// Keyed by the slot's `head_key`, like `checkpoint_head`.
pub(crate) const CHECKPOINT_MEMBERSHIP: TableDefinition<&str, &[u8]> =
    TableDefinition::new("checkpoint_membership");

/// The meta row the Raft crate keeps its applied membership in (its encoding is the Raft
/// crate's; this crate copies the bytes).
pub const MEMBERSHIP_KEY: &str = "raft/membership";

const VERSION: u8 = 1;
/// version u8 | crc32c of the header row u32 | membership bytes | crc32c of all before u32.
const FIXED: usize = 9;
/// A membership row is a few hundred bytes of JSON; anything near this is damage.
pub(crate) const MEMBERSHIP_MAX: usize = 1 << 20;

pub(crate) fn encode(head: &[u8], membership: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(FIXED + membership.len());
    b.push(VERSION);
    b.extend_from_slice(&crc32c::crc32c(head).to_le_bytes());
    b.extend_from_slice(membership);
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// The membership bytes when `raw` is a whole row written for the header bytes `head`; None
/// for anything else (never guessed).
pub(crate) fn of_head<'r>(raw: &'r [u8], head: &[u8]) -> Option<&'r [u8]> {
    if raw.len() < FIXED || raw.len() > FIXED + MEMBERSHIP_MAX || raw[0] != VERSION {
        return None;
    }
    let (body, crc) = raw.split_at(raw.len() - 4);
    if le_u32(crc) != crc32c::crc32c(body) || le_u32(&body[1..5]) != crc32c::crc32c(head) {
        return None;
    }
    Some(&body[5..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_round_trips_for_its_header_only_and_any_flipped_bit_is_no_row() {
        let row = encode(b"head", b"{\"members\":1}");
        assert_eq!(of_head(&row, b"head"), Some(&b"{\"members\":1}"[..]));
        assert_eq!(of_head(&row, b"other head"), None);
        for i in 0..row.len() * 8 {
            let mut bad = row.clone();
            bad[i / 8] ^= 1 << (i % 8);
            assert_eq!(of_head(&bad, b"head"), None, "bit {i}");
        }
        assert_eq!(of_head(&row[..row.len() - 1], b"head"), None);
        assert_eq!(of_head(&encode(b"head", b""), b"head"), Some(&b""[..]));
    }
}
