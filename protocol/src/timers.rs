//! Timers (spec/native-api.md §2.15): a message scheduled into a queue after a delay, keyed
//! by (queue, timer key), replicated engine state until it fires as an ordinary push.

use bytes::Bytes;

/// Schedule or reschedule (the same upsert): checked and decoded by the door.
#[derive(Debug, Clone)]
pub struct TimerSchedule {
    pub queue: String,
    pub key: String,
    pub partition: String,
    /// Compact JSON text: the `data` of the message the fire pushes.
    pub payload: Bytes,
    /// Relative to the cycle that plans it; negative is due at once.
    pub delay_ms: i64,
    pub txn: String,
}

#[derive(Debug, Clone)]
pub enum TimerOp {
    Schedule(TimerSchedule),
    Cancel {
        queue: String,
        key: String,
        /// Echoed back: the caller looks for it in the queue when the answer is `absent`.
        txn: Option<String>,
    },
}

#[derive(Debug, Clone, Default)]
pub struct TimersReq {
    pub ops: Vec<TimerOp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerStatus {
    Scheduled,
    Rescheduled,
    Cancelled,
    /// Not pending: never scheduled, cancelled, or already fired.
    Absent,
}

impl TimerStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TimerStatus::Scheduled => "scheduled",
            TimerStatus::Rescheduled => "rescheduled",
            TimerStatus::Cancelled => "cancelled",
            TimerStatus::Absent => "absent",
        }
    }

    pub fn ok(self) -> bool {
        self != TimerStatus::Absent
    }
}

/// One op's answer, index-aligned with the request.
#[derive(Debug, Clone)]
pub struct TimerResult {
    pub status: TimerStatus,
    pub queue: String,
    pub key: String,
    pub txn: Option<String>,
    /// The id the fired message will carry (schedules only).
    pub message_id: Option<String>,
    pub deliver_at_us: Option<i64>,
}

/// A pending timer as stored.
#[derive(Debug, Clone)]
pub struct TimerView {
    pub queue: String,
    pub key: String,
    pub partition: String,
    /// Only for a peek: a listing never sends payloads, so a page does not copy them.
    pub payload: Option<Bytes>,
    /// The payload is the sealed envelope of an encrypted queue's timer, shown as stored.
    pub encrypted: bool,
    pub txn: String,
    pub message_id: String,
    pub deliver_at_us: i64,
    pub created_us: i64,
}

/// One keyset page of a queue's pending timers, in key order.
#[derive(Debug, Clone, Default)]
pub struct TimerPage {
    pub rows: Vec<TimerView>,
    pub truncated: bool,
    pub next_after: Option<String>,
}

/// How far ahead a delay may reach: 365 days. Past it a schedule is refused (403), so no
/// client parks a row for ever by accident; a negative delay is due now, however negative.
pub const MAX_TIMER_DELAY_MS: i64 = 365 * 24 * 3600 * 1000;
/// The largest payload a timer keeps, decoded (after zstd): it lives in memory until the fire.
pub const MAX_TIMER_PAYLOAD_BYTES: usize = 1 << 20;
/// The longest timer key, in bytes.
pub const MAX_TIMER_KEY_BYTES: usize = 1024;
/// Ops in one `POST /api/v1/timers` call.
pub const MAX_TIMER_OPS: usize = 1000;
/// Pending timers a tenant may hold, and the bytes they may hold; past either a schedule is
/// refused (retriable) until timers fire or are cancelled.
pub const MAX_TIMERS_PER_TENANT: usize = 1_000_000;
/// How a quota refusal's message starts: the door answers it 403 `timers_quota`, where any
/// other `Forbidden` of a schedule is the horizon.
pub const TIMERS_QUOTA_REFUSAL: &str = "timers quota: ";
pub const MAX_TIMER_BYTES_PER_TENANT: usize = 256 << 20;
