//! ApiVersions: what this door serves. Only implemented APIs are listed, so a client never
//! sends a request that would close its connection.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};

use crate::admin::{
    alter_configs, create_partitions, create_topics, delete_records, delete_topics,
    describe_cluster, describe_configs, describe_log_dirs,
};
use crate::connection::{encode, Reply};
use crate::errors;
use crate::{fetch, init_producer_id, list_offsets, metadata, produce, sasl};

/// The ApiVersions versions served (v4 only adds nothing we use; clients fall back to v3).
pub const VERSIONS: std::ops::RangeInclusive<i16> = 0..=3;

/// Every served API with its version range; the SASL APIs only where logins are required.
pub fn served(sasl: bool) -> Vec<(ApiKey, i16, i16)> {
    let logins = [
        (
            ApiKey::SaslHandshake,
            *sasl::HANDSHAKE_VERSIONS.start(),
            *sasl::HANDSHAKE_VERSIONS.end(),
        ),
        (
            ApiKey::SaslAuthenticate,
            *sasl::AUTHENTICATE_VERSIONS.start(),
            *sasl::AUTHENTICATE_VERSIONS.end(),
        ),
    ];
    vec![
        (
            ApiKey::Produce,
            *produce::VERSIONS.start(),
            *produce::VERSIONS.end(),
        ),
        (
            ApiKey::Fetch,
            *fetch::VERSIONS.start(),
            *fetch::VERSIONS.end(),
        ),
        (
            ApiKey::ListOffsets,
            *list_offsets::VERSIONS.start(),
            *list_offsets::VERSIONS.end(),
        ),
        (
            ApiKey::Metadata,
            *metadata::VERSIONS.start(),
            *metadata::VERSIONS.end(),
        ),
        (ApiKey::ApiVersions, *VERSIONS.start(), *VERSIONS.end()),
        (
            ApiKey::CreateTopics,
            *create_topics::VERSIONS.start(),
            *create_topics::VERSIONS.end(),
        ),
        (
            ApiKey::DeleteTopics,
            *delete_topics::VERSIONS.start(),
            *delete_topics::VERSIONS.end(),
        ),
        (
            ApiKey::CreatePartitions,
            *create_partitions::VERSIONS.start(),
            *create_partitions::VERSIONS.end(),
        ),
        (
            ApiKey::DescribeConfigs,
            *describe_configs::VERSIONS.start(),
            *describe_configs::VERSIONS.end(),
        ),
        (
            ApiKey::InitProducerId,
            *init_producer_id::VERSIONS.start(),
            *init_producer_id::VERSIONS.end(),
        ),
        (
            ApiKey::AlterConfigs,
            *alter_configs::VERSIONS.start(),
            *alter_configs::VERSIONS.end(),
        ),
        (
            ApiKey::IncrementalAlterConfigs,
            *alter_configs::INCREMENTAL_VERSIONS.start(),
            *alter_configs::INCREMENTAL_VERSIONS.end(),
        ),
        (
            ApiKey::DescribeLogDirs,
            *describe_log_dirs::VERSIONS.start(),
            *describe_log_dirs::VERSIONS.end(),
        ),
        (
            ApiKey::DescribeCluster,
            *describe_cluster::VERSIONS.start(),
            *describe_cluster::VERSIONS.end(),
        ),
        (
            ApiKey::DeleteRecords,
            *delete_records::VERSIONS.start(),
            *delete_records::VERSIONS.end(),
        ),
    ]
    .into_iter()
    .chain(crate::group::served())
    .chain(crate::txn::served())
    .chain(logins.into_iter().filter(|_| sasl))
    .collect()
}

/// The body is not read: nothing in it (client software name and version) changes the
/// answer. A version we do not serve is answered in the v0 layout with UNSUPPORTED_VERSION
/// and the list (KIP-511), so the client retries with one we do.
pub fn answer(version: i16, sasl: bool) -> Reply {
    let (error_code, layout) = if VERSIONS.contains(&version) {
        (errors::NONE, version)
    } else {
        (errors::UNSUPPORTED_VERSION, 0)
    };
    let keys = served(sasl)
        .into_iter()
        .map(|(key, min, max)| {
            ApiVersion::default()
                .with_api_key(key as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect();
    let resp = ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(keys);
    encode(&resp, layout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::protocol::Decodable;

    fn decoded(reply: Reply) -> (i16, ApiVersionsResponse) {
        match reply {
            Reply::Send { version, body } => {
                let mut b = Bytes::from(body);
                let r = ApiVersionsResponse::decode(&mut b, version).expect("decodes");
                (version, r)
            }
            _ => panic!("ApiVersions always answers"),
        }
    }

    #[test]
    fn served_versions_answer_in_their_layout_with_only_implemented_apis() {
        for v in VERSIONS {
            let (layout, r) = decoded(answer(v, false));
            assert_eq!((layout, r.error_code), (v, 0));
            let keys: Vec<i16> = r.api_keys.iter().map(|k| k.api_key).collect();
            assert_eq!(
                keys,
                vec![
                    0, 1, 2, 3, 18, 19, 20, 37, 32, 22, 33, 44, 35, 60, 21, 10, 11, 14, 12, 13, 8,
                    9, 47, 16, 15, 42, 24, 25, 26, 28, 61, 65, 66
                ]
            );
        }
    }

    #[test]
    fn an_unknown_version_gets_unsupported_in_the_v0_layout() {
        let (layout, r) = decoded(answer(9, false));
        assert_eq!((layout, r.error_code), (0, errors::UNSUPPORTED_VERSION));
        assert_eq!(r.api_keys.len(), 33);
        let (_, r) = decoded(answer(3, true));
        let keys: Vec<i16> = r.api_keys.iter().map(|k| k.api_key).collect();
        assert_eq!(
            &keys[33..],
            &[17, 36],
            "the SASL APIs where logins are required"
        );
    }
}
