//! The engine's perf.data sink (`perfdata::FileSink`) from an embedder's
//! code (`engine/examples/record_perfdata.rs`): a recording of a command
//! with a PMU kprobe and a tracefs kretprobe (maxactive, so defined in
//! kprobe_events, whose format the file must carry for perf), read back
//! by `perf script` and by `kprobe-perf script`, with the same events and
//! the failed open's `ret=-2` in both.

use std::process::Command;

use kprobe_perf_tests::{example_bin, for_kernel, kprobe_perf_bin, kprobes_available, skip_here};

#[test]
fn a_command_recorded_through_the_engines_sink_reads_in_perf_and_in_script() {
    let test = "a_command_recorded_through_the_engines_sink_reads_in_perf_and_in_script";
    if !kprobes_available(test) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("kpf-sink-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("sink.data");
    let out = Command::new(example_bin("record_perfdata"))
        .arg(&file)
        .arg(for_kernel("p:do_sys_openat2 dfd=%di:s32"))
        .arg("r4:do_sys_openat2 ret=$retval:s64")
        .args([
            "--",
            "sh",
            "-c",
            "cat /etc/hostname >/dev/null; cat /no/such/file 2>/dev/null || true",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("events: ")?.parse().ok())
        .unwrap();
    let ours = Command::new(kprobe_perf_bin())
        .args(["script", "-i"])
        .arg(&file)
        .output()
        .unwrap();
    let ours = String::from_utf8_lossy(&ours.stdout).into_owned();
    let Ok(perf) = Command::new("perf")
        .args(["script", "-i"])
        .arg(&file)
        .output()
    else {
        let _ = std::fs::remove_dir_all(&dir);
        return skip_here(test, "perf is not installed (apt-get install linux-perf)");
    };
    let theirs = String::from_utf8_lossy(&perf.stdout).into_owned();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        perf.status.success(),
        "perf script refused the file: {}",
        String::from_utf8_lossy(&perf.stderr)
    );
    let count = |text: &str, event: &str| text.lines().filter(|l| l.contains(event)).count();
    for event in ["p_do_sys_openat2_0:", "r_do_sys_openat2_0:"] {
        assert_eq!(
            count(&ours, event),
            count(&theirs, event),
            "{event}\nours:\n{ours}\nperf:\n{theirs}"
        );
    }
    assert_eq!(count(&ours, "do_sys_openat2_0:"), events, "{ours}");
    assert!(events >= 4, "{ours}");
    assert!(ours.contains("ret=-2"), "{ours}");
    assert!(theirs.contains("ret=-2"), "{theirs}");
}
