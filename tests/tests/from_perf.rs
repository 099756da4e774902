//! docs/from-perf.md's kprobe-perf commands, each run as the table
//! shows it: the programs' rows natively (uprobes), the USDT rows where
//! /usr/bin/python3.11 has its SDT notes, the kernel's where the kernel
//! has kprobes. `./prog` is tests/data/habits.c, built with `cc -g`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kprobe_perf_tests::{kprobe_perf_bin, skip_here, uprobes_available};

/// The kprobe-perf cell of each row of the table under each `## `
/// heading: (heading, task, command).
fn rows(doc: &str) -> Vec<(String, String, String)> {
    let mut heading = String::new();
    let mut out = Vec::new();
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            heading = h.to_string();
            continue;
        }
        let cells: Vec<&str> = line.split(" | ").collect();
        let [task, _, _, ours] = cells[..] else {
            continue;
        };
        let Some(command) = ours
            .trim_end_matches(" |")
            .strip_prefix('`')
            .and_then(|c| c.strip_suffix('`'))
        else {
            continue;
        };
        out.push((
            heading.clone(),
            task.trim_start_matches("| ").to_string(),
            command.replace("\\|", "|"),
        ));
    }
    out
}

/// The directory with `prog` built in it.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn build(test: &str) -> Option<Dir> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/habits.c");
    let dir = std::env::temp_dir().join(format!("kpf-from-perf-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let built = Command::new("cc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(dir.join("prog"))
        .arg(&src)
        .status();
    if !built.is_ok_and(|s| s.success()) {
        let _ = std::fs::remove_dir_all(&dir);
        skip_here(test, "cannot build tests/data/habits.c with cc here");
        return None;
    }
    Some(Dir(dir))
}

/// Whether the rows under `heading` can run here.
fn runs_here(heading: &str) -> bool {
    if heading.starts_with("Kernel") {
        Path::new("/sys/bus/event_source/devices/kprobe").exists()
    } else if heading.contains("USDT") {
        Path::new("/usr/bin/python3.11").exists()
    } else {
        true
    }
}

#[test]
fn every_kprobe_perf_spelling_of_the_table_works() {
    let test = "every_kprobe_perf_spelling_of_the_table_works";
    if !uprobes_available(test) {
        return;
    }
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/from-perf.md");
    let doc = std::fs::read_to_string(doc_path).unwrap();
    let rows = rows(&doc);
    assert!(rows.len() >= 30, "{} rows", rows.len());
    let Some(dir) = build(test) else { return };
    let bin_dir = kprobe_perf_bin().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut sleeper = Command::new("sleep").arg("2").spawn().unwrap();
    let mut ran = 0;
    for (heading, task, command) in &rows {
        if !runs_here(heading) {
            println!("not here: {heading}: {task}");
            continue;
        }
        let command = command.replace("PID", &sleeper.id().to_string());
        let out = Command::new("sh")
            .arg("-c")
            .arg(&command)
            .current_dir(&dir.0)
            .env("PATH", &path)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{task}: {command}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    let _ = sleeper.wait();
    println!("{ran} of {} rows ran", rows.len());
    assert!(ran >= 25, "{ran}");
}
