//! Resident memory of the broker under test, sampled from `/proc/<pid>/status` (VmRSS), and
//! reported per minute: the soak's answer to "does memory level off".

use std::time::{Duration, Instant};

/// VmRSS of `pid` in bytes; None when the process or the line is gone.
pub fn read_rss(pid: u32) -> Option<u64> {
    parse_vmrss(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

pub fn parse_vmrss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib = line
        .trim_start_matches("VmRSS:")
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    kib.checked_mul(1024)
}

/// One sample: seconds since the start, bytes.
pub type Sample = (f64, u64);

/// Samples every `every` until `stop` turns true; returns what it saw.
pub async fn sample(
    pid: u32,
    every: Duration,
    start: Instant,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if let Some(b) = read_rss(pid) {
                    out.push((start.elapsed().as_secs_f64(), b));
                }
            }
            _ = stop.changed() => break,
        }
    }
    if let Some(b) = read_rss(pid) {
        out.push((start.elapsed().as_secs_f64(), b));
    }
    out
}

/// Per minute: (minute, samples, max bytes, last bytes).
pub fn per_minute(samples: &[Sample]) -> Vec<(u64, usize, u64, u64)> {
    let mut rows: Vec<(u64, usize, u64, u64)> = Vec::new();
    for &(t, b) in samples {
        let minute = (t / 60.0).floor().max(0.0) as u64;
        match rows.last_mut() {
            Some(r) if r.0 == minute => {
                r.1 += 1;
                r.2 = r.2.max(b);
                r.3 = b;
            }
            _ => rows.push((minute, 1, b, b)),
        }
    }
    rows
}

pub fn render(samples: &[Sample]) -> String {
    let mut s = String::from("minute | samples | RSS max (MiB) | RSS at end of minute (MiB)\n");
    s.push_str("---|---|---|---\n");
    for (m, n, max, last) in per_minute(samples) {
        s.push_str(&format!(
            "{} | {} | {:.1} | {:.1}\n",
            m + 1,
            n,
            max as f64 / 1048576.0,
            last as f64 / 1048576.0
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmrss_in_bytes() {
        assert_eq!(
            parse_vmrss("Name:\tq\nVmRSS:\t   2048 kB\n"),
            Some(2 * 1024 * 1024)
        );
        assert_eq!(parse_vmrss("VmRSS: lots\n"), None);
        assert_eq!(parse_vmrss(""), None);
    }

    #[test]
    fn samples_fold_into_minutes() {
        let s = [(1.0, 10), (30.0, 30), (59.9, 20), (61.0, 5), (200.0, 7)];
        assert_eq!(
            per_minute(&s),
            vec![(0, 3, 30, 20), (1, 1, 5, 5), (3, 1, 7, 7)]
        );
        assert!(render(&s).contains("1 | 3 | 0.0 | 0.0"));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_an_rss() {
        assert!(read_rss(std::process::id()).is_some_and(|b| b > 0));
    }
}
