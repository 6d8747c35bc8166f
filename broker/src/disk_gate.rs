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
//! Two levels: commands that add data (pushes, transactions with pushes, traces) need the
//! whole reserve left after them; bookkeeping (pops, acks, leases, configuration) writes small
//! entries and is what drains the queues, so it goes on until the free space falls under a
//! quarter of the reserve. Reads write nothing and are never refused.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use queenmq_protocol::{Command, ErrorCode, QueenError, TxnOp};

/// How often the file system is asked at most: statvfs is a system call per request
/// otherwise, and writes admitted meanwhile are counted against the last answer.
pub const REFRESH: Duration = Duration::from_millis(100);

/// Bytes a push item costs on disk beyond its payload (record framing, names, ids): a
/// generous bound, so the estimate errs on the side of refusing.
const ITEM_OVERHEAD: u64 = 256;

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

/// What a command needs from the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Writes nothing (reads, node-local commands).
    Nothing,
    /// A small bookkeeping entry.
    Bookkeeping,
    /// This many bytes of new data, at most.
    Data(u64),
}

/// The need of a command. Exhaustive on purpose: a new command must say what it writes.
pub fn need(cmd: &Command) -> Need {
    let items = |items: &[queenmq_protocol::PushItem]| {
        items.iter().fold(0u64, |a, i| {
            let one = (i.payload.len() + i.queue.len() + i.partition.len()) as u64;
            a.saturating_add(one.saturating_add(ITEM_OVERHEAD))
        })
    };
    match cmd {
        Command::Push(p) => Need::Data(items(&p.items)),
        Command::Transaction(t) => {
            let data = t.ops.iter().fold(0u64, |a, op| match op {
                TxnOp::Push(v) => a.saturating_add(items(v)),
                TxnOp::Ack(_) => a,
            });
            if data == 0 {
                Need::Bookkeeping
            } else {
                Need::Data(data)
            }
        }
        Command::Trace(t) => Need::Data((t.data.len() as u64).saturating_add(ITEM_OVERHEAD)),
        Command::Configure(_)
        | Command::DeleteQueue { .. }
        | Command::Pop(_)
        | Command::Ack(_)
        | Command::ExtendLease { .. }
        | Command::GroupAdmin(_) => Need::Bookkeeping,
        Command::Read(_) | Command::Health | Command::Metrics(_) | Command::StatsRefresh => {
            Need::Nothing
        }
    }
}

/// The node's gate, shared by every group (their files share the data directory).
pub struct DiskGate {
    source: Box<dyn FreeSpace>,
    reserve: u64,
    refresh: Duration,
    seen: Mutex<Seen>,
}

struct Seen {
    /// The file system's answer at `at` (None: never asked, or it failed and nothing is known).
    available: Option<u64>,
    at: Option<Instant>,
    /// Bytes admitted since `at`, not yet in the file system's answer.
    admitted: u64,
    /// Whether the last write that adds data was refused (the gauge, the log line).
    full: bool,
}

impl std::fmt::Debug for DiskGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskGate")
            .field("reserve", &self.reserve)
            .field("refresh", &self.refresh)
            .finish_non_exhaustive()
    }
}

impl DiskGate {
    /// A gate keeping `reserve` bytes free on `source`, asking it at most every `refresh`.
    pub fn new(source: Box<dyn FreeSpace>, reserve: u64, refresh: Duration) -> Arc<DiskGate> {
        metrics::gauge!("queen_storage_full").set(0.0);
        metrics::counter!("queen_storage_full_refusals_total").increment(0);
        Arc::new(DiskGate {
            source,
            reserve,
            refresh,
            seen: Mutex::new(Seen {
                available: None,
                at: None,
                admitted: 0,
                full: false,
            }),
        })
    }

    /// Admits `cmd`, counting its bytes against the free space, or refuses it `storage_full`.
    ///
    /// Once a data write was refused, the next one needs an eighth of the reserve more
    /// (hysteresis, as the reference broker's high and low marks): writes of mixed sizes at
    /// the edge would otherwise flip the gauge and the log line at every request.
    pub fn admit(&self, cmd: &Command) -> Result<(), QueenError> {
        let need = need(cmd);
        if need == Need::Nothing {
            return Ok(());
        }
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        self.look(&mut seen, false);
        // A file system that cannot be asked is not called full: the write goes on, and a
        // real ENOSPC still fails the group rather than lose anything.
        let Some(available) = seen.available else {
            return Ok(());
        };
        let left = available.saturating_sub(seen.admitted);
        let (bytes, keep) = match need {
            Need::Data(b) if seen.full => (b, self.reserve.saturating_add(self.reserve / 8)),
            Need::Data(b) => (b, self.reserve),
            _ => (0, self.reserve / 4),
        };
        if left < bytes || left - bytes < keep {
            metrics::counter!("queen_storage_full_refusals_total").increment(1);
            if matches!(need, Need::Data(_)) {
                self.set_full(&mut seen, true, left);
            }
            return Err(QueenError::new(
                ErrorCode::StorageFull,
                format!(
                    "the broker's disk is full: {left} bytes free, {keep} are kept in reserve \
                     (setting min_free_disk_bytes); retry once space is freed"
                ),
            ));
        }
        if matches!(need, Need::Data(_)) {
            self.set_full(&mut seen, false, left);
        }
        seen.admitted = seen.admitted.saturating_add(bytes);
        Ok(())
    }

    /// Whether the free space is under the reserve now, asking the file system again: after a
    /// failed write, to tell a full disk from another failure.
    pub fn full_now(&self) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        self.look(&mut seen, true);
        seen.available.is_some_and(|n| n < self.reserve)
    }

    /// Whether writes that add data are refused now, or the free space was under the reserve
    /// at the last look.
    pub fn is_full(&self) -> bool {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.full || seen.available.is_some_and(|n| n < self.reserve)
    }

    fn look(&self, seen: &mut Seen, force: bool) {
        let due = seen.at.is_none_or(|at| at.elapsed() >= self.refresh);
        if !force && !due {
            return;
        }
        seen.at = Some(Instant::now());
        seen.admitted = 0;
        match self.source.available() {
            Ok(n) => seen.available = Some(n),
            Err(e) => {
                tracing::warn!(error = %e, "the data directory's free space is unknown; writes are not gated");
                seen.available = None;
            }
        }
    }

    /// Records whether data writes are refused: the gauge, and a log line when it changes.
    fn set_full(&self, seen: &mut Seen, full: bool, available: u64) {
        if full == seen.full {
            return;
        }
        seen.full = full;
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

#[cfg(test)]
mod tests {
    use super::*;
    use queenmq_protocol::{PopReq, PopSource, PushItem, PushReq, ReadReq, Subscription};
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Free bytes a test sets; u64::MAX means "the file system cannot be asked".
    #[derive(Clone, Default)]
    struct Fake(Arc<AtomicU64>);

    impl FreeSpace for Fake {
        fn available(&self) -> io::Result<u64> {
            match self.0.load(Ordering::SeqCst) {
                u64::MAX => Err(io::Error::other("no statvfs")),
                n => Ok(n),
            }
        }
    }

    fn push(bytes: usize) -> Command {
        Command::Push(PushReq {
            items: vec![PushItem {
                queue: "q".into(),
                partition: "p".into(),
                payload: bytes::Bytes::from(vec![b'x'; bytes]),
                transaction_id: None,
                trace_id: None,
            }],
        })
    }

    fn pop() -> Command {
        Command::Pop(PopReq {
            source: PopSource::Queue("q".into()),
            group: None,
            batch: 1,
            partitions: 1,
            wait: false,
            timeout_ms: 0,
            auto_ack: false,
            subscription: Subscription::All,
            lease_seconds: None,
            autopilot: false,
        })
    }

    /// A gate over `fake` that asks it at every admission (no clock in the tests).
    fn gate(fake: &Fake, reserve: u64) -> Arc<DiskGate> {
        DiskGate::new(Box::new(fake.clone()), reserve, Duration::ZERO)
    }

    #[test]
    fn data_needs_the_whole_reserve_left_after_it() {
        let fake = Fake::default();
        fake.0.store(10_000, Ordering::SeqCst);
        let g = gate(&fake, 8_000);
        g.admit(&push(1_000))
            .expect("10000 - 1000 - overhead stays above 8000");
        let e = g
            .admit(&push(2_000))
            .expect_err("would leave under the reserve");
        assert_eq!(e.code, ErrorCode::StorageFull);
        assert!(e.message.contains("min_free_disk_bytes"), "{}", e.message);
        assert!(g.is_full(), "data writes are refused now");
        // 10000 - 1758 leaves more than the reserve, not the reserve and its eighth.
        let e = g
            .admit(&push(1_500))
            .expect_err("refused once: an eighth more is needed");
        assert_eq!(e.code, ErrorCode::StorageFull);
        fake.0.store(11_000, Ordering::SeqCst);
        g.admit(&push(1_500))
            .expect("above the reserve and its eighth");
        assert!(!g.is_full());
    }

    #[test]
    fn bookkeeping_and_reads_go_on_under_the_reserve_until_the_floor() {
        let fake = Fake::default();
        fake.0.store(3_000, Ordering::SeqCst);
        let g = gate(&fake, 8_000);
        assert_eq!(
            g.admit(&push(1)).map_err(|e| e.code),
            Err(ErrorCode::StorageFull)
        );
        assert!(g.is_full());
        g.admit(&pop()).expect("a pop drains the disk's queues");
        fake.0.store(1_000, Ordering::SeqCst);
        assert_eq!(
            g.admit(&pop()).map_err(|e| e.code),
            Err(ErrorCode::StorageFull),
            "under a quarter of the reserve even bookkeeping waits"
        );
        let read = Command::Read(ReadReq::Queues);
        g.admit(&read).expect("reads write nothing");
        g.admit(&Command::Health).expect("node-local");
    }

    #[test]
    fn writes_resume_once_space_is_freed() {
        let fake = Fake::default();
        fake.0.store(100, Ordering::SeqCst);
        let g = gate(&fake, 8_000);
        assert!(g.admit(&push(10)).is_err());
        assert!(g.is_full());
        fake.0.store(1 << 20, Ordering::SeqCst);
        g.admit(&push(10)).expect("space freed: admitted again");
        assert!(!g.is_full());
    }

    #[test]
    fn admitted_bytes_count_until_the_next_look() {
        let fake = Fake::default();
        fake.0.store(20_000, Ordering::SeqCst);
        // Never asks again after the first look.
        let g = DiskGate::new(Box::new(fake.clone()), 8_000, Duration::from_secs(3_600));
        g.admit(&push(7_000)).expect("first");
        let e = g
            .admit(&push(7_000))
            .expect_err("the first one's bytes are counted");
        assert_eq!(e.code, ErrorCode::StorageFull);
        fake.0.store(0, Ordering::SeqCst);
        assert!(g.full_now(), "a forced look sees the disk as it is");
    }

    #[test]
    fn an_unknown_free_space_does_not_refuse() {
        let fake = Fake::default();
        fake.0.store(u64::MAX, Ordering::SeqCst);
        let g = gate(&fake, 8_000);
        g.admit(&push(10)).expect("unknown is not full");
        assert!(!g.is_full());
    }
}
