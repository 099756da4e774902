//! Text for people: histograms with ASCII bars, a one-line summary of a
//! histogram, durations with units, count tables. Each function returns a
//! `String` (lines end with `\n`); the caller prints it.
//!
//! A histogram prints one line per bucket from the lowest non-empty one to
//! the highest: the bucket, its count, and a bar of `@` scaled so the
//! largest count fills `BAR_WIDTH` (a bucket with any value shows at
//! least one `@`):
//!
//! ```text
//! [256, 512)     3 |@@@@@@@@@@@@@                           |
//! [512, 1K)      9 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
//! ```
//!
//! Log2 bounds use K, M, G, T, P, E for powers of 1024; linear bounds are
//! plain numbers, with `(..., MIN)` and `[MAX, ...)` for the outer buckets.

use std::fmt::Write as _;

use super::aggregate::{AggregateSnapshot, CountTable};
use super::hist::{Bucket, Hist, LinearHist, Log2Hist};
use super::latency::{LatencySnapshot, TimeUnit};

/// Width of the bar of the largest bucket.
pub(crate) const BAR_WIDTH: usize = 40;

/// `v` with K, M, G, T, P or E when it is a multiple of a power of 1024:
/// 512, 1K, 3M, 16E.
pub(crate) fn size_label(v: i128) -> String {
    const SUFFIX: [&str; 7] = ["", "K", "M", "G", "T", "P", "E"];
    let (mut v, mut i) = (v, 0);
    while v != 0 && v % 1024 == 0 && i + 1 < SUFFIX.len() {
        v /= 1024;
        i += 1;
    }
    format!("{v}{}", SUFFIX[i])
}

fn log2_label(b: &Bucket) -> String {
    match (b.low, b.high) {
        (Some(0), _) => "[0]".to_string(),
        (Some(1), _) => "[1]".to_string(),
        (Some(l), Some(h)) => format!("[{}, {})", size_label(l), size_label(h)),
        _ => "?".to_string(),
    }
}

fn linear_label(b: &Bucket) -> String {
    match (b.low, b.high) {
        (None, Some(h)) => format!("(..., {h})"),
        (Some(l), None) => format!("[{l}, ...)"),
        (Some(l), Some(h)) => format!("[{l}, {h})"),
        (None, None) => "(..., ...)".to_string(),
    }
}

fn bars(buckets: &[Bucket], label: impl Fn(&Bucket) -> String) -> String {
    let labels: Vec<String> = buckets.iter().map(label).collect();
    let lw = labels.iter().map(String::len).max().unwrap_or(0);
    let top = buckets.iter().map(|b| b.count).max().unwrap_or(0);
    let cw = top.to_string().len();
    let mut out = String::new();
    for (b, l) in buckets.iter().zip(&labels) {
        let mut n = (u128::from(b.count) * BAR_WIDTH as u128 / u128::from(top.max(1))) as usize;
        if b.count > 0 {
            n = n.max(1);
        }
        let _ = writeln!(
            out,
            "{l:<lw$} {:>cw$} |{:<BAR_WIDTH$}|",
            b.count,
            "@".repeat(n)
        );
    }
    out
}

/// A log2 histogram with bars (empty string when it holds no value).
pub(crate) fn render_log2(h: &Log2Hist) -> String {
    bars(&h.buckets(), log2_label)
}

/// A linear histogram with bars (empty string when it holds no value).
pub(crate) fn render_linear(h: &LinearHist) -> String {
    bars(&h.buckets(), linear_label)
}

/// Either histogram with bars.
pub(crate) fn render_hist(h: &Hist) -> String {
    match h {
        Hist::Log2(h) => render_log2(h),
        Hist::Linear(h) => render_linear(h),
    }
}

/// `ns` nanoseconds in `unit` with three decimals (rounded down; whole
/// nanoseconds for `ns`), or with `None` in the largest of ns, us, ms, s
/// that keeps it at least 1: `850ns`, `12.345us`, `1.500ms`, `2.000s`.
pub fn format_duration(ns: u64, unit: Option<TimeUnit>) -> String {
    let mut s = String::new();
    write_duration(&mut s, ns, unit);
    s
}

/// [`format_duration`] added to `out` (no allocation of its own: for
/// renderers of many durations).
pub fn write_duration(out: &mut String, ns: u64, unit: Option<TimeUnit>) {
    let per = match unit {
        Some(TimeUnit::Ns) => 1,
        Some(u) => u.ns(),
        None if ns < 1_000 => 1,
        None if ns < 1_000_000 => 1_000,
        None if ns < 1_000_000_000 => 1_000_000,
        None => 1_000_000_000,
    };
    let suffix = match per {
        1 => {
            let _ = write!(out, "{ns}ns");
            return;
        }
        1_000 => "us",
        1_000_000 => "ms",
        _ => "s",
    };
    let _ = write!(out, "{}.{:03}{suffix}", ns / per, ns % per / (per / 1000));
}

/// One line of figures: `count 12, avg 3.5us, min 1us, p50 3us, p90 5us,
/// p99 9us, p99.9 9us, max 9us`, the values followed by `unit`'s suffix
/// when given; `(estimated)` follows the percentiles when they come from
/// the buckets. `count 0` alone when empty.
pub(crate) fn render_stats(h: &Hist, unit: Option<TimeUnit>) -> String {
    let u = unit.map_or("", TimeUnit::suffix);
    let line = match h {
        Hist::Log2(h) => match (h.percentiles(), h.average(), h.min(), h.max()) {
            (Some(p), Some(avg), Some(min), Some(max)) => stats_line(
                h.count(),
                avg,
                [min, p.p50, p.p90, p.p99, p.p999, max].map(i128::from),
                p.exact,
                u,
            ),
            _ => None,
        },
        Hist::Linear(h) => match (h.percentiles(), h.average(), h.min(), h.max()) {
            (Some(p), Some(avg), Some(min), Some(max)) => stats_line(
                h.count(),
                avg,
                [min, p.p50, p.p90, p.p99, p.p999, max].map(i128::from),
                p.exact,
                u,
            ),
            _ => None,
        },
    };
    line.unwrap_or_else(|| "count 0".to_string())
}

fn stats_line(count: u64, avg: f64, v: [i128; 6], exact: bool, u: &str) -> Option<String> {
    let [min, p50, p90, p99, p999, max] = v;
    let estimated = if exact { "" } else { " (estimated)" };
    Some(format!(
        "count {count}, avg {avg:.1}{u}, min {min}{u}, p50 {p50}{u}, p90 {p90}{u}, \
         p99 {p99}{u}, p99.9 {p999}{u}{estimated}, max {max}{u}"
    ))
}

/// A count table: one column per key (upper-case names) and `COUNT`,
/// sorted as the table is; with `limit`, the first `limit` rows then
/// `... N more keys (M events)`. `(no events)` when empty.
pub(crate) fn render_count_table(t: &CountTable, limit: Option<usize>) -> String {
    if t.rows.is_empty() {
        return "(no events)\n".to_string();
    }
    let shown = &t.rows[..limit.unwrap_or(t.rows.len()).min(t.rows.len())];
    let mut cells: Vec<Vec<String>> = vec![t
        .keys
        .iter()
        .map(|k| k.to_uppercase())
        .chain(["COUNT".to_string()])
        .collect()];
    for r in shown {
        cells.push(
            r.key
                .iter()
                .map(ToString::to_string)
                .chain([r.count.to_string()])
                .collect(),
        );
    }
    let cols = t.keys.len() + 1;
    let widths: Vec<usize> = (0..cols)
        .map(|c| cells.iter().map(|row| row[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &cells {
        for (c, cell) in row.iter().enumerate() {
            let w = widths[c];
            if c + 1 == cols {
                let _ = writeln!(out, "{cell:>w$}");
            } else {
                let _ = write!(out, "{cell:<w$}  ");
            }
        }
    }
    let rest = &t.rows[shown.len()..];
    if !rest.is_empty() {
        let events: u64 = rest.iter().map(|r| r.count).sum();
        let _ = writeln!(out, "... {} more keys ({events} events)", rest.len());
    }
    out
}

/// A latency snapshot: per function (named by `names`, in the pairer's
/// order; `#N` when missing) a line of figures, the histogram, then one
/// histogram per key with `--by`. Pairing trouble (unpaired returns,
/// dropped entries, unreturned calls) gets a line when not zero.
pub fn render_latency(s: &LatencySnapshot, names: &[&str]) -> String {
    let mut out = String::new();
    for (i, f) in s.functions.iter().enumerate() {
        let name = names
            .get(i)
            .map_or_else(|| format!("#{i}"), |n| n.to_string());
        let _ = writeln!(out, "{name}: {}", render_stats(&f.total, Some(s.unit)));
        out.push_str(&render_hist(&f.total));
        if f.unpaired_returns + f.dropped_entries + f.unreturned > 0 {
            let _ = writeln!(
                out,
                "{name}: {} unpaired returns, {} dropped entries, {} unreturned calls",
                f.unpaired_returns, f.dropped_entries, f.unreturned
            );
        }
        if let Some(by) = s.by {
            for k in &f.by_key {
                let _ = writeln!(
                    out,
                    "\n{name} {by}={}: {}",
                    k.key,
                    render_stats(&k.hist, Some(s.unit))
                );
                out.push_str(&render_hist(&k.hist));
            }
        }
    }
    out
}

/// An aggregation snapshot: each count table, then each argument's
/// histogram per probe (`ARG of PROBE: figures`, the bars), separated by
/// blank lines.
pub fn render_aggregate(s: &AggregateSnapshot, limit: Option<usize>) -> String {
    let mut parts: Vec<String> = s
        .counts
        .iter()
        .map(|t| render_count_table(t, limit))
        .collect();
    for h in &s.hists {
        for p in &h.probes {
            let mut part = format!(
                "{} of {}: {}\n",
                h.arg,
                p.probe,
                render_stats(&p.hist, None)
            );
            part.push_str(&render_hist(&p.hist));
            if p.negative > 0 {
                let _ = writeln!(
                    part,
                    "{} negative values (not in the log2 buckets)",
                    p.negative
                );
            }
            parts.push(part);
        }
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{
        parse_count_by, parse_hist, Aggregator, ArgField, ArgKind, FunctionProbes, Key,
        LatencyOptions, LatencyPairer, LinearRange, ProbeFields,
    };
    use crate::decode::{Event, Value};
    use kprobe_perf_spec::BaseType;
    use std::sync::Arc;

    #[test]
    fn log2_bars() {
        let mut h = Log2Hist::new();
        for v in [0, 1, 3, 3, 1500, 1500, 1500, 1500, 1 << 20] {
            h.record(v);
        }
        let text = render_log2(&h);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 22);
        assert_eq!(
            lines[0],
            "[0]          1 |@@@@@@@@@@                              |"
        );
        assert_eq!(
            lines[11],
            "[1K, 2K)     4 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|"
        );
        assert_eq!(
            lines[20],
            "[512K, 1M)   0 |                                        |"
        );
        assert_eq!(
            lines[21],
            "[1M, 2M)     1 |@@@@@@@@@@                              |"
        );
        assert_eq!(render_log2(&Log2Hist::new()), "");
        let mut small = Log2Hist::new();
        for v in [0, 1, 3, 3, 1500, 1500, 1500, 1500] {
            small.record(v);
        }
        assert_eq!(
            render_log2(&small),
            "\
[0]        1 |@@@@@@@@@@                              |
[1]        1 |@@@@@@@@@@                              |
[2, 4)     2 |@@@@@@@@@@@@@@@@@@@@                    |
[4, 8)     0 |                                        |
[8, 16)    0 |                                        |
[16, 32)   0 |                                        |
[32, 64)   0 |                                        |
[64, 128)  0 |                                        |
[128, 256) 0 |                                        |
[256, 512) 0 |                                        |
[512, 1K)  0 |                                        |
[1K, 2K)   4 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
"
        );
        assert_eq!(size_label(1 << 64), "16E");
        assert_eq!(size_label(3 << 20), "3M");
        assert_eq!(size_label(1536), "1536");
    }

    #[test]
    fn linear_bars_and_one_at_least() {
        let mut h = LinearHist::new(LinearRange::new(0, 30, 10).unwrap());
        for v in [-1, 5, 15, 15] {
            h.record(v);
        }
        for _ in 0..100 {
            h.record(25);
        }
        h.record(99);
        assert_eq!(
            render_linear(&h),
            "\
(..., 0)    1 |@                                       |
[0, 10)     1 |@                                       |
[10, 20)    2 |@                                       |
[20, 30)  100 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[30, ...)   1 |@                                       |
"
        );
    }

    #[test]
    fn stats_and_durations() {
        let mut h = Log2Hist::new();
        for v in [1, 2, 3, 4, 100] {
            h.record(v);
        }
        assert_eq!(
            render_stats(&Hist::Log2(h), Some(TimeUnit::Us)),
            "count 5, avg 22.0us, min 1us, p50 3us, p90 100us, p99 100us, p99.9 100us, max 100us"
        );
        let mut e = Log2Hist::with_exact_limit(0);
        e.record(7);
        assert_eq!(
            render_stats(&Hist::Log2(e), None),
            "count 1, avg 7.0, min 7, p50 7, p90 7, p99 7, p99.9 7 (estimated), max 7"
        );
        assert_eq!(render_stats(&Hist::Log2(Log2Hist::new()), None), "count 0");
        assert_eq!(format_duration(850, None), "850ns");
        assert_eq!(format_duration(12_345, None), "12.345us");
        assert_eq!(format_duration(1_500_000, None), "1.500ms");
        assert_eq!(format_duration(2_000_000_000, None), "2.000s");
        assert_eq!(format_duration(1_234_567, Some(TimeUnit::Us)), "1234.567us");
        assert_eq!(format_duration(1_234_567, Some(TimeUnit::Ns)), "1234567ns");
        assert_eq!(format_duration(999, Some(TimeUnit::Ms)), "0.000ms");
    }

    fn ev(probe: usize, comm: &str, pid: i32, time_ns: u64, args: Vec<Value>) -> Event {
        Event {
            probe,
            cpu: 0,
            pid,
            tid: pid,
            comm: Arc::from(comm),
            time_ns,
            ip: 0,
            probe_addr: 0,
            ret_addr: None,
            callchain: Vec::new(),
            args,
        }
    }

    #[test]
    fn count_table_and_aggregate() {
        let probes = [ProbeFields::new(
            "vfs_read",
            vec![ArgField::new("count", ArgKind::Integer)],
        )];
        let by = parse_count_by("comm,pid", &probes).unwrap();
        let hist = parse_hist("count", &probes).unwrap();
        let mut a = Aggregator::new(&probes, vec![by], vec![hist]);
        let size = |v| vec![Value::new(v, BaseType::Unsigned(64))];
        for (comm, pid, n) in [("cat", 1234, 2), ("systemd-journal", 1, 10), ("sh", 99, 1)] {
            for _ in 0..n {
                a.record(&ev(0, comm, pid, 0, size(4096)));
            }
        }
        let s = a.snapshot();
        assert_eq!(
            render_count_table(&s.counts[0], None),
            "\
COMM             PID   COUNT
systemd-journal  1        10
cat              1234      2
sh               99        1
"
        );
        assert_eq!(
            render_count_table(&s.counts[0], Some(1)),
            "\
COMM             PID  COUNT
systemd-journal  1       10
... 2 more keys (3 events)
"
        );
        assert_eq!(
            render_aggregate(&s, Some(1)),
            "\
COMM             PID  COUNT
systemd-journal  1       10
... 2 more keys (3 events)

count of vfs_read: count 13, avg 4096.0, min 4096, p50 4096, p90 4096, p99 4096, p99.9 4096, max 4096
[4K, 8K) 13 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
"
        );
    }

    #[test]
    fn latency_report() {
        let options = LatencyOptions {
            by: Some(Key::Comm),
            unit: TimeUnit::Us,
            ..LatencyOptions::default()
        };
        let mut p = LatencyPairer::new(&[FunctionProbes::new(0, 1)], options).unwrap();
        for (i, (comm, us)) in [("a", 3u64), ("b", 40), ("a", 5)].into_iter().enumerate() {
            let pid = i as i32 + 1;
            let t = 1_000_000 * i as u64;
            p.record(&ev(0, comm, pid, t, vec![]));
            p.record(&ev(1, comm, pid, t + us * 1000, vec![]));
        }
        p.record(&ev(1, "a", 50, 9_000_000, vec![]));
        assert_eq!(
            render_latency(&p.take(), &["vfs_read"]),
            "\
vfs_read: count 3, avg 16.0us, min 3us, p50 5us, p90 40us, p99 40us, p99.9 40us, max 40us
[2, 4)   1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[4, 8)   1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[8, 16)  0 |                                        |
[16, 32) 0 |                                        |
[32, 64) 1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
vfs_read: 1 unpaired returns, 0 dropped entries, 0 unreturned calls

vfs_read comm=a: count 2, avg 4.0us, min 3us, p50 3us, p90 5us, p99 5us, p99.9 5us, max 5us
[2, 4) 1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[4, 8) 1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|

vfs_read comm=b: count 1, avg 40.0us, min 40us, p50 40us, p90 40us, p99 40us, p99.9 40us, max 40us
[32, 64) 1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
"
        );
    }
}
