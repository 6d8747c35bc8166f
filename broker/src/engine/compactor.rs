//! When the leader runs the compactor (docs/storage-format.md "Pinning and the compactor"):
//! once after each checkpoint of this incarnation, and again in the next cycles while it makes
//! progress, with a quarter of a segment's bytes to copy per checkpoint interval. The copies
//! themselves are planned in `queenmq_engine::plan::compaction`.

use std::sync::Arc;

use queenmq_engine::log::ReplicatedLog;
use queenmq_engine::plan::{Compacted, CompactionBudget, Memo, Planner, Segment, TooLive};

#[derive(Debug)]
pub struct Compactor {
    /// False when reclamation or compaction is off: a copy would then free nothing, or the
    /// operator wants none.
    enabled: bool,
    /// Whether the next cycle looks at the oldest pinned segment (each look walks the runs).
    due: bool,
    budget: CompactionBudget,
    /// The last segment a look found more than a quarter live: not read again while it holds
    /// the same runs (review C2).
    too_live: Option<TooLive>,
    /// The dead segments after the floor segment a look measured: not asked of the log
    /// again (review s16 M1); and the segment judged copyable this interval, not read whole
    /// again (review s17 M2).
    memo: Memo,
    /// Looks left this checkpoint interval that may follow one short of room.
    room_retries: u32,
    /// Whether the look waiting for disk room was counted already: it stays due and is
    /// tried every cycle, but one wait is one skip.
    full_counted: bool,
    /// Bytes of the free-space reserve copies borrowed since the last checkpoint (review H1):
    /// at most an eighth of the reserve per interval, given back two checkpoints later.
    lent: u64,
    /// A look left runs for lack of room in a cycle holding client work: the next look gets
    /// a cycle to itself (review H2), once per checkpoint interval (`alone_left`).
    wants_alone: bool,
    alone_left: bool,
    /// A borrowing look needed more than was left to lend: the bytes its copy needs at least.
    /// The look waits, due, without walking the runs, until the loan covers them, or until a
    /// checkpoint (written or skipped) measures again (review s18 H1: it once waited for a
    /// written checkpoint, which a full node whose floor segment pins the log never writes).
    awaiting_loan: Option<u64>,
    /// No checkpoint of this incarnation was written or skipped yet: only looks that borrow
    /// the reserve (a full node) are made, bounded by the gate's loan floor (review s18 H1).
    fresh: bool,
    /// A checkpoint was skipped since the last borrowing look: the next one gets a whole
    /// budget and loan (review s19 H1).
    skip_rearmed: bool,
    /// The `tenant` label of `queen_compaction_skipped_total`.
    tenant: Arc<str>,
}

/// The entry's limit for a look's copies ([`Compactor::copy_room`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Room {
    max_entry_bytes: usize,
    /// The copy borrows the reserve: every live run of its segment, or none.
    borrows: bool,
    /// What is left to lend is the limit, not the caps (`ungated`).
    loan_bound: bool,
}

/// How many looks a checkpoint interval may spend on runs the cycle had no room for: each
/// walks every run (review M3), and under a steady load a run larger than what client work
/// leaves may never fit (review H2, docs/storage-format.md "Open").
const ROOM_RETRIES: u32 = 16;

/// Why a look left the oldest pinned segment where it is: the `reason` label of
/// `queen_compaction_skipped_total` (review C8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Its live bytes are more than a quarter of what copying them would free.
    TooLive,
    /// The cycle's entry had no room for some of its runs.
    EntryFull,
    /// This checkpoint interval's quarter segment is spent.
    Budget,
    /// A copy borrowing the reserve must take every live run of its segment at once, and
    /// they are more than the interval's budget (review s16 M0: once counted `disk_full`,
    /// and retried every cycle without a chance).
    OverBudget,
    /// `RECLAIM_PAUSED` exists: a copy would free nothing.
    Paused,
    /// The disk gate leaves no room above the reserve.
    DiskFull,
    /// A copy borrowing the reserve must take every live run of its segment at once, and
    /// they are more than what is left to lend (review s17 M1: once called short of room,
    /// retried 16 times, each reading the segment again, with no chance).
    OverLoan,
    /// A live run's bytes could not be read.
    ReadError,
}

impl Skip {
    pub const ALL: [Skip; 8] = [
        Skip::TooLive,
        Skip::EntryFull,
        Skip::Budget,
        Skip::OverBudget,
        Skip::Paused,
        Skip::DiskFull,
        Skip::OverLoan,
        Skip::ReadError,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Skip::TooLive => "too_live",
            Skip::EntryFull => "entry_full",
            Skip::Budget => "budget",
            Skip::OverBudget => "over_budget",
            Skip::Paused => "paused",
            Skip::DiskFull => "disk_full",
            Skip::OverLoan => "over_loan",
            Skip::ReadError => "read_error",
        }
    }

    /// Why a look that ran left runs of its segment, if it did.
    fn of(c: &Compacted) -> Option<Skip> {
        if c.too_live.is_some() {
            Some(Skip::TooLive)
        } else if c.over_budget {
            Some(Skip::OverBudget)
        } else if c.short_of_room {
            Some(Skip::EntryFull)
        } else if c.more {
            Some(Skip::Budget)
        } else {
            None
        }
    }
}

impl Compactor {
    /// Due at once, but before this incarnation's first checkpoint only for a look that
    /// borrows the reserve. The budget lives in memory only, so an engine rebuilt after a
    /// failed proposal or a restarted process must not copy again at once, with a fresh
    /// budget, what the failed entry held (review C1: one segment per crash otherwise); a
    /// borrowing copy is bounded by the disk gate's loan floor and the free space read after
    /// the failure, so an ENOSPC cannot follow it in a loop. And it must look: on a full node
    /// whose floor segment pins the log no checkpoint is written, and a rebuilt group (after
    /// an ENOSPC above all) or a restarted process never compacted, so writes stayed refused
    /// until an operator freed space (review s18 H1).
    pub fn new(enabled: bool, tenant: Arc<str>) -> Self {
        // Exported at 0 from the start, so a dashboard tells "never" from "not scraped".
        for s in Skip::ALL {
            metrics::counter!("queen_compaction_skipped_total", "tenant" => tenant.to_string(), "reason" => s.label())
                .increment(0);
        }
        Compactor {
            enabled,
            due: enabled,
            budget: CompactionBudget::default(),
            too_live: None,
            memo: Memo::default(),
            room_retries: 0,
            full_counted: false,
            lent: 0,
            wants_alone: false,
            alone_left: false,
            awaiting_loan: None,
            fresh: true,
            skip_rearmed: false,
            tenant,
        }
    }

    /// A checkpoint was written: one more quarter segment may be copied, and looked for.
    pub fn after_checkpoint(&mut self) {
        self.budget.reset();
        self.memo.new_interval();
        self.due = self.enabled;
        self.room_retries = ROOM_RETRIES;
        self.full_counted = false;
        self.lent = 0;
        self.wants_alone = false;
        self.alone_left = true;
        self.awaiting_loan = None;
        self.fresh = false;
        self.skip_rearmed = false;
    }

    /// A checkpoint was skipped for want of space: due again. On a full node whose floor
    /// segment pins the log every checkpoint is skipped (nothing to reclaim repays it), and
    /// the copy is the only way out: without this, a look that stopped (a short loan, the
    /// retries spent) stayed off for good and writes were refused 507 until an operator freed
    /// space (review s18 H1). A look that borrows the reserve gets a whole budget and loan:
    /// a checkpoint is written only once copies freed about four times its size, which one
    /// quarter segment and one loan may never reach, so a second pinned segment was refused
    /// `over_budget` for good (review s19 H1); the gate's loan floor bounds it, and the skip
    /// comes once per checkpoint interval. A look within the room above the reserve keeps
    /// what is left (nothing was given back). It ends `fresh`: rate-limited like a written
    /// checkpoint, which is all review C1 asks; else a restarted node with some room above
    /// the reserve but not enough for a checkpoint never compacted until it was full (review
    /// s19 L2).
    pub fn after_skipped_checkpoint(&mut self) {
        self.due = self.enabled;
        self.full_counted = false;
        self.awaiting_loan = None;
        self.fresh = false;
        self.skip_rearmed = true;
    }

    /// Whether this cycle is given to the compactor alone: its client jobs wait for the next
    /// cycle, and the copy may grow the entry up to the entry cap (review H2: under a steady
    /// load every cycle held client work, and a run larger than what it left was never
    /// copied, pinning its segment and every later one). Once per checkpoint interval, after
    /// a look that left runs for lack of room; it costs the clients one cycle's delay.
    pub fn take_cycle_alone(&mut self) -> bool {
        if !(self.due && self.wants_alone && self.alone_left) {
            return false;
        }
        self.wants_alone = false;
        self.alone_left = false;
        true
    }

    /// Whether the next cycle looks at the oldest pinned segment.
    pub fn is_due(&self) -> bool {
        self.due
    }

    /// A look that copied nothing, as far as being due goes (the engine's tests).
    #[cfg(test)]
    pub(super) fn rest(&mut self) {
        self.due = false;
    }

    fn skipped(&self, why: Skip) {
        metrics::counter!("queen_compaction_skipped_total", "tenant" => self.tenant.to_string(), "reason" => why.label())
            .increment(1);
    }

    /// Whether a look may start now, and with how many bytes of budget for a segment of
    /// `segment_bytes`; else why not (`None`: not due, nothing to count). `room`: how large
    /// the cycle's entry may grow with the copy, from the disk gate (0 while the node is full,
    /// or when any copy would eat into the reserve). A look without room stays due: it costs
    /// nothing, and copies once space is back. `deletes`: whether reclamation would delete
    /// now; while it is paused (`RECLAIM_PAUSED`, a live backup) a copy frees nothing, so none
    /// is made until a checkpoint after the pause (review C5). Asked only when a look is due
    /// (it reads the file system).
    fn start(
        &mut self,
        room: usize,
        segment_bytes: u64,
        deletes: impl FnOnce() -> bool,
    ) -> Result<u64, Option<Skip>> {
        if !self.due {
            return Err(None);
        }
        if room == 0 {
            if std::mem::replace(&mut self.full_counted, true) {
                return Err(None);
            }
            return Err(Some(Skip::DiskFull));
        }
        self.due = false;
        if !deletes() {
            return Err(Some(Skip::Paused));
        }
        let budget = self.budget.left(segment_bytes);
        if budget == 0 {
            return Err(Some(Skip::Budget));
        }
        Ok(budget)
    }

    /// Whether a look that left runs for lack of room is tried again next cycle.
    fn retry_for_room(&mut self, c: &Compacted) -> bool {
        if !c.short_of_room || self.room_retries == 0 {
            return false;
        }
        self.room_retries -= 1;
        true
    }

    /// How large the entry may grow with copies: `gated` (held to the disk gate's room), or
    /// up to `ungated` (the caps alone) with what is left of `lend`, the reserve a copy may
    /// borrow, this interval. Whether it borrows, and if so whether the loan (not the caps)
    /// is the limit.
    fn copy_room(&self, planned: usize, gated: usize, ungated: usize, lend: u64) -> Room {
        Self::room_after(self.lent, planned, gated, ungated, lend)
    }

    /// [`Compactor::copy_room`] with `lent` bytes already borrowed.
    fn room_after(lent: u64, planned: usize, gated: usize, ungated: usize, lend: u64) -> Room {
        let lend = usize::try_from(lend.saturating_sub(lent)).unwrap_or(usize::MAX);
        let on_loan = planned.saturating_add(lend);
        let borrowed = ungated.min(on_loan);
        if borrowed > gated {
            Room {
                max_entry_bytes: borrowed,
                borrows: true,
                loan_bound: on_loan < ungated,
            }
        } else {
            Room {
                max_entry_bytes: gated,
                borrows: false,
                loan_bound: false,
            }
        }
    }

    /// Copies live runs of the oldest pinned sealed segment into the cycle's entry, if due,
    /// without the entry passing `max_entry_bytes` (already held to the disk gate's room),
    /// or `ungated` when the copy borrows at most `lend` bytes of the reserve and empties
    /// its segment (review H1).
    pub fn plan(
        &mut self,
        planner: &mut Planner<'_>,
        log: &dyn ReplicatedLog,
        (max_entry_bytes, ungated, lend): (usize, usize, u64),
        deletes: impl FnOnce() -> bool,
    ) -> Option<Compacted> {
        if !self.due {
            return None;
        }
        // Waiting for a loan that covers the copy: no walk until it does (review s18 H1).
        if let Some(needs) = self.awaiting_loan {
            if lend.saturating_sub(self.lent) < needs {
                return None;
            }
            self.awaiting_loan = None;
        }
        let planned = planner.cycle.entry.len();
        let mut room = self.copy_room(planned, max_entry_bytes, ungated, lend);
        if self.skip_rearmed {
            // After a skipped checkpoint a borrowing look starts whole (review s19 H1).
            let whole = Self::room_after(0, planned, max_entry_bytes, ungated, lend);
            if whole.borrows {
                self.budget.reset();
                self.lent = 0;
                self.skip_rearmed = false;
                room = whole;
            }
        }
        let Room {
            max_entry_bytes,
            borrows,
            loan_bound,
        } = room;
        let room = max_entry_bytes.saturating_sub(planned);
        // Before the first checkpoint only a borrowing look (see `new`); one without room is
        // still counted as waiting for it.
        if self.fresh && !borrows && room > 0 {
            return None;
        }
        let floor = planner.st.run_floor.lowest()?;
        let (first, last, bytes) = log.sealed_segment_of(floor)?;
        let budget = match self.start(room, bytes, deletes) {
            Ok(b) => b,
            Err(why) => {
                if let Some(why) = why {
                    self.skipped(why);
                }
                return None;
            }
        };
        let seg = Segment { first, last, bytes };
        let look = planner.plan_compaction(
            seg,
            budget,
            max_entry_bytes,
            self.too_live,
            borrows,
            &mut self.memo,
        );
        match look {
            Ok(c) => {
                self.too_live = c.too_live;
                self.budget.spend(c.bytes);
                if borrows {
                    // Counted whole: part of it may have fitted above the reserve.
                    self.lent = self.lent.saturating_add(c.bytes);
                }
                // The segment did not fit whole in what is left to lend (review s17 M1): neither
                // retried every cycle nor given a cycle alone, but it waits, without reading,
                // for the loan to cover it: it was short perhaps only while another tenant's
                // checkpoint was being saved (review s18 H1). Short of the cycle's own room, it
                // is retried (client work).
                let over_loan = borrows && loan_bound && c.short_of_room;
                if over_loan {
                    self.awaiting_loan = Some(c.needs.max(1));
                }
                let why = if over_loan {
                    Some(Skip::OverLoan)
                } else {
                    Skip::of(&c)
                };
                if let Some(why) = why {
                    self.skipped(why);
                }
                // Progress, and room left: the rest of this segment, or the next pinned one,
                // in the next cycle. So too a look that left runs for lack of room (a later
                // cycle may leave more), a bounded number of times. A look that copied nothing
                // otherwise waits for the next checkpoint.
                self.due = c.runs > 0 || over_loan || self.retry_for_room(&c);
                self.wants_alone = c.short_of_room && !over_loan;
                Some(c)
            }
            Err(e) => {
                self.skipped(Skip::ReadError);
                tracing::warn!(segment_first = first, error = %e, "the compactor could not read a live run; the segment stays until its messages go");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Compactor, Skip};
    use queenmq_engine::plan::fixture::{opts, Fixture, MemLog};
    use queenmq_engine::plan::{Compacted, Memo, Segment, TooLive};

    const SEGMENT: u64 = 64 << 20;

    #[test]
    fn a_look_per_checkpoint_unless_it_made_progress() {
        let mut c = Compactor::new(true, Arc::from("t"));
        c.after_checkpoint();
        assert_eq!(c.start(usize::MAX, SEGMENT, || true), Ok(SEGMENT / 4));
        // `plan` keeps it due after progress.
        assert_eq!(c.start(usize::MAX, SEGMENT, || true), Err(None));
    }

    #[test]
    fn a_new_compactor_borrows_at_once_but_copies_above_the_reserve_only_after_a_checkpoint() {
        // Review C1: a rebuild or a restart builds a new one, with a fresh budget: it must not
        // copy again at once what the failed entry held. Review s18 H1: but on a full node
        // whose floor segment pins the log no checkpoint is ever written, so it must look
        // with the gate's loan (bounded by its floor), or the node stays full for good.
        let live = live_bytes();
        let (mut f, log) = pinned(4 * live, 4 * live);
        let mut c = Compactor::new(true, Arc::from("t"));
        assert!(c.is_due());
        // Room above the reserve: no look before the first checkpoint, and still due.
        assert!(c
            .plan(&mut f.planner(), &log, (usize::MAX, 4 << 20, 0), || true)
            .is_none());
        assert!(c.is_due());
        assert_eq!(f.log.reads.load(std::sync::atomic::Ordering::SeqCst), 0);
        // A full node (no room above the reserve) and a loan: the floor segment is copied.
        let got = c
            .plan(&mut f.planner(), &log, (0, 4 << 20, 1 << 20), || true)
            .expect("a look");
        assert_eq!((got.runs, got.segment_done), (1, true), "{got:?}");
    }

    #[test]
    fn no_look_without_room_and_it_stays_due_until_there_is() {
        let mut c = Compactor::new(true, Arc::from("t"));
        c.after_checkpoint();
        // One wait for room is one skip, however many cycles it lasts.
        assert_eq!(c.start(0, SEGMENT, || true), Err(Some(Skip::DiskFull)));
        assert_eq!(c.start(0, SEGMENT, || true), Err(None));
        assert_eq!(c.start(1, SEGMENT, || true), Ok(SEGMENT / 4));
    }

    #[test]
    fn the_budget_is_a_quarter_segment_per_checkpoint_interval() {
        let mut c = Compactor::new(true, Arc::from("t"));
        c.after_checkpoint();
        c.budget.spend(SEGMENT / 4 - 10);
        c.due = true;
        assert_eq!(c.start(usize::MAX, SEGMENT, || true), Ok(10));
        c.budget.spend(10);
        c.due = true;
        assert_eq!(
            c.start(usize::MAX, SEGMENT, || true),
            Err(Some(Skip::Budget)),
            "the quarter is spent"
        );
        c.after_checkpoint();
        assert_eq!(c.start(usize::MAX, SEGMENT, || true), Ok(SEGMENT / 4));
    }

    #[test]
    fn a_look_short_of_room_stays_due_a_bounded_number_of_times() {
        // Review H2: a look that left runs for lack of room waited for the next checkpoint.
        let mut c = Compactor::new(true, Arc::from("t"));
        c.after_checkpoint();
        let short = Compacted {
            more: true,
            short_of_room: true,
            ..Compacted::default()
        };
        // The first look after the checkpoint, then ROOM_RETRIES more that it earns.
        for _ in 0..=super::ROOM_RETRIES {
            assert_eq!(c.start(usize::MAX, SEGMENT, || true), Ok(SEGMENT / 4));
            c.due = c.retry_for_room(&short);
        }
        assert!(!c.due, "the retries are spent until the next checkpoint");
        assert_eq!(c.start(usize::MAX, SEGMENT, || true), Err(None));
        let budget_only = Compacted {
            more: true,
            ..Compacted::default()
        };
        c.after_checkpoint();
        c.due = c.retry_for_room(&budget_only);
        assert!(
            !c.due,
            "a look stopped by the budget waits for the next checkpoint"
        );
    }

    #[test]
    fn a_compactor_with_reclamation_off_never_looks() {
        let mut c = Compactor::new(false, Arc::from("t"));
        assert_eq!(c.start(usize::MAX, SEGMENT, || true), Err(None));
        c.after_checkpoint();
        assert_eq!(c.start(usize::MAX, SEGMENT, || true), Err(None));
        c.after_skipped_checkpoint();
        assert_eq!(c.start(usize::MAX, SEGMENT, || true), Err(None));
    }

    #[test]
    fn a_skipped_checkpoint_makes_the_compactor_due_again_with_what_is_left_of_the_interval() {
        // Review s18 H1: only a written checkpoint made it due again, and on a full node whose
        // floor segment pins the log every checkpoint is skipped: it stopped looking for good.
        let mut c = Compactor::new(true, Arc::from("t"));
        c.after_checkpoint();
        assert_eq!(c.start(usize::MAX, SEGMENT, || true), Ok(SEGMENT / 4));
        c.budget.spend(SEGMENT / 8);
        c.lent = 100;
        assert!(!c.is_due(), "a look that copied nothing");
        c.after_skipped_checkpoint();
        assert!(c.is_due());
        assert_eq!(
            c.start(usize::MAX, SEGMENT, || true),
            Ok(SEGMENT / 8),
            "no fresh quarter above the reserve: nothing was given back"
        );
        assert_eq!(c.lent, 100, "the loan stays counted until a look borrows");
    }

    /// A node whose two oldest sealed segments (entries 1 and 2, `bytes` each) hold two live
    /// messages each, followed by a run in the segment appends go to.
    fn two_pinned(bytes: u64) -> (Fixture, MemLog) {
        let mut f = Fixture::new();
        f.push("keep", "p", 2);
        f.commit();
        f.push("keep", "q", 2);
        f.commit();
        f.push("later", "p", 1);
        f.commit();
        let sealed = vec![(1, 1, bytes), (2, 2, bytes)];
        f.log.sealed = sealed.clone();
        let log = MemLog {
            sealed,
            ..MemLog::default()
        };
        (f, log)
    }

    #[test]
    fn a_skipped_checkpoint_gives_a_borrowing_look_a_whole_budget_and_loan() {
        // Review s19 H1: on a full node a checkpoint is written only once copies freed about
        // four times its size. A skip kept what was left of one quarter segment and one loan,
        // so the second of two segments 15 % live was refused `over_budget` for good.
        let live = live_bytes();
        let (mut f, log) = two_pinned(live * 20 / 3);
        let mut c = Compactor::new(true, Arc::from("t"));
        c.after_checkpoint();
        // A full node: no room above the reserve, a loan for one copy and a half.
        let full = (0, 4 << 20, live + live / 2);
        let got = c
            .plan(&mut f.planner(), &log, full, || true)
            .expect("a look");
        assert_eq!((got.runs, got.segment_done), (1, true), "{got:?}");
        assert!(f.commit().is_some());
        let got = c
            .plan(&mut f.planner(), &log, full, || true)
            .expect("a look");
        assert!(got.over_budget, "what is left of the quarter: {got:?}");
        assert!(!c.is_due());
        c.after_skipped_checkpoint();
        let got = c
            .plan(&mut f.planner(), &log, full, || true)
            .expect("a look after the skip");
        assert_eq!((got.runs, got.segment_done), (1, true), "{got:?}");
        assert_eq!(c.lent, got.bytes, "the loan counts from the skip");
    }

    #[test]
    fn a_skipped_checkpoint_ends_the_new_compactor_s_wait() {
        // Review s19 L2: a fresh compactor made borrowing looks only, until a checkpoint was
        // written; a restarted node with some room above the reserve, but not enough for a
        // checkpoint, skipped every one and never compacted until it was full.
        let live = live_bytes();
        let (mut f, log) = pinned(4 * live, 4 * live);
        let mut c = Compactor::new(true, Arc::from("t"));
        c.after_skipped_checkpoint();
        let got = c
            .plan(&mut f.planner(), &log, (usize::MAX, 4 << 20, 0), || true)
            .expect("a look within the room above the reserve");
        assert_eq!((got.runs, got.segment_done), (1, true), "{got:?}");
    }

    #[test]
    fn no_copy_while_reclamation_is_paused_and_due_again_after_a_checkpoint() {
        let mut c = Compactor::new(true, Arc::from("t"));
        c.after_checkpoint();
        assert_eq!(
            c.start(usize::MAX, SEGMENT, || false),
            Err(Some(Skip::Paused))
        );
        assert_eq!(
            c.start(usize::MAX, SEGMENT, || true),
            Err(None),
            "not before a checkpoint"
        );
        c.after_checkpoint();
        assert_eq!(c.start(usize::MAX, SEGMENT, || true), Ok(SEGMENT / 4));
    }

    #[test]
    fn the_pause_file_is_asked_only_when_a_look_is_due() {
        let mut c = Compactor::new(true, Arc::from("t"));
        c.due = false;
        assert_eq!(
            c.start(usize::MAX, SEGMENT, || panic!("asked while not due")),
            Err(None)
        );
    }

    #[test]
    fn each_look_that_leaves_runs_names_why() {
        // Review C8: a dashboard sees why a segment stays pinned.
        let too_live = Compacted {
            too_live: Some(TooLive::default()),
            ..Compacted::default()
        };
        assert_eq!(Skip::of(&too_live), Some(Skip::TooLive));
        let short = Compacted {
            more: true,
            short_of_room: true,
            ..Compacted::default()
        };
        assert_eq!(Skip::of(&short), Some(Skip::EntryFull));
        let budget = Compacted {
            more: true,
            ..Compacted::default()
        };
        assert_eq!(Skip::of(&budget), Some(Skip::Budget));
        let over = Compacted {
            more: true,
            over_budget: true,
            ..Compacted::default()
        };
        assert_eq!(Skip::of(&over), Some(Skip::OverBudget));
        let done = Compacted {
            runs: 3,
            segment_done: true,
            ..Compacted::default()
        };
        assert_eq!(Skip::of(&done), None);
        let labels: std::collections::BTreeSet<_> = Skip::ALL.iter().map(|s| s.label()).collect();
        assert_eq!(labels.len(), Skip::ALL.len(), "one label each");
    }

    fn room(
        c: &Compactor,
        planned: usize,
        gated: usize,
        ungated: usize,
        lend: u64,
    ) -> (usize, bool) {
        let r = c.copy_room(planned, gated, ungated, lend);
        (r.max_entry_bytes, r.borrows)
    }

    #[test]
    fn a_copy_borrows_at_most_an_eighth_of_the_reserve_per_interval() {
        // Review H1: the gate lends up to reserve/8 (`DiskGate::lend`); the compactor spends it
        // once per checkpoint interval, the space coming back two checkpoints later.
        let mut c = Compactor::new(true, Arc::from("t"));
        c.after_checkpoint();
        // Full: no room above the reserve, 1000 bytes to lend, caps of 4 MiB.
        assert_eq!(room(&c, 100, 100, 4 << 20, 1_000), (1_100, true));
        // Room above the reserve larger than the loan: no borrowing.
        assert_eq!(room(&c, 100, 5_000, 4 << 20, 1_000), (5_000, false));
        assert!(
            c.copy_room(100, 100, 4 << 20, 1_000).loan_bound,
            "the loan is the limit"
        );
        // Never past the caps.
        assert_eq!(room(&c, 100, 100, 600, 1_000), (600, true));
        assert!(
            !c.copy_room(100, 100, 600, 1_000).loan_bound,
            "the cap is the limit"
        );
        c.lent = 700;
        assert_eq!(room(&c, 0, 0, 4 << 20, 1_000), (300, true));
        c.lent = 1_000;
        assert_eq!(room(&c, 0, 0, 4 << 20, 1_000), (0, false));
        c.after_checkpoint();
        assert_eq!(room(&c, 0, 0, 4 << 20, 1_000), (1_000, true));
    }

    #[test]
    fn a_look_short_of_room_gets_one_cycle_alone_per_interval() {
        // Review H2: a run larger than what client work leaves in a cycle was never copied
        // under a steady load.
        let mut c = Compactor::new(true, Arc::from("t"));
        assert!(!c.take_cycle_alone(), "nothing looked yet");
        c.after_checkpoint();
        assert!(!c.take_cycle_alone(), "no look was short of room");
        let short = Compacted {
            more: true,
            short_of_room: true,
            ..Compacted::default()
        };
        assert_eq!(c.start(usize::MAX, SEGMENT, || true), Ok(SEGMENT / 4));
        c.due = c.retry_for_room(&short);
        c.wants_alone = short.short_of_room;
        assert!(c.take_cycle_alone());
        assert!(!c.take_cycle_alone(), "one cycle");
        // Still short in that cycle: no second one before the next checkpoint.
        c.wants_alone = true;
        assert!(!c.take_cycle_alone());
        c.after_checkpoint();
        assert!(
            !c.take_cycle_alone(),
            "a new interval waits for a look short of room"
        );
        c.wants_alone = true;
        assert!(c.take_cycle_alone());
    }

    /// A node whose oldest pinned segment (entry 1, `floor_bytes` on disk) holds two live
    /// messages, followed by a wholly dead sealed segment (entry 2) of `dead_bytes` and a
    /// later run in the segment appends go to; and a log naming the same segments.
    fn pinned(floor_bytes: u64, dead_bytes: u64) -> (Fixture, MemLog) {
        let mut f = Fixture::new();
        f.push("keep", "p", 2);
        f.commit();
        f.configure("other", opts(|_| {}));
        f.commit();
        f.push("later", "p", 1);
        f.commit();
        let sealed = vec![(1, 1, floor_bytes), (2, 2, dead_bytes)];
        f.log.sealed = sealed.clone();
        let log = MemLog {
            sealed,
            ..MemLog::default()
        };
        (f, log)
    }

    /// What copying the live runs of `pinned`'s floor segment writes.
    fn live_bytes() -> u64 {
        let (mut f, _) = pinned(1 << 30, 0);
        match f.planner().plan_compaction(
            seg(1 << 30),
            u64::MAX,
            usize::MAX,
            None,
            false,
            &mut Memo::default(),
        ) {
            Ok(c) => c.bytes,
            Err(e) => panic!("{e}"),
        }
    }

    fn seg(bytes: u64) -> Segment {
        Segment {
            first: 1,
            last: 1,
            bytes,
        }
    }

    #[test]
    fn a_borrowing_look_over_the_budget_is_neither_retried_nor_given_a_cycle_alone() {
        // Review s16 M0: a copy into the reserve must take the segment whole; when that is
        // more than the interval's budget it was called short of room, retried 16 times (each
        // reading the segment again under the state lock), given a cycle alone, and counted
        // `disk_full`, with no chance of success before the next checkpoint.
        let live = live_bytes();
        // The floor segment's quarter (the budget) is one byte short; with the dead segment
        // after it the copy frees enough for the quarter rule.
        let (mut f, log) = pinned(4 * (live - 1), 4 * live);
        let mut c = Compactor::new(true, Arc::from("t"));
        c.after_checkpoint();
        // A full node: no room above the reserve, a loan of 1 MiB.
        let got = c
            .plan(&mut f.planner(), &log, (0, 4 << 20, 1 << 20), || true)
            .expect("a look");
        assert!(got.over_budget, "{got:?}");
        assert!(!got.short_of_room, "{got:?}");
        assert_eq!((got.runs, got.too_live), (0, None), "{got:?}");
        assert_eq!(Skip::of(&got), Some(Skip::OverBudget));
        assert!(!c.is_due(), "no retry before the next checkpoint");
        assert!(!c.take_cycle_alone(), "no cycle alone for it");
        // With the budget whole (a larger floor segment) the same look copies.
        let (mut f, log) = pinned(4 * live, 4 * live);
        let mut c = Compactor::new(true, Arc::from("t"));
        c.after_checkpoint();
        let got = c
            .plan(&mut f.planner(), &log, (0, 4 << 20, 1 << 20), || true)
            .expect("a look");
        assert_eq!((got.runs, got.segment_done), (1, true), "{got:?}");
    }

    /// `queen_compaction_skipped_total` of tenant "t" by reason, as rendered.
    fn skipped(text: &str, reason: &str) -> u64 {
        let key = format!("queen_compaction_skipped_total{{tenant=\"t\",reason=\"{reason}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(key.as_str()))
            .map_or(0, |n| n.trim().parse().unwrap_or(0))
    }

    #[test]
    fn a_borrowing_look_over_the_loan_is_counted_once_and_neither_retried_nor_alone() {
        // Review s17 M1: a copy into the reserve that fitted the budget but not what is left
        // to lend was called short of room: retried 16 times (each reading the segment again
        // under the state lock), given a cycle alone, and counted `disk_full` on every try.
        let live = live_bytes();
        let (mut f, log) = pinned(4 * live, 4 * live);
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let mut c = metrics::with_local_recorder(&recorder, || {
            let mut c = Compactor::new(true, Arc::from("t"));
            c.after_checkpoint();
            // A full node: no room above the reserve, a loan one byte short, the caps large.
            let got = c
                .plan(&mut f.planner(), &log, (0, 4 << 20, live - 1), || true)
                .expect("a look");
            assert_eq!((got.runs, got.short_of_room), (0, true), "{got:?}");
            // The next cycles, while the loan stays short: nothing more, however many.
            for _ in 0..3 {
                assert!(c
                    .plan(&mut f.planner(), &log, (0, 4 << 20, live - 1), || true)
                    .is_none());
            }
            c
        });
        assert!(c.is_due(), "it waits for the loan (review s18 H1)");
        assert!(!c.take_cycle_alone(), "no cycle alone for it");
        let text = handle.render();
        assert_eq!(skipped(&text, "over_loan"), 1, "{text}");
        assert_eq!(skipped(&text, "disk_full"), 0, "{text}");
        assert_eq!(skipped(&text, "entry_full"), 0, "{text}");
        assert_eq!(
            f.log.reads.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "one walk"
        );
        // Review s18 H1: the loan was short perhaps only while another tenant's checkpoint was
        // saved; once it covers the copy (no checkpoint in between), the segment is copied.
        let got = c
            .plan(&mut f.planner(), &log, (0, 4 << 20, live), || true)
            .expect("a look once the loan covers the copy");
        assert_eq!((got.runs, got.segment_done), (1, true), "{got:?}");

        // Short of the cycle's own room (client work; a loan large enough): retried, and
        // given a cycle alone.
        let (mut f, log) = pinned(4 * live, 4 * live);
        let mut c = Compactor::new(true, Arc::from("t"));
        c.after_checkpoint();
        let planned = f.planner().cycle.entry.len();
        let got = c
            .plan(
                &mut f.planner(),
                &log,
                (0, planned + live as usize - 1, 1 << 20),
                || true,
            )
            .expect("a look");
        assert_eq!((got.runs, got.short_of_room), (0, true), "{got:?}");
        assert!(c.is_due(), "retried: a later cycle may leave more room");
        assert!(c.take_cycle_alone());
    }
}
