//! Process memory from `/proc/self/status` (Linux; elsewhere the file is missing and the
//! series are not set). `status` gives kB where `statm` gives pages, so no page-size lookup
//! (and no libc) is needed: pages are 16 or 64 KiB on some arm64 kernels.

pub fn record() {
    let Ok(text) = std::fs::read_to_string("/proc/self/status") else {
        return;
    };
    let m = parse_status(&text);
    if let Some(b) = m.resident_bytes {
        metrics::gauge!("queen_process_resident_memory_bytes").set(b as f64);
    }
    if let Some(b) = m.virtual_bytes {
        metrics::gauge!("queen_process_virtual_memory_bytes").set(b as f64);
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Memory {
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
}

pub fn parse_status(text: &str) -> Memory {
    let mut m = Memory::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let slot = match key {
            "VmRSS" => &mut m.resident_bytes,
            "VmSize" => &mut m.virtual_bytes,
            _ => continue,
        };
        *slot = kib(value);
    }
    m
}

/// `"   123456 kB"` → bytes. The kernel always writes kB here; another unit is not guessed.
pub(crate) fn kib(value: &str) -> Option<u64> {
    let n = value
        .trim()
        .strip_suffix(" kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    n.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rss_and_size_in_bytes() {
        let text = "Name:\tqueen\nVmPeak:\t  999999 kB\nVmSize:\t  204800 kB\nVmRSS:\t   10240 kB\nThreads:\t9\n";
        assert_eq!(
            parse_status(text),
            Memory {
                resident_bytes: Some(10_485_760),
                virtual_bytes: Some(209_715_200),
            }
        );
    }

    #[test]
    fn a_line_without_kb_is_not_guessed() {
        let m = parse_status("VmRSS:\t12 MB\nVmSize:\tlots\n");
        assert_eq!(m, Memory::default());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_resident_memory() {
        let text = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(parse_status(&text).resident_bytes.unwrap() > 0);
    }
}
