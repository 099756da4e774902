//! `cargo xtask fuzz`: the coverage-guided fuzz targets of
//! `fuzz/libfuzzer`, run with cargo fuzz (libFuzzer) on the stable
//! toolchain, and their seed corpora.

use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::workspace_root;

/// The targets, in the order `all` runs them.
const TARGETS: [&str; 3] = ["spec_parse", "record_decode", "perfdata_read"];

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// cargo fuzz, installed on first use.
fn ensure_cargo_fuzz() -> Result<()> {
    let have = cargo()
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if have {
        return Ok(());
    }
    println!("xtask: installing cargo-fuzz (cargo install cargo-fuzz --locked)");
    let ok = cargo()
        .args(["install", "cargo-fuzz", "--locked"])
        .status()
        .context("running cargo install")?
        .success();
    if !ok {
        bail!("installing cargo-fuzz failed");
    }
    Ok(())
}

/// Runs `target` (or every target, or writes the seeds) for `secs`
/// seconds each.
pub(crate) fn run(target: &str, secs: u64) -> Result<()> {
    if target == "seed" {
        return seed();
    }
    ensure_cargo_fuzz()?;
    let targets: Vec<&str> = match target {
        "all" => TARGETS.to_vec(),
        t => vec![t],
    };
    let root = workspace_root();
    let mut summary = Vec::new();
    for t in targets {
        let corpus = root.join("fuzz/libfuzzer/corpus").join(t);
        std::fs::create_dir_all(&corpus)
            .with_context(|| format!("creating {}", corpus.display()))?;
        println!("xtask: fuzzing {t} for {secs} s from {}", corpus.display());
        let out = cargo()
            .current_dir(&root)
            // cargo fuzz's instrumentation flags are nightly ones; the
            // stable compiler takes them with RUSTC_BOOTSTRAP.
            .env("RUSTC_BOOTSTRAP", "1")
            .args([
                "fuzz",
                "run",
                "--fuzz-dir",
                "fuzz/libfuzzer",
                "-O",
                "-s",
                "none",
                t,
            ])
            .arg(&corpus)
            .args([
                "--",
                &format!("-max_total_time={secs}"),
                "-print_final_stats=1",
                "-timeout=10",
                "-rss_limit_mb=2048",
            ])
            .output()
            .context("running cargo fuzz")?;
        let err = String::from_utf8_lossy(&out.stderr);
        // libFuzzer's last status line: "#N DONE cov: C ft: F corp: ...".
        let last = err
            .lines()
            .rev()
            .find(|l| l.starts_with('#') && l.contains("cov:"))
            .unwrap_or("")
            .to_string();
        if !out.status.success() {
            eprintln!("{err}");
            bail!("fuzzing {t} stopped on a finding (its input is in fuzz/libfuzzer/artifacts/{t}): {last}");
        }
        println!("xtask: {t}: {last}");
        summary.push(format!("{t}: {last}"));
    }
    for s in summary {
        println!("{s}");
    }
    Ok(())
}

/// Writes the seed corpora: the fixtures, and the grammar oracle's
/// corpus for the parser.
fn seed() -> Result<()> {
    let root = workspace_root();
    let dir = root.join("fuzz/libfuzzer/corpus");
    let ok = cargo()
        .current_dir(&root)
        .args([
            "run",
            "--quiet",
            "--release",
            "-p",
            "kprobe-perf-fuzz",
            "--bin",
            "seed_corpora",
            "--",
        ])
        .arg(&dir)
        .status()
        .context("running seed_corpora")?
        .success();
    if !ok {
        bail!("writing the fixture seeds failed");
    }
    let ok = cargo()
        .current_dir(&root)
        .env("KPROBE_PERF_FUZZ_CORPUS", dir.join("spec_parse"))
        .args([
            "test",
            "--quiet",
            "-p",
            "kprobe-perf-tests",
            "--test",
            "grammar_oracle",
            "write_the_corpus_for_the_fuzzer",
            "--",
            "--nocapture",
        ])
        .status()
        .context("running the grammar oracle's corpus writer")?
        .success();
    if !ok {
        bail!("writing the grammar corpus failed");
    }
    Ok(())
}
