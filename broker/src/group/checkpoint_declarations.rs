//! The tenant declarations a checkpoint of the `default` group carries (engine section 9),
//! acted on before the group's Raft starts. A node caught up by a snapshot of `default` past
//! a declaration never applies its entry, so its apply never writes the tenant's hosted
//! record: this writes the record (and the joining marker) as the replay of the entry at
//! `declared_at` would have (`Declarations::applied`), then the registry opens the groups as
//! it does for any record (docs/cluster.md "Tenants", docs/storage-format.md "Tenant
//! declarations section (tag 9)").

use std::path::Path;

use queenmq_engine::state::tenants::DeclaredTenants;

use super::hosted::{read_hosted, Declarations};

/// Writes the record of every declaration in `tenants` that has none here, in name order,
/// and queues each for opening. Idempotent: a crash between two records leaves the ones
/// written, and the next open writes the rest. Blocking (fsyncs): call it off the runtime.
/// The tenants whose record this wrote.
pub fn record_missing(d: &Declarations, tenants: &DeclaredTenants) -> Result<Vec<String>, String> {
    let joined = ever_joined(d.data_dir())?;
    let mut written = Vec::new();
    for (tenant, t) in tenants {
        let standing = read_hosted(d.data_dir(), tenant).map_err(|e| format!("{e:#}"))?;
        match standing {
            Some(h) if h.opened => continue,
            // A standing unopened record (one written unmarked by a build before s28, or a
            // kill -9 before its open) takes the marker step the replay gives it (review s30
            // tenants L1); recording it again changes nothing.
            Some(_) => d.declared(t.declared_at, tenant, &t.voters, joined)?,
            None => {
                d.declared(t.declared_at, tenant, &t.voters, joined)?;
                tracing::info!(
                    tenant,
                    declared_at = t.declared_at,
                    "a declaration carried by the checkpoint of the default group (this node \
                     was caught up past its entry): its hosted record is written"
                );
                written.push(tenant.clone());
            }
        }
    }
    Ok(written)
}

/// Whether this node ever joined (`cluster_join`): the `default` group's joining marker
/// stands, or its horizon does. Such a node opens every declaration a snapshot carries
/// joining, whatever the horizon says: the horizon may come from a deposed leader's append
/// taken before any term check (review s30 tenants M1), and a group opened joining without
/// need still gets a voter by the founding fallback, while one opened voting without need
/// may vote again after forgetting its vote.
fn ever_joined(data_dir: &Path) -> Result<bool, String> {
    let marker = data_dir.join(crate::cluster_member::JOIN_MARKER);
    let horizon = queenmq_raft::join_horizon::horizon_path(&marker);
    for f in [&marker, &horizon] {
        if f.try_exists()
            .map_err(|e| format!("reading {}: {e}", f.display()))?
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Refuses the open of `default` with tenant groups and snapshot catch-up on while a hosted
/// record names a tenant the loaded state lacks (review s30 tenants H1): a declaration applied
/// by a build before s30 stands in the records only, so a snapshot of this node would carry
/// none of it, and a node caught up by it would neither host the tenant nor stop a second
/// declaration with other voters.
pub fn refuse_unbackfilled(data_dir: &Path, tenants: &DeclaredTenants) -> Result<(), String> {
    let hosted = super::hosted::read_all(data_dir).map_err(|e| format!("{e:#}"))?;
    let lacking: Vec<&str> = hosted
        .iter()
        .map(|(t, _)| t.as_str())
        .filter(|t| !tenants.contains_key(*t))
        .take(8)
        .collect();
    if lacking.is_empty() {
        return Ok(());
    }
    Err(format!(
        "hosted tenant records name tenants the checkpoint of the default group does not \
         carry ({}): they were declared by a build before this one (or this node stopped \
         between a declaration's record and the next checkpoint). With \
         cluster_snapshot_catch_up on, a snapshot would lose them. Run with \
         cluster_snapshot_catch_up=false, as before this build, until a backfill of the \
         declarations exists (docs/deploy.md \"Upgrades\")",
        lacking.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::hosted::read_hosted;
    use queenmq_engine::state::tenants::declare;

    fn tenants(rows: &[(&str, u64, &[u64])]) -> DeclaredTenants {
        let mut t = DeclaredTenants::new();
        for (name, at, voters) in rows {
            declare(&mut t, name, *at, voters);
        }
        t
    }

    #[test]
    fn a_declaration_without_a_record_gets_one_and_is_queued() {
        let dir = tempfile::tempdir().unwrap();
        let d = Declarations::new(dir.path().to_path_buf());
        let t = tenants(&[("acme", 5, &[1, 2, 3]), ("beta", 9, &[2])]);
        assert_eq!(record_missing(&d, &t).unwrap(), ["acme", "beta"]);
        let acme = read_hosted(dir.path(), "acme").unwrap().unwrap();
        assert_eq!((acme.voters, acme.opened), (vec![1, 2, 3], false));
        assert_eq!(
            read_hosted(dir.path(), "beta").unwrap().unwrap().voters,
            [2]
        );
        assert_eq!(d.take(), ["acme", "beta"]);
        // No joining marker: this node did not rejoin.
        let marker = crate::group::registry::tenant_dir(dir.path(), "acme")
            .join(crate::cluster_member::JOIN_MARKER);
        assert!(!marker.exists());
        // Done: a second open writes nothing.
        assert!(record_missing(&d, &t).unwrap().is_empty());
    }

    /// A kill -9 after some records: the next open writes the rest and leaves the standing
    /// ones as they are (their voters are the first declaration's, whatever).
    #[test]
    fn an_open_interrupted_between_records_is_completed_by_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let d = Declarations::new(dir.path().to_path_buf());
        let t = tenants(&[
            ("acme", 5, &[1, 2, 3]),
            ("beta", 9, &[2]),
            ("zeta", 11, &[3]),
        ]);
        // As the crash left it: acme's record stood (opened since), beta's temporary file
        // never renamed.
        crate::group::hosted::record(dir.path(), "acme", &[1, 2, 3]).unwrap();
        crate::group::hosted::mark_opened(dir.path(), "acme").unwrap();
        let hosted = dir.path().join(crate::group::hosted::HOSTED_DIR);
        std::fs::write(hosted.join("beta.tmp"), b"queen-tenant-hosted 1\nvot").unwrap();
        assert_eq!(record_missing(&d, &t).unwrap(), ["beta", "zeta"]);
        let acme = read_hosted(dir.path(), "acme").unwrap().unwrap();
        assert!(acme.opened, "a standing record is left as it was");
        assert_eq!(
            read_hosted(dir.path(), "zeta").unwrap().unwrap().voters,
            [3]
        );
        assert_eq!(
            crate::group::hosted::read_all(dir.path()).unwrap().len(),
            3,
            "and the leftover temporary file is gone"
        );
    }

    /// A rejoining node (joining marker with a horizon): every declaration the snapshot
    /// carries opens joining, the one above the horizon too (review s30 tenants M1: the
    /// horizon may be a deposed leader's, below declarations committed before the wipe).
    #[test]
    fn a_node_that_joined_opens_every_carried_declaration_joining() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join(crate::cluster_member::JOIN_MARKER);
        queenmq_raft::join_horizon::write_horizon(&marker, 10).unwrap();
        // As after the marker's removal: the horizon alone still says the node joined.
        assert!(!marker.exists());
        let d = Declarations::new(dir.path().to_path_buf());
        let t = tenants(&[("acme", 10, &[1, 2, 3]), ("beta", 11, &[2])]);
        assert_eq!(record_missing(&d, &t).unwrap(), ["acme", "beta"]);
        assert!(joining(dir.path(), "acme"));
        assert!(joining(dir.path(), "beta"));
    }

    fn joining(data_dir: &std::path::Path, tenant: &str) -> bool {
        crate::group::registry::tenant_dir(data_dir, tenant)
            .join(crate::cluster_member::JOIN_MARKER)
            .exists()
    }

    /// Review s30 tenants L1: a standing record never opened and without a marker (written by
    /// a build before s28) gets the marker as the replay gives it; an opened one is left.
    #[test]
    fn a_standing_unopened_record_takes_the_marker_step() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(crate::cluster_member::JOIN_MARKER), b"").unwrap();
        crate::group::hosted::record(dir.path(), "acme", &[1, 2, 3]).unwrap();
        crate::group::hosted::record(dir.path(), "beta", &[2]).unwrap();
        crate::group::hosted::mark_opened(dir.path(), "beta").unwrap();
        let d = Declarations::new(dir.path().to_path_buf());
        let t = tenants(&[("acme", 5, &[1, 2, 3]), ("beta", 6, &[2])]);
        assert!(
            record_missing(&d, &t).unwrap().is_empty(),
            "nothing new written"
        );
        assert!(joining(dir.path(), "acme"));
        assert!(
            !joining(dir.path(), "beta"),
            "opened: its marker was due before that open"
        );
        assert_eq!(d.take(), ["acme"]);
    }

    /// Review s30 tenants H1 (a): a record the state lacks (declared before this build) is
    /// refused, naming the tenant; records the state carries pass.
    #[test]
    fn a_record_the_checkpoint_lacks_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(refuse_unbackfilled(dir.path(), &tenants(&[])).is_ok());
        crate::group::hosted::record(dir.path(), "acme", &[1, 2, 3]).unwrap();
        let e = refuse_unbackfilled(dir.path(), &tenants(&[])).unwrap_err();
        assert!(
            e.contains("acme") && e.contains("cluster_snapshot_catch_up=false"),
            "{e}"
        );
        let e = refuse_unbackfilled(dir.path(), &tenants(&[("beta", 3, &[1])])).unwrap_err();
        assert!(e.contains("acme"), "{e}");
        assert!(refuse_unbackfilled(dir.path(), &tenants(&[("acme", 3, &[1, 2, 3])])).is_ok());
    }
}
