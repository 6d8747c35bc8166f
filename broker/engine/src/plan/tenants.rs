//! A tenant's declaration in a cluster (effect 67, docs/cluster.md "Tenants"): planned in the
//! `default` group only, checked as the decoder checks it. Idempotence is the broker's: the
//! first committed declaration of a tenant writes its hosted record on every node, and a later
//! one finds the record standing.

use queenmq_protocol::{QueenError, DEFAULT_TENANT};

use super::Planner;
use crate::entry::Effect;
use crate::entry_tenants::{check, TenantDeclared};

impl Planner<'_> {
    pub fn plan_declare_tenant(&mut self, tenant: &str, voters: &[u64]) -> Result<(), QueenError> {
        if self.tenant != DEFAULT_TENANT {
            return Err(QueenError::bad_request(
                "a tenant is declared in the default tenant's group only",
            ));
        }
        check(tenant, voters).map_err(QueenError::bad_request)?;
        // Declared already (first wins): a second declaration could only name other voters
        // on a node that lacks the first one's record, and that node would then found a group
        // other than the one the first declaration's voters run (review s30 tenants H1).
        if self.st.tenants.contains_key(tenant) {
            return Err(QueenError::bad_request(format!(
                "tenant {tenant:?} is declared already"
            )));
        }
        self.emit(Effect::TenantDeclared(TenantDeclared {
            tenant,
            voters: voters.to_vec(),
        }));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::entry::{decode_entry, Effect};
    use crate::plan::fixture::Fixture;

    #[test]
    fn a_declaration_is_one_effect_67_and_a_bad_one_emits_nothing() {
        let mut fx = Fixture::new();
        for (tenant, voters) in [
            ("default", &[1u64][..]),
            ("Acme", &[1][..]),
            ("acme", &[][..]),
            ("acme", &[3, 2][..]),
        ] {
            assert!(fx.planner().plan_declare_tenant(tenant, voters).is_err());
        }
        assert_eq!(fx.commit(), None, "nothing was emitted");
        fx.planner()
            .plan_declare_tenant("acme", &[1, 2, 3])
            .unwrap();
        let index = fx.commit().expect("an entry");
        let entry = fx.log.entries[&index].clone();
        let (_, effects) = decode_entry(&entry).unwrap();
        assert_eq!(effects.len(), 1);
        match &effects[0].0 {
            Effect::TenantDeclared(t) => {
                assert_eq!((t.tenant, t.voters.as_slice()), ("acme", &[1, 2, 3][..]))
            }
            other => panic!("{other:?}"),
        }
        fx.assert_replays();
    }

    /// Review s30 tenants H1 (c): a name the state holds is not declared again, whatever the
    /// voters, and nothing is emitted.
    #[test]
    fn a_declared_tenant_is_not_declared_again() {
        let mut fx = Fixture::new();
        fx.planner()
            .plan_declare_tenant("acme", &[1, 2, 3])
            .unwrap();
        fx.commit().expect("an entry");
        for voters in [&[1u64, 2, 3][..], &[2, 3, 4][..]] {
            let e = fx
                .planner()
                .plan_declare_tenant("acme", voters)
                .unwrap_err();
            assert!(e.to_string().contains("declared already"), "{e}");
        }
        assert_eq!(fx.commit(), None, "nothing was emitted");
    }
}
