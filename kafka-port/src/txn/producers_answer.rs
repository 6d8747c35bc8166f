//! DescribeProducers v0's answer, encoded straight from the engine's views into a buffer of
//! its exact size (review s17 lead H1): building the `kafka-protocol` message first held
//! every producer twice more (a 64-byte `ProducerState` each, then an encode buffer grown by
//! doubling). Each partition's views are dropped as soon as they are written. The layout is
//! Kafka's (DescribeProducersResponse v0, flexible): the tests compare it byte for byte with
//! the crate's encoding.

use bytes::{BufMut, BytesMut};
use queenmq_protocol::kafka_txn_reads::ProducerView;

/// One asked partition: an error code, or the producers listed there.
#[derive(Debug)]
pub enum Slot {
    Code(i16),
    Listed(Vec<ProducerView>),
}

/// Each asked topic with its asked partitions, in the request's order.
pub type Topics = Vec<(String, Vec<(i32, Slot)>)>;

/// One ProducerState on the wire: id, epoch, last sequence, last timestamp, coordinator
/// epoch, transaction start offset and an empty tag buffer.
pub const PRODUCER_WIRE_BYTES: usize = 8 + 4 + 4 + 8 + 4 + 8 + 1;

fn uvarint_len(mut n: u64) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

fn put_uvarint(buf: &mut BytesMut, mut n: u64) {
    while n >= 0x80 {
        buf.put_u8((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    buf.put_u8(n as u8);
}

/// A compact array's or string's length prefix (`n + 1`).
fn compact_len(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX).saturating_add(1)
}

/// The producers listed over every slot.
pub fn listed(topics: &Topics) -> usize {
    topics
        .iter()
        .flat_map(|(_, parts)| parts)
        .map(|(_, slot)| match slot {
            Slot::Listed(v) => v.len(),
            Slot::Code(_) => 0,
        })
        .sum()
}

/// The answer's encoded length, exactly.
pub fn encoded_len(topics: &Topics) -> usize {
    let mut n = 4 + uvarint_len(compact_len(topics.len())) + 1;
    for (name, parts) in topics {
        n += uvarint_len(compact_len(name.len())) + name.len();
        n += uvarint_len(compact_len(parts.len())) + 1;
        for (_, slot) in parts {
            let producers = match slot {
                Slot::Listed(v) => v.len(),
                Slot::Code(_) => 0,
            };
            // Index, code, a null message, the producers, an empty tag buffer.
            n += 4 + 2 + 1 + uvarint_len(compact_len(producers)) + 1;
            n += producers * PRODUCER_WIRE_BYTES;
        }
    }
    n
}

/// Every listed slot answered `code` instead (its views dropped).
pub fn refuse_listed(topics: &mut Topics, code: i16) {
    for (_, parts) in topics.iter_mut() {
        for (_, slot) in parts.iter_mut() {
            if matches!(slot, Slot::Listed(_)) {
                *slot = Slot::Code(code);
            }
        }
    }
}

/// Encodes the answer (throttle time 0) into a buffer of [`encoded_len`] bytes.
pub fn encode(topics: Topics) -> BytesMut {
    let mut buf = BytesMut::with_capacity(encoded_len(&topics));
    buf.put_i32(0);
    put_uvarint(&mut buf, compact_len(topics.len()));
    for (name, parts) in topics {
        put_uvarint(&mut buf, compact_len(name.len()));
        buf.put_slice(name.as_bytes());
        put_uvarint(&mut buf, compact_len(parts.len()));
        for (index, slot) in parts {
            buf.put_i32(index);
            let list = match slot {
                Slot::Code(code) => {
                    buf.put_i16(code);
                    Vec::new()
                }
                Slot::Listed(v) => {
                    buf.put_i16(0);
                    v
                }
            };
            // No error message.
            put_uvarint(&mut buf, 0);
            put_uvarint(&mut buf, compact_len(list.len()));
            for p in list {
                buf.put_i64(p.producer_id);
                buf.put_i32(i32::from(p.epoch));
                buf.put_i32(p.last_sequence);
                buf.put_i64(p.last_ms);
                // Kafka's coordinator epoch: not kept here (-1, as for a non-transactional
                // producer).
                buf.put_i32(-1);
                buf.put_i64(p.txn_start_offset);
                put_uvarint(&mut buf, 0);
            }
            put_uvarint(&mut buf, 0);
        }
        put_uvarint(&mut buf, 0);
    }
    put_uvarint(&mut buf, 0);
    buf
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::describe_producers_response::{
        PartitionResponse, ProducerState, TopicResponse,
    };
    use kafka_protocol::messages::{DescribeProducersResponse, ProducerId, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn view(i: i64) -> ProducerView {
        ProducerView {
            producer_id: i,
            epoch: (i % 7) as i16,
            last_sequence: (i * 3) as i32 - 1,
            last_ms: 1_700_000_000_000 + i,
            txn_start_offset: if i % 2 == 0 { -1 } else { i * 10 },
        }
    }

    /// What the door built before: the crate's message from the same slots.
    fn through_the_crate(topics: &Topics) -> BytesMut {
        let msg = DescribeProducersResponse::default().with_topics(
            topics
                .iter()
                .map(|(name, parts)| {
                    TopicResponse::default()
                        .with_name(TopicName(StrBytes::from_string(name.clone())))
                        .with_partitions(
                            parts
                                .iter()
                                .map(|(index, slot)| {
                                    let p =
                                        PartitionResponse::default().with_partition_index(*index);
                                    match slot {
                                        Slot::Code(c) => p.with_error_code(*c),
                                        Slot::Listed(v) => p.with_active_producers(
                                            v.iter()
                                                .map(|v| {
                                                    ProducerState::default()
                                                        .with_producer_id(ProducerId(v.producer_id))
                                                        .with_producer_epoch(i32::from(v.epoch))
                                                        .with_last_sequence(v.last_sequence)
                                                        .with_last_timestamp(v.last_ms)
                                                        .with_coordinator_epoch(-1)
                                                        .with_current_txn_start_offset(
                                                            v.txn_start_offset,
                                                        )
                                                })
                                                .collect(),
                                        ),
                                    }
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
        let mut buf = BytesMut::new();
        msg.encode(&mut buf, 0).expect("encodes");
        buf
    }

    #[test]
    fn the_answer_is_kafkas_layout_at_its_exact_length() {
        let long = "t".repeat(200);
        let many: Vec<ProducerView> = (0..200).map(view).collect();
        let cases: Vec<Topics> = vec![
            Vec::new(),
            vec![("a".into(), Vec::new())],
            vec![
                (
                    "a".into(),
                    vec![
                        (0, Slot::Listed(vec![view(1), view(2)])),
                        (3, Slot::Code(6)),
                        (4, Slot::Listed(Vec::new())),
                    ],
                ),
                (long, vec![(9, Slot::Listed(many))]),
            ],
        ];
        for topics in cases {
            let want = through_the_crate(&topics);
            let len = encoded_len(&topics);
            let got = encode(topics);
            assert_eq!(got.len(), len);
            assert_eq!(got.capacity(), len, "no growth while encoding");
            assert_eq!(got, want);
        }
    }

    #[test]
    fn refused_slots_lose_their_views() {
        let mut topics: Topics = vec![(
            "a".into(),
            vec![(0, Slot::Listed(vec![view(1)])), (1, Slot::Code(3))],
        )];
        assert_eq!(listed(&topics), 1);
        refuse_listed(&mut topics, 6);
        assert_eq!(listed(&topics), 0);
        assert!(matches!(topics[0].1[0].1, Slot::Code(6)));
        assert!(matches!(topics[0].1[1].1, Slot::Code(3)));
    }
}
