//! KV calls (spec §2.13): every op of a call is judged first, in order, against the rows the
//! earlier ops would leave; only a call whose `required` ops all hold is emitted, each write
//! as one `KvPut` / `KvDelete` with the version minted here. A read-only call emits nothing:
//! its answer is released after the cycle's entry commits, which orders it after every write
//! answered before it (a linearizable read).

use std::collections::{HashMap, HashSet};

use queenmq_protocol::limits::{KV_ANSWER_ROW_FIELDS, MAX_KV_ANSWER_BYTES};
use queenmq_protocol::{
    ErrorCode, KvExpiry, KvOp, KvOutcome, KvPrecondition, KvRefusal, KvReq, KvResult, KvRowView,
    KvWriteResult, QueenError,
};

use super::Planner;
use crate::entry::Effect;
use crate::state::kv::{row_bytes, KvRow, MAX_KV_BYTES};

/// Expired rows one cycle's sweep deletes at most: the sweep is work on the engine's path.
pub const KV_SWEEP_PER_CYCLE: usize = 256;

/// A write as judged, emitted only when the whole call holds.
pub(super) enum KvWrite {
    Put { ns: String, key: String, row: KvRow },
    Delete { ns: String, key: String },
}

/// A call's ops judged against the state plus what its earlier ops would write.
pub(super) struct KvJudge<'s> {
    st: &'s crate::state::State,
    now: i64,
    overlay: HashMap<(String, String), Option<KvRow>>,
    last_version: u64,
    growth: isize,
    writes: Vec<KvWrite>,
    /// What the call's getMany and getPrefix ops may still answer ([`MAX_KV_ANSWER_BYTES`]):
    /// a value is cloned into the answer, so 256 ops of 1000 keys naming one big row would
    /// otherwise build gigabytes.
    answer_left: usize,
}

/// What a row weighs in an answer.
fn answer_cost(key: &str, value: Option<&str>) -> usize {
    key.len() + value.map_or(0, str::len) + KV_ANSWER_ROW_FIELDS
}

pub(super) struct Judged {
    pub results: Vec<KvResult>,
    writes: Vec<KvWrite>,
}

impl Judged {
    /// The writes in the order judged (a key written twice appears twice; the last holds).
    pub(super) fn writes(&self) -> &[KvWrite] {
        &self.writes
    }
}

impl<'s> KvJudge<'s> {
    pub fn new(st: &'s crate::state::State, now: i64) -> Self {
        KvJudge {
            st,
            now,
            overlay: HashMap::new(),
            last_version: st.kv.last_version,
            growth: 0,
            writes: Vec::new(),
            answer_left: MAX_KV_ANSWER_BYTES,
        }
    }

    /// Takes `cost` from the answer budget; an op's first row always fits (`first`), so a
    /// page always moves on. False: the op stops here, truncated.
    fn spend(&mut self, cost: usize, first: bool) -> bool {
        if cost > self.answer_left && !first {
            return false;
        }
        self.answer_left = self.answer_left.saturating_sub(cost);
        true
    }

    pub(super) fn live(&self, ns: &str, key: &str) -> Option<KvRow> {
        match self.overlay.get(&(ns.to_string(), key.to_string())) {
            Some(row) => row.clone(),
            None => self.st.kv.live(ns, key, self.now).cloned(),
        }
    }

    fn view(&self, key: &str, r: &KvRow, keys_only: bool) -> KvRowView {
        KvRowView {
            key: key.to_string(),
            value: (!keys_only).then(|| r.value.clone()),
            version: r.version,
            expires_at_us: r.expires_at_us,
            updated_at_us: r.updated_at_us,
        }
    }

    fn expires(&self, e: KvExpiry) -> Option<i64> {
        match e {
            KvExpiry::Forever => None,
            // Bounded by the door (MAX_KV_TTL_SECONDS): no overflow; saturate anyway.
            KvExpiry::Seconds(s) => Some(
                self.now
                    .saturating_add((s as i64).saturating_mul(1_000_000)),
            ),
        }
    }

    /// Records a put: mints its version and counts the bytes it adds (refused past the cap).
    fn put(
        &mut self,
        ns: &str,
        key: &str,
        value: String,
        expires_at_us: Option<i64>,
    ) -> Result<KvWriteResult, QueenError> {
        let old = self.held_bytes(ns, key);
        let new = row_bytes(ns, key, &value);
        let growth = self.growth + new as isize - old as isize;
        if growth > 0 && self.st.kv.bytes().saturating_add(growth as usize) > self.st.kv.cap() {
            return Err(kv_full());
        }
        self.growth = growth;
        self.last_version += 1;
        let row = KvRow {
            value,
            version: self.last_version,
            expires_at_us,
            updated_at_us: self.now,
        };
        let result = KvWriteResult {
            applied: true,
            reason: None,
            version: row.version,
            value: Some(row.value.clone()),
            expires_at_us,
        };
        self.overlay
            .insert((ns.to_string(), key.to_string()), Some(row.clone()));
        self.writes.push(KvWrite::Put {
            ns: ns.to_string(),
            key: key.to_string(),
            row,
        });
        Ok(result)
    }

    /// The bytes the row of (ns, key) holds at this point of the call, expired or not (an
    /// expired row not yet swept is replaced, and its bytes go with it).
    fn held_bytes(&self, ns: &str, key: &str) -> usize {
        let row = match self.overlay.get(&(ns.to_string(), key.to_string())) {
            Some(row) => row.as_ref(),
            None => self.st.kv.row(ns, key),
        };
        row.map_or(0, |r| row_bytes(ns, key, &r.value))
    }

    pub(super) fn delete(&mut self, ns: &str, key: &str, version: u64) -> KvWriteResult {
        self.growth -= self.held_bytes(ns, key) as isize;
        self.overlay.insert((ns.to_string(), key.to_string()), None);
        self.writes.push(KvWrite::Delete {
            ns: ns.to_string(),
            key: key.to_string(),
        });
        KvWriteResult {
            applied: true,
            reason: None,
            version,
            value: None,
            expires_at_us: None,
        }
    }

    /// A put decided by the caller (a lock permit): recorded like a judged one.
    pub fn put_row(
        &mut self,
        ns: &str,
        key: &str,
        value: String,
        expires_at_us: Option<i64>,
    ) -> Result<KvWriteResult, QueenError> {
        self.put(ns, key, value, expires_at_us)
    }

    /// The last version minted (the state's when nothing was written).
    pub fn last_version(&self) -> u64 {
        self.last_version
    }

    pub fn into_judged(self) -> Judged {
        Judged {
            results: Vec::new(),
            writes: self.writes,
        }
    }

    /// One op's answer; writes are recorded, not emitted.
    pub fn judge(&mut self, op: &KvOp) -> Result<KvResult, QueenError> {
        Ok(match op {
            KvOp::Get { ns, key } => {
                KvResult::Get(self.live(ns, key).map(|r| self.view(key, &r, false)))
            }
            KvOp::GetMany { ns, keys } => {
                let mut rows = Vec::new();
                let mut missing = Vec::new();
                let mut seen = HashSet::new();
                let mut truncated = false;
                // A key named twice is answered once.
                for k in keys.iter().filter(|k| seen.insert(k.as_str())) {
                    let row = self.live(ns, k);
                    let cost = answer_cost(k, row.as_ref().map(|r| r.value.as_str()));
                    if !self.spend(cost, rows.is_empty() && missing.is_empty()) {
                        truncated = true;
                        break;
                    }
                    match row {
                        Some(r) => rows.push(self.view(k, &r, false)),
                        None => missing.push(k.clone()),
                    }
                }
                KvResult::GetMany {
                    rows,
                    missing,
                    truncated,
                }
            }
            KvOp::GetPrefix {
                ns,
                prefix,
                after,
                limit,
                keys_only,
            } => {
                // Listed from the applied rows: a page is a snapshot, and the ops of one call
                // writing under the prefix they list is not a pattern worth an ordered overlay.
                let mut rows: Vec<KvRowView> = Vec::new();
                let mut truncated = false;
                let st = self.st;
                for (k, r) in st.kv.prefix(ns, prefix, after.as_deref(), self.now) {
                    if rows.len() == *limit {
                        truncated = true;
                        break;
                    }
                    let value = (!*keys_only).then_some(r.value.as_str());
                    if !self.spend(answer_cost(k, value), rows.is_empty()) {
                        truncated = true;
                        break;
                    }
                    rows.push(self.view(k, r, *keys_only));
                }
                let next_after = truncated
                    .then(|| rows.last().map(|r| r.key.clone()))
                    .flatten();
                KvResult::GetPrefix {
                    rows,
                    truncated,
                    next_after,
                }
            }
            KvOp::Put {
                ns,
                key,
                value,
                expiry,
                expect,
                if_absent,
                ..
            } => {
                let cur = self.live(ns, key);
                let must_be_absent = *if_absent || *expect == Some(0);
                if let Some(refusal) = match (&cur, expect) {
                    (Some(c), _) if must_be_absent => Some(refused(KvRefusal::Exists, Some(c))),
                    (None, Some(n)) if *n > 0 => Some(refused(KvRefusal::Absent, None)),
                    (Some(c), Some(n)) if c.version != *n => {
                        Some(refused(KvRefusal::Version, Some(c)))
                    }
                    _ => None,
                } {
                    KvResult::Write(refusal)
                } else {
                    let at = self.expires(*expiry);
                    KvResult::Write(self.put(ns, key, value.clone(), at)?)
                }
            }
            KvOp::Delete {
                ns, key, expect, ..
            } => {
                let cur = self.live(ns, key);
                KvResult::Write(match (cur, expect) {
                    (None, _) => refused(KvRefusal::Absent, None),
                    (Some(c), Some(n)) if c.version != *n => refused(KvRefusal::Version, Some(&c)),
                    (Some(c), _) => self.delete(ns, key, c.version),
                })
            }
            KvOp::Incr {
                ns,
                key,
                delta,
                min,
                max,
                expiry,
                ..
            } => {
                let cur = self.live(ns, key);
                let base = match &cur {
                    None => Some(0),
                    Some(c) => c.value.trim().parse::<i64>().ok(),
                };
                KvResult::Write(match base {
                    None => refused(KvRefusal::Type, cur.as_ref()),
                    Some(base) => match base.checked_add(*delta) {
                        Some(n) if min.is_none_or(|m| n >= m) && max.is_none_or(|m| n <= m) => {
                            // The expiry is create-only: a live counter keeps its window.
                            let at = match &cur {
                                Some(c) => c.expires_at_us,
                                None => self.expires(*expiry),
                            };
                            self.put(ns, key, n.to_string(), at)?
                        }
                        _ => refused(KvRefusal::Limit, cur.as_ref()),
                    },
                })
            }
            KvOp::Check {
                ns, key, expect, ..
            } => {
                let cur = self.live(ns, key);
                KvResult::Write(match (cur, *expect) {
                    (None, 0) => KvWriteResult {
                        applied: true,
                        reason: None,
                        version: 0,
                        value: None,
                        expires_at_us: None,
                    },
                    (Some(c), 0) => refused(KvRefusal::Exists, Some(&c)),
                    (None, _) => refused(KvRefusal::Absent, None),
                    (Some(c), n) if c.version != n => refused(KvRefusal::Version, Some(&c)),
                    (Some(c), _) => KvWriteResult {
                        applied: true,
                        reason: None,
                        version: c.version,
                        value: Some(c.value),
                        expires_at_us: c.expires_at_us,
                    },
                })
            }
        })
    }

    /// Judges every op in order; the first `required` op that does not hold ends the call.
    pub fn judge_all(mut self, ops: &[KvOp]) -> Result<Result<Judged, KvPrecondition>, QueenError> {
        let mut results = Vec::with_capacity(ops.len());
        for (index, op) in ops.iter().enumerate() {
            let r = self.judge(op)?;
            if let KvResult::Write(w) = &r {
                if op.required() && !w.applied {
                    return Ok(Err(KvPrecondition {
                        index,
                        reason: w.reason.unwrap_or(KvRefusal::Absent),
                        version: w.version,
                        value: w.value.clone(),
                    }));
                }
            }
            results.push(r);
        }
        Ok(Ok(Judged {
            results,
            writes: self.writes,
        }))
    }
}

fn refused(reason: KvRefusal, cur: Option<&KvRow>) -> KvWriteResult {
    KvWriteResult {
        applied: false,
        reason: Some(reason),
        version: cur.map_or(0, |c| c.version),
        value: cur.map(|c| c.value.clone()),
        expires_at_us: cur.and_then(|c| c.expires_at_us),
    }
}

/// The retriable refusal of a write past the KV byte cap (503 `kv_unavailable`).
pub fn kv_full() -> QueenError {
    QueenError::new(
        ErrorCode::Unavailable,
        format!("kv_unavailable: the tenant's KV rows hold {MAX_KV_BYTES} bytes, the cap; retry after expiries or deletes"),
    )
}

/// A KV call of reads only (get, getMany, getPrefix), answered from the applied state without
/// planning: a cluster follower's answer to the Kafka port's Metadata reads of its rows
/// (docs/cluster.md "Kafka clients"). `None` when an op writes.
pub fn applied_gets(
    st: &crate::state::State,
    now: i64,
    req: &KvReq,
) -> Option<Result<KvOutcome, QueenError>> {
    let reads_only = req.ops.iter().all(|o| {
        matches!(
            o,
            KvOp::Get { .. } | KvOp::GetMany { .. } | KvOp::GetPrefix { .. }
        )
    });
    if !reads_only {
        return None;
    }
    Some(match KvJudge::new(st, now).judge_all(&req.ops) {
        Ok(Ok(judged)) if judged.writes.is_empty() => Ok(KvOutcome::Results(judged.results)),
        Ok(Ok(_)) => Err(QueenError::new(
            ErrorCode::Internal,
            "a KV read judged a write",
        )),
        Ok(Err(p)) => Ok(KvOutcome::Precondition(p)),
        Err(e) => Err(e),
    })
}

impl Planner<'_> {
    pub fn plan_kv(&mut self, req: &KvReq) -> Result<KvOutcome, QueenError> {
        self.refuse_kv_growth_under_pressure(&req.ops)?;
        let judged = match KvJudge::new(self.st, self.now()).judge_all(&req.ops)? {
            Ok(j) => j,
            Err(p) => return Ok(KvOutcome::Precondition(p)),
        };
        Ok(KvOutcome::Results(self.commit_kv(judged)))
    }

    /// While the node's memory budget refuses writes, a call that may add rows is refused
    /// (retriable) before anything is judged.
    pub(super) fn refuse_kv_growth_under_pressure(&self, ops: &[KvOp]) -> Result<(), QueenError> {
        if let Some(m) = self.memory {
            if m.pressed()
                && ops
                    .iter()
                    .any(|o| matches!(o, KvOp::Put { .. } | KvOp::Incr { .. }))
            {
                return Err(m.refusal());
            }
        }
        Ok(())
    }

    pub(super) fn commit_kv(&mut self, judged: Judged) -> Vec<KvResult> {
        for w in &judged.writes {
            match w {
                KvWrite::Put { ns, key, row } => self.emit(Effect::KvPut {
                    ns,
                    key,
                    value: &row.value,
                    version: row.version,
                    expires_at_us: row.expires_at_us,
                }),
                KvWrite::Delete { ns, key } => self.emit(Effect::KvDelete { ns, key }),
            }
        }
        judged.results
    }

    /// Deletes up to `max` rows expired at this cycle's time, while the entry stays within
    /// `max_entry_bytes` (the sweep runs after the cycle's commands, past their admission).
    /// Readers never saw these rows; this gives their memory back.
    pub fn plan_kv_sweep(&mut self, max: usize, max_entry_bytes: usize) {
        for (ns, key) in self.st.kv.expired(self.now(), max) {
            // KvDelete: kind and two length-prefixed strings.
            let size = 1 + 4 + ns.len() + 4 + key.len();
            if self.cycle.entry.len().saturating_add(size) > max_entry_bytes {
                break;
            }
            self.emit(Effect::KvDelete { ns: &ns, key: &key });
        }
    }
}
