//! Timer riders of a transaction (spec/native-api.md §2.8): checked with the bundle before
//! anything is emitted, emitted after its pushes and acks, in the same entry, so a timer
//! scheduled in a bundle exists (and fires) only if the bundle committed. Their results follow
//! the bundle's other results in the flat index space.

use queenmq_protocol::{ErrorCode, QueenError, TxnOpResult, TxnReq};

use super::txn::rolled_back;
use super::Planner;

impl Planner<'_> {
    /// Refuses the bundle (nothing emitted yet) when a rider would be refused on its own.
    pub(super) fn check_txn_timers(&self, req: &TxnReq) -> Result<(), QueenError> {
        if req.timers.is_empty() {
            return Ok(());
        }
        // Memory, quota and horizon refusals keep their codes: the client retries the first
        // (503) and the caller must see the 403s for what they are, not a rollback.
        self.check_timers(&req.timers).map_err(|e| match e.code {
            ErrorCode::Unavailable | ErrorCode::Forbidden => e,
            _ => rolled_back(&format!("timers: {e}")),
        })
    }

    pub(super) fn commit_txn_timers(&mut self, req: &TxnReq, results: &mut Vec<TxnOpResult>) {
        if req.timers.is_empty() {
            return;
        }
        let done = self.commit_timers(&req.timers);
        results.extend(done.into_iter().map(TxnOpResult::Timer));
    }
}
