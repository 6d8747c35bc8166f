//! The seam between scenarios and a broker's wire: a scenario only pushes batches, pops
//! batches and acks batches through these traits. The Queen HTTP driver is one
//! implementation; the Kafka driver (produce / fetch / commit offsets) is another.

use std::future::Future;

use bytes::Bytes;

use crate::payload::PayloadFields;

/// One message to push. `payload` is the serialised JSON built by `PayloadBuilder`.
#[derive(Debug, Clone)]
pub struct OutMessage {
    /// Run-unique id, also carried as `seq` in the payload.
    pub id: u64,
    pub partition: u32,
    pub payload: String,
}

/// The broker's verdict on one pushed message, index-aligned with the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushStatus {
    /// Stored (Queen: `queued` or `buffered`).
    Accepted,
    /// Already stored under the same id (counts as accepted).
    Duplicate,
    Failed,
}

impl PushStatus {
    pub fn is_accepted(self) -> bool {
        matches!(self, PushStatus::Accepted | PushStatus::Duplicate)
    }
}

/// What to pop.
#[derive(Debug, Clone)]
pub struct PopRequest {
    /// `None` = queue mode (one implicit group).
    pub group: Option<String>,
    /// Most messages in one answer.
    pub batch: usize,
    /// Most partitions one pop may claim.
    pub partitions: usize,
    /// How long the broker may hold an empty pop (long poll).
    pub wait_ms: u64,
    /// Lease length override, if any.
    pub lease_secs: Option<u64>,
    /// This consumer's place in its group, `worker` of `workers` (0-based), for drivers that
    /// assign partitions statically (Kafka); the Queen broker leases partitions itself.
    pub worker: usize,
    pub workers: usize,
}

/// One delivered message. `fields` is `None` when the payload was not ours (malformed).
#[derive(Debug, Clone)]
pub struct Delivery<A> {
    pub fields: Option<PayloadFields>,
    /// The payload bytes as delivered, compared with what was pushed.
    pub payload: Bytes,
    pub ack: A,
}

/// Per-item results of an ack batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckOutcome {
    pub ok: usize,
    pub failed: usize,
    /// The broker's reason for the first refused item, if any.
    pub first_error: Option<String>,
}

/// One worker's connection to the broker. Each worker owns one; nothing is shared.
pub trait Driver: Send + 'static {
    /// Whatever the broker needs back to acknowledge one delivery.
    type Ack: Send + Sync + Clone + 'static;

    /// Pushes a batch; the answer is index-aligned with `batch`.
    fn push(
        &mut self,
        batch: &[OutMessage],
    ) -> impl Future<Output = anyhow::Result<Vec<PushStatus>>> + Send;

    /// Pushes a batch atomically, as one transaction.
    fn push_transaction(
        &mut self,
        batch: &[OutMessage],
    ) -> impl Future<Output = anyhow::Result<Vec<PushStatus>>> + Send {
        let _ = batch;
        async { anyhow::bail!("this driver has no transactions") }
    }

    /// The broker's reason for the first item the last `push` answered `Failed`, when the
    /// answer carried one outside the statuses (Kafka: a partition's error code).
    fn take_push_error(&mut self) -> Option<String> {
        None
    }

    /// Pops up to `request.batch` messages; an empty vector means nothing arrived in time.
    fn pop(
        &mut self,
        request: &PopRequest,
    ) -> impl Future<Output = anyhow::Result<Vec<Delivery<Self::Ack>>>> + Send;

    /// Whether the last `pop` sent a request to the broker. A driver that buffers (Kafka:
    /// one Fetch answers many pops) answers false for a pop served from its buffer, or for
    /// a wait with nothing to ask; only pops that hit the wire count as pop requests and
    /// pop latency.
    fn last_pop_on_wire(&self) -> bool {
        true
    }

    /// Acknowledges deliveries as processed.
    fn ack(
        &mut self,
        group: Option<&str>,
        acks: &[Self::Ack],
    ) -> impl Future<Output = anyhow::Result<AckOutcome>> + Send;
}

/// Makes per-worker drivers. Cheap to clone; one per run.
pub trait Connector: Clone + Send + Sync + 'static {
    type Driver: Driver;

    /// A short name for reports, e.g. `queen-http`.
    fn name(&self) -> &'static str;

    fn connect(&self) -> impl Future<Output = anyhow::Result<Self::Driver>> + Send;
}
