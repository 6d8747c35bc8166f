//! The address a tenant group's start gives a declared voter this node knows no address of
//! (docs/cluster.md "Membership with tenant groups").
//!
//! A voter of a tenant's declaration may since have been removed from the cluster (a wiped
//! node replaced under a new id): `default`'s membership no longer names it, and a node added
//! later has it in no `peers` either. That node's group must still open, or it never hosts
//! the tenant and cannot be made its voter; a restarted original member's neither. The
//! voter keeps its id (the founder's choice, `hosted::preferred`, and a founded membership
//! stay the same on every node) with an address that can never be dialled: a name under the
//! reserved `.invalid` top-level domain (RFC 6761), which no resolver answers. A group
//! founded with it has that voter unreachable, as a dead node is; the membership routes
//! remove it like any member.

/// The undiallable address of voter `id`.
pub fn unknown(id: u64) -> String {
    format!("removed-voter-{id}.invalid:1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_voter_is_a_host_port_no_resolver_answers() {
        let a = unknown(u64::MAX);
        let (host, port) = a.rsplit_once(':').unwrap();
        assert!(host.ends_with(".invalid"), "{a}");
        assert_eq!(port, "1");
        assert!(
            std::net::ToSocketAddrs::to_socket_addrs(&unknown(3)).is_err(),
            "a .invalid name must not resolve"
        );
    }
}
