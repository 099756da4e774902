//! `cargo xtask package`: the library crates as an embedder gets them.
//!
//! `cargo package` packages (and builds) each published library crate
//! in dependency order; the `.crate` files are unpacked into a local
//! registry under `target/package-registry/`. A new Cargo project
//! outside the workspace (`target/embedder/`) then depends on the
//! engine by version, as a profiler would, with the packages taking the
//! place of crates.io's: it compiles the README's embedding example and
//! the packaged engine's `read_sizes` example, and runs both natively (a
//! uprobe on its own binary, and one on libc's `read`). Every other
//! dependency comes from crates.io at the version in the workspace's
//! Cargo.lock, offline. The embedder's default build must pull no
//! dependency only the CLI or an opt-in feature needs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::dist::output;
use crate::workspace_root;

/// The published library crates, each after those it depends on.
const CRATES: [&str; 6] = [
    "kprobe-perf-arch",
    "kprobe-perf-symbols",
    "kprobe-perf-spec",
    "kprobe-perf-debuginfo",
    "kprobe-perf-unwind",
    "kprobe-perf-engine",
];

/// Dependencies an embedder's default build must not pull: the CLI's
/// (argument parsing, JSON output, flame graph drawing) and the `tokio`
/// feature's.
const NOT_IN_DEFAULT_BUILD: [&str; 6] = [
    "clap",
    "clap_complete",
    "clap_mangen",
    "inferno",
    "serde_json",
    "tokio",
];

/// The registry the packages stand in: a name no network resolves,
/// replaced by the unpacked packages' directory.
const REGISTRY: &str = "kprobe-perf-local";
const REGISTRY_INDEX: &str = "sparse+https://kprobe-perf-local.invalid/index/";

/// The outside embedder: a uprobe on a function of its own binary, with
/// its two arguments at entry and its return value, from the engine's
/// public API alone.
const EMBEDDER_MAIN: &str = r#"//! An embedder of the packaged engine (written by `cargo xtask package`).

mod readme;

use std::time::{Duration, Instant};

use kprobe_perf_engine::{sink_fn, BackendChoice, Kernel, KernelOptions, Session, SessionOptions};

/// The probed function: not inlined, not mangled, so the ELF symbol
/// table has it by this name.
#[no_mangle]
#[inline(never)]
pub extern "C" fn embedder_uprobe_target(a: u64, b: u64) -> u64 {
    std::hint::black_box(a ^ b)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let exe = std::env::current_exe()?;
    let exe = exe.display();
    let kernel = Kernel::discover(KernelOptions::default())?;
    let plans = kernel.plan(
        &[
            format!("p:{exe}:embedder_uprobe_target a=$arg1 b=$arg2"),
            format!("r:{exe}:embedder_uprobe_target ret=$retval"),
        ],
        BackendChoice::Auto,
    )?;
    let mut session = Session::open(plans, SessionOptions::default())?;
    session.enable()?;
    let returned = embedder_uprobe_target(0x1234, 0xff00);
    let pid = i32::try_from(std::process::id())?;
    let mut seen: Vec<(usize, Option<i64>, Option<i64>)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.len() < 2 && Instant::now() < deadline {
        session.poll(
            Some(Duration::from_millis(100)),
            &mut sink_fn(|e| {
                if e.pid == pid {
                    let arg = |i: usize| e.args.get(i).and_then(|v| v.as_i64());
                    seen.push((e.probe, arg(0), arg(1)));
                }
            }),
        )?;
    }
    session.disable()?;
    let want = vec![
        (0, Some(0x1234), Some(0xff00)),
        (1, Some(returned as i64), None),
    ];
    if seen != want {
        return Err(format!("events (probe, arg 0, arg 1): {seen:?}, expected {want:?}").into());
    }
    println!("embedder: uprobe a=0x1234 b=0xff00, uretprobe ret={returned:#x}");
    println!("embedder: {:?}", session.summary());
    Ok(())
}
"#;

/// Packages the crates, fills the local registry, and builds and runs
/// the outside embedder.
pub(crate) fn run() -> Result<()> {
    let version = workspace_version()?;
    package_crates()?;
    let registry = fill_registry(&version)?;
    let project = write_project(&version, &registry)?;
    build_project(&project)?;
    check_default_build(&project)?;
    run_project(&project)
}

/// `[workspace.package]`'s version in the root Cargo.toml.
fn workspace_version() -> Result<String> {
    let path = workspace_root().join("Cargo.toml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .skip_while(|l| l.trim() != "[workspace.package]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .find_map(|l| {
            let (key, value) = l.split_once('=')?;
            (key.trim() == "version").then(|| value.trim().trim_matches('"').to_string())
        })
        .with_context(|| format!("no version in [workspace.package] of {}", path.display()))
}

/// `cargo package` of every library crate, offline, from the crates the
/// workspace's Cargo.lock names. `--no-verify`: cargo's own check builds
/// each package once more in a directory of its own (111 s of a full
/// run), and the outside embedder ([`build_project`]) builds every one of
/// them from the packages anyway, which is the check that counts.
fn package_crates() -> Result<()> {
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo.current_dir(workspace_root()).args([
        "package",
        "--locked",
        "--offline",
        "--allow-dirty",
        "--no-verify",
    ]);
    for name in CRATES {
        cargo.args(["--package", name]);
    }
    println!("xtask: cargo package: {}", CRATES.join(", "));
    crate::host::run_status(&mut cargo, "cargo package")
}

/// Unpacks each `.crate` into a fresh registry directory (a cargo
/// directory source: one folder per package, with its checksum), and
/// prints each package's size.
fn fill_registry(version: &str) -> Result<PathBuf> {
    let target = crate::dist::target_dir();
    let registry = target.join("package-registry");
    if registry.exists() {
        std::fs::remove_dir_all(&registry)
            .with_context(|| format!("removing {}", registry.display()))?;
    }
    std::fs::create_dir_all(&registry)
        .with_context(|| format!("creating {}", registry.display()))?;
    for name in CRATES {
        let file = target
            .join("package")
            .join(format!("{name}-{version}.crate"));
        let size = std::fs::metadata(&file)
            .with_context(|| format!("{} was not written by cargo package", file.display()))?
            .len();
        println!("xtask: {} ({size} bytes)", file.display());
        crate::host::run_status(
            Command::new("tar")
                .arg("-xzf")
                .arg(&file)
                .arg("-C")
                .arg(&registry),
            &format!("unpacking {}", file.display()),
        )?;
        let sum = output(Command::new("sha256sum").arg(&file))?;
        let sum = sum
            .split_whitespace()
            .next()
            .with_context(|| format!("sha256sum printed nothing for {}", file.display()))?;
        let unpacked = registry.join(format!("{name}-{version}"));
        write(
            &unpacked.join(".cargo-checksum.json"),
            &format!("{{\"files\":{{}},\"package\":\"{sum}\"}}\n"),
        )?;
    }
    Ok(registry)
}

fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The outside project: a manifest that names the engine by version, a
/// cargo configuration whose registry is the packages' directory, the
/// workspace's lock file (so crates.io's crates are the ones already
/// fetched), its own program, the README's example and the packaged
/// engine's `read_sizes` example.
fn write_project(version: &str, registry: &Path) -> Result<PathBuf> {
    let project = crate::dist::target_dir().join("embedder");
    let patches: String = CRATES
        .iter()
        .map(|name| format!("{name} = {{ version = \"={version}\", registry = \"{REGISTRY}\" }}\n"))
        .collect();
    // Its own workspace: the project lies under this one's target/.
    write(
        &project.join("Cargo.toml"),
        &format!(
            "[package]\nname = \"kprobe-perf-embedder\"\nversion = \"0.0.0\"\n\
             edition = \"2021\"\npublish = false\n\n[workspace]\n\n\
             [dependencies]\nkprobe-perf-engine = \"{version}\"\n\n\
             # The packages stand in for crates.io's.\n[patch.crates-io]\n{patches}"
        ),
    )?;
    write(
        &project.join(".cargo/config.toml"),
        &format!(
            "[registries.{REGISTRY}]\nindex = \"{REGISTRY_INDEX}\"\n\n\
             [source.{REGISTRY}]\nregistry = \"{REGISTRY_INDEX}\"\nreplace-with = \"{REGISTRY}-dir\"\n\n\
             [source.{REGISTRY}-dir]\ndirectory = \"{}\"\n",
            registry.display()
        ),
    )?;
    let lock = workspace_root().join("Cargo.lock");
    std::fs::copy(&lock, project.join("Cargo.lock"))
        .with_context(|| format!("copying {}", lock.display()))?;
    write(&project.join("src/main.rs"), EMBEDDER_MAIN)?;
    write(&project.join("src/readme.rs"), &readme_module()?)?;
    let example = registry
        .join(format!("kprobe-perf-engine-{version}"))
        .join("examples/read_sizes.rs");
    let text = std::fs::read_to_string(&example)
        .with_context(|| format!("reading {} (is it packaged?)", example.display()))?;
    write(&project.join("examples/read_sizes.rs"), &text)?;
    Ok(project)
}

/// The README's embedding example (its `## Embedding` section's Rust
/// block, doctest lines `# ...` shown) as the body of a function the
/// embedder compiles but does not call (it needs kprobes).
fn readme_module() -> Result<String> {
    let path = workspace_root().join("README.md");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let body = embedding_example(&text)
        .with_context(|| format!("no ```rust block under ## Embedding in {}", path.display()))?;
    Ok(format!(
        "//! README.md's embedding example, compiled; not run (it needs kprobes).\n\n\
         #[allow(dead_code)]\npub(crate) fn example() -> Result<(), Box<dyn std::error::Error>> {{\n\
         {body}}}\n"
    ))
}

/// The lines of the first Rust block after `## Embedding`, with
/// rustdoc's hidden-line marker removed.
fn embedding_example(readme: &str) -> Option<String> {
    let mut lines = readme
        .lines()
        .skip_while(|l| l.trim() != "## Embedding")
        .skip_while(|l| !l.starts_with("```rust"));
    lines.next()?;
    let mut body = String::new();
    for line in lines {
        if line.starts_with("```") {
            return Some(body);
        }
        let shown = match line.strip_prefix('#') {
            Some("") => "",
            Some(rest) if rest.starts_with(' ') => &rest[1..],
            _ => line,
        };
        body.push_str(shown);
        body.push('\n');
    }
    None
}

/// Builds the embedder and its example from the packages, offline, and
/// prints how long that took.
fn build_project(project: &Path) -> Result<()> {
    forget_packages_built(project)?;
    let started = Instant::now();
    crate::host::run_status(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(project)
            .env_remove("CARGO_TARGET_DIR")
            .args(["build", "--offline", "--bins", "--examples"]),
        "building the outside embedder (cargo build --offline)",
    )?;
    println!(
        "xtask: the outside embedder built in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Makes cargo build the packages again: it takes a registry's package
/// of a given version to be the same forever, and these are made anew
/// (under the same version) by every run.
fn forget_packages_built(project: &Path) -> Result<()> {
    let fingerprints = project.join("target/debug/.fingerprint");
    let Ok(entries) = std::fs::read_dir(&fingerprints) else {
        return Ok(()); // nothing built yet
    };
    for entry in entries {
        let path = entry
            .with_context(|| format!("reading {}", fingerprints.display()))?
            .path();
        let ours = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("kprobe-perf-"));
        if ours {
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(())
}

/// Counts the packages of the embedder's default build and fails if one
/// of them is a CLI-only or opt-in dependency.
fn check_default_build(project: &Path) -> Result<()> {
    let tree = output(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(project)
            .args([
                "tree",
                "--offline",
                "--edges",
                "normal,build",
                "--prefix",
                "none",
            ]),
    )?;
    let mut packages: Vec<&str> = tree
        .lines()
        .map(|l| l.trim_end_matches(" (*)"))
        .filter(|l| !l.starts_with("kprobe-perf-embedder "))
        .collect();
    packages.sort_unstable();
    packages.dedup();
    println!(
        "xtask: the outside embedder's default build: {} packages ({} of them kprobe-perf's)",
        packages.len(),
        packages
            .iter()
            .filter(|p| p.starts_with("kprobe-perf-"))
            .count()
    );
    let unwanted: Vec<&str> = packages
        .iter()
        .filter(|p| {
            p.split_whitespace()
                .next()
                .is_some_and(|name| NOT_IN_DEFAULT_BUILD.contains(&name))
        })
        .copied()
        .collect();
    if !unwanted.is_empty() {
        bail!(
            "the engine's default features pull {} (only the CLI or an opt-in feature needs them)",
            unwanted.join(", ")
        );
    }
    Ok(())
}

/// Runs the embedder (a uprobe on itself) and the `read_sizes` example
/// (a uprobe on libc's `read`, for `head -c 3`), where this host can
/// probe user space.
fn run_project(project: &Path) -> Result<()> {
    if let Some(why) = cannot_probe_user_space() {
        println!("SKIP running the outside embedder: {why}");
        return Ok(());
    }
    let built = project.join("target/debug");
    let out = output(&mut Command::new(built.join("kprobe-perf-embedder")))
        .context("the outside embedder failed")?;
    println!("{out}");
    let file = project.join("target/three-bytes");
    write(&file, "abcdef")?;
    let out = output(
        Command::new(built.join("examples/read_sizes"))
            .args(["head", "-c", "3"])
            .arg(&file),
    )
    .context("the packaged engine's read_sizes example failed")?;
    if !out
        .lines()
        .any(|l| l.split_whitespace().next() == Some("head"))
    {
        bail!("read_sizes counted no read by head:\n{out}");
    }
    println!("xtask: read_sizes from the packaged engine:\n{out}");
    Ok(())
}

/// Why this host cannot attach a uprobe, if it cannot: no uprobe PMU,
/// or no CAP_SYS_ADMIN.
fn cannot_probe_user_space() -> Option<&'static str> {
    if !Path::new("/sys/bus/event_source/devices/uprobe").exists() {
        return Some("no uprobe PMU on this host");
    }
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return Some("/proc/self/status cannot be read");
    };
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok());
    match caps {
        Some(c) if c & (1 << 21) != 0 => None,
        _ => Some("no CAP_SYS_ADMIN (run as root)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedding_example_is_the_rust_block_under_its_heading() {
        let readme = "# x\n```rust\nnot this\n```\n## Embedding\n\ntext\n\n\
                      ```rust,no_run\nuse a::b;\n#\n# Ok::<(), E>(())\n#[attr]\n```\nafter\n";
        assert_eq!(
            embedding_example(readme).as_deref(),
            Some("use a::b;\n\nOk::<(), E>(())\n#[attr]\n")
        );
        assert_eq!(embedding_example("## Embedding\n```rust\nunclosed\n"), None);
    }

    #[test]
    fn the_readme_has_an_embedding_example() {
        let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
        assert!(embedding_example(&readme).is_some_and(|b| b.contains("Session::open")));
    }
}
