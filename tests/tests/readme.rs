//! The docs' examples, one runner for both kinds:
//!
//! - docs/from-perf.md's tables: each kprobe-perf command (the last
//!   column) runs in a directory holding `./prog` (tests/data/habits.c,
//!   built with `cc -g`) and must succeed; the programs' rows wherever
//!   there is a uprobe PMU (natively too), the USDT rows where
//!   /usr/bin/python3.11 has its SDT notes, the kernel's where the kernel
//!   has kprobes (the VM);
//! - the README's examples, run as the README shows them: every `# COMMAND`
//!   of a ```console block whose marker names the kernel this test runs on
//!   (`<!-- example: 6.1 -->`), its output (stdout and stderr together)
//!   compared with the lines under it ([`kprobe_perf_tests::readme`] says
//!   what varies by run and is masked).
//!
//! Each block's commands run in order in one new directory (so that
//! `# cat vfs_read.folded` reads what the command before it wrote), with
//! `kprobe-perf` and the tests' workloads (`open_loop`, `write_sizes`) on
//! PATH, in a mount namespace of their own where `/etc/hostname` holds
//! `vm`: the host's root is the guest's, and the README's commands print
//! that file.

use std::path::{Path, PathBuf};
use std::process::Command;

use kprobe_perf_tests::readme::{compare, examples, table_commands, Example};
use kprobe_perf_tests::{build_c, kprobe_perf_bin, skip, skip_here, uprobes_available, vm_kernel};

const OPEN_LOOP: &str = env!("CARGO_BIN_EXE_open_loop");

/// A file of the repository, from its root.
fn doc_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(|p| p.join(name))
        .unwrap_or_default()
}

fn readme_path() -> PathBuf {
    doc_path("README.md")
}

#[test]
fn every_console_block_names_its_kernel() {
    let text = std::fs::read_to_string(readme_path()).unwrap();
    if let Err(bad) = examples(&text) {
        let lines: Vec<String> = bad
            .iter()
            .map(|b| format!("README.md:{}: {}", b.line, b.why))
            .collect();
        panic!("README examples that cannot be run:\n{}", lines.join("\n"));
    }
}

/// The PATH the README's commands see: kprobe-perf's directory and the
/// workloads', then the usual one.
fn search_path() -> String {
    let mut dirs: Vec<String> = Vec::new();
    for p in [kprobe_perf_bin(), PathBuf::from(OPEN_LOOP)] {
        if let Some(d) = p.parent() {
            let d = d.display().to_string();
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    dirs.push(std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into()));
    dirs.join(":")
}

/// Runs one command in `dir`, in its own mount namespace with
/// `/etc/hostname` reading `vm`; stdout and stderr together.
fn run(example: &Example, dir: &Path) -> String {
    let hostname = dir.join(".hostname");
    std::fs::write(&hostname, "vm\n").unwrap();
    let script = format!(
        "mount --make-rprivate / && mount --bind '{}' /etc/hostname && exec sh -c \"$0\" 2>&1",
        hostname.display()
    );
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &script, &example.command])
        .current_dir(dir)
        .env("PATH", search_path())
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    text
}

#[test]
fn readme_examples_print_what_the_readme_shows() {
    let test = "readme_examples_print_what_the_readme_shows";
    let Some(kernel) = vm_kernel() else {
        return skip(
            test,
            "the README's examples run in the VM on the kernels they name",
        );
    };
    let text = std::fs::read_to_string(readme_path()).unwrap();
    let all = examples(&text).unwrap_or_default();
    let mine: Vec<&Example> = all.iter().filter(|e| e.kernel == kernel).collect();
    if mine.is_empty() {
        return skip_here(test, &format!("no README example names kernel {kernel}"));
    }
    let root = std::env::temp_dir().join(format!("kpf-readme-{}", std::process::id()));
    let mut failures = Vec::new();
    for e in &mine {
        let dir = root.join(e.block.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let output = run(e, &dir);
        println!("README.md:{}: # {}\n{output}", e.line, e.command);
        if let Err(why) = compare(&e.expected, &output, e.shape) {
            failures.push(format!("README.md:{}: # {}\n{why}", e.line, e.command));
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    assert!(
        failures.is_empty(),
        "{} of {} README examples on {kernel} differ:\n\n{}",
        failures.len(),
        mine.len(),
        failures.join("\n\n")
    );
}

/// Whether the rows under `heading` of docs/from-perf.md can run here.
fn table_runs_here(heading: &str) -> bool {
    if heading.starts_with("Kernel") {
        Path::new("/sys/bus/event_source/devices/kprobe").exists()
    } else if heading.contains("USDT") {
        Path::new("/usr/bin/python3.11").exists()
    } else {
        true
    }
}

/// The rows of docs/from-perf.md's program tables (uprobes, USDT): here
/// and in one VM of each pair (xtask's once-per-pair list), since the
/// kernels do not differ for them.
#[test]
fn every_kprobe_perf_command_of_the_from_perf_tables_succeeds() {
    let test = "every_kprobe_perf_command_of_the_from_perf_tables_succeeds";
    if !uprobes_available(test) {
        return;
    }
    run_from_perf_rows(test, |heading| !heading.starts_with("Kernel"), 25);
}

/// The rows of docs/from-perf.md's kernel table, on every kernel that
/// has kprobes.
#[test]
fn every_kprobe_perf_command_of_the_from_perf_kernel_table_succeeds() {
    let test = "every_kprobe_perf_command_of_the_from_perf_kernel_table_succeeds";
    if !Path::new("/sys/bus/event_source/devices/kprobe").exists() {
        return skip(
            test,
            "this kernel has no kprobe PMU (the kernel table runs in the VM)",
        );
    }
    run_from_perf_rows(test, |heading| heading.starts_with("Kernel"), 3);
}

/// Runs the rows of docs/from-perf.md under the headings `wanted` takes
/// that can run here, and fails with each row that failed.
fn run_from_perf_rows(test: &str, wanted: fn(&str) -> bool, at_least: usize) {
    let doc = std::fs::read_to_string(doc_path("docs/from-perf.md")).unwrap();
    let rows: Vec<_> = table_commands(&doc)
        .into_iter()
        .filter(|row| wanted(&row.heading))
        .collect();
    assert!(rows.len() >= at_least, "{} rows", rows.len());
    let Some(prog) = build_c(test, "habits", &["-O1", "-g", "-fno-omit-frame-pointer"]) else {
        return;
    };
    std::fs::rename(&prog.bin, prog.dir.join("prog")).unwrap();
    let mut sleeper = Command::new("sleep").arg("2").spawn().unwrap();
    let mut ran = 0;
    let mut failures = Vec::new();
    for row in &rows {
        if !table_runs_here(&row.heading) {
            println!("not here: {}: {}", row.heading, row.task);
            continue;
        }
        let command = row.command.replace("PID", &sleeper.id().to_string());
        let out = Command::new("sh")
            .args(["-c", &command])
            .current_dir(&prog.dir)
            .env("PATH", search_path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        if !out.status.success() {
            failures.push(format!(
                "docs/from-perf.md:{}: {}: {command}\n{}",
                row.line,
                row.task,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        ran += 1;
    }
    let _ = sleeper.wait();
    println!("{ran} of {} rows ran", rows.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ran >= at_least, "{ran}");
}
