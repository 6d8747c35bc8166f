//! How much memory this process may use: the cgroup limit (v2, then v1) when one is set,
//! else physical RAM. Only text files are read (no libc).

use std::path::Path;

/// The memory limit of this process's cgroup, if one is set.
pub fn cgroup_limit() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok();
    cgroup_limit_in(Path::new("/sys/fs/cgroup"), own.as_deref())
}

/// `root` is where cgroupfs is mounted; `own` is `/proc/self/cgroup`.
pub fn cgroup_limit_in(root: &Path, own: Option<&str>) -> Option<u64> {
    // v2: "0::/some/path" names our cgroup; a container usually sees its own at the root.
    if let Some(path) = own.and_then(|t| t.lines().find_map(|l| l.strip_prefix("0::"))) {
        let rel = path.trim().trim_start_matches('/');
        for dir in [root.join(rel), root.to_path_buf()] {
            if let Some(v) = read_limit(&dir.join("memory.max")) {
                return Some(v);
            }
        }
    }
    if let Some(v) = read_limit(&root.join("memory.max")) {
        return Some(v);
    }
    read_limit(&root.join("memory").join("memory.limit_in_bytes"))
}

/// A limit file's value; "max" (v2) and the page-rounded "unlimited" of v1 (close to
/// i64::MAX) are no limit.
fn read_limit(path: &Path) -> Option<u64> {
    parse_limit(&std::fs::read_to_string(path).ok()?)
}

pub fn parse_limit(text: &str) -> Option<u64> {
    let v = text.trim().parse::<u64>().ok()?;
    (v > 0 && v < (1 << 60)).then_some(v)
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
pub fn physical_ram() -> Option<u64> {
    parse_meminfo(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

pub fn parse_meminfo(text: &str) -> Option<u64> {
    let (_, value) = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(key, _)| *key == "MemTotal")?;
    crate::scrape::memory::kib(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_limit_of_our_own_cgroup() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("kubepods/pod1")).unwrap();
        std::fs::write(d.path().join("kubepods/pod1/memory.max"), "2147483648\n").unwrap();
        std::fs::write(d.path().join("memory.max"), "max\n").unwrap();
        assert_eq!(
            cgroup_limit_in(d.path(), Some("0::/kubepods/pod1\n")),
            Some(2 << 30)
        );
    }

    #[test]
    fn v2_max_means_no_limit() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("memory.max"), "max\n").unwrap();
        assert_eq!(cgroup_limit_in(d.path(), Some("0::/\n")), None);
    }

    #[test]
    fn v1_limit_and_its_unlimited_value() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("memory")).unwrap();
        let f = d.path().join("memory/memory.limit_in_bytes");
        std::fs::write(&f, "536870912\n").unwrap();
        assert_eq!(cgroup_limit_in(d.path(), None), Some(512 << 20));
        std::fs::write(&f, "9223372036854771712\n").unwrap();
        assert_eq!(cgroup_limit_in(d.path(), None), None);
    }

    #[test]
    fn garbage_is_no_limit() {
        assert_eq!(parse_limit("-1"), None);
        assert_eq!(parse_limit("0"), None);
        assert_eq!(parse_limit("lots"), None);
    }

    #[test]
    fn meminfo_total() {
        let t = "MemTotal:       24683520 kB\nMemFree:        1 kB\n";
        assert_eq!(parse_meminfo(t), Some(24_683_520 * 1024));
        assert_eq!(parse_meminfo("MemTotal: 12 MB\n"), None);
    }
}
