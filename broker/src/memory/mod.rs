//! Memory: what each structure that grows with traffic holds (the pools), one budget per
//! node, and the admission check that refuses new writes, retriably, when the pools that
//! cannot be evicted reach their share. docs/memory.md is the operator's view.

pub mod account;
pub mod budget;
pub mod cgroup;
pub mod door;
mod give_back;
pub mod huge_pages;
pub mod pools;
pub mod size;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use queenmq_protocol::kafka_txns::KafkaTxnReq;
use queenmq_protocol::{Command, QueenError, TxnOp};

pub use account::Accountant;
pub use budget::{hot_ids_for_budget, Budget};
pub use give_back::give_back_freed;
pub use pools::{Pool, Pools};

const MIB: usize = 1 << 20;

#[derive(Debug)]
pub struct Memory {
    pub budget: Budget,
    pub pools: Pools,
    /// Set by the engine's accounting pass (with hysteresis), read by every write.
    refusing: AtomicBool,
    /// Groups holding more than `ACTIVE_PERCENT` of the held share now: the fair part is
    /// divided among them, so idle tenants do not shrink the part of those that work.
    active_groups: AtomicUsize,
}

/// A group counts in the fair division once it holds this part of the held share.
const ACTIVE_PERCENT: usize = 1;

/// Past this part of the held share, a group holding more than its fair part of the share
/// (the share divided by the groups) gets no new writes, so the tenants that hold little
/// keep room while the node nears its budget.
const FAIR_FROM_PERCENT: usize = 75;

impl Memory {
    pub fn new(budget: Budget) -> Arc<Memory> {
        Arc::new(Memory {
            budget,
            pools: Pools::default(),
            refusing: AtomicBool::new(false),
            active_groups: AtomicUsize::new(0),
        })
    }

    /// The budget from `memory_limit_bytes` (0: derived from the cgroup limit or RAM).
    pub fn from_config(memory_limit_bytes: u64) -> Arc<Memory> {
        Memory::new(Budget::derive(
            memory_limit_bytes,
            cgroup::cgroup_limit(),
            cgroup::physical_ram(),
        ))
    }

    /// Each group's hot table of transaction ids: `dedup_hot_ids`, or when it is 0 the rows
    /// [`hot_ids_for_budget`] gives the budget `memory_limit_bytes` resolves to (cgroup, RAM).
    pub fn dedup_hot_ids(configured: u64, memory_limit_bytes: u64) -> u64 {
        if configured != 0 {
            return configured;
        }
        let b = Budget::derive(
            memory_limit_bytes,
            cgroup::cgroup_limit(),
            cgroup::physical_ram(),
        );
        hot_ids_for_budget(b.total)
    }

    /// The node's dedup filter allowance when `dedup_filter_bytes` is 0: an eighth of the
    /// budget, at most 512 MiB. Every spilling group draws half of what is left
    /// (dedup_filter/allowance.rs), so the first gets up to 256 MiB: 50 000 ids a second for
    /// an hour at about 11 bits per id (docs/storage-format.md "Wiring (session 27)").
    pub fn default_dedup_filter_bytes(memory_limit_bytes: u64) -> u64 {
        let b = Budget::derive(
            memory_limit_bytes,
            cgroup::cgroup_limit(),
            cgroup::physical_ram(),
        );
        (b.total / 8).min(512 << 20)
    }

    pub fn refusing(&self) -> bool {
        self.refusing.load(Ordering::Relaxed)
    }

    /// Updates the refusal flag from the held pools: on past their share, off again below
    /// the resume line. Returns the new value.
    pub fn update_refusing(&self) -> bool {
        let held = self.pools.held();
        let was = self.refusing();
        let now = if was {
            held >= self.budget.resume_bytes()
        } else {
            held > self.budget.held_bytes()
        };
        if now != was {
            self.refusing.store(now, Ordering::Relaxed);
            if now {
                tracing::warn!(
                    held_mib = held / MIB,
                    share_mib = self.budget.held_bytes() / MIB,
                    "memory budget reached: new writes are refused until consumers drain"
                );
            } else {
                tracing::info!(
                    held_mib = held / MIB,
                    "memory pressure gone: writes accepted"
                );
            }
        }
        now
    }

    /// Sets `queen_memory_bytes` per pool and `queen_memory_refusing_writes` from what is
    /// counted now: after each accounting pass, and at every scrape, so a scrape between
    /// passes (an idle broker runs none) never shows a pool as it was.
    pub fn publish(&self) {
        for p in Pool::ALL {
            metrics::gauge!("queen_memory_bytes", "pool" => p.name()).set(self.pools.get(p) as f64);
        }
        let refusing = if self.refusing() { 1.0 } else { 0.0 };
        metrics::gauge!("queen_memory_refusing_writes").set(refusing);
    }

    /// Whether writes that grow the held pools are refused now: the flag is on, or the pools
    /// already hold more than their share (before the next accounting pass sets the flag).
    pub fn pressed(&self) -> bool {
        self.refusing() || self.pools.held() > self.budget.held_bytes()
    }

    /// The retriable refusal a write gets while [`Self::pressed`].
    pub fn refusal(&self) -> QueenError {
        metrics::counter!("queen_memory_refused_writes_total").increment(1);
        QueenError::unavailable(format!(
            "the broker is at its memory budget: queues, partitions, consumer groups, \
             transaction ids, parked pops and queued requests hold {} MiB of the {} MiB they \
             may use; new writes are refused until consumers drain or ids expire, retry later \
             (pops of existing consumer groups and acks work)",
            self.pools.held() / MIB,
            self.budget.held_bytes() / MIB
        ))
    }

    /// Lets a command into the engine's queue, or refuses it retriably when it would grow
    /// the held pools past their share. Decided here without the state: pushes and
    /// transactions that push. Pops, acks, lease extensions, deletes and reads pass, so
    /// consumers can drain; configure passes too. The engine refuses, while [`Self::pressed`],
    /// what only the state tells apart: a configure that creates a queue and a pop that
    /// registers a consumer group (it must not take the state lock on an async worker here).
    ///
    /// `group_held` is what the caller's group holds in the held pools: while the node is
    /// past `FAIR_FROM_PERCENT` of the share, a group above its fair part is refused first
    /// (one tenant cannot fill the node's share and starve the others).
    /// Whether a group holding `held` counts in the fair division.
    pub fn is_active(&self, held: usize) -> bool {
        held > self.budget.held_bytes() / 100 * ACTIVE_PERCENT
    }

    pub fn admit(&self, cmd: &Command, group_held: usize) -> Result<(), QueenError> {
        if !grows(cmd) {
            return Ok(());
        }
        if self.pressed() {
            return Err(self.refusal());
        }
        let share = self.budget.held_bytes();
        let groups = self.active_groups.load(Ordering::Relaxed).max(1);
        let fair = share / groups;
        if groups > 1 && self.pools.held() > share / 100 * FAIR_FROM_PERCENT && group_held > fair {
            metrics::counter!("queen_memory_refused_writes_total").increment(1);
            return Err(QueenError::unavailable(format!(
                "the broker is near its memory budget and this tenant holds {} MiB, more than \
                 its fair part ({} MiB) of what tenants may hold; new writes are refused until \
                 its consumers drain, retry later",
                group_held / MIB,
                fair / MIB
            )));
        }
        Ok(())
    }
}

/// A request counted in the requests pool on its way into the engine's queue. Dropped
/// before it got there (the client went away while the queue was full, or the engine
/// stopped), it takes its bytes back out; once queued, the engine subtracts them.
pub struct Queued {
    mem: Arc<Memory>,
    bytes: usize,
}

impl Queued {
    pub fn new(mem: Arc<Memory>, cmd: &Command) -> Queued {
        let bytes = size::request_bytes(cmd);
        mem.pools.add(Pool::Requests, bytes);
        Queued { mem, bytes }
    }

    pub fn handed_over(mut self) {
        self.bytes = 0;
    }

    /// Takes charge of `bytes` already counted (requests the engine drained): they leave the
    /// pool when this is dropped.
    pub fn counted(mem: Arc<Memory>, bytes: usize) -> Queued {
        Queued { mem, bytes }
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.mem.pools.sub(Pool::Requests, self.bytes);
        }
    }
}

/// Bytes of a transient copy (a cycle's entry and the cache's copy of it, a request's frames
/// while planned) counted in the requests pool while the copy lives: a 60 MiB push is held
/// two or three times over while it is encoded and proposed.
pub struct Transient {
    mem: Arc<Memory>,
    bytes: usize,
}

impl Transient {
    pub fn new(mem: Arc<Memory>, bytes: usize) -> Transient {
        mem.pools.add(Pool::Requests, bytes);
        Transient { mem, bytes }
    }
}

impl Drop for Transient {
    fn drop(&mut self) {
        self.mem.pools.sub(Pool::Requests, self.bytes);
    }
}

/// Commands the door refuses under pressure: pushes and transactions that push (configure
/// and pops of new groups are refused by the engine, which sees the state).
fn grows(cmd: &Command) -> bool {
    match cmd {
        Command::Push(_) | Command::KafkaProduce(_) => true,
        // What grows a transaction's row (docs/kafka-transactions.md). Init and EndTxn are
        // never refused for memory: either may abort an open transaction, which frees.
        Command::KafkaTxn(t) => matches!(
            t,
            KafkaTxnReq::AddPartitions { .. }
                | KafkaTxnReq::AddOffsets { .. }
                | KafkaTxnReq::OffsetCommit { .. }
        ),
        Command::Transaction(t) => {
            t.ops.iter().any(|op| matches!(op, TxnOp::Push(_)))
                || t.timers
                    .iter()
                    .any(|op| matches!(op, queenmq_protocol::TimerOp::Schedule(_)))
        }
        // A cancel never grows the state: it is never refused for memory (§2.15).
        Command::Timers(t) => t
            .ops
            .iter()
            .any(|op| matches!(op, queenmq_protocol::TimerOp::Schedule(_))),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use queenmq_protocol::{PushItem, PushReq};

    fn push() -> Command {
        Command::Push(PushReq {
            items: vec![PushItem {
                queue: "q".into(),
                partition: "p".into(),
                payload: bytes::Bytes::from_static(b"x"),
                transaction_id: None,
                trace_id: None,
            }],
        })
    }

    #[test]
    fn writes_are_refused_past_the_share_and_accepted_again_below_the_resume_line() {
        let m = Memory::new(Budget::derive(100 << 20, None, None));
        let share = m.budget.held_bytes();
        assert!(m.admit(&push(), 0).is_ok());
        m.pools.set(Pool::State, share + 1);
        let e = m.admit(&push(), 0).unwrap_err();
        assert_eq!(e.code, queenmq_protocol::ErrorCode::Unavailable);
        assert!(e.message.contains("memory budget"), "{}", e.message);
        assert!(m.update_refusing());
        // Just below the share is not enough: the flag holds until the resume line.
        m.pools.set(Pool::State, share - 1);
        assert!(m.update_refusing());
        assert!(m.admit(&push(), 0).is_err());
        m.pools.set(Pool::State, m.budget.resume_bytes() - 1);
        assert!(!m.update_refusing());
        assert!(m.admit(&push(), 0).is_ok());
    }

    #[test]
    fn near_the_budget_a_group_above_its_fair_part_is_refused_first() {
        let m = Memory::new(Budget::derive(100 << 20, None, None));
        let share = m.budget.held_bytes();
        // Two groups hold something; any number of idle ones do not count.
        assert!(m.is_active(share / 10) && !m.is_active(share / 200));
        m.active_groups.store(2, Ordering::Relaxed);
        // Four fifths of the share held, nearly all by one of the two.
        m.pools.set(Pool::State, share / 5 * 4);
        let (big_held, small_held) = (share / 5 * 4 - (1 << 20), 1 << 20);
        let e = m.admit(&push(), big_held).unwrap_err();
        assert_eq!(e.code, queenmq_protocol::ErrorCode::Unavailable);
        assert!(e.message.contains("fair part"), "{}", e.message);
        assert!(
            m.admit(&push(), small_held).is_ok(),
            "the small tenant keeps room"
        );
        // Two at 40 % each are both within their half.
        assert!(m.admit(&push(), share / 5 * 2).is_ok());
        // Below three quarters nobody is held back.
        m.pools.set(Pool::State, share / 2);
        assert!(m.admit(&push(), share / 2).is_ok());
        // With one active group the fair part is the whole share: a single tenant as before.
        m.active_groups.store(1, Ordering::Relaxed);
        m.pools.set(Pool::State, share / 5 * 4);
        assert!(m.admit(&push(), share / 5 * 4).is_ok());
    }

    #[test]
    fn an_accountant_counts_its_group_active_while_it_holds_and_not_after() {
        let m = Memory::new(Budget::derive(100 << 20, None, None));
        let held: Arc<AtomicUsize> = Default::default();
        let mut a = Accountant::new(m.clone(), held.clone());
        a.set_active_for_test(true);
        assert_eq!(m.active_groups.load(Ordering::Relaxed), 1);
        drop(a);
        assert_eq!(
            m.active_groups.load(Ordering::Relaxed),
            0,
            "given back on drop"
        );
    }

    #[test]
    fn a_request_that_never_reached_the_queue_gives_its_bytes_back() {
        let m = Memory::new(Budget::derive(100 << 20, None, None));
        let q = Queued::new(m.clone(), &push());
        assert_eq!(m.pools.get(Pool::Requests), size::request_bytes(&push()));
        drop(q);
        assert_eq!(m.pools.get(Pool::Requests), 0);
        Queued::new(m.clone(), &push()).handed_over();
        assert_eq!(m.pools.get(Pool::Requests), size::request_bytes(&push()));
    }

    #[test]
    fn consumers_are_never_refused() {
        let m = Memory::new(Budget::derive(100 << 20, None, None));
        m.pools.set(Pool::Dedup, usize::MAX / 2);
        m.update_refusing();
        let pop = Command::DeleteQueue { queue: "q".into() };
        assert!(m.admit(&pop, 0).is_ok());
        let txn_ack_only = Command::Transaction(Default::default());
        assert!(m.admit(&txn_ack_only, 0).is_ok());
        assert!(m.admit(&push(), 0).is_err());
    }

    #[test]
    fn a_transient_copy_is_counted_while_it_lives() {
        let m = Memory::new(Budget::derive(100 << 20, None, None));
        let t = Transient::new(m.clone(), 60 << 20);
        assert_eq!(m.pools.get(Pool::Requests), 60 << 20);
        drop(t);
        assert_eq!(m.pools.get(Pool::Requests), 0);
    }

    #[test]
    fn configure_passes_the_door_under_pressure_for_the_engine_to_decide() {
        let m = Memory::new(Budget::derive(100 << 20, None, None));
        m.pools.set(Pool::Waiters, usize::MAX / 2);
        assert!(m.pressed());
        let cfg = Command::Configure(Default::default());
        assert!(m.admit(&cfg, 0).is_ok());
        assert!(m.refusal().message.contains("memory budget"));
    }
}
