//! The run list against a `Vec<Run>` holding the same runs: inline, vector, blocks (sealed
//! and the tail), through pushes, partial and whole drops, changes and clones.

use super::*;

fn run(base_offset: u64) -> Run {
    Run {
        base_offset,
        count: 1,
        created_us: base_offset as i64,
        index: base_offset + 10,
        pos: 3,
    }
}

#[test]
fn one_run_is_inline_and_the_list_is_40_bytes() {
    assert_eq!(std::mem::size_of::<RunList>(), 40);
    let mut l = RunList::default();
    l.push(run(0));
    assert!(matches!(l, RunList::One(_)));
    assert_eq!((l.len(), l.heap_bytes()), (1, 0));
    assert_eq!(format!("{l:?}"), format!("{:?}", vec![run(0)]));
}

#[test]
fn pushes_and_drops_read_as_a_vec_would() {
    let mut l = RunList::default();
    let mut v: Vec<Run> = Vec::new();
    // Every push and drop of the first runs, checked against a Vec step by step.
    for step in 0..200u64 {
        if step % 7 == 3 || step % 11 == 5 {
            let n = (step % 4) as usize;
            l.drop_front(n);
            v.drain(..n.min(v.len()));
        } else {
            l.push(run(step));
            v.push(run(step));
        }
        assert_eq!(l.to_vec(), v, "step {step}");
        assert_eq!(l.len() == 1, matches!(l, RunList::One(_)), "step {step}");
    }
    l.drop_front(usize::MAX);
    assert!(l.is_empty());
    l.drop_front(usize::MAX);
    assert!(l.is_empty());
}

/// Review s33 p L3: the apply path, not just the list, puts a partition's first run
/// inside its row (main reserved a one-run vector there: heap capacity 1), and a trim
/// back to one run frees the vector the second run took.
#[test]
fn a_partitions_first_appended_run_lands_inline_through_apply() {
    use crate::entry::Effect;
    use crate::state::{Loc, State};
    let mut st = State::default();
    st.seed_queue(
        1,
        "q",
        Default::default(),
        &[(7, "p")],
        Loc { index: 1, pos: 0 },
    );
    let append = |st: &mut State, base: u64, index: u64| {
        let e = Effect::Append {
            pid: 7,
            base_offset: base,
            hashes: vec![base],
            frames: &[],
        };
        st.apply(&e, index as i64, Loc { index, pos: 0 });
    };
    let held = |st: &State| {
        st.partitions.get(&7).map(|p| {
            (
                p.runs.len(),
                p.runs.heap_bytes(),
                matches!(p.runs, RunList::One(_)),
            )
        })
    };
    assert_eq!(held(&st), Some((0, 0, false)));
    append(&mut st, 0, 2);
    assert_eq!(held(&st), Some((1, 0, true)));
    append(&mut st, 1, 3);
    assert_eq!(held(&st), Some((2, 4 * 32, false)));
    st.trim_partition(7, 1);
    assert_eq!(held(&st), Some((1, 0, true)));
    assert_eq!(
        st.partitions
            .get(&7)
            .and_then(|p| p.runs.first())
            .map(|r| r.base_offset),
        Some(1)
    );
}

struct Rng(u64);

impl Rng {
    fn next(&mut self, m: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % m
    }
}

/// A run after `base`: ordered by offset (what callers search by), and otherwise any value
/// now and then: i64 min/max times, index 0 and PENDING, u32 max pos and count, a gap.
fn any_run(rng: &mut Rng, base: u64) -> Run {
    let mut r = Run {
        count: 1 + rng.next(3) as u32,
        ..run(base)
    };
    match rng.next(40) {
        0 => r.created_us = i64::MIN,
        1 => r.created_us = i64::MAX,
        2 => r.index = u64::MAX,
        3 => r.index = 0,
        4 => r.pos = u32::MAX,
        5 => r.count = u32::MAX,
        6 => r.base_offset += 1 << 40,
        7 => r.pos = rng.next(1 << 32) as u32,
        _ => {}
    }
    r
}

/// Every read of a list against a `Vec` holding the same runs, through pushes, drops of any
/// size (inside sealed blocks too), changes to any run (sealed ones re-encode) and clones,
/// crossing blocks (4 runs a block under test) both ways many times. Offsets start 2^50
/// below u64::MAX, so each delta is taken near the wrap.
#[test]
fn blocks_read_as_a_vec_would_through_random_pushes_and_drops() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut l = RunList::default();
    let mut v: Vec<Run> = Vec::new();
    let mut base = u64::MAX - (1 << 50);
    let (mut blocks_seen, mut sealed_seen, mut clones) = (0, 0, 0);
    for step in 0..20_000 {
        match rng.next(12) {
            0 => {
                let n = rng.next(BLOCK as u64 * 3) as usize;
                l.drop_front(n);
                v.drain(..n.min(v.len()));
            }
            1 if rng.next(50) == 0 => {
                l.drop_front(usize::MAX);
                v.clear();
            }
            2 if !v.is_empty() => {
                let i = rng.next(v.len() as u64) as usize;
                let (index, pos) = (rng.next(u64::MAX), rng.next(1 << 32) as u32);
                assert!(l.set_loc(i, index, pos), "step {step}");
                v[i].index = index;
                v[i].pos = pos;
            }
            3 => {
                // A checkpoint's copy: equal, as roomy in its tail, and independent.
                let mut c = l.clone();
                clones += 1;
                assert_eq!(c, l, "step {step}");
                assert!(c.heap_bytes() <= l.heap_bytes(), "step {step}");
                c.push(run(base));
                c.drop_front(1);
                if let RunList::Blocks(b) = &c {
                    assert_eq!(b.tail.capacity(), BLOCK, "step {step}");
                }
                assert_eq!(l.to_vec(), v, "step {step}");
            }
            _ => {
                let r = any_run(&mut rng, base);
                base = r.base_offset + u64::from(r.count);
                l.push(r);
                v.push(r);
            }
        }
        if let RunList::Blocks(b) = &l {
            blocks_seen += 1;
            sealed_seen += usize::from(!b.sealed.is_empty());
            assert_eq!(b.tail.capacity(), BLOCK, "step {step}");
        }
        assert_eq!(l.len(), v.len(), "step {step}");
        assert_eq!(l.to_vec(), v, "step {step}");
        assert!(l.iter().rev().eq(v.iter().copied().rev()), "step {step}");
        assert_eq!(l.iter().len(), v.len(), "step {step}");
        let start = rng.next(v.len() as u64 + 2) as usize;
        assert!(
            l.iter_from(start).eq(v.iter().skip(start).copied()),
            "step {step}"
        );
        assert_eq!(l.iter_from(start).len(), v.len().saturating_sub(start));
        // Both ends at once, in a random order of steps.
        let (mut it, mut lo, mut hi) = (l.iter(), 0, v.len());
        while lo < hi {
            if rng.next(2) == 0 {
                assert_eq!(it.next(), v.get(lo).copied(), "step {step}");
                lo += 1;
            } else {
                hi -= 1;
                assert_eq!(it.next_back(), v.get(hi).copied(), "step {step}");
            }
            assert_eq!(it.len(), hi - lo);
        }
        assert_eq!((it.next(), it.next_back()), (None, None));
        let i = rng.next(v.len() as u64 + 1) as usize;
        assert_eq!(l.get(i), v.get(i).copied(), "step {step}");
        let first = v.first().map_or(0, |r| r.base_offset);
        let at = first.saturating_sub(3) + rng.next(base - first + 6);
        assert_eq!(
            l.partition_point(|r| r.base_offset < at),
            v.partition_point(|r| r.base_offset < at),
            "step {step}"
        );
        assert_eq!(
            (l.first(), l.last()),
            (v.first().copied(), v.last().copied())
        );
        assert_eq!(l.len() == 1, matches!(l, RunList::One(_)), "step {step}");
        // Held: at most 40 B a run sealed (five full-width varints) and a block's handle,
        // the tail's room, and handles' room up to 4 blocks' worth and 8.
        let blocks = v.len() / BLOCK + 2;
        let most = v.len() * 40
            + BLOCK * 32
            + std::mem::size_of::<Blocks>()
            + (4 * blocks + 8) * std::mem::size_of::<Sealed>();
        assert!(
            l.heap_bytes() <= most,
            "step {step}: {} for {}",
            l.heap_bytes(),
            v.len()
        );
    }
    assert!(blocks_seen > 1000, "the walk reached blocks: {blocks_seen}");
    assert!(sealed_seen > 1000, "the walk sealed blocks: {sealed_seen}");
    assert!(clones > 1000, "{clones}");
}

/// A long list pays room for its tail and exact bytes for each sealed block; a drop to
/// half a block goes back to a vector.
#[test]
fn a_long_list_holds_sealed_bytes_and_one_tail_of_room() {
    let mut l = RunList::default();
    for i in 0..(BLOCK as u64 * 50 + 1) {
        l.push(run(i));
    }
    let RunList::Blocks(b) = &l else {
        panic!("not in blocks");
    };
    assert_eq!((b.sealed.len(), b.tail.len()), (50, 1));
    // `run(i)` after `run(i - 1)`: five one-byte varints.
    assert!(b.sealed.iter().all(|s| s.heap_bytes() == (BLOCK - 1) * 5));
    let fixed = std::mem::size_of::<Blocks>() + 50 * (BLOCK - 1) * 5 + BLOCK * 32;
    let handles = l.heap_bytes() - fixed;
    assert_eq!(handles % std::mem::size_of::<Sealed>(), 0);
    let room = handles / std::mem::size_of::<Sealed>();
    assert!((50..=128).contains(&room), "{room}");
    let runs = l.len();
    l.drop_front(runs - BLOCK / 2);
    assert!(matches!(l, RunList::Many(_)));
    assert_eq!(
        l.first().map(|r| r.base_offset),
        Some(runs as u64 - BLOCK as u64 / 2)
    );
}

/// Review s34 r H1: a clone (a checkpoint's copy of a shared partition) holds what its
/// original does, and a push to it never grows the tail past `BLOCK`.
#[test]
fn a_cloned_list_keeps_its_blocks_room_and_pushes_within_it() {
    let mut l = RunList::default();
    for i in 0..(BLOCK as u64 * 3 + 1) {
        l.push(run(i));
    }
    let mut c = l.clone();
    // As much but the handles' spare room, which a clone does not copy.
    let spare = match &l {
        RunList::Blocks(b) => {
            (b.sealed.capacity() - b.sealed.len()) * std::mem::size_of::<Sealed>()
        }
        _ => 0,
    };
    assert_eq!(c.heap_bytes(), l.heap_bytes() - spare);
    for i in 0..(BLOCK as u64 * 3) {
        c.push(run(BLOCK as u64 * 3 + 1 + i));
        if let RunList::Blocks(b) = &c {
            assert_eq!(b.tail.capacity(), BLOCK, "push {i}");
        }
    }
    assert_eq!(l.len(), BLOCK * 3 + 1);
}

/// The one change a held run takes, in every form: inline, vector, the tail and a sealed
/// block (decoded and sealed again, its neighbours unchanged), also after a partial drop.
#[test]
fn a_runs_new_location_stays_wherever_the_run_is_held() {
    let mut l: RunList = vec![run(0)].into();
    assert!(l.set_loc(0, 99, 7));
    assert!(!l.set_loc(1, 99, 7));
    assert_eq!(l.get(0).map(|r| (r.index, r.pos)), Some((99, 7)));
    l.push(run(1));
    assert!(l.set_loc(1, 98, 6));
    assert_eq!(l.get(1).map(|r| (r.index, r.pos)), Some((98, 6)));
    l.drop_front(1);
    assert!(matches!(l, RunList::One(r) if r.base_offset == 1 && r.index == 98));

    let mut l = RunList::default();
    let mut v = Vec::new();
    for i in 0..(BLOCK as u64 * 4 + 2) {
        l.push(run(i));
        v.push(run(i));
    }
    l.drop_front(1);
    v.remove(0);
    for i in [0, 1, BLOCK, 2 * BLOCK + 1, v.len() - 1] {
        assert!(l.set_loc(i, u64::MAX, u32::MAX));
        v[i].index = u64::MAX;
        v[i].pos = u32::MAX;
        assert_eq!(l.to_vec(), v, "run {i}");
    }
    assert!(!l.set_loc(v.len(), 1, 1));
    assert_eq!(l.to_vec(), v);
}
