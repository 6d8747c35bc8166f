use super::*;

const FRESH: Directory = Directory {
    first_open: true,
    lost: false,
    marked: false,
};

/// "gamma" over 1..=3 prefers node 3 (hosted_tests pins it): nodes 1 and 2 fall back, 1
/// first (rank 0 among the others), 2 one election timeout later; 3 founds at its start.
#[test]
fn only_the_other_voters_of_a_fresh_directory_fall_back_staggered_by_rank() {
    let v = [1, 2, 3];
    assert_eq!(super::super::hosted::preferred("gamma", &v), Some(3));
    let et = 3_000;
    assert_eq!(
        fallback_after(1, "gamma", &v, et, FRESH),
        Some(Duration::from_millis(9_000))
    );
    assert_eq!(
        fallback_after(2, "gamma", &v, et, FRESH),
        Some(Duration::from_millis(12_000))
    );
    assert_eq!(fallback_after(3, "gamma", &v, et, FRESH), None);
    // Not a voter, or no voters: never.
    assert_eq!(fallback_after(4, "gamma", &v, et, FRESH), None);
    assert_eq!(fallback_after(1, "gamma", &[], et, FRESH), None);
    // The order the voters are named in changes nothing.
    assert_eq!(
        fallback_after(2, "gamma", &[3, 2, 1], et, FRESH),
        fallback_after(2, "gamma", &v, et, FRESH)
    );
    // A huge timeout saturates, never wraps into an early founding.
    assert_eq!(
        fallback_after(2, "gamma", &v, u64::MAX, FRESH),
        Some(Duration::from_millis(u64::MAX))
    );
}

#[test]
fn a_lost_or_marked_directory_never_falls_back() {
    let v = [1, 2, 3];
    for dir in [
        // Lost (opened, its state store gone): it starts joining.
        Directory {
            lost: true,
            ..FRESH
        },
        // A joining marker (a rejoin, an M-1 crash): it must catch up first.
        Directory {
            marked: true,
            ..FRESH
        },
    ] {
        for me in 1..=3 {
            assert_eq!(fallback_after(me, "gamma", &v, 3_000, dir), None, "{dir:?}");
        }
    }
}

#[test]
fn anything_of_the_group_that_reached_the_node_stops_the_fallback() {
    let none = Seen {
        term: 0,
        leader: None,
        last_log_index: None,
    };
    assert!(!contacted(&none));
    // A candidate's vote request, granted: the term moved.
    assert!(contacted(&Seen { term: 1, ..none }));
    // A leader's append: its entries, or at least its name.
    assert!(contacted(&Seen {
        last_log_index: Some(0),
        ..none
    }));
    assert!(contacted(&Seen {
        leader: Some(3),
        ..none
    }));
}

/// Review s29 M-B: a voter restarted during its wait (its record marked `opened` by the first
/// start) falls back as a fresh one does, with the same stagger; only lost or marked
/// directories do not. Before, one restart turned the fallback off for that node for good.
#[test]
fn a_restart_during_the_wait_keeps_the_fallback() {
    let v = [1, 2, 3];
    let reopened = Directory {
        first_open: false,
        ..FRESH
    };
    for me in 1..=3 {
        assert_eq!(
            fallback_after(me, "gamma", &v, 3_000, reopened),
            fallback_after(me, "gamma", &v, 3_000, FRESH),
            "node {me}"
        );
    }
    assert_eq!(
        fallback_after(1, "gamma", &v, 3_000, reopened),
        Some(Duration::from_millis(9_000))
    );
    for dir in [
        Directory {
            lost: true,
            ..reopened
        },
        Directory {
            marked: true,
            ..reopened
        },
    ] {
        assert_eq!(fallback_after(1, "gamma", &v, 3_000, dir), None, "{dir:?}");
    }
}
