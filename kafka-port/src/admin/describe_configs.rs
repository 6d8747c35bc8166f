//! DescribeConfigs: every topic and broker config a Kafka 3.7 broker lists, with the value
//! that holds here. `retention.ms` comes from the queue's options, `max.message.bytes` and
//! `segment.bytes` from the topic's config row ([`super::config_row`]; source
//! DYNAMIC_TOPIC_CONFIG when set); these and `cleanup.policy` are alterable
//! ([`super::topic_configs`]), every other config is read-only from the default source (an
//! AlterConfigs that sends it back unchanged is accepted; `message.format.version` shows the
//! v2 format that always holds, whatever was set). A resource is never answered with an empty
//! config list: clients and tools take that for a broken broker.

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::DescribeConfigsResponse;
use kafka_protocol::protocol::StrBytes;

use queenmq_protocol::kafka_topic_configs::{TopicConfigs, MAX_MESSAGE_BYTES, SEGMENT_BYTES};
use queenmq_protocol::QueueSettings;

use super::topic_configs::{retention_ms, CLEANUP_POLICY, RETENTION_MS};
use super::{config_row, Refusal, MAX_CONFIGS, MAX_TOPICS};
use crate::connection::{encode, Reply};
use crate::topics;
use crate::wire::{Malformed, Reader};
use crate::{errors, Door};

pub const VERSIONS: std::ops::RangeInclusive<i16> = 1..=4;

pub const TOPIC: i8 = 2;
pub const BROKER: i8 = 4;
/// Kafka's `ConfigSource.DEFAULT_CONFIG`.
const DEFAULT_SOURCE: i8 = 5;
/// Kafka's `ConfigSource.DYNAMIC_TOPIC_CONFIG`: set on the topic (here, its queue options).
const TOPIC_SOURCE: i8 = 1;
const INVALID_REQUEST: i16 = super::codes::INVALID_REQUEST;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub kind: i8,
    pub name: String,
    /// `None`: every config.
    pub keys: Option<Vec<String>>,
}

pub fn decode(version: i16, r: &mut Reader) -> Result<Vec<Resource>, Malformed> {
    let n = r.array_len()?.unwrap_or(0);
    if n > MAX_TOPICS {
        return Err(Malformed("too many resources in one request"));
    }
    let mut out = Vec::new();
    for _ in 0..n {
        let kind = r.i8()?;
        let name = r.string()?;
        let keys = match r.array_len()? {
            None => None,
            Some(k) if k > MAX_CONFIGS => return Err(Malformed("too many config keys")),
            Some(k) => {
                let mut keys = Vec::new();
                for _ in 0..k {
                    keys.push(r.string()?);
                }
                Some(keys)
            }
        };
        r.skip_tags()?;
        out.push(Resource { kind, name, keys });
    }
    let _include_synonyms = r.bool()?;
    if version >= 3 {
        let _include_documentation = r.bool()?;
    }
    r.skip_tags()?;
    Ok(out)
}

/// Kafka's config types (`ConfigEntry.ConfigType`), sent from v3.
const BOOLEAN: i8 = 1;
const STRING: i8 = 2;
const INT: i8 = 3;
const LONG: i8 = 5;
const DOUBLE: i8 = 6;
const LIST: i8 = 7;

const FOREVER: &str = "9223372036854775807";

/// Every topic config of Kafka 3.7 with the value that holds here. Where Queen behaves as
/// Kafka's default, the default; where it does not, what it does: nothing is deleted unless
/// the queue's own retention is set (retention.ms -1), records are never compacted, and one
/// record is bounded by the request size.
pub fn topic_configs(max_request_bytes: usize) -> Vec<(&'static str, String, i8)> {
    let fixed: &[(&str, &str, i8)] = &[
        ("cleanup.policy", "delete", LIST),
        ("compression.type", "producer", STRING),
        ("delete.retention.ms", "86400000", LONG),
        ("file.delete.delay.ms", "60000", LONG),
        ("flush.messages", FOREVER, LONG),
        ("flush.ms", FOREVER, LONG),
        ("follower.replication.throttled.replicas", "", LIST),
        ("index.interval.bytes", "4096", INT),
        ("leader.replication.throttled.replicas", "", LIST),
        ("local.retention.bytes", "-2", LONG),
        ("local.retention.ms", "-2", LONG),
        ("max.compaction.lag.ms", FOREVER, LONG),
        ("message.downconversion.enable", "true", BOOLEAN),
        ("message.format.version", "3.0-IV1", STRING),
        ("message.timestamp.after.max.ms", FOREVER, LONG),
        ("message.timestamp.before.max.ms", FOREVER, LONG),
        ("message.timestamp.difference.max.ms", FOREVER, LONG),
        ("message.timestamp.type", "CreateTime", STRING),
        ("min.cleanable.dirty.ratio", "0.5", DOUBLE),
        ("min.compaction.lag.ms", "0", LONG),
        ("min.insync.replicas", "1", INT),
        ("preallocate", "false", BOOLEAN),
        ("remote.storage.enable", "false", BOOLEAN),
        ("retention.bytes", "-1", LONG),
        ("retention.ms", "-1", LONG),
        ("segment.bytes", "1073741824", INT),
        ("segment.index.bytes", "10485760", INT),
        ("segment.jitter.ms", "0", LONG),
        ("segment.ms", "604800000", LONG),
        ("unclean.leader.election.enable", "false", BOOLEAN),
    ];
    let mut out: Vec<(&'static str, String, i8)> = fixed
        .iter()
        .map(|(k, v, t)| (*k, (*v).to_owned(), *t))
        .collect();
    out.push(("max.message.bytes", max_request_bytes.to_string(), INT));
    out.sort_by(|a, b| a.0.cmp(b.0));
    out
}

/// A topic's configs with what its queue's options and its config row set: `(name, value,
/// type, source, read-only)`.
pub fn topic_entries(
    max_request_bytes: usize,
    s: &QueueSettings,
    row: &TopicConfigs,
) -> Vec<(&'static str, String, i8, i8, bool)> {
    let from_row = |k, v, t, set: Option<i32>| match set {
        Some(n) => (k, n.to_string(), t, TOPIC_SOURCE, false),
        None => (k, v, t, DEFAULT_SOURCE, false),
    };
    topic_configs(max_request_bytes)
        .into_iter()
        .map(|(k, v, t)| match k {
            RETENTION_MS => match retention_ms(s) {
                Some(ms) => (k, ms.to_string(), t, TOPIC_SOURCE, false),
                None => (k, v, t, DEFAULT_SOURCE, false),
            },
            CLEANUP_POLICY => (k, v, t, DEFAULT_SOURCE, false),
            MAX_MESSAGE_BYTES => from_row(k, v, t, row.max_message_bytes),
            SEGMENT_BYTES => from_row(k, v, t, row.segment_bytes),
            _ => (k, v, t, DEFAULT_SOURCE, true),
        })
        .collect()
}

/// The broker configs clients read: the ones whose value follows from this broker.
pub fn broker_configs(
    node_id: i32,
    default_partitions: u32,
    max_request_bytes: usize,
) -> Vec<(&'static str, String, i8)> {
    vec![
        ("auto.create.topics.enable", "true".into(), BOOLEAN),
        ("broker.id", node_id.to_string(), INT),
        ("default.replication.factor", "1".into(), INT),
        ("delete.topic.enable", "true".into(), BOOLEAN),
        ("log.retention.ms", "-1".into(), LONG),
        ("message.max.bytes", max_request_bytes.to_string(), INT),
        ("min.insync.replicas", "1".into(), INT),
        ("num.partitions", default_partitions.to_string(), INT),
        ("offsets.topic.replication.factor", "1".into(), INT),
        (
            "socket.request.max.bytes",
            max_request_bytes.to_string(),
            INT,
        ),
    ]
}

fn entries(
    version: i16,
    all: Vec<(&'static str, String, i8, i8, bool)>,
    keys: &Option<Vec<String>>,
) -> Vec<DescribeConfigsResourceResult> {
    all.into_iter()
        .filter(|c| keys.as_ref().is_none_or(|ks| ks.iter().any(|w| w == c.0)))
        .map(|(k, v, t, source, read_only)| {
            DescribeConfigsResourceResult::default()
                .with_name(StrBytes::from_static_str(k))
                .with_value(Some(StrBytes::from_string(v)))
                .with_read_only(read_only)
                .with_config_source(source)
                .with_config_type(if version >= 3 { t } else { 0 })
        })
        .collect()
}

/// Broker configs are all read-only and from the default source.
fn fixed(all: Vec<(&'static str, String, i8)>) -> Vec<(&'static str, String, i8, i8, bool)> {
    all.into_iter()
        .map(|(k, v, t)| (k, v, t, DEFAULT_SOURCE, true))
        .collect()
}

async fn describe(
    door: &Door,
    version: i16,
    res: &Resource,
) -> Result<Vec<DescribeConfigsResourceResult>, Refusal> {
    match res.kind {
        TOPIC => {
            if !topics::valid_topic_name(&res.name) {
                return Err(Refusal::new(
                    errors::INVALID_TOPIC_EXCEPTION,
                    format!("topic name {:?} is not legal", res.name),
                ));
            }
            // The queue's options: one row, not a scan of every partition of the queue.
            match topics::queue(door, &res.name).await {
                Ok(Some((queue_id, s))) => {
                    let row = config_row::get(door, &res.name)
                        .await
                        .map_err(|e| Refusal::from_queen(&e))?;
                    let row = config_row::holding(row.as_ref(), &queue_id);
                    Ok(entries(
                        version,
                        topic_entries(door.cfg.max_request_bytes, &s, &row),
                        &res.keys,
                    ))
                }
                Ok(None) => Err(Refusal::new(
                    errors::UNKNOWN_TOPIC_OR_PARTITION,
                    format!("topic '{}' does not exist", res.name),
                )),
                Err(e) => Err(Refusal::from_queen(&e)),
            }
        }
        BROKER if res.name.is_empty() || res.name == door.cfg.node_id.to_string() => Ok(entries(
            version,
            fixed(broker_configs(
                door.cfg.node_id,
                door.cfg.default_partitions,
                door.cfg.max_request_bytes,
            )),
            &res.keys,
        )),
        BROKER => Err(Refusal::new(
            INVALID_REQUEST,
            format!("broker {} is not this broker", res.name),
        )),
        other => Err(Refusal::new(
            INVALID_REQUEST,
            format!("resource type {other} is not served"),
        )),
    }
}

pub async fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let resources = match decode(version, &mut r) {
        Ok(res) => res,
        Err(e) => return Reply::Close(e.to_string()),
    };
    let mut out = Vec::new();
    for res in &resources {
        let base = DescribeConfigsResult::default()
            .with_resource_type(res.kind)
            .with_resource_name(StrBytes::from_string(res.name.clone()));
        out.push(match describe(door, version, res).await {
            Ok(configs) => base.with_configs(configs),
            Err(Refusal { code, message }) => base
                .with_error_code(code)
                .with_error_message(Some(StrBytes::from_string(message))),
        });
    }
    encode(
        &DescribeConfigsResponse::default().with_results(out),
        version,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::DescribeConfigsRequest as KReq;
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn every_served_version_decodes_what_clients_encode() {
        let req = KReq::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(TOPIC)
                .with_resource_name(StrBytes::from_static_str("t"))
                .with_configuration_keys(Some(vec![StrBytes::from_static_str("retention.ms")])),
            DescribeConfigsResource::default()
                .with_resource_type(BROKER)
                .with_resource_name(StrBytes::from_static_str("0"))
                .with_configuration_keys(None),
        ]);
        for v in VERSIONS {
            let mut buf = BytesMut::new();
            req.encode(&mut buf, v).expect("encodes");
            let mut r = Reader::new(buf.freeze(), v >= 4);
            let got = decode(v, &mut r).expect("decodes");
            assert_eq!(r.remaining(), 0, "v{v}");
            assert_eq!(got[0].keys, Some(vec!["retention.ms".to_owned()]), "v{v}");
            assert_eq!((got[1].kind, got[1].keys.is_none()), (BROKER, true), "v{v}");
        }
    }

    #[test]
    fn every_topic_config_is_listed_once_and_keys_filter() {
        let all = topic_configs(1 << 20);
        assert_eq!(all.len(), 31);
        let names: std::collections::HashSet<_> = all.iter().map(|c| c.0).collect();
        assert_eq!(names.len(), all.len());
        let max = all.iter().find(|c| c.0 == "max.message.bytes");
        assert_eq!(max.map(|c| c.1.as_str()), Some("1048576"));
        let s = crate::admin::topic_configs::tests::settings();
        let one = entries(
            4,
            topic_entries(1 << 20, &s, &TopicConfigs::default()),
            &Some(vec!["retention.ms".into(), "nope".into()]),
        );
        assert_eq!(one.len(), 1);
        assert!(!one[0].read_only, "retention.ms is alterable");
        assert_eq!(one[0].config_source, DEFAULT_SOURCE);
        let set = QueueSettings {
            retention_enabled: true,
            retention_seconds: 60,
            ..s
        };
        let one = entries(
            4,
            topic_entries(1 << 20, &set, &TopicConfigs::default()),
            &Some(vec!["retention.ms".into()]),
        );
        assert_eq!(one[0].value.as_deref(), Some("60000"));
        assert_eq!(one[0].config_source, TOPIC_SOURCE);
        let row = TopicConfigs {
            max_message_bytes: Some(10_000),
            ..TopicConfigs::default()
        };
        let both = entries(
            4,
            topic_entries(1 << 20, &set, &row),
            &Some(vec!["max.message.bytes".into(), "segment.bytes".into()]),
        );
        let shown: Vec<_> = both
            .iter()
            .map(|c| {
                (
                    c.value.as_deref().map(|v| v.to_string()),
                    c.config_source,
                    c.read_only,
                )
            })
            .collect();
        assert_eq!(
            shown,
            vec![
                (Some("10000".into()), TOPIC_SOURCE, false),
                (Some("1073741824".into()), DEFAULT_SOURCE, false),
            ]
        );
    }
}
