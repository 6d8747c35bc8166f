//! Tenant declarations under way on this node. Each holds a place under `max_tenants` from
//! before it is proposed until its group is open here, so N simultaneous first writes of N
//! new names cannot all pass the cap's check and all commit (review s27 tenants M1).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use queenmq_protocol::check_tenant_name;

use super::hosted::HOSTED_DIR;

#[derive(Default)]
pub struct Declaring {
    /// Each name with the number of declarations of it under way.
    names: Mutex<BTreeMap<String, usize>>,
}

/// A place held for one declaration; given back when dropped.
pub struct Reservation {
    of: Arc<Declaring>,
    tenant: String,
}

impl Declaring {
    /// Holds a place for `tenant` unless the names already taken (`taken`: open groups and
    /// hosted records; and the other declarations under way) fill `max`. A name already
    /// among them takes no new place.
    pub fn reserve(
        self: &Arc<Self>,
        tenant: &str,
        taken: &BTreeSet<String>,
        max: usize,
    ) -> Option<Reservation> {
        let mut names = self.lock();
        let mut all: BTreeSet<&str> = taken.iter().map(String::as_str).collect();
        all.extend(names.keys().map(String::as_str));
        if !all.contains(tenant) && all.len() >= max {
            return None;
        }
        *names.entry(tenant.to_owned()).or_default() += 1;
        Some(Reservation {
            of: self.clone(),
            tenant: tenant.to_owned(),
        })
    }

    /// How many names are reserved for which `counted` is false (not yet open groups).
    pub fn reserved_besides(&self, counted: impl Fn(&str) -> bool) -> usize {
        self.lock().keys().filter(|n| !counted(n)).count()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, usize>> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut names = self.of.lock();
        if let Some(n) = names.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                names.remove(&self.tenant);
            }
        }
    }
}

/// The tenants the hosted records name, read only (a record being written, `*.tmp`, is not
/// one yet, and is left alone: its writer renames it).
pub fn hosted_names(data_dir: &Path) -> std::io::Result<BTreeSet<String>> {
    let entries = match std::fs::read_dir(data_dir.join(HOSTED_DIR)) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(e),
    };
    let mut names = BTreeSet::new();
    for entry in entries {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if check_tenant_name(&name).is_ok() {
            names.insert(name);
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn simultaneous_declarations_cannot_pass_the_cap_together() {
        let d = Arc::new(Declaring::default());
        let taken = set(&["default"]);
        // Cap 3: `default` and two declarations under way fill it; a third new name is
        // refused while they hold their places, whatever the open groups say.
        let a = d.reserve("a", &taken, 3).unwrap();
        let b = d.reserve("b", &taken, 3).unwrap();
        assert!(d.reserve("c", &taken, 3).is_none());
        // A name already reserved or taken takes no new place.
        let a2 = d.reserve("a", &taken, 3).unwrap();
        assert!(d.reserve("default", &taken, 3).is_some());
        assert_eq!(d.reserved_besides(|n| n == "b"), 1);
        drop(a);
        assert!(
            d.reserve("c", &taken, 3).is_none(),
            "a's second declaration holds it"
        );
        drop(a2);
        drop(b);
        assert!(d.reserve("c", &taken, 3).is_some());
        // Hosted records count: a tenant declared earlier holds its place for good.
        assert!(d.reserve("d", &set(&["default", "x", "y"]), 3).is_none());
    }

    #[test]
    fn hosted_names_skip_a_record_being_written() {
        let dir = tempfile::tempdir().unwrap();
        assert!(hosted_names(dir.path()).unwrap().is_empty());
        let hosted = dir.path().join(HOSTED_DIR);
        std::fs::create_dir(&hosted).unwrap();
        std::fs::write(hosted.join("acme"), b"r").unwrap();
        std::fs::write(hosted.join("beta.tmp"), b"r").unwrap();
        assert_eq!(hosted_names(dir.path()).unwrap(), set(&["acme"]));
        assert!(hosted.join("beta.tmp").exists());
    }
}
