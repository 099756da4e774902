//! The engine's tokio example (`engine/examples/tokio_record.rs`) against
//! a real kernel: the session moves to a reader task, which waits on the
//! session's fd with tokio's `AsyncFd` and drains it, and records every
//! open of a file, exactly; and the session's fd wakes such a loop once
//! a ring passes its watermark.

use std::process::Command;
use std::time::Duration;

use kprobe_perf_engine::testing::plan_probes;
use kprobe_perf_engine::{sink_fn, KernelSymbols, RecordTarget, Session, SessionOptions, Value};
use kprobe_perf_tests::{example_bin, for_kernel, kprobes_available};

/// The opens the example makes of its file.
const OPENS: u64 = 3000;

/// The value of the example's line `name: N`.
fn figure(out: &str, name: &str) -> Option<u64> {
    out.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(": ")?.parse().ok())
}

#[test]
fn tokio_reader_task_records_every_open() {
    if !kprobes_available("tokio_reader_task_records_every_open") {
        return;
    }
    let file = std::env::temp_dir().join(format!("kprobe-perf-tokio-{}", std::process::id()));
    std::fs::write(&file, "x\n").unwrap();
    let out = Command::new(example_bin("tokio_record"))
        .arg(for_kernel("p:do_sys_openat2 path=+0(%si):ustring"))
        .arg(&file)
        .arg(OPENS.to_string())
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("tokio_record: {stdout}{stderr}");
    assert!(out.status.success(), "tokio_record failed: {stderr}");
    assert_eq!(figure(&stdout, "opens"), Some(OPENS));
    // Each open is one do_sys_openat2 of the file, by the example itself.
    assert_eq!(figure(&stdout, "matching events"), Some(OPENS), "{stdout}");
    assert_eq!(figure(&stdout, "lost"), Some(0), "{stdout}");
    let all = figure(&stdout, "all events").unwrap();
    assert!(all >= OPENS, "{stdout}");
}

/// The session's fd (its poller) is readable once a ring passes its
/// watermark (a quarter of the ring), not before, and no more once the
/// readiness is taken and the ring drained: what an embedder's event loop
/// (tokio's `AsyncFd` above) relies on. One ring (CPU 0, where this
/// thread is pinned) of 8 pages wakes its reader at 8 KiB; a sample of
/// this probe takes 56 to about 110 bytes.
#[test]
fn the_session_fd_is_readable_past_the_watermark_only() {
    if !kprobes_available("the_session_fd_is_readable_past_the_watermark_only") {
        return;
    }
    let symbols = KernelSymbols::load().unwrap();
    let plans = plan_probes(
        &[for_kernel("p:do_sys_openat2 path=+0(%si):ustring")],
        &symbols,
    )
    .unwrap();
    let mut s = Session::open(
        plans,
        SessionOptions::default()
            .with_target(RecordTarget::Cpus(vec![0]))
            .with_mmap_pages(8),
    )
    .unwrap();
    let tid = kprobe_perf_engine::cli::os::gettid();
    let pinned = Command::new("taskset")
        .args(["-p", "-c", "0", &tid.to_string()])
        .output()
        .expect("running taskset (util-linux)");
    assert!(pinned.status.success(), "taskset -p -c 0 {tid}: {pinned:?}");
    let file = std::env::temp_dir().join(format!("kprobe-perf-wake-{}", std::process::id()));
    std::fs::write(&file, "x\n").unwrap();
    let path = file.display().to_string();
    let open = |n: usize| {
        for _ in 0..n {
            std::fs::File::open(&file).unwrap();
        }
    };
    s.enable().unwrap();
    assert!(
        !s.wait(Some(Duration::ZERO)).unwrap(),
        "nothing written yet"
    );
    // At most 30 * 110 bytes: under the watermark.
    open(30);
    assert!(
        !s.wait(Some(Duration::from_millis(200))).unwrap(),
        "30 samples are under the watermark"
    );
    // 200 samples: at least 11,200 bytes, at most 22,000 (the ring holds 32 KiB).
    open(170);
    assert!(
        s.wait(Some(Duration::from_secs(5))).unwrap(),
        "past the watermark the session's fd is readable"
    );
    let mut ours = 0u64;
    let mut count = sink_fn(|e| {
        if matches!(e.args.first(), Some(Value::Str(Some(p))) if *p == path) {
            ours += 1;
        }
    });
    s.drain(&mut count).unwrap();
    assert!(
        !s.wait(Some(Duration::from_millis(200))).unwrap(),
        "drained, the fd is not readable"
    );
    s.disable().unwrap();
    s.drain(&mut count).unwrap();
    let _ = std::fs::remove_file(&file);
    assert_eq!(ours, 200);
    let summary = s.summary();
    assert_eq!(summary.loss.count(), Some(0), "{summary:?}");
}
