//! Configure's `options` (or the top-level option keys) as typed, range-checked settings: the
//! engine never sees a JSON value, nor a value it would compute times from unchecked.

use queenmq_protocol::{limits, QueenError, QueueOptions, Setting};
use serde_json::Value;

use crate::error::ApiError;

/// Unknown keys are ignored (as the reference broker ignores them); `null` restores an
/// option's default. Every range is checked before any type, so the first sentence a caller
/// gets names the same key it always did.
pub fn parse(options: &[(String, Value)]) -> Result<QueueOptions, ApiError> {
    for (k, v) in options {
        check_queue_option(k, v)?;
    }
    let mut o = QueueOptions::default();
    for (k, v) in options {
        match k.as_str() {
            "priority" => o.priority = Some(int(k, v)?),
            "leaseTime" => o.lease_time = Some(int(k, v)?),
            "retryLimit" => o.retry_limit = Some(int(k, v)?),
            "retryDelay" => o.retry_delay = Some(int(k, v)?),
            "maxSize" => o.max_size = Some(int(k, v)?),
            "ttl" => o.ttl = Some(int(k, v)?),
            "delayedProcessing" => o.delayed_processing = Some(int(k, v)?),
            "windowBuffer" => o.window_buffer = Some(int(k, v)?),
            "retentionSeconds" => o.retention_seconds = Some(int(k, v)?),
            "completedRetentionSeconds" => o.completed_retention_seconds = Some(int(k, v)?),
            "maxWaitTimeSeconds" => o.max_wait_time_seconds = Some(int(k, v)?),
            "minPopWaitTime" => o.min_pop_wait_time = Some(int(k, v)?),
            "dedupWindowSeconds" => o.dedup_window_seconds = Some(int(k, v)?),
            "retentionSinkHoldMaxSeconds" => o.retention_sink_hold_max_seconds = Some(int(k, v)?),
            "deadLetterQueue" => o.dead_letter_queue = Some(boolean(k, v)?),
            "dlqAfterMaxRetries" => o.dlq_after_max_retries = Some(boolean(k, v)?),
            "retentionEnabled" => o.retention_enabled = Some(boolean(k, v)?),
            "encryptionEnabled" => o.encryption_enabled = Some(boolean(k, v)?),
            "retentionSinkHold" => o.retention_sink_hold = Some(sink_hold(v)?),
            _ => {}
        }
    }
    Ok(o)
}

/// Range-checks one queue option as sent on configure, against the ranges every door shares
/// (protocol limits.rs); here, where the value is still JSON. Unknown keys and non-integer options
/// pass (the engine keeps or type-checks them); an integer option outside its range, or a
/// number that is not an integer, is refused with a sentence naming the key and the range.
fn check_queue_option(key: &str, value: &Value) -> Result<(), QueenError> {
    let Some(r) = limits::QUEUE_OPTION_RANGES.iter().find(|r| r.key == key) else {
        if key == "namespace" || key == "task" {
            if let Value::String(s) = value {
                return limits::check_name(key, s);
            }
        }
        return Ok(());
    };
    let n = match value {
        Value::Null => return Ok(()),
        Value::Number(n) => n.as_i64(),
        _ => return Err(QueenError::bad_request(format!("{key} must be an integer"))),
    };
    let unit = if r.unit.is_empty() {
        String::new()
    } else {
        format!(" {}", r.unit)
    };
    match n {
        Some(v) if (r.min..=r.max).contains(&v) => Ok(()),
        _ => Err(QueenError::bad_request(format!(
            "{key} = {value} is out of range: it must be an integer between {} and {}{unit}",
            r.min, r.max
        ))),
    }
}

fn int(key: &str, v: &Value) -> Result<Setting<i64>, ApiError> {
    match v {
        Value::Null => Ok(Setting::Default),
        Value::Number(n) => n
            .as_i64()
            .map(Setting::Value)
            .ok_or_else(|| ApiError::bad(format!("{key} must be an integer"))),
        _ => Err(ApiError::bad(format!("{key} must be an integer"))),
    }
}

fn boolean(key: &str, v: &Value) -> Result<Setting<bool>, ApiError> {
    match v {
        Value::Null => Ok(Setting::Default),
        Value::Bool(b) => Ok(Setting::Value(*b)),
        _ => Err(ApiError::bad(format!("{key} must be a boolean"))),
    }
}

fn sink_hold(v: &Value) -> Result<Setting<String>, ApiError> {
    let s = match v {
        Value::Null => return Ok(Setting::Default),
        Value::String(s) => s,
        _ => return Err(ApiError::bad("retentionSinkHold must be a string")),
    };
    let ok = s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !ok {
        return Err(ApiError::bad(
            "retentionSinkHold must match [A-Za-z0-9._-]{0,64}",
        ));
    }
    Ok(Setting::Value(s.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn opts(v: Value) -> Vec<(String, Value)> {
        match v {
            Value::Object(m) => m.into_iter().collect(),
            _ => Vec::new(),
        }
    }

    fn message(v: Value) -> String {
        match parse(&opts(v)) {
            Ok(o) => panic!("accepted {o:?}"),
            Err(e) => e.0.message,
        }
    }

    #[test]
    fn queue_options_in_and_out_of_range() {
        assert!(check_queue_option("leaseTime", &json!(300)).is_ok());
        assert!(check_queue_option("leaseTime", &json!(null)).is_ok());
        let e = check_queue_option("leaseTime", &json!(10_000_000_000_000u64)).unwrap_err();
        assert!(e.message.contains("leaseTime"), "{}", e.message);
        assert!(e.message.contains("604800"), "{}", e.message);
        assert!(check_queue_option("delayedProcessing", &json!(-1)).is_err());
        assert!(check_queue_option("dedupWindowSeconds", &json!(1.5)).is_err());
        assert!(check_queue_option("windowBuffer", &json!("3")).is_err());
        assert!(check_queue_option("retentionSinkHoldMaxSeconds", &json!(59)).is_err());
        assert!(check_queue_option("priority", &json!(-5)).is_ok());
        assert!(check_queue_option("somethingElse", &json!(1e300)).is_ok());
        assert!(check_queue_option("namespace", &json!("x".repeat(513))).is_err());
    }

    #[test]
    fn given_options_are_typed_and_unknown_ones_ignored() {
        let o = parse(&opts(json!({
            "leaseTime": 30, "ttl": null, "deadLetterQueue": false, "notAnOption": [1],
            "retentionSinkHold": "sink.a", "minPopWaitTime": 5
        })))
        .unwrap();
        assert_eq!(o.lease_time, Some(Setting::Value(30)));
        assert_eq!(o.ttl, Some(Setting::Default));
        assert_eq!(o.dead_letter_queue, Some(Setting::Value(false)));
        assert_eq!(o.retention_sink_hold, Some(Setting::Value("sink.a".into())));
        assert_eq!(o.min_pop_wait_time, Some(Setting::Value(5)));
        assert_eq!(o.retry_limit, None);
        assert_eq!(o.given(), 5);
    }

    #[test]
    fn wrong_types_and_ranges_name_the_key() {
        assert_eq!(
            message(json!({"retryLimit": "3"})),
            "retryLimit must be an integer"
        );
        assert_eq!(
            message(json!({"minPopWaitTime": 1.5})),
            "minPopWaitTime must be an integer"
        );
        assert_eq!(
            message(json!({"deadLetterQueue": "yes"})),
            "deadLetterQueue must be a boolean"
        );
        assert_eq!(
            message(json!({"retentionSinkHold": "a b"})),
            "retentionSinkHold must match [A-Za-z0-9._-]{0,64}"
        );
        assert!(message(json!({"retentionSinkHoldMaxSeconds": 5})).contains("between 60"));
        assert!(message(json!({"leaseTime": -1})).contains("out of range"));
    }
}
