//! Locks and semaphores (spec §2.14) planned into KV writes: a permit IS the row
//! `queen-locks/<name>#<slot>`, its token the row's version, its holder the `owner` of the
//! row's value `{"owner":"…","since":<µs>}`. Acquire is a put on the first free slot, renew a
//! put over the holder's row, release a delete; nothing is kept beside the rows.

use queenmq_protocol::limits::MAX_LOCK_OWNER_BYTES;
use queenmq_protocol::{permit_key, LockHolder, LockOp, LockReq, LockResult, QueenError, LOCKS_NS};

use super::kv::KvJudge;
use super::Planner;
use crate::state::kv::KvRow;

impl Planner<'_> {
    /// Every op is judged, in order, against the rows the earlier ops would leave; the call's
    /// writes are emitted only once all of them were judged, so a refusal (the KV byte cap)
    /// of a later op leaves nothing of the call written.
    pub fn plan_locks(&mut self, req: &LockReq) -> Result<Vec<LockResult>, QueenError> {
        if let Some(m) = self.memory {
            if m.pressed() && req.ops.iter().any(|o| matches!(o, LockOp::Acquire { .. })) {
                return Err(m.refusal());
            }
        }
        let mut judge = KvJudge::new(self.st, self.now());
        let mut out = Vec::with_capacity(req.ops.len());
        for op in &req.ops {
            out.push(self.plan_lock(&mut judge, op)?);
        }
        let judged = judge.into_judged();
        self.commit_kv(judged);
        Ok(out)
    }

    fn plan_lock(&self, judge: &mut KvJudge<'_>, op: &LockOp) -> Result<LockResult, QueenError> {
        let now = self.now();
        match op {
            LockOp::Acquire {
                name,
                ttl_seconds,
                owner,
                limit,
            } => {
                let mut free = None;
                let mut holders = Vec::new();
                for slot in 0..*limit {
                    let key = permit_key(name, slot);
                    match judge.live(LOCKS_NS, &key) {
                        Some(row) if permit_owner(&row.value).as_deref() == Some(owner) => {
                            // Sent again by its owner (its answer was lost): the same permit.
                            return Ok(LockResult::Acquired {
                                slot,
                                token: row.version,
                                owner: owner.clone(),
                                already: true,
                            });
                        }
                        Some(row) => holders.push(holder(slot, &row)),
                        None => {
                            free.get_or_insert(slot);
                        }
                    }
                }
                let Some(slot) = free else {
                    return Ok(LockResult::Refused {
                        contended: *limit > 1,
                        holders,
                    });
                };
                let key = permit_key(name, slot);
                let value = permit_value(owner, now);
                let token = put_permit(judge, &key, value, expiry(now, *ttl_seconds))?;
                Ok(LockResult::Acquired {
                    slot,
                    token,
                    owner: owner.clone(),
                    already: false,
                })
            }
            LockOp::Renew {
                name,
                token,
                ttl_seconds,
                slot,
                owner,
            } => {
                let key = permit_key(name, *slot);
                // Only a permit this broker wrote is renewed, and its value is written anew
                // from its owner and start: the entry bound counts a permit, not whatever a
                // row of the namespace might hold.
                let held = judge.live(LOCKS_NS, &key).and_then(|r| {
                    let holder = permit_owner(&r.value)?;
                    let since = permit_since(&r.value)?;
                    let ours = r.version == *token || owner.as_deref() == Some(holder.as_str());
                    (ours && holder.len() <= MAX_LOCK_OWNER_BYTES).then_some((holder, since))
                });
                let Some((holder, since)) = held else {
                    return Ok(LockResult::Lost {
                        holders: self.lock_holders(name),
                    });
                };
                let value = permit_value(&holder, since);
                let token = put_permit(judge, &key, value, expiry(now, *ttl_seconds))?;
                Ok(LockResult::Renewed { slot: *slot, token })
            }
            LockOp::Release { name, token, slot } => {
                let key = permit_key(name, *slot);
                let held = judge
                    .live(LOCKS_NS, &key)
                    .is_some_and(|r| r.version == *token);
                if held {
                    judge.delete(LOCKS_NS, &key, *token);
                }
                Ok(LockResult::Released {
                    released: held,
                    slot: *slot,
                })
            }
            LockOp::Get { name } => Ok(LockResult::Holders(self.lock_holders(name))),
        }
    }

    /// Live permits of `name`, by slot, as applied (before the call's own writes).
    fn lock_holders(&self, name: &str) -> Vec<LockHolder> {
        let prefix = format!("{name}#");
        let mut out: Vec<LockHolder> = self
            .st
            .kv
            .prefix(LOCKS_NS, &prefix, None, self.now())
            .filter_map(|(k, row)| {
                let slot: u32 = k[prefix.len()..].parse().ok()?;
                Some(holder(slot, row))
            })
            .collect();
        out.sort_by_key(|h| h.slot);
        out
    }
}

/// Records a permit's row (refused past the KV byte cap); its version is the token.
fn put_permit(
    judge: &mut KvJudge<'_>,
    key: &str,
    value: String,
    expires_at_us: Option<i64>,
) -> Result<u64, QueenError> {
    judge.put_row(LOCKS_NS, key, value, expires_at_us)?;
    Ok(judge.last_version())
}

fn expiry(now: i64, ttl_seconds: u64) -> Option<i64> {
    Some(now.saturating_add((ttl_seconds as i64).saturating_mul(1_000_000)))
}

fn holder(slot: u32, row: &KvRow) -> LockHolder {
    LockHolder {
        slot,
        owner: permit_owner(&row.value).unwrap_or_default(),
        token: row.version,
        since_us: permit_since(&row.value).unwrap_or(row.updated_at_us),
        expires_at_us: row.expires_at_us,
        renewed_at_us: row.updated_at_us,
    }
}

const OWNER_AT: &str = "{\"owner\":\"";
const SINCE_AT: &str = ",\"since\":";

/// A permit's value. The owner has no control characters (the door refuses them), so quotes
/// and backslashes are all JSON asks to escape.
pub fn permit_value(owner: &str, since_us: i64) -> String {
    let mut s = String::with_capacity(owner.len() + 40);
    s.push_str(OWNER_AT);
    for c in owner.chars() {
        if c == '"' || c == '\\' {
            s.push('\\');
        }
        s.push(c);
    }
    s.push('"');
    s.push_str(SINCE_AT);
    s.push_str(&since_us.to_string());
    s.push('}');
    s
}

/// The owner of a value [`permit_value`] wrote; None for any other value (a row somebody put
/// into the namespace by hand holds no permit anybody owns).
pub fn permit_owner(value: &str) -> Option<String> {
    let rest = value.strip_prefix(OWNER_AT)?;
    let mut owner = String::new();
    let mut chars = rest.chars();
    loop {
        match chars.next()? {
            '\\' => owner.push(chars.next()?),
            '"' => break,
            c => owner.push(c),
        }
    }
    chars.as_str().starts_with(SINCE_AT).then_some(owner)
}

fn permit_since(value: &str) -> Option<i64> {
    permit_owner(value)?;
    let at = value.rfind(SINCE_AT)? + SINCE_AT.len();
    value[at..].strip_suffix('}')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permit_values_round_trip_their_owner_and_since() {
        for owner in ["me", "a\"b\\c", "ünï #1"] {
            let v = permit_value(owner, 42);
            assert_eq!(permit_owner(&v).as_deref(), Some(owner));
            assert_eq!(permit_since(&v), Some(42));
        }
        assert_eq!(permit_owner("{\"owner\":1}"), None);
        assert_eq!(permit_owner("null"), None);
    }
}
