//! Entry points for the fuzz targets (fuzz/fuzz_targets/kafka_request.rs) and their corpus
//! replay test: everything a client's bytes reach before the engine, run without a network.

use bytes::{BufMut, Bytes};
use kafka_protocol::messages::ApiKey;

use crate::{fetch, header, list_offsets, metadata, produce};

/// Decodes one request frame body as the connection would: the header, then a Metadata,
/// Produce, Fetch or ListOffsets body, then every produced partition's record batches and
/// their payload mapping. Panics only when an invariant breaks (every mapped payload must be
/// JSON, and must map back to the record it came from).
pub fn request(data: &[u8]) {
    let Ok((hdr, Some(mut r))) = header::decode(Bytes::copy_from_slice(data)) else {
        return;
    };
    match hdr.api {
        Some(ApiKey::Metadata) if metadata::VERSIONS.contains(&hdr.api_version) => {
            let _ = metadata::decode(hdr.api_version, &mut r);
        }
        Some(ApiKey::Fetch) if fetch::VERSIONS.contains(&hdr.api_version) => {
            let _ = fetch::decode(hdr.api_version, &mut r);
        }
        Some(ApiKey::ListOffsets) if list_offsets::VERSIONS.contains(&hdr.api_version) => {
            let _ = list_offsets::decode(hdr.api_version, &mut r);
        }
        Some(ApiKey::Produce) if produce::VERSIONS.contains(&hdr.api_version) => {
            let Ok(req) = produce::decode(&mut r) else {
                return;
            };
            let mut budget = crate::records::Budget::new(1 << 20, 10_000);
            let mut items = Vec::new();
            let mut guards = Vec::new();
            for (topic, parts) in req.topics {
                for (index, records) in parts {
                    let mut check = budget;
                    if let Some(data) = records.clone() {
                        if let Ok(batches) = crate::records::decode_batches(data, &mut check) {
                            for rec in batches.iter().flat_map(|b| &b.records) {
                                let stored = crate::mapping::payload(rec);
                                let mut back = crate::unmapping::record(&stored, rec.timestamp);
                                back.timestamp = rec.timestamp;
                                assert_eq!(&back, rec, "a stored record does not map back");
                            }
                        }
                    }
                    produce::plan_partition(
                        &topic,
                        index,
                        records,
                        None,
                        &mut budget,
                        &mut items,
                        &mut guards,
                    );
                }
            }
            for g in &guards {
                let records: usize = g.batches.iter().map(|b| b.records).sum();
                assert!(
                    g.end <= items.len() && records == g.end - g.start,
                    "a guard does not cover its partition's items"
                );
            }
            for item in &items {
                assert!(
                    serde_json::from_slice::<&serde_json::value::RawValue>(&item.payload).is_ok(),
                    "a mapped payload is not JSON"
                );
            }
        }
        _ => {}
    }
}

/// Request frames the corpus was grown from: one of each served API and version family,
/// a compressed produce, and a produce of two partitions.
pub fn seeds() -> Vec<Vec<u8>> {
    let header = |key: i16, version: i16, flexible: bool| {
        let mut h = Vec::new();
        h.put_i16(key);
        h.put_i16(version);
        h.put_i32(7);
        h.put_i16(4);
        h.put_slice(b"seed");
        if flexible {
            h.push(0);
        }
        h
    };
    let batch = crate::records::seed_batch();
    let mut out = Vec::new();
    out.push(header(18, 3, true));
    let mut m1 = header(3, 1, false);
    m1.put_i32(1);
    m1.put_i16(1);
    m1.push(b't');
    out.push(m1);
    let mut m12 = header(3, 12, true);
    m12.extend_from_slice(&[2]);
    m12.extend_from_slice(&[0u8; 16]);
    m12.extend_from_slice(&[2, b't', 0, 1, 0, 0]);
    out.push(m12);
    for (version, flexible) in [(3i16, false), (9, true)] {
        let mut p = header(0, version, flexible);
        if flexible {
            p.push(0); // null transactional id
        } else {
            p.put_i16(-1);
        }
        p.put_i16(1);
        p.put_i32(1000);
        let parts = 2;
        if flexible {
            p.extend_from_slice(&[2, 2, b't', parts + 1]);
        } else {
            p.put_i32(1);
            p.put_i16(1);
            p.push(b't');
            p.put_i32(i32::from(parts));
        }
        for index in 0..i32::from(parts) {
            p.put_i32(index);
            if flexible {
                p.push(u8::try_from(batch.len() + 1).unwrap_or(0));
            } else {
                p.put_i32(i32::try_from(batch.len()).unwrap_or(0));
            }
            p.extend_from_slice(&batch);
            if flexible {
                p.push(0);
            }
        }
        if flexible {
            p.extend_from_slice(&[0, 0]);
        }
        out.push(p);
    }
    out
}
