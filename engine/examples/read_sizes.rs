//! The engine's answers, from the library: what a command asks libc's
//! `read()` for, counted per command name and drawn as a log2 histogram
//! with its percentiles (what `kprobe-perf record --count-by comm --hist
//! size` prints). A uprobe, so it runs wherever uprobes do, kprobes or
//! not. As root:
//! `cargo run -p kprobe-perf-engine --example read_sizes -- cat /etc/hostname`.

use std::time::Duration;

use kprobe_perf_engine::analysis::{parse_count_by, parse_hist, Aggregator, Hist, ProbeFields};
use kprobe_perf_engine::BackendChoice;
use kprobe_perf_engine::SessionOptions;
use kprobe_perf_engine::{sink_fn, CommandScope, Kernel, KernelOptions, RecordTarget, Session};

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The libc this program runs with (the command runs the same one).
fn libc() -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so"))
        .map(str::to_string)
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.is_empty() {
        return Err("give the command to run, e.g. `cat /etc/hostname`".into());
    }
    let libc = libc().ok_or("no libc in this process's mappings")?;
    // read(fd, buf, count): the size asked for is its third argument.
    let kernel = Kernel::discover(KernelOptions::default())?;
    let plans = kernel.plan(
        &[format!("p:{libc}:read size=$arg3:u64")],
        BackendChoice::Auto,
    )?;
    // What the answers can name: each probe's event name and arguments.
    let fields: Vec<ProbeFields> = plans.iter().map(ProbeFields::of).collect();
    let mut answers = Aggregator::new(
        &fields,
        vec![parse_count_by("comm", &fields)?],
        vec![parse_hist("size", &fields)?],
    );
    let target = RecordTarget::Command {
        argv,
        scope: CommandScope::Descendants,
    };
    let mut session = Session::open(plans, SessionOptions::default().with_target(target))?;
    session.enable()?;
    let mut sink = sink_fn(|e| answers.record(e));
    while session.command_status()?.is_none() {
        session.poll(Some(Duration::from_millis(100)), &mut sink)?;
    }
    session.disable()?;
    session.poll(Some(Duration::ZERO), &mut sink)?;
    let answers = answers.snapshot();
    for table in &answers.counts {
        println!("reads by {}:", table.keys.join(","));
        for row in &table.rows {
            let key: Vec<String> = row.key.iter().map(ToString::to_string).collect();
            println!("  {:<16} {}", key.join(","), row.count);
        }
    }
    for hists in &answers.hists {
        for probe in &hists.probes {
            println!("{} of {}:", hists.arg, probe.probe);
            let Hist::Log2(h) = &probe.hist else { continue };
            for b in h.buckets() {
                let (low, high) = (b.low.unwrap_or(0), b.high.unwrap_or(0));
                println!("  [{low}, {high}) {}", b.count);
            }
            if let Some(p) = h.percentiles() {
                println!("  p50 {} p99 {} (exact: {})", p.p50, p.p99, p.exact);
            }
        }
    }
    match session.summary().loss.count() {
        Some(n) => println!("lost: {n}"),
        None => println!("lost: unknown"),
    }
    Ok(())
}
