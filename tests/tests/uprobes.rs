//! Uprobes through the uprobe PMU, on a function of this very test binary.
//! The development hosts have the uprobe PMU, so this also runs natively.

use std::time::{Duration, Instant};

use kprobe_perf_engine::{plan_probes, Event, KernelSymbols, Session, SessionOptions};
use kprobe_perf_tests::{for_kernel, skip};

/// The probed function: not inlined, not mangled, so the ELF symbol table
/// has it by this name.
#[no_mangle]
#[inline(never)]
pub extern "C" fn kprobe_perf_uprobe_target(a: u64, b: u64) -> u64 {
    std::hint::black_box(a ^ b)
}

fn uprobes_available(test: &str) -> bool {
    let ok = std::path::Path::new("/sys/bus/event_source/devices/uprobe").exists()
        && kprobe_perf_engine::session::check_capabilities().is_ok();
    if !ok {
        skip(test, "no uprobe PMU here, or no CAP_PERFMON/CAP_SYS_ADMIN");
    }
    ok
}

/// An entry uprobe sees the two arguments, a uretprobe the return value,
/// exactly, for the calling thread.
#[test]
fn uprobe_and_uretprobe_values_are_exact() {
    if !uprobes_available("uprobe_and_uretprobe_values_are_exact") {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let exe = exe.display();
    let specs = [
        for_kernel(&format!(
            "p:{exe}:kprobe_perf_uprobe_target a=$arg1 b=%si:u32"
        )),
        format!("r:{exe}:kprobe_perf_uprobe_target ret=$retval"),
    ];
    let plans = plan_probes(&specs, &KernelSymbols::default()).unwrap();
    let mut s = Session::open(plans, SessionOptions::default()).unwrap();
    s.enable().unwrap();
    let (tid, r) = std::thread::spawn(|| {
        let r = kprobe_perf_uprobe_target(0x1234, 0xff00);
        (kprobe_perf_engine::sys::gettid(), r)
    })
    .join()
    .unwrap();
    assert_eq!(r, 0xed34);
    let mut events: Vec<Event> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while events.iter().filter(|e| e.tid == tid).count() < 2 && Instant::now() < deadline {
        s.poll(Some(Duration::from_millis(100)), |e| events.push(e.clone()))
            .unwrap();
    }
    let ours: Vec<_> = events.iter().filter(|e| e.tid == tid).collect();
    assert_eq!(ours.len(), 2, "{events:?}");
    assert_eq!(ours[0].probe, 0);
    assert_eq!(ours[0].args[0].as_i64(), Some(0x1234));
    assert_eq!(ours[0].args[1].to_string(), "65280");
    assert_eq!(ours[1].probe, 1);
    assert_eq!(ours[1].args[0].to_string(), "0xed34");
    // The entry's probe address is the function itself.
    assert_eq!(
        ours[0].probe_addr,
        kprobe_perf_uprobe_target as *const () as usize as u64
    );
}
