//! The queue options a configure request sets: parsed and range-checked by the door, merged
//! over the queue's current options by the engine.

/// One option as the caller sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setting<T> {
    /// `null`: back to the broker's default.
    Default,
    Value(T),
}

impl<T: Clone> Setting<T> {
    /// The option after applying this setting.
    pub fn resolve(&self, default: &T) -> T {
        match self {
            Setting::Default => default.clone(),
            Setting::Value(v) => v.clone(),
        }
    }
}

/// Only the options the caller sent are `Some`; options it did not name keep their value (or
/// their default, when the request replaces the queue's options).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueOptions {
    pub priority: Option<Setting<i64>>,
    pub lease_time: Option<Setting<i64>>,
    pub retry_limit: Option<Setting<i64>>,
    pub retry_delay: Option<Setting<i64>>,
    pub max_size: Option<Setting<i64>>,
    pub ttl: Option<Setting<i64>>,
    pub dead_letter_queue: Option<Setting<bool>>,
    pub dlq_after_max_retries: Option<Setting<bool>>,
    pub delayed_processing: Option<Setting<i64>>,
    pub window_buffer: Option<Setting<i64>>,
    pub retention_seconds: Option<Setting<i64>>,
    pub completed_retention_seconds: Option<Setting<i64>>,
    pub retention_enabled: Option<Setting<bool>>,
    pub encryption_enabled: Option<Setting<bool>>,
    pub max_wait_time_seconds: Option<Setting<i64>>,
    pub min_pop_wait_time: Option<Setting<i64>>,
    pub dedup_window_seconds: Option<Setting<i64>>,
    pub retention_sink_hold: Option<Setting<String>>,
    pub retention_sink_hold_max_seconds: Option<Setting<i64>>,
}

impl QueueOptions {
    /// How many options were given (for sizing the request).
    pub fn given(&self) -> usize {
        let ints = [
            &self.priority,
            &self.lease_time,
            &self.retry_limit,
            &self.retry_delay,
            &self.max_size,
            &self.ttl,
            &self.delayed_processing,
            &self.window_buffer,
            &self.retention_seconds,
            &self.completed_retention_seconds,
            &self.max_wait_time_seconds,
            &self.min_pop_wait_time,
            &self.dedup_window_seconds,
            &self.retention_sink_hold_max_seconds,
        ];
        let bools = [
            &self.dead_letter_queue,
            &self.dlq_after_max_retries,
            &self.retention_enabled,
            &self.encryption_enabled,
        ];
        ints.iter().filter(|o| o.is_some()).count()
            + bools.iter().filter(|o| o.is_some()).count()
            + usize::from(self.retention_sink_hold.is_some())
    }
}
