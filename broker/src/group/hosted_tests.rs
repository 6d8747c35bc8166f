use super::*;

#[test]
fn a_record_is_written_once_and_the_first_declaration_wins() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(read(dir.path(), "acme").unwrap(), None);
    assert_eq!(read_all(dir.path()).unwrap(), vec![]);
    assert_eq!(
        record(dir.path(), "acme", &[1, 2, 3]).unwrap(),
        Recorded::New(vec![1, 2, 3])
    );
    // A second declaration (another membership meanwhile) changes nothing.
    assert_eq!(
        record(dir.path(), "acme", &[1, 2, 3, 4]).unwrap(),
        Recorded::Existing(vec![1, 2, 3])
    );
    record(dir.path(), "beta", &[2]).unwrap();
    assert_eq!(
        read_all(dir.path()).unwrap(),
        vec![
            ("acme".to_string(), vec![1, 2, 3]),
            ("beta".to_string(), vec![2])
        ]
    );
    let text = std::fs::read_to_string(dir.path().join(HOSTED_DIR).join("acme")).unwrap();
    assert_eq!(text, "queen-tenant-hosted 1\nvoters=1,2,3\n");
}

#[test]
fn bad_declarations_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for (tenant, voters) in [
        ("default", &[1u64][..]),
        ("Acme", &[1][..]),
        ("../x", &[1][..]),
        ("acme", &[][..]),
        ("acme", &[2, 1][..]),
        ("acme", &[0][..]),
    ] {
        assert!(
            record(dir.path(), tenant, voters).is_err(),
            "{tenant} {voters:?}"
        );
    }
    assert!(!dir.path().join(HOSTED_DIR).join("acme").exists());
}

#[test]
fn a_damaged_record_stops_the_read_naming_its_file() {
    let dir = tempfile::tempdir().unwrap();
    record(dir.path(), "acme", &[1, 2]).unwrap();
    let path = dir.path().join(HOSTED_DIR).join("acme");
    for damaged in [
        "",
        "queen-tenant-hosted 1\n",
        "queen-tenant-hosted 2\nvoters=1,2\n",
        "queen-tenant-hosted 1\nvoters=1,x\n",
        "queen-tenant-hosted 1\nvoters=2,1\n",
        "queen-tenant-hosted 1\nvoters=\n",
        "queen-tenant-hosted 1\nvoters=1,2\nmore\n",
        "queen-tenant-hosted 1\nvoters=1,2",
        "queen-tenant-hosted 1\nvoters=1,2\nopened",
        "queen-tenant-hosted 1\nvoters=1,2\nopened\nopened\n",
    ] {
        std::fs::write(&path, damaged).unwrap();
        let err = format!("{:#}", read_all(dir.path()).expect_err(damaged));
        assert!(err.contains("acme"), "{damaged:?}: {err}");
        // A damaged record is never replaced by a later declaration either.
        assert!(record(dir.path(), "acme", &[1, 2]).is_err(), "{damaged:?}");
    }
    std::fs::write(&path, vec![b'x'; 5000]).unwrap();
    assert!(read(dir.path(), "acme").is_err());
}

#[test]
fn a_stray_name_stops_the_read_and_a_crash_leftover_is_removed_at_start_only() {
    let dir = tempfile::tempdir().unwrap();
    record(dir.path(), "acme", &[1]).unwrap();
    let hosted = dir.path().join(HOSTED_DIR);
    std::fs::write(hosted.join("beta.tmp"), "queen-tenant-hosted 1\n").unwrap();
    assert_eq!(
        read_all(dir.path()).unwrap(),
        vec![("acme".to_string(), vec![1])]
    );
    assert!(
        hosted.join("beta.tmp").exists(),
        "a listing removes nothing"
    );
    remove_leftovers(dir.path()).unwrap();
    assert!(!hosted.join("beta.tmp").exists());
    assert_eq!(read_all(dir.path()).unwrap().len(), 1, "the record stays");
    remove_leftovers(&dir.path().join("none")).unwrap();
    std::fs::write(hosted.join("Not-A-Tenant"), "x").unwrap();
    assert!(read_all(dir.path()).is_err());
}

/// Review s31 member H1 / tenants L3: a listing (a membership route, the `default` open's
/// backfill) while a record is being written must leave the writer's temporary file, so the
/// writer's rename succeeds.
#[test]
fn a_listing_while_a_record_is_written_does_not_fail_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    record(dir.path(), "acme", &[1]).unwrap();
    let hosted = dir.path().join(HOSTED_DIR);
    // The writer's steps of `write`, stopped between its fsync and its rename.
    let tmp = hosted.join("beta.tmp");
    let mut f = std::fs::File::create(&tmp).unwrap();
    std::io::Write::write_all(&mut f, render(&[2], false).as_bytes()).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(read_all(dir.path()).unwrap().len(), 1);
    std::fs::rename(&tmp, hosted.join("beta")).expect("the writer's rename");
    assert_eq!(read_all(dir.path()).unwrap().len(), 2);
}

#[test]
fn the_preferred_voter_is_deterministic_and_spreads_tenants() {
    assert_eq!(preferred("acme", &[]), None);
    assert_eq!(preferred("acme", &[7]), Some(7));
    // The order the voters are named in does not matter.
    assert_eq!(preferred("acme", &[1, 2, 3]), preferred("acme", &[3, 1, 2]));
    // The values are part of the format: every node, every version, picks the same founder.
    let picks: Vec<u64> = ["acme", "beta", "gamma", "delta"]
        .iter()
        .map(|t| preferred(t, &[1, 2, 3]).unwrap())
        .collect();
    let distinct: std::collections::BTreeSet<u64> = picks.iter().copied().collect();
    assert!(distinct.len() >= 2, "{picks:?}");
    assert_eq!(picks, [3, 3, 3, 2]);
    // The two tenants of tests/python/test_cluster_tenants.py lead on different nodes.
    assert_eq!(preferred("tenant-a", &[1, 2, 3]), Some(1));
    assert_eq!(preferred("tenant-b", &[1, 2, 3]), Some(2));
}

#[test]
fn a_record_is_marked_opened_once_and_keeps_its_voters() {
    let dir = tempfile::tempdir().unwrap();
    assert!(
        mark_opened(dir.path(), "acme").is_err(),
        "no record to mark"
    );
    record(dir.path(), "acme", &[1, 3]).unwrap();
    let h = read_hosted(dir.path(), "acme").unwrap().unwrap();
    assert_eq!((h.voters.as_slice(), h.opened), (&[1, 3][..], false));
    mark_opened(dir.path(), "acme").unwrap();
    mark_opened(dir.path(), "acme").unwrap();
    let h = read_hosted(dir.path(), "acme").unwrap().unwrap();
    assert_eq!((h.voters.as_slice(), h.opened), (&[1, 3][..], true));
    let text = std::fs::read_to_string(dir.path().join(HOSTED_DIR).join("acme")).unwrap();
    assert_eq!(text, "queen-tenant-hosted 1\nvoters=1,3\nopened\n");
    // A later declaration changes nothing, the mark included.
    assert_eq!(
        record(dir.path(), "acme", &[1, 2, 3]).unwrap(),
        Recorded::Existing(vec![1, 3])
    );
    assert!(read_hosted(dir.path(), "acme").unwrap().unwrap().opened);
}

#[test]
fn a_joining_marker_is_written_once_into_a_missing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("tenants").join("acme");
    write_joining_marker(&group).unwrap();
    let marker = group.join(crate::cluster_member::JOIN_MARKER);
    let first = std::fs::read(&marker).unwrap();
    assert!(!first.is_empty());
    write_joining_marker(&group).unwrap();
    assert_eq!(std::fs::read(&marker).unwrap(), first);
}

#[test]
fn a_declaration_replayed_while_the_node_rejoins_opens_its_group_joining() {
    let marker = |root: &Path, t: &str| {
        super::super::registry::tenant_dir(root, t)
            .join(crate::cluster_member::JOIN_MARKER)
            .exists()
    };
    // An ordinary node: the tenant's group may found and vote.
    let dir = tempfile::tempdir().unwrap();
    let d = Declarations::new(dir.path().to_path_buf());
    d.applied(4, "acme", &[1, 2, 3]).unwrap();
    assert!(!marker(dir.path(), "acme"));
    // The default group is joining (a wiped node rejoins): every tenant it learns of opens
    // joining, and a later re-apply of a standing record adds nothing.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(crate::cluster_member::JOIN_MARKER), b"j").unwrap();
    let d = Declarations::new(dir.path().to_path_buf());
    d.applied(4, "acme", &[1, 2, 3]).unwrap();
    assert!(marker(dir.path(), "acme"));
    assert_eq!(d.take(), vec!["acme".to_string()]);
}

fn tenant_marked(root: &Path, t: &str) -> bool {
    super::super::registry::tenant_dir(root, t)
        .join(crate::cluster_member::JOIN_MARKER)
        .exists()
}

/// A rejoining node whose first append named index 10: what was declared at or below it
/// may have had a group it voted in before the wipe, and opens joining; what was declared
/// above it is founded as on any node (review s27 tenants H1: marked, a tenant whose
/// preferred founder is the rejoining node was founded by nobody).
#[test]
fn only_declarations_at_or_below_the_first_appends_horizon_open_joining() {
    let dir = tempfile::tempdir().unwrap();
    let default_marker = dir.path().join(crate::cluster_member::JOIN_MARKER);
    std::fs::write(&default_marker, b"j").unwrap();
    queenmq_raft::join_horizon::write_horizon(&default_marker, 10).unwrap();
    let d = Declarations::new(dir.path().to_path_buf());
    d.applied(7, "old", &[1, 2, 3]).unwrap();
    d.applied(10, "edge", &[1, 2, 3]).unwrap();
    d.applied(11, "new", &[1, 2, 3]).unwrap();
    assert!(tenant_marked(dir.path(), "old"));
    assert!(tenant_marked(dir.path(), "edge"));
    assert!(!tenant_marked(dir.path(), "new"));
    let horizon = queenmq_raft::join_horizon::horizon_path(&default_marker);
    assert!(horizon.exists(), "removed while the marker stands");
    // The default marker cleared (caught up in the log) while the apply still lags: the
    // horizon still decides.
    std::fs::remove_file(&default_marker).unwrap();
    d.applied(9, "late", &[1, 2, 3]).unwrap();
    d.applied(12, "later", &[1, 2, 3]).unwrap();
    assert!(tenant_marked(dir.path(), "late"));
    assert!(!tenant_marked(dir.path(), "later"));
    // Passed with the marker gone: the horizon is removed (review s28 M-2), and a replay
    // from an older checkpoint finds the records it bounded standing.
    assert!(!horizon.exists(), "the horizon outlived its use");
    d.applied(7, "old", &[1, 2, 3]).unwrap();
    assert!(tenant_marked(dir.path(), "old"));
    // A damaged horizon stops the apply, naming the file.
    std::fs::write(
        queenmq_raft::join_horizon::horizon_path(&default_marker),
        b"x",
    )
    .unwrap();
    let e = d.applied(13, "other", &[1, 2, 3]).unwrap_err();
    assert!(e.contains("cluster-joining-commit"), "{e}");
}

/// A kill -9 between a rejoining node's record and its tenant marker: the replay finds the
/// record and still writes the marker (review s27 tenants M1); a record whose group was
/// opened since is left alone.
#[test]
fn a_replay_onto_a_standing_record_writes_the_missing_marker() {
    let dir = tempfile::tempdir().unwrap();
    let default_marker = dir.path().join(crate::cluster_member::JOIN_MARKER);
    std::fs::write(&default_marker, b"j").unwrap();
    // The record stands, the crash came before the marker.
    record(dir.path(), "acme", &[1, 2, 3]).unwrap();
    let d = Declarations::new(dir.path().to_path_buf());
    d.applied(5, "acme", &[1, 2, 3]).unwrap();
    assert!(tenant_marked(dir.path(), "acme"));
    // Opened (its marker written before), then the marker cleared by a catch-up: a replay
    // does not put it back.
    record(dir.path(), "beta", &[1, 2, 3]).unwrap();
    mark_opened(dir.path(), "beta").unwrap();
    d.applied(6, "beta", &[1, 2, 3]).unwrap();
    assert!(!tenant_marked(dir.path(), "beta"));
    // Not rejoining: a standing record gets no marker.
    let dir = tempfile::tempdir().unwrap();
    record(dir.path(), "acme", &[1, 2, 3]).unwrap();
    let d = Declarations::new(dir.path().to_path_buf());
    d.applied(5, "acme", &[1, 2, 3]).unwrap();
    assert!(!tenant_marked(dir.path(), "acme"));
}

/// Review s28 M-1: a kill -9 at either step of a rejoining node's apply of a declaration
/// (its tenant's joining marker, its hosted record) must never leave a record the restart
/// opens without the marker. Each fault hits one step only: the marker's (`tenants` is a
/// file, so the tenant's directory cannot be made; the record's path still reads) or the
/// record's (its temporary name is a directory; the record still reads as absent). The
/// "restart" is the start's own choice of what to open (`registry::to_open`) with the fault
/// gone, then the replay of the same entry.
#[test]
fn a_crash_between_the_marker_and_the_record_never_opens_the_group_unmarked() {
    type Fault = fn(&Path);
    let marker_step: Fault = |root| std::fs::write(root.join("tenants"), b"fault").unwrap();
    let record_step: Fault = |root| {
        std::fs::create_dir_all(root.join(HOSTED_DIR).join("acme.tmp")).unwrap();
    };
    let heal: Fault = |root| {
        let _ = std::fs::remove_file(root.join("tenants"));
        let _ = std::fs::remove_dir(root.join(HOSTED_DIR).join("acme.tmp"));
    };
    for (step, fault) in [("marker", marker_step), ("record", record_step)] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join(crate::cluster_member::JOIN_MARKER), b"j").unwrap();
        fault(root);
        let d = Declarations::new(root.to_path_buf());
        assert!(
            d.applied(4, "acme", &[1, 2, 3]).is_err(),
            "{step}: the fault hit"
        );
        heal(root);
        // The restart: every tenant it opens is marked, and the start is not refused.
        let opened = super::super::registry::to_open(root)
            .unwrap_or_else(|e| panic!("{step}: the start was refused: {e:#}"));
        for t in &opened {
            assert!(tenant_marked(root, t), "{step}: {t} opens unmarked");
        }
        // The replay of the entry completes both.
        let d = Declarations::new(root.to_path_buf());
        d.applied(4, "acme", &[1, 2, 3]).unwrap();
        assert_eq!(super::super::registry::to_open(root).unwrap(), vec!["acme"]);
        assert!(tenant_marked(root, "acme"), "{step}");
    }
}

/// Only a directory holding the marker alone is taken for the M-1 crash: one with anything
/// else and no record is a single node's tenant, still refused.
#[test]
fn a_tenant_directory_without_a_record_is_refused_unless_it_holds_only_the_marker() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let group = super::super::registry::tenant_dir(root, "acme");
    write_joining_marker(&group).unwrap();
    assert_eq!(
        super::super::registry::to_open(root).unwrap(),
        Vec::<String>::new()
    );
    std::fs::write(group.join("state.redb"), b"x").unwrap();
    let e = super::super::registry::to_open(root).unwrap_err();
    assert!(format!("{e:#}").contains("acme"), "{e:#}");
    let other = super::super::registry::tenant_dir(root, "beta");
    std::fs::create_dir_all(other.join(crate::cluster_member::JOIN_MARKER)).unwrap();
    std::fs::remove_file(group.join("state.redb")).unwrap();
    assert!(
        super::super::registry::to_open(root).is_err(),
        "a marker that is a directory is not the marker"
    );
}

/// Review s29 M-C: every state a kill -9 can leave during a rejoining node's apply of a
/// declaration, step by step (the `tenants` directory made; the tenant's directory made but
/// its marker's name not durable; the marker made, its bytes not; a record half written under
/// its temporary name; both done), is accepted by the next start without opening the group
/// unmarked, and the replay of the entry completes it. Before, the empty tenant directory
/// refused the start as a single node's tenant.
#[test]
fn a_kill_at_any_step_of_the_marker_and_the_record_lets_the_node_start() {
    type Crash = fn(&Path);
    let group = |root: &Path| super::super::registry::tenant_dir(root, "acme");
    let steps: [(&str, Crash); 5] = [
        ("tenants made", |root| {
            std::fs::create_dir(root.join("tenants")).unwrap()
        }),
        ("tenant directory made", |root| {
            std::fs::create_dir_all(super::super::registry::tenant_dir(root, "acme")).unwrap()
        }),
        ("marker created empty", |root| {
            let g = super::super::registry::tenant_dir(root, "acme");
            std::fs::create_dir_all(&g).unwrap();
            std::fs::write(g.join(crate::cluster_member::JOIN_MARKER), b"").unwrap();
        }),
        ("record half written", |root| {
            write_joining_marker(&super::super::registry::tenant_dir(root, "acme")).unwrap();
            std::fs::create_dir_all(root.join(HOSTED_DIR)).unwrap();
            std::fs::write(
                root.join(HOSTED_DIR).join("acme.tmp"),
                b"queen-tenant-hosted 1\nvot",
            )
            .unwrap();
        }),
        ("record written", |root| {
            write_joining_marker(&super::super::registry::tenant_dir(root, "acme")).unwrap();
            record(root, "acme", &[1, 2, 3]).unwrap();
        }),
    ];
    for (step, crash) in steps {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join(crate::cluster_member::JOIN_MARKER), b"j").unwrap();
        crash(root);
        let opened = super::super::registry::to_open(root)
            .unwrap_or_else(|e| panic!("{step}: the start was refused: {e:#}"));
        for t in &opened {
            assert!(tenant_marked(root, t), "{step}: {t} opens unmarked");
        }
        let d = Declarations::new(root.to_path_buf());
        d.applied(4, "acme", &[1, 2, 3]).unwrap();
        assert_eq!(
            super::super::registry::to_open(root).unwrap(),
            vec!["acme"],
            "{step}"
        );
        assert!(tenant_marked(root, "acme"), "{step}");
        assert!(group(root).is_dir(), "{step}");
    }
}

/// Review s31 tenants M2: a node that never joined opened a tenant's group, then lost both
/// its hosted record and the tenant's directory. The record written again (from the
/// checkpoint or by the replay of the declaration) must open the group joining: this node
/// may have voted in it. The ledger of opened groups, kept apart from the record, says so.
#[test]
fn a_lost_record_of_an_opened_group_opens_it_joining() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let d = Declarations::new(root.to_path_buf());
    d.applied(5, "acme", &[1, 2, 3]).unwrap();
    d.applied(6, "beta", &[1, 2, 3]).unwrap();
    assert!(!tenant_marked(root, "acme"));
    mark_opened(root, "acme").unwrap();
    // Both lost; "beta" was never opened here, so its group may still be a first open.
    for t in ["acme", "beta"] {
        std::fs::remove_file(root.join(HOSTED_DIR).join(t)).unwrap();
    }
    std::fs::remove_dir_all(super::super::registry::tenant_dir(root, "acme")).ok();
    // The replay of the log re-applies the declarations.
    d.applied(5, "acme", &[1, 2, 3]).unwrap();
    d.applied(6, "beta", &[1, 2, 3]).unwrap();
    assert!(
        tenant_marked(root, "acme"),
        "the lost opened group opens founding"
    );
    assert!(!tenant_marked(root, "beta"));
    // Lost again, and written back from the default group's checkpoint this time.
    std::fs::remove_file(root.join(HOSTED_DIR).join("acme")).unwrap();
    std::fs::remove_dir_all(super::super::registry::tenant_dir(root, "acme")).unwrap();
    let mut carried = queenmq_engine::state::tenants::DeclaredTenants::new();
    queenmq_engine::state::tenants::declare(&mut carried, "acme", 5, &[1, 2, 3]);
    super::super::checkpoint_declarations::record_missing(&d, &carried).unwrap();
    assert!(tenant_marked(root, "acme"));
    assert!(!read_hosted(root, "acme").unwrap().unwrap().opened);
    // The start accepts what this leaves.
    super::super::opened_ledger::check_all(root).unwrap();
    super::super::registry::to_open(root).unwrap();
}

/// A kill -9 between the ledger entry and the record's `opened` line: the record is still
/// unopened (Raft never started, no vote), the start accepts it, and a replay does not mark
/// the group (its next open is a first one, so its preferred voter still founds).
#[test]
fn a_kill_between_the_ledger_and_the_opened_line_is_a_first_open_again() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let d = Declarations::new(root.to_path_buf());
    d.applied(5, "acme", &[1, 2, 3]).unwrap();
    super::super::opened_ledger::note(root, "acme").unwrap();
    super::super::opened_ledger::check_all(root).unwrap();
    assert_eq!(super::super::registry::to_open(root).unwrap(), ["acme"]);
    d.applied(5, "acme", &[1, 2, 3]).unwrap();
    assert!(!tenant_marked(root, "acme"));
    assert!(!mark_opened(root, "acme").unwrap(), "not a first open");
    // A crash inside the ledger step: its directory made, no entry yet.
    let other = tempfile::tempdir().unwrap();
    std::fs::create_dir(other.path().join(super::super::opened_ledger::OPENED_DIR)).unwrap();
    assert!(super::super::opened_ledger::check_all(other.path())
        .unwrap()
        .is_empty());
}

/// Review s32 M-1: a lost group recovered once (its record written back unopened, its marker
/// written), then its directory lost again before it opened: the ledger still marks it at
/// open time, so it neither founds nor votes before it caught up.
#[test]
fn a_second_loss_after_a_recovery_still_opens_the_group_joining() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let d = Declarations::new(root.to_path_buf());
    d.applied(5, "acme", &[1, 2, 3]).unwrap();
    d.applied(6, "beta", &[1, 2, 3]).unwrap();
    let tdir = super::super::registry::tenant_dir(root, "acme");
    std::fs::create_dir_all(&tdir).unwrap();
    std::fs::write(tdir.join(super::super::open::STATE_FILE), b"s").unwrap();
    mark_opened(root, "acme").unwrap();
    let standing = read_hosted(root, "acme").unwrap().unwrap();
    assert!(!lost_since_opened(root, "acme", &standing).unwrap());
    // A first open never noted: not lost.
    let beta = read_hosted(root, "beta").unwrap().unwrap();
    assert!(!lost_since_opened(root, "beta", &beta).unwrap());
    assert!(!tenant_marked(root, "beta"));
    // Record and directory lost, the replay recovers them unopened and marked.
    std::fs::remove_file(root.join(HOSTED_DIR).join("acme")).unwrap();
    std::fs::remove_dir_all(&tdir).unwrap();
    d.applied(5, "acme", &[1, 2, 3]).unwrap();
    assert!(tenant_marked(root, "acme"));
    // The directory lost once more before the group opened (a kill, or the operator's reset).
    std::fs::remove_dir_all(&tdir).unwrap();
    super::super::registry::to_open(root).unwrap();
    let hosted = read_hosted(root, "acme").unwrap().unwrap();
    assert!(!hosted.opened);
    assert!(
        lost_since_opened(root, "acme", &hosted).unwrap(),
        "a group this node opened once opens as a first open"
    );
    assert!(tenant_marked(root, "acme"));
}

/// Review s32 M-2: a group opened by a build before the ledger (its record says `opened`, no
/// ledger entry) gets its entry at its next open.
#[test]
fn an_open_under_this_build_notes_a_group_an_older_build_opened() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "acme", &[1, 2, 3], true).unwrap();
    assert!(!super::super::opened_ledger::contains(root, "acme").unwrap());
    assert!(mark_opened(root, "acme").unwrap(), "opened before");
    assert!(super::super::opened_ledger::contains(root, "acme").unwrap());
}

/// Review s32 M-3: a rejoined node marks a declaration at or below its horizon; the horizon
/// goes once the apply passes it. If the tenant's record and directory are then lost before
/// its group opened, the ledger still marks it (the horizon no longer can).
#[test]
fn a_rejoins_declaration_stays_marked_after_the_horizon_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let default_marker = root.join(crate::cluster_member::JOIN_MARKER);
    std::fs::write(&default_marker, b"j").unwrap();
    queenmq_raft::join_horizon::write_horizon(&default_marker, 50).unwrap();
    let d = Declarations::new(root.to_path_buf());
    d.applied(30, "acme", &[1, 2, 3]).unwrap();
    assert!(tenant_marked(root, "acme"));
    std::fs::remove_file(&default_marker).unwrap();
    d.applied(60, "beta", &[1, 2, 3]).unwrap();
    assert!(!queenmq_raft::join_horizon::horizon_path(&default_marker).exists());
    // Lost before acme's group opened; restored from the checkpoint, then from the log.
    std::fs::remove_file(root.join(HOSTED_DIR).join("acme")).unwrap();
    std::fs::remove_dir_all(super::super::registry::tenant_dir(root, "acme")).unwrap();
    let mut carried = queenmq_engine::state::tenants::DeclaredTenants::new();
    queenmq_engine::state::tenants::declare(&mut carried, "acme", 30, &[1, 2, 3]);
    super::super::checkpoint_declarations::record_missing(&d, &carried).unwrap();
    assert!(tenant_marked(root, "acme"), "the checkpoint path");
    std::fs::remove_file(root.join(HOSTED_DIR).join("acme")).unwrap();
    std::fs::remove_dir_all(super::super::registry::tenant_dir(root, "acme")).unwrap();
    d.applied(30, "acme", &[1, 2, 3]).unwrap();
    assert!(tenant_marked(root, "acme"), "the replay");
    assert!(!tenant_marked(root, "beta"));
}

/// Review s32 M-4: the horizon's removal fails (EACCES, EIO): the apply goes on and keeps the
/// file; the next declaration above it removes it.
#[test]
fn a_failed_horizon_removal_does_not_stop_the_apply() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let default_marker = root.join(crate::cluster_member::JOIN_MARKER);
    queenmq_raft::join_horizon::write_horizon(&default_marker, 10).unwrap();
    let horizon = queenmq_raft::join_horizon::horizon_path(&default_marker);
    let failing = Declarations::new(root.to_path_buf())
        .with_horizon_remover(|_| Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied)));
    failing.applied(9, "old", &[1, 2, 3]).unwrap();
    failing.applied(12, "new", &[1, 2, 3]).unwrap();
    failing.applied(12, "new", &[1, 2, 3]).unwrap();
    assert!(horizon.exists());
    assert!(tenant_marked(root, "old"));
    assert!(!tenant_marked(root, "new"));
    assert_eq!(read(root, "new").unwrap(), Some(vec![1, 2, 3]));
    Declarations::new(root.to_path_buf())
        .applied(13, "newer", &[1, 2, 3])
        .unwrap();
    assert!(!horizon.exists());
    assert!(!tenant_marked(root, "newer"));
}
