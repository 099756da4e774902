//! `cargo xtask bench debuginfo`: the first answer of a fresh process
//! from DWARF, `kprobe-perf probe --definition` against `perf probe -D` on
//! the same question, on Debian's 6.1 and 6.12 -dbg vmlinux (under
//! target/vm/kernels) and on libc.so.6 with its libc6-dbg debug file, on
//! this host (no kernel involved: both read the files).
//!
//! Prints, per file, the least and median of `--rounds` (at least 5)
//! wall times and the largest peak RSS (/usr/bin/time) of: perf; a cold
//! answer (an empty index cache: the file never indexed); a warm one (the
//! name index cached earlier, by the crate's `bench` example); each with
//! its ratio to perf's median of the same run. Then the crate's `bench`
//! example: `--functions` questions in one process on `--kernel`'s vmlinux.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::workspace_root;

const QUESTION: &str = "do_sys_openat2 filename dfd how->flags";
/// libc's malloc is an alias of __libc_malloc, the name its DWARF has.
const LIBC_QUESTION: &str = "__libc_malloc bytes";
const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

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

/// Seconds and peak RSS (KB, from /usr/bin/time when present) of one
/// run, and its standard output.
fn timed(program: &Path, args: &[&str], cache: &Path) -> Result<(f64, Option<u64>, String)> {
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
    Ok((secs, rss, String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// Least and median seconds, and the largest peak RSS, of some runs.
struct Figures {
    least: f64,
    median: f64,
    rss: Option<u64>,
}

fn figures(runs: &[(f64, Option<u64>)]) -> Figures {
    let mut t: Vec<f64> = runs.iter().map(|r| r.0).collect();
    t.sort_by(f64::total_cmp);
    Figures {
        least: t.first().copied().unwrap_or(f64::NAN),
        median: t.get(t.len() / 2).copied().unwrap_or(f64::NAN),
        rss: runs.iter().filter_map(|r| r.1).max(),
    }
}

fn mb(kb: Option<u64>) -> String {
    kb.map_or("?".into(), |k| format!("{} MB", k / 1024))
}

/// The debug file of libc.so.6 by its build ID (libc6-dbg).
fn libc_debug() -> Result<PathBuf> {
    let out = Command::new("readelf")
        .args(["-n", LIBC])
        .output()
        .context("running readelf -n on libc.so.6")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .context("libc.so.6 has no build ID")?;
    let path = PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        id.get(..2).unwrap_or_default(),
        id.get(2..).unwrap_or_default()
    ));
    if !path.exists() {
        bail!("{} is not there: install libc6-dbg", path.display());
    }
    Ok(path)
}

/// One file's question, as each tool asks it.
struct Case {
    name: String,
    /// The file the index is of (the vmlinux, or libc's debug file).
    debug: PathBuf,
    ours: Vec<String>,
    perf: Vec<String>,
}

fn cases(root: &Path) -> Result<Vec<Case>> {
    let mut out = Vec::new();
    for kernel in ["6.1", "6.12"] {
        let v = vmlinux(root, kernel)?;
        let s = v.to_string_lossy().into_owned();
        out.push(Case {
            name: format!("{kernel} vmlinux"),
            debug: v,
            ours: ["probe", "-k", &s, "--other-kernel", "-D", QUESTION]
                .map(String::from)
                .to_vec(),
            perf: ["probe", "-k", &s, "-D", QUESTION]
                .map(String::from)
                .to_vec(),
        });
    }
    out.push(Case {
        name: "libc6-dbg".into(),
        debug: libc_debug()?,
        ours: ["probe", "-x", LIBC, "-D", LIBC_QUESTION]
            .map(String::from)
            .to_vec(),
        perf: ["probe", "-x", LIBC, "-D", LIBC_QUESTION]
            .map(String::from)
            .to_vec(),
    });
    Ok(out)
}

fn build(root: &Path) -> Result<()> {
    let status = Command::new("cargo")
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "kprobe-perf",
            "--bin",
            "kprobe-perf",
        ])
        .current_dir(root)
        .status()
        .context("running cargo build")?;
    let examples = Command::new("cargo")
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "kprobe-perf-debuginfo",
            "--example",
            "bench",
        ])
        .current_dir(root)
        .status()
        .context("running cargo build")?;
    if !status.success() || !examples.success() {
        bail!("building kprobe-perf or the debuginfo bench example failed");
    }
    Ok(())
}

/// Runs `rounds` rounds of perf, a cold and a warm answer on `case`,
/// checks the answers agree, and prints the figures.
fn measure(root: &Path, case: &Case, rounds: u32) -> Result<()> {
    let ours = root.join("target/release/kprobe-perf");
    let bench = root.join("target/release/examples/bench");
    let cold_cache = root.join("target/debuginfo-bench-cold");
    let warm_cache = root.join("target/debuginfo-bench-warm");
    let _ = std::fs::remove_dir_all(&warm_cache);
    // The index cached earlier: the bench example lists every function.
    let d = case.debug.to_string_lossy().into_owned();
    timed(&bench, &[&d, "1"], &warm_cache)?;
    let ours_args: Vec<&str> = case.ours.iter().map(String::as_str).collect();
    let perf_args: Vec<&str> = case.perf.iter().map(String::as_str).collect();
    let (mut perf, mut cold, mut warm) = (Vec::new(), Vec::new(), Vec::new());
    let mut answers = Vec::new();
    for _ in 0..rounds {
        let _ = std::fs::remove_dir_all(&cold_cache);
        let (t, rss, text) = timed(Path::new("perf"), &perf_args, &cold_cache)?;
        perf.push((t, rss));
        let (t, rss, cold_text) = timed(&ours, &ours_args, &cold_cache)?;
        cold.push((t, rss));
        let (t, rss, warm_text) = timed(&ours, &ours_args, &warm_cache)?;
        warm.push((t, rss));
        answers.push((text, cold_text, warm_text));
    }
    let _ = std::fs::remove_dir_all(&cold_cache);
    if let Some((p, c, w)) = answers.first() {
        if c != w || answers.iter().any(|a| (&a.1, &a.2) != (c, w)) {
            bail!("{}: the cold and warm answers differ:\n{c}\n{w}", case.name);
        }
        println!("{}: {}", case.name, case.debug.display());
        println!("  perf: {}", p.trim());
        println!("  ours: {}", c.trim());
    }
    let p = figures(&perf);
    let row = |what: &str, f: &Figures| {
        println!(
            "  {what:<32} least {:.3} s ({:.3}x perf), median {:.3} s ({:.3}x), peak RSS {}",
            f.least,
            f.least / p.least,
            f.median,
            f.median / p.median,
            mb(f.rss)
        );
    };
    println!(
        "  {:<32} least {:.3} s, median {:.3} s, peak RSS {}",
        "perf probe -D",
        p.least,
        p.median,
        mb(p.rss)
    );
    row("kprobe-perf, cold (no index)", &figures(&cold));
    row("kprobe-perf, warm (index cached)", &figures(&warm));
    Ok(())
}

pub(crate) fn run(questions: usize, rounds: u32, kernel: &str) -> Result<()> {
    let root = workspace_root();
    build(&root)?;
    let rounds = rounds.max(5);
    println!("{rounds} rounds; each round runs perf, a cold and a warm answer once");
    for case in cases(&root)? {
        measure(&root, &case, rounds)?;
    }
    let v = vmlinux(&root, kernel)?.to_string_lossy().into_owned();
    let bench = root.join("target/release/examples/bench");
    let cache = root.join("target/debuginfo-bench-warm");
    let n = questions.to_string();
    let (_, rss, out) = timed(&bench, &[&v, &n], &cache)?;
    print!("{kernel}: {n} questions in one process:  {out}");
    println!("  peak RSS {}", mb(rss));
    Ok(())
}
