use super::*;

pub(in crate::group) fn args(member: &str, protocols: &[&str]) -> JoinArgs {
    JoinArgs {
        group: "g".into(),
        member_id: member.into(),
        instance_id: None,
        client_id: "c".into(),
        client_host: "/h".into(),
        session_ms: 10_000,
        rebalance_ms: 30_000,
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|p| (p.to_string(), Bytes::from(p.to_string())))
            .collect(),
        require_known_member: true,
    }
}

fn now_of(step: Step<JoinAnswer>) -> JoinAnswer {
    match step {
        Step::Now(a) => a,
        Step::Wait(_) => panic!("expected an answer now"),
    }
}

fn waiting(step: Step<JoinAnswer>) -> oneshot::Receiver<JoinAnswer> {
    match step {
        Step::Wait(rx) => rx,
        Step::Now(a) => panic!("expected a wait, got {a:?}"),
    }
}

/// A v4 member joins: first MEMBER_ID_REQUIRED, then it waits with that id.
fn join_new(
    gs: &mut Groups,
    protocols: &[&str],
    now: u64,
) -> (String, oneshot::Receiver<JoinAnswer>) {
    let first = now_of(gs.join(args("", protocols), now));
    assert_eq!(first.error, e::MEMBER_ID_REQUIRED);
    let id = first.member_id.clone();
    (id.clone(), waiting(gs.join(args(&id, protocols), now)))
}

/// Completes ready join phases with generation `gen`.
fn complete(gs: &mut Groups, now: u64, gen: i32) -> Vec<(String, String, String)> {
    let ready = gs.take_ready(now);
    for (g, ..) in &ready {
        gs.complete_join(g, gen, now);
    }
    ready
}

fn sync_now(gs: &mut Groups, id: &str, gen: i32, assign: Vec<(String, Bytes)>) -> Step<SyncAnswer> {
    gs.sync("g", gen, id, None, assign, 0)
}

#[test]
fn two_members_form_a_generation_after_the_initial_delay_and_sync_the_leaders_plan() {
    let mut gs = Groups::new(1);
    let (a, mut ra) = join_new(&mut gs, &["range", "roundrobin"], 0);
    let (b, mut rb) = join_new(&mut gs, &["roundrobin", "range"], 10);
    assert!(
        gs.take_ready(100).is_empty(),
        "the initial delay holds the first generation"
    );
    let ready = complete(&mut gs, 10 + INITIAL_REBALANCE_DELAY_MS, 1);
    // One vote each: the earliest common protocol of the first member wins the tie.
    assert_eq!(ready, vec![("g".into(), "consumer".into(), "range".into())]);
    let (ja, jb) = (
        ra.try_recv().expect("a answered"),
        rb.try_recv().expect("b answered"),
    );
    assert_eq!((ja.generation, jb.generation), (1, 1));
    assert_eq!(ja.leader, a);
    assert_eq!(
        (ja.members.len(), jb.members.len()),
        (2, 0),
        "only the leader gets members"
    );
    // The follower syncs first and waits; the leader's plan answers both.
    let Step::Wait(mut wb) = sync_now(&mut gs, &b, 1, vec![]) else {
        panic!("follower waits")
    };
    let plan = vec![
        (a.clone(), Bytes::from_static(b"A")),
        (b.clone(), Bytes::from_static(b"B")),
    ];
    let Step::Wait(mut wa) = sync_now(&mut gs, &a, 1, plan) else {
        panic!("leader waits on its own channel")
    };
    assert_eq!(
        wa.try_recv().map(|s| s.assignment),
        Ok(Bytes::from_static(b"A"))
    );
    assert_eq!(
        wb.try_recv().map(|s| s.assignment),
        Ok(Bytes::from_static(b"B"))
    );
    assert_eq!(gs.get("g").map(|g| g.state), Some(GroupState::Stable));
    assert_eq!(gs.heartbeat("g", 1, &b, None, 50), e::NONE);
}

fn stable_pair(gs: &mut Groups) -> (String, String) {
    let (a, _ra) = join_new(gs, &["range"], 0);
    let (b, _rb) = join_new(gs, &["range"], 0);
    complete(gs, INITIAL_REBALANCE_DELAY_MS, 1);
    let _ = sync_now(gs, &a, 1, vec![]);
    (a, b)
}

#[test]
fn a_third_member_starts_a_rebalance_and_old_members_learn_it_by_heartbeat() {
    let mut gs = Groups::new(1);
    let (a, b) = stable_pair(&mut gs);
    let (c, mut rc) = join_new(&mut gs, &["range"], 5_000);
    assert_eq!(
        gs.heartbeat("g", 1, &a, None, 5_001),
        e::REBALANCE_IN_PROGRESS
    );
    assert_eq!(
        match sync_now(&mut gs, &b, 1, vec![]) {
            Step::Now(s) => s.error,
            Step::Wait(_) => 0,
        },
        e::REBALANCE_IN_PROGRESS
    );
    // Not everyone rejoined: nothing completes before the deadline.
    assert!(gs.take_ready(5_002).is_empty());
    let mut ra = waiting(gs.join(args(&a, &["range"]), 5_003));
    let mut rb = waiting(gs.join(args(&b, &["range"]), 5_004));
    complete(&mut gs, 5_005, 2);
    for r in [&mut ra, &mut rb, &mut rc] {
        assert_eq!(r.try_recv().map(|j| j.generation), Ok(2));
    }
    // An old generation is refused, a current one served.
    assert_eq!(gs.heartbeat("g", 1, &c, None, 5_006), e::ILLEGAL_GENERATION);
    assert_eq!(gs.heartbeat("g", 2, &c, None, 5_006), e::NONE);
    assert_eq!(
        gs.heartbeat("g", 2, "ghost", None, 5_006),
        e::UNKNOWN_MEMBER_ID
    );
}

#[test]
fn a_member_missing_the_rebalance_deadline_is_dropped_not_the_ones_waiting() {
    let mut gs = Groups::new(1);
    let (a, b) = stable_pair(&mut gs);
    // b leaves; a must rejoin; a is waiting and is not expired by its session.
    assert_eq!(gs.leave("g", &b, None, 100), e::NONE);
    let mut ra = waiting(gs.join(args(&a, &["range"]), 100));
    gs.expire(100 + 20_000);
    let ready = complete(&mut gs, 100 + 20_000, 2);
    assert_eq!(ready.len(), 1);
    let j = ra.try_recv().expect("answered");
    assert_eq!(
        (j.generation, j.leader.as_str(), j.members.len()),
        (2, a.as_str(), 1)
    );
    // A new joiner makes a rebalance; a never rejoins and is dropped at the deadline.
    let (_c, mut rc) = join_new(&mut gs, &["range"], 21_000);
    assert!(gs.take_ready(21_001).is_empty());
    complete(&mut gs, 21_000 + 30_000, 3);
    let jc = rc.try_recv().expect("answered");
    assert_eq!((jc.generation, jc.members.len()), (3, 1));
    assert_eq!(gs.heartbeat("g", 3, &a, None, 51_001), e::UNKNOWN_MEMBER_ID);
}

#[test]
fn sessions_expire_members_that_stop_heartbeating() {
    let mut gs = Groups::new(1);
    let (a, b) = stable_pair(&mut gs);
    assert_eq!(gs.heartbeat("g", 1, &a, None, 9_000), e::NONE);
    gs.expire(INITIAL_REBALANCE_DELAY_MS + 10_001);
    assert_eq!(gs.heartbeat("g", 1, &b, None, 13_002), e::UNKNOWN_MEMBER_ID);
    assert_eq!(
        gs.heartbeat("g", 1, &a, None, 13_002),
        e::REBALANCE_IN_PROGRESS
    );
}

#[test]
fn commits_follow_kafkas_member_and_generation_rules() {
    let mut gs = Groups::new(1);
    assert_eq!(gs.may_commit("free", -1, "", None, 0), Ok(()));
    assert_eq!(
        gs.may_commit("free", 3, "m", None, 0),
        Err(e::ILLEGAL_GENERATION)
    );
    let (a, _b) = join_new(&mut gs, &["range"], 0);
    complete(&mut gs, INITIAL_REBALANCE_DELAY_MS, 4);
    assert_eq!(
        gs.may_commit("g", 4, &a, None, 1),
        Err(e::REBALANCE_IN_PROGRESS)
    );
    let _ = sync_now(&mut gs, &a, 4, vec![]);
    assert_eq!(gs.may_commit("g", 4, &a, None, 1), Ok(()));
    assert_eq!(
        gs.may_commit("g", 3, &a, None, 1),
        Err(e::ILLEGAL_GENERATION)
    );
    assert_eq!(
        gs.may_commit("g", 4, "x", None, 1),
        Err(e::UNKNOWN_MEMBER_ID)
    );
    assert_eq!(
        gs.may_commit("g", -1, "", None, 1),
        Err(e::UNKNOWN_MEMBER_ID)
    );
}

#[test]
fn a_static_member_coming_back_fences_its_old_id_and_keeps_its_place() {
    let mut gs = Groups::new(1);
    let mut a1 = args("", &["range"]);
    a1.instance_id = Some("i1".into());
    let mut r = waiting(gs.join(a1.clone(), 0));
    complete(&mut gs, INITIAL_REBALANCE_DELAY_MS, 1);
    let first = r.try_recv().expect("answered");
    let _ = gs.sync(
        "g",
        1,
        &first.member_id,
        Some("i1"),
        vec![(first.member_id.clone(), Bytes::from_static(b"P"))],
        1,
    );
    // Restarted with the same instance id: a new member id, the same generation and plan.
    let back = now_of(gs.join(a1, 2));
    assert_eq!((back.error, back.generation), (e::NONE, 1));
    assert_ne!(back.member_id, first.member_id);
    assert_eq!(
        gs.heartbeat("g", 1, &first.member_id, Some("i1"), 3),
        e::FENCED_INSTANCE_ID
    );
    match gs.sync("g", 1, &back.member_id, Some("i1"), vec![], 3) {
        Step::Now(s) => assert_eq!(s.assignment, Bytes::from_static(b"P")),
        Step::Wait(_) => panic!("a stable group answers at once"),
    }
}

#[test]
fn bad_joins_get_kafkas_errors() {
    let mut gs = Groups::new(1);
    let mut short = args("", &["range"]);
    short.session_ms = 10;
    assert_eq!(now_of(gs.join(short, 0)).error, e::INVALID_SESSION_TIMEOUT);
    let (_a, _ra) = join_new(&mut gs, &["range"], 0);
    assert_eq!(
        now_of(gs.join(args("", &["sticky"]), 0)).error,
        e::INCONSISTENT_GROUP_PROTOCOL
    );
    assert_eq!(
        now_of(gs.join(args("nobody", &["range"]), 0)).error,
        e::UNKNOWN_MEMBER_ID
    );
    // Longer than the engine keeps with a generation: refused at the join (of a group
    // nobody is in, which would otherwise accept any protocol).
    let mut long_type = args("", &["range"]);
    long_type.group = "fresh".into();
    long_type.protocol_type = "c".repeat(256);
    assert_eq!(
        now_of(gs.join(long_type, 0)).error,
        e::INCONSISTENT_GROUP_PROTOCOL
    );
    let long_name = "r".repeat(256);
    let mut long_name = args("", &[long_name.as_str()]);
    long_name.group = "fresh".into();
    assert_eq!(
        now_of(gs.join(long_name, 0)).error,
        e::INCONSISTENT_GROUP_PROTOCOL
    );
    let mut long_instance = args("", &["range"]);
    long_instance.group = "fresh".into();
    long_instance.instance_id = Some("i".repeat(250));
    assert_eq!(now_of(gs.join(long_instance, 0)).error, e::INVALID_REQUEST);
    // v0-v3 joins are members at once.
    let mut old = args("", &["range"]);
    old.require_known_member = false;
    assert!(matches!(gs.join(old, 0), Step::Wait(_)));
}

#[test]
fn a_leaving_waiter_is_told_and_an_empty_group_is_forgotten() {
    let mut gs = Groups::new(1);
    let (a, mut ra) = join_new(&mut gs, &["range"], 0);
    assert_eq!(gs.leave("g", &a, None, 1), e::NONE);
    assert_eq!(ra.try_recv().map(|j| j.error), Ok(e::UNKNOWN_MEMBER_ID));
    assert_eq!(gs.leave("g", &a, None, 1), e::UNKNOWN_MEMBER_ID);
    complete(&mut gs, 100_000, 1);
    gs.expire(100_001);
    assert!(gs.get("g").is_none());
}

#[test]
fn a_refused_mint_answers_the_waiting_members_and_their_retries_form_the_phase_again() {
    let mut gs = Groups::new(1);
    let (a, mut ra) = join_new(&mut gs, &["range"], 0);
    let (b, mut rb) = join_new(&mut gs, &["range"], 0);
    let ready = gs.take_ready(INITIAL_REBALANCE_DELAY_MS);
    assert_eq!(ready.len(), 1);
    gs.abort_join("g", e::COORDINATOR_NOT_AVAILABLE);
    for (id, rx) in [(&a, &mut ra), (&b, &mut rb)] {
        let got = rx.try_recv().expect("answered now, not parked");
        assert_eq!(
            (got.error, &got.member_id),
            (e::COORDINATOR_NOT_AVAILABLE, id)
        );
    }
    assert!(
        gs.take_ready(INITIAL_REBALANCE_DELAY_MS + 1).is_empty(),
        "no member waits: nothing to mint until they come back"
    );
    let mut ra = waiting(gs.join(args(&a, &["range"]), 4_000));
    let mut rb = waiting(gs.join(args(&b, &["range"]), 4_000));
    complete(&mut gs, 4_000, 1);
    assert_eq!(ra.try_recv().map(|j| j.generation), Ok(1));
    assert_eq!(rb.try_recv().map(|j| j.generation), Ok(1));
}
