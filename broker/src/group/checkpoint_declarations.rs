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

/// Whether this node may still be catching up from a join (`cluster_join`): the `default`
/// group's joining marker stands, or its horizon does (the apply removes it once past it with
/// the marker gone, and what it bounded is then in the opened ledger, review s32 M-3). Such a
/// node opens every declaration a snapshot carries
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

/// Puts into the loaded state every tenant a hosted record names and the state lacks, at the
/// checkpoint's applied index (review s30 tenants H1). Two ways a record stands without its
/// declaration in the checkpoint: the declaration was applied by a build before s30 (whose
/// checkpoints had no section 9), or this node stopped between a declaration's record and the
/// next checkpoint (then the replay of the log re-applies the entry, and first-wins keeps this
/// one, with the same voters: records are first-wins too). Without it a snapshot of this node
/// would carry none of the tenant, so a node caught up by it would neither host the tenant
/// nor refuse a second declaration with other voters. Refusing the start instead (the first
/// fix) also refused a node killed between a declaration's record and the next checkpoint.
/// The index is only a bound the section's decoder checks: the joining rule of a node that
/// ever joined ignores it (`record_missing`), and a node that never joined writes no marker.
/// With no applied index there is no checkpoint, so nothing was reclaimed and the replay
/// re-applies every declaration. A record whose name or voters effect 67 refuses stops the
/// start (it would make every later checkpoint undecodable). The tenants put in.
pub fn backfill_from_records(
    data_dir: &Path,
    tenants: &mut DeclaredTenants,
    applied: Option<u64>,
) -> Result<Vec<String>, String> {
    let Some(at) = applied.filter(|a| *a >= 1) else {
        return Ok(Vec::new());
    };
    let hosted = super::hosted::read_all(data_dir).map_err(|e| format!("{e:#}"))?;
    let mut put = Vec::new();
    for (tenant, voters) in hosted {
        if tenants.contains_key(&tenant) {
            continue;
        }
        queenmq_engine::entry_tenants::check(&tenant, &voters).map_err(|e| {
            format!("the hosted record of tenant {tenant:?} holds what no declaration can: {e}")
        })?;
        queenmq_engine::state::tenants::declare(tenants, &tenant, at, &voters);
        tracing::warn!(
            tenant,
            at,
            "a hosted tenant record the checkpoint of the default group does not carry (declared \
             by a build before this one, or this node stopped before the next checkpoint): put \
             into the state so that its checkpoints and snapshots carry it"
        );
        put.push(tenant);
    }
    Ok(put)
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
            "and the leftover temporary file is no record (start removes it)"
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
        // As after the marker's removal and before the apply passed the horizon: the horizon
        // alone still says the node joined.
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
    fn a_record_the_checkpoint_lacks_is_put_into_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = tenants(&[]);
        assert!(backfill_from_records(dir.path(), &mut t, Some(7))
            .unwrap()
            .is_empty());
        crate::group::hosted::record(dir.path(), "acme", &[1, 2, 3]).unwrap();
        crate::group::hosted::record(dir.path(), "beta", &[2]).unwrap();
        // No checkpoint: the replay re-applies every declaration, nothing is put in.
        assert!(backfill_from_records(dir.path(), &mut t, None)
            .unwrap()
            .is_empty());
        assert!(t.is_empty());
        // One carried already (its own index and voters kept), one put in at the applied index.
        let mut t = tenants(&[("beta", 3, &[2])]);
        assert_eq!(
            backfill_from_records(dir.path(), &mut t, Some(7)).unwrap(),
            ["acme"]
        );
        assert_eq!(
            (t["acme"].declared_at, t["acme"].voters.clone()),
            (7, vec![1, 2, 3])
        );
        assert_eq!(
            (t["beta"].declared_at, t["beta"].voters.clone()),
            (3, vec![2])
        );
        // The state round-trips through section 9 with the applied index it was put at.
        let mut w = queenmq_engine::codec::Writer::default();
        queenmq_engine::state::tenants::encode(&mut w, &t);
        let mut r = queenmq_engine::codec::Reader::new(&w.buf);
        assert_eq!(
            queenmq_engine::state::tenants::decode(&mut r, Some(7)).unwrap(),
            t
        );
        // Done: a second open puts nothing.
        assert!(backfill_from_records(dir.path(), &mut t, Some(7))
            .unwrap()
            .is_empty());
    }
}
