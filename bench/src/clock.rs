//! Microseconds since the Unix epoch, read from a monotonic clock anchored once, so the
//! timestamps producers put in payloads and the pop times consumers compare them with never
//! jump with wall-clock adjustments during a run.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    anchor: Instant,
    anchor_epoch_us: u64,
}

impl Clock {
    pub fn new() -> Self {
        let anchor = Instant::now();
        let anchor_epoch_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        Self {
            anchor,
            anchor_epoch_us,
        }
    }

    /// `instant` as microseconds since the Unix epoch.
    pub fn epoch_us(&self, instant: Instant) -> u64 {
        let since = instant.saturating_duration_since(self.anchor).as_micros() as u64;
        let before = self.anchor.saturating_duration_since(instant).as_micros() as u64;
        (self.anchor_epoch_us + since).saturating_sub(before)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// Microseconds between two instants, zero if `to` is before `from`.
pub fn micros_between(from: Instant, to: Instant) -> u64 {
    to.saturating_duration_since(from).as_micros() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn epoch_us_is_monotonic_around_the_anchor() {
        let clock = Clock::new();
        let later = clock.anchor + Duration::from_millis(5);
        assert_eq!(clock.epoch_us(later) - clock.epoch_us(clock.anchor), 5_000);
        if let Some(earlier) = clock.anchor.checked_sub(Duration::from_millis(2)) {
            assert_eq!(
                clock.epoch_us(clock.anchor) - clock.epoch_us(earlier),
                2_000
            );
        }
        assert!(clock.epoch_us(Instant::now()) >= clock.anchor_epoch_us);
    }
}
