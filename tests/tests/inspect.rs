//! `kprobe-perf list`, `probe --lines` and the preflight refusal of
//! `record`, against the VM kernels' own symbols and answers.

use std::process::Command;

use kprobe_perf_arch::boundary::ProbeSite;
use kprobe_perf_engine::testing::ask_kernel;
use kprobe_perf_engine::testing::pmu::ProbePmu;
use kprobe_perf_engine::KernelSymbols;
use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available};

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(kprobe_perf_bin()).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn list_names_every_instance_and_explains_exclusions() {
    if !kprobes_available("list_names_every_instance_and_explains_exclusions") {
        return;
    }
    let (ok, out, err) = run(&["list", "do_sys_open*"]);
    assert!(ok, "{err}");
    let mut got: Vec<&str> = out.lines().collect();
    got.sort();
    assert_eq!(got, ["do_sys_open", "do_sys_openat2"], "{err}");
    assert!(
        err.contains("do_sys_open*: 2 matched, 2 kept, 0 excluded; notrace judged from the function bytes (/proc/kcore"),
        "{err}"
    );

    // init_once has several instances: each is listed by its address.
    let syms = KernelSymbols::load().unwrap();
    let mut want: Vec<String> = syms
        .lookup("init_once")
        .iter()
        .filter(|s| s.is_text())
        .map(|s| s.label())
        .collect();
    assert!(want.len() > 1, "init_once is unique here: {want:?}");
    let (ok, out, err) = run(&["list", "init_once"]);
    assert!(ok, "{err}");
    let mut got: Vec<String> = out.lines().map(str::to_string).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);

    // The name alone is refused with every instance; NAME@0xADDR attaches.
    let (ok, _, err) = run(&["record", "-e", "p:init_once", "-d", "0.1"]);
    assert!(!ok);
    assert!(
        err.starts_with(&format!(
            "kprobe-perf: init_once names {} functions (",
            want.len()
        )),
        "{err}"
    );
    let (ok, _, err) = run(&["record", "-e", &format!("p:{}", got[0]), "-d", "0.5"]);
    assert!(ok, "{err}");
    assert!(err.contains("(p_init_once_0: "), "{err}");
    let (ok, _, err) = run(&[
        "record",
        "-e",
        "p:init_once",
        "--all-instances",
        "-d",
        "0.5",
    ]);
    assert!(ok, "{err}");
    assert!(
        err.starts_with(&format!(
            "kprobe-perf: p:init_once: {} probes (",
            want.len()
        )),
        "{err}"
    );

    let (ok, out, err) = run(&["list", "--why", "tcp_v4_*"]);
    assert!(ok, "{err}");
    assert!(
        out.lines().any(|l| l
            == "excluded  tcp_v4_init: it is __init code (between _sinittext and _einittext), freed after boot"),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l == "kept      tcp_v4_connect"),
        "{out}"
    );

    // A glob in a definition makes one probe per function list keeps
    // (on the PMU: under auto, a kernel with fprobe events makes it
    // fprobe events instead, tested in fprobe.rs).
    let (ok, kept, _) = run(&["list", "tcp_v4_*"]);
    assert!(ok);
    let n = kept.lines().count();
    let (ok, _, err) = run(&[
        "record",
        "--backend",
        "pmu",
        "-e",
        "p:tcp_v4_*",
        "-d",
        "0.2",
    ]);
    assert!(ok, "{err}");
    assert!(
        err.starts_with(&format!("kprobe-perf: p:tcp_v4_*: {n} probes (")),
        "{err}"
    );
    // More than 8 probes: the closing summary is a table; with no event in
    // 0.2 s, every probe is on its folded line, counted.
    assert!(
        err.contains(&format!("events ({n} probes, by events below)")),
        "{err}"
    );
    let listed: usize = err
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("EVENTS"))
        .skip(1)
        .map(|l| match l.split_once(" probes with no event: ") {
            Some((head, _)) => head
                .split_whitespace()
                .last()
                .and_then(|c| c.parse().ok())
                .unwrap_or(0),
            None => usize::from(l.trim_start().starts_with(char::is_numeric)),
        })
        .sum();
    assert_eq!(listed, n, "every probe in the table: {err}");
}

#[test]
fn lines_and_record_refuse_what_the_kernel_refuses() {
    if !kprobes_available("lines_and_record_refuse_what_the_kernel_refuses") {
        return;
    }
    let (ok, out, err) = run(&["probe", "--lines", "do_sys_openat2"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("do_sys_openat2 at 0x"), "{out}");
    // The entry takes both kinds of probe; on an IBT kernel it is the
    // ENDBR64 at +0, which the kernel moves to +4.
    assert!(lines[2].starts_with("  +0      p r "), "{out}");
    // The first offset that is not an instruction start.
    let starts: Vec<u64> = lines
        .iter()
        .filter_map(|l| l.trim_start().strip_prefix('+'))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    let inside = (1..).find(|o| !starts.contains(o)).unwrap();
    let pmu = ProbePmu::discover("kprobe").unwrap().unwrap();
    let kernel = ask_kernel(pmu, "do_sys_openat2", inside, ProbeSite::Entry)
        .map(|_| ())
        .map_err(|e| e.raw_os_error());
    assert_eq!(
        kernel,
        Err(Some(libc::EILSEQ)),
        "the kernel's answer at +{inside}"
    );
    let spec = format!("p:do_sys_openat2+{inside}");
    let (ok, out, err) = run(&["record", "-e", &spec, "--", "true"]);
    assert!(!ok, "{out}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.starts_with(&format!(
            "kprobe-perf: do_sys_openat2+{inside} falls inside the "
        )),
        "{err}"
    );
    assert!(
        err.contains("(the kernel would answer EILSEQ; bytes from /proc/kcore"),
        "{err}"
    );
}
