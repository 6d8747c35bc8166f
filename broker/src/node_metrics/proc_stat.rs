//! The process's CPU time and threads from `/proc/self/stat` (Linux; elsewhere the file is
//! missing and these read as unknown). Times there are in clock ticks of `USER_HZ`, which the
//! kernel fixes at 100 for every `/proc` interface whatever `CONFIG_HZ` is, so no libc lookup.

/// Microseconds per clock tick of `/proc/<pid>/stat` (USER_HZ = 100).
const US_PER_TICK: u64 = 10_000;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CpuThreads {
    pub user_us: u64,
    pub system_us: u64,
    pub threads: u64,
}

/// `None` when the file cannot be read (EMFILE in a connection flood, hidepid, not Linux):
/// unknown, which the sampler must not take for a process that used no CPU.
pub fn read() -> Option<CpuThreads> {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|t| parse_stat(&t))
}

/// The fields after the command name, which is in parentheses and may hold spaces or `)`:
/// the last `)` ends it. utime, stime and num_threads are fields 14, 15 and 20 of proc(5).
pub fn parse_stat(text: &str) -> Option<CpuThreads> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state).
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(CpuThreads {
        user_us: field(14)?.saturating_mul(US_PER_TICK),
        system_us: field(15)?.saturating_mul(US_PER_TICK),
        threads: field(20)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_times_and_threads_past_a_name_with_spaces_and_parentheses() {
        let text = "4242 (queen (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 9 0 \
                    12345 104857600 2560 18446744073709551615";
        assert_eq!(
            parse_stat(text),
            Some(CpuThreads {
                user_us: 2_500_000,
                system_us: 370_000,
                threads: 9,
            })
        );
    }

    #[test]
    fn a_short_or_garbled_line_reads_as_nothing() {
        assert_eq!(parse_stat("1 (q) S 1 2"), None);
        assert_eq!(parse_stat("no parentheses"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_threads() {
        assert!(read().is_some_and(|r| r.threads >= 1));
    }
}
