//! The address a tenant group's start gives a declared voter this node knows no address of
//! (docs/cluster.md "Membership with tenant groups").
//!
//! A voter of a tenant's declaration may since have been removed from the cluster (a wiped
//! node replaced under a new id): `default`'s membership no longer names it, and a node added
//! later has it in no `peers` either. That node's group must still open, or it never hosts
//! the tenant and cannot be made its voter; a restarted original member's neither. The
//! voter keeps its id (the founder's choice, `hosted::preferred`, and a founded membership
//! stay the same on every node) with an address that can never be dialled: a name under the
//! reserved `.invalid` top-level domain (RFC 6761), which the Raft network refuses
//! without a lookup (`queenmq_raft::undiallable`). A group
//! founded with it has that voter unreachable, as a dead node is; the membership routes
//! remove it like any member.

use queenmq_raft::MembershipView;

/// The address a tenant group's start gives declared voter `id`: its address in `default`'s
/// membership `known` (read here, None when `default` is not live here), else its `peer`
/// address, else the undiallable one, but only when `known` was read and does not hold it
/// (it was removed). With `default` not live here the address is merely unknown now: a live
/// node added at run time must not be founded undiallable, so None, refused as before the
/// start went this way, and the next request retries (review s31 member M4).
pub fn address_of(id: u64, known: Option<&MembershipView>, peer: Option<String>) -> Option<String> {
    let known = match known {
        Some(m) => m,
        None => return peer,
    };
    if let Some(v) = known.members.iter().find(|v| v.id == id) {
        return Some(queenmq_raft::member_addr::compose(
            &v.cluster_addr,
            v.http.as_deref(),
            v.kafka.as_deref(),
        ));
    }
    peer.or_else(|| {
        tracing::warn!(voter = id, "a declared voter of a tenant's group is in neither the default group's membership nor peers (removed since): it is given an address that is never dialled (docs/cluster.md \"Membership with tenant groups\")");
        Some(unknown(id))
    })
}

/// The undiallable address of voter `id`.
pub fn unknown(id: u64) -> String {
    queenmq_raft::undiallable::address(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(ids: &[u64]) -> MembershipView {
        MembershipView {
            members: ids
                .iter()
                .map(|id| queenmq_raft::MemberView {
                    id: *id,
                    voter: true,
                    cluster_addr: format!("h:{id}"),
                    http: Some(format!("http://h:{id}0")),
                    kafka: None,
                    matched: None,
                })
                .collect(),
            in_progress: false,
        }
    }

    #[test]
    fn only_a_voter_default_no_longer_holds_is_undiallable() {
        let v = view(&[1, 5]);
        // Added at run time: its address is the membership's, with its HTTP part.
        let a5 = address_of(5, Some(&v), None).unwrap();
        assert!(a5.starts_with("h:5"), "{a5}");
        assert_ne!(a5, unknown(5));
        assert_eq!(address_of(3, Some(&v), None), Some(unknown(3)));
        assert_eq!(
            address_of(3, Some(&v), Some("p:3".into())).as_deref(),
            Some("p:3")
        );
        // `default` not live here: a voter added at run time is unknown only now, so no
        // address (the start is refused and retried), never the undiallable one.
        assert_eq!(address_of(5, None, None), None);
        assert_eq!(
            address_of(1, None, Some("p:1".into())).as_deref(),
            Some("p:1")
        );
    }

    #[test]
    fn an_unknown_voter_is_a_host_port_the_network_refuses() {
        let a = unknown(u64::MAX);
        let (host, port) = a.rsplit_once(':').unwrap();
        assert!(host.ends_with(".invalid"), "{a}");
        assert_eq!(port, "1");
        // The network refuses it before any lookup (tested in the raft crate's tcp_client).
        assert!(queenmq_raft::undiallable::is_undiallable(&unknown(3)));
    }
}
