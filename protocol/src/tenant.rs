//! Tenant names. A tenant's group lives in a directory named after it
//! (`<data_dir>/tenants/<name>/`), so the name must be one path component that cannot climb
//! out of it or alias another tenant's directory.

/// The tenant of every request without a `tenant` claim (and of every request when JWT
/// authentication is off). Its group keeps the data dir's root layout.
pub const DEFAULT_TENANT: &str = "default";

/// Longest tenant name, in bytes.
pub const MAX_TENANT_LEN: usize = 64;

/// 1..=64 characters of `[A-Za-z0-9_-]`: no `.`, `/` or `\` (nothing that escapes or aliases
/// a directory), nothing a label value or a file system would treat specially.
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
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(format!(
            "the tenant claim {name:?} may only hold the characters A-Z a-z 0-9 _ -"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_leave_or_alias_a_directory_are_refused() {
        for ok in ["default", "a", "Team_7-x", &"x".repeat(64)] {
            assert_eq!(check_tenant_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
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
