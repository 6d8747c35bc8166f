//! DeleteTopics: a queue delete per topic, then its partition floor and config row.

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use queenmq_protocol::{Command, Outcome};
use uuid::Uuid;

use super::codes::INVALID_REQUEST;
use super::{config_row, duplicates, floor, Refusal, MAX_TOPICS};
use crate::connection::{encode, Reply};
use crate::topics::{self, unexpected};
use crate::wire::{Malformed, Reader};
use crate::{errors, Door};
use queenmq_protocol::rows;

/// v1..=v6 (v0 differs only by the missing throttle time; no current client sends it).
pub const VERSIONS: std::ops::RangeInclusive<i16> = 1..=6;

/// One topic a request names: from v6 a topic may be named by id only, and topics have no
/// ids here, so such an entry matches nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    Name(String),
    Id([u8; 16]),
}

pub fn decode(version: i16, r: &mut Reader) -> Result<Vec<Named>, Malformed> {
    let n = r.array_len()?.unwrap_or(0);
    if n > MAX_TOPICS {
        return Err(Malformed("too many topics in one request"));
    }
    let mut names = Vec::new();
    for _ in 0..n {
        if version >= 6 {
            let name = r.nullable_string()?;
            let id = r.uuid()?;
            r.skip_tags()?;
            names.push(name.map_or(Named::Id(id), Named::Name));
        } else {
            names.push(Named::Name(r.string()?));
        }
    }
    let _timeout_ms = r.i32()?;
    r.skip_tags()?;
    Ok(names)
}

async fn delete(door: &Door, name: &str) -> Result<(), Refusal> {
    // Deleting a queue is an admin's, as over HTTP.
    super::authorized(
        door,
        &[rows::DELETE_QUEUE],
        errors::TOPIC_AUTHORIZATION_FAILED,
    )?;
    if !topics::valid_topic_name(name) {
        return Err(Refusal::new(
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            format!("topic {name:?} does not exist"),
        ));
    }
    let cmd = Command::DeleteQueue {
        queue: name.to_owned(),
    };
    let existed = match door.bus.call(door.ctx.clone(), cmd).await {
        Ok(Outcome::Deleted(d)) => d.existed,
        Ok(other) => return Err(Refusal::from_queen(&unexpected(&other))),
        Err(e) => return Err(Refusal::from_queen(&e)),
    };
    // Cleared even when the queue was gone already: a floor or config row must not outlive
    // its queue.
    floor::clear(door, name)
        .await
        .map_err(|e| Refusal::from_queen(&e))?;
    config_row::clear(door, name)
        .await
        .map_err(|e| Refusal::from_queen(&e))?;
    if !existed {
        return Err(Refusal::new(
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            format!("topic '{name}' does not exist"),
        ));
    }
    Ok(())
}

pub async fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let asked = match decode(version, &mut r) {
        Ok(n) => n,
        Err(e) => return Reply::Close(e.to_string()),
    };
    let names: Vec<String> = asked
        .iter()
        .filter_map(|n| match n {
            Named::Name(s) => Some(s.clone()),
            Named::Id(_) => None,
        })
        .collect();
    let twice = duplicates(&names);
    let mut out = Vec::new();
    for named in &asked {
        let (base, verdict) = match named {
            Named::Id(id) => (
                DeletableTopicResult::default()
                    .with_name(None)
                    .with_topic_id(Uuid::from_bytes(*id)),
                Err(Refusal::new(
                    errors::UNKNOWN_TOPIC_ID,
                    "topics have no ids on this broker; name the topic",
                )),
            ),
            Named::Name(name) => (
                DeletableTopicResult::default()
                    .with_name(Some(TopicName(StrBytes::from_string(name.clone())))),
                if twice.contains(name) {
                    Err(Refusal::new(
                        INVALID_REQUEST,
                        format!("topic '{name}' is named more than once"),
                    ))
                } else {
                    delete(door, name).await
                },
            ),
        };
        out.push(match verdict {
            Ok(()) => base,
            Err(Refusal { code, message }) => base
                .with_error_code(code)
                .with_error_message((version >= 5).then(|| StrBytes::from_string(message))),
        });
    }
    encode(
        &DeleteTopicsResponse::default().with_responses(out),
        version,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::DeleteTopicsRequest as KReq;
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn every_served_version_decodes_what_clients_encode() {
        for v in VERSIONS {
            let req = if v >= 6 {
                KReq::default().with_topics(vec![
                    DeleteTopicState::default()
                        .with_name(Some(TopicName(StrBytes::from_static_str("a")))),
                    DeleteTopicState::default(),
                ])
            } else {
                KReq::default().with_topic_names(vec![
                    TopicName(StrBytes::from_static_str("a")),
                    TopicName(StrBytes::from_static_str("")),
                ])
            };
            let mut buf = BytesMut::new();
            req.with_timeout_ms(1000)
                .encode(&mut buf, v)
                .expect("encodes");
            let mut r = Reader::new(buf.freeze(), v >= 4);
            let got = decode(v, &mut r).expect("decodes");
            assert_eq!(r.remaining(), 0, "v{v}");
            let second = if v >= 6 {
                Named::Id([0; 16])
            } else {
                Named::Name(String::new())
            };
            assert_eq!(got, vec![Named::Name("a".into()), second], "v{v}");
        }
    }
}
