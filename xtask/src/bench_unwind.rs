//! `cargo xtask bench unwind`: unwinding and naming DWARF user stacks
//! from a file, kprobe-perf's `script -i` against `perf script` of the
//! same file, on this host (uprobes; no VM).
//!
//! The file: `kprobe-perf record -q --call-graph dwarf -m 16384 -o F` of
//! `/usr/bin/python3.11` making byte strings of 1,000 bytes in a loop (each
//! allocated with the C library's `calloc` and released with its `free`),
//! under a uprobe on `free`
//! (Python frames below libc frames, no frame pointers).
//! Each reader runs `rounds` times, its output to /dev/null; the least
//! time of each is printed, with the ratio.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::{host, workspace_root};

/// The C library Python maps, from the host's own `/proc/self/maps`.
fn libc() -> Result<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").context("reading /proc/self/maps")?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so"))
        .map(str::to_string)
        .context("no libc in this process's mappings")
}

/// Seconds `program args` took, its output discarded.
fn time(program: &Path, args: &[&str]) -> Result<f64> {
    let start = Instant::now();
    let status = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("running {}", program.display()))?;
    let secs = start.elapsed().as_secs_f64();
    if !status.success() {
        bail!("{} {} failed ({status})", program.display(), args.join(" "));
    }
    Ok(secs)
}

/// Records the file (`calls` JSON dumps), then times both readers.
pub(crate) fn run(calls: u64, rounds: u32) -> Result<()> {
    host::ensure_packages(&[("linux-perf", "/usr/bin/perf")])?;
    let python = Path::new("/usr/bin/python3.11");
    if !python.exists() {
        bail!("/usr/bin/python3.11 is the workload: apt-get install python3.11");
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = Command::new(&cargo)
        .current_dir(workspace_root())
        .args(["build", "--quiet", "--release", "--package", "kprobe-perf"])
        .status()
        .context("running cargo")?;
    if !built.success() {
        bail!("building kprobe-perf failed");
    }
    let exe = workspace_root().join("target/release/kprobe-perf");
    let dir: PathBuf = workspace_root().join("target/bench");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = dir.join("unwind.data");
    let _ = std::fs::remove_file(&file);
    let probe = format!("p:{}:free", libc()?);
    // Objects over 512 bytes come from libc's allocator: one free each.
    let script = format!("for i in range({calls}): b = bytes(1000 + i % 7)");
    let out = Command::new(&exe)
        .args(["record", "-q", "--call-graph", "dwarf", "-m", "16384", "-o"])
        .arg(&file)
        .args(["-e", &probe, "--"])
        .arg(python)
        .args(["-c", &script])
        .output()
        .context("running kprobe-perf record")?;
    let summary = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("kprobe-perf record failed: {summary}");
    }
    println!("recorded: {}", summary.lines().next().unwrap_or("").trim());
    let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    println!("file: {} ({:.1} MB)", file.display(), size as f64 / 1e6);
    let f = file.to_string_lossy().into_owned();
    let mut ours = f64::INFINITY;
    let mut perf = f64::INFINITY;
    for _ in 0..rounds.max(1) {
        ours = ours.min(time(&exe, &["script", "-i", &f])?);
        perf = perf.min(time(Path::new("/usr/bin/perf"), &["script", "-i", &f])?);
    }
    println!("| reader (least of {rounds}) | seconds |");
    println!("|---|---|");
    println!("| kprobe-perf script -i | {ours:.3} |");
    println!("| perf script -i | {perf:.3} |");
    println!("kprobe-perf is {:.1}x faster", perf / ours);
    Ok(())
}
