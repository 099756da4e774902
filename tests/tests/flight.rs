//! `record --overwrite`: the flight recorder keeps the newest events, dumps
//! them in order on SIGUSR2, and says how many older ones were overwritten.

use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available, wait_until_recording};

/// Opens of nonexistent files the workload thread makes, in this order.
const OPENS: usize = 3000;

fn name(i: usize) -> String {
    format!("/nonexistent/kprobe-perf-flight-{i:05}")
}

/// Records a thread's `OPENS` opens in flight-recorder mode (`--json`
/// when `json`), dumping on SIGUSR2 and exiting on SIGINT; stdout and
/// stderr.
fn fly(json: bool) -> (String, String) {
    // The workload thread exists (and is named) before recording starts,
    // so its only records are the samples of its opens.
    let (tid_tx, tid_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        tid_tx.send(kprobe_perf_engine::cli::os::gettid()).unwrap();
        go_rx.recv().unwrap();
        for i in 0..OPENS {
            let _ = std::fs::File::open(name(i));
        }
    });
    let tid = tid_rx.recv().unwrap().to_string();
    let mut args = vec![
        "record",
        "--overwrite",
        "-m",
        "2",
        "-t",
        &tid,
        "-e",
        "p:do_sys_openat2 path=+0(%si):ustring",
    ];
    if json {
        args.push("--json");
    }
    let rec = Command::new(kprobe_perf_bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // One event: the one thread's probe.
    wait_until_recording(rec.id(), 1);
    go_tx.send(()).unwrap();
    worker.join().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let signal = |sig: &str| {
        let st = Command::new("kill")
            .args([sig, &rec.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    };
    signal("-USR2");
    std::thread::sleep(Duration::from_secs(1));
    signal("-INT");
    let out = rec.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    (stdout, err)
}

/// Checks that `got` are the newest opens, oldest first; how many.
fn newest(got: &[&str], err: &str) -> usize {
    let k = got.len();
    assert!(
        k > 0 && k < OPENS,
        "a window smaller than the workload: {k} events\n{err}"
    );
    let want: Vec<String> = (OPENS - k..OPENS).map(name).collect();
    assert_eq!(got, want, "the newest {k} opens, oldest first");
    k
}

#[test]
fn sigusr2_dumps_the_newest_events_in_order() {
    if !kprobes_available("sigusr2_dumps_the_newest_events_in_order") {
        return;
    }
    let (stdout, err) = fly(false);
    let got: Vec<&str> = stdout
        .lines()
        .filter_map(|l| {
            l.split_once("path=\"")
                .map(|(_, p)| p.trim_end_matches('"'))
        })
        .collect();
    let k = newest(&got, &err);
    // The closing summary calls the events the window did not keep what
    // they are, not a loss: the kernel's hits minus the events printed.
    let total = err
        .lines()
        .find(|l| l.starts_with("kprobe-perf: ") && l.contains(" events ("))
        .unwrap_or_else(|| panic!("no summary:\n{err}"));
    println!("{total}");
    assert!(
        total.starts_with(&format!("kprobe-perf: {k} events (")),
        "{total}"
    );
    assert!(
        total.ends_with(&format!(
            "), {} not kept (overwritten in the flight recorder's window, or dropped while a dump paused the rings)",
            OPENS - k
        )),
        "{total}"
    );
    let line = err
        .lines()
        .find(|l| l.starts_with("flight recorder:"))
        .unwrap_or_else(|| panic!("no flight recorder summary:\n{err}"));
    println!("{line}");
    assert_eq!(
        line,
        format!(
            "flight recorder: the window held {k} events; {} older ones were overwritten",
            OPENS - k
        ),
        "{err}"
    );
}

/// The same with `--json`: the events as objects, and a summary object
/// that counts the events not kept as `not_kept`, with no `lost`.
#[test]
fn json_flight_summary_counts_events_not_kept() {
    if !kprobes_available("json_flight_summary_counts_events_not_kept") {
        return;
    }
    let (stdout, err) = fly(true);
    let objs: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let (summary, events) = objs.split_last().expect("a summary object");
    let got: Vec<&str> = events
        .iter()
        .map(|e| e["args"]["path"].as_str().unwrap_or("?"))
        .collect();
    let k = newest(&got, &err);
    println!("{summary}");
    let not_kept = (OPENS - k) as u64;
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["events"], k as u64);
    assert_eq!(summary["not_kept"], not_kept);
    assert_eq!(summary.get("lost"), None);
    assert_eq!(summary["overwrite"]["held"], k as u64);
    assert_eq!(summary["overwrite"]["overwritten"], not_kept);
    let probe = &summary["probes"][0];
    assert_eq!(probe["events"], k as u64);
    assert_eq!(probe["not_kept"], not_kept);
    assert_eq!(probe.get("lost"), None);
}
