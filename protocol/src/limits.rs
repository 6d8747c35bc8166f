//! Range rules for every number and name a client sends, shared by the doors (the Queen HTTP API
//! today, the Kafka port later) so both refuse the same values with the same sentences.
//!
//! Where the reference broker states a limit (names ≤ 512 bytes, batch ≤ 10 000, timeout ≤
//! 300 000 ms, `minPopWaitTime` 0..=60 000, `retentionSinkHoldMaxSeconds` 60..=31 536 000) it is
//! used; the other maxima are chosen so that every time computed from them (seconds × 10⁶ µs
//! added to a microsecond clock) stays far inside `i64`, and are listed in docs/configuration.md.

use crate::error::QueenError;

/// Longest queue, partition, consumer group, namespace, task, trace name, lease id or
/// transaction id, in bytes (the reference broker's name limit).
pub const MAX_NAME_BYTES: usize = 512;
/// Most messages one pop may ask for (`batch`).
pub const MAX_POP_BATCH: u64 = 10_000;
/// Most partitions one pop may claim (`partitions`).
pub const MAX_POP_PARTITIONS: u64 = 10_000;
/// Longest long-poll wait (`timeout`, `wait` ms).
pub const MAX_WAIT_MS: u64 = 300_000;
/// Longest lease a pop may ask for (`leaseSeconds`) and a queue may set (`leaseTime`): 7 days.
pub const MAX_LEASE_SECONDS: u64 = 604_800;
/// Most trace names one trace event may carry.
pub const MAX_TRACE_NAMES: usize = 64;
/// Longest ack `error` text kept with a failed message (it is stored with the DLQ row).
pub const MAX_ERROR_TEXT_BYTES: usize = 16 * 1024;

/// KV (§2.13): the reference broker names no numbers beside the namespace pattern; these keep
/// one call's work and one row's bytes small next to the per-tenant KV byte cap.
/// Longest KV key, in bytes (413 `kv_key_too_large` past it).
pub const MAX_KV_KEY_BYTES: usize = 1024;
/// Longest KV value as JSON text, in bytes (413 `kv_value_too_large` past it).
pub const MAX_KV_VALUE_BYTES: usize = 256 * 1024;
/// Most operations in one KV call or one transaction's `kv` rider (`kv_too_many_ops`).
pub const MAX_KV_OPS: usize = 256;
/// Most keys one `getMany` may name (`kv_too_many_keys`).
pub const MAX_KV_GET_MANY_KEYS: usize = 1000;
/// `getPrefix` page size when the caller names none, and the most it may ask (clamped).
pub const DEFAULT_KV_PREFIX_LIMIT: usize = 100;
pub const MAX_KV_PREFIX_LIMIT: usize = 1000;
/// Bytes of rows (key, value and fields) the getMany and getPrefix ops of one call answer, summed
/// over the call: past it an op answers `truncated` (a getPrefix with `nextAfter`). Each such op
/// still answers its first row, so paging always moves on.
pub const MAX_KV_ANSWER_BYTES: usize = 4 << 20;
/// What a row costs in an answer beside its key and value (version, times, JSON punctuation).
pub const KV_ANSWER_ROW_FIELDS: usize = 128;
/// Longest KV `ttlSeconds` and lock `ttlSeconds`: ten years.
pub const MAX_KV_TTL_SECONDS: u64 = 10 * YEAR as u64;
/// Locks (§2.14): name and owner length, and the most permits of one semaphore.
pub const MAX_LOCK_NAME_BYTES: usize = 256;
pub const MAX_LOCK_OWNER_BYTES: usize = 256;
pub const MAX_LOCK_LIMIT: u32 = 1024;

const YEAR: i64 = 31_536_000;

/// The allowed range of one integer queue option.
#[derive(Debug, Clone, Copy)]
pub struct OptionRange {
    pub key: &'static str,
    pub min: i64,
    pub max: i64,
    pub unit: &'static str,
}

/// Every integer queue option with its range. A value outside is refused (400), never clamped,
/// except `minPopWaitTime`, which the reference broker clamps to 0..=60 000 and so do we.
pub const QUEUE_OPTION_RANGES: &[OptionRange] = &[
    range("priority", -1_000_000, 1_000_000, ""),
    range("leaseTime", 0, MAX_LEASE_SECONDS as i64, "seconds"),
    range("retryLimit", 0, 10_000, ""),
    range("retryDelay", 0, 86_400_000, "ms"),
    range("maxSize", 0, 1_000_000_000_000, ""),
    range("ttl", 0, 10 * YEAR, "seconds"),
    range("delayedProcessing", 0, YEAR, "seconds"),
    range("windowBuffer", 0, 86_400, "seconds"),
    range("retentionSeconds", 0, 10 * YEAR, "seconds"),
    range("completedRetentionSeconds", 0, 10 * YEAR, "seconds"),
    range("maxWaitTimeSeconds", 0, 10 * YEAR, "seconds"),
    range("dedupWindowSeconds", 0, 604_800, "seconds"),
    range("retentionSinkHoldMaxSeconds", 60, YEAR, "seconds"),
];

const fn range(key: &'static str, min: i64, max: i64, unit: &'static str) -> OptionRange {
    OptionRange {
        key,
        min,
        max,
        unit,
    }
}

/// Refuses an empty-allowed name longer than [`MAX_NAME_BYTES`] or holding control characters.
pub fn check_name(field: &str, value: &str) -> Result<(), QueenError> {
    if value.len() > MAX_NAME_BYTES {
        return Err(QueenError::bad_request(format!(
            "{field} is {} bytes long; the limit is {MAX_NAME_BYTES} bytes",
            value.len()
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(QueenError::bad_request(format!(
            "{field} must not contain control characters"
        )));
    }
    Ok(())
}

/// Refuses a client number above `max`, naming the field and the limit.
pub fn check_max(field: &str, value: u64, max: u64, unit: &str) -> Result<u64, QueenError> {
    if value > max {
        let unit = if unit.is_empty() {
            String::new()
        } else {
            format!(" {unit}")
        };
        return Err(QueenError::bad_request(format!(
            "{field} = {value} is above the limit of {max}{unit}"
        )));
    }
    Ok(value)
}

/// Refuses more than `max` elements of a list, naming the list and the limit.
pub fn check_count(what: &str, count: usize, max: usize) -> Result<(), QueenError> {
    if count > max {
        return Err(QueenError::new(
            crate::ErrorCode::PayloadTooLarge,
            format!("{count} {what} in one request; the limit is {max}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        assert!(check_name("queue", &"q".repeat(MAX_NAME_BYTES)).is_ok());
        assert!(check_name("queue", &"q".repeat(MAX_NAME_BYTES + 1)).is_err());
        assert!(check_name("queue", "a\nb").is_err());
        assert_eq!(check_max("batch", 10, 10, "").ok(), Some(10));
        let e = check_max("leaseSeconds", 11, 10, "seconds").unwrap_err();
        assert_eq!(
            e.message,
            "leaseSeconds = 11 is above the limit of 10 seconds"
        );
        assert!(check_count("items", 3, 2).is_err());
    }

    #[test]
    fn every_range_keeps_microsecond_arithmetic_in_i64() {
        for r in QUEUE_OPTION_RANGES {
            assert!(r.min <= r.max, "{}", r.key);
            assert!(r.max.checked_mul(1_000_000).is_some(), "{}", r.key);
        }
    }
}
