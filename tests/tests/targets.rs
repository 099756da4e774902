//! Who gets recorded: threads and CPUs; and where a probe goes:
//! module symbols and duplicate names. Against a real kernel in the VM.

use std::process::Command;
use std::time::{Duration, Instant};

use kprobe_perf_engine::cli::plan::PlanError;
use kprobe_perf_engine::testing::plan_probes;
use kprobe_perf_engine::{Event, KernelSymbols, RecordTarget, Session, SessionOptions};
use kprobe_perf_tests::{kprobes_available, online_cpus, skip_here};

const OPEN_PATH: &str = "p:do_sys_openat2 path=+0(%si):ustring";

fn session(specs: &[&str], target: RecordTarget) -> Session {
    let symbols = KernelSymbols::load().unwrap();
    let plans = plan_probes(specs, &symbols).unwrap();
    let mut s = Session::open(plans, SessionOptions::default().with_target(target)).unwrap();
    s.enable().unwrap();
    s
}

/// Polls until `done` says so (or 20 s), collecting every event.
fn collect(s: &mut Session, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(&out) && Instant::now() < deadline {
        s.poll(
            Some(Duration::from_millis(100)),
            &mut kprobe_perf_engine::sink_fn(|e| out.push(e.clone())),
        )
        .unwrap();
    }
    s.poll(
        Some(Duration::from_millis(300)),
        &mut kprobe_perf_engine::sink_fn(|e| out.push(e.clone())),
    )
    .unwrap();
    out
}

fn unique(tag: &str) -> String {
    format!("/nonexistent/kprobe-perf-{}-{tag}", std::process::id())
}

fn path_of(e: &Event) -> Option<&str> {
    e.args[0].as_str()
}

/// `Threads([tid])`: only that thread's opens, even while another thread
/// of the same process opens too.
#[test]
fn thread_target_sees_only_that_thread() {
    if !kprobes_available("thread_target_sees_only_that_thread") {
        return;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (mine, other) = (unique("mine"), unique("other"));
    let m2 = mine.clone();
    let t = std::thread::spawn(move || {
        tx.send(kprobe_perf_engine::cli::os::gettid()).unwrap();
        go_rx.recv().unwrap();
        let _ = std::fs::File::open(&m2);
        let _ = std::fs::File::open(&m2);
    });
    let tid = rx.recv().unwrap();
    let mut s = session(&[OPEN_PATH], RecordTarget::Threads(vec![tid]));
    let _ = std::fs::File::open(&other);
    go_tx.send(()).unwrap();
    t.join().unwrap();
    let events = collect(&mut s, |ev| ev.len() >= 2);
    let paths: Vec<_> = events
        .iter()
        .map(|e| (e.tid, path_of(e).unwrap_or("?")))
        .collect();
    assert_eq!(paths, vec![(tid, mine.as_str()), (tid, mine.as_str())]);
}

/// `Cpus([first])`: a command pinned to the first online CPU is seen, one
/// pinned to the second not.
#[test]
fn cpu_target_sees_only_those_cpus() {
    if !kprobes_available("cpu_target_sees_only_those_cpus") {
        return;
    }
    let online = online_cpus();
    if online.len() < 2 {
        return skip_here(
            "cpu_target_sees_only_those_cpus",
            "it needs 2 online CPUs and only 1 is (KPROBE_PERF_VM_SMP=1?)",
        );
    }
    let (first, second) = (online[0], online[1]);
    let mut s = session(&[OPEN_PATH], RecordTarget::Cpus(vec![first]));
    let (on0, on1) = (unique("cpu0"), unique("cpu1"));
    for (cpu, path) in [(second, &on1), (first, &on0)] {
        let st = Command::new("taskset")
            .args(["-c", &cpu.to_string(), "cat", path])
            .status()
            .unwrap();
        assert_eq!(st.code(), Some(1), "cat of a missing file");
    }
    let events = collect(&mut s, |ev| {
        ev.iter().any(|e| path_of(e) == Some(on0.as_str()))
    });
    assert!(
        events.iter().all(|e| e.cpu == first),
        "only CPU {first}: {:?}",
        events.iter().map(|e| e.cpu).collect::<Vec<_>>()
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| path_of(e) == Some(on0.as_str()))
            .count(),
        1
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| path_of(e) == Some(on1.as_str()))
            .count(),
        0
    );
}

/// A module symbol (9pnet serves the VM's root file system) attaches, by
/// name or by the address fallback, and fires.
#[test]
fn module_symbol_attaches_and_fires() {
    if !kprobes_available("module_symbol_attaches_and_fires") {
        return;
    }
    let symbols = KernelSymbols::load().unwrap();
    let walk = symbols.lookup("p9_client_walk");
    assert_eq!(walk.len(), 1);
    assert_eq!(walk[0].module.as_deref(), Some("9pnet"));
    let mut s = session(&["p:9pnet:p9_client_walk"], RecordTarget::AllCpus);
    let path = format!("/usr/share/doc/nonexistent-{}", std::process::id());
    assert!(std::fs::metadata(&path).is_err());
    let me = std::process::id() as i32;
    let events = collect(&mut s, |ev| ev.iter().any(|e| e.pid == me));
    let ours: Vec<_> = events.iter().filter(|e| e.pid == me).collect();
    assert!(!ours.is_empty(), "a 9p walk for our lookup");
    assert!(ours
        .iter()
        .all(|e| e.probe_addr == walk[0].address || e.probe_addr == walk[0].address + 4));
}

/// A name with several functions is refused with every address listed,
/// never sent to the kernel to be answered with EADDRNOTAVAIL.
#[test]
fn duplicate_names_are_listed() {
    if !kprobes_available("duplicate_names_are_listed") {
        return;
    }
    let symbols = KernelSymbols::load().unwrap();
    let n = symbols
        .lookup("init_once")
        .iter()
        .filter(|s| s.is_text())
        .count();
    assert!(n >= 2, "init_once has {n} text instances on this kernel");
    match plan_probes(&["p:init_once"], &symbols) {
        Err(PlanError::Ambiguous { name, instances }) => {
            assert_eq!(name, "init_once");
            assert_eq!(instances.len(), n);
        }
        other => panic!("expected Ambiguous, got {other:?}"),
    }
}
