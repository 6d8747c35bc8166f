//! The Kafka topic configs that have no queue option to live in (`max.message.bytes`,
//! `segment.bytes`): one row per topic in a reserved KV namespace, tied to the queue's id as
//! the partition floor is (kafka-port/src/admin/floor.rs), so a row left by a queue deleted
//! over HTTP is not inherited by the next queue of that name.
//!
//! The row is shared by two readers: the Kafka door (DescribeConfigs; the admin requests that
//! rewrite it) and the engine's Kafka produce planning, which bounds each partition's record
//! batch by the topic's `max.message.bytes` from its own state, without a round trip. Both
//! read it through this module, so they cannot disagree on what a row means.
//!
//! A row is one JSON string of `name=value` pairs joined by `;`:
//! `"queue=<queue id>;max.message.bytes=10000;segment.bytes=20000"`. A KV value is JSON text
//! (the native KV API shows a row by parsing it), and a string whose characters never need an
//! escape is JSON the engine can read without a JSON parser, which it does not take. A config
//! absent from the row (or out of its range: the row is only written by the door, after the
//! range check, but a KV row is read back from disk) holds its broker default.

pub use crate::kv::KAFKA_TOPIC_CONFIGS_NS;

pub const MAX_MESSAGE_BYTES: &str = "max.message.bytes";
pub const SEGMENT_BYTES: &str = "segment.bytes";

/// Kafka's lower bound of `segment.bytes` (`LegacyRecord.RECORD_OVERHEAD_V0`): a segment must
/// hold at least one record header.
pub const MIN_SEGMENT_BYTES: i32 = 14;

/// The configs a topic's row sets; `None`: the broker default holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicConfigs {
    /// The queue these configs belong to; `None`: whichever queue bears the name (a row
    /// written by a CreateTopics before its queue existed).
    pub queue: Option<String>,
    pub max_message_bytes: Option<i32>,
    /// Stored and shown; it bounds nothing, as queen's segments are shared by every queue.
    pub segment_bytes: Option<i32>,
}

impl TopicConfigs {
    /// Whether the row belongs to the queue `queue_id`.
    pub fn holds_for(&self, queue_id: &str) -> bool {
        self.queue.as_deref().is_none_or(|q| q == queue_id)
    }

    /// Whether the row sets nothing (and may be deleted rather than kept).
    pub fn is_empty(&self) -> bool {
        self.max_message_bytes.is_none() && self.segment_bytes.is_none()
    }

    /// Whether a record batch of `batch_bytes` (its size on the wire, compressed, as Kafka's
    /// `LogValidator` measures it) may be appended under this row.
    pub fn batch_fits(&self, batch_bytes: usize) -> bool {
        self.max_message_bytes
            .is_none_or(|max| usize::try_from(max).is_ok_and(|max| batch_bytes <= max))
    }

    /// Sets the config `name` to `value` (`None`: back to its default); false for a name
    /// the row does not keep.
    pub fn set(&mut self, name: &str, value: Option<i32>) -> bool {
        match name {
            MAX_MESSAGE_BYTES => self.max_message_bytes = value,
            SEGMENT_BYTES => self.segment_bytes = value,
            _ => return false,
        }
        true
    }

    /// The row's JSON text. A queue id is a UUID; one with a character outside
    /// `[0-9A-Za-z-]` (which a JSON string might need escaped, or which would split the
    /// pairs) is left out, and the row then holds for any queue of the name.
    pub fn encode(&self) -> String {
        let mut pairs = Vec::new();
        if let Some(q) = self.queue.as_deref().filter(|q| plain_id(q)) {
            pairs.push(format!("queue={q}"));
        }
        if let Some(n) = self.max_message_bytes {
            pairs.push(format!("{MAX_MESSAGE_BYTES}={n}"));
        }
        if let Some(n) = self.segment_bytes {
            pairs.push(format!("{SEGMENT_BYTES}={n}"));
        }
        format!("\"{}\"", pairs.join(";"))
    }

    /// A stored row's configs; a row that is not a JSON string without escapes reads as
    /// empty, and a pair that is not `name=value` with a known name and a value in range is
    /// ignored.
    pub fn parse(value: &str) -> TopicConfigs {
        let mut c = TopicConfigs::default();
        let Some(body) = value
            .trim()
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .filter(|b| !b.contains(['"', '\\']))
        else {
            return c;
        };
        for (name, v) in body.split(';').filter_map(|l| l.split_once('=')) {
            let int = |min: i32| v.parse::<i32>().ok().filter(|n| *n >= min);
            match name {
                "queue" if plain_id(v) => c.queue = Some(v.to_owned()),
                MAX_MESSAGE_BYTES => c.max_message_bytes = int(0),
                SEGMENT_BYTES => c.segment_bytes = int(MIN_SEGMENT_BYTES),
                _ => {}
            }
        }
        c
    }
}

fn plain_id(q: &str) -> bool {
    !q.is_empty() && q.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The value a client asks for `name`, range-checked as Kafka checks it (`max.message.bytes`
/// in `0..=i32::MAX`, `segment.bytes` in `14..=i32::MAX`), or why not.
pub fn check(name: &str, value: &str) -> Result<i32, String> {
    let min = match name {
        MAX_MESSAGE_BYTES => 0,
        SEGMENT_BYTES => MIN_SEGMENT_BYTES,
        other => return Err(format!("{other:?} is not kept in a topic config row")),
    };
    value
        .trim()
        .parse::<i32>()
        .ok()
        .filter(|n| *n >= min)
        .ok_or_else(|| format!("{name} {value:?} is not an integer in {min}..={}", i32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_range_checked_as_kafka_does() {
        assert_eq!(check(MAX_MESSAGE_BYTES, "10000"), Ok(10_000));
        assert_eq!(check(MAX_MESSAGE_BYTES, "0"), Ok(0));
        assert_eq!(check(MAX_MESSAGE_BYTES, " 2147483647 "), Ok(i32::MAX));
        assert_eq!(check(SEGMENT_BYTES, "14"), Ok(14));
        for (n, v) in [
            (MAX_MESSAGE_BYTES, "-1"),
            (MAX_MESSAGE_BYTES, "2147483648"),
            (MAX_MESSAGE_BYTES, "1.5"),
            (MAX_MESSAGE_BYTES, ""),
            (SEGMENT_BYTES, "13"),
            (SEGMENT_BYTES, "x"),
            ("retention.ms", "1000"),
        ] {
            assert!(check(n, v).is_err(), "{n}={v}");
        }
    }

    #[test]
    fn a_row_reads_back_what_was_written_and_ignores_what_is_out_of_range() {
        let row = TopicConfigs {
            queue: Some("q1".into()),
            max_message_bytes: Some(10_000),
            segment_bytes: Some(20_000),
        };
        assert_eq!(TopicConfigs::parse(&row.encode()), row);
        assert_eq!(
            row.encode(),
            r#""queue=q1;max.message.bytes=10000;segment.bytes=20000""#,
            "a JSON string, as every KV value is JSON text"
        );
        let bad = r#""queue=q;max.message.bytes=-1;segment.bytes=13""#;
        let read = TopicConfigs::parse(bad);
        assert!(read.is_empty(), "{read:?}");
        for junk in [
            "",
            "8",
            r#""max.message.bytes""#,
            r#""max.message.bytes=x""#,
            r#""other=1""#,
            "max.message.bytes=5",
            r#""max.message.bytes=5"#,
            r#""max.message.bytes=5\";segment.bytes=20""#,
        ] {
            assert!(TopicConfigs::parse(junk).is_empty(), "{junk}");
        }
    }

    #[test]
    fn a_row_belongs_to_its_queue_or_to_any_when_it_names_none() {
        let bound = TopicConfigs::parse(r#""queue=q1;max.message.bytes=5""#);
        assert!(bound.holds_for("q1"));
        assert!(!bound.holds_for("q2"), "a dead incarnation's configs");
        assert!(TopicConfigs::parse(r#""max.message.bytes=5""#).holds_for("any"));
        let odd = TopicConfigs {
            queue: Some("q\"1".into()),
            max_message_bytes: Some(5),
            ..TopicConfigs::default()
        };
        assert_eq!(
            odd.encode(),
            r#""max.message.bytes=5""#,
            "no escape is ever written"
        );
    }

    #[test]
    fn a_batch_fits_up_to_the_bound_inclusive() {
        let row = TopicConfigs {
            max_message_bytes: Some(100),
            ..TopicConfigs::default()
        };
        assert!(row.batch_fits(100));
        assert!(!row.batch_fits(101));
        assert!(TopicConfigs::default().batch_fits(usize::MAX), "no bound");
        let zero = TopicConfigs {
            max_message_bytes: Some(0),
            ..TopicConfigs::default()
        };
        assert!(!zero.batch_fits(1), "0 takes no batch, as on Kafka");
    }
}
