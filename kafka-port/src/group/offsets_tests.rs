use bytes::{BufMut, Bytes, BytesMut};

use super::*;

fn str16(b: &mut BytesMut, s: &str) {
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
}

/// A classic (v2) OffsetCommit body naming `topics` topics of `parts` partitions each.
fn commit_v2(topic: &str, topics: usize, parts: usize) -> Reader {
    let mut b = BytesMut::new();
    str16(&mut b, "g");
    b.put_i32(-1);
    str16(&mut b, "");
    b.put_i64(-1);
    b.put_i32(topics as i32);
    for _ in 0..topics {
        str16(&mut b, topic);
        b.put_i32(parts as i32);
        for p in 0..parts {
            b.put_i32(p as i32);
            b.put_i64(0);
            b.put_i16(-1);
        }
    }
    Reader::new(b.freeze(), false)
}

/// A v1 OffsetFetch (or v0 OffsetDelete: same layout) naming one topic's partitions.
fn topic_parts(topic: &str, parts: usize) -> Reader {
    let mut b = BytesMut::new();
    str16(&mut b, "g");
    b.put_i32(1);
    str16(&mut b, topic);
    b.put_i32(parts as i32);
    for p in 0..parts {
        b.put_i32(p as i32);
    }
    Reader::new(Bytes::from(b), false)
}

#[test]
fn a_topic_name_past_kafkas_limit_is_refused_at_decode() {
    let long = "t".repeat(MAX_KAFKA_TOPIC_BYTES + 1);
    let ok = "t".repeat(MAX_KAFKA_TOPIC_BYTES);
    assert!(decode_commit(2, &mut commit_v2(&long, 1, 1)).is_err());
    assert!(decode_commit(2, &mut commit_v2(&ok, 1, 1)).is_ok());
    assert!(decode_fetch(1, &mut topic_parts(&long, 1)).is_err());
    assert!(decode_fetch(1, &mut topic_parts(&ok, 1)).is_ok());
    assert!(decode_delete(&mut topic_parts(&long, 1)).is_err());
    assert!(decode_delete(&mut topic_parts(&ok, 1)).is_ok());
}

#[test]
fn a_request_naming_more_partitions_than_the_cap_is_refused_whole() {
    let cap = MAX_KAFKA_OFFSETS_PER_REQUEST;
    // Spread over topics: the cap is on the request, not on each topic.
    assert!(decode_commit(2, &mut commit_v2("t", 2, cap / 2 + 1)).is_err());
    assert!(decode_commit(2, &mut commit_v2("t", 2, cap / 2)).is_ok());
    assert!(decode_fetch(1, &mut topic_parts("t", cap + 1)).is_err());
    assert!(decode_fetch(1, &mut topic_parts("t", cap)).is_ok());
    assert!(decode_delete(&mut topic_parts("t", cap + 1)).is_err());
    assert!(decode_delete(&mut topic_parts("t", cap)).is_ok());
}
