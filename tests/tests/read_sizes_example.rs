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
