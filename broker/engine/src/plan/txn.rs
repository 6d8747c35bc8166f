//! Transactions: acks and pushes of many queues as one entry, all or nothing, each ack fenced
//! by its own lease (requiredLeases is lent to a lease-less ack only when it names exactly one).
//!
//! The whole bundle is first decided without emitting anything, in operation order: the
//! pushes are prepared (ids, offsets, dedup), and each ack is resolved against the view the
//! earlier operations would leave: a message pushed earlier in the bundle is the one its
//! transactionId names, and cursor rows are the ones earlier acks would leave (so [nack m2,
//! complete m4] under one lease is refused: the nack released that lease). Only a bundle that
//! passes is emitted, each ack exactly as decided; a refusal names the operation and why, and
//! writes nothing.

use std::collections::{HashMap, HashSet};

use queenmq_protocol::{
    AckItem, AckResult, AckStatus, PushItem, PushResult, PushStatus, QueenError, TxnOp,
    TxnOpResult, TxnReq, TxnResult,
};

use super::ack::ResolvedAck;
use super::{group_name, Planner};
use crate::state::model::CursorRow;

/// An ack of the bundle as decided: its answer and, unless a no-op, what it writes.
struct DecidedAck {
    result: AckResult,
    write: Option<(ResolvedAck, CursorRow, bool)>,
}

impl Planner<'_> {
    pub fn plan_transaction(
        &mut self,
        req: &TxnReq,
        producer: Option<&str>,
    ) -> Result<TxnResult, QueenError> {
        if req.ops.is_empty() && req.kv.is_empty() && req.timers.is_empty() {
            return Err(QueenError::bad_request(
                "Transaction has no operations to commit",
            ));
        }
        let lent = (req.required_leases.len() == 1).then(|| req.required_leases[0].clone());
        let acks: Vec<AckItem> = req
            .ops
            .iter()
            .filter_map(|op| match op {
                TxnOp::Ack(a) => Some(AckItem {
                    lease_id: a.lease_id.clone().or_else(|| lent.clone()),
                    ..a.clone()
                }),
                TxnOp::Push(_) => None,
            })
            .collect();
        for (n, op) in req.ops.iter().enumerate() {
            if let TxnOp::Push(items) = op {
                for i in items {
                    Self::check_push_item(i).map_err(|e| {
                        rolled_back(&format!("operation {n} (push to {}): {e}", i.queue))
                    })?;
                }
            }
        }
        // Every push item as one push: a dedup lookup that cannot read its frame refuses the
        // lot before anything is emitted.
        let items: Vec<PushItem> = req
            .ops
            .iter()
            .filter_map(|op| match op {
                TxnOp::Push(items) => Some(items.iter().cloned()),
                TxnOp::Ack(_) => None,
            })
            .flatten()
            .collect();
        let prepared = if items.is_empty() {
            None
        } else {
            Some(
                self.prepare_push(&items, producer)
                    .map_err(|e| rolled_back(&e.message))?,
            )
        };
        let pushed_results: &[PushResult] = prepared.as_ref().map_or(&[], |p| &p.results);
        // An item refused on its own (no queue or partition id left) refuses the bundle: a
        // transaction is all or nothing, and nothing has been emitted yet.
        if let Some(r) = pushed_results
            .iter()
            .find(|r| r.status == queenmq_protocol::PushStatus::Failed)
        {
            return Err(rolled_back(&format!(
                "push to {}: {}",
                r.queue,
                r.error.as_ref().map_or("refused", |e| e.message.as_str())
            )));
        }
        let decided = self.decide_acks(req, &acks, pushed_results)?;
        // A strict bundle whose ack is already covered was applied before (a replay, or an
        // older copy arriving late): applying its other operations again would duplicate
        // pushes and rewind state, so it applies nothing and says so.
        if req.strict_acks && decided.iter().any(|d| d.result.noop) {
            return Ok(TxnResult {
                transaction_id: uuid::Uuid::now_v7().to_string(),
                results: Vec::new(),
                kv_precondition: None,
                replayed: true,
            });
        }
        self.check_txn_timers(req)?;
        let kv = match self.judge_txn_kv(&req.kv, items.len() + acks.len())? {
            Ok(kv) => {
                if let Some(cap) = &req.state_cap {
                    self.check_state_cap(cap, kv.as_ref())?;
                }
                kv
            }
            Err(precondition) => {
                return Ok(TxnResult {
                    transaction_id: uuid::Uuid::now_v7().to_string(),
                    results: Vec::new(),
                    kv_precondition: Some(precondition),
                    replayed: false,
                })
            }
        };

        // Decided: emit the pushes, then every ack as decided.
        let pushed = prepared.map(|p| self.commit_push(p)).unwrap_or_default();
        let mut counts: HashMap<(u64, AckStatus), (u64, u64)> = HashMap::new();
        let mut ack_results = Vec::with_capacity(decided.len());
        for (d, a) in decided.into_iter().zip(&acks) {
            if let Some((ack, row, dlq)) = &d.write {
                self.emit_ack(ack, *row, *dlq, a);
                let c = counts.entry((ack.pid, a.status)).or_default();
                c.0 += 1;
                c.1 += u64::from(*dlq);
            }
            ack_results.push(d.result);
        }
        self.record_ack_metrics(counts);
        let mut pushed = pushed.into_iter();
        let mut ack_results = ack_results.into_iter();
        let mut results = Vec::new();
        for op in &req.ops {
            match op {
                TxnOp::Push(items) => {
                    for r in pushed.by_ref().take(items.len()) {
                        results.push(TxnOpResult::Push(r));
                    }
                }
                TxnOp::Ack(_) => {
                    if let Some(r) = ack_results.next() {
                        results.push(TxnOpResult::Ack(r));
                    }
                }
            }
        }
        results.extend(self.commit_txn_kv(kv));
        self.commit_txn_timers(req, &mut results);
        Ok(TxnResult {
            transaction_id: uuid::Uuid::now_v7().to_string(),
            results,
            kv_precondition: None,
            replayed: false,
        })
    }

    /// Decides every ack in operation order against the scratch view; the first refusal names
    /// its operation. `pushed` holds the prepared results of all push items, in order.
    fn decide_acks(
        &mut self,
        req: &TxnReq,
        acks: &[AckItem],
        pushed: &[PushResult],
    ) -> Result<Vec<DecidedAck>, QueenError> {
        let mut scratch: HashMap<(u64, u64), CursorRow> = HashMap::new();
        let mut nacked: HashSet<(u64, u64)> = HashSet::new();
        let mut in_bundle: HashMap<(u64, String), u64> = HashMap::new();
        let mut pushed = pushed.iter();
        let mut acks = acks.iter();
        let mut out = Vec::new();
        for (n, op) in req.ops.iter().enumerate() {
            match op {
                TxnOp::Push(items) => {
                    for r in pushed.by_ref().take(items.len()) {
                        if r.status == PushStatus::Queued {
                            in_bundle.insert((r.partition_id, r.transaction_id.clone()), r.offset);
                        }
                    }
                }
                TxnOp::Ack(_) => {
                    let Some(a) = acks.next() else { continue };
                    let refuse = |why: QueenError| {
                        rolled_back(&format!(
                            "operation {n} (ack {} of transactionId {}) refused: {why}",
                            status_word(a.status),
                            a.transaction_id
                        ))
                    };
                    let group = group_name(&a.group).to_string();
                    let (ack, noop) = self
                        .check_ack_over(a, &group, Some(&scratch), Some(&in_bundle))
                        .map_err(refuse)?;
                    if let Some(want) = &req.ack_queue {
                        let on = self
                            .st
                            .partitions
                            .get(&ack.pid)
                            .and_then(|p| self.st.queues.get(&p.queue()))
                            .map(|q| q.name.as_str());
                        if on != Some(want.as_str()) {
                            return Err(refuse(QueenError::new(
                                queenmq_protocol::ErrorCode::Conflict,
                                format!("partition {} is not of queue {want}", ack.pid),
                            )));
                        }
                    }
                    let mut result = AckResult {
                        transaction_id: a.transaction_id.clone(),
                        success: true,
                        ..Default::default()
                    };
                    if noop {
                        result.noop = true;
                        out.push(DecidedAck {
                            result,
                            write: None,
                        });
                        continue;
                    }
                    if nacked.contains(&(ack.gid, ack.pid)) {
                        return Err(refuse(QueenError::new(
                            queenmq_protocol::ErrorCode::Conflict,
                            "an earlier nack in this transaction rewound the partition",
                        )));
                    }
                    let (row, dlq) = self.next_row(&ack, a);
                    if a.status != AckStatus::Completed {
                        nacked.insert((ack.gid, ack.pid));
                    }
                    result.lease_released = ack.row.lease.is_some() && row.lease.is_none();
                    result.dlq = dlq;
                    scratch.insert((ack.gid, ack.pid), row);
                    out.push(DecidedAck {
                        result,
                        write: Some((ack, row, dlq)),
                    });
                }
            }
        }
        Ok(out)
    }
}

fn status_word(s: AckStatus) -> &'static str {
    match s {
        AckStatus::Completed => "completed",
        AckStatus::Failed => "failed",
        AckStatus::Retry => "retry",
        AckStatus::Dlq => "dlq",
    }
}

pub(super) fn rolled_back(why: &str) -> QueenError {
    QueenError::new(
        queenmq_protocol::ErrorCode::TransactionRolledBack,
        format!("transaction rolled back: {why}"),
    )
}
