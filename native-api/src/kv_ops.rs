//! Reading the KV ops of a call (spec §2.13) and of a transaction's `kv` rider: every name,
//! number and size a client sends is bounded here, before the engine sees it.

use std::collections::HashSet;

use queenmq_protocol::limits::{
    DEFAULT_KV_PREFIX_LIMIT, MAX_KV_GET_MANY_KEYS, MAX_KV_KEY_BYTES, MAX_KV_OPS,
    MAX_KV_PREFIX_LIMIT, MAX_KV_TTL_SECONDS, MAX_KV_VALUE_BYTES,
};
use queenmq_protocol::{KvExpiry, KvOp, READ_ONLY_NAMESPACES};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::capped::{self, Capped};
use crate::kv::KvApiError;

#[derive(Deserialize)]
struct Wrapped<'a> {
    #[serde(borrow, default)]
    operations: Option<Capped<&'a RawValue>>,
}

/// The parts of an op that may be big, looked at before the op is parsed into a tree.
#[derive(Deserialize)]
struct Sizes<'a> {
    #[serde(default)]
    keys: Option<Capped<IgnoredAny>>,
    #[serde(borrow, default)]
    value: Option<&'a RawValue>,
}

/// The ops of a call body (a bare array, or `{"operations": [...]}`), each parsed into a tree
/// only once the list is within [`MAX_KV_OPS`], its `keys` within [`MAX_KV_GET_MANY_KEYS`] and
/// its `value` text near [`MAX_KV_VALUE_BYTES`]: a tree costs many times its text, so a body of
/// millions of tiny elements is refused after one counting pass, not parsed.
pub fn read_list(text: &[u8]) -> Result<Vec<Value>, KvApiError> {
    let first = text.iter().find(|b| !b.is_ascii_whitespace());
    let raw: Capped<&RawValue> = if first == Some(&b'[') {
        capped::with_cap(MAX_KV_OPS, || serde_json::from_slice(text))
            .map_err(|e| KvApiError::bad("kv_bad_request", format!("the body is not JSON: {e}")))?
    } else {
        let w: Wrapped<'_> = capped::with_cap(MAX_KV_OPS, || serde_json::from_slice(text))
            .map_err(|e| {
                KvApiError::bad("kv_bad_request", format!("the body is not an object: {e}"))
            })?;
        w.operations
            .ok_or_else(|| KvApiError::bad("kv_bad_request", "operations is required"))?
    };
    let raw = match raw {
        Capped::Within(r) => r,
        Capped::Over(n) => {
            return Err(KvApiError::bad(
                "kv_too_many_ops",
                format!("{n} ops in one call; the limit is {MAX_KV_OPS}"),
            ))
        }
    };
    raw.iter()
        .enumerate()
        .map(|(i, r)| {
            read_op(r.get()).map_err(|mut e| {
                e.detail = format!("operations[{i}]: {}", e.detail);
                e
            })
        })
        .collect()
}

fn read_op(text: &str) -> Result<Value, KvApiError> {
    let bad = |e: serde_json::Error| {
        KvApiError::bad("kv_bad_request", format!("an op is an object: {e}"))
    };
    if text.trim_start().starts_with('{') {
        let sizes: Sizes<'_> =
            capped::with_cap(MAX_KV_GET_MANY_KEYS, || serde_json::from_str(text)).map_err(bad)?;
        if let Some(Capped::Over(n)) = sizes.keys {
            return Err(KvApiError::bad(
                "kv_too_many_keys",
                format!("{n} keys; the limit is {MAX_KV_GET_MANY_KEYS}"),
            ));
        }
        // Whitespace is the only slack between the text and the value stored.
        if let Some(v) = sizes
            .value
            .filter(|v| v.get().len() > 4 * MAX_KV_VALUE_BYTES)
        {
            return Err(KvApiError::too_large(
                "kv_value_too_large",
                format!(
                    "a value of {} bytes; the limit is {MAX_KV_VALUE_BYTES}",
                    v.get().len()
                ),
            ));
        }
    }
    serde_json::from_str(text).map_err(bad)
}

/// Reads and bounds a list of ops. `in_txn`: the `kv` rider of a transaction, which may not
/// list a prefix (a page is no precondition).
#[cfg(test)]
pub fn parse_ops(v: &Value, in_txn: bool) -> Result<Vec<KvOp>, KvApiError> {
    let list = v
        .as_array()
        .ok_or_else(|| KvApiError::bad("kv_bad_request", "operations must be an array"))?;
    parse_list(list, in_txn)
}

/// [`parse_ops`] of a list read by [`read_list`].
pub fn parse_list(list: &[Value], in_txn: bool) -> Result<Vec<KvOp>, KvApiError> {
    if list.len() > MAX_KV_OPS {
        return Err(KvApiError::bad(
            "kv_too_many_ops",
            format!("{} ops in one call; the limit is {MAX_KV_OPS}", list.len()),
        ));
    }
    let mut written = HashSet::new();
    let mut ops = Vec::with_capacity(list.len());
    for (i, o) in list.iter().enumerate() {
        let op = parse_op(o, in_txn).map_err(|mut e| {
            e.detail = format!("operations[{i}]: {}", e.detail);
            e
        })?;
        // Permits are written only by /locks (a KV delete would release another's lock, a
        // put jam one or forge its owner); topic partition counts and topic configs only by the
        // Kafka port.
        if let Some((ns, door)) = READ_ONLY_NAMESPACES
            .iter()
            .find(|(ns, _)| op.is_write() && op.ns_key().0 == *ns)
        {
            return Err(KvApiError::bad(
                "kv_bad_namespace",
                format!("operations[{i}]: {ns} is written only through {door}; KV may read it"),
            ));
        }
        if op.is_write() {
            let (ns, key) = op.ns_key();
            if !written.insert((ns.to_string(), key.to_string())) {
                return Err(KvApiError::bad(
                    "kv_duplicate_key_in_call",
                    format!("operations[{i}]: {ns}/{key} is written twice in one call"),
                ));
            }
        }
        ops.push(op);
    }
    Ok(ops)
}

fn parse_op(o: &Value, in_txn: bool) -> Result<KvOp, KvApiError> {
    let m = o
        .as_object()
        .ok_or_else(|| KvApiError::bad("kv_bad_request", "an op is an object"))?;
    if m.contains_key("tenant") {
        return Err(KvApiError::bad(
            "kv_tenant_not_an_input",
            "the tenant comes from the credentials, never from the body",
        ));
    }
    let name = m.get("op").and_then(Value::as_str).unwrap_or("");
    let ns = namespace(m)?;
    let required = flag(m, "required")?;
    Ok(match name {
        "get" => KvOp::Get {
            ns,
            key: key(m.get("key"))?,
        },
        "getMany" => {
            let keys = m
                .get("keys")
                .and_then(Value::as_array)
                .filter(|k| !k.is_empty())
                .ok_or_else(|| KvApiError::bad("kv_bad_request", "keys is a non-empty array"))?;
            if keys.len() > MAX_KV_GET_MANY_KEYS {
                return Err(KvApiError::bad(
                    "kv_too_many_keys",
                    format!("{} keys; the limit is {MAX_KV_GET_MANY_KEYS}", keys.len()),
                ));
            }
            KvOp::GetMany {
                ns,
                keys: keys
                    .iter()
                    .map(|k| key(Some(k)))
                    .collect::<Result<_, _>>()?,
            }
        }
        "getPrefix" => {
            if in_txn {
                return Err(KvApiError::bad(
                    "kv_get_prefix_not_allowed_in_transaction",
                    "getPrefix is not allowed in a transaction",
                ));
            }
            let prefix = m
                .get("prefix")
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty())
                .ok_or_else(|| KvApiError::bad("kv_prefix_required", "prefix is required"))?;
            let prefix = key(Some(&json!(prefix)))?;
            let after = match m.get("after") {
                None | Some(Value::Null) => None,
                Some(a) => Some(key(Some(a))?),
            };
            let limit = match m.get("limit") {
                None | Some(Value::Null) => DEFAULT_KV_PREFIX_LIMIT,
                Some(l) => l
                    .as_u64()
                    .filter(|l| *l > 0)
                    .ok_or_else(|| {
                        KvApiError::bad("kv_bad_request", "limit is an integer above 0")
                    })?
                    .min(MAX_KV_PREFIX_LIMIT as u64) as usize,
            };
            KvOp::GetPrefix {
                ns,
                prefix,
                after,
                limit,
                keys_only: flag(m, "keysOnly")?,
            }
        }
        "put" | "putIfAbsent" => KvOp::Put {
            ns,
            key: key(m.get("key"))?,
            value: value(m)?,
            expiry: expiry(m)?,
            expect: expect(m)?,
            if_absent: name == "putIfAbsent",
            required,
        },
        "delete" => KvOp::Delete {
            ns,
            key: key(m.get("key"))?,
            expect: expect(m)?,
            required,
        },
        "incr" => KvOp::Incr {
            ns,
            key: key(m.get("key"))?,
            delta: int(m, "delta")?
                .ok_or_else(|| KvApiError::bad("kv_bad_request", "delta is required"))?,
            min: int(m, "min")?,
            max: int(m, "max")?,
            expiry: expiry(m)?,
            required,
        },
        "check" => KvOp::Check {
            ns,
            key: key(m.get("key"))?,
            expect: expect(m)?
                .ok_or_else(|| KvApiError::bad("kv_bad_expect", "check needs expect"))?,
            required,
        },
        other => {
            return Err(KvApiError::bad(
                "kv_unknown_op",
                format!("unknown op {other:?}"),
            ))
        }
    })
}

/// `^[a-z0-9][a-z0-9._-]{0,63}$`
fn namespace(m: &Map<String, Value>) -> Result<String, KvApiError> {
    let ns = m.get("ns").and_then(Value::as_str).unwrap_or("");
    let ok = (1..=64).contains(&ns.len())
        && ns.bytes().enumerate().all(|(i, b)| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || (i > 0 && b".-_".contains(&b))
        });
    if !ok {
        return Err(KvApiError::bad(
            "kv_bad_namespace",
            format!("namespace {ns:?} does not match ^[a-z0-9][a-z0-9._-]{{0,63}}$"),
        ));
    }
    Ok(ns.to_string())
}

fn key(v: Option<&Value>) -> Result<String, KvApiError> {
    let k = v
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty() && !k.contains('\0'))
        .ok_or_else(|| KvApiError::bad("kv_bad_key", "a key is a non-empty string without NUL"))?;
    if k.len() > MAX_KV_KEY_BYTES {
        return Err(KvApiError::too_large(
            "kv_key_too_large",
            format!(
                "a key of {} bytes; the limit is {MAX_KV_KEY_BYTES}",
                k.len()
            ),
        ));
    }
    Ok(k.to_string())
}

fn value(m: &Map<String, Value>) -> Result<String, KvApiError> {
    let v = m
        .get("value")
        .ok_or_else(|| KvApiError::bad("kv_bad_request", "value is required (null is a value)"))?;
    let text = v.to_string();
    if text.len() > MAX_KV_VALUE_BYTES {
        return Err(KvApiError::too_large(
            "kv_value_too_large",
            format!(
                "a value of {} bytes; the limit is {MAX_KV_VALUE_BYTES}",
                text.len()
            ),
        ));
    }
    Ok(text)
}

fn flag(m: &Map<String, Value>, field: &str) -> Result<bool, KvApiError> {
    match m.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(KvApiError::bad(
            "kv_bad_request",
            format!("{field} is a boolean"),
        )),
    }
}

fn int(m: &Map<String, Value>, field: &str) -> Result<Option<i64>, KvApiError> {
    match m.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or_else(|| {
            KvApiError::bad("kv_bad_request", format!("{field} is a 64-bit integer"))
        }),
    }
}

fn expect(m: &Map<String, Value>) -> Result<Option<u64>, KvApiError> {
    match m.get("expect") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| KvApiError::bad("kv_bad_expect", "expect is an integer of 0 or more")),
    }
}

fn expiry(m: &Map<String, Value>) -> Result<KvExpiry, KvApiError> {
    let forever = flag(m, "forever")?;
    match (m.get("ttlSeconds").filter(|v| !v.is_null()), forever) {
        (None, false) => Err(KvApiError::bad(
            "kv_expiry_not_specified",
            "a write names exactly one of ttlSeconds or forever: true",
        )),
        (Some(_), true) => Err(KvApiError::bad(
            "kv_bad_ttl",
            "ttlSeconds and forever are exclusive",
        )),
        (None, true) => Ok(KvExpiry::Forever),
        (Some(t), false) => t
            .as_u64()
            .filter(|t| (1..=MAX_KV_TTL_SECONDS).contains(t))
            .map(KvExpiry::Seconds)
            .ok_or_else(|| {
                KvApiError::bad(
                    "kv_bad_ttl",
                    format!("ttlSeconds is an integer in 1..={MAX_KV_TTL_SECONDS}"),
                )
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(v: Value) -> &'static str {
        parse_ops(&v, false)
            .map(|_| "ok")
            .unwrap_or_else(|e| e.reason)
    }

    #[test]
    fn ops_are_bounded_with_named_reasons() {
        let put = |extra: Value| {
            let mut o = json!({"op": "put", "ns": "n", "key": "k", "value": 1, "ttlSeconds": 5});
            if let (Value::Object(m), Value::Object(e)) = (&mut o, extra) {
                m.extend(e);
            }
            json!([o])
        };
        assert_eq!(reason(put(json!({}))), "ok");
        assert_eq!(
            reason(put(json!({"ns": "NOT A NAMESPACE"}))),
            "kv_bad_namespace"
        );
        assert_eq!(reason(put(json!({"ns": "-x"}))), "kv_bad_namespace");
        assert_eq!(reason(put(json!({"key": ""}))), "kv_bad_key");
        assert_eq!(reason(put(json!({"key": "a\u{0}"}))), "kv_bad_key");
        assert_eq!(reason(put(json!({"op": "nope"}))), "kv_unknown_op");
        assert_eq!(
            reason(put(json!({"tenant": "t"}))),
            "kv_tenant_not_an_input"
        );
        assert_eq!(
            reason(put(json!({"ttlSeconds": null}))),
            "kv_expiry_not_specified"
        );
        assert_eq!(reason(put(json!({"ttlSeconds": 0}))), "kv_bad_ttl");
        assert_eq!(reason(put(json!({"forever": true}))), "kv_bad_ttl");
        assert_eq!(reason(put(json!({"expect": -1}))), "kv_bad_expect");
        assert_eq!(
            reason(put(json!({"key": "k".repeat(MAX_KV_KEY_BYTES + 1)}))),
            "kv_key_too_large"
        );
        assert_eq!(
            reason(put(json!({"value": "v".repeat(MAX_KV_VALUE_BYTES)}))),
            "kv_value_too_large"
        );
        let twice = json!([
            {"op": "put", "ns": "n", "key": "k", "value": 1, "ttlSeconds": 5},
            {"op": "delete", "ns": "n", "key": "k"}
        ]);
        assert_eq!(reason(twice), "kv_duplicate_key_in_call");
        let many: Vec<Value> = (0..=MAX_KV_OPS)
            .map(|i| json!({"op": "get", "ns": "n", "key": i.to_string()}))
            .collect();
        assert_eq!(reason(Value::Array(many)), "kv_too_many_ops");
        assert_eq!(
            reason(json!([{"op": "getPrefix", "ns": "n", "prefix": ""}])),
            "kv_prefix_required"
        );
        let e = parse_ops(
            &json!([{"op": "getPrefix", "ns": "n", "prefix": "p"}]),
            true,
        );
        assert_eq!(
            e.err().map(|e| e.reason),
            Some("kv_get_prefix_not_allowed_in_transaction")
        );
    }

    #[test]
    fn a_prefix_limit_is_clamped_not_refused() {
        let ops = parse_ops(
            &json!([{"op": "getPrefix", "ns": "n", "prefix": "p", "limit": 1_000_000}]),
            false,
        )
        .unwrap();
        assert!(matches!(&ops[0], KvOp::GetPrefix { limit, .. } if *limit == MAX_KV_PREFIX_LIMIT));
    }
}
