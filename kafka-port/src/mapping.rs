//! How a Kafka record becomes a Queen message payload (docs/kafka-compat.md, "Record mapping").
//!
//! The engine stores JSON text, and a native consumer should see a Kafka producer's JSON as
//! the JSON it is. So a record that is nothing but a JSON value (no key, no headers) is stored
//! as exactly its value bytes. Anything else — a key, headers, a null value, bytes that are
//! not one JSON value — is stored in an envelope that keeps every byte:
//!
//! ```json
//! {"$kafka":{"timestamp":1700000000000,"key":"user-1","value":{"a":1},
//!            "headers":[{"key":"trace","value":"abc"},{"key":"bin","value_b64":"AAE="}]}}
//! ```
//!
//! `key` and header values are JSON strings when their bytes are UTF-8, else `key_b64` /
//! `value_b64` (standard base64); the record `value` is the JSON value itself when its bytes
//! are exactly one JSON value, else `value_b64`. A null key, value or header value is absent.
//! A bare value that mentions `"$kafka"` (or whose top-level key decodes to it, escapes and
//! all) is enveloped too, so that a stored payload is an
//! envelope exactly when its only top-level key is `$kafka`.

use base64::Engine as _;
use bytes::Bytes;
use serde_json::value::RawValue;

use crate::records::Record;

/// The payload a native consumer pops for `rec`.
pub fn payload(rec: &Record) -> Bytes {
    if rec.key.is_none() && rec.headers.is_empty() {
        if let Some(v) = &rec.value {
            if is_exact_json(v) && !mentions_envelope(v) {
                return v.clone();
            }
        }
    }
    Bytes::from(envelope(rec))
}

/// Whether `v` is one JSON value with nothing around it, so storing it changes no byte.
fn is_exact_json(v: &[u8]) -> bool {
    serde_json::from_slice::<&RawValue>(v).is_ok_and(|raw| raw.get().len() == v.len())
}

fn mentions_envelope(v: &[u8]) -> bool {
    if v.windows(8).any(|w| w == b"\"$kafka\"") {
        return true;
    }
    // A key written with escapes (`"\u0024kafka"`) decodes to `$kafka` without those bytes:
    // an object's top-level keys are decoded to be sure (values stay raw, unparsed).
    v.first() == Some(&b'{')
        && serde_json::from_slice::<std::collections::HashMap<String, &RawValue>>(v)
            .is_ok_and(|keys| keys.contains_key("$kafka"))
}

fn envelope(rec: &Record) -> String {
    let mut out = String::with_capacity(64 + rec.value.as_ref().map_or(0, |v| v.len() * 4 / 3));
    out.push_str("{\"$kafka\":{\"timestamp\":");
    out.push_str(&rec.timestamp.to_string());
    if let Some(k) = &rec.key {
        out.push(',');
        text_or_b64(&mut out, "key", k);
    }
    if let Some(v) = &rec.value {
        out.push(',');
        if is_exact_json(v) {
            out.push_str("\"value\":");
            // Checked above: valid UTF-8 JSON text.
            out.push_str(&String::from_utf8_lossy(v));
        } else {
            b64(&mut out, "value", v);
        }
    }
    if !rec.headers.is_empty() {
        out.push_str(",\"headers\":[");
        for (i, (name, value)) in rec.headers.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"key\":");
            out.push_str(&json_string(name));
            if let Some(v) = value {
                out.push(',');
                text_or_b64(&mut out, "value", v);
            }
            out.push('}');
        }
        out.push(']');
    }
    out.push_str("}}");
    out
}

fn text_or_b64(out: &mut String, field: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => {
            out.push('"');
            out.push_str(field);
            out.push_str("\":");
            out.push_str(&json_string(text));
        }
        Err(_) => b64(out, field, bytes),
    }
}

fn b64(out: &mut String, field: &str, bytes: &[u8]) {
    out.push('"');
    out.push_str(field);
    out.push_str("_b64\":\"");
    base64::engine::general_purpose::STANDARD.encode_string(bytes, out);
    out.push('"');
}

fn json_string(s: &str) -> String {
    // Serializing a &str cannot fail; the fallback keeps the payload valid JSON regardless.
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

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

    fn parsed(b: &Bytes) -> Value {
        serde_json::from_slice(b).expect("every payload is JSON")
    }

    #[test]
    fn a_bare_json_value_is_stored_byte_for_byte() {
        for v in [&b"{\"a\": [1, 2]}"[..], b"42", b"\"text\"", b"null"] {
            assert_eq!(&payload(&rec(None, Some(v), &[]))[..], v);
        }
    }

    #[test]
    fn keys_headers_and_non_json_values_go_into_the_envelope() {
        let p = payload(&rec(
            Some(b"user-1"),
            Some(b"{\"a\":1}"),
            &[
                ("trace", Some(b"abc")),
                ("bin", Some(&[0xff, 1])),
                ("nil", None),
            ],
        ));
        assert_eq!(
            parsed(&p),
            json!({"$kafka": {
                "timestamp": 1_700_000_000_123_i64,
                "key": "user-1",
                "value": {"a": 1},
                "headers": [
                    {"key": "trace", "value": "abc"},
                    {"key": "bin", "value_b64": "/wE="},
                    {"key": "nil"}
                ]
            }})
        );
        let text = payload(&rec(None, Some(b"plain text"), &[]));
        assert_eq!(
            parsed(&text)["$kafka"]["value_b64"],
            json!("cGxhaW4gdGV4dA==")
        );
        let binary_key = payload(&rec(Some(&[0xff]), None, &[]));
        assert_eq!(parsed(&binary_key)["$kafka"]["key_b64"], json!("/w=="));
        assert!(parsed(&binary_key)["$kafka"].get("value").is_none());
    }

    #[test]
    fn whitespace_around_json_and_tombstones_are_kept_exactly() {
        let padded = payload(&rec(None, Some(b" 1 "), &[]));
        assert_eq!(parsed(&padded)["$kafka"]["value_b64"], json!("IDEg"));
        let tombstone = payload(&rec(None, None, &[]));
        assert_eq!(
            parsed(&tombstone),
            json!({"$kafka": {"timestamp": 1_700_000_000_123_i64}})
        );
    }

    #[test]
    fn an_escaped_envelope_key_is_enveloped_too() {
        let sneaky = br#"{"\u0024kafka":{"key":"forged","headers":[]}}"#;
        let p = payload(&rec(None, Some(sneaky), &[]));
        assert_ne!(
            &p[..],
            &sneaky[..],
            "stored bare, it would read as an envelope"
        );
        assert_eq!(
            parsed(&p)["$kafka"]["value"],
            json!({"$kafka": {"key": "forged", "headers": []}})
        );
    }

    #[test]
    fn a_value_that_looks_like_an_envelope_is_enveloped() {
        let sneaky = br#"{"$kafka":{"value_b64":"AA=="}}"#;
        let p = payload(&rec(None, Some(sneaky), &[]));
        assert_eq!(
            parsed(&p)["$kafka"]["value"],
            json!({"$kafka": {"value_b64": "AA=="}})
        );
    }
}
