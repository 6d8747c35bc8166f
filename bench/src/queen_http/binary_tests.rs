//! This tool's binary encoder and QPF1 reader, written from docs/binary-forms.md, checked
//! against the broker's own decoder and encoder (protocol crate): if either side strays from
//! the document, one of them notices.

use bytes::Bytes;
use queenmq_protocol::binary::{fuzzing, pop_frames, push, txn, Limits};

use super::binary_push::{txn_id, Encoder};
use super::framed_pop;
use crate::driver::OutMessage;
use crate::payload::{PayloadBuilder, PayloadFields};

const LIMITS: Limits = Limits {
    max_bytes: 1 << 20,
    max_items: 1_000,
};

fn batch() -> Vec<OutMessage> {
    let mut builder = PayloadBuilder::new(256);
    // Partitions round robin, as a producer walks them: 3, 5, 3, 8, 5, 3.
    [3u32, 5, 3, 8, 5, 3]
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let id = 100 + i as u64;
            OutMessage {
                id,
                partition: p,
                payload: builder.build(PayloadFields {
                    seq: id,
                    p,
                    ts: 1_700_000_000_000_000,
                }),
            }
        })
        .collect()
}

/// The broker's items, in wire order, are the batch in `order`, with names and ids intact.
fn check_items(items: &[queenmq_protocol::PushItem], order: &[usize], batch: &[OutMessage]) {
    assert_eq!(items.len(), batch.len());
    assert_eq!(order.len(), batch.len());
    for (item, &at) in items.iter().zip(order) {
        let m = &batch[at];
        assert_eq!(item.queue, "bench-q");
        assert_eq!(item.partition, format!("p{}", m.partition));
        assert_eq!(
            item.transaction_id.as_deref(),
            Some(txn_id("r1", m.id).as_str())
        );
        assert_eq!(&item.payload[..], m.payload.as_bytes());
    }
    // Each partition's messages keep their order.
    for p in [3u32, 5, 8] {
        let wire: Vec<u64> = order
            .iter()
            .map(|&i| &batch[i])
            .filter(|m| m.partition == p)
            .map(|m| m.id)
            .collect();
        let mut sorted = wire.clone();
        sorted.sort_unstable();
        assert_eq!(wire, sorted, "partition {p}");
    }
}

#[test]
fn plain_push_decodes_in_the_broker() -> anyhow::Result<()> {
    let batch = batch();
    let encoded = Encoder::new()?.push_plain("bench-q", "r1", &batch)?;
    let body = push::decode(&Bytes::from(encoded.body), LIMITS)?;
    assert!(!body.counts);
    check_items(&body.items, &encoded.order, &batch);
    Ok(())
}

#[test]
fn framed_push_decodes_in_the_broker() -> anyhow::Result<()> {
    let batch = batch();
    let mut encoder = Encoder::new()?;
    for _ in 0..2 {
        // The second body reuses the encoder's buffers.
        let encoded = encoder.push_frames("bench-q", "r1", &batch)?;
        assert_eq!(encoded.body[4], 8, "flag 8 only");
        let body = push::decode(&Bytes::from(encoded.body), LIMITS)?;
        check_items(&body.items, &encoded.order, &batch);
    }
    Ok(())
}

#[test]
fn transaction_decodes_in_the_broker() -> anyhow::Result<()> {
    let batch = batch();
    let encoded = Encoder::new()?.transaction("bench-q", "r1", &batch)?;
    let body = txn::decode(&Bytes::from(encoded.body), LIMITS)?;
    assert_eq!(&body.head[..], br#"{"operations":[]}"#);
    check_items(&body.items, &encoded.order, &batch);
    Ok(())
}

#[test]
fn framed_pop_reads_what_the_broker_writes() -> anyhow::Result<()> {
    let result = fuzzing::pop_result();
    let Some(answer) = pop_frames::encode(&result, "{}") else {
        anyhow::bail!("the broker could not frame its sample pop");
    };
    let answer = Bytes::from(answer);
    let got = framed_pop::decode(&answer)?;
    let want: Vec<_> = (result.messages.iter())
        .map(|m| {
            (
                m.transaction_id.as_str(),
                m.partition_id.to_string(),
                &m.payload[..],
            )
        })
        .collect();
    let seen: Vec<_> = (got.iter())
        .map(|p| {
            (
                p.transaction_id.as_str(),
                p.partition_id.clone(),
                &p.payload[..],
            )
        })
        .collect();
    assert_eq!(seen, want);
    assert!(got.iter().all(|p| p.lease_id.as_deref() == Some("lease")));

    // Every truncation and a trailing byte are refused, never a panic.
    for cut in 0..answer.len() {
        assert!(
            framed_pop::decode(&answer.slice(..cut)).is_err(),
            "cut {cut}"
        );
    }
    let mut longer = answer.to_vec();
    longer.push(0);
    assert!(framed_pop::decode(&Bytes::from(longer)).is_err());
    Ok(())
}

/// A QPF1 answer of one claim (partition 9, offsets 0..count) holding one record.
fn one_record_answer(codec: u8, count: u32, record: &[u8]) -> Bytes {
    let mut out = b"QPF1\x01".to_vec();
    out.extend_from_slice(&2u32.to_le_bytes());
    out.extend_from_slice(b"{}");
    for text in ["q", "lease", ""] {
        out.extend_from_slice(&(text.len() as u16).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
    }
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&9u64.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(b"p9");
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&u64::from(count - 1).to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&0i64.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.push(codec);
    out.extend_from_slice(&(record.len() as u32).to_le_bytes());
    out.extend_from_slice(record);
    Bytes::from(out)
}

/// `count` frames (flags 0) with transaction ids `t0…` and payloads `payload-0…`.
fn raw_frames(count: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..count {
        let txn = format!("t{i}");
        let payload = format!("payload-{i}");
        let len = 1 + 16 + 2 + txn.len() + payload.len();
        out.extend_from_slice(&(len as u32).to_le_bytes());
        out.push(0);
        out.extend_from_slice(&[7u8; 16]);
        out.extend_from_slice(&(txn.len() as u16).to_le_bytes());
        out.extend_from_slice(txn.as_bytes());
        out.extend_from_slice(payload.as_bytes());
    }
    out
}

#[test]
fn a_zstd_record_reads_as_its_raw_twin() -> anyhow::Result<()> {
    let frames = raw_frames(5);
    let raw = framed_pop::decode(&one_record_answer(0, 5, &frames))?;
    let packed = zstd::bulk::compress(&frames, 3)?;
    let zstd = framed_pop::decode(&one_record_answer(1, 5, &packed))?;
    assert_eq!(raw.len(), 5);
    let view = |v: &[super::wire::Popped]| -> Vec<(String, String, Vec<u8>)> {
        v.iter()
            .map(|p| {
                let id = (p.transaction_id.clone(), p.partition_id.clone());
                (id.0, id.1, p.payload.to_vec())
            })
            .collect()
    };
    assert_eq!(view(&zstd), view(&raw));
    assert_eq!(zstd[4].payload.as_ref(), b"payload-4");
    Ok(())
}

#[test]
fn a_zstd_record_must_declare_a_size_within_the_cap() -> anyhow::Result<()> {
    let frames = raw_frames(5);
    let packed = zstd::bulk::compress(&frames, 3)?;
    assert_eq!(
        framed_pop::inflate(&packed, frames.len())?.len(),
        frames.len()
    );
    let too_big = framed_pop::inflate(&packed, frames.len() - 1);
    assert!(too_big.is_err(), "{too_big:?}");

    let mut compressor = zstd::bulk::Compressor::new(3)?;
    compressor.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(false))?;
    let sizeless = compressor.compress(&frames)?;
    assert!(framed_pop::decode(&one_record_answer(1, 5, &sizeless)).is_err());
    assert!(framed_pop::decode(&one_record_answer(1, 5, b"not zstd")).is_err());
    Ok(())
}
