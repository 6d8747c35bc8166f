//! Transparent huge pages for the broker's heap: left as the kernel and allocator decide
//! unless `transparent_huge_pages` is false (review s34 p M1: the default stays as before
//! until a quiet machine measures what turning them off costs in throughput).
//!
//! mimalloc madvises its arenas `MADV_HUGEPAGE`, so on a kernel in `madvise` (or `always`)
//! mode a 2 MiB region is made resident whole once touched, and stays resident while one
//! small block lives in it: a purge of the freed blocks around it gives nothing back. A
//! broker holding a million idle partitions kept about 30 B more a partition that way
//! (docs/benchmarks.md "Session 33" and "Session 34"). `MIMALLOC_ALLOW_THP=0` would do the
//! same, but mimalloc reads it before `main`, so a configuration key cannot set it; the
//! process-wide `PR_SET_THP_DISABLE` flag it sets then is what this sets instead, as early
//! as the configuration is known. The flag outranks `MADV_HUGEPAGE` for every later page
//! fault; pages made huge before it stay so (the few MB touched before the configuration was
//! read). It is inherited across fork and exec (the broker starts no children).

/// What start-up did about huge pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugePages {
    /// Turned off for the process now.
    TurnedOff,
    /// Already off when the broker started (set by whatever started it).
    AlreadyOff,
    /// Left as the kernel and allocator decide (`transparent_huge_pages = true`).
    Left,
}

/// Applies `transparent_huge_pages`. An error (a kernel without the flag, a seccomp filter
/// refusing `prctl`) leaves huge pages as they were: it costs memory, never correctness.
pub fn apply(allow: bool) -> std::io::Result<HugePages> {
    if allow {
        return Ok(HugePages::Left);
    }
    if disabled()? {
        return Ok(HugePages::AlreadyOff);
    }
    disable()?;
    Ok(HugePages::TurnedOff)
}

/// Whether the process's `PR_SET_THP_DISABLE` flag is set.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn disabled() -> std::io::Result<bool> {
    // SAFETY: PR_GET_THP_DISABLE takes no pointers; the unused arguments must be 0.
    let r = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
    match r {
        0 => Ok(false),
        1 => Ok(true),
        // Linux 6.18's "disabled except where advised" (review s34 p L1): mimalloc advises
        // its arenas, so they still get huge pages; not off for this purpose.
        r if r > 1 => Ok(false),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn disable() -> std::io::Result<()> {
    // SAFETY: PR_SET_THP_DISABLE takes no pointers; the unused arguments must be 0.
    let r = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
pub fn disabled() -> std::io::Result<bool> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

#[cfg(not(target_os = "linux"))]
fn disable() -> std::io::Result<()> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    // One test: the flag is process-wide, so the order of two tests would matter.
    #[test]
    fn allowed_leaves_the_flag_and_the_default_sets_it_once() {
        let before = disabled().expect("PR_GET_THP_DISABLE");
        assert_eq!(apply(true).expect("allowed"), HugePages::Left);
        assert_eq!(disabled().expect("get"), before, "true touches nothing");
        let first = apply(false).expect("off");
        assert!(
            disabled().expect("get"),
            "the flag is set after apply(false)"
        );
        if !before {
            assert_eq!(first, HugePages::TurnedOff);
        }
        assert_eq!(apply(false).expect("again"), HugePages::AlreadyOff);
    }
}
