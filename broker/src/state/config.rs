//! The 21 queue options of the reference broker (spec/reference-broker.md §1.2), their defaults,
//! merge/replace semantics and the configure echo.

use queenmq_protocol::QueueSettings;
use serde_json::Value;

use crate::codec::{DecodeError, Reader, Writer};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    pub priority: i64,
    pub lease_time: i64,
    pub retry_limit: i64,
    pub retry_delay: i64,
    pub max_size: i64,
    pub ttl: i64,
    pub dead_letter_queue: bool,
    pub dlq_after_max_retries: bool,
    pub delayed_processing: i64,
    pub window_buffer: i64,
    pub retention_seconds: i64,
    pub completed_retention_seconds: i64,
    pub retention_enabled: bool,
    pub encryption_enabled: bool,
    pub max_wait_time_seconds: i64,
    pub min_pop_wait_time: i64,
    pub dedup_window_seconds: i64,
    pub retention_sink_hold: String,
    pub retention_sink_hold_max_seconds: i64,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            priority: 0,
            lease_time: 300,
            retry_limit: 3,
            retry_delay: 1000,
            max_size: 0,
            ttl: 3600,
            dead_letter_queue: true,
            dlq_after_max_retries: true,
            delayed_processing: 0,
            window_buffer: 0,
            retention_seconds: 0,
            completed_retention_seconds: 0,
            retention_enabled: false,
            encryption_enabled: false,
            max_wait_time_seconds: 0,
            min_pop_wait_time: 0,
            dedup_window_seconds: 3600,
            retention_sink_hold: String::new(),
            retention_sink_hold_max_seconds: 604_800,
        }
    }
}

/// A queue created by its first push leases for 60 s until it is configured (reference §1.1).
pub const IMPLICIT_LEASE_SECONDS: i64 = 60;

const INT_KEYS: &[&str] = &[
    "priority",
    "leaseTime",
    "retryLimit",
    "retryDelay",
    "maxSize",
    "ttl",
    "delayedProcessing",
    "windowBuffer",
    "retentionSeconds",
    "completedRetentionSeconds",
    "maxWaitTimeSeconds",
    "minPopWaitTime",
    "dedupWindowSeconds",
    "retentionSinkHoldMaxSeconds",
];
const BOOL_KEYS: &[&str] = &[
    "deadLetterQueue",
    "dlqAfterMaxRetries",
    "retentionEnabled",
    "encryptionEnabled",
];

impl QueueConfig {
    /// Applies the given options onto `self` (merge) — unknown keys are ignored, `null` restores
    /// the default. Returns a sentence naming the key on a wrong type or an out-of-range value;
    /// on error `self` is unchanged.
    pub fn merge(&self, options: &[(String, Value)]) -> Result<QueueConfig, String> {
        let mut c = self.clone();
        let d = QueueConfig::default();
        for (key, value) in options {
            let key = key.as_str();
            if INT_KEYS.contains(&key) {
                let v = match value {
                    Value::Null => None,
                    Value::Number(n) => Some(
                        n.as_i64()
                            .ok_or_else(|| format!("{key} must be an integer"))?,
                    ),
                    _ => return Err(format!("{key} must be an integer")),
                };
                c.set_int(key, v, &d)?;
            } else if BOOL_KEYS.contains(&key) {
                let v = match value {
                    Value::Null => None,
                    Value::Bool(b) => Some(*b),
                    _ => return Err(format!("{key} must be a boolean")),
                };
                c.set_bool(key, v, &d);
            } else if key == "retentionSinkHold" {
                let v = match value {
                    Value::Null => String::new(),
                    Value::String(s) => s.clone(),
                    _ => return Err("retentionSinkHold must be a string".into()),
                };
                let ok = v.len() <= 64
                    && v.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
                if !ok {
                    return Err("retentionSinkHold must match [A-Za-z0-9._-]{0,64}".into());
                }
                c.retention_sink_hold = v;
            }
        }
        Ok(c)
    }

    fn set_int(&mut self, key: &str, v: Option<i64>, d: &QueueConfig) -> Result<(), String> {
        let slot = match key {
            "priority" => (&mut self.priority, d.priority),
            "leaseTime" => (&mut self.lease_time, d.lease_time),
            "retryLimit" => (&mut self.retry_limit, d.retry_limit),
            "retryDelay" => (&mut self.retry_delay, d.retry_delay),
            "maxSize" => (&mut self.max_size, d.max_size),
            "ttl" => (&mut self.ttl, d.ttl),
            "delayedProcessing" => (&mut self.delayed_processing, d.delayed_processing),
            "windowBuffer" => (&mut self.window_buffer, d.window_buffer),
            "retentionSeconds" => (&mut self.retention_seconds, d.retention_seconds),
            "completedRetentionSeconds" => (
                &mut self.completed_retention_seconds,
                d.completed_retention_seconds,
            ),
            "maxWaitTimeSeconds" => (&mut self.max_wait_time_seconds, d.max_wait_time_seconds),
            "minPopWaitTime" => (&mut self.min_pop_wait_time, d.min_pop_wait_time),
            "dedupWindowSeconds" => (&mut self.dedup_window_seconds, d.dedup_window_seconds),
            "retentionSinkHoldMaxSeconds" => (
                &mut self.retention_sink_hold_max_seconds,
                d.retention_sink_hold_max_seconds,
            ),
            _ => return Ok(()),
        };
        let mut value = v.unwrap_or(slot.1);
        match key {
            "minPopWaitTime" => value = value.clamp(0, 60_000),
            "retentionSinkHoldMaxSeconds" if !(60..=31_536_000).contains(&value) => {
                return Err(
                    "retentionSinkHoldMaxSeconds must be between 60 and 31536000".to_string(),
                );
            }
            _ if value < 0 && key != "priority" => {
                return Err(format!("{key} must not be negative"));
            }
            _ => {}
        }
        *slot.0 = value;
        Ok(())
    }

    fn set_bool(&mut self, key: &str, v: Option<bool>, d: &QueueConfig) {
        let slot = match key {
            "deadLetterQueue" => (&mut self.dead_letter_queue, d.dead_letter_queue),
            "dlqAfterMaxRetries" => (&mut self.dlq_after_max_retries, d.dlq_after_max_retries),
            "retentionEnabled" => (&mut self.retention_enabled, d.retention_enabled),
            "encryptionEnabled" => (&mut self.encryption_enabled, d.encryption_enabled),
            _ => return,
        };
        *slot.0 = v.unwrap_or(slot.1);
    }

    /// The effective options, for the configure echo and the queue reads.
    pub fn settings(&self) -> QueueSettings {
        QueueSettings {
            priority: self.priority,
            lease_time: self.lease_time,
            retry_limit: self.retry_limit,
            retry_delay: self.retry_delay,
            max_size: self.max_size,
            ttl: self.ttl,
            dead_letter_queue: self.dead_letter_queue,
            dlq_after_max_retries: self.dlq_after_max_retries,
            delayed_processing: self.delayed_processing,
            window_buffer: self.window_buffer,
            retention_seconds: self.retention_seconds,
            completed_retention_seconds: self.completed_retention_seconds,
            retention_enabled: self.retention_enabled,
            encryption_enabled: self.encryption_enabled,
            max_wait_time_seconds: self.max_wait_time_seconds,
            min_pop_wait_time: self.min_pop_wait_time,
            dedup_window_seconds: self.dedup_window_seconds,
            retention_sink_hold: self.retention_sink_hold.clone(),
            retention_sink_hold_max_seconds: self.retention_sink_hold_max_seconds,
        }
    }

    pub fn encode(&self, w: &mut Writer) {
        for v in self.ints() {
            w.i64(v);
        }
        for b in [
            self.dead_letter_queue,
            self.dlq_after_max_retries,
            self.retention_enabled,
            self.encryption_enabled,
        ] {
            w.bool(b);
        }
        w.str(&self.retention_sink_hold);
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<QueueConfig, DecodeError> {
        let mut ints = [0i64; 14];
        for v in ints.iter_mut() {
            *v = r.i64()?;
        }
        Ok(QueueConfig {
            priority: ints[0],
            lease_time: ints[1],
            retry_limit: ints[2],
            retry_delay: ints[3],
            max_size: ints[4],
            ttl: ints[5],
            delayed_processing: ints[6],
            window_buffer: ints[7],
            retention_seconds: ints[8],
            completed_retention_seconds: ints[9],
            max_wait_time_seconds: ints[10],
            min_pop_wait_time: ints[11],
            dedup_window_seconds: ints[12],
            retention_sink_hold_max_seconds: ints[13],
            dead_letter_queue: r.bool()?,
            dlq_after_max_retries: r.bool()?,
            retention_enabled: r.bool()?,
            encryption_enabled: r.bool()?,
            retention_sink_hold: r.string()?,
        })
    }

    fn ints(&self) -> [i64; 14] {
        [
            self.priority,
            self.lease_time,
            self.retry_limit,
            self.retry_delay,
            self.max_size,
            self.ttl,
            self.delayed_processing,
            self.window_buffer,
            self.retention_seconds,
            self.completed_retention_seconds,
            self.max_wait_time_seconds,
            self.min_pop_wait_time,
            self.dedup_window_seconds,
            self.retention_sink_hold_max_seconds,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_null_restores_default_and_types_are_checked() {
        let c = QueueConfig::default()
            .merge(&[
                ("leaseTime".into(), json!(30)),
                ("unknown".into(), json!(1)),
            ])
            .unwrap();
        assert_eq!(c.lease_time, 30);
        let c = c.merge(&[("leaseTime".into(), Value::Null)]).unwrap();
        assert_eq!(c.lease_time, 300);
        assert_eq!(
            c.merge(&[("retryLimit".into(), json!("3"))]).unwrap_err(),
            "retryLimit must be an integer"
        );
        assert!(c
            .merge(&[("retentionSinkHoldMaxSeconds".into(), json!(5))])
            .is_err());
        assert_eq!(
            c.merge(&[("minPopWaitTime".into(), json!(999_999))])
                .unwrap()
                .min_pop_wait_time,
            60_000
        );
    }

    #[test]
    fn codec_round_trip() {
        let c = QueueConfig {
            retention_sink_hold: "sink.a".into(),
            lease_time: 7,
            ..Default::default()
        };
        let mut w = Writer::default();
        c.encode(&mut w);
        let mut r = Reader::new(&w.buf);
        assert_eq!(QueueConfig::decode(&mut r).unwrap(), c);
    }
}
