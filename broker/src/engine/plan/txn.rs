//! Transactions: acks and pushes of many queues as one entry, all or nothing, each ack fenced
//! by its own lease (requiredLeases is lent to a lease-less ack only when it names exactly one).
//! Everything is checked first; only a bundle that passes emits effects.

use queenmq_protocol::{AckItem, QueenError, TxnOp, TxnOpResult, TxnReq, TxnResult};

use super::{group_name, Planner};

impl Planner<'_> {
    pub fn plan_transaction(
        &mut self,
        req: &TxnReq,
        producer: Option<&str>,
    ) -> Result<TxnResult, QueenError> {
        if req.has_unsupported_riders {
            return Err(rolled_back(
                "kv and timer operations in transactions are unsupported by this broker",
            ));
        }
        if req.ops.is_empty() {
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
        for a in &acks {
            let group = group_name(&a.group).to_string();
            self.check_ack(a, &group)
                .map_err(|e| rolled_back(&format!("ack of {} refused: {e}", a.transaction_id)))?;
        }
        for op in &req.ops {
            if let TxnOp::Push(items) = op {
                for i in items {
                    Self::check_push_item(i).map_err(|e| rolled_back(&e.message))?;
                }
            }
        }
        let mut results = Vec::new();
        let mut acks = acks.into_iter();
        for op in &req.ops {
            match op {
                TxnOp::Push(items) => {
                    for r in self.plan_push(items, producer) {
                        results.push(TxnOpResult::Push(r));
                    }
                }
                TxnOp::Ack(_) => {
                    let Some(a) = acks.next() else { continue };
                    let group = a.group.clone();
                    for r in self.plan_acks(std::slice::from_ref(&a), &group) {
                        results.push(TxnOpResult::Ack(r));
                    }
                }
            }
        }
        Ok(TxnResult {
            transaction_id: uuid::Uuid::now_v7().to_string(),
            results,
        })
    }
}

fn rolled_back(why: &str) -> QueenError {
    QueenError::new(
        queenmq_protocol::ErrorCode::TransactionRolledBack,
        format!("transaction rolled back: {why}"),
    )
}
