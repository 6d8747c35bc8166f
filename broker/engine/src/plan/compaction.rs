//! The compactor (docs/storage-format.md "Pinning and the compactor"): all queues of a tenant
//! share one log, so one held message pins its whole segment, and every later one, until it
//! goes. The leader copies the live runs of the oldest pinned segment forward into an
//! ordinary replicated entry (`RunCopy`); once no run names the old segment the run floor
//! moves past it and reclamation deletes it like any dead segment.
//!
//! Two bounds keep the writes small: a segment is compacted only when its live bytes are at
//! most a quarter of what copying them frees (the segment, and the wholly dead sealed ones
//! after it that only it kept: review C3), and the engine gives at most a quarter of a segment's bytes per
//! checkpoint interval ([`CompactionBudget`]). A copy never changes what a client sees: the
//! run keeps its offsets and creation time, and the frames (ids, transaction ids, sealed
//! payloads) are copied byte for byte.

use bytes::Bytes;

use super::Planner;
use crate::entry::Effect;
use crate::reader::ReadError;
use crate::state::frame::skip_frames;
use crate::state::model::{Run, PENDING_INDEX};

/// A `RunCopy` effect's encoded size without its frames: kind, pid, base, count, length.
const COPY_OVERHEAD: usize = 1 + 8 + 8 + 4 + 4;

/// The sealed segment the compactor looks at: (first index, last index, file bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub first: u64,
    pub last: u64,
    pub bytes: u64,
}

/// What one call of [`Planner::plan_compaction`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Bytes copied into this cycle's entry: the frames and each `RunCopy`'s own header.
    pub bytes: u64,
    pub runs: usize,
    /// No run names the segment any more (it goes at a later reclamation).
    pub segment_done: bool,
    /// Runs of the segment are left for a later cycle (the entry or the budget was full).
    pub more: bool,
    /// Some of them were left because the cycle's entry had no room for them (not for lack of
    /// budget): a later cycle with more room may take them before the next checkpoint.
    pub short_of_room: bool,
    /// The segment was judged more than a quarter live (or still is, unread: `known`).
    pub too_live: Option<TooLive>,
    /// A copy that had to take every live run at once (`whole`) needed more than the
    /// interval's budget: no later cycle of this interval can do better, so it is not short
    /// of room (review s16 compactor M0).
    pub over_budget: bool,
    /// A copy that had to take every live run at once and did not fit the entry's room: the
    /// bytes it needs at least (what it had added up when it stopped reading). The caller
    /// waits until it can give that much before it looks again (review s18 compactor H1).
    pub needs: u64,
}

/// How many runs too large for their look's room [`Memo`] remembers.
const LARGE_KEPT: usize = 64;

/// What earlier looks learned, kept by the caller between looks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memo {
    dead: DeadSpan,
    /// The first index of a segment a look this checkpoint interval read whole and found at
    /// most a quarter live. It stays so: a sealed segment never gains a run, so its live bytes
    /// only shrink, and what its copy frees only grows (the lowest run past it only moves up).
    /// A later look need not add its runs up again, and stops reading once it has taken what
    /// fits (review s17 compactor M2: each cycle re-read every remaining live entry).
    copyable: Option<u64>,
    /// Runs of the floor segment a look read and could not take for want of room or budget,
    /// with what their copy writes: in the copyable mode a later look does not read them
    /// again while it has less room (review s18 compactor M2: the large runs at the front
    /// were read again by every look before it took anything). A run is named by where its
    /// frames lie and how many: the same key is the same frames. At most [`LARGE_KEPT`]; the
    /// ones past that are read as before.
    large: Vec<Large>,
}

/// A run [`Memo`] knows too large for the looks so far: its key and its copy's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Large {
    pid: u64,
    index: u64,
    pos: u32,
    count: u32,
    bytes: u64,
}

impl Memo {
    /// A checkpoint was written: the next look reads the segment whole once more. Not needed
    /// for soundness (the verdict only grows truer); it keeps a look that reads everything to
    /// once per interval, the bound the docs state, should the reasoning above be wrong.
    pub fn new_interval(&mut self) {
        self.copyable = None;
        self.large.clear();
    }

    /// What copying `run` of partition `pid` writes, if a look read it and could not take it.
    fn large_copy(&self, pid: u64, run: &Run) -> Option<u64> {
        self.large
            .iter()
            .find(|l| (l.pid, l.index, l.pos, l.count) == (pid, run.index, run.pos, run.count))
            .map(|l| l.bytes)
    }

    fn remember_large(&mut self, pid: u64, run: &Run, bytes: u64) {
        if self.large.len() < LARGE_KEPT && self.large_copy(pid, run).is_none() {
            self.large.push(Large {
                pid,
                index: run.index,
                pos: run.pos,
                count: run.count,
                bytes,
            });
        }
    }
}

/// A segment judged more than a quarter live, how many runs it held then, and what copying
/// them would have freed. A sealed segment never gains a run (appends and copies go to newer
/// entries), so while it holds as many it holds the same ones, with the same bytes: it is
/// still too live unless the copy would free more, and a look need not read them again
/// (review C2). While no run was dropped since (`drops`, [`RunFloor::drops`]) it holds the
/// same runs for certain, and a look need not even walk them (review M3).
///
/// [`RunFloor::drops`]: crate::state::run_floor::RunFloor::drops
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TooLive {
    pub first: u64,
    pub held: usize,
    /// The lowest index a held run names past the segment, if any.
    pub next: Option<u64>,
    /// Bytes copying every run of the segment would have let go.
    pub frees: u64,
    pub drops: u64,
}

impl TooLive {
    /// Whether a look that walked the runs found what `self` judged.
    fn same_look(&self, other: &TooLive) -> bool {
        (self.first, self.held, self.next, self.frees)
            == (other.first, other.held, other.next, other.frees)
    }
}

/// What [`Planner::plan_compaction`] learned of the wholly dead sealed segments after the
/// floor segment (in [`Memo`]): sealed segments never change (reclamation deletes only below the floor, a
/// roll adds one past the last), so the next look asks the log only past them. Each question
/// may be a redb read under the state lock (the Raft log checks whether reclamation is
/// refused), once per dead segment on every look before (review s16 compactor M1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct DeadSpan {
    /// The index right after the floor segment the span was measured from.
    from: u64,
    /// The first index not counted: where the next look asks the log again.
    to: u64,
    /// Bytes of the sealed segments in `from..to`.
    bytes: u64,
}

/// Bytes the engine still lets the compactor copy before the next checkpoint.
#[derive(Debug, Default)]
pub struct CompactionBudget {
    copied: u64,
}

impl CompactionBudget {
    /// A checkpoint was written: one more quarter segment may be copied.
    pub fn reset(&mut self) {
        self.copied = 0;
    }

    pub fn spend(&mut self, bytes: u64) {
        self.copied = self.copied.saturating_add(bytes);
    }

    /// What is left of a quarter of a segment of `segment_bytes`: copies write at most a
    /// quarter of what they let go, per checkpoint interval too (review C1).
    pub fn left(&self, segment_bytes: u64) -> u64 {
        (segment_bytes / 4).saturating_sub(self.copied)
    }
}

/// One live run of the segment: where it is held and its frames.
struct Live {
    pid: u64,
    run: Run,
    frames: Bytes,
}

impl Planner<'_> {
    /// Copies the live runs of `seg` forward, if their bytes are at most a quarter of its
    /// size, up to `budget` bytes and what fits in `max_entry_bytes`. Walks every run of every
    /// partition once (the engine calls it at most once per checkpoint interval unless a
    /// previous call left `more`). A run whose bytes cannot be read leaves the segment alone:
    /// it stays pinned, nothing is lost. `known`: what an earlier look judged too live; the
    /// same segment holding the same number of runs is not read again. `whole`: copy every
    /// live run of the segment in this entry or none (a copy that borrows the free-space
    /// reserve must give the segment back); it stops reading as soon as the copy can no
    /// longer be whole (review s17 compactor M1). `memo`: what earlier looks learned, kept by
    /// the caller between looks.
    pub fn plan_compaction(
        &mut self,
        seg: Segment,
        budget: u64,
        max_entry_bytes: usize,
        known: Option<TooLive>,
        whole: bool,
        memo: &mut Memo,
    ) -> Result<Compacted, ReadError> {
        let dead = &mut memo.dead;
        let mut out = Compacted::default();
        let drops = self.st.run_floor.drops();
        // No run left any partition since the segment was judged: it holds the same runs, and
        // the one past it is the same (runs committed since name newer entries). Only the
        // sealed segments the copy would free may have grown (a roll, with nothing past it).
        if let Some(k) = known.filter(|k| k.first == seg.first && k.drops == drops) {
            if self.freed_by(seg, k.next, dead) == k.frees {
                out.too_live = Some(k);
                return Ok(out);
            }
        }
        let mut held: Vec<(u64, Run)> = Vec::new();
        let mut next: Option<u64> = None;
        for p in self.st.partitions.values() {
            for r in &p.runs {
                if r.index == PENDING_INDEX || r.index < seg.first {
                    continue;
                }
                if r.index <= seg.last {
                    held.push((p.id(), r));
                } else if next.is_none_or(|n| r.index < n) {
                    next = Some(r.index);
                }
            }
        }
        if held.is_empty() {
            out.segment_done = true;
            return Ok(out);
        }
        let frees = self.freed_by(seg, next, dead);
        let judged = TooLive {
            first: seg.first,
            held: held.len(),
            next,
            frees,
            drops,
        };
        if known.is_some_and(|k| k.same_look(&judged)) {
            out.too_live = Some(judged);
            return Ok(out);
        }
        // Entry order: each old entry is read once, from the cache or the log.
        held.sort_unstable_by_key(|(pid, r)| (r.index, r.pos, *pid));
        // Copies write at most a quarter of what they let go: the segment, and after it the
        // sealed ones only it kept (review C3: one dense floor segment pinned every later one).
        // A segment judged so this interval still is (`Memo::copyable`): not added up again.
        let copyable = memo.copyable == Some(seg.first);
        if !copyable {
            memo.large.clear();
        }
        let quarter = if copyable { u64::MAX } else { frees / 4 };
        // Only the runs this look copies are kept, copied out of their entries, so it holds at
        // most the budget (or the entry's room) and the one entry being read: each run once
        // kept its whole entry alive until the look ended, up to a whole segment under the
        // state lock in memory no pool counts (review s16 M2, C3 having raised the cut-off
        // from a quarter segment to a quarter of what the copy frees). Which runs fit is
        // decided as they are read, as the copy below takes them: a run that does not fit
        // is left for a later cycle, but the smaller ones after it are still taken, so one
        // large run does not hold back all the others (review H2).
        let mut room = max_entry_bytes.saturating_sub(self.cycle.entry.len());
        let (entry_room, mut left) = (room, budget);
        let mut live = Vec::new();
        let mut total = 0u64;
        let mut entry: Option<(u64, Bytes)> = None;
        for (pid, run) in held {
            // Known copyable: once the room or the budget cannot take the smallest copy, the
            // runs left are not read (review s17 compactor M2).
            if copyable && !whole && (room <= COPY_OVERHEAD || left <= COPY_OVERHEAD as u64) {
                out.more = true;
                out.short_of_room |= left > COPY_OVERHEAD as u64;
                break;
            }
            // Known copyable, and this run read before and found larger than what is left:
            // left unread (review s18 compactor M2). Past runs taken, the look stops there.
            if let Some(n) = memo.large_copy(pid, &run).filter(|_| copyable && !whole) {
                if n > left || usize::try_from(n).map_or(true, |n| n > room) {
                    out.more = true;
                    out.short_of_room |= n <= left;
                    if !live.is_empty() {
                        break;
                    }
                    continue;
                }
            }
            let bytes = match &entry {
                Some((i, b)) if *i == run.index => b.clone(),
                _ => {
                    // The one read before is let go first.
                    drop(entry.take());
                    let b = self.entry_bytes(run.index)?;
                    entry = Some((run.index, b.clone()));
                    b
                }
            };
            let frames = run_frames(&bytes, &run)?;
            // What the copy writes, header included: with many tiny runs the headers are a
            // large part of it (review C6).
            let n = copy_bytes(&frames);
            total = total.saturating_add(n);
            if total > quarter {
                out.too_live = Some(judged);
                return Ok(out);
            }
            // A copy into the reserve takes every run or none: once they cannot all fit, the
            // answer is settled, and the rest is not read (review s17 compactor M1). A
            // segment also too live is then not learnt to be: a borrowing look is not retried
            // within the interval either way.
            if whole && total > budget {
                return Ok(Compacted {
                    more: true,
                    over_budget: true,
                    ..Compacted::default()
                });
            }
            if whole && !usize::try_from(total).is_ok_and(|t| t <= entry_room) {
                return Ok(Compacted {
                    more: true,
                    short_of_room: true,
                    needs: total,
                    ..Compacted::default()
                });
            }
            let fits = usize::try_from(n).ok().filter(|&n| n <= room);
            let taken = live.len();
            match fits {
                Some(n_room) if n <= left => {
                    left -= n;
                    room -= n_room;
                    live.push(Live {
                        pid,
                        run,
                        frames: Bytes::copy_from_slice(&frames),
                    });
                }
                Some(_) => out.more = true,
                None if n > left => out.more = true,
                None => {
                    out.more = true;
                    out.short_of_room = true;
                }
            }
            if !whole && live.len() == taken {
                memo.remember_large(pid, &run, n);
            }
            // Known copyable: a look that has taken runs stops at the first it cannot take
            // (before it, one that does not fit does not hold back smaller ones: review H2).
            if copyable && taken > 0 && live.len() == taken {
                break;
            }
        }
        drop(entry);
        // Read whole (or known so): at most a quarter live, for the rest of the interval.
        memo.copyable = Some(seg.first);
        for l in &live {
            self.emit(Effect::RunCopy {
                pid: l.pid,
                base_offset: l.run.base_offset,
                count: l.run.count,
                frames: &l.frames,
            });
            out.bytes = out.bytes.saturating_add(copy_bytes(&l.frames));
            out.runs += 1;
        }
        out.segment_done = !out.more;
        Ok(out)
    }

    /// Bytes that go once no run names `seg`: the floor then moves to `next` (the copies
    /// name the newest entry), so the segment and every sealed one wholly below `next` go.
    /// The log is asked only past what `dead` already counts.
    fn freed_by(&self, seg: Segment, next: Option<u64>, dead: &mut DeadSpan) -> u64 {
        let below = next.unwrap_or(u64::MAX);
        let from = seg.last.saturating_add(1);
        // Every segment counted ends before `dead.to`, so wholly below `below` too.
        let (mut at, mut total) = if dead.from == from && dead.to <= below {
            (dead.to, dead.bytes)
        } else {
            (from, 0)
        };
        while at < below {
            match self.log.sealed_segment_of(at) {
                Some((first, last, bytes)) if first == at && last >= at && last < below => {
                    total = total.saturating_add(bytes);
                    at = last.saturating_add(1);
                }
                _ => break,
            }
        }
        *dead = DeadSpan {
            from,
            to: at,
            bytes: total,
        };
        seg.bytes.saturating_add(total)
    }

    /// An old entry's payload, without putting it in the cache: fresh entries are what pops
    /// want there, not the segment being emptied.
    fn entry_bytes(&self, index: u64) -> Result<Bytes, ReadError> {
        if let Some(e) = self.cache.get(index) {
            return Ok(e);
        }
        let bytes = self.log.read(index)?.ok_or(ReadError::Missing { index })?;
        Ok(Bytes::from(bytes))
    }
}

/// What copying `frames` adds to the entry: the frames and the `RunCopy` header.
fn copy_bytes(frames: &Bytes) -> u64 {
    (frames.len() as u64).saturating_add(COPY_OVERHEAD as u64)
}

/// The frames of `run` as they lie in its entry, whatever they hold (sealed ones unopened).
fn run_frames(entry: &Bytes, run: &Run) -> Result<Bytes, ReadError> {
    let start = run.pos as usize;
    let tail = entry
        .get(start..)
        .ok_or(ReadError::PastEnd { pos: run.pos })?;
    let rest = skip_frames(tail, u64::from(run.count))?;
    let len = tail.len() - rest.len();
    Ok(entry.slice(start..start + len))
}
