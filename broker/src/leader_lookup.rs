//! The door's question "who leads this tenant's group?" (native-api `forward`), answered from
//! the group's Raft status at the moment of the request.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
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
    /// Where the tenants' hosted records are (`hosted::read`): an outsider's relay goes to
    /// one of the tenant's declared voters.
    data_dir: PathBuf,
    /// Each tenant's declared voters as read once (a record never changes: the first
    /// committed declaration wins, `hosted::Recorded`), so a request does not read a file.
    declared: Mutex<BTreeMap<String, Arc<[u64]>>>,
}

/// The tenants whose declared voters are kept in memory at once; past it the cache starts
/// over (a read is a small bounded file, only on an outsider's requests).
const MAX_DECLARED_CACHED: usize = 4_096;

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
                    Some(d) => self.peer_in(tenant, &d),
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
    pub(crate) fn new(groups: Arc<Registry>, member: Member, data_dir: PathBuf) -> GroupLeaders {
        GroupLeaders {
            groups,
            member,
            data_dir,
            declared: Mutex::new(BTreeMap::new()),
        }
    }

    fn leader_in(&self, group: &crate::group::registry::Group) -> Leader {
        match group.live.get() {
            Ok(live) => self
                .member
                .leader(&live.log.status(), |id| live.node.http_of(id)),
            Err(_) => Leader::Here,
        }
    }

    /// Where a request for `tenant`, whose group runs here as an outsider, goes: one of the
    /// tenant's declared voters still in `default` (`d`), which is a member of the tenant's
    /// group (`relay_peer`). Never a node outside the group too (review s33 t M1): a relayed
    /// request refused there named `default`'s leader as the tenant's.
    fn peer_in(&self, tenant: &str, d: &crate::group::registry::Group) -> Leader {
        let Ok(live) = d.live.get() else {
            return Leader::Unknown;
        };
        let Some(declared) = self.declared_voters(tenant) else {
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
        let default_leader = match self.leader_in(d) {
            Leader::Other { id, .. } => Some(id),
            _ => None,
        };
        relay_peer(
            tenant,
            self.member.node_id,
            default_leader,
            &declared,
            &members,
        )
    }

    /// `tenant`'s declared voters, from the cache or its hosted record. None: no record
    /// readable here (not cached, so a later request reads it again).
    fn declared_voters(&self, tenant: &str) -> Option<Arc<[u64]>> {
        if let Some(v) = self.declared.lock().ok()?.get(tenant) {
            return Some(v.clone());
        }
        let voters: Arc<[u64]> = match crate::group::hosted::read(&self.data_dir, tenant) {
            Ok(Some(v)) => v.into(),
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(
                    tenant,
                    "an outsider's relay could not read the tenant's declared voters: {e:#}"
                );
                return None;
            }
        };
        let mut cache = self.declared.lock().ok()?;
        if cache.len() >= MAX_DECLARED_CACHED {
            cache.clear();
        }
        cache.insert(tenant.to_string(), voters.clone());
        Some(voters)
    }
}

/// Where a request for a group open here as an outsider goes. Never `Here`: the outsider
/// group has no leader and an empty membership, so a change judged here answers "already"
/// for a group it never changed, and a data request is refused with no leader named (review
/// s32 t2 H1, and the rest of review s31 M5). Instead one of the tenant's `declared` voters
/// that is still a member of `default` (`members`: id, HTTP address, voter; a node removed
/// from `default` is removed from the tenant's groups by the same carry) and
/// is not this node: `default`'s leader when it is one of them (it leads the tenant's group
/// too unless leadership moved, as before), else the tenant's founder (`hosted::preferred`
/// over the declared voters, the node that led the group first), else the preferred of
/// those left. Never a pick over `default`'s voters (review s33 t M1): a node added to
/// `default` later may be an outsider in the tenant's group too, which refused the relayed
/// request naming this node as the leader. The declared voter leads the tenant's group and answers, or names its leader in its 503
/// (the request goes with the relay header, so it is never relayed a second time). Only a
/// plain `http://` address is chosen (nothing else is relayed); none: `Unknown`, a 503 the
/// client retries, and `behind` in a membership carry.
fn relay_peer(
    tenant: &str,
    me: u64,
    default_leader: Option<u64>,
    declared: &[u64],
    members: &[(u64, Option<String>, bool)],
) -> Leader {
    let reachable = |url: &Option<String>| url.as_deref().is_some_and(|u| u.starts_with("http://"));
    let ids: Vec<u64> = members
        .iter()
        .filter(|(id, url, _)| *id != me && declared.contains(id) && reachable(url))
        .map(|(id, _, _)| *id)
        .collect();
    let leading = default_leader.filter(|l| ids.contains(l));
    let founder = crate::group::hosted::preferred(tenant, declared).filter(|f| ids.contains(f));
    let Some(id) = leading
        .or(founder)
        .or_else(|| crate::group::hosted::preferred(tenant, &ids))
    else {
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
/// request goes to one of the tenant's declared voters (`relay_peer`); a member that knows
/// no leader is in an election, and that stays `Unknown`.
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
    data_dir: PathBuf,
    max_inflight: usize,
) -> ForwardOptions {
    let waits = crate::engine::BusWaits::default();
    ForwardOptions {
        node_id: member.node_id,
        leaders: Arc::new(GroupLeaders::new(groups, member, data_dir)),
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
    // (the `GroupLeaders` wiring is tested in leader_lookup_tests.rs)
    use queenmq_native_api::Leader;

    fn m(id: u64, url: Option<&str>, voter: bool) -> (u64, Option<String>, bool) {
        (id, url.map(str::to_string), voter)
    }

    fn at(id: u64) -> Leader {
        Leader::Other {
            id,
            url: Some(format!("http://h:{id}")),
        }
    }

    #[test]
    fn an_outsider_relays_to_the_tenants_founder_never_here() {
        let members = [
            m(1, Some("http://h:1"), true),
            m(2, Some("http://h:2"), true),
            m(3, Some("http://h:3"), true),
            m(4, Some("http://h:4"), true),
        ];
        // Node 4 is outside; the tenants were declared over {1, 2, 3}: the founder (the
        // same pick on every request and every node), never itself.
        for tenant in ["tenant-a", "tenant-b", "acme", "orders"] {
            let want = crate::group::hosted::preferred(tenant, &[1, 2, 3]).unwrap();
            assert_eq!(
                relay_peer(tenant, 4, None, &[1, 2, 3], &members),
                at(want),
                "{tenant}"
            );
        }
        // The founder gone from `default` (removed): the preferred of the declared left.
        let founder = crate::group::hosted::preferred("acme", &[1, 2, 3]).unwrap();
        let left: Vec<_> = members.iter().filter(|x| x.0 != founder).cloned().collect();
        let rest: Vec<u64> = [1, 2, 3].into_iter().filter(|i| *i != founder).collect();
        let want = crate::group::hosted::preferred("acme", &rest).unwrap();
        assert_eq!(relay_peer("acme", 4, None, &[1, 2, 3], &left), at(want));
        // No declared voter reachable over http:// (or only this node): Unknown (503,
        // retried), not Here.
        let alone = [
            m(4, Some("http://h:4"), true),
            m(1, Some("https://h:1"), true),
            m(2, None, true),
            m(5, Some("http://h:5"), true),
        ];
        assert_eq!(
            relay_peer("tenant-a", 4, None, &[1, 2, 4], &alone),
            Leader::Unknown
        );
        assert_eq!(
            relay_peer("tenant-a", 4, None, &[4], &members),
            Leader::Unknown
        );
        assert_eq!(
            relay_peer("tenant-a", 4, None, &[1, 2, 3], &[]),
            Leader::Unknown
        );
        assert_eq!(
            relay_peer("tenant-a", 4, None, &[], &members),
            Leader::Unknown
        );
    }

    /// Review s33 t M1: nodes 4 and 5 were added to `default` together and are both outside
    /// `acme` (declared over {1, 2, 3}); 4 leads `default`. `default`'s choice over
    /// {1, 2, 3, 5} is 5, the other outsider, which refused the relayed request naming
    /// node 4 as the leader: the client went round. The relay goes to the founder, 3.
    #[test]
    fn a_second_outsider_is_never_the_relay() {
        let members = [
            m(1, Some("http://h:1"), true),
            m(2, Some("http://h:2"), true),
            m(3, Some("http://h:3"), true),
            m(4, Some("http://h:4"), true),
            m(5, Some("http://h:5"), true),
        ];
        assert_eq!(
            crate::group::hosted::preferred("acme", &[1, 2, 3, 5]),
            Some(5)
        );
        assert_eq!(crate::group::hosted::preferred("acme", &[1, 2, 3]), Some(3));
        assert_eq!(relay_peer("acme", 4, None, &[1, 2, 3], &members), at(3));
        // And from 5, where 4 leads `default`: never 4 (outside too), never itself.
        assert_eq!(relay_peer("acme", 5, Some(4), &[1, 2, 3], &members), at(3));
        // `default`'s leader when it is a declared voter (it leads the tenant's group
        // unless leadership moved): from 4, with 1 leading `default`.
        assert_eq!(relay_peer("acme", 4, Some(1), &[1, 2, 3], &members), at(1));
        // A declared voter that is a learner of `default` is still chosen: it is a member of
        // `default`, so not removed, and the tenant's group is its own.
        let learner = [
            m(3, Some("http://h:3"), false),
            m(4, Some("http://h:4"), true),
        ];
        assert_eq!(relay_peer("acme", 4, None, &[1, 2, 3], &learner), at(3));
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
