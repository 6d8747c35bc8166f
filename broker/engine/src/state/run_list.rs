//! A partition's runs, with the one run an idle partition mostly holds kept inside the row.
//!
//! A `Vec<Run>` cost every partition holding a message a 32 B heap block beside its row (the
//! `Arc` of a 96 B row in mimalloc's 112 B bin + 32 B = 144 B); one run inline makes the row
//! 112 B, its `Arc` exactly the 128 B bin and no block: 128 B (issue 12). A partition with
//! no run or with two or more pays 16 B more than before (the row's bin), the vector as
//! before. Read as a slice, so every reader sees the runs as it saw the `Vec`'s.

use super::model::Run;

#[derive(Clone)]
pub enum RunList {
    /// No run, or two and more (or fewer in a vector given room ahead).
    Many(Vec<Run>),
    One(Run),
}

impl Default for RunList {
    fn default() -> Self {
        RunList::Many(Vec::new())
    }
}

impl RunList {
    pub fn as_slice(&self) -> &[Run] {
        match self {
            RunList::Many(v) => v,
            RunList::One(r) => std::slice::from_ref(r),
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [Run] {
        match self {
            RunList::Many(v) => v,
            RunList::One(r) => std::slice::from_mut(r),
        }
    }

    pub fn push(&mut self, run: Run) {
        match self {
            // A vector given room for runs ahead (`From<Vec<Run>>`) keeps it.
            RunList::Many(v) if v.capacity() == 0 => *self = RunList::One(run),
            RunList::Many(v) => v.push(run),
            RunList::One(first) => {
                // What a `Vec` reserved exactly for one run grew to at its second push.
                let mut v = Vec::with_capacity(4);
                v.push(*first);
                v.push(run);
                *self = RunList::Many(v);
            }
        }
    }

    /// Removes the first `n` runs (all of them when `n` is past the end); a single run left
    /// goes back inside the row, and the vector is freed when one or none is left.
    /// Freed, not kept for a next push: a partition trimmed to one run and then idle would
    /// hold it for good (retention shrinks only below a quarter full), so one that goes
    /// 1 -> 2 -> 1 runs allocates and frees a vector each time (review s33 p L4).
    pub fn drop_front(&mut self, n: usize) {
        match self {
            RunList::One(_) if n > 0 => *self = RunList::default(),
            RunList::One(_) => {}
            RunList::Many(v) => {
                v.drain(..n.min(v.len()));
                match v.as_slice() {
                    [] => *self = RunList::default(),
                    [only] => *self = RunList::One(*only),
                    _ => {}
                }
            }
        }
    }

    /// Runs the heap holds room for (0 for the inline run): what memory counting charges.
    pub fn heap_capacity(&self) -> usize {
        match self {
            RunList::Many(v) => v.capacity(),
            RunList::One(_) => 0,
        }
    }

    /// Gives back the vector's room past `min` runs; nothing for the inline run.
    pub fn shrink_to(&mut self, min: usize) {
        if let RunList::Many(v) = self {
            v.shrink_to(min);
        }
    }
}

impl std::ops::Deref for RunList {
    type Target = [Run];
    fn deref(&self) -> &[Run] {
        self.as_slice()
    }
}

impl std::ops::DerefMut for RunList {
    fn deref_mut(&mut self) -> &mut [Run] {
        self.as_mut_slice()
    }
}

impl<'a> IntoIterator for &'a RunList {
    type Item = &'a Run;
    type IntoIter = std::slice::Iter<'a, Run>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl From<Vec<Run>> for RunList {
    fn from(v: Vec<Run>) -> Self {
        match v.as_slice() {
            [only] => RunList::One(*only),
            _ => RunList::Many(v),
        }
    }
}

impl FromIterator<Run> for RunList {
    fn from_iter<I: IntoIterator<Item = Run>>(iter: I) -> Self {
        iter.into_iter().collect::<Vec<Run>>().into()
    }
}

/// Equal when the runs are, however they are held.
impl PartialEq for RunList {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for RunList {}

/// As a `Vec`'s, so the canonical dump replicas compare reads as before.
impl std::fmt::Debug for RunList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!((l.len(), l.heap_capacity()), (1, 0));
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
            assert_eq!(l.as_slice(), v.as_slice(), "step {step}");
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
                    p.runs.heap_capacity(),
                    matches!(p.runs, RunList::One(_)),
                )
            })
        };
        assert_eq!(held(&st), Some((0, 0, false)));
        append(&mut st, 0, 2);
        assert_eq!(held(&st), Some((1, 0, true)));
        append(&mut st, 1, 3);
        assert_eq!(held(&st), Some((2, 4, false)));
        st.trim_partition(7, 1);
        assert_eq!(held(&st), Some((1, 0, true)));
        assert_eq!(
            st.partitions.get(&7).map(|p| p.runs[0].base_offset),
            Some(1)
        );
    }

    #[test]
    fn a_run_changed_through_the_slice_stays_changed() {
        let mut l: RunList = vec![run(0)].into();
        if let Some(r) = l.get_mut(0) {
            r.index = 99;
        }
        assert_eq!(l[0].index, 99);
        l.push(run(1));
        assert_eq!(
            (l[0].index, l[1].base_offset, l.heap_capacity()),
            (99, 1, 4)
        );
        l.drop_front(1);
        assert!(matches!(l, RunList::One(r) if r.base_offset == 1));
    }
}
