//! How a stored payload becomes a Kafka record again: the inverse of [`crate::mapping`].
//!
//! A payload that is a `$kafka` envelope (its only top-level key) gives back the key, value,
//! headers and timestamp the producer sent, byte for byte. Any other payload (a native push,
//! or a Kafka record that was stored bare) is the record's value, with no key, no headers and
//! the store time as its timestamp.

use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::records::Record;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    #[serde(rename = "$kafka", borrow)]
    kafka: Inner<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Inner<'a> {
    timestamp: i64,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    key_b64: Option<String>,
    /// Kept raw: the exact JSON bytes the producer sent (a JSON `null` value is a value).
    #[serde(default, borrow, deserialize_with = "present")]
    value: Option<&'a RawValue>,
    #[serde(default)]
    value_b64: Option<String>,
    #[serde(default)]
    headers: Vec<Header>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    key: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    value_b64: Option<String>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

fn bytes_of(text: Option<String>, b64: Option<String>) -> Option<Option<Bytes>> {
    match (text, b64) {
        (Some(t), None) => Some(Some(Bytes::from(t))),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .ok()
            .map(|v| Some(Bytes::from(v))),
        (None, None) => Some(None),
        (Some(_), Some(_)) => None,
    }
}

fn from_envelope(payload: &Bytes) -> Option<Record> {
    if payload.first() != Some(&b'{') {
        return None;
    }
    let env: Envelope<'_> = serde_json::from_slice(payload).ok()?;
    let k = env.kafka;
    let key = bytes_of(k.key, k.key_b64)?;
    let value = match (k.value, k.value_b64) {
        (Some(raw), None) => Some(payload.slice_ref(raw.get().as_bytes())),
        (v, b64) => bytes_of(v.map(|_| String::new()), b64)?,
    };
    let headers = k
        .headers
        .into_iter()
        .map(|h| Some((h.key, bytes_of(h.value, h.value_b64)?)))
        .collect::<Option<Vec<_>>>()?;
    Some(Record {
        timestamp: k.timestamp,
        key,
        value,
        headers,
    })
}

/// The record a stored payload stands for; `stored_ms` is its store time.
pub fn record(payload: &Bytes, stored_ms: i64) -> Record {
    from_envelope(payload).unwrap_or_else(|| Record {
        timestamp: stored_ms,
        key: None,
        value: Some(payload.clone()),
        headers: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping;

    fn rec(key: Option<&[u8]>, value: Option<&[u8]>, headers: &[(&str, Option<&[u8]>)]) -> Record {
        Record {
            timestamp: 1_700_000_000_123,
            key: key.map(Bytes::copy_from_slice),
            value: value.map(Bytes::copy_from_slice),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.map(Bytes::copy_from_slice)))
                .collect(),
        }
    }

    #[test]
    fn every_produced_record_comes_back_as_it_was_sent() {
        let cases = [
            rec(
                Some(b"user-1"),
                Some(b"{\"a\": 1}"),
                &[
                    ("t", Some(b"abc")),
                    ("bin", Some(&[0xff, 0])),
                    ("nil", None),
                ],
            ),
            rec(None, Some(b"plain text"), &[]),
            rec(Some(&[0xff]), None, &[]),
            rec(Some(b"k"), Some(b"null"), &[]),
            rec(None, None, &[]),
            rec(None, Some(br#"{"$kafka":{"value_b64":"AA=="}}"#), &[]),
            rec(None, Some(b" 1 "), &[]),
        ];
        for r in cases {
            let stored = mapping::payload(&r);
            assert_eq!(record(&stored, 5), r, "{stored:?}");
        }
    }

    #[test]
    fn bare_payloads_are_values_stamped_with_their_store_time() {
        let bare = mapping::payload(&rec(None, Some(b"{\"a\":1}"), &[]));
        let back = record(&bare, 42);
        assert_eq!(
            (back.timestamp, back.key, back.value),
            (42, None, Some(bare))
        );
        // A native payload that only looks like an envelope stays a value.
        let native = Bytes::from_static(br#"{"$kafka":{"timestamp":1,"extra":true}}"#);
        assert_eq!(record(&native, 7).value, Some(native));
        // Each rule of docs/kafka-compat.md's envelope list, broken alone.
        for text in [
            r#"{"$kafka":{"key":"k","value":1}}"#,
            r#"{"$kafka":{"timestamp":"1","value":1}}"#,
            r#"{"$kafka":{"timestamp":1.5,"value":1}}"#,
            r#"{"$kafka":{"timestamp":1,"value":1},"other":2}"#,
            r#"{"$kafka":{"timestamp":1,"key":"k","key_b64":"aw=="}}"#,
            r#"{"$kafka":{"timestamp":1,"value":1,"value_b64":"AA=="}}"#,
            r#"{"$kafka":{"timestamp":1,"headers":[{"key":"h","value":"a","value_b64":"AA=="}]}}"#,
            r#"{"$kafka":{"timestamp":1,"headers":[{"key":"h","x":1}]}}"#,
            r#"{"$kafka":{"timestamp":1,"key":1}}"#,
            r#"{"$kafka":{"timestamp":1,"value_b64":"not base64!"}}"#,
        ] {
            let native = Bytes::from(text);
            let back = record(&native, 7);
            assert_eq!((back.timestamp, back.key), (7, None), "{text}");
            assert_eq!(back.value, Some(native), "{text}");
        }
        let fine = Bytes::from_static(br#"{"$kafka":{"timestamp":1,"key":"k","value":1}}"#);
        assert_eq!(record(&fine, 7).key.as_deref(), Some(&b"k"[..]));
    }
}
