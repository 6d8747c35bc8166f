//! The tenants declared in a cluster (effect 67), as the `default` group's state holds them,
//! and their checkpoint section (tag 9, docs/storage-format.md "Tenant declarations section").
//! A node caught up by a snapshot of `default` past a declaration never applies its entry: the
//! section carries what the entry did, so the broker can write the tenant's hosted record from
//! the checkpoint instead (docs/cluster.md "Tenants").

use std::collections::BTreeMap;

use crate::codec::{DecodeError, Reader, Writer};
use crate::entry_tenants::{check, MAX_TENANT_VOTERS};

/// One declaration that won: the first committed for its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredTenant {
    /// The log index of the entry that declared it (the broker's joining rule reads it).
    pub declared_at: u64,
    /// The voters its group is founded with, ascending.
    pub voters: Vec<u64>,
}

/// Declared tenants by name.
pub type DeclaredTenants = BTreeMap<String, DeclaredTenant>;

/// Keeps the declaration committed at `index` unless the name has one: the first wins, as
/// the hosted records do, so a second declaration changes nothing on any node.
pub fn declare(tenants: &mut DeclaredTenants, tenant: &str, index: u64, voters: &[u64]) {
    if !tenants.contains_key(tenant) {
        tenants.insert(
            tenant.to_owned(),
            DeclaredTenant {
                declared_at: index,
                voters: voters.to_vec(),
            },
        );
    }
}

/// `count u32`, then per tenant in name order: name str, declared_at u64, voter count u16,
/// voter ids u64 x count.
pub fn encode(w: &mut Writer, tenants: &DeclaredTenants) {
    // Bounded by the declarations committed, each a distinct name of at most 64 bytes.
    w.u32(u32::try_from(tenants.len()).unwrap_or(u32::MAX));
    for (name, t) in tenants {
        w.str(name);
        w.u64(t.declared_at);
        // Apply keeps only what `check` passed: at most 64 voters.
        w.u16(u16::try_from(t.voters.len()).unwrap_or(u16::MAX));
        for v in &t.voters {
            w.u64(*v);
        }
    }
}

/// Refuses what apply never keeps: names out of order or repeated, a name or voters effect
/// 67's decoder refuses, and a `declared_at` of 0 or past the checkpoint's `applied` index
/// (its entry would not have been applied yet).
pub fn decode(r: &mut Reader<'_>, applied: Option<u64>) -> Result<DeclaredTenants, DecodeError> {
    // A row is at least a 4-byte name length, a 1-byte name, declared_at, a count, one voter.
    let n = r.count(4 + 1 + 8 + 2 + 8)?;
    let applied = applied.unwrap_or(0);
    let mut out = DeclaredTenants::new();
    for _ in 0..n {
        let name = r.str()?;
        let declared_at = r.u64()?;
        let count = usize::from(r.u16()?);
        // Checked before anything is allocated for it.
        if count == 0 || count > MAX_TENANT_VOTERS {
            return Err(r.malformed(format!(
                "declared tenant {name:?} with {count} voters, outside 1 ..= {MAX_TENANT_VOTERS}"
            )));
        }
        let mut voters = Vec::with_capacity(count);
        for _ in 0..count {
            voters.push(r.u64()?);
        }
        check(name, &voters).map_err(|e| r.malformed(format!("declared tenant: {e}")))?;
        if declared_at == 0 || declared_at > applied {
            return Err(r.malformed(format!(
                "tenant {name:?} declared at {declared_at}, outside 1 ..= the applied {applied}"
            )));
        }
        if out
            .keys()
            .next_back()
            .is_some_and(|last| last.as_str() >= name)
        {
            return Err(r.malformed(format!(
                "declared tenant {name:?} repeated or out of name order"
            )));
        }
        out.insert(
            name.to_owned(),
            DeclaredTenant {
                declared_at,
                voters,
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(w: &mut Writer, name: &str, at: u64, count: u16, voters: &[u64]) {
        w.str(name);
        w.u64(at);
        w.u16(count);
        for v in voters {
            w.u64(*v);
        }
    }

    fn section(rows: &[(&str, u64, u16, &[u64])]) -> Vec<u8> {
        let mut w = Writer::default();
        w.u32(rows.len() as u32);
        for (name, at, count, voters) in rows {
            row(&mut w, name, *at, *count, voters);
        }
        w.buf
    }

    fn read(b: &[u8], applied: Option<u64>) -> Result<DeclaredTenants, DecodeError> {
        let mut r = Reader::new(b);
        let t = decode(&mut r, applied)?;
        assert!(r.is_done());
        Ok(t)
    }

    #[test]
    fn the_first_declaration_wins_and_the_section_round_trips() {
        let mut t = DeclaredTenants::new();
        declare(&mut t, "zeta", 9, &[2]);
        declare(&mut t, "acme", 4, &[1, 2, 3]);
        declare(&mut t, "acme", 7, &[5]);
        assert_eq!(t["acme"].declared_at, 4);
        assert_eq!(t["acme"].voters, [1, 2, 3]);
        let mut w = Writer::default();
        encode(&mut w, &t);
        assert_eq!(
            w.buf,
            section(&[("acme", 4, 3, &[1, 2, 3]), ("zeta", 9, 1, &[2])]),
            "name order, the layout of the doc"
        );
        assert_eq!(read(&w.buf, Some(9)).unwrap(), t);
    }

    #[test]
    fn what_apply_never_keeps_is_refused() {
        let ok: (&str, u64, u16, &[u64]) = ("acme", 5, 2, &[1, 2]);
        assert!(read(&section(&[ok]), Some(5)).is_ok(), "the control");
        for (why, rows, applied) in [
            ("repeated", vec![ok, ok], Some(5)),
            ("out of order", vec![("beta", 1, 1, &[1][..]), ok], Some(5)),
            ("default", vec![("default", 1, 1, &[1][..])], Some(5)),
            ("a bad name", vec![("Acme", 1, 1, &[1][..])], Some(5)),
            ("a path", vec![("../x", 1, 1, &[1][..])], Some(5)),
            ("no voters", vec![("acme", 1, 0, &[][..])], Some(5)),
            ("65 voters", vec![("acme", 1, 65, &[1][..])], Some(5)),
            (
                "u16::MAX voters",
                vec![("acme", 1, u16::MAX, &[1][..])],
                Some(5),
            ),
            ("descending", vec![("acme", 1, 2, &[2, 1][..])], Some(5)),
            ("repeated voter", vec![("acme", 1, 2, &[1, 1][..])], Some(5)),
            ("voter 0", vec![("acme", 1, 1, &[0][..])], Some(5)),
            ("voter 2^32", vec![("acme", 1, 1, &[1 << 32][..])], Some(5)),
            ("declared at 0", vec![("acme", 0, 1, &[1][..])], Some(5)),
            ("above applied", vec![("acme", 6, 1, &[1][..])], Some(5)),
            ("u64::MAX", vec![("acme", u64::MAX, 1, &[1][..])], Some(5)),
            ("no applied", vec![("acme", 1, 1, &[1][..])], None),
            ("truncated", vec![("acme", 1, 2, &[1][..])], Some(5)),
        ] {
            assert!(read(&section(&rows), applied).is_err(), "{why}");
        }
        // A count far past the bytes is refused before anything is allocated.
        let mut w = Writer::default();
        w.u32(u32::MAX);
        assert!(read(&w.buf, Some(5)).is_err());
    }
}
