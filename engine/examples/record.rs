//! Embedding kprobe-perf: count the return values of do_sys_openat2 on all
//! CPUs for a few seconds. Run as root on a kernel with the kprobe PMU:
//! `cargo run -p kprobe-perf-engine --example record -- 3`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kprobe_perf_engine::{sink_fn, Session, SessionOptions};
use kprobe_perf_engine::{BackendChoice, GlobOptions, Kernel, KernelOptions};

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
    // First, before any thread: a guardian process removes the tracefs
    // definitions of this process's sessions if it dies without doing it.
    kprobe_perf_engine::Guardian::start()?;
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    // The running kernel: kallsyms and the kprobe blacklist now; on first
    // use, its text (/proc/kcore, else a vmlinux matched by build ID and
    // KASLR slide).
    let kernel = Kernel::discover(KernelOptions::default())?;
    if let Some(e) = kernel.blacklist_error() {
        eprintln!("the kprobe blacklist is not checked: {e}");
    }
    // Globs (`r:do_sys_open*`) become one definition per function that
    // can be probed; a plain name stays as it is.
    let specs: Vec<String> = kernel
        .expand_globs(
            &["r:do_sys_openat2 ret=$retval:s64"],
            &GlobOptions::default(),
        )?
        .into_iter()
        .flat_map(|e| e.definitions)
        .collect();
    let plans = kernel.plan(&specs, BackendChoice::Auto)?;
    // What the kernel would refuse (an offset inside an instruction, a
    // blacklisted or notrace function) is refused here, before any probe
    // is opened.
    kernel.check(&plans)?;
    let mut session = Session::open(plans, SessionOptions::default())?;
    session.enable()?;
    let mut by_value: BTreeMap<i64, u64> = BTreeMap::new();
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        session.poll(
            Some(Duration::from_millis(100)),
            &mut sink_fn(|e| {
                if let Some(ret) = e.args[0].as_i64() {
                    *by_value.entry(ret).or_default() += 1;
                }
            }),
        )?;
    }
    for (ret, n) in by_value {
        println!("ret={ret}: {n}");
    }
    // The exact loss: the hits the kernel counted that were not decoded
    // (`stats().lost` is only what PERF_RECORD_LOST records reported, a
    // floor).
    session.disable()?;
    match session.summary().loss.count() {
        Some(n) => println!("lost: {n}"),
        None => println!("lost: unknown (the kernel's counts could not be read)"),
    }
    Ok(())
}
