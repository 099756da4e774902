//! Boot-time probes: `kprobe-perf boot SPEC...` prints the kernel
//! command-line parameters that define them, and after a boot with those
//! parameters `kprobe-perf boot --collect` reads what they recorded.
//!
//! The probe (tests/data/boot_probes.txt) is on `kernel_execve`, which
//! the kernel calls at boot to start the first process
//! (`run_init_process`, init/main.c: `/init` from the initramfs, with
//! `argv_init` and `envp_init`, whose first entry is `HOME=/`) and for
//! its usermode helpers (`/sbin/modprobe`, with `HOME=/` first too).
//! `cargo xtask test` boots 6.12 a second time for this file, with the
//! parameters `kprobe-perf boot` prints for that probe
//! (`cargo xtask vm --append`); the other VM runs leave it out.

use std::process::Command;

use kprobe_perf_tests::{kprobe_perf_bin, skip_here, vm_kernel};

/// The probes of tests/data/boot_probes.txt (xtask reads the same file).
fn specs() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/boot_probes.txt");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// What `kprobe-perf boot` prints for the specs (stdout, one line).
fn parameters() -> String {
    let out = Command::new(kprobe_perf_bin())
        .arg("boot")
        .args(specs())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .trim_end()
        .to_string()
}

/// Runs anywhere: the parameters are the kernel's form of the probe,
/// with the buffer it needs.
#[test]
fn the_parameters_define_the_probes_in_the_kernels_form() {
    assert_eq!(
        parameters(),
        "ftrace=nop trace_buf_size=1408K kprobe_event=p:kpboot/execve,kernel_execve,\
         file=+0($arg1):string,argv0=+0(+0($arg2)):string,env0=+0(+0($arg3)):string"
    );
}

/// The boot's events, read back: `/init` started once, by pid 1, with
/// its argv and envp; every event a full record.
#[test]
fn boot_time_events_are_read_back_with_exact_values() {
    let test = "boot_time_events_are_read_back_with_exact_values";
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let wanted = parameters();
    let kprobe_event = wanted.split(' ').next_back().unwrap().to_string();
    if !cmdline.split_whitespace().any(|w| w == kprobe_event) {
        // Inside the VM this file runs only in the boot made for it.
        assert!(
            vm_kernel().is_none(),
            "this VM was not booted with {wanted}: run it with cargo xtask vm --append '{wanted}'"
        );
        return skip_here(test, "this kernel was not booted with the probes' parameters (cargo xtask test boots 6.12 with them)");
    }
    let collect = |json: bool| {
        let mut c = Command::new(kprobe_perf_bin());
        c.args(["boot", "--collect"]);
        if json {
            c.arg("--json");
        }
        let out = c.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        (String::from_utf8(out.stdout).unwrap(), stderr)
    };
    let (stdout, stderr) = collect(true);
    println!("{stdout}{stderr}");
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (events, summary) = lines.split_at(lines.len() - 1);
    let summary = &summary[0];
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["lost"], 0, "{summary}");
    assert_eq!(summary["events"], events.len(), "{summary}");
    let init: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["args"]["file"] == "/init")
        .collect();
    assert_eq!(init.len(), 1, "{stdout}");
    assert_eq!(init[0]["tid"], 1);
    assert_eq!(init[0]["event"], "execve");
    assert_eq!(
        init[0]["args"],
        serde_json::json!({"file": "/init", "argv0": "/init", "env0": "HOME=/"})
    );
    for e in events {
        assert_eq!(e["event"], "execve", "{e}");
        assert_eq!(e["args"]["file"], e["args"]["argv0"], "{e}");
        assert_eq!(e["args"]["env0"], "HOME=/", "{e}");
    }
    // Reading consumed them: the second reading has no /init.
    let (again, _) = collect(false);
    assert!(!again.contains("/init"), "{again}");
    assert!(
        stderr.contains(&format!(
            "kprobe-perf: {} events (execve: {}), 0 lost",
            events.len(),
            events.len()
        )),
        "{stderr}"
    );
    to_a_file_after_the_boot();
}

/// The probes stay armed after the boot: a module the kernel asks for
/// (a file system type it does not know: `request_module("fs-NAME")`
/// runs `/sbin/modprobe` through kernel_execve) is one more event, which
/// `--collect -o` writes to a perf.data file that `script -i` and perf
/// read back with the same values.
fn to_a_file_after_the_boot() {
    let dir = std::env::temp_dir().join(format!("boot_probes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let refused = Command::new("mount")
        .args(["-t", "kpfnosuchfs", "none"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!refused.status.success(), "{refused:?}");
    let file = dir.join("boot.data");
    let out = Command::new(kprobe_perf_bin())
        .args(["boot", "--collect", "-o"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let script = Command::new(kprobe_perf_bin())
        .args(["script", "--json", "-i"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(script.status.success(), "{script:?}");
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&script.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "event")
        .collect();
    println!("{stderr}{}", String::from_utf8_lossy(&script.stdout));
    assert!(!events.is_empty(), "{stderr}");
    assert!(
        stderr.contains(&format!("wrote {} boot-time events", events.len())),
        "{stderr}"
    );
    for e in &events {
        assert_eq!(
            e["args"],
            serde_json::json!({"file": "/sbin/modprobe", "argv0": "/sbin/modprobe", "env0": "HOME=/"}),
            "{e}"
        );
        let at = e["location"].as_str().unwrap_or_default();
        assert!(at.starts_with("kernel_execve+0x"), "{e}");
    }
    let perf = Command::new("perf")
        .args(["script", "-i"])
        .arg(&file)
        .output()
        .unwrap();
    let perf_text = String::from_utf8_lossy(&perf.stdout);
    println!("{perf_text}");
    let values = r#"execve: (ffffffff"#;
    let args = r#") file="/sbin/modprobe" argv0="/sbin/modprobe" env0="HOME=/""#;
    let agreeing = perf_text
        .lines()
        .filter(|l| l.contains(values) && l.ends_with(args))
        .count();
    assert_eq!(agreeing, events.len(), "{perf_text}");
    std::fs::remove_dir_all(&dir).unwrap();
}
