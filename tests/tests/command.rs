//! The recorded command (`record ... -- CMD`): it starts with default
//! signal actions and no blocked signal, whatever kprobe-perf ignores or
//! handles, and `record` exits with its status. Each case runs with a
//! uprobe recorded system-wide (`-a`; the host has the uprobe PMU, so it
//! runs natively too) and, where kprobes work (the VM), with a kprobe
//! following the command (its events inherited, enabled at exec).

use std::process::{Command, Output};

use kprobe_perf_tests::{kprobe_perf_bin, libc_path, vm_kernel};

/// The probe options of each way to record a command that works here.
fn recordings(test: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let uprobes = std::path::Path::new("/sys/bus/event_source/devices/uprobe").exists()
        && kprobe_perf_engine::testing::check_capabilities().is_ok();
    match libc_path() {
        Some(libc) if uprobes => {
            out.push(vec!["-a".into(), "-e".into(), format!("p:{libc}:getppid")])
        }
        _ => {
            if let Some(k) = vm_kernel() {
                panic!("{test}: uprobes must work inside the VM (kernel {k})");
            }
            println!("note: {test} checks no uprobe here: no uprobe PMU, no CAP_PERFMON/CAP_SYS_ADMIN, or no libc.so mapped");
        }
    }
    if kprobe_perf_engine::testing::preflight().is_ok() {
        out.push(vec!["-e".into(), "p:do_sys_openat2".into()]);
    } else if let Some(k) = vm_kernel() {
        panic!("{test}: kprobes must work inside the VM (kernel {k})");
    } else {
        println!("note: {test} checks no kprobe here: no kprobe PMU (the VM has one)");
    }
    if out.is_empty() {
        println!("SKIP {test}: neither a uprobe nor a kprobe can be opened here");
    }
    out
}

/// `kprobe-perf record -q PROBE -- sh -c SCRIPT`, run from a shell that
/// ignores SIGUSR1 and SIGHUP (ignored signals survive exec).
fn record_sh(probe: &[String], script: &str) -> Output {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("trap '' USR1 HUP; exec \"$0\" \"$@\"")
        .arg(kprobe_perf_bin())
        .args(["record", "-q"])
        .args(probe)
        .args(["--", "sh", "-c", script]);
    cmd.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The summary line says the recording happened (and ran to its end).
fn assert_recorded(out: &Output) {
    let err = text(&out.stderr);
    assert!(
        err.lines()
            .any(|l| l.starts_with("kprobe-perf: ") && l.contains(" events (")),
        "no summary in {err:?}"
    );
}

#[test]
fn command_starts_with_default_signals_and_an_empty_mask() {
    for probe in recordings("command_starts_with_default_signals_and_an_empty_mask") {
        // cat, not a shell builtin: sh may set dispositions of its own.
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("trap '' USR1 HUP; exec \"$0\" \"$@\"")
            .arg(kprobe_perf_bin())
            .args(["record", "-q"])
            .args(&probe)
            .args(["--", "cat", "/proc/self/status"]);
        let out = cmd.output().unwrap();
        let status = text(&out.stdout);
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
        };
        for name in ["SigIgn:", "SigBlk:", "SigCgt:", "SigPnd:"] {
            assert_eq!(
                field(name).as_deref(),
                Some("0000000000000000"),
                "{name} with {probe:?}: {status}"
            );
        }
        assert_eq!(out.status.code(), Some(0), "{probe:?}");
        assert_recorded(&out);
    }
}

#[test]
fn record_exits_with_the_command_status() {
    for probe in recordings("record_exits_with_the_command_status") {
        let out = record_sh(&probe, "exit 7");
        assert_eq!(out.status.code(), Some(7), "{probe:?} {out:?}");
        assert_recorded(&out);
        let out = record_sh(&probe, "exit 0");
        assert_eq!(out.status.code(), Some(0), "{probe:?} {out:?}");
        // Killed by SIGTERM (15): 128 + 15, as a shell says it.
        let out = record_sh(&probe, "kill -TERM $$");
        assert_eq!(out.status.code(), Some(143), "{probe:?} {out:?}");
        assert_recorded(&out);
        assert!(
            text(&out.stderr).contains("kprobe-perf: the command exited with signal: 15 (SIGTERM)"),
            "{out:?}"
        );
    }
}

#[test]
fn a_pipe_closed_early_ends_the_command_quietly() {
    for probe in recordings("a_pipe_closed_early_ends_the_command_quietly") {
        // With SIGPIPE ignored, yes would see EPIPE and complain.
        let out = record_sh(&probe, "yes | head -1");
        assert_eq!(text(&out.stdout), "y\n", "{probe:?}");
        let err = text(&out.stderr);
        assert!(!err.contains("Broken pipe"), "{probe:?}: {err}");
        assert!(
            !err.to_lowercase().contains("write error"),
            "{probe:?}: {err}"
        );
        assert_eq!(out.status.code(), Some(0), "{probe:?} {out:?}");
    }
}

#[test]
fn a_missing_command_is_refused_before_anything_is_attached() {
    for probe in recordings("a_missing_command_is_refused_before_anything_is_attached") {
        let out = Command::new(kprobe_perf_bin())
            .args(["record", "-q"])
            .args(&probe)
            .args(["--", "kprobe-perf-no-such-command", "x"])
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(
            text(&out.stderr),
            "kprobe-perf: command not found: kprobe-perf-no-such-command (in no directory of PATH=/usr/bin:/bin)\n"
        );
        assert_eq!(text(&out.stdout), "");
    }
}

/// The engine's own command target, without the CLI: the session starts
/// `open_loop /etc/hostname 5` held, arms a kprobe that follows it (at
/// exec), releases it in `enable`, and reaps it. Exactly its 5 opens of
/// the file are recorded, all from its pid, and its exit status (0, then
/// 3 for a shell's `exit 3`) comes from the session.
#[test]
fn the_engine_starts_records_and_reaps_a_command() {
    use kprobe_perf_engine::testing::plan_probes;
    use kprobe_perf_engine::{KernelSymbols, RecordTarget, Session, SessionOptions};
    use std::time::{Duration, Instant};
    if !kprobe_perf_tests::kprobes_available("the_engine_starts_records_and_reaps_a_command") {
        return;
    }
    let symbols = KernelSymbols::load().unwrap_or_default();
    let plans = plan_probes(&["p:do_sys_openat2 path=+0(%si):ustring"], &symbols).unwrap();
    let argv = vec![
        env!("CARGO_BIN_EXE_open_loop").to_string(),
        "/etc/hostname".to_string(),
        "5".to_string(),
    ];
    let mut s = Session::open(
        plans.clone(),
        SessionOptions::default().with_target(RecordTarget::command(argv)),
    )
    .unwrap();
    let pid = s.command_pid().unwrap();
    assert_eq!(s.command_status().unwrap(), None, "held until enable");
    s.enable().unwrap();
    let mut opens = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        s.poll(
            Some(Duration::from_millis(100)),
            &mut kprobe_perf_engine::sink_fn(|e| {
                if e.args[0].as_str() == Some("/etc/hostname") {
                    opens.push(e.pid);
                }
            }),
        )
        .unwrap();
        if let Some(status) = s.command_status().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the command did not end");
    };
    s.disable().unwrap();
    s.poll(
        Some(Duration::ZERO),
        &mut kprobe_perf_engine::sink_fn(|e| {
            if e.args[0].as_str() == Some("/etc/hostname") {
                opens.push(e.pid);
            }
        }),
    )
    .unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(opens, vec![pid; 5], "the command's 5 opens, from its pid");
    drop(s);

    let mut s = Session::open(
        plans,
        SessionOptions::default().with_target(RecordTarget::command(vec![
            "sh".into(),
            "-c".into(),
            "exit 3".into(),
        ])),
    )
    .unwrap();
    s.enable().unwrap();
    let status = s.wait_command(Duration::from_secs(30)).unwrap().unwrap();
    assert_eq!(status.code(), Some(3));
}
