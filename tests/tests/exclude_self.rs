//! `SessionOptions::with_exclude_self`: the kernel drops the recording
//! process's own hits. A uprobe on libc's `getppid`, recorded on every
//! CPU while this test calls it 200 times: without the option, its 200
//! calls are recorded (its pid, exactly 200); with it, none is (the
//! kernel's filter drops them before the ring: none lost either).

use std::time::Duration;

use kprobe_perf_engine::cli::plan::BackendChoice;
use kprobe_perf_engine::{sink_fn, Kernel, KernelOptions, Session, SessionOptions};
use kprobe_perf_tests::{libc_path, skip_here, uprobes_available};

/// This process's events among those recorded while it calls getppid
/// 200 times, and the session's exact loss.
fn own_calls(exclude: bool) -> (u64, Option<u64>) {
    let libc = libc_path().unwrap();
    let kernel = Kernel::discover(KernelOptions::default()).unwrap();
    let plans = kernel
        .plan(&[format!("p:{libc}:getppid")], BackendChoice::Pmu)
        .unwrap();
    let mut session =
        Session::open(plans, SessionOptions::default().with_exclude_self(exclude)).unwrap();
    session.enable().unwrap();
    for _ in 0..200 {
        // libc's getppid.
        std::hint::black_box(std::os::unix::process::parent_id());
    }
    session.disable().unwrap();
    let me = std::process::id() as i32;
    let mut mine = 0u64;
    session
        .poll(
            Some(Duration::ZERO),
            &mut sink_fn(|e| {
                if e.pid == me {
                    mine += 1;
                }
            }),
        )
        .unwrap();
    (mine, session.summary().loss.count())
}

#[test]
fn the_kernel_leaves_out_the_recording_process_only_when_asked() {
    let test = "the_kernel_leaves_out_the_recording_process_only_when_asked";
    if !uprobes_available(test) {
        return;
    }
    if libc_path().is_none() {
        return skip_here(test, "no libc in this process's mappings");
    }
    assert_eq!(own_calls(false), (200, Some(0)));
    assert_eq!(own_calls(true), (0, Some(0)));
}

/// The engine's malloc_profiler example (`engine/examples/malloc_profiler.rs`)
/// on every CPU while `ls /` runs: ls's allocations are there, the
/// profiler's own (each event it keeps allocates) are not.
#[test]
fn the_malloc_profiler_example_sees_ls_and_not_itself() {
    let test = "the_malloc_profiler_example_sees_ls_and_not_itself";
    if !uprobes_available(test) {
        return;
    }
    if libc_path().is_none() || !std::path::Path::new("/usr/bin/ls").exists() {
        return skip_here(
            test,
            "no libc in this process's mappings, or no /usr/bin/ls",
        );
    }
    let out = std::process::Command::new(kprobe_perf_tests::example_bin("malloc_profiler"))
        .args(["/usr/bin/ls", "/"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.lines().any(|l| l == "own events: 0"), "{stdout}");
    let ls_calls: u64 = stdout
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("ls")).then(|| w.next()?.parse().ok())?
        })
        .unwrap_or(0);
    assert!(ls_calls > 0, "no malloc of ls recorded:\n{stdout}");
}
