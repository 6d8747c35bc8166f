//! The compactor: the live runs of a pinned segment are copied forward, and nothing a client
//! sees changes, whether the copy races a pop, an ack or a lease, is replayed alone, or a
//! restart lands between the copy and the deletion of the old segment.

use queenmq_protocol::{AckStatus, PopResult, Setting};

use super::compaction::{Compacted, Memo, Segment};
use super::fixture::{opts, Fixture, SECOND};
use super::retention_tests::sweep;
use crate::apply::apply_entry;
use crate::state::{decode_state, encode_state};

/// Queue "keep" (no retention) holds 2 messages written first; queue "hot" (retention 10 s)
/// wrote 40 more after them, all since removed. The old segment is every entry so far: the
/// index of the last one is returned.
fn pinned() -> (Fixture, Vec<(String, String)>, u64) {
    let mut f = Fixture::new();
    f.configure(
        "hot",
        opts(|o| {
            o.retention_enabled = Some(Setting::Value(true));
            o.retention_seconds = Some(Setting::Value(10));
        }),
    );
    let kept: Vec<(String, String)> = f
        .push("keep", "p", 2)
        .into_iter()
        .map(|r| (r.message_id, r.transaction_id))
        .collect();
    f.commit();
    for _ in 0..4 {
        f.push("hot", "p", 10);
        f.commit();
    }
    f.advance(11 * SECOND);
    assert_eq!(sweep(&mut f), 40);
    let last = *f.log.entries.keys().last().expect("entries");
    (f, kept, last)
}

/// A segment over entries `..=last` of `bytes` bytes.
fn seg(last: u64, bytes: u64) -> Segment {
    Segment {
        first: 1,
        last,
        bytes,
    }
}

fn keep_index(f: &Fixture) -> Vec<u64> {
    let q = f.st.queue_named("keep").expect("keep");
    let pid = q.partitions.get("p", &f.st.partitions).expect("p");
    f.st.partitions
        .get(&pid)
        .expect("row")
        .runs
        .iter()
        .map(|r| r.index)
        .collect()
}

fn ids(popped: &PopResult) -> Vec<(String, String)> {
    popped
        .messages
        .iter()
        .map(|m| (m.id.clone(), m.transaction_id.clone()))
        .collect()
}

fn compact(f: &mut Fixture, s: Segment) -> Compacted {
    look_once(f, s, u64::MAX, usize::MAX, false)
}

/// One look with nothing remembered: `budget` bytes of copies, entries up to `room`, and
/// whether the copy must take the whole segment.
fn look_once(f: &mut Fixture, s: Segment, budget: u64, room: usize, whole: bool) -> Compacted {
    match f
        .planner()
        .plan_compaction(s, budget, room, None, whole, &mut Memo::default())
    {
        Ok(c) => c,
        Err(e) => panic!("compaction failed: {e}"),
    }
}

#[test]
fn the_live_runs_of_a_pinned_segment_are_copied_and_read_back_unchanged() {
    let (mut f, kept, last) = pinned();
    assert!(f.st.run_floor.lowest().is_some_and(|i| i <= last));
    let c = compact(&mut f, seg(last, 1 << 20));
    assert_eq!((c.runs, c.segment_done, c.more), (1, true, false));
    assert!(c.bytes > 0);
    let copy = f.commit().expect("the copy is an entry");
    assert_eq!(keep_index(&f), vec![copy]);
    assert_eq!(
        f.st.run_floor.lowest(),
        Some(copy),
        "nothing pins the old segment"
    );
    // The old entries are not needed any more: a pop reads the copy.
    for i in 1..=last {
        f.log.entries.remove(&i);
    }
    f.cache = crate::cache::EntryCache::new(1 << 20);
    let got = f.pop("keep", None, 10, None);
    assert_eq!(ids(&got), kept, "ids and transaction ids unchanged");
    let offsets: Vec<u64> = got.messages.iter().map(|m| m.offset).collect();
    assert_eq!(offsets, vec![0, 1]);
    assert!(got.messages.iter().all(|m| !m.payload.is_empty()));
    let c = compact(&mut f, seg(last, 1 << 20));
    assert_eq!((c.runs, c.segment_done), (0, true), "nothing left to copy");
}

#[test]
fn a_segment_more_than_a_quarter_live_or_a_budget_too_small_copies_nothing() {
    let (mut f, _, last) = pinned();
    let live = compact(&mut pinned().0, seg(last, 1 << 20)).bytes;
    let c = compact(&mut f, seg(last, 4 * live - 1));
    assert_eq!(
        (c.runs, c.bytes, c.segment_done),
        (0, 0, false),
        "more than a quarter is live"
    );
    assert!(c.too_live.is_some());
    let c = match f.planner().plan_compaction(
        seg(last, 4 * live),
        live - 1,
        usize::MAX,
        None,
        false,
        &mut Memo::default(),
    ) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(
        (c.runs, c.more),
        (0, true),
        "the budget holds less than the run"
    );
    assert!(f.cycle.entry.is_empty());
    let c = compact(&mut f, seg(last, 4 * live));
    assert_eq!(c.runs, 1, "exactly a quarter is copied");
}

#[test]
fn a_copy_racing_a_pop_an_ack_and_a_lease_changes_nothing_they_see() {
    let (mut f, kept, last) = pinned();
    // Group a's lease, taken before the copy, is acked after it.
    let first = f.pop("keep", Some("a"), 1, Some(60));
    assert_eq!(ids(&first), kept[..1].to_vec());
    f.commit();
    compact(&mut f, seg(last, 1 << 20));
    // Group b's pop, planned in the copy's own cycle, reads the frames of the entry being built.
    let second = f.pop("keep", Some("b"), 10, Some(60));
    assert_eq!(ids(&second), kept);
    f.commit();
    let acked = f.ack(&first, AckStatus::Completed);
    assert!(acked.iter().all(|a| a.success), "{acked:?}");
    f.commit();
    assert_eq!(ids(&f.pop("keep", Some("a"), 10, None)), kept[1..].to_vec());
    // Group b's lease expires; its messages come back from the copy, unchanged.
    f.advance(61 * SECOND);
    assert_eq!(ids(&f.pop("keep", Some("b"), 10, None)), kept);
    f.assert_replays();
}

#[test]
fn a_restart_between_the_copy_and_the_deletion_replays_the_copy_alone() {
    let (mut f, kept, last) = pinned();
    // The checkpoint before the copy, then the copy entry; the process dies before a later
    // checkpoint lets the old segment go.
    let checkpoint = encode_state(&f.st);
    compact(&mut f, seg(last, 1 << 20));
    let copy = f.commit().expect("copy entry");
    let mut st = match decode_state(&checkpoint) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    assert!(st.run_floor.lowest().is_some_and(|i| i <= last), "pinned");
    if let Err(e) = apply_entry(&mut st, copy, 1, &f.log.entries[&copy]) {
        panic!("{e}");
    }
    assert_eq!(
        st.run_floor.lowest(),
        Some(copy),
        "the replayed copy alone moves the floor"
    );
    // Even with the old segment gone, the restarted node serves every message.
    for i in 1..=last {
        f.log.entries.remove(&i);
    }
    f.st = st;
    f.cache = crate::cache::EntryCache::new(1 << 20);
    f.cycle = crate::cycle::Cycle::next(&f.st, f.clock);
    assert_eq!(ids(&f.pop("keep", None, 10, None)), kept);
    // A checkpoint holding the copied runs reads back the same.
    let back = match decode_state(&encode_state(&f.st)) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(back.run_floor.lowest(), f.st.run_floor.lowest());
}

#[test]
fn a_copied_run_ahead_of_later_runs_keeps_the_floor_at_the_lowest_run() {
    let (mut f, _, last) = pinned();
    // A later push lands between the old segment and the copy.
    f.push("keep", "p", 1);
    let later = f.commit().expect("push");
    compact(&mut f, seg(last, 1 << 20));
    let copy = f.commit().expect("copy");
    assert_eq!(keep_index(&f), vec![copy, later], "runs out of log order");
    assert_eq!(f.st.run_floor.lowest(), Some(later));
    f.assert_replays();
    // Retention of the whole partition, then forgetting, drop what the runs name.
    let gone = f.st.forget_runs_below(later + 1);
    assert_eq!(
        gone[0].count(),
        3,
        "everything up to the last lost run goes"
    );
    assert_eq!(f.st.run_floor.lowest(), None);
}

#[test]
fn a_segment_judged_too_live_is_not_read_again_while_it_holds_the_same_runs() {
    // Review C2: every look read every live run of the floor segment from disk, after every
    // checkpoint, for as long as the segment stayed just over a quarter live.
    let (mut f, _, last) = pinned();
    let live = compact(&mut pinned().0, seg(last, 1 << 20)).bytes;
    let s = seg(last, 4 * live - 1);
    let judged = compact(&mut f, s).too_live;
    assert!(judged.is_some());
    // Any read would now fail: the second look must not read.
    f.log.failing = true;
    f.cache = crate::cache::EntryCache::new(1 << 20);
    let c = match f.planner().plan_compaction(
        s,
        u64::MAX,
        usize::MAX,
        judged,
        false,
        &mut Memo::default(),
    ) {
        Ok(c) => c,
        Err(e) => panic!("the second look read the log: {e}"),
    };
    assert_eq!((c.runs, c.too_live), (0, judged));
    // Another segment (the floor moved) is read again.
    let other = Segment { first: 0, ..s };
    assert!(f
        .planner()
        .plan_compaction(
            other,
            u64::MAX,
            usize::MAX,
            judged,
            false,
            &mut Memo::default()
        )
        .is_err());
}

#[test]
fn the_bounds_count_the_copy_headers_not_the_frames_alone() {
    // Review C6: a segment whose frames are exactly a quarter, but frames plus RunCopy
    // headers are over it, is not copied; what a copy reports is what the entry grew by.
    let (mut f, _, last) = pinned();
    let before = f.cycle.entry.len();
    let c = compact(&mut f, seg(last, 1 << 20));
    assert_eq!(c.runs, 1);
    assert_eq!(c.bytes, (f.cycle.entry.len() - before) as u64);
    let frames = c.bytes - 25;
    let (mut g, _, last) = pinned();
    let c = compact(&mut g, seg(last, 4 * frames));
    assert_eq!(c.runs, 0);
    assert!(c.too_live.is_some());
}

#[test]
fn a_dense_floor_segment_is_copied_when_the_dead_segments_after_it_go_with_it() {
    // Review C3: the quarter rule compared the live bytes with the floor segment alone, so a
    // floor segment more than a quarter live kept every later segment, even wholly dead ones.
    let (mut f, _, last) = pinned();
    let live = compact(&mut pinned().0, seg(last, 1 << 20)).bytes;
    let keep = keep_index(&f)[0];
    f.push("later", "p", 1);
    let later = f.commit().expect("push");
    // The floor segment holds the kept run and is half live; the next one holds only the
    // dead "hot" entries; the later run is in the segment appends go to.
    let floor = Segment {
        first: 1,
        last: keep,
        bytes: 2 * live,
    };
    f.log.sealed = vec![(1, keep, 2 * live), (keep + 1, last, 2 * live)];
    let c = compact(&mut f, floor);
    assert_eq!((c.runs, c.segment_done), (1, true), "{c:?}");
    assert_eq!(c.too_live, None);

    // The same floor segment, but a live run in the next one: only the floor segment would
    // go, and it is half live.
    let (mut g, _, last) = pinned();
    g.push("later", "p", 1);
    let later_g = g.commit().expect("push");
    assert_eq!(later_g, later);
    g.log.sealed = vec![(1, keep, 2 * live), (keep + 1, later, 2 * live)];
    let c = compact(&mut g, floor);
    assert_eq!(c.runs, 0);
    let judged = c.too_live.expect("too live");
    assert_eq!((judged.next, judged.frees), (Some(later), 2 * live));
    assert!(last < later);
}

#[test]
fn a_segment_known_too_live_is_not_walked_until_a_run_leaves() {
    // Review M3: every look walked every run of every partition, also for a segment already
    // known to be too live.
    let (mut f, _, last) = pinned();
    let live = compact(&mut pinned().0, seg(last, 1 << 20)).bytes;
    let s = seg(last, 4 * live - 1);
    let judged = compact(&mut f, s).too_live.expect("too live");
    assert_eq!(judged.drops, f.st.run_floor.drops());
    // Take the kept run out behind the floor's back (no real change does): a walk would see
    // one run fewer and read the log, which now fails. The look trusts the epoch instead.
    let keep = pid_of(&f, "keep");
    let taken =
        f.st.partitions
            .get_mut(&keep)
            .map(|p| std::mem::take(&mut p.runs))
            .expect("keep");
    f.log.failing = true;
    f.cache = crate::cache::EntryCache::new(1 << 20);
    let c = match f.planner().plan_compaction(
        s,
        u64::MAX,
        usize::MAX,
        Some(judged),
        false,
        &mut Memo::default(),
    ) {
        Ok(c) => c,
        Err(e) => panic!("the look walked and read: {e}"),
    };
    assert_eq!(c.too_live, Some(judged));
    // Once a run left (the epoch moved), the look walks again.
    let older = crate::plan::TooLive {
        drops: judged.drops.wrapping_sub(1),
        ..judged
    };
    if let Some(p) = f.st.partitions.get_mut(&keep) {
        p.runs = taken;
    }
    let c = f.planner().plan_compaction(
        s,
        u64::MAX,
        usize::MAX,
        Some(older),
        false,
        &mut Memo::default(),
    );
    // The same runs as judged: the walk finds them and still reads nothing (review C2).
    assert_eq!(
        c.map(|c| c.too_live.map(|t| t.held)).ok(),
        Some(Some(judged.held))
    );
    // A real drop moves the epoch.
    let before = f.st.run_floor.drops();
    let hot = pid_of(&f, "hot");
    f.push("hot", "p", 1);
    f.commit();
    if let Some(p) = f.st.partitions.get_mut(&hot) {
        f.st.run_floor.drop_front(p, 1);
    }
    assert_ne!(f.st.run_floor.drops(), before);
}

#[test]
fn a_copy_into_the_reserve_empties_its_segment_or_copies_nothing() {
    // Review H1: a copy borrowing the reserve frees nothing unless the segment goes with it.
    let (mut f, _, _) = pinned();
    f.push("small", "p", 1);
    let last = f.commit().expect("push");
    let s = seg(last, 1 << 20);
    let all = compact(&mut pinned_with_small().0, s).bytes as usize;
    let base = f.cycle.entry.len();
    let c = match f.planner().plan_compaction(
        s,
        u64::MAX,
        base + all - 1,
        None,
        true,
        &mut Memo::default(),
    ) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    assert_eq!((c.runs, c.short_of_room), (0, true), "{c:?}");
    assert!(f.cycle.entry.len() == base, "nothing copied");
    let c =
        match f
            .planner()
            .plan_compaction(s, u64::MAX, base + all, None, true, &mut Memo::default())
        {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
    assert_eq!((c.runs, c.segment_done), (2, true), "{c:?}");
    f.commit();
    f.assert_replays();
}

fn pinned_with_small() -> (Fixture, u64) {
    let (mut f, _, _) = pinned();
    f.push("small", "p", 1);
    let last = f.commit().expect("push");
    (f, last)
}

fn pid_of(f: &Fixture, queue: &str) -> u64 {
    let q = f.st.queue_named(queue).expect("queue");
    q.partitions.get("p", &f.st.partitions).expect("p")
}

#[test]
fn a_run_without_room_is_skipped_and_the_smaller_ones_after_it_are_copied() {
    // Review H2: the first run that did not fit ended the look, so one large run held back
    // every run after it for as long as the cycles left it no room.
    let (mut f, _, _) = pinned();
    f.push("small", "p", 1);
    let last = f.commit().expect("push");
    let big = keep_index(&f);
    let s = seg(last, 1 << 20);
    let base = f.cycle.entry.len();
    // The least room in which anything is copied: the small run's, not the large one's.
    let mut copied = None;
    for room in 0..4096 {
        let c = match f.planner().plan_compaction(
            s,
            u64::MAX,
            base + room,
            None,
            false,
            &mut Memo::default(),
        ) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        if c.runs > 0 {
            copied = Some(c);
            break;
        }
    }
    let c = copied.expect("a copy within 4 KiB of room");
    assert_eq!(c.runs, 1);
    assert!(c.more && c.short_of_room && !c.segment_done, "{c:?}");
    let copy = f.commit().expect("copy");
    let small = pid_of(&f, "small");
    let moved =
        f.st.partitions
            .get(&small)
            .and_then(|p| p.runs.first().map(|r| r.index));
    assert_eq!(moved, Some(copy), "the small run moved");
    assert_eq!(keep_index(&f), big, "the large run waits for room");
    // With room, the next look takes it, and the segment is done.
    let c = compact(&mut f, s);
    assert_eq!((c.runs, c.segment_done, c.short_of_room), (1, true, false));
    f.assert_replays();
}

#[test]
fn a_copy_that_does_not_hold_exactly_its_runs_frames_is_refused() {
    // Review L2: apply re-pointed the run whatever the copy held, and the old bytes went.
    let (mut f, _, last) = pinned();
    let pid = pid_of(&f, "keep");
    let before = (keep_index(&f), f.st.run_floor.lowest());
    // A frame is its u32 length and that many bytes; the kept run is 2 frames.
    let frame = [1u8, 0, 0, 0, 7];
    let at = crate::state::Loc {
        index: last + 1,
        pos: 0,
    };
    for n in [0usize, 1, 3] {
        let frames = frame.repeat(n);
        f.st.copy_run(pid, 0, 2, &frames, at);
        assert_eq!(
            (keep_index(&f), f.st.run_floor.lowest()),
            before,
            "{n} frames"
        );
    }
    f.st.copy_run(pid, 0, 2, &[&frame[..], &frame[..], &[0]].concat(), at);
    assert_eq!(keep_index(&f), before.0, "trailing bytes");
    f.st.copy_run(pid, 0, 2, &frame.repeat(2), at);
    assert_eq!(
        keep_index(&f),
        vec![last + 1],
        "exactly 2 frames are applied"
    );
}

/// The checkpoint of `f` after `change` to partition "keep"'s runs, decoded.
fn decode_changed(f: &Fixture, change: impl FnOnce(&mut Vec<crate::state::model::Run>)) -> String {
    let pid = pid_of(f, "keep");
    let mut st = match decode_state(&encode_state(&f.st)) {
        Ok(s) => s,
        Err(e) => panic!("the unchanged checkpoint: {e}"),
    };
    if let Some(p) = st.partitions.get_mut(&pid) {
        let mut runs = p.runs.to_vec();
        change(&mut runs);
        p.runs = runs.into();
    }
    match decode_state(&encode_state(&st)) {
        Ok(_) => "accepted".into(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_checkpoint_decoder_refuses_runs_the_floor_cannot_trust() {
    // Review L3.
    let (mut f, _, _) = pinned();
    f.push("keep", "p", 1);
    f.commit();
    let applied = f.st.applied.expect("applied").0;
    assert_eq!(decode_changed(&f, |_| {}), "accepted");
    let e = decode_changed(&f, |runs| runs[0].index = applied + 1);
    assert!(e.contains("above the applied"), "{e}");
    let e = decode_changed(&f, |runs| {
        runs[1].index = crate::state::model::PENDING_INDEX
    });
    assert!(e.contains("no committed entry"), "{e}");
    let e = decode_changed(&f, |runs| runs[1].base_offset = runs[0].base_offset);
    assert!(e.contains("after one at"), "{e}");
    let e = decode_changed(&f, |runs| runs.swap(0, 1));
    assert!(e.contains("after one at"), "{e}");
}

#[test]
fn a_look_asks_the_log_once_per_dead_segment_once_and_judges_the_same() {
    // Review s16 M1: every look (each retry and the "known too live" shortcut too) asked the
    // log once per dead sealed segment after the floor segment, a redb read each on the Raft
    // log, under the state lock.
    use std::sync::atomic::Ordering;
    let (mut f, _, last) = pinned();
    let live = compact(&mut pinned().0, seg(last, 1 << 20)).bytes;
    let keep = keep_index(&f)[0];
    // The floor segment is half live; 100 dead one-byte segments follow, the last index a
    // run would name being far past them (nothing is past the segment: `next` is None).
    let floor = Segment {
        first: 1,
        last: keep,
        bytes: 2 * live,
    };
    let mut sealed = vec![(1, keep, 2 * live), (keep + 1, last, 1)];
    sealed.extend((1..100).map(|i| (last + i, last + i, 1)));
    f.log.sealed = sealed.clone();
    let asked = |f: &Fixture| f.log.sealed_asked.swap(0, Ordering::SeqCst);
    let mut dead = Memo::default();
    let look = |f: &mut Fixture, known, dead: &mut Memo| match f.planner().plan_compaction(
        floor,
        u64::MAX,
        usize::MAX,
        known,
        false,
        dead,
    ) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    let first = look(&mut f, None, &mut dead);
    let judged = first.too_live.expect("too live");
    assert_eq!(judged.frees, 2 * live + 100);
    assert!(asked(&f) <= 102, "one pass");
    // The shortcut, and a look that walks (a retry): the same judgement, one question each.
    assert_eq!(look(&mut f, Some(judged), &mut dead).too_live, Some(judged));
    assert!(asked(&f) <= 1);
    let older = crate::plan::TooLive {
        drops: judged.drops.wrapping_sub(1),
        ..judged
    };
    assert_eq!(look(&mut f, Some(older), &mut dead).too_live, Some(judged));
    assert!(asked(&f) <= 1);
    assert_eq!(look(&mut f, None, &mut dead), first, "behaviour unchanged");
    assert!(asked(&f) <= 1);
    // A roll seals one more dead segment: counted, as a fresh look counts it.
    f.log.sealed.push((last + 100, last + 100, 1));
    let grown = look(&mut f, None, &mut dead);
    assert_eq!(grown.too_live.map(|t| t.frees), Some(2 * live + 101));
    assert!(asked(&f) <= 2);
    assert_eq!(look(&mut f, None, &mut Memo::default()), grown);
}

#[test]
fn a_whole_copy_over_the_budget_is_not_short_of_room() {
    // Review s16 M0: a copy into the reserve that needed more than the interval's budget was
    // called short of room, so it was retried and given a cycle alone without a chance.
    let (mut f, last) = pinned_with_small();
    let s = seg(last, 1 << 20);
    let all = compact(&mut pinned_with_small().0, s).bytes;
    let base = f.cycle.entry.len();
    let c =
        match f
            .planner()
            .plan_compaction(s, all - 1, usize::MAX, None, true, &mut Memo::default())
        {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
    assert_eq!(
        (c.runs, c.more, c.over_budget, c.short_of_room),
        (0, true, true, false),
        "{c:?}"
    );
    assert_eq!(f.cycle.entry.len(), base, "nothing copied");
}

/// `n` entries, each holding one live message of queue "keep" (no retention), then nothing
/// else: the segment over them (`seg(n, 1 << 20)`) is far less than a quarter live. Its
/// reads counted from zero.
fn one_run_per_entry(n: usize) -> Fixture {
    let mut f = Fixture::new();
    for _ in 0..n {
        f.push("keep", "p", 1);
        f.commit();
    }
    f.log.reads.store(0, std::sync::atomic::Ordering::SeqCst);
    f
}

fn reads(f: &Fixture) -> usize {
    f.log.reads.swap(0, std::sync::atomic::Ordering::SeqCst)
}

/// What one run of `one_run_per_entry` writes when copied.
fn one_copy() -> usize {
    let mut f = one_run_per_entry(1);
    compact(&mut f, seg(1, 1 << 20)).bytes as usize
}

#[test]
fn a_look_at_a_segment_judged_copyable_reads_only_what_it_takes() {
    // Review s17 compactor M2: each look that copied part of a segment was due again next
    // cycle and re-read every remaining live entry to add the runs up again.
    const N: usize = 32;
    let one = one_copy();
    let mut f = one_run_per_entry(N);
    let s = seg(N as u64, 1 << 20);
    let mut memo = Memo::default();
    let look = |f: &mut Fixture, memo: &mut Memo| {
        let room = f.cycle.entry.len() + one + one / 2;
        match f
            .planner()
            .plan_compaction(s, u64::MAX, room, None, false, memo)
        {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    };
    let first = look(&mut f, &mut memo);
    assert_eq!(
        (first.runs, first.more, first.short_of_room),
        (1, true, true)
    );
    assert_eq!(
        reads(&f),
        N,
        "the first look reads the segment whole to judge it"
    );
    f.commit();
    let second = look(&mut f, &mut memo);
    assert_eq!(
        (second.runs, second.more, second.short_of_room),
        (1, true, true)
    );
    assert!(
        reads(&f) <= 2,
        "the second look reads what it copies, and one more"
    );
    f.commit();
    // A new interval judges it again, whole.
    memo.new_interval();
    assert_eq!(look(&mut f, &mut memo).runs, 1);
    assert_eq!(reads(&f), N - 2);
    f.commit();
    // With room for all, the rest is copied and the segment is done.
    let c = match f
        .planner()
        .plan_compaction(s, u64::MAX, usize::MAX, None, false, &mut memo)
    {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    assert_eq!((c.runs, c.segment_done), (N - 3, true), "{c:?}");
    f.assert_replays();
}

#[test]
fn a_whole_copy_stops_reading_once_it_cannot_fit() {
    // Review s17 compactor M1: a copy into the reserve that fitted the budget but not the
    // loan read every live entry of its segment before it gave up.
    const N: usize = 32;
    let one = one_copy();
    let mut f = one_run_per_entry(N);
    let s = seg(N as u64, 1 << 20);
    let base = f.cycle.entry.len();
    let c = look_once(&mut f, s, u64::MAX, base + one + one / 2, true);
    assert_eq!(
        (c.runs, c.short_of_room, c.over_budget),
        (0, true, false),
        "{c:?}"
    );
    assert!(reads(&f) <= 2, "read up to the run that does not fit");
    // Over the budget: settled as early.
    let c = look_once(&mut f, s, one as u64, usize::MAX, true);
    assert_eq!(
        (c.runs, c.short_of_room, c.over_budget),
        (0, false, true),
        "{c:?}"
    );
    assert!(reads(&f) <= 2);
    assert_eq!(f.cycle.entry.len(), base, "nothing copied");
}

#[test]
fn runs_too_large_for_the_room_are_read_once_per_interval() {
    // Review s18 compactor M2: in the copyable mode every look read the large runs at the
    // front of the segment again (they never fit the cycle's room) before it took anything.
    const LARGE: usize = 4;
    const N: usize = 16;
    let one = one_copy();
    let mut f = Fixture::new();
    for _ in 0..LARGE {
        f.push("keep", "p", 8);
        f.commit();
    }
    for _ in 0..N {
        f.push("keep", "p", 1);
        f.commit();
    }
    reads(&f);
    let s = seg((LARGE + N) as u64, 1 << 20);
    let mut memo = Memo::default();
    let look = |f: &mut Fixture, memo: &mut Memo| {
        let room = f.cycle.entry.len() + one + one / 2;
        match f
            .planner()
            .plan_compaction(s, u64::MAX, room, None, false, memo)
        {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    };
    let first = look(&mut f, &mut memo);
    assert_eq!(
        (first.runs, first.more, first.short_of_room),
        (1, true, true)
    );
    assert_eq!(reads(&f), LARGE + N, "the first look judges the segment");
    for _ in 0..3 {
        f.commit();
        let next = look(&mut f, &mut memo);
        assert_eq!(
            (next.runs, next.more, next.short_of_room),
            (1, true, true),
            "{next:?}"
        );
        assert!(
            reads(&f) <= 2,
            "the large runs are not read again: the small one taken, and one more"
        );
    }
    f.commit();
    // With room for all, the large runs are read and copied, and the segment is done.
    let c = match f
        .planner()
        .plan_compaction(s, u64::MAX, usize::MAX, None, false, &mut memo)
    {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    assert_eq!((c.runs, c.segment_done), (LARGE + N - 4, true), "{c:?}");
    f.assert_replays();
}
