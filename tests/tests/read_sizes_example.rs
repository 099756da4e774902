//! The engine's `read_sizes` example (`engine/examples/read_sizes.rs`):
//! the library's answers (a count per command name, a log2 histogram and
//! its percentiles) of a uprobe on libc's `read`, for a command whose one
//! read is known: `head -c 3 FILE` asks for exactly 3 bytes, once.

use std::process::Command;

use kprobe_perf_tests::{example_bin, skip_here, uprobes_available};

#[test]
fn read_sizes_counts_and_draws_heads_one_read_of_3_bytes() {
    let test = "read_sizes_counts_and_draws_heads_one_read_of_3_bytes";
    if !uprobes_available(test) {
        return;
    }
    if !std::path::Path::new("/usr/bin/head").exists() {
        return skip_here(test, "no /usr/bin/head");
    }
    let file = std::env::temp_dir().join(format!("kpf-read-sizes-{}", std::process::id()));
    std::fs::write(&file, "abcdef").unwrap();
    let out = Command::new(example_bin("read_sizes"))
        .args(["/usr/bin/head", "-c", "3"])
        .arg(&file)
        .env("LANG", "C")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // head's own output ("abc", no newline) comes first.
    let report = stdout.strip_prefix("abc").unwrap_or(&stdout);
    assert_eq!(
        report,
        "reads by comm:\n  head             1\nsize of p_libc_read_0:\n  [2, 4) 1\n  p50 3 p99 3 (exact: true)\nlost: 0\n"
    );
}

/// The engine's `perfdata_answers` example
/// (`engine/examples/perfdata_answers.rs`): the same answers offline,
/// from a perf.data file the CLI wrote of the same command, with the
/// file's records by type.
#[test]
fn perfdata_answers_finds_heads_one_read_of_3_bytes_in_the_file() {
    let test = "perfdata_answers_finds_heads_one_read_of_3_bytes_in_the_file";
    if !uprobes_available(test) {
        return;
    }
    let (Some(libc), true) = (
        kprobe_perf_tests::libc_path(),
        std::path::Path::new("/usr/bin/head").exists(),
    ) else {
        return skip_here(test, "no libc path or no /usr/bin/head");
    };
    let dir = std::env::temp_dir().join(format!("kpf-perfdata-answers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (input, data) = (dir.join("input"), dir.join("reads.data"));
    std::fs::write(&input, "abcdef").unwrap();
    let record = Command::new(kprobe_perf_tests::kprobe_perf_bin())
        .env("LANG", "C")
        .args(["record", "-q", "-o"])
        .arg(&data)
        .arg("-e")
        .arg(format!("p:{libc}:read size=$arg3:u64"))
        .args(["--", "/usr/bin/head", "-c", "3"])
        .arg(&input)
        .output()
        .unwrap();
    assert!(
        record.status.success(),
        "{}",
        String::from_utf8_lossy(&record.stderr)
    );
    let out = Command::new(example_bin("perfdata_answers"))
        .arg(&data)
        .args(["comm", "size"])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    // One attr (the probe), its events one per CPU or one for the command.
    assert!(lines[0].starts_with("probe 0: "), "{stdout}");
    // The census: one sample and one EXIT; a COMM at least (head's exec,
    // and one learned from /proc should a ring be read before the one
    // holding the exec); the mmaps depend on the libraries head maps.
    let census: std::collections::HashMap<&str, u64> = lines[1]
        .trim_start_matches("records: ")
        .split(", ")
        .filter_map(|p| p.rsplit_once(' '))
        .filter_map(|(k, n)| Some((k, n.parse().ok()?)))
        .collect();
    assert_eq!(census.get("sample"), Some(&1), "{}", lines[1]);
    assert_eq!(census.get("exit"), Some(&1), "{}", lines[1]);
    assert!(census.get("comm").is_some_and(|&n| n >= 1), "{}", lines[1]);
    assert_eq!(
        lines[2..].join("\n"),
        "events by comm (1 in all):\n  head             1\nsize of p_libc_read_0:\n  [2, 4) 1\n  p50 3 p75 3 p99 3 (exact: true)"
    );
}
