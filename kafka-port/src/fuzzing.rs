//! Entry points for the fuzz targets (fuzz/fuzz_targets/kafka_request.rs) and their corpus
//! replay test: everything a client's bytes reach before the engine, run without a network.

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use crate::{header, metadata, produce};

/// Decodes one request frame body as the connection would: the header, then a Metadata or
/// Produce body, then every partition's record batches and their payload mapping. Panics
/// only when an invariant breaks (every mapped payload must be JSON).
pub fn request(data: &[u8]) {
    let Ok((hdr, Some(mut r))) = header::decode(Bytes::copy_from_slice(data)) else {
        return;
    };
    match hdr.api {
        Some(ApiKey::Metadata) if metadata::VERSIONS.contains(&hdr.api_version) => {
            let _ = metadata::decode(hdr.api_version, &mut r);
        }
        Some(ApiKey::Produce) if produce::VERSIONS.contains(&hdr.api_version) => {
            let Ok(req) = produce::decode(&mut r) else {
                return;
            };
            let mut budget = 1 << 20;
            let mut items = Vec::new();
            for (topic, parts) in req.topics {
                for (index, records) in parts {
                    produce::plan_partition(&topic, index, records, None, &mut budget, &mut items);
                }
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
