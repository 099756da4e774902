//! A CPU, process or thread named twice (`-C 0,0`, `-p P,P`, `-t T,T`) is
//! recorded once: every call of a probed function shows once, not twice.
//! Uprobes on this test binary, so this also runs on hosts without kprobes.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kprobe_perf_tests::{kprobe_perf_bin, uprobes_available, vm_kernel};

/// The probed function: its argument numbers each call.
#[no_mangle]
#[inline(never)]
pub extern "C" fn kprobe_perf_repeated_target(call: u64) -> u64 {
    std::hint::black_box(call)
}

/// Records for 2 s with `target(tid)` as the target options while a
/// thread, pinned to CPU 0, calls the probed function every 5 ms with
/// 1, 2, 3 ...; returns how often each call number was seen, for that
/// thread.
fn record_calls(target: impl Fn(i32) -> Vec<String>) -> BTreeMap<u64, u32> {
    let stop = Arc::new(AtomicBool::new(false));
    let tid = Arc::new(AtomicU32::new(0));
    let caller = {
        let (stop, tid) = (Arc::clone(&stop), Arc::clone(&tid));
        std::thread::spawn(move || {
            tid.store(
                kprobe_perf_engine::cli::os::gettid() as u32,
                Ordering::SeqCst,
            );
            let mut call = 0;
            while !stop.load(Ordering::SeqCst) {
                call += 1;
                kprobe_perf_repeated_target(call);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    while tid.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let tid = tid.load(Ordering::SeqCst) as i32;
    let pinned = Command::new("taskset")
        .args(["-p", "-c", "0", &tid.to_string()])
        .output()
        .expect("running taskset (util-linux)");
    assert!(pinned.status.success(), "taskset: {pinned:?}");
    let exe = std::env::current_exe().unwrap();
    let spec = format!(
        "p:{}:kprobe_perf_repeated_target call=%di:u64",
        exe.display()
    );
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "--json", "-d", "2", "-e", &spec])
        .args(target(tid))
        .output()
        .unwrap();
    stop.store(true, Ordering::SeqCst);
    caller.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kprobe-perf failed: {stderr}");
    let mut seen = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["type"] != "event" || v["tid"] != tid {
            continue;
        }
        let call = v["args"]["call"].as_u64().unwrap();
        *seen.entry(call).or_insert(0) += 1;
    }
    seen
}

fn check(what: &str, seen: &BTreeMap<u64, u32>) {
    let twice: Vec<_> = seen.iter().filter(|(_, &n)| n != 1).collect();
    println!(
        "{what}: {} calls seen (numbers {:?} to {:?}), {} seen more than once",
        seen.len(),
        seen.keys().next(),
        seen.keys().last(),
        twice.len()
    );
    // 2 s of calls every 5 ms (~10x slower under TCG): well over 10.
    assert!(seen.len() >= 10, "{what}: only {} calls seen", seen.len());
    assert!(
        twice.is_empty(),
        "{what}: {} of {} calls seen more than once, the first: {:?}",
        twice.len(),
        seen.len(),
        &twice[..twice.len().min(5)]
    );
    // Consecutive numbers: none missed between the first and the last.
    let (first, last) = (seen.keys().next().unwrap(), seen.keys().last().unwrap());
    assert_eq!(last - first + 1, seen.len() as u64, "{what}: calls missed");
}

#[test]
fn a_cpu_named_twice_is_recorded_once() {
    if !uprobes_available("a_cpu_named_twice_is_recorded_once") {
        return;
    }
    let seen = record_calls(|_| vec!["-C".into(), "0,0".into()]);
    check("-C 0,0", &seen);
}

#[test]
fn a_process_named_twice_is_recorded_once() {
    if !uprobes_available("a_process_named_twice_is_recorded_once") {
        return;
    }
    // -p follows the threads a process starts later: its events are
    // inherited, and inherited uprobes are defined through uprobe_events.
    if kprobe_perf_engine::cli::tracefs::Tracefs::find().is_err() {
        if let Some(k) = vm_kernel() {
            panic!("tracefs must be mounted inside the VM (kernel {k})");
        }
        println!("SKIP a_process_named_twice_is_recorded_once: -p's uprobes are inherited, so they go through uprobe_events, and tracefs is not mounted here");
        return;
    }
    let pid = std::process::id().to_string();
    let seen = record_calls(|_| vec!["-p".into(), format!("{pid},{pid}")]);
    check("-p P,P", &seen);
}

#[test]
fn a_thread_named_twice_is_recorded_once() {
    if !uprobes_available("a_thread_named_twice_is_recorded_once") {
        return;
    }
    let seen = record_calls(|tid| {
        vec![
            "-t".into(),
            format!("{tid},{tid}"),
            "-t".into(),
            tid.to_string(),
        ]
    });
    check("-t T,T -t T", &seen);
}
