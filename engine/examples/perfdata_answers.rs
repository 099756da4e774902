//! The engine's answers from a perf.data file that kprobe-perf wrote,
//! offline: the file's records by type (its raw records, as
//! `perfdata::Reader` gives them), then its events replayed as the live
//! run decoded them, counted by a key and drawn as a log2 histogram of an
//! integer argument with its percentiles. No kernel and no privilege:
//! `cargo run -p kprobe-perf-engine --example perfdata_answers -- FILE KEY ARG`,
//! for example on a file from
//! `kprobe-perf record -q -o reads.data -e 'p:/usr/lib/x86_64-linux-gnu/libc.so.6:read size=$arg3:u64' -- cat /etc/hostname`
//! with `KEY` = `comm` and `ARG` = `size`.

use std::collections::BTreeMap;
use std::fs::File;

use kprobe_perf_engine::analysis::{
    parse_count_by, parse_hist, AggregateSnapshot, Aggregator, ArgHists, Bucket, CountRow,
    CountTable, Hist, KeyPart, Log2Hist, Percentiles, ProbeFields, ProbeHist,
};
use kprobe_perf_engine::perfdata::{FileAttr, FileRecord, Reader, Replay};

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, key, arg] = &args[..] else {
        return Err("usage: perfdata_answers FILE KEY ARG (e.g. reads.data comm size)".into());
    };
    census(path)?;
    let answers = replay(path, key, arg)?;
    for table in &answers.counts {
        print_counts(table);
    }
    for hists in &answers.hists {
        print_hists(hists);
    }
    Ok(())
}

/// The file's probes and records, as they are stored.
fn census(path: &str) -> Result<(), Box<dyn std::error::Error>> {
    let mut reader = Reader::from_file(File::open(path)?)?;
    for (i, attr) in reader.attrs().iter().enumerate() {
        println!("probe {i}: {}", describe(attr));
    }
    let mut kinds: BTreeMap<&'static str, u64> = BTreeMap::new();
    while let Some(record) = reader.next_record()? {
        *kinds.entry(kind_name(&record)).or_default() += 1;
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!("records: {}", kinds.join(", "));
    Ok(())
}

/// How many events (one per CPU, or per thread of a command) share an
/// attr, and its `perf_event_attr.type` as the file stores it.
fn describe(attr: &FileAttr) -> String {
    let kind = attr
        .attr
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map_or(u32::MAX, u32::from_ne_bytes);
    format!("{} event ids, attr type {kind}", attr.ids.len())
}

/// perf's name for a record's type (`perf_event_header.type`).
fn kind_name(record: &FileRecord<'_>) -> &'static str {
    match record.kind {
        1 => "mmap",
        2 => "lost",
        3 => "comm",
        4 => "exit",
        7 => "fork",
        9 => "sample",
        10 => "mmap2",
        68 => "finished_round",
        _ => "other",
    }
}

/// Every event of the file, in the live run's order, counted by `key` and
/// drawn by `arg`.
fn replay(
    path: &str,
    key: &str,
    arg: &str,
) -> Result<AggregateSnapshot, Box<dyn std::error::Error>> {
    let mut replay = Replay::new(Reader::from_file(File::open(path)?)?)?;
    let mut answers: Option<Result<Aggregator, Box<dyn std::error::Error>>> = None;
    replay.run(|event, plans, _symbols, _maps| {
        let answers = answers.get_or_insert_with(|| {
            // What the answers can name: each probe's event name and
            // arguments, known once the file's probes are planned again.
            let fields: Vec<ProbeFields> = plans.iter().map(ProbeFields::of).collect();
            let counts = vec![parse_count_by(key, &fields)?];
            let hists = vec![parse_hist(arg, &fields)?];
            Ok(Aggregator::new(&fields, counts, hists))
        });
        if let Ok(a) = answers {
            a.record(event);
        }
    })?;
    match answers {
        Some(a) => Ok(a?.snapshot()),
        None => Err(format!("{path} holds no event").into()),
    }
}

fn print_counts(table: &CountTable) {
    println!(
        "events by {} ({} in all):",
        table.keys.join(","),
        table.total
    );
    for row in &table.rows {
        print_row(row);
    }
}

fn print_row(row: &CountRow) {
    let key: Vec<String> = row.key.iter().map(KeyPart::to_string).collect();
    println!("  {:<16} {}", key.join(","), row.count);
}

fn print_hists(hists: &ArgHists) {
    for probe in &hists.probes {
        print_probe_hist(&hists.arg, probe);
    }
}

fn print_probe_hist(arg: &str, probe: &ProbeHist) {
    println!("{arg} of {}:", probe.probe);
    match &probe.hist {
        Hist::Log2(h) => print_log2(h),
        _ => println!("  (a linear histogram)"),
    }
}

fn print_log2(h: &Log2Hist) {
    let buckets: Vec<Bucket> = h.buckets();
    for b in buckets.iter().filter(|b| b.count > 0) {
        let (low, high) = (b.low.unwrap_or(0), b.high.unwrap_or(0));
        println!("  [{low}, {high}) {}", b.count);
    }
    let percentiles: Option<Percentiles<u64>> = h.percentiles();
    if let (Some(p), Some(p75)) = (percentiles, h.percentile(750)) {
        println!(
            "  p50 {} p75 {p75} p99 {} (exact: {})",
            p.p50, p.p99, p.exact
        );
    }
}
