//! AlterConfigs (33) and IncrementalAlterConfigs (44) of topic resources, through
//! [`super::topic_configs`]. AlterConfigs replaces a topic's whole config set (every config
//! it does not name goes back to its default, as in Kafka); IncrementalAlterConfigs SETs or
//! DELETEs one config at a time, APPEND and SUBTRACT only touch list configs
//! (`cleanup.policy`), which can only hold `delete` here. Broker configs are read-only here:
//! INVALID_REQUEST, as Kafka answers for a config it cannot update dynamically.

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse as IncResponse;
use kafka_protocol::messages::{AlterConfigsResponse, IncrementalAlterConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use super::codes::{INVALID_CONFIG, INVALID_REQUEST};
use super::describe_configs::{topic_configs, BROKER, TOPIC};
use super::topic_configs::{options, row_changes, Change, CLEANUP_POLICY, RETENTION_MS};
use super::{config_row, duplicates, Refusal, MAX_CONFIGS, MAX_TOPICS};
use crate::connection::{encode, Reply};
use crate::topics;
use crate::wire::{Malformed, Reader};
use crate::{errors, Door};
use queenmq_protocol::kafka_topic_configs::{MAX_MESSAGE_BYTES, SEGMENT_BYTES};
use queenmq_protocol::rows;

pub const VERSIONS: std::ops::RangeInclusive<i16> = 0..=2;
pub const INCREMENTAL_VERSIONS: std::ops::RangeInclusive<i16> = 0..=1;

/// IncrementalAlterConfigs' operations.
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub kind: i8,
    pub name: String,
    /// `(config name, operation, value)`; AlterConfigs' entries are all SET.
    pub configs: Vec<(String, i8, Option<String>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterRequest {
    pub resources: Vec<Resource>,
    pub validate_only: bool,
}

/// Both requests' layout; `incremental` adds the operation byte per config.
pub fn decode(incremental: bool, r: &mut Reader) -> Result<AlterRequest, Malformed> {
    let n = r.array_len()?.unwrap_or(0);
    if n > MAX_TOPICS {
        return Err(Malformed("too many resources in one request"));
    }
    let mut resources = Vec::new();
    for _ in 0..n {
        let kind = r.i8()?;
        let name = r.string()?;
        let nc = r.array_len()?.unwrap_or(0);
        if nc > MAX_CONFIGS {
            return Err(Malformed("too many configs for one resource"));
        }
        let mut configs = Vec::new();
        for _ in 0..nc {
            let key = r.string()?;
            let op = if incremental { r.i8()? } else { SET };
            let value = r.nullable_string()?;
            r.skip_tags()?;
            configs.push((key, op, value));
        }
        r.skip_tags()?;
        resources.push(Resource {
            kind,
            name,
            configs,
        });
    }
    let validate_only = r.bool()?;
    r.skip_tags()?;
    Ok(AlterRequest {
        resources,
        validate_only,
    })
}

/// The changes one resource asks, as [`options`] reads them.
fn changes(incremental: bool, res: &Resource) -> Result<Vec<(String, Change)>, Refusal> {
    let mut out = Vec::new();
    for (name, op, value) in &res.configs {
        let change = match (*op, value) {
            (SET, Some(v)) => Change::Set(v.clone()),
            // AlterConfigs' null value is "no value": the default.
            (SET, None) if !incremental => Change::Default,
            (SET, None) => {
                return Err(Refusal::new(
                    INVALID_REQUEST,
                    format!("SET {name} without a value"),
                ))
            }
            (DELETE, _) => Change::Default,
            // `cleanup.policy` is the only list config served, and `delete` its only value:
            // appending it changes nothing, appending anything else asks for what cannot hold,
            // and subtracting `delete` would leave it empty.
            (APPEND, Some(v)) if name == CLEANUP_POLICY => Change::Set(if v.trim() == "delete" {
                "delete".into()
            } else {
                format!("delete,{v}")
            }),
            (SUBTRACT, Some(v)) if name == CLEANUP_POLICY && v.trim() != "delete" => {
                Change::Set("delete".into())
            }
            (APPEND | SUBTRACT, _) if name == CLEANUP_POLICY => {
                return Err(Refusal::new(
                    INVALID_CONFIG,
                    "cleanup.policy cannot be emptied",
                ))
            }
            (APPEND | SUBTRACT, _) => {
                return Err(Refusal::new(
                    INVALID_CONFIG,
                    format!("{name} is not a list config; APPEND and SUBTRACT need one"),
                ))
            }
            (other, _) => {
                return Err(Refusal::new(
                    INVALID_REQUEST,
                    format!("config operation {other} is not one of SET, DELETE, APPEND, SUBTRACT"),
                ))
            }
        };
        out.push((name.clone(), change));
    }
    // AlterConfigs replaces the set: what it does not name goes back to its default.
    if !incremental {
        for kept in [RETENTION_MS, MAX_MESSAGE_BYTES, SEGMENT_BYTES] {
            if !out.iter().any(|(n, _)| n == kept) {
                out.push((kept.to_owned(), Change::Default));
            }
        }
    }
    Ok(out)
}

async fn alter(
    door: &Door,
    incremental: bool,
    res: &Resource,
    validate_only: bool,
) -> Result<(), Refusal> {
    match res.kind {
        TOPIC => super::authorized(door, &[rows::CONFIGURE], errors::TOPIC_AUTHORIZATION_FAILED)?,
        BROKER => {
            super::authorized(
                door,
                &[rows::CONFIGURE],
                errors::CLUSTER_AUTHORIZATION_FAILED,
            )?;
            return Err(Refusal::new(
                INVALID_REQUEST,
                "broker configs are read-only on this broker",
            ));
        }
        other => {
            return Err(Refusal::new(
                INVALID_REQUEST,
                format!("resource type {other} is not served"),
            ))
        }
    }
    if !topics::valid_topic_name(&res.name) {
        return Err(Refusal::new(
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            format!("topic {:?} does not exist", res.name),
        ));
    }
    let changes = changes(incremental, res)?;
    let opts = options(&changes, &topic_configs(door.cfg.max_request_bytes))?;
    let row = row_changes(&changes)?;
    let queue_id = match topics::queue(door, &res.name).await {
        Ok(Some((id, _))) => id,
        Ok(None) => {
            return Err(Refusal::new(
                errors::UNKNOWN_TOPIC_OR_PARTITION,
                format!("topic '{}' does not exist", res.name),
            ))
        }
        Err(e) => return Err(Refusal::from_queen(&e)),
    };
    if validate_only {
        return Ok(());
    }
    configure(door, &res.name, opts).await?;
    rewrite_row(door, &res.name, &queue_id, &row).await
}

/// Rewrites the topic's config row with `row`'s changes, conditionally on the version read;
/// a rewrite another request got to first is read and tried again, a few times.
async fn rewrite_row(
    door: &Door,
    topic: &str,
    queue_id: &str,
    row: &[(&'static str, Option<i32>)],
) -> Result<(), Refusal> {
    if row.is_empty() {
        return Ok(());
    }
    let queen = |e: queenmq_protocol::QueenError| Refusal::from_queen(&e);
    for _ in 0..ROW_ATTEMPTS {
        let stored = config_row::get(door, topic).await.map_err(queen)?;
        let mut configs = config_row::holding(stored.as_ref(), queue_id);
        for (name, value) in row {
            configs.set(name, *value);
        }
        configs.queue = Some(queue_id.to_owned());
        let seen = stored.map(|(_, version)| version);
        if config_row::write(door, topic, &configs, seen)
            .await
            .map_err(queen)?
            .is_some()
        {
            return Ok(());
        }
    }
    Err(Refusal::new(
        errors::REQUEST_TIMED_OUT,
        format!("topic '{topic}': its configs were changed by other requests meanwhile; retry"),
    ))
}

/// Conditional rewrites of a topic's config row one request tries before it gives up.
const ROW_ATTEMPTS: usize = 4;

/// Applies options to an existing queue (a configure merges only what it names).
async fn configure(
    door: &Door,
    topic: &str,
    options: queenmq_protocol::QueueOptions,
) -> Result<(), Refusal> {
    if options.given() == 0 {
        return Ok(());
    }
    topics::create_with(door, topic, options)
        .await
        .map(|_| ())
        .map_err(|e| Refusal::from_queen(&e))
}

/// Each resource's error code, message, type and name, in request order.
type Verdict = (i16, Option<StrBytes>, i8, StrBytes);

async fn verdicts(door: &Door, incremental: bool, mut r: Reader) -> Result<Vec<Verdict>, Reply> {
    let req = decode(incremental, &mut r).map_err(|e| Reply::Close(e.to_string()))?;
    // Kafka refuses every copy of a resource named twice.
    let keys: Vec<String> = req
        .resources
        .iter()
        .map(|res| format!("{}\0{}", res.kind, res.name))
        .collect();
    let twice = duplicates(&keys);
    let mut out = Vec::new();
    for (res, key) in req.resources.iter().zip(&keys) {
        let v = if twice.contains(key) {
            Err(Refusal::new(
                INVALID_REQUEST,
                format!("resource '{}' is named more than once", res.name),
            ))
        } else {
            alter(door, incremental, res, req.validate_only).await
        };
        let (code, message) = match v {
            Ok(()) => (errors::NONE, None),
            Err(Refusal { code, message }) => (code, Some(StrBytes::from_string(message))),
        };
        out.push((
            code,
            message,
            res.kind,
            StrBytes::from_string(res.name.clone()),
        ));
    }
    Ok(out)
}

pub async fn answer(door: &Door, version: i16, r: Reader) -> Reply {
    let out = match verdicts(door, false, r).await {
        Ok(v) => v,
        Err(reply) => return reply,
    };
    let out = out
        .into_iter()
        .map(|(code, message, kind, name)| {
            AlterConfigsResourceResponse::default()
                .with_error_code(code)
                .with_error_message(message)
                .with_resource_type(kind)
                .with_resource_name(name)
        })
        .collect();
    encode(
        &AlterConfigsResponse::default().with_responses(out),
        version,
    )
}

pub async fn answer_incremental(door: &Door, version: i16, r: Reader) -> Reply {
    let out = match verdicts(door, true, r).await {
        Ok(v) => v,
        Err(reply) => return reply,
    };
    let out = out
        .into_iter()
        .map(|(code, message, kind, name)| {
            IncResponse::default()
                .with_error_code(code)
                .with_error_message(message)
                .with_resource_type(kind)
                .with_resource_name(name)
        })
        .collect();
    encode(
        &IncrementalAlterConfigsResponse::default().with_responses(out),
        version,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource as IncResource, AlterableConfig as IncConfig,
    };
    use kafka_protocol::messages::{AlterConfigsRequest, IncrementalAlterConfigsRequest};
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn every_served_version_decodes_what_clients_encode() {
        let plain = AlterConfigsRequest::default()
            .with_resources(vec![AlterConfigsResource::default()
                .with_resource_type(TOPIC)
                .with_resource_name(StrBytes::from_static_str("t"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(StrBytes::from_static_str("retention.ms"))
                    .with_value(Some(StrBytes::from_static_str("1000")))])])
            .with_validate_only(true);
        for v in VERSIONS {
            let mut buf = BytesMut::new();
            plain.encode(&mut buf, v).expect("encodes");
            let mut r = Reader::new(buf.freeze(), v >= 2);
            let got = decode(false, &mut r).expect("decodes");
            assert_eq!(r.remaining(), 0, "v{v}");
            assert!(got.validate_only);
            assert_eq!(
                got.resources[0].configs,
                vec![("retention.ms".into(), SET, Some("1000".into()))]
            );
        }
        let inc =
            IncrementalAlterConfigsRequest::default().with_resources(vec![IncResource::default()
                .with_resource_type(TOPIC)
                .with_resource_name(StrBytes::from_static_str("t"))
                .with_configs(vec![IncConfig::default()
                    .with_name(StrBytes::from_static_str("retention.ms"))
                    .with_config_operation(DELETE)
                    .with_value(None)])]);
        for v in INCREMENTAL_VERSIONS {
            let mut buf = BytesMut::new();
            inc.encode(&mut buf, v).expect("encodes");
            let mut r = Reader::new(buf.freeze(), v >= 1);
            let got = decode(true, &mut r).expect("decodes");
            assert_eq!(r.remaining(), 0, "v{v}");
            assert_eq!(
                got.resources[0].configs,
                vec![("retention.ms".into(), DELETE, None)]
            );
        }
    }

    #[test]
    fn alter_configs_resets_what_it_does_not_name_and_lists_take_only_delete() {
        let res = |configs| Resource {
            kind: TOPIC,
            name: "t".into(),
            configs,
        };
        let got = changes(
            false,
            &res(vec![("cleanup.policy".into(), SET, Some("delete".into()))]),
        );
        let defaults: Vec<(String, Change)> = [RETENTION_MS, MAX_MESSAGE_BYTES, SEGMENT_BYTES]
            .iter()
            .map(|n| (n.to_string(), Change::Default))
            .collect();
        assert_eq!(
            got.as_ref().map(|c| c[1..].to_vec()),
            Ok(defaults),
            "retention.ms and the config row's two go back to their defaults"
        );
        let row = got.and_then(|c| row_changes(&c));
        assert_eq!(
            row,
            Ok(vec![(MAX_MESSAGE_BYTES, None), (SEGMENT_BYTES, None)])
        );
        let named = changes(
            false,
            &res(vec![("segment.bytes".into(), SET, Some("20000".into()))]),
        );
        assert_eq!(
            named.and_then(|c| row_changes(&c)),
            Ok(vec![
                (SEGMENT_BYTES, Some(20_000)),
                (MAX_MESSAGE_BYTES, None)
            ])
        );
        let append = res(vec![(
            "cleanup.policy".into(),
            APPEND,
            Some("compact".into()),
        )]);
        let opts = changes(true, &append).and_then(|c| options(&c, &topic_configs(1 << 20)));
        assert_eq!(opts.map_err(|r| r.code), Err(INVALID_CONFIG));
        let subtract = res(vec![(
            "cleanup.policy".into(),
            SUBTRACT,
            Some("delete".into()),
        )]);
        assert_eq!(
            changes(true, &subtract).map_err(|r| r.code),
            Err(INVALID_CONFIG)
        );
        let bad_op = res(vec![("retention.ms".into(), 9, Some("1".into()))]);
        assert_eq!(
            changes(true, &bad_op).map_err(|r| r.code),
            Err(INVALID_REQUEST)
        );
    }
}
