//! The door's question "who leads this tenant's group?" (native-api `forward`), answered from
//! the group's Raft status at the moment of the request.

use std::sync::Arc;
use std::time::Duration;

use queenmq_native_api::{ForwardOptions, Leader, LeaderLookup};
use queenmq_protocol::DEFAULT_TENANT;

use crate::cluster_member::Member;
use crate::group::Registry;

/// How long the relay waits for a connection to the leader: a lost SYN is resent after 1 s,
/// so one resend fits.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Beyond the leader's own bound on an answer (its bus's queue wait and answer bound), for
/// the way there and back.
const MARGIN: Duration = Duration::from_secs(5);

pub struct GroupLeaders {
    groups: Arc<Registry>,
    member: Member,
}

impl std::fmt::Debug for GroupLeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupLeaders")
            .field("node_id", &self.member.node_id)
            .finish_non_exhaustive()
    }
}

impl LeaderLookup for GroupLeaders {
    fn leader_of(&self, tenant: &str) -> Leader {
        // With `cluster_tenant_groups` off only the default tenant's group is clustered; the
        // others are refused 501 here.
        if tenant != DEFAULT_TENANT && !self.member.tenant_groups {
            return Leader::Here;
        }
        let group = match self.groups.get(tenant) {
            Some(g) if tenant != DEFAULT_TENANT && outside(&g, self.member.node_id) => {
                return match self.groups.get(DEFAULT_TENANT) {
                    Some(d) => match self.leader_in(&d) {
                        Leader::Here => self.peer_in(tenant, &d),
                        other => other,
                    },
                    None => Leader::Unknown,
                };
            }
            Some(g) => g,
            // A tenant whose group does not run here yet: its declaration (or the wait for
            // it) is the `default` group's, so the request goes to that group's leader.
            None if tenant != DEFAULT_TENANT => match self.groups.get(DEFAULT_TENANT) {
                Some(g) => g,
                None => return Leader::Here,
            },
            // A group not running or being rebuilt: the bus answers why, as before.
            None => return Leader::Here,
        };
        self.leader_in(&group)
    }
}

impl GroupLeaders {
    fn leader_in(&self, group: &crate::group::registry::Group) -> Leader {
        match group.live.get() {
            Ok(live) => self
                .member
                .leader(&live.log.status(), |id| live.node.http_of(id)),
            Err(_) => Leader::Here,
        }
    }

    /// Where a request for `tenant`, whose group runs here as an outsider, goes when this
    /// node leads `default` (`d`): another voter of `default`, which is a member of the
    /// tenant's group or knows its leader (`relay_peer`).
    fn peer_in(&self, tenant: &str, d: &crate::group::registry::Group) -> Leader {
        let Ok(live) = d.live.get() else {
            return Leader::Unknown;
        };
        let members: Vec<(u64, Option<String>, bool)> = live
            .node
            .members_now()
            .into_iter()
            .map(|(id, _, voter)| {
                let url = live
                    .node
                    .http_of(id)
                    .or_else(|| self.member.peer_http().get(&id).cloned());
                (id, url, voter)
            })
            .collect();
        relay_peer(tenant, self.member.node_id, &members)
    }
}

/// Where a request for a group open here as an outsider goes when this node leads `default`
/// (it was promoted there while still outside the tenant's group, then elected). Never
/// `Here`: the outsider group has no leader and an empty membership, so a change judged here
/// answers "already" for a group it never changed, and a data request is refused with no
/// leader named (review s32 t2 H1, and the rest of review s31 M5). Instead another voter of
/// `default` (`members`: id, HTTP address, voter), the tenant's preferred founder among them
/// (`hosted::preferred`, the node that led the group unless leadership moved): it leads the
/// tenant's group and answers, or names that group's leader in its 503 (the request goes
/// with the relay header, so it is never relayed a second time, and the relay is bounded as
/// every relay is). Only voters with a plain `http://` address are chosen (nothing else is
/// relayed); none: `Unknown`, a 503 the client retries, and `behind` in a membership carry.
fn relay_peer(tenant: &str, me: u64, members: &[(u64, Option<String>, bool)]) -> Leader {
    let reachable = |url: &Option<String>| url.as_deref().is_some_and(|u| u.starts_with("http://"));
    let ids: Vec<u64> = members
        .iter()
        .filter(|(id, url, voter)| *voter && *id != me && reachable(url))
        .map(|(id, _, _)| *id)
        .collect();
    let Some(id) = crate::group::hosted::preferred(tenant, &ids) else {
        return Leader::Unknown;
    };
    let url = members
        .iter()
        .find(|(i, _, _)| *i == id)
        .and_then(|(_, u, _)| u.clone());
    Leader::Other { id, url }
}

/// Whether `group` runs here as an outsider: no leader known, and a membership that does
/// not hold this node (a node added later opens a tenant's group before that group's leader
/// has added it, review s31 member M5). It knows nothing of the group's leader, so the
/// request goes to `default`'s leader as it did while no such group ran here; a member that
/// knows no leader is in an election, and that stays `Unknown`.
pub(crate) fn outside(group: &crate::group::registry::Group, me: u64) -> bool {
    let Ok(live) = group.live.get() else {
        return false;
    };
    let s = live.log.status();
    // Every tenant request asks: the membership is copied only when no leader is known.
    if s.role == "leader" || s.leader.is_some() {
        return false;
    }
    outsider(s.role, s.leader, &live.node.members_now(), me)
}

/// `outside`'s rule on a group's role, known leader and members (`members_now`).
fn outsider(role: &str, leader: Option<u64>, members: &[(u64, String, bool)], me: u64) -> bool {
    role != "leader" && leader.is_none() && !members.iter().any(|(id, _, _)| *id == me)
}

/// The relays a follower may hold open to the leader at once: `configured`, but at most its
/// share of the leader's connection cap (taken as this node's own, `connections`: the members
/// run one configuration), split among the `members` so the followers together leave the
/// leader as many connections for its own clients as each of them takes (review s19 forward
/// M1: 1 024 relays from each follower against a leader that accepts 147 stalled its door,
/// and the followers answered "may or may not be done" for requests it never read).
pub fn relay_cap(configured: usize, connections: usize, members: usize) -> usize {
    configured.min(connections / members.max(1)).max(1)
}

/// The door's relay settings of a cluster member.
pub fn forward_options(
    groups: Arc<Registry>,
    member: Member,
    max_inflight: usize,
) -> ForwardOptions {
    let waits = crate::engine::BusWaits::default();
    ForwardOptions {
        node_id: member.node_id,
        leaders: Arc::new(GroupLeaders { groups, member }),
        max_inflight,
        connect_timeout: CONNECT_TIMEOUT,
        answer_margin: waits
            .enqueue
            .saturating_add(waits.answer)
            .saturating_add(MARGIN),
    }
}

#[cfg(test)]
mod tests {
    use super::{outsider, relay_cap, relay_peer};
    use queenmq_native_api::Leader;

    #[test]
    fn an_outsider_leading_default_relays_to_another_voter_never_here() {
        let m = |id: u64, url: Option<&str>, voter: bool| (id, url.map(str::to_string), voter);
        let members = [
            m(1, Some("http://h:1"), true),
            m(2, Some("http://h:2"), true),
            m(4, Some("http://h:4"), true),
            m(5, Some("http://h:5"), false),
        ];
        // Node 4 leads `default`: never itself, never a learner, the tenant's preferred of
        // the others (the same pick on every request and every node).
        for tenant in ["tenant-a", "tenant-b", "acme"] {
            let want = crate::group::hosted::preferred(tenant, &[1, 2]).unwrap();
            let got = relay_peer(tenant, 4, &members);
            assert_eq!(
                got,
                Leader::Other {
                    id: want,
                    url: Some(format!("http://h:{want}"))
                },
                "{tenant}"
            );
        }
        // No other voter reachable over http://: Unknown (503, retried), not Here.
        let alone = [
            m(4, Some("http://h:4"), true),
            m(1, Some("https://h:1"), true),
            m(2, None, true),
            m(5, Some("http://h:5"), false),
        ];
        assert_eq!(relay_peer("tenant-a", 4, &alone), Leader::Unknown);
        assert_eq!(relay_peer("tenant-a", 4, &[]), Leader::Unknown);
    }

    #[test]
    fn a_group_that_has_not_added_this_node_is_not_running_here() {
        let m = |ids: &[u64]| -> Vec<(u64, String, bool)> {
            ids.iter().map(|i| (*i, format!("h:{i}"), true)).collect()
        };
        // Uninitialised (no membership at all) or a membership without this node.
        assert!(outsider("learner", None, &[], 4));
        assert!(outsider("follower", None, &m(&[1, 2, 3]), 4));
        // A member in an election: Unknown as before, not relayed.
        assert!(!outsider("candidate", None, &m(&[1, 2, 4]), 4));
        assert!(!outsider("learner", None, &m(&[1, 2, 4]), 4));
        // A leader known, or this node leading: answered by the group's own rule.
        assert!(!outsider("follower", Some(1), &m(&[1, 2, 3]), 4));
        assert!(!outsider("leader", None, &[], 4));
    }

    #[test]
    fn the_followers_relays_leave_the_leader_a_members_share_of_its_connections() {
        // Three members on a 64 MiB budget (147 connections): 49 relays from each follower.
        assert_eq!(relay_cap(1_024, 147, 3), 49);
        assert!(2 * relay_cap(1_024, 147, 3) <= 147 - relay_cap(1_024, 147, 3));
        // A lower configured value stands; never zero.
        assert_eq!(relay_cap(16, 147, 3), 16);
        assert_eq!(relay_cap(1_024, 2, 5), 1);
        assert_eq!(relay_cap(1_024, 10_000, 0), 1_024);
    }
}
