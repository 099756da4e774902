//! `cargo xtask bench debuginfo`: probe points and variables from a Debian
//! debug vmlinux (target/vm/kernels, `--kernel` 6.1 or 6.12), the
//! kprobe-perf-debuginfo crate against `perf probe -k VMLINUX -D` on the
//! same question, on this host (no kernel involved: both read the file).
//!
//! Prints: the first answer from a fresh process, with the name index
//! cached and while building it; perf's time for the same question (least
//! of three each); `--functions` questions in one process (the crate's
//! `bench` example); and each one's peak RSS.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::workspace_root;

const QUESTION: &str = "do_sys_openat2 filename dfd how->flags";

/// The debug vmlinux of the kernel series `kernel` under target/vm/kernels.
fn vmlinux(root: &Path, kernel: &str) -> Result<PathBuf> {
    let kernels = root.join("target/vm/kernels");
    let prefix = format!("linux-image-{kernel}");
    let entries =
        std::fs::read_dir(&kernels).with_context(|| format!("reading {}", kernels.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let series = name
            .strip_prefix(&prefix)
            .is_some_and(|r| r.starts_with(['.', '+', '-']));
        if !series {
            continue;
        }
        let boot = entry.path().join("usr/lib/debug/boot");
        let Ok(files) = std::fs::read_dir(&boot) else {
            continue;
        };
        for f in files.flatten() {
            if f.file_name().to_string_lossy().starts_with("vmlinux-") {
                return Ok(f.path());
            }
        }
    }
    bail!(
        "no debug vmlinux of {kernel} under {} (cargo xtask vm fetches the kernel packages)",
        kernels.display()
    )
}

/// Seconds and peak RSS (KB, from /usr/bin/time when present) of one run.
fn timed(program: &Path, args: &[&str], cache: &Path) -> Result<(f64, Option<u64>)> {
    let time = Path::new("/usr/bin/time");
    let mut cmd = if time.exists() {
        let mut c = Command::new(time);
        c.args(["-f", "%M"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    cmd.args(args).env("KPROBE_PERF_CACHE_DIR", cache);
    let t = Instant::now();
    let out = cmd
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    let secs = t.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "{} {:?} failed: {}",
            program.display(),
            args,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rss = String::from_utf8_lossy(&out.stderr)
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok());
    Ok((secs, rss))
}

fn least(runs: &[(f64, Option<u64>)]) -> (f64, Option<u64>) {
    let t = runs.iter().map(|r| r.0).fold(f64::INFINITY, f64::min);
    (t, runs.iter().filter_map(|r| r.1).max())
}

fn mb(kb: Option<u64>) -> String {
    kb.map_or("?".into(), |k| format!("{} MB", k / 1024))
}

pub(crate) fn run(questions: usize, kernel: &str) -> Result<()> {
    let root = workspace_root();
    let vmlinux = vmlinux(&root, kernel)?;
    let v = vmlinux.to_string_lossy().into_owned();
    let status = Command::new("cargo")
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "kprobe-perf-debuginfo",
            "--example",
            "probe",
            "--example",
            "bench",
        ])
        .current_dir(&root)
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("building the debuginfo examples failed");
    }
    let probe = root.join("target/release/examples/probe");
    let bench = root.join("target/release/examples/bench");
    let cache = root.join("target/debuginfo-bench-cache");
    let _ = std::fs::remove_dir_all(&cache);
    println!("{v}\nquestion: perf probe -k VMLINUX -D '{QUESTION}'");
    let building = timed(&probe, &[&v, "-D", QUESTION], &cache)?;
    let mut cached = Vec::new();
    let mut perf = Vec::new();
    for _ in 0..3 {
        cached.push(timed(&probe, &[&v, "-D", QUESTION], &cache)?);
        perf.push(timed(
            Path::new("perf"),
            &["probe", "-k", &v, "-D", QUESTION],
            &cache,
        )?);
    }
    let (cached, perf) = (least(&cached), least(&perf));
    println!(
        "perf probe -D:                 {:.3} s, peak RSS {}",
        perf.0,
        mb(perf.1)
    );
    println!(
        "first answer, index cached:    {:.3} s ({:.3}x perf), peak RSS {}",
        cached.0,
        cached.0 / perf.0,
        mb(cached.1)
    );
    println!(
        "first answer, building index:  {:.3} s ({:.3}x perf), peak RSS {}",
        building.0,
        building.0 / perf.0,
        mb(building.1)
    );
    let n = questions.to_string();
    let out = Command::new(&bench)
        .args([&v, &n])
        .env("KPROBE_PERF_CACHE_DIR", &cache)
        .output()?;
    print!(
        "{} questions in one process:  {}",
        n,
        String::from_utf8_lossy(&out.stdout)
    );
    let (_, rss) = timed(&bench, &[&v, &n], &cache)?;
    println!("  peak RSS {}", mb(rss));
    Ok(())
}
