//! A membership operation carried to one group (docs/cluster.md "Membership with tenant
//! groups"): what of it is left to do against the group's own membership, so a rerun of a
//! route cut halfway (a crash, a lost leader, a refusal in one group) finishes the groups it
//! did not reach and changes nothing in those it did.

use queenmq_native_api::cluster_admin::MembershipOp;
use queenmq_raft::{MembershipView, LIVE_LAG};

/// What is left of `op` on a group whose membership is `view`: None when it is done there
/// already. Only what is certainly done is dropped; anything else is left in, so the
/// group's own checks refuse it in the operator's terms (an id at another address is a
/// duplicate, an unknown id is not found).
pub fn remaining(view: &MembershipView, op: MembershipOp) -> Option<MembershipOp> {
    let member = |id: u64| view.members.iter().find(|m| m.id == id);
    match op {
        // All three addresses: a re-add naming another HTTP or Kafka address is not done
        // (the group would keep relaying to the old one), so the plan refuses it as a
        // duplicate instead of `already` (review s31 member L4).
        MembershipOp::AddLearner {
            id,
            ref cluster_addr,
            ref http,
            ref kafka,
        } if member(id).is_some_and(|m| {
            &m.cluster_addr == cluster_addr
                && m.http.as_deref() == Some(http.as_str())
                && m.kafka == *kafka
        }) =>
        {
            None
        }
        MembershipOp::Promote(ids) => {
            let left: Vec<u64> = ids
                .into_iter()
                .filter(|id| !member(*id).is_some_and(|m| m.voter))
                .collect();
            (!left.is_empty()).then_some(MembershipOp::Promote(left))
        }
        MembershipOp::Remove(id) if member(id).is_none() => None,
        other => Some(other),
    }
}

/// Why the learners `ids` must not be made voters of this group yet: one the leader has not
/// replicated to within `LIVE_LAG` of its last log index (`last`). A learner is added to a
/// tenant's group when it is added to `default`, but it may take longer to catch up there
/// (its node has to apply the tenant's declaration and open the group first); a voter that
/// holds nothing of the group would count towards the majority without a copy.
pub fn not_caught_up(view: &MembershipView, ids: &[u64], last: u64) -> Option<String> {
    let behind: Vec<String> = ids
        .iter()
        .filter_map(|id| {
            let m = view.members.iter().find(|m| m.id == *id && !m.voter)?;
            match m.matched {
                Some(i) if i.saturating_add(LIVE_LAG) >= last => None,
                Some(i) => Some(format!("{id} (at {i} of {last})")),
                None => Some(format!("{id} (nothing replicated yet)")),
            }
        })
        .collect();
    (!behind.is_empty()).then(|| {
        format!(
            "learner {} has not caught up with this group's leader yet; rerun the route once \
             it has (GET /api/v1/cluster?group=<name> on the leader shows `matched`)",
            behind.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use queenmq_raft::MemberView;

    fn m(id: u64, voter: bool, matched: Option<u64>) -> MemberView {
        MemberView {
            id,
            voter,
            cluster_addr: format!("h:{id}"),
            http: Some("http://h:1".into()),
            kafka: None,
            matched,
        }
    }

    fn view() -> MembershipView {
        MembershipView {
            members: vec![
                m(1, true, Some(100)),
                m(2, true, None),
                m(4, false, Some(90)),
            ],
            in_progress: false,
        }
    }

    fn add(id: u64, addr: &str) -> MembershipOp {
        MembershipOp::AddLearner {
            id,
            cluster_addr: addr.into(),
            http: "http://h:1".into(),
            kafka: None,
        }
    }

    #[test]
    fn what_is_done_is_not_done_again() {
        let v = view();
        assert_eq!(remaining(&v, add(4, "h:4")), None);
        assert_eq!(remaining(&v, add(5, "h:5")), Some(add(5, "h:5")));
        // The same id at another address is left to the group's duplicate refusal.
        assert_eq!(remaining(&v, add(4, "h:9")), Some(add(4, "h:9")));
        // So is the same id with another HTTP or Kafka address (review s31 member L4).
        let other_http = MembershipOp::AddLearner {
            id: 4,
            cluster_addr: "h:4".into(),
            http: "http://h:2".into(),
            kafka: None,
        };
        assert_eq!(remaining(&v, other_http.clone()), Some(other_http));
        let other_kafka = MembershipOp::AddLearner {
            id: 4,
            cluster_addr: "h:4".into(),
            http: "http://h:1".into(),
            kafka: Some("h:9092".into()),
        };
        assert_eq!(remaining(&v, other_kafka.clone()), Some(other_kafka));
        assert_eq!(remaining(&v, MembershipOp::Promote(vec![1, 2])), None);
        assert_eq!(
            remaining(&v, MembershipOp::Promote(vec![1, 4])),
            Some(MembershipOp::Promote(vec![4]))
        );
        // An unknown id stays, so the group answers it not found.
        assert_eq!(
            remaining(&v, MembershipOp::Promote(vec![9])),
            Some(MembershipOp::Promote(vec![9]))
        );
        assert_eq!(remaining(&v, MembershipOp::Remove(3)), None);
        assert_eq!(
            remaining(&v, MembershipOp::Remove(2)),
            Some(MembershipOp::Remove(2))
        );
        assert_eq!(
            remaining(&v, MembershipOp::Remove(u64::MAX)),
            None,
            "a huge id is no member"
        );
    }

    #[test]
    fn a_learner_far_behind_or_never_reached_is_not_promoted() {
        let v = view();
        assert_eq!(not_caught_up(&v, &[4], 100), None);
        assert_eq!(not_caught_up(&v, &[4], 90 + LIVE_LAG), None);
        let far = not_caught_up(&v, &[4], 91 + LIVE_LAG).unwrap_or_default();
        assert!(far.contains("learner 4 (at 90"), "{far}");
        let never = MembershipView {
            members: vec![m(1, true, Some(5)), m(4, false, None)],
            in_progress: false,
        };
        let e = not_caught_up(&never, &[4], 5).unwrap_or_default();
        assert!(e.contains("nothing replicated"), "{e}");
        // Voters and unknown ids are the plan's to judge; a huge index does not overflow.
        assert_eq!(not_caught_up(&v, &[1, 9], u64::MAX), None);
        assert!(not_caught_up(&v, &[4], u64::MAX).is_some());
    }
}
