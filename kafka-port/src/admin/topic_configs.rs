//! Topic configs a Kafka client may set (CreateTopics, AlterConfigs, IncrementalAlterConfigs),
//! and how each maps onto the queue's options, which are the only place they are kept (engine
//! state: replicated, durable, and the same settings the HTTP API shows).
//!
//! Honoured: `retention.ms` (the queue's `retentionSeconds` with `retentionEnabled`, in whole
//! seconds, rounded up) and `cleanup.policy=delete` (what always holds). Refused with
//! INVALID_CONFIG: `cleanup.policy` with `compact` (records are never compacted here), every
//! other Kafka topic config (not honoured, so not stored: a stored value that does not hold
//! would be a lie to the client), and unknown names.

use queenmq_protocol::{limits, QueueOptions, QueueSettings, Setting};

use super::codes::INVALID_CONFIG;
use super::Refusal;

/// What a request does to one config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Set(String),
    /// Back to the default (IncrementalAlterConfigs DELETE; AlterConfigs for every config it
    /// does not name).
    Default,
}

pub const RETENTION_MS: &str = "retention.ms";
pub const CLEANUP_POLICY: &str = "cleanup.policy";

fn invalid(message: String) -> Refusal {
    Refusal::new(INVALID_CONFIG, message)
}

/// The retention seconds a `retention.ms` value asks (`0`: none), or why not.
fn retention_seconds(value: &str) -> Result<i64, Refusal> {
    let ms: i64 = value
        .trim()
        .parse()
        .map_err(|_| invalid(format!("retention.ms {value:?} is not an integer")))?;
    let max = limits::QUEUE_OPTION_RANGES
        .iter()
        .find(|r| r.key == "retentionSeconds")
        .map_or(0, |r| r.max);
    // Queen's retention counts whole seconds, rounded up here (for ms >= 1: no overflow); 0
    // would mean "keep forever" there.
    let seconds = (ms >= 1).then(|| (ms - 1) / 1000 + 1);
    match (ms, seconds) {
        (-1, _) => Ok(0),
        (_, Some(s)) if s <= max => Ok(s),
        _ => Err(invalid(format!(
            "retention.ms {ms} is not -1 nor in 1..={}",
            max.saturating_mul(1000)
        ))),
    }
}

/// The queue options `changes` ask for, or the first refusal. `known` lists every Kafka topic
/// config name (for the refusal's wording).
pub fn options(changes: &[(String, Change)], known: &[&str]) -> Result<QueueOptions, Refusal> {
    let mut o = QueueOptions::default();
    let mut seen = std::collections::HashSet::new();
    for (name, change) in changes {
        if !seen.insert(name.as_str()) {
            return Err(Refusal::new(
                super::codes::INVALID_REQUEST,
                format!("config {name:?} is named more than once"),
            ));
        }
        match (name.as_str(), change) {
            (RETENTION_MS, Change::Set(v)) => {
                let s = retention_seconds(v)?;
                o.retention_seconds = Some(Setting::Value(s));
                if s > 0 {
                    o.retention_enabled = Some(Setting::Value(true));
                }
            }
            (RETENTION_MS, Change::Default) => o.retention_seconds = Some(Setting::Value(0)),
            (CLEANUP_POLICY, Change::Set(v)) if v.trim() == "delete" => {}
            (CLEANUP_POLICY, Change::Default) => {}
            (CLEANUP_POLICY, Change::Set(v)) => {
                return Err(invalid(format!(
                    "cleanup.policy {v:?} cannot be honoured: records are never compacted here"
                )))
            }
            (n, _) if known.contains(&n) => {
                return Err(invalid(format!(
                    "topic config {n:?} cannot be changed on this broker"
                )))
            }
            (n, _) => return Err(invalid(format!("unknown topic config {n:?}"))),
        }
    }
    Ok(o)
}

/// The `retention.ms` a queue's settings give: `None` when no age retention holds (-1 from the
/// default source).
pub fn retention_ms(s: &QueueSettings) -> Option<i64> {
    (s.retention_enabled && s.retention_seconds > 0)
        .then(|| s.retention_seconds.saturating_mul(1000))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const KNOWN: &[&str] = &["retention.ms", "cleanup.policy", "segment.ms"];

    fn set(n: &str, v: &str) -> (String, Change) {
        (n.into(), Change::Set(v.into()))
    }

    #[test]
    fn retention_maps_onto_whole_seconds_and_minus_one_turns_it_off() {
        let o = options(&[set("retention.ms", "1500")], KNOWN).expect("honoured");
        assert_eq!(o.retention_seconds, Some(Setting::Value(2)));
        assert_eq!(o.retention_enabled, Some(Setting::Value(true)));
        let o = options(&[set("retention.ms", "-1")], KNOWN).expect("honoured");
        assert_eq!(o.retention_seconds, Some(Setting::Value(0)));
        assert_eq!(
            o.retention_enabled, None,
            "the switch is the HTTP side's too"
        );
        for bad in ["0", "-2", "x", "", "9223372036854775807", "1.5"] {
            assert_eq!(
                options(&[set("retention.ms", bad)], KNOWN).map_err(|r| r.code),
                Err(INVALID_CONFIG),
                "{bad}"
            );
        }
    }

    #[test]
    fn only_what_holds_is_accepted() {
        assert!(options(&[set("cleanup.policy", "delete")], KNOWN).is_ok());
        for (n, v) in [
            ("cleanup.policy", "compact"),
            ("cleanup.policy", "compact,delete"),
            ("segment.ms", "1000"),
            ("no.such.config", "1"),
        ] {
            assert_eq!(
                options(&[set(n, v)], KNOWN).map_err(|r| r.code),
                Err(INVALID_CONFIG),
                "{n}={v}"
            );
        }
        let twice = [set("retention.ms", "1000"), set("retention.ms", "2000")];
        assert_eq!(
            options(&twice, KNOWN).map_err(|r| r.code),
            Err(super::super::codes::INVALID_REQUEST)
        );
    }

    #[test]
    fn the_shown_retention_follows_the_switch() {
        let s = |enabled, seconds| QueueSettings {
            retention_enabled: enabled,
            retention_seconds: seconds,
            ..settings()
        };
        assert_eq!(retention_ms(&s(true, 2)), Some(2000));
        assert_eq!(retention_ms(&s(false, 2)), None);
        assert_eq!(retention_ms(&s(true, 0)), None);
    }

    pub fn settings() -> QueueSettings {
        QueueSettings {
            priority: 0,
            lease_time: 0,
            retry_limit: 0,
            retry_delay: 0,
            max_size: 0,
            ttl: 0,
            dead_letter_queue: false,
            dlq_after_max_retries: false,
            delayed_processing: 0,
            window_buffer: 0,
            retention_seconds: 0,
            completed_retention_seconds: 0,
            retention_enabled: false,
            encryption_enabled: false,
            max_wait_time_seconds: 0,
            min_pop_wait_time: 0,
            dedup_window_seconds: 0,
            retention_sink_hold: String::new(),
            retention_sink_hold_max_seconds: 0,
        }
    }
}
