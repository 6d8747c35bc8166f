//! The tenant declarations a checkpoint of the `default` group carries (engine section 9),
//! acted on before the group's Raft starts. A node caught up by a snapshot of `default` past
//! a declaration never applies its entry, so its apply never writes the tenant's hosted
//! record: this writes the record (and the joining marker) as the replay of the entry at
//! `declared_at` would have (`Declarations::applied`), then the registry opens the groups as
//! it does for any record (docs/cluster.md "Tenants", docs/storage-format.md "Tenant
//! declarations section (tag 9)").

use queenmq_engine::state::tenants::DeclaredTenants;

use super::hosted::{read_hosted, Declarations};

/// Writes the record of every declaration in `tenants` that has none here, in name order,
/// and queues each for opening. Idempotent: a crash between two records leaves the ones
/// written, and the next open writes the rest. Blocking (fsyncs): call it off the runtime.
/// The tenants whose record this wrote.
pub fn record_missing(d: &Declarations, tenants: &DeclaredTenants) -> Result<Vec<String>, String> {
    let mut written = Vec::new();
    for (tenant, t) in tenants {
        let standing = read_hosted(d.data_dir(), tenant).map_err(|e| format!("{e:#}"))?;
        if standing.is_some() {
            continue;
        }
        d.applied(t.declared_at, tenant, &t.voters)?;
        tracing::info!(
            tenant,
            declared_at = t.declared_at,
            "a declaration carried by the checkpoint of the default group (this node was \
             caught up past its entry): its hosted record is written"
        );
        written.push(tenant.clone());
    }
    Ok(written)
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

    /// A rejoining node (joining marker with a horizon): a declaration at or below the
    /// horizon may predate its wipe, so its group opens joining, as the replay would open it;
    /// one above is founded as on any node.
    #[test]
    fn the_joining_rule_of_the_replay_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join(crate::cluster_member::JOIN_MARKER);
        queenmq_raft::join_horizon::write_horizon(&marker, 10).unwrap();
        let d = Declarations::new(dir.path().to_path_buf());
        let t = tenants(&[("acme", 10, &[1, 2, 3]), ("beta", 11, &[2])]);
        assert_eq!(record_missing(&d, &t).unwrap(), ["acme", "beta"]);
        let joining = |tenant: &str| {
            crate::group::registry::tenant_dir(dir.path(), tenant)
                .join(crate::cluster_member::JOIN_MARKER)
                .exists()
        };
        assert!(joining("acme"));
        assert!(!joining("beta"));
    }
}
