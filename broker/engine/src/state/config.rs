//! The 21 queue options of the reference broker (spec/reference-broker.md §1.2), their defaults,
//! merge/replace semantics and the configure echo.

use queenmq_protocol::{QueueOptions, QueueSettings, Setting};

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

impl QueueConfig {
    /// Applies the given options onto `self` (merge): an option not given keeps its value,
    /// `Setting::Default` restores the default. The door checked types and ranges; the only
    /// rule kept here is the ceiling of the pop wait floor, which any door could exceed.
    pub fn merge(&self, o: &QueueOptions) -> QueueConfig {
        fn set<T: Clone>(slot: &mut T, given: &Option<Setting<T>>, default: &T) {
            if let Some(s) = given {
                *slot = s.resolve(default);
            }
        }
        let mut c = self.clone();
        let d = QueueConfig::default();
        set(&mut c.priority, &o.priority, &d.priority);
        set(&mut c.lease_time, &o.lease_time, &d.lease_time);
        set(&mut c.retry_limit, &o.retry_limit, &d.retry_limit);
        set(&mut c.retry_delay, &o.retry_delay, &d.retry_delay);
        set(&mut c.max_size, &o.max_size, &d.max_size);
        set(&mut c.ttl, &o.ttl, &d.ttl);
        set(
            &mut c.dead_letter_queue,
            &o.dead_letter_queue,
            &d.dead_letter_queue,
        );
        set(
            &mut c.dlq_after_max_retries,
            &o.dlq_after_max_retries,
            &d.dlq_after_max_retries,
        );
        set(
            &mut c.delayed_processing,
            &o.delayed_processing,
            &d.delayed_processing,
        );
        set(&mut c.window_buffer, &o.window_buffer, &d.window_buffer);
        set(
            &mut c.retention_seconds,
            &o.retention_seconds,
            &d.retention_seconds,
        );
        set(
            &mut c.completed_retention_seconds,
            &o.completed_retention_seconds,
            &d.completed_retention_seconds,
        );
        set(
            &mut c.retention_enabled,
            &o.retention_enabled,
            &d.retention_enabled,
        );
        set(
            &mut c.encryption_enabled,
            &o.encryption_enabled,
            &d.encryption_enabled,
        );
        set(
            &mut c.max_wait_time_seconds,
            &o.max_wait_time_seconds,
            &d.max_wait_time_seconds,
        );
        set(
            &mut c.min_pop_wait_time,
            &o.min_pop_wait_time,
            &d.min_pop_wait_time,
        );
        c.min_pop_wait_time = c.min_pop_wait_time.clamp(0, 60_000);
        set(
            &mut c.dedup_window_seconds,
            &o.dedup_window_seconds,
            &d.dedup_window_seconds,
        );
        set(
            &mut c.retention_sink_hold,
            &o.retention_sink_hold,
            &d.retention_sink_hold,
        );
        set(
            &mut c.retention_sink_hold_max_seconds,
            &o.retention_sink_hold_max_seconds,
            &d.retention_sink_hold_max_seconds,
        );
        c
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

    #[test]
    fn merge_keeps_what_is_not_given_and_default_restores() {
        let c = QueueConfig::default().merge(&QueueOptions {
            lease_time: Some(Setting::Value(30)),
            retry_limit: Some(Setting::Value(1)),
            ..Default::default()
        });
        assert_eq!((c.lease_time, c.retry_limit), (30, 1));
        let c = c.merge(&QueueOptions {
            lease_time: Some(Setting::Default),
            ..Default::default()
        });
        assert_eq!((c.lease_time, c.retry_limit), (300, 1));
        let c = c.merge(&QueueOptions {
            min_pop_wait_time: Some(Setting::Value(999_999)),
            ..Default::default()
        });
        assert_eq!(c.min_pop_wait_time, 60_000);
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
