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
fn a_partition_named_many_times_is_read_once() {
    // Review s20 M2: topic "t" partitions 0, 0, 1, then "t" again with 1 and 0, then "u" 0.
    let mut b = BytesMut::new();
    str16(&mut b, "g");
    b.put_i32(3);
    for (topic, parts) in [("t", &[0, 0, 1][..]), ("t", &[1, 0][..]), ("u", &[0][..])] {
        str16(&mut b, topic);
        b.put_i32(parts.len() as i32);
        parts.iter().for_each(|p| b.put_i32(*p));
    }
    let got = decode_fetch(1, &mut Reader::new(Bytes::from(b), false));
    let want = vec![("t".to_string(), vec![0, 1]), ("u".to_string(), vec![0])];
    assert_eq!(got, Ok(vec![("g".to_string(), Some(want))]));
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

fn compact(b: &mut BytesMut, s: &str) {
    b.put_u8(s.len() as u8 + 1);
    b.put_slice(s.as_bytes());
}

/// A v8 OffsetFetch naming `groups`, each for all of its partitions.
fn fetch_v8(groups: &[&str]) -> Reader {
    let mut b = BytesMut::new();
    // Compact array length as an unsigned varint of n + 1.
    let mut n = groups.len() as u32 + 1;
    while n >= 0x80 {
        b.put_u8((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    b.put_u8(n as u8);
    for g in groups {
        compact(&mut b, g);
        b.put_u8(0); // null topics: every partition
        b.put_u8(0); // tags
    }
    b.put_u8(0); // require_stable
    b.put_u8(0); // tags
    Reader::new(b.freeze(), true)
}

#[test]
fn a_multi_group_fetch_answers_each_group_once_and_is_capped_at_decode() {
    let groups = decode_fetch(8, &mut fetch_v8(&["a", "b", "a", "a"]))
        .map(|gs| gs.into_iter().map(|(id, _)| id).collect::<Vec<_>>());
    assert_eq!(groups, Ok(vec!["a".to_string(), "b".to_string()]));
    let many = vec!["g"; MAX_KAFKA_GROUPS_PER_REQUEST + 1];
    assert!(decode_fetch(8, &mut fetch_v8(&many)).is_err());
    let most = vec!["g"; MAX_KAFKA_GROUPS_PER_REQUEST];
    assert_eq!(
        decode_fetch(8, &mut fetch_v8(&most)).map(|g| g.len()),
        Ok(1)
    );
}
