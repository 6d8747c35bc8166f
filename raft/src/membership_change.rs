//! The membership operations an operator asks for (add a learner, promote learners, remove a
//! member), checked against the effective membership before openraft is asked, so each
//! refusal says what is wrong in the operator's terms; and the membership as a caller reads
//! it (docs/cluster.md "Membership operations").

use std::collections::{BTreeMap, BTreeSet};

use openraft::{BasicNode, ChangeMembers};

use crate::error::{ChangeRefusal, RaftError};
use crate::member_addr;
use crate::types::Membership;

/// One membership operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A new member that receives the log but does not vote: `cluster_addr` is its Raft
    /// listener (`host:port`), `http` its HTTP door (`http://host:port`), `kafka` its Kafka
    /// port's advertised address (`host:port`) when it serves Kafka clients.
    AddLearner {
        id: u64,
        cluster_addr: String,
        http: String,
        kafka: Option<String>,
    },
    /// Learners made voters (one joint-consensus change).
    Promote(BTreeSet<u64>),
    /// A voter or a learner taken out of the membership.
    Remove(u64),
}

/// One member as `RaftNode::membership` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    pub id: u64,
    pub voter: bool,
    pub cluster_addr: String,
    /// Its HTTP address, when it was added with one (members of `peers` carry none).
    pub http: Option<String>,
    /// Its Kafka advertised address, when it was added with one.
    pub kafka: Option<String>,
    /// The last log index the leader knows this member holds; None off the leader, or not
    /// known yet.
    pub matched: Option<u64>,
}

/// The effective membership, and whether a change of it is still being committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipView {
    pub members: Vec<MemberView>,
    pub in_progress: bool,
}

fn refuse(kind: ChangeRefusal, message: String) -> RaftError {
    RaftError::ChangeRefused { kind, message }
}

/// How far behind the leader's last log index a voter may be and still count as caught up
/// and in contact for a change's majority check.
pub const LIVE_LAG: u64 = 1_024;

/// The voters a joint configuration was heading for, when one is left unfinished.
pub(crate) fn unfinished(current: &Membership) -> Option<BTreeSet<u64>> {
    let joint = current.get_joint_config();
    (joint.len() > 1).then(|| joint.last().cloned().unwrap_or_default())
}

/// Refuses a voter change unless a majority of the voters before it, and of the voters after
/// it, are the leader or replicated to within `LIVE_LAG` of its last log index (review s21
/// membership M2: removing a live voter beside a dead one left a joint configuration no
/// majority could commit). A member silent since its last match still counts while the log
/// has not moved past it: without traffic a dead node cannot be told from an idle one.
pub(crate) fn live_majorities(
    current: &Membership,
    planned: &ChangeMembers<u64, BasicNode>,
    leader: u64,
    last_index: u64,
    matched: Option<BTreeMap<u64, Option<u64>>>,
) -> Result<(), RaftError> {
    let before: BTreeSet<u64> = current.voter_ids().collect();
    let after: BTreeSet<u64> = match planned {
        ChangeMembers::AddVoterIds(ids) => before.union(ids).copied().collect(),
        ChangeMembers::RemoveVoters(ids) => before.difference(ids).copied().collect(),
        _ => return Ok(()),
    };
    let live = |id: &u64| {
        *id == leader
            || matched
                .as_ref()
                .and_then(|m| m.get(id).copied().flatten())
                .is_some_and(|i| i.saturating_add(LIVE_LAG) >= last_index)
    };
    for (which, set) in [("before", &before), ("after", &after)] {
        let up = set.iter().filter(|id| live(id)).count();
        if up * 2 <= set.len() {
            return Err(refuse(
                ChangeRefusal::Unsafe,
                format!(
                    "the voters {which} the change ({set:?}) have {up} caught up with the \
                     leader, not a majority: the group could not commit the change; bring the \
                     members back (or let a learner catch up) first"
                ),
            ));
        }
    }
    Ok(())
}

/// The openraft change for `change` on `current`, or why it is refused: an unknown id, a
/// duplicate id or address, the last voter removed, or a membership still in joint
/// consensus. `known_http`: the HTTP addresses of the first boot's members, whose membership
/// entries carry none (this node's `peer_http`); only a current member's entry counts, so a
/// removed node's host can be reused.
pub(crate) fn plan(
    current: &Membership,
    change: &Change,
    known_http: &BTreeMap<u64, String>,
) -> Result<ChangeMembers<u64, BasicNode>, RaftError> {
    if current.get_joint_config().len() > 1 {
        return Err(refuse(
            ChangeRefusal::InProgress,
            "another membership change is in progress; retry once it has committed".into(),
        ));
    }
    let voters: BTreeSet<u64> = current.voter_ids().collect();
    let known = |id: &u64| current.get_node(id).is_some();
    match change {
        Change::AddLearner {
            id,
            cluster_addr,
            http,
            kafka,
        } => {
            if *id == 0 {
                return Err(refuse(
                    ChangeRefusal::BadRequest,
                    "a node id must be above 0".into(),
                ));
            }
            if known(id) {
                return Err(refuse(
                    ChangeRefusal::Duplicate,
                    format!("node {id} is already a member"),
                ));
            }
            // Compared spelling-blind (review s21 membership M10): `localhost` and
            // `127.0.0.1` are one socket, and one process cannot be two members.
            for (other, node) in current.nodes() {
                if member_addr::same_socket(member_addr::cluster_part(&node.addr), cluster_addr) {
                    return Err(refuse(
                        ChangeRefusal::Duplicate,
                        format!("node {other} already has the cluster address {cluster_addr}"),
                    ));
                }
                let theirs = member_addr::http_part(&node.addr)
                    .or_else(|| known_http.get(other).map(String::as_str));
                if theirs.is_some_and(|h| member_addr::same_socket(h, http)) {
                    return Err(refuse(
                        ChangeRefusal::Duplicate,
                        format!("node {other} already has the HTTP address {http}"),
                    ));
                }
                if let Some(k) = kafka.as_deref().filter(|k| {
                    member_addr::kafka_part(&node.addr)
                        .is_some_and(|o| member_addr::same_socket(o, k))
                }) {
                    return Err(refuse(
                        ChangeRefusal::Duplicate,
                        format!("node {other} already has the Kafka address {k}"),
                    ));
                }
            }
            let node = BasicNode::new(member_addr::compose(
                cluster_addr,
                Some(http),
                kafka.as_deref(),
            ));
            Ok(ChangeMembers::AddNodes(BTreeMap::from([(*id, node)])))
        }
        Change::Promote(ids) => {
            if ids.is_empty() {
                return Err(refuse(
                    ChangeRefusal::BadRequest,
                    "name at least one learner to promote".into(),
                ));
            }
            for id in ids {
                if !known(id) {
                    return Err(refuse(
                        ChangeRefusal::UnknownId,
                        format!("node {id} is not a member; add it as a learner first"),
                    ));
                }
                if voters.contains(id) {
                    return Err(refuse(
                        ChangeRefusal::Duplicate,
                        format!("node {id} is already a voter"),
                    ));
                }
            }
            Ok(ChangeMembers::AddVoterIds(ids.clone()))
        }
        Change::Remove(id) => {
            if !known(id) {
                return Err(refuse(
                    ChangeRefusal::UnknownId,
                    format!("node {id} is not a member"),
                ));
            }
            if voters.contains(id) {
                if voters.len() == 1 {
                    return Err(refuse(
                        ChangeRefusal::LastVoter,
                        format!("node {id} is the last voter: the group would have none"),
                    ));
                }
                Ok(ChangeMembers::RemoveVoters(BTreeSet::from([*id])))
            } else {
                Ok(ChangeMembers::RemoveNodes(BTreeSet::from([*id])))
            }
        }
    }
}

/// `current` as a caller reads it, with the leader's `matched` index of each member.
pub(crate) fn view(
    current: &Membership,
    matched: Option<&BTreeMap<u64, Option<u64>>>,
    in_progress: bool,
) -> MembershipView {
    let voters: BTreeSet<u64> = current.voter_ids().collect();
    let members = current
        .nodes()
        .map(|(id, node)| MemberView {
            id: *id,
            voter: voters.contains(id),
            cluster_addr: member_addr::cluster_part(&node.addr).to_string(),
            http: member_addr::http_part(&node.addr).map(str::to_string),
            kafka: member_addr::kafka_part(&node.addr).map(str::to_string),
            matched: matched.and_then(|m| m.get(id).copied().flatten()),
        })
        .collect();
    MembershipView {
        members,
        in_progress: in_progress || (current.get_joint_config().len() > 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn membership(voters: &[u64], learners: &[u64]) -> Membership {
        let nodes: BTreeMap<u64, BasicNode> = voters
            .iter()
            .chain(learners)
            .map(|i| {
                let http = (*i > 3).then(|| format!("http://127.0.0.1:663{i}"));
                let kafka = (*i > 4).then(|| format!("127.0.0.1:909{i}"));
                let addr = member_addr::compose(
                    &format!("127.0.0.1:710{i}"),
                    http.as_deref(),
                    kafka.as_deref(),
                );
                (*i, BasicNode::new(addr))
            })
            .collect();
        Membership::new(vec![voters.iter().copied().collect()], nodes)
    }

    fn plan_(m: &Membership, c: &Change) -> Result<ChangeMembers<u64, BasicNode>, RaftError> {
        plan(m, c, &BTreeMap::new())
    }

    /// Review s21 membership M10: another spelling of a member's address, and the HTTP
    /// address of a first-boot member (from `peer_http`), are duplicates; a removed member's
    /// `peer_http` entry is not.
    #[test]
    fn other_spellings_and_first_boot_http_addresses_are_duplicates() {
        let m = membership(&[1, 2], &[4]);
        let known = BTreeMap::from([
            (1, "http://127.0.0.1:6631".to_string()),
            (3, "http://127.0.0.1:6633".to_string()),
        ]);
        for c in [
            add(5, "localhost:7101", "http://127.0.0.1:6699"),
            add(5, "127.0.0.1.:7199", "http://LOCALHOST:6634"),
            add(5, "127.0.0.1:7199", "http://localhost.:6631"),
        ] {
            assert_eq!(
                kind(plan(&m, &c, &known)),
                ChangeRefusal::Duplicate,
                "{c:?}"
            );
        }
        // Node 3 is no member: its old HTTP address may be reused.
        let reuse = add(5, "127.0.0.1:7103", "http://127.0.0.1:6633");
        assert!(plan(&m, &reuse, &known).is_ok());
    }

    fn kind(r: Result<ChangeMembers<u64, BasicNode>, RaftError>) -> ChangeRefusal {
        match r {
            Err(RaftError::ChangeRefused { kind, .. }) => kind,
            other => panic!("not refused: {other:?}"),
        }
    }

    fn add(id: u64, cluster: &str, http: &str) -> Change {
        Change::AddLearner {
            id,
            cluster_addr: cluster.into(),
            http: http.into(),
            kafka: None,
        }
    }

    #[test]
    fn a_new_learner_is_added_with_both_addresses() {
        let m = membership(&[1, 2], &[]);
        let c = plan_(&m, &add(4, "127.0.0.1:7104", "http://127.0.0.1:6634")).unwrap();
        let ChangeMembers::AddNodes(nodes) = c else {
            panic!("{c:?}")
        };
        assert_eq!(nodes[&4].addr, "127.0.0.1:7104;http://127.0.0.1:6634");
        let with_kafka = Change::AddLearner {
            id: 6,
            cluster_addr: "127.0.0.1:7106".into(),
            http: "http://127.0.0.1:6636".into(),
            kafka: Some("127.0.0.1:9096".into()),
        };
        let ChangeMembers::AddNodes(nodes) = plan(&m, &with_kafka, &BTreeMap::new()).unwrap()
        else {
            panic!("not an add")
        };
        assert_eq!(
            nodes[&6].addr,
            "127.0.0.1:7106;http://127.0.0.1:6636;127.0.0.1:9096"
        );
        let view = view(&membership(&[1, 5], &[]), None, false);
        let five = view.members.iter().find(|m| m.id == 5).unwrap();
        assert_eq!(five.kafka.as_deref(), Some("127.0.0.1:9095"));
        assert_eq!(five.http.as_deref(), Some("http://127.0.0.1:6635"));
    }

    #[test]
    fn a_duplicate_id_or_address_is_refused() {
        let m = membership(&[1, 2], &[4]);
        let dup = [
            add(2, "127.0.0.1:7199", "http://127.0.0.1:6699"),
            add(5, "127.0.0.1:7101", "http://127.0.0.1:6699"),
            add(5, "127.0.0.1:7199", "http://127.0.0.1:6634"),
        ];
        let m5 = membership(&[1, 5], &[]);
        let same_kafka = Change::AddLearner {
            id: 7,
            cluster_addr: "127.0.0.1:7107".into(),
            http: "http://127.0.0.1:6637".into(),
            kafka: Some("127.0.0.1:9095".into()),
        };
        assert_eq!(
            kind(plan(&m5, &same_kafka, &BTreeMap::new())),
            ChangeRefusal::Duplicate
        );
        for c in dup {
            assert_eq!(kind(plan_(&m, &c)), ChangeRefusal::Duplicate, "{c:?}");
        }
        assert_eq!(
            kind(plan_(&m, &add(0, "a:1", "http://a:2"))),
            ChangeRefusal::BadRequest
        );
    }

    #[test]
    fn promoting_or_removing_an_unknown_id_is_refused() {
        let m = membership(&[1, 2], &[4]);
        let promote = |ids: &[u64]| Change::Promote(ids.iter().copied().collect());
        assert_eq!(kind(plan_(&m, &promote(&[9]))), ChangeRefusal::UnknownId);
        assert_eq!(kind(plan_(&m, &promote(&[2]))), ChangeRefusal::Duplicate);
        assert_eq!(kind(plan_(&m, &promote(&[]))), ChangeRefusal::BadRequest);
        assert!(matches!(
            plan_(&m, &promote(&[4])),
            Ok(ChangeMembers::AddVoterIds(_))
        ));
        assert_eq!(
            kind(plan_(&m, &Change::Remove(9))),
            ChangeRefusal::UnknownId
        );
        assert!(matches!(
            plan_(&m, &Change::Remove(4)),
            Ok(ChangeMembers::RemoveNodes(_))
        ));
        assert!(matches!(
            plan_(&m, &Change::Remove(2)),
            Ok(ChangeMembers::RemoveVoters(_))
        ));
    }

    #[test]
    fn the_last_voter_is_not_removed() {
        let m = membership(&[1], &[4]);
        assert_eq!(
            kind(plan_(&m, &Change::Remove(1))),
            ChangeRefusal::LastVoter
        );
    }

    #[test]
    fn a_change_during_joint_consensus_is_refused() {
        let nodes: BTreeMap<u64, BasicNode> = (1..=4)
            .map(|i| (i, BasicNode::new(format!("h:{i}"))))
            .collect();
        let joint = Membership::new(
            vec![BTreeSet::from([1, 2, 3]), BTreeSet::from([1, 2, 4])],
            nodes,
        );
        assert_eq!(
            kind(plan_(&joint, &Change::Remove(3))),
            ChangeRefusal::InProgress
        );
        assert!(view(&joint, None, false).in_progress);
        // The node finishes it to its target before any new change (review s21 M1).
        assert_eq!(unfinished(&joint), Some(BTreeSet::from([1, 2, 4])));
        assert_eq!(unfinished(&membership(&[1, 2, 3], &[])), None);
    }

    /// Review s21 M2: a change whose before or after voters lack a caught-up majority is
    /// refused; with every voter caught up it goes through.
    #[test]
    fn a_change_without_a_live_majority_on_both_sides_is_refused() {
        let m = membership(&[1, 2, 3], &[4]);
        let last = 10_000;
        let caught = |ids: &[(u64, u64)]| {
            Some(
                ids.iter()
                    .map(|(i, at)| (*i, Some(*at)))
                    .collect::<BTreeMap<u64, Option<u64>>>(),
            )
        };
        let remove2 = ChangeMembers::RemoveVoters(BTreeSet::from([2]));
        // Node 3 is far behind (dead): removing node 2 leaves {1, 3} with one live voter.
        let r = live_majorities(&m, &remove2, 1, last, caught(&[(2, last), (3, 10)]));
        assert!(
            matches!(
                r,
                Err(RaftError::ChangeRefused {
                    kind: ChangeRefusal::Unsafe,
                    ..
                })
            ),
            "{r:?}"
        );
        assert!(live_majorities(&m, &remove2, 1, last, caught(&[(2, last), (3, last)])).is_ok());
        // Promoting a learner that has not caught up while a voter is down.
        let promote4 = ChangeMembers::AddVoterIds(BTreeSet::from([4]));
        let r = live_majorities(&m, &promote4, 1, last, caught(&[(2, last), (3, 0), (4, 0)]));
        assert!(r.is_err(), "{r:?}");
        assert!(live_majorities(
            &m,
            &promote4,
            1,
            last,
            caught(&[(2, last), (3, 0), (4, last)])
        )
        .is_ok());
        // Learner changes are not voter changes.
        let learner = ChangeMembers::AddNodes(BTreeMap::new());
        assert!(live_majorities(&m, &learner, 1, last, None).is_ok());
    }

    #[test]
    fn the_view_names_roles_addresses_and_matched_indexes() {
        let m = membership(&[1, 2], &[4]);
        let matched = BTreeMap::from([(1, Some(40)), (2, Some(39)), (4, None)]);
        let v = view(&m, Some(&matched), false);
        assert!(!v.in_progress);
        let four = v.members.iter().find(|m| m.id == 4).unwrap();
        assert!(!four.voter);
        assert_eq!(four.cluster_addr, "127.0.0.1:7104");
        assert_eq!(four.http.as_deref(), Some("http://127.0.0.1:6634"));
        assert_eq!(four.matched, None);
        let one = v.members.iter().find(|m| m.id == 1).unwrap();
        assert!(one.voter && one.matched == Some(40) && one.http.is_none());
    }
}
