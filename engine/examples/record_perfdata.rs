//! A recording written to a perf.data file by the engine's sink
//! (`perfdata::FileSink`), which `perf script` and `kprobe-perf script`
//! read, on every route: PMU probes and tracefs events (whose formats the
//! file carries as perf's tracing data). The rings' bytes go to the file
//! as they are, and their samples are counted from it at the end. As
//! root, on a kernel with
//! kprobes:
//! `cargo run -p kprobe-perf-engine --example record_perfdata -- OUT.data 'r4:do_sys_openat2 ret=$retval:s64' -- cat /etc/hostname`.

use std::io::BufWriter;
use std::time::Duration;

use kprobe_perf_engine::perfdata::FileSink;
use kprobe_perf_engine::BackendChoice;
use kprobe_perf_engine::{
    CommandScope, Guardian, Kernel, KernelOptions, RecordTarget, Session, SessionOptions,
};

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
    Guardian::start()?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dash = args.iter().position(|a| a == "--");
    let (Some(out), Some(dash)) = (args.first(), dash) else {
        return Err("usage: record_perfdata OUT.data PROBE... -- COMMAND...".into());
    };
    let (probes, command) = (&args[1..dash], &args[dash + 1..]);
    let kernel = Kernel::discover(KernelOptions::default())?;
    let plans = kernel.plan(probes, BackendChoice::Auto)?;
    kernel.check(&plans)?;
    let symbols = kernel.into_symbols();
    let target = RecordTarget::Command {
        argv: command.to_vec(),
        scope: CommandScope::Descendants,
    };
    let mut session = Session::open(plans, SessionOptions::default().with_target(target))?;
    // Read and written: the samples are counted from the file at the end.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(out)?;
    let mut sink = FileSink::start(BufWriter::new(file), &session, &symbols, None)?
        .counting_later(&mut session)?;
    session.enable()?;
    while session.command_status()?.is_none() {
        session.poll(Some(Duration::from_millis(100)), &mut sink)?;
    }
    session.disable()?;
    session.poll(Some(Duration::ZERO), &mut sink)?;
    // The drains only wrote the rings' bytes: count them, then summarize.
    sink.count_taken(&mut session)?;
    let summary = session.summary();
    sink.finish(&session, &symbols, Vec::new())?;
    println!("events: {}", summary.events);
    Ok(())
}
