//! The human-readable form of a `Report`.

use std::fmt::Write;

use crate::report::{Latency, Report, Throughput};

fn ms(us: u64) -> String {
    format!("{:.3}", us as f64 / 1_000.0)
}

fn throughput_row(out: &mut String, name: &str, t: &Throughput) {
    let _ = writeln!(
        out,
        "{name:<10} {:>12} {:>12.1} {:>10.3} {:>9.2}s",
        t.messages, t.msg_per_sec, t.mb_per_sec, t.elapsed_secs
    );
}

fn latency_row(out: &mut String, name: &str, l: &Latency) {
    let _ = writeln!(
        out,
        "{name:<10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        l.count,
        ms(l.p50),
        ms(l.p99),
        ms(l.p999),
        ms(l.max)
    );
}

fn opt<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let c = &report.config;
    let _ = writeln!(
        out,
        "queen-bench {:?} · {} (push {:?}, pop {:?}) · {} · queue {}",
        report.scenario, report.driver, c.push_form, c.pop_form, report.url, report.queue
    );
    let _ = writeln!(
        out,
        "{} · producers {} · consumers {} · groups {} · partitions {} · batch {} · {} B/msg{}",
        c.mode,
        c.producers,
        c.consumers,
        c.groups,
        c.partitions,
        c.batch,
        c.msg_bytes,
        c.rate
            .map(|r| format!(" · target {r} msg/s"))
            .unwrap_or_default()
    );
    if report.produce.is_some() || report.consume.is_some() {
        let _ = writeln!(
            out,
            "\n{:<10} {:>12} {:>12} {:>10} {:>10}",
            "", "messages", "msg/s", "MB/s", "elapsed"
        );
        if let Some(t) = &report.produce {
            throughput_row(&mut out, "produce", t);
        }
        if let Some(t) = &report.consume {
            throughput_row(&mut out, "consume", t);
        }
    }
    if !report.latency_us.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "latency ms", "count", "p50", "p99", "p99.9", "max"
        );
        for (name, l) in &report.latency_us {
            latency_row(&mut out, name, l);
        }
    }
    let _ = writeln!(out);
    for (name, r) in &report.requests {
        let _ = writeln!(
            out,
            "{name:<10} requests {:>10} errors {:>8}",
            r.count, r.errors
        );
    }
    let _ = writeln!(
        out,
        "errors {} (push items refused {}, ack items refused {}) · empty pops {} · malformed {} · payloads changed {}",
        report.errors,
        report.push_items_refused,
        report.ack_items_refused,
        report.empty_pops,
        report.malformed,
        report.payload_mismatches
    );
    if let Some(p) = report.prefilled {
        let _ = writeln!(out, "prefilled {p}");
    }
    let _ = writeln!(
        out,
        "accepted {} · lost {} · duplicates {} · unexpected {} · drained {}",
        opt(report.accepted),
        opt(report.lost),
        opt(report.duplicates),
        opt(report.unexpected),
        opt(report.drained)
    );
    if let Some(cpu) = report.tool.cpu_percent_of_core {
        let _ = writeln!(
            out,
            "load tool: {cpu}% of one core over {:.1}s",
            report.tool.wall_secs
        );
    }
    for text in &report.error_samples {
        let _ = writeln!(out, "error: {text}");
    }
    out
}
