//! Tenant names. A tenant's group lives in a directory named after it
//! (`<data_dir>/tenants/<name>/`), so the name must be one path component that cannot climb
//! out of it or alias another tenant's directory.

/// The tenant of every request without a `tenant` claim (and of every request when JWT
/// authentication is off). Its group keeps the data dir's root layout.
pub const DEFAULT_TENANT: &str = "default";

/// Longest tenant name, in bytes.
pub const MAX_TENANT_LEN: usize = 64;

/// 1..=64 characters of `[a-z0-9_-]`: no `.`, `/` or `\` (nothing that escapes a directory),
/// and lower case only, so two names never alias one directory on a case-insensitive file
/// system (APFS, casefolded ext4, SMB); nothing a label value would treat specially.
pub fn check_tenant_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the tenant claim is empty".to_owned());
    }
    if name.len() > MAX_TENANT_LEN {
        return Err(format!(
            "the tenant claim is longer than {MAX_TENANT_LEN} characters"
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        return Err(format!(
            "the tenant claim {name:?} may only hold the characters a-z 0-9 _ - (lower case: \
             a tenant is a directory, and file systems that ignore case would alias two names)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_leave_or_alias_a_directory_are_refused() {
        for ok in ["default", "a", "team_7-x", &"x".repeat(64)] {
            assert_eq!(check_tenant_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "Acme",
            "DEFAULT",
            ".",
            "..",
            "a/b",
            "../x",
            "a b",
            "é",
            "a.b",
            "a\\b",
            &"x".repeat(65),
        ] {
            assert!(check_tenant_name(bad).is_err(), "{bad:?}");
        }
    }
}
