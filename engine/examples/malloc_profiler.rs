//! A malloc profiler that does not record itself: a uprobe on libc's
//! `malloc` on every CPU while a command runs, bytes and calls summed per
//! command name. Its own allocations (each event it keeps allocates) are
//! left out by the kernel (`SessionOptions::with_exclude_self`), so they
//! neither show nor fill the rings. As root:
//! `cargo run -p kprobe-perf-engine --example malloc_profiler -- ls /`.

use std::collections::BTreeMap;
use std::time::Duration;

use kprobe_perf_engine::BackendChoice;
use kprobe_perf_engine::{sink_fn, Kernel, KernelOptions, Session, SessionOptions};

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The libc this program runs with.
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
        return Err("give the command to run while profiling, e.g. `ls /`".into());
    }
    let libc = libc().ok_or("no libc in this process's mappings")?;
    let kernel = Kernel::discover(KernelOptions::default())?;
    let plans = kernel.plan(
        &[format!("p:{libc}:malloc size=$arg1:u64")],
        BackendChoice::Auto,
    )?;
    // Every CPU: the command and everything else, but not this process.
    let mut session = Session::open(plans, SessionOptions::default().with_exclude_self(true))?;
    session.enable()?;
    let mut command = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .spawn()?;
    let me = std::process::id() as i32;
    let mut own = 0u64;
    let mut by_comm: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut sink = sink_fn(|e| {
        own += u64::from(e.pid == me);
        let size = e.args.first().and_then(|v| v.as_u64()).unwrap_or(0);
        let row = by_comm.entry(e.comm.to_string()).or_default();
        row.0 += 1;
        row.1 += size;
    });
    while command.try_wait()?.is_none() {
        session.poll(Some(Duration::from_millis(50)), &mut sink)?;
    }
    session.disable()?;
    session.poll(Some(Duration::ZERO), &mut sink)?;
    for (comm, (calls, bytes)) in &by_comm {
        println!("{comm:<16} {calls:>8} calls {bytes:>12} bytes");
    }
    println!("own events: {own}");
    match session.summary().loss.count() {
        Some(n) => println!("lost: {n}"),
        None => println!("lost: unknown"),
    }
    Ok(())
}
