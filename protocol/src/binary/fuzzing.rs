//! The checks the fuzz targets `push_body`, `txn_body` and `pop_frames` run (fuzz/), and the
//! seeds their corpora start from. `protocol/tests/fuzz_corpus.rs` replays the saved corpora
//! through the same functions, so `cargo test` checks what the fuzzer checks.

use std::sync::Arc;

use bytes::Bytes;

use super::frames::{decode_frames, write_frame, Frame};
use super::{pop_frames, push, txn, Limits};
use crate::{PopResult, PoppedMessage, PushItem};

pub const LIMITS: Limits = Limits {
    max_bytes: 1 << 20,
    max_items: 1000,
};

/// A seed group: queue, partition, then (transaction id, payload) per item.
type Group<'a> = (&'a str, &'a str, &'a [(&'a str, &'a [u8])]);

fn text16(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Items as a plain QPB1 body with flag 4 (every item carries its transaction id).
pub fn encode_plain(items: &[PushItem]) -> Vec<u8> {
    let mut out = b"QPB1".to_vec();
    out.push(push::FLAG_TXN);
    out.extend_from_slice(&(items.len() as u32).to_le_bytes());
    for i in items {
        text16(&mut out, &i.queue);
        text16(&mut out, &i.partition);
        out.extend_from_slice(&1u32.to_le_bytes());
        text16(&mut out, i.transaction_id.as_deref().unwrap_or(""));
        out.extend_from_slice(&(i.payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&i.payload);
    }
    out
}

/// Two groups, three items: `q1/p` (`t0` `{"a":1}`, an empty payload), `q2/""` (`[1]`).
pub fn plain_push(with_txn: bool) -> Vec<u8> {
    let mut out = b"QPB1".to_vec();
    out.push(if with_txn { push::FLAG_TXN } else { 0 });
    out.extend_from_slice(&2u32.to_le_bytes());
    let groups: [Group<'_>; 2] = [
        ("q1", "p", &[("t0", b"{\"a\":1}"), ("", b"")]),
        ("q2", "", &[("", b"[1]")]),
    ];
    for (q, p, items) in groups {
        text16(&mut out, q);
        text16(&mut out, p);
        out.extend_from_slice(&(items.len() as u32).to_le_bytes());
        for (t, payload) in items {
            if with_txn {
                text16(&mut out, t);
            }
            out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            out.extend_from_slice(payload);
        }
    }
    out
}

fn frame_groups(out: &mut Vec<u8>) {
    out.extend_from_slice(&2u32.to_le_bytes());
    let groups: [Group<'_>; 2] = [
        ("q1", "p", &[("t0", b"{\"a\":1}"), ("t1", b"")]),
        ("q2", "", &[("t2", b"[1]")]),
    ];
    for (n, (q, p, items)) in groups.into_iter().enumerate() {
        let mut frames = Vec::new();
        for (i, (t, payload)) in items.iter().enumerate() {
            let f = Frame {
                id: [(n * 8 + i) as u8; 16],
                trace_id: None,
                transaction_id: t,
                producer: None,
                encrypted: false,
                payload,
            };
            let _ = write_frame(&mut frames, &f);
        }
        let z = zstd::bulk::compress(&frames, 1).unwrap_or_default();
        text16(out, q);
        text16(out, p);
        out.extend_from_slice(&(items.len() as u32).to_le_bytes());
        out.extend_from_slice(&(z.len() as u32).to_le_bytes());
        out.extend_from_slice(&z);
    }
}

/// The same three items as [`plain_push`], in frames mode (flag 8).
pub fn framed_push() -> Vec<u8> {
    let mut out = b"QPB1".to_vec();
    out.push(push::FLAG_FRAMES);
    frame_groups(&mut out);
    out
}

/// A QTB1 body with an empty operation list in its head and the groups of [`framed_push`].
pub fn txn_body() -> Vec<u8> {
    let head = br#"{"operations":[]}"#;
    let mut out = b"QTB1\x00".to_vec();
    out.extend_from_slice(&(head.len() as u32).to_le_bytes());
    out.extend_from_slice(head);
    frame_groups(&mut out);
    out
}

fn message(partition: &str, pid: u64, offset: u64, created: i64) -> PoppedMessage {
    PoppedMessage {
        id: format!("0190a000-0000-7000-8000-{:012x}", pid * 1000 + offset),
        transaction_id: format!("t{offset}"),
        trace_id: (offset == 9).then(|| "0190a000-0000-7000-8000-0000000000ff".to_string()),
        payload: Bytes::from(format!("[{offset}]")),
        producer_sub: Some("sub".into()),
        created_at_us: created,
        queue: Arc::from("q"),
        partition: Arc::from(partition),
        partition_id: pid,
        lease_id: Arc::from("lease"),
        consumer_group: Arc::from("__QUEUE_MODE__"),
        offset,
        delivery_attempt: 1,
    }
}

/// Partition p1: offsets 4 and 5 created together, 9 later; partition p2: offset 0.
pub fn pop_result() -> PopResult {
    PopResult {
        queue: "q".into(),
        consumer_group: "__QUEUE_MODE__".into(),
        lease_id: "lease".into(),
        partitions_claimed: 2,
        messages: vec![
            message("p1", 7, 4, 1_700_000_000_000_000),
            message("p1", 7, 5, 1_700_000_000_000_000),
            message("p1", 7, 9, 1_700_000_000_500_000),
            message("p2", 8, 0, 1_700_000_000_000_000),
        ],
        autopilot: None,
        echo: Default::default(),
    }
}

pub fn seeds_push() -> Vec<Vec<u8>> {
    vec![plain_push(true), plain_push(false), framed_push()]
}

pub fn seeds_txn() -> Vec<Vec<u8>> {
    vec![txn_body()]
}

pub fn seeds_pop_frames() -> Vec<Vec<u8>> {
    let r = pop_result();
    vec![pop_frames::encode(&r, "{}").unwrap_or_default()]
}

/// Whatever decodes is within the caps, and reads back the same through the plain encoding.
pub fn push_body(data: &[u8]) {
    let Ok(body) = push::decode(&Bytes::copy_from_slice(data), LIMITS) else {
        return;
    };
    assert!(body.items.len() <= LIMITS.max_items);
    assert!(body.items.iter().all(|i| !i.payload.is_empty()));
    let again = push::decode(&Bytes::from(encode_plain(&body.items)), LIMITS);
    let Ok(again) = again else {
        panic!("a decoded body re-encodes to one that fails: {again:?}")
    };
    assert_eq!(again.items.len(), body.items.len());
    for (a, b) in again.items.iter().zip(&body.items) {
        assert_eq!(
            (&a.queue, &a.partition, &a.payload),
            (&b.queue, &b.partition, &b.payload)
        );
        assert_eq!(a.transaction_id, b.transaction_id);
    }
}

pub fn txn_body_check(data: &[u8]) {
    let Ok(t) = txn::decode(&Bytes::copy_from_slice(data), LIMITS) else {
        return;
    };
    assert!(t.items.len() <= LIMITS.max_items);
    assert!(t.head.len() < data.len());
}

/// A framed answer that decodes writes back to the same bytes; its raw records' frames too.
pub fn pop_frames_check(data: &[u8]) {
    let Ok(pop) = pop_frames::decode(data) else {
        return;
    };
    assert_eq!(pop.write().as_deref(), Some(data));
    for rec in pop.claims.iter().flat_map(|c| &c.records) {
        if rec.codec != pop_frames::CODEC_RAW {
            continue;
        }
        let Ok(frames) = decode_frames(&rec.bytes, rec.count as usize) else {
            continue;
        };
        let mut out = Vec::new();
        for f in &frames {
            assert!(write_frame(&mut out, f).is_some());
        }
        assert_eq!(out, rec.bytes);
    }
}
