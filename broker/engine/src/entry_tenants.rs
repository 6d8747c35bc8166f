//! Effect 67, a tenant declared in a cluster (docs/cluster.md "Tenants",
//! docs/storage-format.md "Effects"): written in the `default` group's log only, it tells every
//! node which tenant groups exist and with which voters. It changes no state of the engine: the
//! broker applies it once committed, writing the tenant's hosted record and opening its group.

use crate::codec::{DecodeError, Reader, Writer};
use queenmq_protocol::{check_tenant_name, DEFAULT_TENANT};

pub const K_TENANT_DECLARED: u8 = 67;

/// The most voters a declaration names: far above any membership this broker runs, low
/// enough that a damaged count cannot make the decoder allocate much.
pub const MAX_TENANT_VOTERS: usize = 64;

/// `tenant`'s group is founded with these voters (node ids, ascending, each in 1 ..= 2^32-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantDeclared<'a> {
    pub tenant: &'a str,
    pub voters: Vec<u64>,
}

/// Checks a declaration as the decoder does: a tenant name a token could carry (not
/// `default`, whose group is the cluster's own), 1 ..= [`MAX_TENANT_VOTERS`] voters ascending,
/// each a valid node id.
pub fn check(tenant: &str, voters: &[u64]) -> Result<(), String> {
    check_tenant_name(tenant)?;
    if tenant == DEFAULT_TENANT {
        return Err("the default tenant is never declared".into());
    }
    if voters.is_empty() || voters.len() > MAX_TENANT_VOTERS {
        return Err(format!(
            "{} voters, outside 1 ..= {MAX_TENANT_VOTERS}",
            voters.len()
        ));
    }
    if voters
        .iter()
        .any(|v| !(1..=u64::from(u32::MAX)).contains(v))
    {
        return Err(format!("a voter id outside 1 ..= 2^32-1 in {voters:?}"));
    }
    if voters.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("voters {voters:?} are not strictly ascending"));
    }
    Ok(())
}

/// `67 u8 | tenant str | count u16 | voter u64 x count`.
pub fn encode(w: &mut Writer, e: &TenantDeclared<'_>) {
    w.u8(K_TENANT_DECLARED);
    w.str(e.tenant);
    // `check` bounds the count far below u16::MAX.
    w.u16(e.voters.len() as u16);
    for v in &e.voters {
        w.u64(*v);
    }
}

/// The body after the kind byte.
pub fn decode<'a>(r: &mut Reader<'a>) -> Result<TenantDeclared<'a>, DecodeError> {
    let tenant = r.str()?;
    let n = usize::from(r.u16()?);
    // The count is checked before anything is allocated for it.
    if n == 0 || n > MAX_TENANT_VOTERS {
        return Err(r.malformed(format!(
            "tenant declaration with {n} voters, outside 1 ..= {MAX_TENANT_VOTERS}"
        )));
    }
    let mut voters = Vec::with_capacity(n);
    for _ in 0..n {
        voters.push(r.u64()?);
    }
    check(tenant, &voters).map_err(|e| r.malformed(format!("tenant declaration: {e}")))?;
    Ok(TenantDeclared { tenant, voters })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(e: &TenantDeclared<'_>) -> Vec<u8> {
        let mut w = Writer::default();
        encode(&mut w, e);
        w.buf
    }

    #[test]
    fn a_declaration_round_trips_byte_by_byte() {
        let e = TenantDeclared {
            tenant: "acme",
            voters: vec![1, 2, 3],
        };
        let b = round_trip(&e);
        let mut want = vec![67u8];
        want.extend_from_slice(&4u32.to_le_bytes());
        want.extend_from_slice(b"acme");
        want.extend_from_slice(&3u16.to_le_bytes());
        for v in [1u64, 2, 3] {
            want.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(b, want);
        let mut r = Reader::new(&b[1..]);
        assert_eq!(decode(&mut r).unwrap(), e);
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn bad_declarations_are_refused_by_the_decoder() {
        let bad = |tenant: &str, voters: &[u64], count: u16| {
            let mut w = Writer::default();
            w.str(tenant);
            w.u16(count);
            for v in voters {
                w.u64(*v);
            }
            let b = w.buf;
            decode(&mut Reader::new(&b)).map(|_| ())
        };
        assert!(bad("acme", &[1, 2], 2).is_ok(), "the control");
        for (tenant, voters, count) in [
            ("acme", &[][..], 0u16),
            ("default", &[1][..], 1),
            ("Acme", &[1][..], 1),
            ("../x", &[1][..], 1),
            ("acme", &[2, 1][..], 2),
            ("acme", &[1, 1][..], 2),
            ("acme", &[0][..], 1),
            ("acme", &[1 << 32][..], 1),
            // A count past the bound is refused before any voter is read.
            ("acme", &[1][..], 65),
            ("acme", &[1][..], u16::MAX),
            // Truncated: fewer voters than counted.
            ("acme", &[1][..], 2),
        ] {
            assert!(
                bad(tenant, voters, count).is_err(),
                "{tenant} {voters:?} {count}"
            );
        }
    }
}
