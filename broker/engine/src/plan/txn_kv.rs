//! The `kv` rider of a transaction (spec §2.8): judged with the bundle before anything is
//! emitted, so a `required` op that does not hold refuses the whole bundle (returned, not
//! raised), and emitted after the pushes and acks into the same entry when it holds.

use queenmq_protocol::{KvOp, KvPrecondition, QueenError, TxnOpResult};

use super::kv::{Judged, KvJudge};
use super::Planner;

impl Planner<'_> {
    /// The rider judged against the rows as they are. `flat_before` is how many results the
    /// bundle's pushes and acks take: a refusal's index is in the flat space of `results`.
    pub(super) fn judge_txn_kv(
        &self,
        ops: &[KvOp],
        flat_before: usize,
    ) -> Result<Result<Option<Judged>, KvPrecondition>, QueenError> {
        if ops.is_empty() {
            return Ok(Ok(None));
        }
        self.refuse_kv_growth_under_pressure(ops)?;
        Ok(match KvJudge::new(self.st, self.now()).judge_all(ops)? {
            Ok(j) => Ok(Some(j)),
            Err(mut p) => {
                p.index += flat_before;
                Err(p)
            }
        })
    }

    pub(super) fn commit_txn_kv(&mut self, judged: Option<Judged>) -> Vec<TxnOpResult> {
        judged.map_or_else(Vec::new, |j| {
            self.commit_kv(j).into_iter().map(TxnOpResult::Kv).collect()
        })
    }
}
