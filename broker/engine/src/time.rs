//! Time as the engine sees it: microseconds since the Unix epoch, and the ISO-8601 text the
//! Queen SDKs read.

use chrono::{DateTime, SecondsFormat, Utc};

pub fn wall_clock_us() -> i64 {
    Utc::now().timestamp_micros()
}

/// Where the engine reads the time of a cycle and of its timers (lease expiry, delays, window
/// holds), so tests can drive time instead of sleeping.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Microseconds since the Unix epoch.
    fn now_us(&self) -> i64;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_us(&self) -> i64 {
        wall_clock_us()
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, the fixed-width form of 2.x message timestamps.
pub fn iso_ms(us: i64) -> String {
    match DateTime::<Utc>::from_timestamp_micros(us) {
        Some(t) => t.to_rfc3339_opts(SecondsFormat::Millis, true),
        None => "1970-01-01T00:00:00.000Z".to_string(),
    }
}

/// Parses an ISO-8601 / RFC 3339 instant into µs since the epoch.
pub fn parse_iso_us(s: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc).timestamp_micros())
        .or_else(|| {
            // Accept a naive `YYYY-MM-DDTHH:MM:SS[.fff]` as UTC, as the reference does.
            chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
                .ok()
                .map(|t| t.and_utc().timestamp_micros())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses() {
        let us = 1_700_000_000_123_456;
        let s = iso_ms(us);
        assert_eq!(s, "2023-11-14T22:13:20.123Z");
        assert_eq!(parse_iso_us(&s), Some(1_700_000_000_123_000));
        assert_eq!(
            parse_iso_us("2023-11-14T22:13:20"),
            Some(1_700_000_000_000_000)
        );
        assert_eq!(parse_iso_us("nonsense"), None);
    }
}
