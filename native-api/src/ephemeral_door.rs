//! What the HTTP door needs of the ephemeral (RAM) store, which the broker process owns: the
//! routes translate JSON to these calls the way the others translate it to bus commands.

use std::sync::Arc;

use queenmq_protocol::EphemeralOptions;

/// A refusal of the store, each with its stable code (spec native-api §2.16).
#[derive(Debug, Clone, PartialEq)]
pub enum EphemeralRefusal {
    /// 400 `ephemeral_bad_request`.
    BadRequest(String),
    /// 404 `ephemeral_queue_not_found`.
    NotFound,
    /// 429 `queue_full`: the queue's bounds under policy `reject`.
    Full(String),
    /// 403 `ephemeral_quota_exceeded`: a per-tenant bound (queues, groups of a partition,
    /// the tenant's share of the node's bytes); retrying does not help until it frees.
    Quota(String),
    /// 503 `ephemeral_unavailable`: the node's ephemeral byte budget, or too many waiters.
    Unavailable(String),
    /// 503 `ephemeral_disabled`: the kill switch.
    Disabled,
}

/// One delivered message.
#[derive(Debug, Clone, PartialEq)]
pub struct EphemeralMessage {
    pub id: String,
    pub partition: String,
    /// The payload as the JSON text it was pushed as.
    pub payload: Arc<str>,
    pub attempts: u32,
}

#[derive(Debug, Clone)]
pub struct PopAsk<'a> {
    pub queue: &'a str,
    pub partition: Option<&'a str>,
    /// None: queue mode.
    pub group: Option<&'a str>,
    pub batch: usize,
    /// Commit at delivery: no lease, nothing to ack.
    pub auto_ack: bool,
    /// Only a queue that exists: a missing one is `NotFound`, not made implicit. A waiting
    /// pop's repeats ask this, so a DELETE while it waited does not bring the queue back.
    pub existing: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckStatus {
    Completed,
    Failed,
    Retry,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// Settled: consumed, or at its retry limit dropped (and counted).
    Acked,
    /// Comes back on a later pop with `attempts + 1`.
    Redelivered,
    /// The id names an earlier incarnation of this process.
    Stale,
    /// No lease of this group holds the id (acked already, expired and redelivered, dropped).
    Unknown,
}

impl AckOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AckOutcome::Acked => "acked",
            AckOutcome::Redelivered => "redelivered",
            AckOutcome::Stale => "stale",
            AckOutcome::Unknown => "unknown",
        }
    }
}

/// Held while a pop waits; dropping it frees the slot.
pub type WaitSlot = Box<dyn Send>;

/// The RAM store, per tenant. Declarations are replicated by the engine first (the routes
/// send the bus command), then told to the store; the store itself never touches the log.
pub trait EphemeralDoor: Send + Sync + std::fmt::Debug + 'static {
    /// The kill switch: false answers every route 503 `ephemeral_disabled`.
    fn enabled(&self) -> bool;
    /// Whether the tenant's declarations were read from the engine since this process began.
    fn loaded(&self, tenant: &str) -> bool;
    /// The tenant's declarations as the engine holds them; ignored once loaded.
    fn seed(&self, tenant: &str, declared: Vec<(String, EphemeralOptions)>);
    /// A declaration the engine committed: the queue exists, with these bounds.
    fn declare(&self, tenant: &str, queue: &str, options: EphemeralOptions);
    /// Removes the queue with its contents and cursors; whether it existed.
    fn forget(&self, tenant: &str, queue: &str) -> bool;
    /// Drops the contents, leases and cursors; the declaration stays. Messages dropped.
    fn reset(&self, tenant: &str, queue: &str) -> u64;
    /// All or nothing; payloads are JSON texts.
    fn push(
        &self,
        tenant: &str,
        queue: &str,
        partition: Option<&str>,
        payloads: Vec<String>,
    ) -> Result<usize, EphemeralRefusal>;
    fn pop(
        &self,
        tenant: &str,
        ask: &PopAsk<'_>,
    ) -> Result<Vec<EphemeralMessage>, EphemeralRefusal>;
    /// The gate a waiting pop parks on: one per group and scope (the queue, or the pop's
    /// partition), rung once (`notify_one`) per push that gives it something and again
    /// while what is due there outlasts the pop that took; every waiter is woken when the
    /// queue goes. None once the queue is gone (a DELETE while the pop waited): the pop
    /// answers rather than bring it back as implicit. A new gate is admitted against the
    /// node's and the tenant's byte caps as a pop's growth is: past them, the refusal.
    fn wake(
        &self,
        tenant: &str,
        ask: &PopAsk<'_>,
    ) -> Result<Option<Arc<tokio::sync::Notify>>, EphemeralRefusal>;
    /// The waiting pop `ask` leaves: its gate goes if no other waiter holds it, so gates
    /// live as long as their waiters, not until a push or the sweep meets them.
    fn unwait(&self, tenant: &str, ask: &PopAsk<'_>);
    /// A waiting pop's slot, out of the node's long-poll slots that durable pops share and
    /// within the tenant's part of them; None past either.
    fn wait_slot(&self, tenant: &str) -> Option<WaitSlot>;
    /// The queue's `windowBuffer` as (ms, count); (0, 0) when off or unknown.
    fn window(&self, tenant: &str, queue: &str) -> (u32, u32);
    fn ack(
        &self,
        tenant: &str,
        queue: &str,
        group: Option<&str>,
        acks: &[(String, AckStatus)],
    ) -> Vec<AckOutcome>;
    /// `{"queues": [...]}` of the tenant.
    fn queues(&self, tenant: &str) -> serde_json::Value;
    /// The queue's gauges; None when there is no such queue.
    fn depth(&self, tenant: &str, queue: &str) -> Option<serde_json::Value>;
}
