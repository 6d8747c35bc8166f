//! The seam between Raft and the broker engine.

/// Implemented by the broker engine. Called by the state-machine adapter for every committed
/// entry, in log order.
///
/// An `Err` from `apply` or `restore` (an entry or snapshot the engine cannot read) stops this
/// Raft group as a storage error does: applying around it would diverge from the other
/// replicas, and the group's owner rebuilds it from checkpoint and log.
pub trait ApplyHandler: Send + Sync + 'static {
    /// A committed application entry. `payload` is exactly the bytes given to `propose()`.
    fn apply(&self, index: u64, term: u64, payload: &[u8]) -> Result<(), String>;
    /// Index and term of the last entry the handler's durable checkpoint covers (None =
    /// nothing applied yet). Read at start: entries after it are applied again.
    fn checkpointed(&self) -> Option<(u64, u64)>;
    /// Serialised engine state for a snapshot, with the (index, term) it covers.
    fn snapshot(&self) -> (Option<(u64, u64)>, Vec<u8>);
    /// Replaces the engine state with bytes from `snapshot()` covering (`index`, `term`).
    fn restore(&self, index: u64, term: u64, bytes: &[u8]) -> Result<(), String>;
}
