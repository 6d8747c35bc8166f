//! Applying a committed entry to the state: the one path of a follower, a replay at start and
//! the leader.

use crate::codec::DecodeError;
use crate::entry::{decode_entry, Effect};
use crate::state::{Loc, State};

/// Applies one committed entry. The leader already applied the effects while planning (its
/// `last_cycle` is at the entry's cycle), so for it only the log position moves.
pub fn apply_entry(
    st: &mut State,
    index: u64,
    term: u64,
    payload: &[u8],
) -> Result<(), DecodeError> {
    apply_entry_noting(st, index, term, payload, &mut Vec::new())
}

/// [`apply_entry`], also pushing onto `declared` every tenant the entry declares (effect 67),
/// on the leader as on a follower and on every replay: what the broker does on a committed
/// declaration must happen wherever the entry commits, and be idempotent.
pub fn apply_entry_noting(
    st: &mut State,
    index: u64,
    term: u64,
    payload: &[u8],
    declared: &mut Vec<(String, Vec<u64>)>,
) -> Result<(), DecodeError> {
    let entry = Committed::decode(payload)?;
    declared.extend(entry.declarations());
    entry.apply(st, index, term);
    Ok(())
}

/// A committed entry decoded but not yet applied: what it declares can be acted on (and made
/// durable) before the state's `applied` passes its index, so a checkpoint can never record
/// the entry applied while its declaration is not (review s27 tenants H2).
pub struct Committed<'a> {
    header: crate::entry::EntryHeader,
    effects: Vec<(Effect<'a>, u32)>,
}

impl<'a> Committed<'a> {
    pub fn decode(payload: &'a [u8]) -> Result<Committed<'a>, DecodeError> {
        let (header, effects) = decode_entry(payload)?;
        Ok(Committed { header, effects })
    }

    /// Every tenant the entry declares, with its voters.
    pub fn declarations(&self) -> Vec<(String, Vec<u64>)> {
        self.effects
            .iter()
            .filter_map(|(e, _)| match e {
                Effect::TenantDeclared(t) => Some((t.tenant.to_string(), t.voters.clone())),
                _ => None,
            })
            .collect()
    }

    /// Applies the entry at `index`: its effects if the state has not planned its cycle yet,
    /// and the log position and the tenants it declares (first wins) in every case.
    pub fn apply(&self, st: &mut State, index: u64, term: u64) {
        let header = &self.header;
        // On the leader too, whose planning applied the effects before the index was known.
        for (e, _) in &self.effects {
            if let Effect::TenantDeclared(t) = e {
                crate::state::tenants::declare(&mut st.tenants, t.tenant, index, &t.voters);
            }
        }
        if header.cycle > st.last_cycle {
            for (e, pos) in &self.effects {
                st.apply(e, header.now_us, Loc { index, pos: *pos });
            }
            st.last_cycle = header.cycle;
            st.last_now_us = st.last_now_us.max(header.now_us);
        }
        st.applied = Some((index, term));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::EntryBuilder;
    use crate::entry_tenants::TenantDeclared;

    #[test]
    fn a_declaration_is_noted_on_the_leader_and_on_a_follower_alike() {
        let mut b = EntryBuilder::new(5, 1_000);
        b.push(&Effect::TenantDeclared(TenantDeclared {
            tenant: "acme",
            voters: vec![1, 2, 3],
        }));
        let payload = b.finish();
        let want = vec![("acme".to_string(), vec![1, 2, 3])];
        // A follower: the cycle is new to its state.
        let mut follower = State::default();
        let mut noted = Vec::new();
        apply_entry_noting(&mut follower, 7, 2, &payload, &mut noted).unwrap();
        assert_eq!(noted, want);
        assert_eq!(follower.applied, Some((7, 2)));
        // The leader planned the cycle already: the effects are not applied again, but the
        // declaration is still noted, since it is the commit the broker waits for.
        let mut leader = State {
            last_cycle: 5,
            ..State::default()
        };
        let mut noted = Vec::new();
        apply_entry_noting(&mut leader, 7, 2, &payload, &mut noted).unwrap();
        assert_eq!(noted, want);
        // Both keep it at the entry's index (the leader's planning could not: it had none),
        // and a later declaration of the name changes nothing (first wins).
        let kept = crate::state::tenants::DeclaredTenant {
            declared_at: 7,
            voters: vec![1, 2, 3],
        };
        for st in [&mut follower, &mut leader] {
            assert_eq!(st.tenants.get("acme"), Some(&kept));
            let mut b = EntryBuilder::new(6, 2_000);
            b.push(&Effect::TenantDeclared(TenantDeclared {
                tenant: "acme",
                voters: vec![4],
            }));
            apply_entry(st, 9, 2, &b.finish()).unwrap();
            assert_eq!(st.tenants.get("acme"), Some(&kept));
            assert_eq!(st.tenants.len(), 1);
        }
    }
}
