//! Giving disk space back once a checkpoint is durable: the log's sealed segments that hold
//! only records the checkpoint covers and no held message lives in are deleted
//! (docs/storage-format.md "Space reclamation").

use crate::engine::log::ReplicatedLog;

/// The highest log index whose record is no longer needed, given the checkpoint just made
/// durable at `applied` and the lowest index a message of that same state lives in (`floor`,
/// None when it holds none): a restart reads the checkpoint and the records after `applied`,
/// and pops read the records at `floor` and above.
pub fn reclaimable_upto(applied: u64, floor: Option<u64>) -> Option<u64> {
    match floor {
        Some(f) => f.checked_sub(1).map(|below| below.min(applied)),
        None => Some(applied),
    }
}

/// Runs on the blocking thread that wrote the checkpoint, after its commit returned: deletes
/// what `reclaimable_upto` allows and counts it. A failure leaves files on disk (never a hole:
/// the log deletes oldest first, each deletion durable before the next) and is retried after
/// the next checkpoint.
pub fn after_checkpoint(log: &dyn ReplicatedLog, tenant: &str, applied: u64, floor: Option<u64>) {
    let Some(upto) = reclaimable_upto(applied, floor) else {
        return;
    };
    match log.reclaim(upto) {
        Ok(n) => {
            // Counted at 0 too, so the series exists from the first checkpoint on.
            metrics::counter!("queen_log_segments_deleted_total", "tenant" => tenant.to_owned())
                .increment(n as u64);
            if n == 0 {
                return;
            }
            tracing::info!(
                tenant,
                segments = n,
                upto,
                "deleted log segments no message and no restart needs"
            );
        }
        Err(e) => tracing::warn!(
            tenant,
            upto,
            error = %e,
            "deleting dead log segments failed; they stay until the next checkpoint"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neither_a_held_message_nor_the_restart_tail_is_reclaimed() {
        assert_eq!(reclaimable_upto(100, None), Some(100));
        assert_eq!(reclaimable_upto(100, Some(40)), Some(39));
        assert_eq!(reclaimable_upto(100, Some(500)), Some(100));
        assert_eq!(reclaimable_upto(100, Some(0)), None);
        assert_eq!(reclaimable_upto(0, Some(1)), Some(0));
    }
}
