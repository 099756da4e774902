//! `kprobe-perf stat`: counting-only events give exact counts.
//!
//! In the VM, `stat -e p:do_sys_openat2 -- open_loop FILE N` counts N more
//! opens than the same command with 0 (the dynamic loader's opens are the
//! same in both), and exactly what `perf stat` counts with its own probe
//! on the same command. Natively (the host has uprobes), an entry uprobe on
//! a function of this test binary counts exactly its calls, through the
//! engine (every CPU) and through the CLI (`-- CMD`: this binary re-run).

use std::process::{Command, Output};

use kprobe_perf_engine::cli::counting::CountingSession;
use kprobe_perf_engine::testing::plan_probes;
use kprobe_perf_engine::{KernelSymbols, RecordTarget};
use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available, skip, uprobes_available, vm_kernel};

const OPEN_LOOP: &str = env!("CARGO_BIN_EXE_open_loop");

/// The probed function: not inlined, not mangled, so the ELF symbol table
/// has it by this name. Called only by this file's tests.
#[no_mangle]
#[inline(never)]
pub extern "C" fn kprobe_perf_stat_target(a: u64) -> u64 {
    std::hint::black_box(a.wrapping_add(1))
}

/// Set in the environment of this binary re-run as a command: the calls
/// of [`kprobe_perf_stat_target`] [`called_as_a_command`] makes.
const CALLS_VAR: &str = "KPROBE_PERF_STAT_CALLS";

/// Does nothing, unless this binary runs as `stat`'s command (with
/// [`CALLS_VAR`] set): then calls the probed function that many times.
#[test]
fn called_as_a_command() {
    let Some(n) = std::env::var(CALLS_VAR)
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
    else {
        return;
    };
    for i in 0..n {
        kprobe_perf_stat_target(i);
    }
}

fn stat(args: &[&str]) -> Output {
    let out = Command::new(kprobe_perf_bin())
        .arg("stat")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kprobe-perf stat {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `stat --json`'s objects: the lines of stdout that start with `{` (the
/// command shares stdout, and prints none such).
fn json_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(str::to_string)
        .collect()
}

/// The count of the only probe in `stat --json`'s output.
fn json_count(out: &Output) -> u64 {
    let lines = json_lines(out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let text = &lines[0];
    let v: serde_json::Value = serde_json::from_str(text).unwrap_or_else(|e| {
        panic!("stat --json printed no JSON object ({e}):\n{text}");
    });
    let probes = v["probes"].as_array().expect("a probes array");
    assert_eq!(probes.len(), 1, "{text}");
    probes[0]["count"].as_u64().expect("a count")
}

#[test]
fn an_entry_uprobe_counts_every_call_exactly() {
    let test = "an_entry_uprobe_counts_every_call_exactly";
    if !uprobes_available(test) {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let spec = format!("p:{}:kprobe_perf_stat_target", exe.display());
    // Through the engine, on every CPU.
    let plans = plan_probes(&[spec.as_str()], &KernelSymbols::default()).unwrap();
    let mut s = CountingSession::open(plans, RecordTarget::AllCpus).unwrap();
    let cpus = kprobe_perf_tests::online_cpus();
    assert_eq!(s.fd_count(), cpus.len(), "one counter per online CPU");
    assert_eq!(
        s.read().unwrap().probes[0].total,
        0,
        "disabled until enable"
    );
    kprobe_perf_stat_target(0);
    s.enable().unwrap();
    for i in 0..12_345 {
        kprobe_perf_stat_target(i);
    }
    let snap = s.read().unwrap();
    assert_eq!(snap.probes[0].total, 12_345);
    assert_eq!(snap.probes[0].per_cpu.values().sum::<u64>(), 12_345);
    assert_eq!(
        snap.probes[0].per_cpu.keys().copied().collect::<Vec<_>>(),
        cpus.iter().map(|&c| Some(c)).collect::<Vec<_>>()
    );
    s.disable().unwrap();
    kprobe_perf_stat_target(0);
    let later = s.read().unwrap();
    assert_eq!(later.probes[0].total, 12_345, "disabled: not counted");
    assert_eq!(later.since(&snap).probes[0].total, 0);
    drop(s);

    // Through the CLI: this binary re-run as the command, calling the
    // function 4,321 times (its uprobe defined in uprobe_events, which
    // follows the command's forks).
    let exe_s = exe.to_str().unwrap();
    let out = Command::new(kprobe_perf_bin())
        .args(["stat", "--json", "-e", &spec, "--", exe_s])
        .args(["--exact", "called_as_a_command", "--test-threads=1"])
        .env(CALLS_VAR, "4321")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json_count(&out), 4321);
    // The table: the count with its thousands separator.
    let out = Command::new(kprobe_perf_bin())
        .args(["stat", "-e", &spec, "--", exe_s])
        .args(["--exact", "called_as_a_command", "--test-threads=1"])
        .env(CALLS_VAR, "123456")
        .output()
        .unwrap();
    assert!(out.status.success());
    // The table is the last two lines (the command's own output is first).
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().collect();
    let [.., header, row] = rows.as_slice() else {
        panic!("no table in:\n{text}");
    };
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["count", "probe"]
    );
    assert_eq!(row.split_whitespace().next(), Some("123,456"), "{text}");
}

/// perf, where the VM (or the host) has it.
fn perf() -> Option<&'static str> {
    ["/usr/bin/perf", "/usr/sbin/perf"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
}

#[test]
fn stat_counts_a_commands_opens_as_perf_stat_does() {
    let test = "stat_counts_a_commands_opens_as_perf_stat_does";
    if !kprobes_available(test) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("kprobe-perf-stat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("f");
    std::fs::write(&file, "x").unwrap();
    let file = file.to_str().unwrap();
    const N: u64 = 5_000;
    let count = |n: u64| {
        let n = n.to_string();
        json_count(&stat(&[
            "--json",
            "-e",
            "p:do_sys_openat2",
            "--",
            OPEN_LOOP,
            file,
            &n,
        ]))
    };
    let bare = count(0);
    let ours = count(N);
    assert_eq!(
        ours - bare,
        N,
        "open_loop {N}: {ours} opens counted, {bare} with 0 (the loader's)"
    );
    // -I: the intervals' counts add up to the same total.
    let out = stat(&[
        "--json",
        "-I",
        "100",
        "-e",
        "p:do_sys_openat2",
        "--",
        OPEN_LOOP,
        file,
        &N.to_string(),
    ]);
    let text = json_lines(&out);
    let mut sum = 0;
    let mut last_time = 0.0;
    for line in &text {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let t = v["time"].as_f64().unwrap();
        assert!(t >= last_time, "{text:?}");
        last_time = t;
        sum += v["probes"][0]["count"].as_u64().unwrap();
    }
    assert_eq!(sum, ours, "the intervals of {text:?}");

    let Some(perf) = perf() else {
        if vm_kernel().is_some() {
            panic!("{test}: perf must be in the VM");
        }
        return skip(test, "perf is not installed (apt-get install linux-perf)");
    };
    if kprobe_perf_tests::kernel_arch() != kprobe_perf_arch::Arch::X86_64 {
        return skip(test, "no arm64 perf in the arm64 VM");
    }
    let _ = Command::new(perf)
        .args(["probe", "-q", "-d", "probe:kpstat"])
        .stderr(std::process::Stdio::null())
        .status();
    let st = Command::new(perf)
        .args(["probe", "-q", "-a", "kpstat=do_sys_openat2"])
        .status()
        .unwrap();
    assert!(st.success(), "perf probe failed");
    let perf_out = Command::new(perf)
        .args([
            "stat",
            "-x",
            ",",
            "-e",
            "probe:kpstat",
            "--",
            OPEN_LOOP,
            file,
        ])
        .arg(N.to_string())
        .output()
        .unwrap();
    let _ = Command::new(perf)
        .args(["probe", "-q", "-d", "probe:kpstat"])
        .status();
    let err = String::from_utf8_lossy(&perf_out.stderr);
    assert!(perf_out.status.success(), "perf stat failed: {err}");
    // -x ,: "COUNT,UNIT,EVENT,..." on stderr.
    let theirs: u64 = err
        .lines()
        .find(|l| l.contains("probe:kpstat"))
        .and_then(|l| l.split(',').next())
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no count in perf stat's output:\n{err}"));
    println!("open_loop {N}: kprobe-perf stat {ours}, perf stat {theirs}, bare {bare}");
    assert_eq!(
        ours, theirs,
        "kprobe-perf stat and perf stat on open_loop {N}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
