//! Ephemeral (RAM) queues: their declared configuration is the only part that is replicated
//! (spec native-api §2.16); contents live in the broker process and never reach the log.

use crate::QueenError;

/// Longest ephemeral queue name, in bytes.
pub const MAX_EPHEMERAL_NAME_BYTES: usize = 512;
/// Most declared ephemeral queues one tenant may hold: each is a replicated row.
pub const MAX_EPHEMERAL_CONFIGURED: usize = 10_000;
/// Largest `maxBytes` one queue may declare (the broker-global cap bounds the sum anyway).
pub const MAX_EPHEMERAL_QUEUE_BYTES: u64 = 1 << 30;
/// Largest `maxLength` one queue may declare.
pub const MAX_EPHEMERAL_QUEUE_LENGTH: u32 = 1_000_000;
/// Largest `ttlSeconds` (one year); 0 keeps messages until consumed or pushed out.
pub const MAX_EPHEMERAL_TTL_SECONDS: u32 = 31_536_000;
/// Largest `leaseSeconds` (one day).
pub const MAX_EPHEMERAL_LEASE_SECONDS: u32 = 86_400;
/// Largest `retryLimit`.
pub const MAX_EPHEMERAL_RETRY_LIMIT: u32 = 1_000;
/// Largest `windowBuffer.ms` and `windowBuffer.count`.
pub const MAX_EPHEMERAL_WINDOW_MS: u32 = 60_000;
pub const MAX_EPHEMERAL_WINDOW_COUNT: u32 = 10_000;

/// The bounds of one ephemeral queue, every default applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EphemeralOptions {
    pub max_bytes: u64,
    pub max_length: u32,
    /// Past a bound, drop the oldest message instead of refusing the push.
    pub drop_oldest: bool,
    /// 0: no age limit.
    pub ttl_seconds: u32,
    pub lease_seconds: u32,
    pub retry_limit: u32,
    /// A waiting pop holds its answer up to `window_ms` for `window_count` messages; 0: off.
    pub window_ms: u32,
    pub window_count: u32,
}

impl Default for EphemeralOptions {
    fn default() -> Self {
        EphemeralOptions {
            max_bytes: 16 << 20,
            max_length: 10_000,
            drop_oldest: false,
            ttl_seconds: 0,
            lease_seconds: 30,
            retry_limit: 5,
            window_ms: 0,
            window_count: 0,
        }
    }
}

impl EphemeralOptions {
    /// Refuses values outside the documented ranges: a replicated row must never carry a bound
    /// the store cannot honour.
    pub fn check(&self) -> Result<(), QueenError> {
        let range = |name: &str, v: u64, lo: u64, hi: u64| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(QueenError::bad_request(format!(
                    "{name} must be in {lo}..={hi}"
                )))
            }
        };
        range("maxBytes", self.max_bytes, 1, MAX_EPHEMERAL_QUEUE_BYTES)?;
        range(
            "maxLength",
            self.max_length.into(),
            1,
            MAX_EPHEMERAL_QUEUE_LENGTH.into(),
        )?;
        range(
            "ttlSeconds",
            self.ttl_seconds.into(),
            0,
            MAX_EPHEMERAL_TTL_SECONDS.into(),
        )?;
        range(
            "leaseSeconds",
            self.lease_seconds.into(),
            1,
            MAX_EPHEMERAL_LEASE_SECONDS.into(),
        )?;
        range(
            "retryLimit",
            self.retry_limit.into(),
            0,
            MAX_EPHEMERAL_RETRY_LIMIT.into(),
        )?;
        range(
            "windowBuffer.ms",
            self.window_ms.into(),
            0,
            MAX_EPHEMERAL_WINDOW_MS.into(),
        )?;
        range(
            "windowBuffer.count",
            self.window_count.into(),
            0,
            MAX_EPHEMERAL_WINDOW_COUNT.into(),
        )
    }
}

/// Names travel in URL paths and metric labels: bounded, no control characters.
pub fn check_ephemeral_name(name: &str) -> Result<(), QueenError> {
    check_ephemeral_field("queue", name)
}

/// [`check_ephemeral_name`] for the field `kind` (a partition, a group), named in the error.
pub fn check_ephemeral_field(kind: &str, name: &str) -> Result<(), QueenError> {
    if name.is_empty() {
        return Err(QueenError::bad_request(format!("{kind} is required")));
    }
    if name.len() > MAX_EPHEMERAL_NAME_BYTES {
        return Err(QueenError::bad_request(format!(
            "{kind} is longer than {MAX_EPHEMERAL_NAME_BYTES} bytes"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(QueenError::bad_request(format!(
            "{kind} contains control characters"
        )));
    }
    Ok(())
}

#[derive(Debug, Clone)]
pub enum EphemeralConfigReq {
    Set {
        queue: String,
        options: EphemeralOptions,
    },
    Delete {
        queue: String,
    },
    /// Every declared queue of the tenant, read by the store when it first serves the tenant.
    List,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EphemeralConfigOutcome {
    Set,
    /// Whether a declaration was there to delete.
    Deleted(bool),
    List(Vec<(String, EphemeralOptions)>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_each_bound_is_checked() {
        assert!(EphemeralOptions::default().check().is_ok());
        let bad = [
            EphemeralOptions {
                max_bytes: 0,
                ..Default::default()
            },
            EphemeralOptions {
                max_length: MAX_EPHEMERAL_QUEUE_LENGTH + 1,
                ..Default::default()
            },
            EphemeralOptions {
                lease_seconds: 0,
                ..Default::default()
            },
            EphemeralOptions {
                retry_limit: MAX_EPHEMERAL_RETRY_LIMIT + 1,
                ..Default::default()
            },
        ];
        for o in bad {
            assert!(o.check().is_err(), "{o:?}");
        }
        assert!(check_ephemeral_name(&"a".repeat(512)).is_ok());
        assert!(check_ephemeral_name(&"a".repeat(513)).is_err());
        assert!(check_ephemeral_name("a\nb").is_err());
        assert!(check_ephemeral_name("").is_err());
        let e = check_ephemeral_field("partition", "").unwrap_err();
        assert_eq!(e.message, "partition is required");
    }
}
