//! `record --filter`: exact counts on workloads of known argument values,
//! the same whether the kernel runs the filter (tracefs-defined events,
//! or common fields on any probe) or the engine does (arguments of PMU
//! probes, `pid`), what the summary says of each, and refusals.
//!
//! Workloads: `write_sizes` (vfs_write with count 1 three times by thread
//! `kpw_small`, 100 five times by `kpw_medium`, 5000 seven times by
//! `kpw_large`) and `filter_calls N` (`kpf_filter_target(i, i % 7)` for i
//! in 0..N).

use std::process::{Command, Output};

use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available, uprobes_available};

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

/// Events of a `--json` recording and its summary's first probe.
fn events_and_probe(out: &Output) -> (usize, serde_json::Value) {
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
    (events, summary["probes"][0].clone())
}

/// Records `write_sizes` with `filter` on vfs_write's count.
fn write_sizes(backend: &str, filter: &str) -> (usize, serde_json::Value) {
    let out = run(&[
        "record",
        "--json",
        "--backend",
        backend,
        "-e",
        "p:vfs_write count=$arg3:u64",
        "--filter",
        filter,
        "--",
        env!("CARGO_BIN_EXE_write_sizes"),
    ]);
    events_and_probe(&out)
}

/// Each filter gives the same exact count in the kernel (tracefs) and in
/// user space (PMU, or tracefs with a `pid` test), and the summary says
/// where it ran and, in user space, what it dropped (15 writes in all).
#[test]
fn kernel_and_user_space_filters_agree_on_vfs_write() {
    if !kprobes_available("kernel_and_user_space_filters_agree_on_vfs_write") {
        return;
    }
    let cases: [(&str, usize); 5] = [
        ("count == 100", 5),
        ("count > 50 && comm ~ \"kpw_l*\"", 7),
        ("comm == \"kpw_small\" || count >= 5000", 10),
        ("!(count < 100)", 12),
        (
            "count & 0x8 && (comm ~ \"*[l]arge\" || comm ~ \"kpw_[m]*\")",
            7,
        ),
    ];
    for (filter, expected) in cases {
        let (n, probe) = write_sizes("tracefs", filter);
        assert_eq!(n, expected, "in the kernel: {filter}");
        assert_eq!(probe["events"], expected, "{probe}");
        assert_eq!(probe["filter"]["runs"], "kernel", "{probe}");
        assert_eq!(probe["filter"]["expr"], filter, "{probe}");
        assert_eq!(probe["filter"].get("dropped"), None, "{probe}");

        let (n, probe) = write_sizes("pmu", filter);
        assert_eq!(n, expected, "in user space: {filter}");
        assert_eq!(probe["filter"]["runs"], "user", "{probe}");
        assert_eq!(probe["filter"]["dropped"], 15 - expected, "{probe}");

        // `pid` keeps it in user space even on a tracefs event.
        let with_pid = format!("({filter}) && pid > 0");
        let (n, probe) = write_sizes("tracefs", &with_pid);
        assert_eq!(n, expected, "in user space: {with_pid}");
        assert_eq!(probe["filter"]["runs"], "user", "{probe}");
        assert_eq!(probe["filter"]["dropped"], 15 - expected, "{probe}");
    }
}

/// `--backend auto` takes the tracefs route for a filter on arguments;
/// over a command it takes it for any kernel probe (one kprobe for every
/// inherited event), and the kernel runs a filter on common fields there
/// too, as it does on a PMU probe's own record (`--backend pmu`).
#[test]
fn auto_puts_a_filter_where_the_kernel_runs_it() {
    if !kprobes_available("auto_puts_a_filter_where_the_kernel_runs_it") {
        return;
    }
    let (n, probe) = write_sizes("auto", "count == 5000");
    assert_eq!(n, 7);
    assert_eq!(probe["backend"], "tracefs", "{probe}");
    assert_eq!(probe["filter"]["runs"], "kernel", "{probe}");
    let (n, probe) = write_sizes("auto", "comm == \"kpw_medium\"");
    assert_eq!(n, 5);
    assert_eq!(probe["backend"], "tracefs", "{probe}");
    assert_eq!(probe["filter"]["runs"], "kernel", "{probe}");
    let (n, probe) = write_sizes("pmu", "comm == \"kpw_medium\"");
    assert_eq!(n, 5);
    assert_eq!(probe["backend"], "pmu", "{probe}");
    assert_eq!(probe["filter"]["runs"], "kernel", "{probe}");
    let (n, probe) = write_sizes("pmu", "comm ~ \"kpw_[ls]*\" && tid > 0");
    assert_eq!(n, 10);
    assert_eq!(probe["backend"], "pmu", "{probe}");
    assert_eq!(probe["filter"]["runs"], "kernel", "{probe}");
}

/// A PMU kretprobe's kernel filter is set on its entry counter too, so
/// the calls counted entering and returning stay paired; a user-space
/// filter leaves both counts whole and counts what it dropped.
#[test]
fn a_kretprobe_filter_keeps_entries_and_returns_paired() {
    if !kprobes_available("a_kretprobe_filter_keeps_entries_and_returns_paired") {
        return;
    }
    for (filter, runs, events, entries) in [
        ("comm == \"kpw_medium\"", "kernel", 5, 5),
        ("ret == 100", "user", 5, 15),
    ] {
        let out = run(&[
            "record",
            "--json",
            "--backend",
            "pmu",
            "-e",
            "r:vfs_write ret=$retval:s64",
            "--filter",
            filter,
            "--",
            env!("CARGO_BIN_EXE_write_sizes"),
        ]);
        let (n, probe) = events_and_probe(&out);
        assert_eq!(n, events, "{filter}");
        assert_eq!(probe["filter"]["runs"], runs, "{probe}");
        assert_eq!(probe["entries"], entries, "{probe}");
        assert_eq!(probe["unreturned"], 0, "{probe}");
        if runs == "user" {
            assert_eq!(probe["filter"]["dropped"], 10, "{probe}");
        }
    }
}

/// A uprobe on a function called with i = 0..1000: the kernel (through
/// uprobe_events) and user space keep the same calls.
#[test]
fn uprobe_filters_agree_in_the_kernel_and_in_user_space() {
    if !uprobes_available("uprobe_filters_agree_in_the_kernel_and_in_user_space") {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_filter_calls");
    let spec = format!("p:{bin}:kpf_filter_target i=%di:u64 r=%si:u64");
    let expected = (0..1000u64).filter(|i| *i < 10 || i % 7 == 6).count();
    assert_eq!(expected, 10 + 141);
    for (filter, runs) in [
        ("i < 10 || r == 6", "kernel"),
        ("(i < 10 || r == 6) && pid > 0", "user"),
    ] {
        let out = run(&[
            "record", "--json", "-e", &spec, "--filter", filter, "--", bin, "1000",
        ]);
        let (n, probe) = events_and_probe(&out);
        assert_eq!(n, expected, "{filter}");
        assert_eq!(probe["filter"]["runs"], runs, "{probe}");
        if runs == "user" {
            assert_eq!(probe["filter"]["dropped"], 1000 - expected, "{probe}");
        }
    }
}

/// A bad filter is refused before anything is attached: exit status 1,
/// the reason, the filter and a caret under the token, nothing printed
/// on stdout.
#[test]
fn a_bad_filter_is_refused_with_a_caret() {
    if !kprobes_available("a_bad_filter_is_refused_with_a_caret") {
        return;
    }
    let cases = [
        (
            "count > 10 && cnt < 5",
            "kprobe-perf: the filter of p:vfs_write count=$arg3:u64 is refused: unknown field `cnt`: this probe's fields are count, comm, pid, tid, cpu\n  count > 10 && cnt < 5\n                ^^^\n",
        ),
        (
            "count == \"100\"",
            "kprobe-perf: the filter of p:vfs_write count=$arg3:u64 is refused: `count` is a number (u64): compare it with a number, not a string\n  count == \"100\"\n           ^^^^^\n",
        ),
        (
            "(count == 1 || comm == \"x\"",
            "kprobe-perf: the filter of p:vfs_write count=$arg3:u64 is refused: unbalanced parenthesis: this `(` is never closed\n  (count == 1 || comm == \"x\"\n  ^\n",
        ),
    ];
    for (filter, message) in cases {
        let out = run(&[
            "record",
            "-e",
            "p:vfs_write count=$arg3:u64",
            "--filter",
            filter,
            "--",
            "true",
        ]);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(String::from_utf8_lossy(&out.stderr), message);
        assert!(out.stdout.is_empty());
    }
    let out = run(&[
        "record",
        "--filter",
        "count > 1",
        "-e",
        "p:vfs_write",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "kprobe-perf: --filter \"count > 1\" comes before any -e: a filter applies to the probe (-e) given before it, as in perf record; write -e SPEC --filter EXPR\n"
    );
}

/// The kernel's own explanation of a filter it refuses, as the session
/// gives it when PERF_EVENT_IOC_SET_FILTER fails (which itself says only
/// EINVAL): written to a private instance, read back from its error_log.
#[test]
fn a_kernel_refusal_is_explained_from_error_log() {
    use kprobe_perf_engine::cli::tracefs::{ProbeKind, Tracefs, TracefsProbes};
    if !kprobes_available("a_kernel_refusal_is_explained_from_error_log") {
        return;
    }
    let mut probes = TracefsProbes::new(Tracefs::find().unwrap());
    let group = probes.group().to_string();
    probes
        .define(
            ProbeKind::Kernel,
            &format!("p:{group}/kpf_filter vfs_write count=$arg3:u64"),
            "kpf_filter",
        )
        .unwrap();
    let fs = probes.tracefs();
    assert_eq!(
        fs.explain_filter(&group, "kpf_filter", "count > 1 && cnt < 5"),
        // The kernel puts its caret after the field it did not find.
        Some("Field not found\n  count > 1 && cnt < 5\n                   ^".to_string())
    );
    assert_eq!(
        fs.explain_filter(&group, "kpf_filter", "count > 1 && (count < 5"),
        Some("Too many '('\n  count > 1 && (count < 5\n               ^".to_string())
    );
    // A filter the kernel takes explains nothing, and leaves no instance.
    assert_eq!(fs.explain_filter(&group, "kpf_filter", "count > 1"), None);
    let instances = std::fs::read_dir(fs.root().join("instances")).unwrap();
    let left: Vec<_> = instances
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("kprobe_perf_"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `stat --filter`: the kernel counts only what passes, the same counts
/// as `record`; a filter only user space can run is refused.
#[test]
fn stat_counts_only_what_the_kernel_filter_passes() {
    if !kprobes_available("stat_counts_only_what_the_kernel_filter_passes") {
        return;
    }
    let sizes = env!("CARGO_BIN_EXE_write_sizes");
    let spec = "p:vfs_write count=$arg3:u64";
    let out = run(&[
        "stat",
        "--json",
        "-e",
        spec,
        "--filter",
        "count == 100",
        "-e",
        spec,
        "--filter",
        "comm ~ \"kpw_[sl]*\"",
        "--",
        sizes,
    ]);
    assert!(out.status.success());
    let v: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    let counts: Vec<u64> = v["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["count"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [5, 10], "{v}");
    // On the PMU, the record has no `count`: nothing can count with it.
    let out = run(&[
        "stat",
        "--backend",
        "pmu",
        "-e",
        spec,
        "--filter",
        "count == 100",
        "--",
        sizes,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "kprobe-perf: cannot count p vfs_write count=$arg3:u64 with the filter `count == 100`: counting happens in the kernel, which cannot run it (a PMU probe's record carries no argument (`count`); a tracefs-defined one's does (--backend auto or tracefs)); `record -q --filter` runs it in user space and counts what passes\n"
    );
}

/// With -o, a user-space filter is stored with its probe (the file holds
/// every sample the kernel wrote) and `script -i` runs it again: the
/// replay prints what the recording printed; a kernel filter's file holds
/// only what passed.
#[test]
fn script_replays_a_filtered_recording_as_recorded() {
    if !kprobes_available("script_replays_a_filtered_recording_as_recorded") {
        return;
    }
    for (backend, runs) in [("pmu", "user"), ("tracefs", "kernel")] {
        let file = format!("/tmp/kpf-filter-{backend}.data");
        let _ = std::fs::remove_file(&file);
        let out = run(&[
            "record",
            "--json",
            "--force",
            "-o",
            &file,
            "--backend",
            backend,
            "-e",
            "p:vfs_write count=$arg3:u64",
            "--filter",
            "count == 100 || comm == \"kpw_small\"",
            "--",
            env!("CARGO_BIN_EXE_write_sizes"),
        ]);
        let (n, probe) = events_and_probe(&out);
        assert_eq!(n, 8);
        assert_eq!(probe["filter"]["runs"], runs, "{probe}");
        let replay = run(&["script", "--json", "-i", &file]);
        let (m, replayed) = events_and_probe(&replay);
        assert_eq!(m, 8, "{backend}");
        assert_eq!(replayed, probe);
        // Text events, line for line.
        let text = run(&["script", "-i", &file]);
        assert!(text.status.success());
        let lines = String::from_utf8_lossy(&text.stdout).lines().count();
        assert_eq!(lines, 8, "{backend}");
        let _ = std::fs::remove_file(&file);
    }
}
