//! Derived: queue ids by namespace and by task, so a label pop (a pop by namespace and/or
//! task, without a queue) finds its queues without walking every queue of the node.
//!
//! Kept by `apply` (a queue upsert moves the queue between labels, a delete drops it) and
//! rebuilt when a checkpoint is loaded. Sets are ordered so a label pop visits queues in id
//! order, as the scan it replaces did.

use std::collections::{BTreeSet, HashMap};

#[derive(Default)]
pub struct LabelIndex {
    by_namespace: HashMap<String, BTreeSet<u64>>,
    by_task: HashMap<String, BTreeSet<u64>>,
}

fn remove_from(map: &mut HashMap<String, BTreeSet<u64>>, key: &str, qid: u64) {
    if let Some(set) = map.get_mut(key) {
        set.remove(&qid);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

impl LabelIndex {
    pub fn insert(&mut self, qid: u64, namespace: &str, task: &str) {
        self.by_namespace
            .entry(namespace.to_string())
            .or_default()
            .insert(qid);
        self.by_task
            .entry(task.to_string())
            .or_default()
            .insert(qid);
    }

    pub fn remove(&mut self, qid: u64, namespace: &str, task: &str) {
        remove_from(&mut self.by_namespace, namespace, qid);
        remove_from(&mut self.by_task, task, qid);
    }

    /// Ids of the queues whose labels match, ascending; `None` when neither label is given
    /// (every queue matches: the caller walks its queues).
    pub fn matching(&self, namespace: Option<&str>, task: Option<&str>) -> Option<Vec<u64>> {
        Some(self.iter_matching(namespace, task)?.collect())
    }

    /// [`Self::matching`] without collecting: a tick walks it until the first hit.
    pub fn iter_matching<'a>(
        &'a self,
        namespace: Option<&str>,
        task: Option<&str>,
    ) -> Option<Box<dyn Iterator<Item = u64> + 'a>> {
        let ns = namespace.map(|n| self.by_namespace.get(n));
        let task = task.map(|t| self.by_task.get(t));
        Some(match (ns, task) {
            (None, None) => return None,
            (Some(None), _) | (_, Some(None)) => Box::new(std::iter::empty()),
            (Some(Some(a)), None) | (None, Some(Some(a))) => Box::new(a.iter().copied()),
            // Walk the smaller set, test membership in the other.
            (Some(Some(a)), Some(Some(b))) => {
                let (small, big) = if a.len() <= b.len() { (a, b) } else { (b, a) };
                Box::new(small.iter().copied().filter(move |q| big.contains(q)))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_are_found_by_either_label_or_both_and_move_when_relabelled() {
        let mut idx = LabelIndex::default();
        idx.insert(1, "billing", "invoice");
        idx.insert(2, "billing", "refund");
        idx.insert(3, "", "");
        assert_eq!(idx.matching(Some("billing"), None), Some(vec![1, 2]));
        assert_eq!(idx.matching(None, Some("refund")), Some(vec![2]));
        assert_eq!(
            idx.matching(Some("billing"), Some("invoice")),
            Some(vec![1])
        );
        assert_eq!(idx.matching(Some(""), None), Some(vec![3]));
        assert_eq!(idx.matching(Some("nope"), None), Some(vec![]));
        assert_eq!(idx.matching(None, None), None);
        idx.remove(1, "billing", "invoice");
        idx.insert(1, "ops", "invoice");
        assert_eq!(idx.matching(Some("billing"), None), Some(vec![2]));
        assert_eq!(idx.matching(Some("ops"), Some("invoice")), Some(vec![1]));
        idx.remove(2, "billing", "refund");
        assert!(!idx.by_namespace.contains_key("billing"), "empty sets go");
        assert_eq!(
            idx.by_namespace.values().map(BTreeSet::len).sum::<usize>(),
            2
        );
    }
}
