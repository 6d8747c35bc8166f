//! The free-space gate (issue 12, "A full disk"): writes are refused `storage_full` (507,
//! retriable) before they are planned while the data directory's file system is under its
//! reserve, so that a log append, a segment roll or a checkpoint does not meet ENOSPC.
//!
//! Why before planning: the planner changes the state in memory before the cycle's entry is
//! written, and a failed append cannot be undone; it fails the group, which is rebuilt from
//! checkpoint and log (docs/storage-format.md, "A full disk"). Refusing up front is the only
//! clean answer; the rebuild stays the answer when another process fills the disk between
//! the check and the write.
//!
//! "Full" is a property of the disk, never of one request: the node is full while the free
//! space is under the reserve, and stops being full once a reading shows the reserve and an
//! eighth more (hysteresis: a disk at the edge would otherwise flip the gauge and the log line
//! at every reading). A request that alone does not fit is refused without making the node
//! full. Commands that add data need the whole reserve left after them; bookkeeping (pops,
//! acks, leases, deletes) writes small entries and is what drains the queues, so it goes on
//! until the free space falls under a quarter of the reserve. Reads are never refused.
//!
//! The file system is asked by a background thread (`spawn_refresher`), never on the engine's
//! task nor under a lock: statvfs can block on a sick disk. Between readings the gate counts
//! the bytes of entries being written (`begin_write`) and of those written since the last
//! reading, so a burst between two readings cannot overshoot the reserve.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use queenmq_protocol::{Command, ErrorCode, QueenError};

pub use crate::disk_need::{need, Need};

/// How often the background thread asks the file system.
pub const REFRESH: Duration = Duration::from_millis(100);

/// A checkpoint may need its encoded size twice over: redb writes the new one beside the old
/// one before it frees the old pages.
const CHECKPOINT_MARGIN: u64 = 2;

/// `available` when the file system cannot be asked.
const UNKNOWN: u64 = u64::MAX;

/// Where the free bytes come from: the file system, or a test's numbers.
pub trait FreeSpace: Send + Sync {
    /// Bytes an unprivileged writer may still allocate.
    fn available(&self) -> io::Result<u64>;
}

/// The file system holding a directory.
pub struct StatVfs(pub PathBuf);

impl FreeSpace for StatVfs {
    fn available(&self) -> io::Result<u64> {
        fs4::available_space(&self.0)
    }
}

/// The node's gate, shared by every group (their files share the data directory).
pub struct DiskGate {
    source: Box<dyn FreeSpace>,
    reserve: u64,
    /// The last reading, or `UNKNOWN`.
    available: AtomicU64,
    /// Bytes of entries handed to the log and not yet written.
    in_flight: AtomicU64,
    /// Bytes written since the last reading began: not in it, maybe.
    since_reading: AtomicU64,
    /// Bytes of the reserve lent to compaction copies ([`Loan`]) whose entries are not yet
    /// counted by `begin_write`: every group's loans come out of the one reading (review s16
    /// compactor H1: each tenant once lent from the whole free space by itself).
    lent: AtomicU64,
    /// What the tenants' next checkpoints need together: the sum over every
    /// [`CheckpointSlot`] of its last checkpoint's encoded size, twice. A loan leaves room for
    /// all of them above the bookkeeping floor, so the checkpoints that repay loans are
    /// written: each tenant writes its own on its own timer, possibly at once (review s17
    /// compactor M3: the floor once allowed for the largest one alone).
    checkpoints_own: AtomicU64,
    full: AtomicBool,
    /// Whether the last reading failed: the warning is logged once per failing stretch.
    blind: AtomicBool,
    /// One reading at a time: two concurrent ones could store the older answer last.
    reading: std::sync::Mutex<()>,
}

impl std::fmt::Debug for DiskGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskGate")
            .field("reserve", &self.reserve)
            .field("available", &self.available.load(Ordering::Relaxed))
            .field("full", &self.full.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// An entry being written: its bytes count against the free space until it is dropped, then
/// until the next reading (which has them).
pub struct Writing {
    gate: Arc<DiskGate>,
    bytes: u64,
}

impl Drop for Writing {
    fn drop(&mut self) {
        // Added before it is subtracted: a concurrent admission never sees the bytes gone.
        self.gate
            .since_reading
            .fetch_add(self.bytes, Ordering::SeqCst);
        self.gate.in_flight.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

/// Bytes of the reserve lent to a compaction copy ([`DiskGate::lend`]): counted against the
/// free space of every group until dropped.
pub struct Loan {
    gate: Arc<DiskGate>,
    bytes: u64,
}

impl Loan {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Gives back what the copy did not use: at most `used` stays lent.
    pub fn keep(&mut self, used: u64) {
        let back = self.bytes.saturating_sub(used);
        self.gate.lent.fetch_sub(back, Ordering::SeqCst);
        self.bytes -= back;
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        self.gate.lent.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

/// One tenant's checkpoints in the gate ([`DiskGate::checkpoint_slot`]): what its last one
/// needed (the encoded size, twice) counts in the loan floor until the slot is dropped (the
/// group ends or is rebuilt). The last one, not the largest ever: a tenant whose state drained
/// stops holding the loans back (review s17 compactor L1).
pub struct CheckpointSlot {
    gate: Arc<DiskGate>,
    own: AtomicU64,
}

impl CheckpointSlot {
    /// Records that this tenant's next checkpoint needs about what one of `encoded` bytes
    /// does: at open, the stored checkpoint's size, so a restarted node's loans allow for it
    /// before the tenant writes a new one (L1: the floor was half the reserve until every
    /// tenant had checkpointed once).
    pub fn anticipate(&self, encoded: u64) {
        let own = encoded.saturating_mul(CHECKPOINT_MARGIN);
        // Added before the old value is taken off: a concurrent loan never sees too little.
        self.gate.checkpoints_own.fetch_add(own, Ordering::SeqCst);
        let old = self.own.swap(own, Ordering::SeqCst);
        self.gate.checkpoints_own.fetch_sub(old, Ordering::SeqCst);
    }

    /// Whether a checkpoint of `encoded` bytes may be written now, from a fresh reading
    /// (blocking): it must leave the reserve whole, with room for redb to keep the old
    /// checkpoint until the new one is committed. But when the log space its save lets go
    /// (`frees`, deleted right after it) repays what it takes, it may use the reserve: on a
    /// full node the checkpoint is what gives space back, so skipping it would keep the node
    /// full for ever. A skipped checkpoint is counted and logged: the log still holds
    /// everything, the next start replays more. When it may, the returned guard counts it as
    /// being written until dropped (after the save): other tenants' checkpoints, admissions
    /// and loans see it (review s17 compactor M3: two checkpoints judged at once each saw the
    /// whole free space).
    pub fn fits(&self, encoded: u64, frees: u64) -> Option<Writing> {
        self.anticipate(encoded);
        let gate = &self.gate;
        let Some(available) = gate.refresh() else {
            return Some(gate.begin_write(0));
        };
        let own = encoded.saturating_mul(CHECKPOINT_MARGIN);
        let needs = own.saturating_add(gate.reserve);
        // Judged and counted in one step: two tenants judging at once each see the other.
        let mut in_flight = gate.in_flight.load(Ordering::SeqCst);
        loop {
            let left = available.saturating_sub(in_flight);
            let into_reserve = left < needs;
            if into_reserve && !(left >= own && frees >= own) {
                metrics::counter!("queen_checkpoints_skipped_total").increment(1);
                tracing::warn!(
                    available = left,
                    needs,
                    "checkpoint skipped: it would eat into the free-space reserve; the log holds everything and the next start replays more"
                );
                return None;
            }
            match gate.in_flight.compare_exchange(
                in_flight,
                in_flight.saturating_add(own),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    if into_reserve {
                        tracing::info!(
                            available = left,
                            needs,
                            frees,
                            "checkpoint written into the free-space reserve: the log segments \
                             it lets go give back more than it takes"
                        );
                    }
                    return Some(Writing {
                        gate: gate.clone(),
                        bytes: own,
                    });
                }
                Err(now) => in_flight = now,
            }
        }
    }
}

impl Drop for CheckpointSlot {
    fn drop(&mut self) {
        self.gate
            .checkpoints_own
            .fetch_sub(*self.own.get_mut(), Ordering::SeqCst);
    }
}

impl DiskGate {
    /// A gate keeping `reserve` bytes free on `source`. It knows nothing until `refresh` (or
    /// the thread of `spawn_refresher`) has asked the file system.
    pub fn new(source: Box<dyn FreeSpace>, reserve: u64) -> Arc<DiskGate> {
        metrics::gauge!("queen_storage_full").set(0.0);
        metrics::counter!("queen_storage_full_refusals_total").increment(0);
        metrics::counter!("queen_checkpoints_skipped_total").increment(0);
        Arc::new(DiskGate {
            source,
            reserve,
            available: AtomicU64::new(UNKNOWN),
            in_flight: AtomicU64::new(0),
            since_reading: AtomicU64::new(0),
            lent: AtomicU64::new(0),
            checkpoints_own: AtomicU64::new(0),
            full: AtomicBool::new(false),
            blind: AtomicBool::new(false),
            reading: std::sync::Mutex::new(()),
        })
    }

    /// Reads the free space now and asks again every `every` on a thread of its own, until
    /// the gate is dropped.
    pub fn spawn_refresher(gate: &Arc<DiskGate>, every: Duration) -> io::Result<()> {
        gate.refresh();
        let weak: Weak<DiskGate> = Arc::downgrade(gate);
        std::thread::Builder::new()
            .name("disk-gate".into())
            .spawn(move || loop {
                std::thread::sleep(every);
                match weak.upgrade() {
                    Some(g) => {
                        g.refresh();
                    }
                    None => break,
                }
            })
            .map(|_| ())
    }

    /// Asks the file system (blocking: call it off the async tasks) and judges whether the
    /// node is full. Returns the free bytes, None when they cannot be known.
    pub fn refresh(&self) -> Option<u64> {
        // A poisoned lock only means a reading panicked; the next one is as good.
        let _one = self
            .reading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // What was written before the question is in the answer, but it stays counted until
        // the answer is stored: otherwise admissions between the two would see the old
        // reading without those bytes. What is written during the question stays counted
        // after it (it may or may not be in the answer: the error is on the side of refusing).
        let before = self.since_reading.load(Ordering::SeqCst);
        match self.source.available() {
            Ok(n) => {
                self.available.store(n.min(UNKNOWN - 1), Ordering::SeqCst);
                self.since_reading.fetch_sub(before, Ordering::SeqCst);
                if self.blind.swap(false, Ordering::SeqCst) {
                    tracing::info!(
                        available = n,
                        "the data directory's free space is known again"
                    );
                }
                let full = self.full.load(Ordering::SeqCst);
                let now_full = if full {
                    n < self.reserve.saturating_add(self.reserve / 8)
                } else {
                    n < self.reserve
                };
                self.set_full(now_full, n);
                Some(n)
            }
            Err(e) => {
                self.available.store(UNKNOWN, Ordering::SeqCst);
                // Nothing is gated while the free space is unknown: the node is not called
                // full either (the gauge, the refusal of new tenants).
                if self.full.swap(false, Ordering::SeqCst) {
                    metrics::gauge!("queen_storage_full").set(0.0);
                }
                if !self.blind.swap(true, Ordering::SeqCst) {
                    tracing::warn!(error = %e, "the data directory's free space is unknown; writes are not gated until it is known again");
                }
                None
            }
        }
    }

    /// Admits `cmd` into a cycle whose entry already holds `planned` bytes, or refuses it
    /// `storage_full`. Admitting counts nothing: the cycle's entry is counted when it is
    /// written (`begin_write`), after the planner's own refusals.
    pub fn admit(&self, cmd: &Command, planned: u64) -> Result<(), QueenError> {
        let need = need(cmd);
        if need == Need::Nothing {
            return Ok(());
        }
        let available = self.available.load(Ordering::SeqCst);
        // A file system that cannot be asked is not called full: the write goes on, and a
        // real ENOSPC still fails the group rather than lose anything.
        if available == UNKNOWN {
            return Ok(());
        }
        let left = self.left(available, planned);
        let refusal = match need {
            Need::Data(_) if self.full.load(Ordering::SeqCst) => Some(format!(
                "the broker's disk is full: about {left} bytes free, {} are kept in reserve \
                 (setting min_free_disk_bytes); retry once space is freed",
                self.reserve
            )),
            Need::Data(b) if left < b.saturating_add(self.reserve) => Some(format!(
                "this write of up to {b} bytes does not fit: about {left} bytes free, {} are \
                 kept in reserve (setting min_free_disk_bytes); retry smaller or once space \
                 is freed",
                self.reserve
            )),
            Need::Bookkeeping if left < self.reserve / 4 => Some(format!(
                "the broker's disk is full: about {left} bytes free, under a quarter of the \
                 {} kept in reserve (setting min_free_disk_bytes); retry once space is freed",
                self.reserve
            )),
            _ => None,
        };
        match refusal {
            Some(message) => {
                metrics::counter!("queen_storage_full_refusals_total").increment(1);
                Err(QueenError::new(ErrorCode::StorageFull, message))
            }
            None => Ok(()),
        }
    }

    /// The bytes of a reading not yet spoken for: minus what is being written, what was
    /// written since the reading began and what this cycle has planned.
    fn left(&self, available: u64, planned: u64) -> u64 {
        self.unlent(available, planned)
            .saturating_sub(self.lent.load(Ordering::SeqCst))
    }

    /// `left` before the loans taken.
    fn unlent(&self, available: u64, planned: u64) -> u64 {
        available
            .saturating_sub(self.in_flight.load(Ordering::SeqCst))
            .saturating_sub(self.since_reading.load(Ordering::SeqCst))
            .saturating_sub(planned)
    }

    /// How many bytes of data a cycle whose entry holds `planned` bytes may still add without
    /// eating into the reserve: none while the node is full, unbounded while the free space is
    /// unknown. For writes the engine makes on its own (due timers): they are not refused,
    /// they wait for a cycle with room, so a full disk does not turn them into a failed
    /// append, a rebuild, a replay and the same timers due again.
    pub fn data_room(&self, planned: u64) -> u64 {
        let available = self.available.load(Ordering::SeqCst);
        if available == UNKNOWN {
            return u64::MAX;
        }
        if self.full.load(Ordering::SeqCst) {
            return 0;
        }
        self.left(available, planned).saturating_sub(self.reserve)
    }

    /// Lends a compaction copy bytes of the reserve beyond [`Self::data_room`], for a cycle
    /// whose entry holds `planned` bytes: at most an eighth of the reserve, and never so much
    /// that the free space, less every loan of every group, falls under [`Self::lend_floor`]
    /// (half the reserve, and room for a checkpoint above the bookkeeping floor). A copy gives
    /// back at least four times what it writes two checkpoints later (the compactor's quarter
    /// rule, the copy emptying its segment), as a checkpoint whose reclamation repays it may
    /// use the reserve ([`CheckpointSlot::fits`]): on a full node a pinning segment is
    /// otherwise never freed (review s16 H1). Nothing while the free space is unknown
    /// (`data_room` is unbounded then). The loan counts against the free space until it is
    /// dropped: hold it until the cycle's entry is counted by [`Self::begin_write`].
    pub fn lend(self: &Arc<Self>, planned: u64) -> Loan {
        let available = self.available.load(Ordering::SeqCst);
        let mut loan = Loan {
            gate: self.clone(),
            bytes: 0,
        };
        if available == UNKNOWN {
            return loan;
        }
        let floor = self.lend_floor();
        // Taken with a compare-and-swap: two groups planning at once each see the other's loan.
        let mut out = self.lent.load(Ordering::SeqCst);
        loop {
            let bytes = self
                .unlent(available, planned)
                .saturating_sub(out)
                .saturating_sub(floor)
                .min(self.reserve / 8);
            if bytes == 0 {
                return loan;
            }
            match self.lent.compare_exchange(
                out,
                out.saturating_add(bytes),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    loan.bytes = bytes;
                    return loan;
                }
                Err(now) => out = now,
            }
        }
    }

    /// The free space no loan goes under: half the reserve, and the bookkeeping floor (a
    /// quarter) plus what every tenant's next checkpoint needs, so loans alone never starve
    /// the checkpoints that repay them (review s16 H1, s17 M3).
    fn lend_floor(&self) -> u64 {
        let own = self.checkpoints_own.load(Ordering::SeqCst);
        (self.reserve / 2).max((self.reserve / 4).saturating_add(own))
    }

    /// A tenant's place in the loan floor, for its group's life ([`CheckpointSlot`]).
    pub fn checkpoint_slot(self: &Arc<Self>) -> CheckpointSlot {
        CheckpointSlot {
            gate: self.clone(),
            own: AtomicU64::new(0),
        }
    }

    /// Counts an entry of `bytes` handed to the log until the guard is dropped.
    pub fn begin_write(self: &Arc<Self>, bytes: u64) -> Writing {
        self.in_flight.fetch_add(bytes, Ordering::SeqCst);
        Writing {
            gate: self.clone(),
            bytes,
        }
    }

    /// A write met ENOSPC: the node is full until a reading shows space again.
    pub fn ran_out(&self) {
        let available = self.available.load(Ordering::SeqCst);
        self.set_full(true, if available == UNKNOWN { 0 } else { available });
    }

    /// Whether writes that add data are refused now.
    pub fn is_full(&self) -> bool {
        self.full.load(Ordering::SeqCst)
    }

    /// Records whether the node is full: the gauge, and a log line when it changes.
    fn set_full(&self, full: bool, available: u64) {
        if self.full.swap(full, Ordering::SeqCst) == full {
            return;
        }
        metrics::gauge!("queen_storage_full").set(if full { 1.0 } else { 0.0 });
        if full {
            tracing::error!(
                available,
                reserve = self.reserve,
                "the data directory's disk is under its free-space reserve: writes that add data are refused (507 storage_full) until space is freed"
            );
        } else {
            tracing::info!(
                available,
                reserve = self.reserve,
                "the data directory's disk has space again: writes resume"
            );
        }
    }
}

/// The refusal of a write that met ENOSPC, or of a start that would create files on a full
/// disk.
pub fn storage_full(what: &str) -> QueenError {
    QueenError::new(
        ErrorCode::StorageFull,
        format!("the broker's disk is full ({what}); retry once space is freed"),
    )
}

/// Whether an error, or one of its causes, is an I/O error of kind StorageFull (ENOSPC).
pub fn is_enospc(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err
            .downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::StorageFull)
        {
            return true;
        }
        cur = err.source();
    }
    false
}

#[cfg(test)]
#[path = "disk_gate_tests.rs"]
mod tests;
