//! A program that has threads before it starts the guardian (as
//! `#[tokio::main]` or a host application has): `Guardian::start` then
//! runs this program again, detached, as the guardian. It then records a
//! uprobe on libc's `getppid` for `sleep 120`, a uprobe_events definition
//! (a uprobe that follows a command's forks), prints `armed GROUP` and
//! waits to be killed.

use std::io::Write;
use std::time::Duration;

use kprobe_perf_engine::cli::plan::BackendChoice;
use kprobe_perf_engine::{
    CommandScope, Guardian, Kernel, KernelOptions, RecordTarget, Session, SessionOptions,
};

fn main() {
    // A thread first: a fork of this process would not be sound.
    std::thread::spawn(|| loop {
        std::thread::park();
    });
    if let Err(e) = Guardian::start() {
        eprintln!("{e}");
        std::process::exit(1);
    }
    let libc = kprobe_perf_tests::libc_path().expect("libc in this process's mappings");
    let kernel = Kernel::discover(KernelOptions::default()).expect("kernel");
    let plans = kernel
        .plan(&[format!("p:{libc}:getppid")], BackendChoice::Auto)
        .expect("plan");
    let target = RecordTarget::Command {
        argv: vec!["sleep".into(), "120".into()],
        scope: CommandScope::Descendants,
    };
    let mut session =
        Session::open(plans, SessionOptions::default().with_target(target)).expect("open");
    session.enable().expect("enable");
    println!("armed {}", session.tracefs_group().unwrap_or("none"));
    let _ = std::io::stdout().flush();
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}
