//! CPU time of this process, from /proc/self/stat (Linux), so a report can say how much of
//! the machine the load tool itself used — it shares the cores with the broker.

/// Clock ticks per second of /proc times: 100 on every mainstream Linux build (USER_HZ).
const TICKS_PER_SEC: f64 = 100.0;

/// User + system CPU seconds of a `/proc/<pid>/stat` line.
pub fn cpu_secs_of_stat(stat: &str) -> Option<f64> {
    // The command name (field 2) may hold spaces; fields after its closing parenthesis start
    // at field 3, so utime (14) and stime (15) are at 11 and 12.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / TICKS_PER_SEC)
}

/// CPU seconds this process has used so far; `None` off Linux.
pub fn process_cpu_secs() -> Option<f64> {
    cpu_secs_of_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utime_and_stime() {
        let stat = "4242 (queen bench) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 3 0";
        assert_eq!(cpu_secs_of_stat(stat), Some(3.0));
        assert_eq!(cpu_secs_of_stat("garbage"), None);
    }
}
