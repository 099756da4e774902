//! Issue 15 item 4, filters: the same probe, filter and workload through
//! `kprobe-perf record --filter` and through bpftrace's predicate give the
//! same exact number of events, and that number is the one the workload
//! is known to make (so both are right, not merely agreeing).
//!
//! Both tools are scoped to the workload's process: kprobe-perf by running
//! it (`record -- CMD`), bpftrace by `-c CMD` and `pid == cpid` (bpftrace's
//! `pid` is the thread group, so the workload's threads count, as they do
//! for kprobe-perf). bpftrace counts with `@n = count()`, which it prints
//! at exit (`-f json`). kprobe-perf runs each filter where `--backend auto`
//! puts it (in the kernel) and in user space (`--backend pmu`, whose
//! record carries no argument; a filter on `comm` alone runs in the kernel
//! there too, so `&& pid > 0` keeps that one in user space).
//!
//! Workloads: `write_sizes` (vfs_write with count 1 three times by thread
//! `kpw_small`, 100 five times by `kpw_medium`, 5000 seven times by
//! `kpw_large`) and `filter_calls 1000` (`kpf_filter_target(i, i % 7)`
//! for i in 0..1000).

use std::process::{Command, Output};

use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available, skip, uprobes_available};

const BPFTRACE: &str = "/usr/bin/bpftrace";

/// True when bpftrace is installed and runs a program here. Inside the VM
/// a missing or failing bpftrace fails the test, with the reason ([`skip`]
/// panics there); elsewhere the test is skipped.
fn bpftrace_runs(test: &str) -> bool {
    if !std::path::Path::new(BPFTRACE).exists() {
        skip(
            test,
            &format!("{BPFTRACE} is not installed (apt-get install bpftrace)"),
        );
        return false;
    }
    let check = Command::new(BPFTRACE)
        .env("HOME", std::env::temp_dir())
        .args(["-e", "BEGIN { exit(); }"])
        .output();
    match check {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            skip(
                test,
                &format!(
                    "bpftrace cannot run a program here ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            );
            false
        }
        Err(e) => {
            skip(test, &format!("{BPFTRACE} cannot be started: {e}"));
            false
        }
    }
}

/// Runs `command` under bpftrace with `probe /pid == cpid && (predicate)/
/// { @n = count(); }` and returns @n as bpftrace printed it at exit.
fn bpftrace_count(probe: &str, predicate: &str, command: &str) -> u64 {
    let program = format!("{probe} /pid == cpid && ({predicate})/ {{ @n = count(); }}");
    let out = Command::new(BPFTRACE)
        .env("HOME", std::env::temp_dir())
        .args(["-f", "json", "-c", command, "-e", &program])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!(
        "bpftrace -c '{command}' -e '{program}'\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "bpftrace failed: {}", out.status);
    let counts: Vec<u64> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "map")
        .filter_map(|v| v["data"]["@n"].as_u64())
        .collect();
    // No @n at all would mean no event passed: every case here keeps some,
    // so a missing count is a failure, never read as zero.
    assert_eq!(counts.len(), 1, "one @n expected from bpftrace:\n{stdout}");
    counts[0]
}

fn run(args: &[&str]) -> Output {
    let out = Command::new(kprobe_perf_bin()).args(args).output().unwrap();
    println!(
        "kprobe-perf {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `record --json --backend BACKEND -e SPEC --filter FILTER -- COMMAND`:
/// the events it printed and its summary's probe.
fn kprobe_perf_count(
    backend: &str,
    spec: &str,
    filter: &str,
    command: &[&str],
) -> (u64, serde_json::Value) {
    let mut args = vec![
        "record",
        "--json",
        "--backend",
        backend,
        "-e",
        spec,
        "--filter",
        filter,
        "--",
    ];
    args.extend_from_slice(command);
    let out = run(&args);
    assert!(out.status.success(), "the recording failed");
    let mut events = 0;
    let mut summary = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        match v["type"].as_str() {
            Some("event") => events += 1,
            Some("summary") => summary = Some(v),
            _ => {}
        }
    }
    let summary = summary.expect("a summary line");
    assert_eq!(summary["lost"], 0, "{summary}");
    let probe = summary["probes"][0].clone();
    assert_eq!(probe["events"], events, "{probe}");
    (events, probe)
}

/// One filter, both tools: bpftrace's count, then kprobe-perf's with the
/// filter in the kernel (`--backend auto`) and in user space (`--backend
/// pmu`, with `&& pid > 0` when the PMU's kernel filter could run it), all
/// equal to `expected`, out of `calls` in all.
fn compare(
    bt_probe: &str,
    spec: &str,
    command: &[&str],
    calls: u64,
    (filter, predicate, expected): (&str, &str, u64),
) {
    let bt = bpftrace_count(bt_probe, predicate, &command.join(" "));
    let (kernel, probe) = kprobe_perf_count("auto", spec, filter, command);
    assert_eq!(probe["filter"]["runs"], "kernel", "{probe}");
    assert_eq!(probe["filter"].get("dropped"), None, "{probe}");
    let (mut user, mut probe) = kprobe_perf_count("pmu", spec, filter, command);
    if probe["filter"]["runs"] == "kernel" {
        let in_user_space = format!("({filter}) && pid > 0");
        (user, probe) = kprobe_perf_count("pmu", spec, &in_user_space, command);
    }
    assert_eq!(probe["filter"]["runs"], "user", "{probe}");
    println!(
        "FIGURES `{filter}` / `{predicate}`: expected {expected}; bpftrace {bt}; \
         kprobe-perf {kernel} (kernel), {user} (user space, dropped {})",
        probe["filter"]["dropped"]
    );
    assert_eq!(bt, expected, "bpftrace: {predicate}");
    assert_eq!(
        kernel, expected,
        "kprobe-perf, filter in the kernel: {filter}"
    );
    assert_eq!(
        user, expected,
        "kprobe-perf, filter in user space: {filter}"
    );
    assert_eq!(probe["filter"]["dropped"], calls - expected, "{probe}");
}

/// vfs_write's count and the writer's comm: numbers, `&&`, `||`, `!`,
/// `&`, string equality and a glob (bpftrace 0.17 has no glob: a prefix
/// pattern `kpw_m*` is `strncmp(comm, "kpw_m", 5) == 0` there).
#[test]
fn vfs_write_filters_count_what_bpftrace_counts() {
    let test = "vfs_write_filters_count_what_bpftrace_counts";
    if !kprobes_available(test) || !bpftrace_runs(test) {
        return;
    }
    let sizes = env!("CARGO_BIN_EXE_write_sizes");
    // (filter, bpftrace predicate, events): 3 x 1 byte by kpw_small,
    // 5 x 100 by kpw_medium, 7 x 5000 by kpw_large.
    let cases: [(&str, &str, u64); 7] = [
        ("count > 50", "arg2 > 50", 5 + 7),
        (
            "count > 50 && comm ~ \"kpw_m*\"",
            "arg2 > 50 && strncmp(comm, \"kpw_m\", 5) == 0",
            5,
        ),
        (
            "comm == \"kpw_small\" || count >= 5000",
            "comm == \"kpw_small\" || arg2 >= 5000",
            3 + 7,
        ),
        (
            "!(count < 100 || comm == \"kpw_large\")",
            "!(arg2 < 100 || comm == \"kpw_large\")",
            5,
        ),
        // 5000 has bit 3 set; 1 and 100 do not.
        (
            "count & 8 && !(comm ~ \"kpw_s*\")",
            "(arg2 & 8) != 0 && strncmp(comm, \"kpw_s\", 5) != 0",
            7,
        ),
        ("comm == \"kpw_medium\"", "comm == \"kpw_medium\"", 5),
        (
            "comm ~ \"kpw_l*\" || comm ~ \"kpw_s*\"",
            "strncmp(comm, \"kpw_l\", 5) == 0 || strncmp(comm, \"kpw_s\", 5) == 0",
            7 + 3,
        ),
    ];
    for case in cases {
        compare(
            "kprobe:vfs_write",
            "p:vfs_write count=$arg3:u64",
            &[sizes],
            15,
            case,
        );
    }
}

/// A uprobe on a test binary's function, filtered on its two arguments.
#[test]
fn uprobe_filters_count_what_bpftrace_counts() {
    let test = "uprobe_filters_count_what_bpftrace_counts";
    if !uprobes_available(test) || !bpftrace_runs(test) {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_filter_calls");
    let spec = format!("p:{bin}:kpf_filter_target i=%di:u64 r=%si:u64");
    let calls =
        |keep: fn(u64, u64) -> bool| (0..1000u64).filter(|i| keep(*i, i % 7)).count() as u64;
    let cases = [
        (
            "i < 10 || r == 6",
            "arg0 < 10 || arg1 == 6",
            calls(|i, r| i < 10 || r == 6),
        ),
        (
            "i >= 500 && !(r == 0 || r == 3)",
            "arg0 >= 500 && !(arg1 == 0 || arg1 == 3)",
            calls(|i, r| i >= 500 && !(r == 0 || r == 3)),
        ),
        (
            "i & 0x100 && r != 2",
            "(arg0 & 0x100) != 0 && arg1 != 2",
            calls(|i, r| i & 0x100 != 0 && r != 2),
        ),
    ];
    // The workload's arithmetic, written out: 10 + 141 calls below 10 or
    // with i % 7 == 6; 357 of i in 500..1000 with i % 7 not 0 nor 3.
    assert_eq!(cases[0].2, 151);
    assert_eq!(cases[1].2, 357);
    for case in cases {
        compare(
            &format!("uprobe:{bin}:kpf_filter_target"),
            &spec,
            &[bin, "1000"],
            1000,
            case,
        );
    }
}
