//! Names the commit `kprobe-perf --version` was built from.
//!
//! In a git checkout: `git rev-parse --short HEAD`, with `-dirty` when
//! tracked files differ from it. From a crates.io package: the commit
//! cargo recorded in `.cargo_vcs_info.json`. Otherwise: "commit unknown".
//! The result is `KPROBE_PERF_VERSION`, e.g. `0.1.0 (git 96b6243-dirty)`.

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The commit of the checkout holding this crate, when this crate's own
/// files are tracked there (not some unrelated repository around an
/// unpacked package).
fn from_git(dir: &Path) -> Option<String> {
    git(dir, &["ls-files", "--error-unmatch", "build.rs"])?;
    let hash = git(dir, &["rev-parse", "--short", "HEAD"])?;
    if hash.is_empty() {
        return None;
    }
    // Rerun when HEAD moves, the index changes, or a source file changes.
    for what in ["HEAD", "index"] {
        if let Some(p) = git(dir, &["rev-parse", "--git-path", what]) {
            println!("cargo:rerun-if-changed={}", dir.join(p).display());
        }
    }
    if let Some(r) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(dir, &["rev-parse", "--git-path", &r]) {
            println!("cargo:rerun-if-changed={}", dir.join(p).display());
        }
    }
    if let Some(top) = git(dir, &["rev-parse", "--show-toplevel"]) {
        let top = Path::new(&top);
        for d in [
            "arch",
            "symbols",
            "engine",
            "cli",
            "tests",
            "xtask",
            "Cargo.toml",
            "Cargo.lock",
            "README.md",
        ] {
            println!("cargo:rerun-if-changed={}", top.join(d).display());
        }
    }
    // Compares contents (a file only touched is not a change), without
    // writing the index (which would rerun this script).
    let dirty = git(
        dir,
        &[
            "--no-optional-locks",
            "status",
            "--porcelain",
            "--untracked-files=no",
        ],
    )
    .is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{hash}-dirty") } else { hash })
}

/// The commit cargo recorded when it packaged this crate.
fn from_vcs_info(dir: &Path) -> Option<String> {
    let path = dir.join(".cargo_vcs_info.json");
    println!("cargo:rerun-if-changed={}", path.display());
    let text = std::fs::read_to_string(path).ok()?;
    let at = text.find("\"sha1\"")?;
    let rest = &text[at + 6..];
    let start = rest.find('"')? + 1;
    let len = rest[start..].find('"')?;
    let sha = rest[start..start + len].get(..7)?.to_string();
    let dirty = text.contains("\"dirty\": true") || text.contains("\"dirty\":true");
    Some(if dirty { format!("{sha}-dirty") } else { sha })
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_default();
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let commit = match from_git(&dir).or_else(|| from_vcs_info(&dir)) {
        Some(c) => format!("git {c}"),
        None => "commit unknown: not built from a git checkout".to_string(),
    };
    println!("cargo:rustc-env=KPROBE_PERF_VERSION={version} ({commit})");
}
