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
        // other than the one the first declaration's voters run (review s30 tenants H1). The
        // same voters are a retry (after a "may or may not be done" answer, review s31
        // tenants L1): done, with nothing emitted.
        let standing = self
            .st
            .tenants
            .get(tenant)
            .map(|d| d.voters.as_slice())
            .or_else(|| {
                self.cycle
                    .declared
                    .iter()
                    .find(|(t, _)| t == tenant)
                    .map(|(_, v)| v.as_slice())
            });
        if let Some(first) = standing {
            if first == voters {
                return Ok(());
            }
            return Err(QueenError::bad_request(format!(
                "tenant {tenant:?} is declared already, with voters {first:?}"
            )));
        }
        // The cap where it is exact (review s31 tenants M1): a leader plans only once it has
        // applied its whole log, so the state plus this cycle hold every declaration that
        // committed or still can, whatever any node's place bookkeeping says.
        let groups = u64::try_from(self.st.tenants.len() + self.cycle.declared.len())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        if groups >= self.max_tenants {
            return Err(QueenError::new(
                queenmq_protocol::ErrorCode::Forbidden,
                format!(
                    "the cluster runs at most {} tenant groups (max_tenants) and tenant \
                     {tenant:?} would be one more",
                    self.max_tenants
                ),
            ));
        }
        self.emit(Effect::TenantDeclared(TenantDeclared {
            tenant,
            voters: voters.to_vec(),
        }));
        self.cycle
            .declared
            .push((tenant.to_owned(), voters.to_vec()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::entry::{decode_entry, Effect};
    use crate::plan::fixture::Fixture;
    use queenmq_protocol::ErrorCode;

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

    /// Review s30 tenants H1 (c): a name the state holds is not declared again with other
    /// voters, and nothing is emitted; with the same voters it is a retry (review s31 tenants
    /// L1): answered done, still with nothing emitted. The same within one cycle.
    #[test]
    fn a_declared_tenant_is_not_declared_again() {
        let mut fx = Fixture::new();
        fx.planner()
            .plan_declare_tenant("acme", &[1, 2, 3])
            .unwrap();
        fx.planner()
            .plan_declare_tenant("acme", &[1, 2, 3])
            .expect("the same declaration in the same cycle");
        let e = fx
            .planner()
            .plan_declare_tenant("acme", &[2, 3, 4])
            .unwrap_err();
        assert!(e.to_string().contains("declared already"), "{e}");
        let index = fx.commit().expect("an entry");
        let (_, effects) = decode_entry(&fx.log.entries[&index]).unwrap();
        assert_eq!(effects.len(), 1, "one declaration emitted");
        fx.planner()
            .plan_declare_tenant("acme", &[1, 2, 3])
            .expect("a retry of the committed declaration is done");
        let e = fx
            .planner()
            .plan_declare_tenant("acme", &[2, 3, 4])
            .unwrap_err();
        assert!(e.to_string().contains("declared already"), "{e}");
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert_eq!(fx.commit(), None, "nothing was emitted");
    }

    /// Review s31 tenants M1: the cap counts the committed declarations and this cycle's,
    /// `default` included, whatever a node's places said (a "may or may not be done" answer
    /// freed one, a new leader never held one).
    #[test]
    fn the_planner_refuses_a_declaration_past_max_tenants() {
        let mut fx = Fixture::new();
        fx.max_tenants = 4;
        fx.planner().plan_declare_tenant("a", &[1]).unwrap();
        fx.commit().expect("an entry");
        fx.planner().plan_declare_tenant("b", &[1]).unwrap();
        fx.planner().plan_declare_tenant("c", &[1]).unwrap();
        let e = fx.planner().plan_declare_tenant("d", &[1]).unwrap_err();
        assert_eq!(e.code, ErrorCode::Forbidden, "{e}");
        assert!(e.to_string().contains("max_tenants"), "{e}");
        fx.commit().expect("b's and c's entry");
        let e = fx.planner().plan_declare_tenant("d", &[1]).unwrap_err();
        assert_eq!(e.code, ErrorCode::Forbidden, "{e}");
        fx.planner()
            .plan_declare_tenant("b", &[1])
            .expect("a declared name is not one more");
        assert_eq!(fx.commit(), None, "nothing was emitted");
        for max in [0, 1] {
            fx.max_tenants = max;
            assert!(fx.planner().plan_declare_tenant("z", &[1]).is_err());
        }
    }
}
