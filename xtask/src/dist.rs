//! `cargo xtask dist`: a static x86_64 binary (musl, linked by rust-lld:
//! no C toolchain, no glibc at run time) with its man pages and shell
//! completions beside it, and a tarball of the lot. `--check` then runs
//! it in an empty chroot on the host and in the VM on each kernel.
//! `--arch arm64` makes the same for aarch64 (man pages, completions and
//! the version line come from a native build of the same tree, as the
//! host cannot run the aarch64 binary); its `--check` runs in the arm64
//! VM only.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::kernels::{self, GuestArch, ARM64_MATRIX, MATRIX};
use crate::vm::{self, VmRun};
use crate::{passthrough_env, report_problems, vm_cache, workspace_root};

/// What `cargo xtask dist` made.
pub(crate) struct Dist {
    /// `target/dist/kprobe-perf-VERSION-x86_64-linux-musl/`.
    pub dir: PathBuf,
    /// The static binary in it.
    pub binary: PathBuf,
    /// The package version (`0.1.0`).
    pub version: String,
    /// The whole `--version` line.
    pub version_line: String,
}

impl Dist {
    /// `man/man1/*.1`.
    pub(crate) fn man_dir(&self) -> PathBuf {
        self.dir.join("man/man1")
    }

    /// `completions/` (`bash/kprobe-perf`, `zsh/_kprobe-perf`,
    /// `fish/kprobe-perf.fish`).
    pub(crate) fn completions_dir(&self) -> PathBuf {
        self.dir.join("completions")
    }
}

/// `target/` (or CARGO_TARGET_DIR).
pub(crate) fn target_dir() -> PathBuf {
    vm_cache()
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(workspace_root());
    c
}

/// Adds the Rust `target` with rustup when it is missing.
pub(crate) fn ensure_target(target: &str) -> Result<()> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output();
    match installed {
        Ok(out)
            if String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l == target) =>
        {
            Ok(())
        }
        Ok(_) => {
            eprintln!("xtask: adding the {target} target (rustup target add {target})");
            crate::host::run_status(
                Command::new("rustup").args(["target", "add", target]),
                &format!("rustup target add {target}"),
            )
        }
        // No rustup: the toolchain may still have the target's std.
        Err(_) => {
            eprintln!("xtask: rustup not found; assuming the toolchain has the {target} standard library (if the build fails, install it)");
            Ok(())
        }
    }
}

/// What the static check found in an ELF file.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Linkage {
    /// A PT_INTERP segment (the dynamic loader's path), if any.
    pub interp: Option<String>,
    /// DT_NEEDED entries (shared libraries), counted.
    pub needed: usize,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Reads the program headers of a little-endian ELF64 file: its PT_INTERP
/// and the DT_NEEDED entries of its PT_DYNAMIC.
pub(crate) fn linkage(elf: &[u8]) -> Result<Linkage> {
    if elf.get(..4) != Some(b"\x7fELF") || elf.get(4) != Some(&2) || elf.get(5) != Some(&1) {
        bail!("not a little-endian 64-bit ELF file");
    }
    let bad = || anyhow::anyhow!("truncated ELF header or program headers");
    let phoff = u64_at(elf, 0x20).ok_or_else(bad)? as usize;
    let phentsize = usize::from(u16_at(elf, 0x36).ok_or_else(bad)?);
    let phnum = usize::from(u16_at(elf, 0x38).ok_or_else(bad)?);
    let mut out = Linkage {
        interp: None,
        needed: 0,
    };
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        let kind = u32_at(elf, ph).ok_or_else(bad)?;
        let offset = u64_at(elf, ph + 8).ok_or_else(bad)? as usize;
        let size = u64_at(elf, ph + 32).ok_or_else(bad)? as usize;
        let data = elf
            .get(offset..offset.saturating_add(size))
            .ok_or_else(bad)?;
        match kind {
            // PT_INTERP
            3 => {
                let path = data.split(|&b| b == 0).next().unwrap_or_default();
                out.interp = Some(String::from_utf8_lossy(path).into_owned());
            }
            // PT_DYNAMIC: (tag, value) pairs up to DT_NULL.
            2 => {
                for entry in data.chunks_exact(16) {
                    match u64_at(entry, 0) {
                        Some(0) | None => break,
                        Some(1) => out.needed += 1,
                        Some(_) => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The file offset of an ELF64 file's entry point (through the PT_LOAD
/// segment that holds it): where a uprobe on the first instruction goes.
pub(crate) fn entry_offset(elf: &[u8]) -> Result<u64> {
    let bad = || anyhow::anyhow!("truncated ELF header or program headers");
    let entry = u64_at(elf, 0x18).ok_or_else(bad)?;
    let phoff = u64_at(elf, 0x20).ok_or_else(bad)? as usize;
    let phentsize = usize::from(u16_at(elf, 0x36).ok_or_else(bad)?);
    let phnum = usize::from(u16_at(elf, 0x38).ok_or_else(bad)?);
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(elf, ph) != Some(1) {
            continue;
        }
        let offset = u64_at(elf, ph + 8).ok_or_else(bad)?;
        let vaddr = u64_at(elf, ph + 16).ok_or_else(bad)?;
        let filesz = u64_at(elf, ph + 32).ok_or_else(bad)?;
        if (vaddr..vaddr.saturating_add(filesz)).contains(&entry) {
            return Ok(entry - vaddr + offset);
        }
    }
    bail!("no PT_LOAD segment holds the entry point 0x{entry:x}")
}

/// Builds the static binary and lays out the dist directory.
pub(crate) fn build() -> Result<Dist> {
    build_for(GuestArch::X86_64)
}

/// `e_machine` of an ELF64 file (62 x86_64, 183 aarch64).
fn elf_machine(elf: &[u8]) -> Option<u16> {
    u16_at(elf, 18)
}

/// The native release build of kprobe-perf, which runs here: it writes
/// the man pages, completions and version line of a cross build.
fn native_binary() -> Result<PathBuf> {
    crate::host::run_status(
        cargo().args(["build", "--release", "--locked", "--package", "kprobe-perf"]),
        "cargo build --release --package kprobe-perf",
    )?;
    Ok(target_dir().join("release/kprobe-perf"))
}

/// [`build`] for `arch`.
pub(crate) fn build_for(arch: GuestArch) -> Result<Dist> {
    let built = build_static(arch)?;
    // What runs here writes the version line, man pages and completions.
    let runner = match arch {
        GuestArch::X86_64 => built.clone(),
        GuestArch::Arm64 => native_binary()?,
    };
    let version_line = output(Command::new(&runner).arg("--version"))?;
    let version = version_line
        .split_whitespace()
        .nth(1)
        .context("no version in --version")?
        .to_string();
    let machine = arch.machine();
    let dir = target_dir()
        .join("dist")
        .join(format!("kprobe-perf-{version}-{machine}-linux-musl"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let binary = dir.join("kprobe-perf");
    std::fs::copy(&built, &binary).with_context(|| format!("copying to {}", binary.display()))?;
    let dist = Dist {
        dir,
        binary,
        version,
        version_line,
    };
    let runner = if arch == GuestArch::X86_64 {
        dist.binary.clone()
    } else {
        runner
    };
    write_docs(&dist, &runner)?;
    let tarball = tarball(&dist)?;
    let size = std::fs::metadata(&dist.binary)?.len();
    println!(
        "xtask: {}: {} ({size} bytes, {:.1} MiB), static: no INTERP, no NEEDED",
        dist.binary.display(),
        dist.version_line,
        size as f64 / (1 << 20) as f64
    );
    println!(
        "xtask: man pages in {}, completions in {}",
        dist.man_dir().display(),
        dist.completions_dir().display()
    );
    println!(
        "xtask: {} ({} bytes)",
        tarball.display(),
        std::fs::metadata(&tarball)?.len()
    );
    Ok(dist)
}

impl GuestArch {
    /// The architecture's name in a dist directory's name.
    fn machine(self) -> &'static str {
        match self {
            GuestArch::X86_64 => "x86_64",
            GuestArch::Arm64 => "aarch64",
        }
    }
}

/// Builds the static, stripped binary for `arch` (rust-lld with the
/// target's own crt objects and libc.a: no musl-gcc or cross toolchain
/// is needed on the build host), and checks that it is one: the right
/// ELF machine, no interpreter, no shared library.
fn build_static(arch: GuestArch) -> Result<PathBuf> {
    let target = arch.musl_target();
    ensure_target(target)?;
    eprintln!("xtask: building kprobe-perf for {target} (release, linked by rust-lld, stripped)");
    let linker_var = format!(
        "CARGO_TARGET_{}_LINKER",
        target.to_uppercase().replace('-', "_")
    );
    crate::host::run_status(
        cargo()
            .env(linker_var, "rust-lld")
            .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
            .args([
                "build",
                "--release",
                "--locked",
                "--target",
                target,
                "--package",
                "kprobe-perf",
                // No `zstd` (record -z): libzstd is C, and no C compiler
                // for musl targets is at hand.
                "--no-default-features",
            ]),
        &format!("cargo build --target {target}"),
    )?;
    let built = target_dir().join(target).join("release/kprobe-perf");
    let bytes = std::fs::read(&built).with_context(|| format!("reading {}", built.display()))?;
    let want = if arch == GuestArch::Arm64 { 183 } else { 62 };
    if elf_machine(&bytes) != Some(want) {
        bail!(
            "{} is not an {} ELF (e_machine {:?})",
            built.display(),
            arch.machine(),
            elf_machine(&bytes)
        );
    }
    let link = linkage(&bytes).with_context(|| format!("reading {}", built.display()))?;
    if link.interp.is_some() || link.needed > 0 {
        bail!(
            "{} is not static: interpreter {:?}, {} shared libraries needed",
            built.display(),
            link.interp,
            link.needed
        );
    }
    Ok(built)
}

/// The man pages and completions `runner` writes, the README and both
/// licence texts, beside the binary.
fn write_docs(dist: &Dist, runner: &Path) -> Result<()> {
    output(
        Command::new(runner)
            .args(["__generate", "man"])
            .arg(dist.man_dir()),
    )?;
    let staged = dist.dir.join("completions.tmp");
    output(
        Command::new(runner)
            .args(["__generate", "completions"])
            .arg(&staged),
    )?;
    // Under the names each shell's completion directory wants.
    let comp = dist.completions_dir();
    for (from, shell, to) in [
        ("kprobe-perf.bash", "bash", "kprobe-perf"),
        ("_kprobe-perf", "zsh", "_kprobe-perf"),
        ("kprobe-perf.fish", "fish", "kprobe-perf.fish"),
    ] {
        std::fs::create_dir_all(comp.join(shell))?;
        std::fs::rename(staged.join(from), comp.join(shell).join(to))
            .with_context(|| format!("moving the {shell} completions"))?;
    }
    std::fs::remove_dir(&staged).with_context(|| format!("removing {}", staged.display()))?;
    for file in ["README.md", "LICENSE-MIT", "LICENSE-APACHE"] {
        std::fs::copy(workspace_root().join(file), dist.dir.join(file))
            .with_context(|| format!("copying {file}"))?;
    }
    Ok(())
}

/// The dist directory as a `.tar.gz` beside it, owned by root.
fn tarball(dist: &Dist) -> Result<PathBuf> {
    let parent = dist.dir.parent().context("dist dir has no parent")?;
    let name = dist
        .dir
        .file_name()
        .context("dist dir has no name")?
        .to_string_lossy()
        .into_owned();
    let tarball = parent.join(format!("{name}.tar.gz"));
    crate::host::run_status(
        Command::new("tar")
            .current_dir(parent)
            .args(["--owner=0", "--group=0", "--numeric-owner", "-czf"])
            .arg(&tarball)
            .arg(&name),
        "tar",
    )?;
    Ok(tarball)
}

/// Runs a command, returning its stdout (trimmed) or failing with stderr.
pub(crate) fn output(cmd: &mut Command) -> Result<String> {
    let what = format!("{cmd:?}");
    let out = cmd
        .output()
        .with_context(|| format!("could not start {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The shell script that puts the binary alone in a fresh directory,
/// mounts /proc and /sys there, and runs `kprobe-perf ARGS` in it with
/// `chroot`. No libc, loader, shell or /etc is present inside.
fn chroot_script(binary: &Path, root: &str, runs: &[&str]) -> String {
    let mut s = format!(
        "set -e; rm -rf {root}; mkdir -p {root}/proc {root}/sys; cp '{}' {root}/kprobe-perf; \
         mount -t proc proc {root}/proc; mount -t sysfs sysfs {root}/sys; \
         echo \"chroot contents: $(cd {root} && ls -A | tr '\\n' ' ')\"; ",
        binary.display()
    );
    for r in runs {
        // Echoed exactly: each ' of the command closed, escaped, reopened.
        let shown = r.replace('\'', "'\\''");
        s.push_str(&format!(
            "echo '+ chroot {root} /kprobe-perf {shown}'; chroot {root} /kprobe-perf {r} 2>&1; "
        ));
    }
    s
}

/// The empty-chroot check on the host: inside a private mount namespace
/// (`unshare -m`), so the mounts vanish with it whatever happens.
fn check_host_chroot(dist: &Dist) -> Result<()> {
    let root = std::env::temp_dir().join(format!("kprobe-perf-chroot-{}", std::process::id()));
    let root_s = root.to_string_lossy().into_owned();
    let bytes = std::fs::read(&dist.binary)?;
    let entry = entry_offset(&bytes)?;
    // A uprobe on the binary's own entry point, hit once by the command.
    let record = format!("record -a -e 'p:/kprobe-perf:0x{entry:x}' -- /kprobe-perf --version");
    let script = chroot_script(
        &dist.binary,
        &root_s,
        &[
            "--version",
            "probe --parse 'p:do_sys_openat2 dfd=%di:s32'",
            &record,
        ],
    );
    let out = output(Command::new("unshare").args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
    ]));
    // The mounts went with the namespace: only plain files and empty
    // directories are left, removed one by one (never recursively, in
    // case a mount were still there).
    let _ = std::fs::remove_file(root.join("kprobe-perf"));
    for d in ["proc", "sys", ""] {
        let _ = std::fs::remove_dir(root.join(d));
    }
    let out = out?;
    println!("{out}");
    let expect_version = format!(
        "+ chroot {root_s} /kprobe-perf --version\n{}",
        dist.version_line
    );
    if !out.contains(&expect_version) {
        bail!("the static binary in an empty chroot did not print its version");
    }
    let hits: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(&format!(": p_kprobe_0x{entry:x}: (0x")))
        .collect();
    let summary = format!("kprobe-perf: 1 events (p_kprobe_0x{entry:x}: 1), 0 lost");
    if !out.contains("chroot contents: kprobe-perf proc sys \n")
        || !out.contains("\np:kprobes/p_do_sys_openat2_0 do_sys_openat2 dfd=%di:s32\n")
        || !out.contains(&format!("{}\n", dist.version_line))
        || hits.len() != 1
        || !out.contains(&summary)
    {
        bail!("unexpected output in the empty chroot:\n{out}");
    }
    println!("xtask: host: the static binary runs in an empty chroot (only itself, /proc, /sys), and recorded one uprobe hit on its own entry point (file offset 0x{entry:x}): {}", hits[0].trim());
    Ok(())
}

/// In the VM on `kernel`: the same empty chroot, then a real record of a
/// kprobe and a kretprobe on do_sys_openat2 while the static binary opens
/// itself as a perf.data file (dfd AT_FDCWD = -100, return fd 3; a missing
/// file would be refused by a stat, with no open to see).
fn check_vm(dist: &Dist, kernel: &str) -> Result<()> {
    check_vm_arch(dist, kernel, GuestArch::X86_64)
}

/// [`check_vm`] in a VM of `arch` (the arm64 one for an aarch64 binary).
fn check_vm_arch(dist: &Dist, kernel: &str, arch: GuestArch) -> Result<()> {
    let cache = vm_cache().join("kernels");
    // `script -i` looks its file up (fstatat) before opening it. On
    // x86_64 the recorded command opens the binary itself as its file
    // (do_sys_openat2: dfd AT_FDCWD, fd 3 returned); on arm64 (seen in
    // the arm64 VM) the probes go on vfs_fstatat(dfd, filename, ...) of a
    // missing file (-ENOENT). Both return an int, read as s32 (arm64
    // leaves the upper half of x0 zero: s64 read 4294967294).
    let (resolved, dfd, func, file, want_ret) = match arch {
        GuestArch::X86_64 => (
            kernels::resolve_image_only(kernel, &cache)?,
            "%di",
            "do_sys_openat2",
            "/kprobe-perf",
            "3",
        ),
        GuestArch::Arm64 => (
            kernels::resolve_arm64(kernel, &cache)?,
            "%x0",
            "vfs_fstatat",
            "/no/such/file",
            "-2",
        ),
    };
    let record = format!("record -e 'p:{func} dfd={dfd}:s32' -e 'r:{func} ret=$retval:s32' -- /kprobe-perf script -i {file}");
    let script = chroot_script(&dist.binary, "/tmp/empty-root", &["--version", &record]);
    let outcome = vm::run(&VmRun {
        kernel: &resolved,
        command: &["sh".to_string(), "-c".to_string(), script],
        cwd: workspace_root(),
        env: passthrough_env(),
        timeout: Duration::from_secs(600),
        silence: Duration::from_secs(600),
        echo: vm::Echo::All,
        label: Some(kernel.to_string()),
        work_dir: vm_cache(),
        append: "",
    })?;
    report_problems(&outcome);
    if !outcome.problems.is_empty() || outcome.status.is_none() {
        bail!("the VM run on {kernel} failed");
    }
    let text = &outcome.output;
    let has = |s: &str| text.contains(s);
    if !has(&dist.version_line) {
        bail!("{kernel}: the static binary did not print its version in the VM");
    }
    // The recorded command exits 1 (not a perf.data file, or none).
    let entry = text.lines().any(|l| {
        l.contains("kprobe-perf-")
            && l.contains(&format!(": p_{func}_0: ({func}+0x0/"))
            && l.ends_with(" dfd=-100")
    });
    let ret = text.lines().any(|l| {
        l.contains(&format!(": r_{func}_0: (")) && l.ends_with(&format!(" ret={want_ret}"))
    });
    if !entry || !ret || !has("0 lost") {
        bail!("{kernel}: the record in the empty chroot did not show {func} on {file} (entry dfd=-100, return {want_ret})");
    }
    println!(
        "xtask: kernel {kernel} ({}): the static binary ran in an empty chroot and recorded a kprobe and a kretprobe",
        resolved.label
    );
    Ok(())
}

/// `cargo xtask dist [--check] [--kernel K]...`.
pub(crate) fn run(check: bool, kernels: &[String]) -> Result<()> {
    let dist = build()?;
    if !check {
        return Ok(());
    }
    check_all(&dist, kernels)
}

/// `cargo xtask dist --arch arm64 [--check] [--kernel K]...`: the check
/// runs in the arm64 VM on each kernel (default: the arm64 matrix).
pub(crate) fn run_arm64(check: bool, kernels: &[String]) -> Result<()> {
    let dist = build_for(GuestArch::Arm64)?;
    if !check {
        return Ok(());
    }
    crate::host::ensure_packages(&[("qemu-system-arm", "/usr/bin/qemu-system-aarch64")])?;
    let list: Vec<String> = if kernels.is_empty() {
        ARM64_MATRIX.iter().map(|s| s.to_string()).collect()
    } else {
        kernels.to_vec()
    };
    for k in &list {
        let t0 = std::time::Instant::now();
        check_vm_arch(&dist, k, GuestArch::Arm64)?;
        println!(
            "xtask: arm64 kernel {k}: checked in {:.0} s",
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// The host chroot, then each kernel of `kernels` (default: the matrix).
pub(crate) fn check_all(dist: &Dist, kernels: &[String]) -> Result<()> {
    crate::host::ensure_packages(&[])?;
    check_host_chroot(dist)?;
    let list: Vec<String> = if kernels.is_empty() {
        MATRIX.iter().map(|s| s.to_string()).collect()
    } else {
        kernels.to_vec()
    };
    for k in &list {
        check_vm(dist, k)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 image: header, two program headers (INTERP and
    /// DYNAMIC), their data.
    fn elf(interp: Option<&[u8]>, dynamic: &[(u64, u64)]) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&2u16.to_le_bytes());
        let data_at = 64 + 2 * 56;
        let interp = interp.unwrap_or_default();
        let dyn_at = data_at + interp.len();
        let mut ph = |kind: u32, off: usize, size: usize| {
            let mut p = vec![0u8; 56];
            p[..4].copy_from_slice(&kind.to_le_bytes());
            p[8..16].copy_from_slice(&(off as u64).to_le_bytes());
            p[32..40].copy_from_slice(&(size as u64).to_le_bytes());
            b.extend(p);
        };
        ph(if interp.is_empty() { 1 } else { 3 }, data_at, interp.len());
        ph(2, dyn_at, dynamic.len() * 16);
        b.extend_from_slice(interp);
        for (t, v) in dynamic {
            b.extend(t.to_le_bytes());
            b.extend(v.to_le_bytes());
        }
        b
    }

    #[test]
    fn static_and_dynamic_elf() {
        let dynamic = elf(
            Some(b"/lib64/ld-linux-x86-64.so.2\0"),
            &[(1, 1), (1, 9), (12, 0x1000), (0, 0), (1, 5)],
        );
        assert_eq!(
            linkage(&dynamic).unwrap(),
            Linkage {
                interp: Some("/lib64/ld-linux-x86-64.so.2".into()),
                needed: 2
            }
        );
        let static_pie = elf(None, &[(12, 0x1000), (0x6ffffef5, 0x298), (0, 0)]);
        assert_eq!(
            linkage(&static_pie).unwrap(),
            Linkage {
                interp: None,
                needed: 0
            }
        );
        assert!(linkage(b"#!/bin/sh\n").is_err());
        assert!(linkage(&dynamic[..100]).is_err());
    }

    /// This very process (a glibc build) has an interpreter and needs libc.
    #[test]
    fn this_test_binary_is_dynamic() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let l = linkage(&me).unwrap();
        assert!(l.interp.is_some() && l.needed >= 1, "{l:?}");
    }
}
