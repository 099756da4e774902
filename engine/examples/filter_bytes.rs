//! Embedding a filtered probe: records one probe with a filter (or none)
//! over a command, then prints what reached the ring buffers and what the
//! filter did. `cargo xtask bench filter` runs it with and without a
//! filter: `filter_bytes SPEC FILTER|- CMD [ARGS...]` prints
//! `events=N bytes=B filter=kernel|user|none dropped=D`.

use std::time::Duration;

use kprobe_perf_engine::{sink_fn, RecordTarget, Session, SessionOptions};
use kprobe_perf_engine::{BackendChoice, FilterRuns, Kernel, KernelOptions};

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Display, not Debug: the message says what to do.
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    kprobe_perf_engine::Guardian::start()?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [spec, filter, command @ ..] = &args[..] else {
        return Err("usage: filter_bytes SPEC FILTER|- CMD [ARGS...]".into());
    };
    if command.is_empty() {
        return Err("usage: filter_bytes SPEC FILTER|- CMD [ARGS...]".into());
    }
    let filter = (filter != "-").then_some(filter.as_str());
    let kernel = Kernel::discover(KernelOptions::default())?;
    // The filter is checked here, before anything is opened; under Auto a
    // probe goes where the kernel can run its filter.
    let plans = kernel.plan_filtered(&[(spec.as_str(), filter)], BackendChoice::Auto)?;
    let target = RecordTarget::command(command.to_vec());
    let mut session = Session::open(plans, SessionOptions::default().with_target(target))?;
    session.enable()?;
    let mut events = 0u64;
    loop {
        session.poll(
            Some(Duration::from_millis(100)),
            &mut sink_fn(|_| events += 1),
        )?;
        if session.command_status()?.is_some() {
            break;
        }
    }
    session.disable()?;
    session.poll(Some(Duration::ZERO), &mut sink_fn(|_| events += 1))?;
    let runs = match session.plans()[0].filter.as_ref().map(|f| f.runs()) {
        Some(FilterRuns::Kernel(_)) => "kernel",
        Some(FilterRuns::UserSpace(_)) => "user",
        None => "none",
    };
    let stats = session.stats();
    let dropped: u64 = stats.filtered.iter().sum();
    println!(
        "events={events} bytes={} filter={runs} dropped={dropped}",
        stats.ring_bytes
    );
    Ok(())
}
