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
