//! What decoding a binary body will allocate past the body itself, read off its group heads
//! and its zstd frames' declared sizes without decompressing anything: the door reserves it
//! against the memory budget first, so a few kilobytes on the wire cannot become tens of
//! megabytes nobody counted. The decoder then holds every group to what was declared here.

use super::push::{self, group_head, Budget, FLAG_FRAMES, FLAG_TXN, FLAG_ZSTD};
use super::reader::{bounded, Reader};
use super::{txn, zstd_capped, BinaryError, Limits};

/// Of a QPB1 body. A flag-1 body hides its group heads inside the compressed bytes, so its
/// names' copies are known only once decoded: it gets the whole allowance (the limit).
pub fn push(body: &[u8], limits: Limits) -> Result<usize, BinaryError> {
    let (flags, mut r) = push::head(body)?;
    let mut budget = Budget::new(limits);
    if flags & FLAG_ZSTD != 0 {
        r.u32("raw_len")?;
        zstd_capped::declared_size(r.rest(), limits.max_bytes, "the body")?;
        return Ok(limits.max_bytes);
    }
    if flags & FLAG_FRAMES != 0 {
        frame_groups(&mut r, &mut budget)?;
    } else {
        plain_groups(&mut r, flags & FLAG_TXN != 0, &mut budget)?;
    }
    Ok(limits.max_bytes - budget.bytes)
}

/// Of a QTB1 body: its groups (the head is read as it lies in the body).
pub fn transaction(body: &[u8], limits: Limits) -> Result<usize, BinaryError> {
    let mut r = Reader::new(body);
    if r.take(4, "magic")? != txn::MAGIC {
        return Err(BinaryError::Malformed(
            "the body does not start with QTB1".into(),
        ));
    }
    r.u8("flags")?;
    let head_len = bounded(r.u32("head length")?, limits.max_bytes, "bytes of head")?;
    r.take(head_len, "head")?;
    let mut budget = Budget::new(limits);
    frame_groups(&mut r, &mut budget)?;
    Ok(limits.max_bytes - budget.bytes)
}

fn frame_groups(r: &mut Reader<'_>, budget: &mut Budget) -> Result<(), BinaryError> {
    for _ in 0..r.u32("group count")? {
        group_head(r, budget)?;
        let z = r.bytes32("compressed group")?;
        let size = zstd_capped::declared_size(z, budget.bytes, "a group")?;
        budget.bytes -= size;
    }
    Ok(())
}

fn plain_groups(
    r: &mut Reader<'_>,
    with_txn: bool,
    budget: &mut Budget,
) -> Result<(), BinaryError> {
    for _ in 0..r.u32("group count")? {
        let g = group_head(r, budget)?;
        for _ in 0..g.n {
            if with_txn {
                r.text16("transactionId")?;
            }
            r.bytes32("payload")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::fuzzing::{framed_push, plain_push, txn_body, LIMITS};

    #[test]
    fn a_framed_body_weighs_its_groups_and_its_names_copies() {
        let e = push(&framed_push(), LIMITS).expect("measured");
        // q1/p: two items; q2/Default: one; frames of 23 bytes + "t0".."t2" + payloads.
        let names = 2 * (2 + 1) + (2 + 7);
        let frames = (23 + 2 + 7) + (23 + 2) + (23 + 2 + 3);
        assert_eq!(e, names + frames);
        assert_eq!(transaction(&txn_body(), LIMITS), Ok(e));
    }

    #[test]
    fn a_plain_body_weighs_its_names_copies_and_a_zstd_one_the_limit() {
        assert_eq!(push(&plain_push(true), LIMITS), Ok(2 * (2 + 1) + (2 + 7)));
        let inner = &plain_push(true)[5..];
        let mut body = b"QPB1\x05".to_vec();
        body.extend_from_slice(&(inner.len() as u32).to_le_bytes());
        body.extend_from_slice(&zstd::bulk::compress(inner, 1).unwrap_or_default());
        assert_eq!(push(&body, LIMITS), Ok(LIMITS.max_bytes));
    }
}
