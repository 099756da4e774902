//! A real client reads a `-o` file: `samply import` (the Firefox Profiler
//! importer of perf.data files, `cargo install samply`) of a
//! `--call-graph dwarf` recording of Debian's `ls` under a uprobe on libc's
//! `readdir64` shows one thread `ls` with as many samples as kprobe-perf
//! recorded events, and each sample's stack as deep as the frames
//! kprobe-perf unwinds from the same file (samply unwinds the registers
//! and stack bytes itself).

use std::path::Path;
use std::process::Command;

use kprobe_perf_tests::{kprobe_perf_bin, libc_path, skip_here, uprobes_available};

/// samply: on PATH or where `cargo install` puts it.
fn samply() -> Option<std::path::PathBuf> {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let candidates = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(home.map(|h| h.join(".cargo/bin")))
        .chain([std::path::PathBuf::from("/root/.cargo/bin")]);
    candidates.map(|d| d.join("samply")).find(|p| p.is_file())
}

/// Per event, the number of frames `script -i` prints under it.
fn our_depths(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('\t') {
            if let Some(n) = out.last_mut() {
                *n += 1;
            }
        } else if line.contains(": p_libc_readdir64_0:") {
            out.push(0);
        }
    }
    out
}

#[test]
fn samply_imports_a_dwarf_recording_with_our_samples_and_stacks() {
    let test = "samply_imports_a_dwarf_recording_with_our_samples_and_stacks";
    if !uprobes_available(test) {
        return;
    }
    let Some(samply) = samply() else {
        // Not a piece of the VM's setup: samply takes minutes to build.
        return skip_here(test, "samply is not installed (cargo install samply)");
    };
    let (Some(libc), true) = (libc_path(), Path::new("/usr/bin/ls").exists()) else {
        return skip_here(
            test,
            "no libc in this process's mappings, or no /usr/bin/ls",
        );
    };
    let dir = std::env::temp_dir().join(format!("kpf-samply-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("ls.data");
    let json = dir.join("ls.json");
    let probe = format!("p:{libc}:readdir64");
    let rec = Command::new(kprobe_perf_bin())
        .args(["record", "-q", "--call-graph", "dwarf", "-o"])
        .arg(&data)
        .args(["-e", &probe, "--", "/usr/bin/ls", "/", "/usr"])
        .output()
        .unwrap();
    assert!(
        rec.status.success(),
        "{}",
        String::from_utf8_lossy(&rec.stderr)
    );
    let script = Command::new(kprobe_perf_bin())
        .arg("script")
        .arg("-i")
        .arg(&data)
        .output()
        .unwrap();
    let ours = our_depths(&String::from_utf8_lossy(&script.stdout));
    assert!(
        ours.len() > 2,
        "{}",
        String::from_utf8_lossy(&script.stdout)
    );
    let imported = Command::new(samply)
        .args(["import", "--save-only", "--no-open", "-o"])
        .arg(&json)
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        imported.status.success(),
        "samply import: {}",
        String::from_utf8_lossy(&imported.stderr)
    );
    let profile: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let threads = profile["threads"].as_array().unwrap();
    let ls: Vec<_> = threads
        .iter()
        .filter(|t| t["samples"]["length"].as_u64().unwrap_or(0) > 0)
        .collect();
    assert_eq!(ls.len(), 1, "threads with samples: {threads:?}");
    let t = ls[0];
    assert_eq!(t["name"], "ls");
    let samples = &t["samples"];
    let prefix = t["stackTable"]["prefix"].as_array().unwrap();
    let mut theirs: Vec<usize> = samples["stack"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let mut depth = 0;
            let mut at = s.as_u64();
            while let Some(i) = at {
                depth += 1;
                at = prefix[i as usize].as_u64();
            }
            depth
        })
        .collect();
    let mut ours = ours;
    ours.sort_unstable();
    theirs.sort_unstable();
    assert_eq!(
        theirs, ours,
        "stack depths per sample: samply against kprobe-perf"
    );
}
