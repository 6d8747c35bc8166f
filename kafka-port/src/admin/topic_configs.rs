//! Topic configs a Kafka client may set (CreateTopics, AlterConfigs, IncrementalAlterConfigs),
//! and how each maps onto the queue's options, which are the only place they are kept (engine
//! state: replicated, durable, and the same settings the HTTP API shows).
//!
//! Honoured: `retention.ms` (the queue's `retentionSeconds` with `retentionEnabled`, in whole
//! seconds, rounded up), `cleanup.policy=delete` (what always holds), and the two configs kept
//! in the topic's config row ([`super::config_row`]): `max.message.bytes` (the engine bounds
//! each produced batch by it) and `segment.bytes` (stored and shown, inert: the log's segments
//! are shared by every queue, and retention is per message, finer than a segment). Every other Kafka
//! topic config is accepted only where it asks for what already holds: set to the value
//! DescribeConfigs shows for it, or back to its default (clients such as librdkafka's
//! `test_AlterConfigs_simple` send back every described config with the one they change,
//! as AlterConfigs replaces the whole set). Such a request changes and stores nothing.
//! `message.format.version` is accepted with any version Kafka knows and changes nothing: every
//! batch is v2 here, as on Kafka 3.x, which ignores the config (KIP-724). Refused with
//! INVALID_CONFIG: `cleanup.policy` with `compact` (records are never compacted here), any other
//! value of a config that cannot change (not honoured, so not stored: a stored value that does
//! not hold would be a lie to the client), and unknown names.

use queenmq_protocol::kafka_topic_configs::{self, MAX_MESSAGE_BYTES, SEGMENT_BYTES};
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
pub const MESSAGE_FORMAT_VERSION: &str = "message.format.version";

/// The release names Kafka 3.7 reads as a `message.format.version` (`MetadataVersion`'s short
/// versions); three segments before 1.0, two after.
const KAFKA_RELEASES: &[&str] = &[
    "0.8.0", "0.8.1", "0.8.2", "0.9.0", "0.10.0", "0.10.1", "0.10.2", "0.11.0", "1.0", "1.1",
    "2.0", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "3.0", "3.1", "3.2", "3.3",
    "3.4", "3.5", "3.6", "3.7",
];

/// Whether Kafka 3.7 takes `value` as a version: a release (`0.10.0`, `3.7`), with more
/// segments (`0.10.0.0`, `3.7.1`), or an inter-version (`0.10.0-IV1`, `3.7-IV4`).
fn known_version(value: &str) -> bool {
    let (release, iv) = match value.split_once("-IV") {
        Some((r, n)) => (r, Some(n)),
        None => (value, None),
    };
    if iv.is_some_and(|n| n.is_empty() || n.len() > 2 || !n.bytes().all(|b| b.is_ascii_digit())) {
        return false;
    }
    let segments: Vec<&str> = release.split('.').collect();
    let keep = if release.starts_with("0.") { 3 } else { 2 };
    if segments.len() < keep || (iv.is_some() && segments.len() != keep) {
        return false;
    }
    if segments[keep..]
        .iter()
        .any(|s| s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()))
    {
        return false;
    }
    KAFKA_RELEASES.contains(&segments[..keep].join(".").as_str())
}

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

/// The queue options `changes` ask for, or the first refusal. `held` is every Kafka topic
/// config with the value that holds here (DescribeConfigs' list).
pub fn options(
    changes: &[(String, Change)],
    held: &[(&'static str, String, i8)],
) -> Result<QueueOptions, Refusal> {
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
            // Kept in the topic's config row: see [`row_changes`].
            (MAX_MESSAGE_BYTES | SEGMENT_BYTES, Change::Set(v)) => {
                kafka_topic_configs::check(name, v).map_err(invalid)?;
            }
            (MAX_MESSAGE_BYTES | SEGMENT_BYTES, Change::Default) => {}
            (MESSAGE_FORMAT_VERSION, Change::Set(v)) if known_version(v.trim()) => {}
            (MESSAGE_FORMAT_VERSION, Change::Set(v)) => {
                return Err(invalid(format!(
                    "message.format.version {v:?} is not a Kafka version"
                )))
            }
            (n, change) => match (held.iter().find(|c| c.0 == n), change) {
                (Some(_), Change::Default) => {}
                (Some((_, value, _)), Change::Set(v)) if v.trim() == value => {}
                (Some((_, value, _)), Change::Set(v)) => {
                    return Err(invalid(format!(
                        "topic config {n:?} cannot be changed on this broker: it holds \
                         {value:?}, not {v:?}"
                    )))
                }
                (None, _) => return Err(invalid(format!("unknown topic config {n:?}"))),
            },
        }
    }
    Ok(o)
}

/// The changes `changes` ask of the topic's config row (`max.message.bytes`,
/// `segment.bytes`): a value to set (range-checked as Kafka does, INVALID_CONFIG), or `None`
/// for the default. Every other name is [`options`]' to judge.
pub fn row_changes(
    changes: &[(String, Change)],
) -> Result<Vec<(&'static str, Option<i32>)>, Refusal> {
    let mut out = Vec::new();
    for (name, change) in changes {
        let Some(known) = [MAX_MESSAGE_BYTES, SEGMENT_BYTES]
            .into_iter()
            .find(|n| n == name)
        else {
            continue;
        };
        out.push(match change {
            Change::Set(v) => (
                known,
                Some(kafka_topic_configs::check(known, v).map_err(invalid)?),
            ),
            Change::Default => (known, None),
        });
    }
    Ok(out)
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

    fn known() -> Vec<(&'static str, String, i8)> {
        super::super::describe_configs::topic_configs(1 << 20)
    }

    fn set(n: &str, v: &str) -> (String, Change) {
        (n.into(), Change::Set(v.into()))
    }

    #[test]
    fn retention_maps_onto_whole_seconds_and_minus_one_turns_it_off() {
        let o = options(&[set("retention.ms", "1500")], &known()).expect("honoured");
        assert_eq!(o.retention_seconds, Some(Setting::Value(2)));
        assert_eq!(o.retention_enabled, Some(Setting::Value(true)));
        let o = options(&[set("retention.ms", "-1")], &known()).expect("honoured");
        assert_eq!(o.retention_seconds, Some(Setting::Value(0)));
        assert_eq!(
            o.retention_enabled, None,
            "the switch is the HTTP side's too"
        );
        for bad in ["0", "-2", "x", "", "9223372036854775807", "1.5"] {
            assert_eq!(
                options(&[set("retention.ms", bad)], &known()).map_err(|r| r.code),
                Err(INVALID_CONFIG),
                "{bad}"
            );
        }
    }

    #[test]
    fn only_what_holds_is_accepted() {
        assert!(options(&[set("cleanup.policy", "delete")], &known()).is_ok());
        for (n, v) in [
            ("cleanup.policy", "compact"),
            ("cleanup.policy", "compact,delete"),
            ("segment.ms", "1000"),
            ("compression.type", "gzip"),
            ("max.message.bytes", "-1"),
            ("max.message.bytes", "2147483648"),
            ("max.message.bytes", "ten"),
            ("segment.bytes", "13"),
            ("message.format.version", "0.10.0.9x"),
            ("no.such.config", "1"),
        ] {
            assert_eq!(
                options(&[set(n, v)], &known()).map_err(|r| r.code),
                Err(INVALID_CONFIG),
                "{n}={v}"
            );
        }
        let twice = [set("retention.ms", "1000"), set("retention.ms", "2000")];
        assert_eq!(
            options(&twice, &known()).map_err(|r| r.code),
            Err(super::super::codes::INVALID_REQUEST)
        );
    }

    #[test]
    fn the_row_configs_are_range_checked_and_change_no_queue_option() {
        let asked = [
            set("max.message.bytes", "10000"),
            set("segment.bytes", "20000"),
        ];
        assert_eq!(options(&asked, &known()).map(|o| o.given()), Ok(0));
        assert_eq!(
            row_changes(&asked),
            Ok(vec![
                (MAX_MESSAGE_BYTES, Some(10_000)),
                (SEGMENT_BYTES, Some(20_000))
            ])
        );
        let back = [
            ("segment.bytes".to_owned(), Change::Default),
            set("retention.ms", "1000"),
        ];
        assert_eq!(row_changes(&back), Ok(vec![(SEGMENT_BYTES, None)]));
        for bad in ["-1", "2147483648", "x", ""] {
            let asked = [set("max.message.bytes", bad)];
            assert_eq!(
                row_changes(&asked).map_err(|r| r.code),
                Err(INVALID_CONFIG),
                "{bad}"
            );
        }
    }

    #[test]
    fn what_already_holds_is_accepted_and_changes_nothing() {
        // Every described config sent back as it is described, as AlterConfigs clients do.
        let back: Vec<(String, Change)> = known()
            .into_iter()
            .filter(|c| c.0 != "retention.ms")
            .map(|(n, v, _)| set(n, &v))
            .collect();
        let o = options(&back, &known()).expect("what holds is accepted");
        assert_eq!(o.given(), 0, "nothing to store");
        let defaults: Vec<(String, Change)> = ["segment.ms", "compression.type", "no.such"]
            .iter()
            .map(|n| (n.to_string(), Change::Default))
            .collect();
        assert_eq!(options(&defaults[..2], &known()).map(|o| o.given()), Ok(0));
        assert_eq!(
            options(&defaults, &known()).map_err(|r| r.code),
            Err(INVALID_CONFIG),
            "an unknown name is refused even as a default"
        );
    }

    #[test]
    fn message_format_version_takes_kafka_versions_and_changes_nothing() {
        for v in [
            "0.10.0.0",
            "0.10.0",
            "0.10.0-IV1",
            "0.8.2",
            "2.8",
            "3.0-IV1",
            "3.7.1",
            " 1.0 ",
        ] {
            let o = options(&[set("message.format.version", v)], &known());
            assert_eq!(o.map(|o| o.given()), Ok(0), "{v}");
        }
        for v in [
            "",
            "0.10",
            "0.7.0",
            "4.0",
            "3.0-IV",
            "3.0.1-IV1",
            "3.x",
            "3..0",
            "0.10.0.0.",
            "latest",
        ] {
            assert_eq!(
                options(&[set("message.format.version", v)], &known()).map_err(|r| r.code),
                Err(INVALID_CONFIG),
                "{v:?}"
            );
        }
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
