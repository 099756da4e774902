//! `cargo xtask deb`: a Debian package of the static binary, its man
//! pages and completions, built with `dpkg-deb --build` from a staged
//! tree (the tree `cargo xtask dist` lays out, moved to Debian's paths).
//! It has no maintainer scripts: it sets no capability and changes
//! nothing on installation. `--check` installs it on this host, checks
//! it, removes and purges it, and checks that nothing is left.

use anyhow::{bail, Context, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::dist::{self, output, Dist};

/// The package name.
pub(crate) const PACKAGE: &str = "kprobe-perf";
/// The Maintainer field (Debian requires one).
const MAINTAINER: &str = "kprobe-perf developers <kprobe-perf@users.noreply.invalid>";

/// Where each shell looks for completions installed by packages.
pub(crate) const COMPLETION_DIRS: [(&str, &str, &str); 3] = [
    (
        "bash",
        "usr/share/bash-completion/completions",
        "kprobe-perf",
    ),
    ("zsh", "usr/share/zsh/vendor-completions", "_kprobe-perf"),
    (
        "fish",
        "usr/share/fish/vendor_completions.d",
        "kprobe-perf.fish",
    ),
];

fn write(path: &Path, text: &str, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", path.display()))
}

fn copy(from: &Path, to: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", to.display()))
}

/// gzip -9n, as Debian wants man pages and changelogs (no name or time
/// stamp inside, so the package is reproducible).
fn gzip(path: &Path) -> Result<()> {
    crate::host::run_status(
        Command::new("gzip").args(["-9nf"]).arg(path),
        &format!("gzip {}", path.display()),
    )
}

/// The date of the commit built (or now), as Debian changelogs write it.
fn changelog_date() -> String {
    output(
        Command::new("git")
            .current_dir(crate::workspace_root())
            .args(["log", "-1", "--format=%aD"]),
    )
    .or_else(|_| output(Command::new("date").arg("-R")))
    .unwrap_or_else(|_| "Thu, 01 Jan 1970 00:00:00 +0000".to_string())
}

/// The year of the commit built (or this year), for the copyright line.
fn changelog_year() -> String {
    output(
        Command::new("git")
            .current_dir(crate::workspace_root())
            .args(["log", "-1", "--format=%ad", "--date=format:%Y"]),
    )
    .or_else(|_| output(Command::new("date").arg("+%Y")))
    .unwrap_or_else(|_| "1970".to_string())
}

/// Lays out the package tree under `stage` from the dist directory.
fn stage(dist: &Dist, stage: &Path) -> Result<()> {
    if stage.exists() {
        std::fs::remove_dir_all(stage).with_context(|| format!("removing {}", stage.display()))?;
    }
    copy(&dist.binary, &stage.join("usr/bin/kprobe-perf"), 0o755)?;
    let man1 = stage.join("usr/share/man/man1");
    let mut pages: Vec<PathBuf> = std::fs::read_dir(dist.man_dir())
        .with_context(|| format!("reading {}", dist.man_dir().display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    pages.sort();
    for page in &pages {
        let name = page.file_name().context("a man page without a name")?;
        let to = man1.join(name);
        copy(page, &to, 0o644)?;
        gzip(&to)?;
    }
    let comp = dist.completions_dir();
    for (shell, dir, name) in COMPLETION_DIRS {
        copy(
            &comp.join(shell).join(name),
            &stage.join(dir).join(name),
            0o644,
        )?;
    }
    let doc = stage.join("usr/share/doc").join(PACKAGE);
    write(&doc.join("copyright"), &copyright()?, 0o644)?;
    // A static-pie binary has a dynamic section (for its own relocations)
    // and no DT_NEEDED, which lintian takes for a shared library without
    // its libc: say why that is expected.
    write(
        &stage.join("usr/share/lintian/overrides").join(PACKAGE),
        "# A static-pie executable: a dynamic section for its own relocations, no shared library needed.\n\
         kprobe-perf: shared-library-lacks-prerequisites [usr/bin/kprobe-perf]\n",
        0o644,
    )?;
    let commit = dist
        .version_line
        .split_once('(')
        .map_or("", |(_, c)| c.trim_end_matches(')'));
    let changelog = doc.join("changelog.gz");
    let plain = doc.join("changelog");
    write(
        &plain,
        &format!(
            "{PACKAGE} ({}) unstable; urgency=medium\n\n  * Built from {commit}.\n\n -- {MAINTAINER}  {}\n",
            dist.version,
            changelog_date()
        ),
        0o644,
    )?;
    gzip(&plain)?;
    if !changelog.exists() {
        bail!("{} was not written", changelog.display());
    }
    // Installed-Size in KiB, of the files under usr/.
    let mut bytes = 0u64;
    let mut dirs = vec![stage.join("usr")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d)?.flatten() {
            let md = e.metadata()?;
            if md.is_dir() {
                dirs.push(e.path());
            } else {
                bytes += md.len();
            }
        }
    }
    // DEBIAN/md5sums, which `dpkg --verify` checks installed files against.
    let sums = output(
        Command::new("sh")
            .current_dir(stage)
            .args(["-c", "find usr -type f -print0 | sort -z | xargs -0 md5sum"]),
    )?;
    write(&stage.join("DEBIAN/md5sums"), &format!("{sums}\n"), 0o644)?;
    write(
        &stage.join("DEBIAN/control"),
        &format!(
            "Package: {PACKAGE}\n\
             Version: {}\n\
             Architecture: amd64\n\
             Maintainer: {MAINTAINER}\n\
             Installed-Size: {}\n\
             Section: devel\n\
             Priority: optional\n\
             Description: dynamic kernel probes through perf_event_open\n\
             \x20kprobe-perf attaches kprobes, kretprobes and uprobes written in the\n\
             \x20kprobe_events language through the kprobe and uprobe PMUs with\n\
             \x20perf_event_open, and decodes their samples in user space: no BPF,\n\
             \x20no kernel module, nothing left in the kernel at exit.\n\
             \x20.\n\
             \x20The binary is static (musl). No capability is set on installation:\n\
             \x20run it as root, or grant one as the README says for your kernel.\n",
            dist.version,
            bytes.div_ceil(1024)
        ),
        0o644,
    )?;
    Ok(())
}

/// Debian's copyright file (machine-readable format 1.0): the project's
/// two licences, the MIT text as the repository's LICENSE-MIT says it,
/// the Apache text (LICENSE-APACHE) by Debian's own copy of it.
fn copyright() -> Result<String> {
    let path = crate::workspace_root().join("LICENSE-MIT");
    let mit = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {} for the copyright file", path.display()))?;
    let body: String = mit
        .lines()
        .map(|l| {
            if l.trim().is_empty() {
                " .\n".to_string()
            } else {
                format!(" {l}\n")
            }
        })
        .collect();
    Ok(format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: kprobe-perf\n\
         \n\
         Files: *\n\
         Copyright: {} The kprobe-perf developers\n\
         License: Expat or Apache-2.0\n\
         \n\
         License: Expat\n{body}\
         \n\
         License: Apache-2.0\n\
         \x20On Debian systems, the full text of the Apache License 2.0 (the\n\
         \x20repository's LICENSE-APACHE) is in /usr/share/common-licenses/Apache-2.0.\n",
        changelog_year()
    ))
}

/// Builds the .deb from a dist tree; returns its path.
pub(crate) fn build(dist: &Dist) -> Result<PathBuf> {
    let root = dist::target_dir().join("deb");
    let staged = root.join("stage");
    stage(dist, &staged)?;
    let deb = dist::target_dir()
        .join("dist")
        .join(format!("{PACKAGE}_{}_amd64.deb", dist.version));
    crate::host::run_status(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-Zxz", "--build"])
            .arg(&staged)
            .arg(&deb),
        "dpkg-deb --build",
    )?;
    let contents = output(Command::new("dpkg-deb").arg("--contents").arg(&deb))?;
    println!("{contents}");
    println!(
        "xtask: {} ({} bytes)",
        deb.display(),
        std::fs::metadata(&deb)?.len()
    );
    Ok(deb)
}

/// `dpkg-query`'s status of the package, or "" when dpkg knows nothing
/// of it.
fn status() -> String {
    output(Command::new("dpkg-query").args(["-W", "-f=${db:Status-Abbrev}", PACKAGE]))
        .unwrap_or_default()
}

/// Purges the package when it is still installed, whatever happened to
/// the check (also when it panics).
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        if !status().is_empty() && !status().starts_with("un") {
            eprintln!("xtask: purging {PACKAGE} (cleaning up after the check)");
            let _ = Command::new("dpkg").args(["--purge", PACKAGE]).status();
        }
    }
}

/// The files and directories the package lists (`dpkg -L`).
fn listed() -> Result<Vec<PathBuf>> {
    Ok(output(Command::new("dpkg").args(["-L", PACKAGE]))?
        .lines()
        .filter(|l| l.starts_with('/') && *l != "/.")
        .map(PathBuf::from)
        .collect())
}

/// Installs the package on this host, checks what it installed, removes
/// and purges it, and checks that nothing is left. Root only; refuses to
/// touch a host where the package or any of its paths already exist.
pub(crate) fn check(deb: &Path) -> Result<()> {
    if !is_root() {
        bail!("the package check installs a package: run it as root");
    }
    crate::host::ensure_packages(&[("man-db", "/usr/bin/man")])?;
    let s = status();
    if !s.is_empty() && !s.starts_with("un") {
        bail!("{PACKAGE} is already installed here ({s}); remove it (dpkg --purge {PACKAGE}) before the check, which installs and removes it");
    }
    let (files, dirs) = package_paths(deb)?;
    for f in &files {
        if f.exists() {
            bail!(
                "{} exists before the package is installed; the check would overwrite it",
                f.display()
            );
        }
    }
    let dirs_before: BTreeSet<PathBuf> = dirs.iter().filter(|d| d.exists()).cloned().collect();
    let control = output(Command::new("dpkg-deb").arg("--info").arg(deb))?;
    for script in ["preinst", "postinst", "prerm", "postrm"] {
        if control.contains(script) {
            bail!("the package has a {script} script: it must change nothing on installation");
        }
    }
    lintian(deb)?;
    let guard = Installed;
    crate::host::run_status(Command::new("dpkg").arg("-i").arg(deb), "dpkg -i")?;
    let installed = listed()?;
    for f in &files {
        if !installed.contains(f) || !f.is_file() {
            bail!("{} is in the package but not installed", f.display());
        }
    }
    crate::host::run_status(
        Command::new("dpkg").args(["--verify", PACKAGE]),
        "dpkg --verify (installed files against the package's md5sums)",
    )?;
    check_version_and_man_pages()?;
    check_no_privilege()?;
    remove_and_purge(&installed, &dirs_before)?;
    drop(guard);
    println!(
        "xtask: dpkg -i, --version, man -w, dpkg -r and --purge: {} files installed and all removed; {} directories that existed before were kept",
        files.len(),
        dirs_before.len()
    );
    Ok(())
}

/// The package's files and directories, as `dpkg-deb --contents` lists
/// them.
fn package_paths(deb: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let contents = output(Command::new("dpkg-deb").arg("--contents").arg(deb))?;
    // ./usr/bin/kprobe-perf ... : the last field is the path.
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    for line in contents.lines() {
        let Some(path) = line.split_whitespace().last() else {
            continue;
        };
        let p = PathBuf::from(path.trim_start_matches('.'));
        if p.as_os_str().is_empty() || p == Path::new("/") {
            continue;
        }
        if line.starts_with('d') {
            dirs.push(p);
        } else {
            files.push(p);
        }
    }
    Ok((files, dirs))
}

/// Debian's own checker, where it is installed (it is not required).
fn lintian(deb: &Path) -> Result<()> {
    match Command::new("lintian")
        .args(["--fail-on", "error,warning"])
        .arg(deb)
        .output()
    {
        Ok(out) if out.status.success() => {
            println!("xtask: lintian: no error or warning");
        }
        Ok(out) => bail!(
            "lintian found problems in {}:\n{}{}",
            deb.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(_) => println!("SKIP lintian: not installed (apt-get install lintian)"),
    }
    Ok(())
}

/// The installed binary's `--version`, and its man pages as `man` finds
/// and renders them.
fn check_version_and_man_pages() -> Result<()> {
    let version = output(Command::new("/usr/bin/kprobe-perf").arg("--version"))?;
    println!("xtask: /usr/bin/kprobe-perf --version: {version}");
    if !version.starts_with("kprobe-perf ") {
        bail!("unexpected --version: {version}");
    }
    let man = output(Command::new("man").args(["-w", "kprobe-perf"]))?;
    if man != "/usr/share/man/man1/kprobe-perf.1.gz" {
        bail!("man -w kprobe-perf found {man:?}, not /usr/share/man/man1/kprobe-perf.1.gz");
    }
    let record = output(Command::new("man").args(["-w", "kprobe-perf-record"]))?;
    println!("xtask: man -w kprobe-perf: {man}; man -w kprobe-perf-record: {record}");
    let rendered = plain_text(&output(Command::new("man").env("MANWIDTH", "80").args([
        "-P",
        "cat",
        "kprobe-perf-record",
    ]))?);
    if !rendered.contains("-e, --event <SPEC>") {
        let head: Vec<&str> = rendered.lines().take(20).collect();
        bail!(
            "man kprobe-perf-record does not show -e, --event <SPEC>:\n{}",
            head.join("\n")
        );
    }
    Ok(())
}

/// No capability and no setuid on the installed binary.
fn check_no_privilege() -> Result<()> {
    // (The package has no maintainer script that could set one: checked
    // above. getcap, from libcap2-bin, confirms it where installed.)
    match Command::new("getcap").arg("/usr/bin/kprobe-perf").output() {
        Ok(out) if out.status.success() && out.stdout.is_empty() => {}
        Ok(out) => bail!(
            "getcap /usr/bin/kprobe-perf: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(_) => println!("SKIP getcap: not installed (libcap2-bin)"),
    }
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata("/usr/bin/kprobe-perf")?
            .permissions()
            .mode()
            & 0o7777
    };
    if mode != 0o755 {
        bail!("/usr/bin/kprobe-perf has mode {mode:o}, not 755");
    }
    println!("xtask: /usr/bin/kprobe-perf: mode 755, no capability (getcap prints nothing)");
    Ok(())
}

/// `dpkg -r` and `--purge`, and nothing of the package left but the
/// directories that were there before.
fn remove_and_purge(installed: &[PathBuf], dirs_before: &BTreeSet<PathBuf>) -> Result<()> {
    crate::host::run_status(Command::new("dpkg").args(["-r", PACKAGE]), "dpkg -r")?;
    let left: Vec<&PathBuf> = installed
        .iter()
        .filter(|p| p.exists() && !dirs_before.contains(*p))
        .collect();
    if !left.is_empty() {
        bail!("dpkg -r left {left:?}");
    }
    // Without conffiles, dpkg -r already forgot the package; purge what
    // it still knows of.
    let removed = status();
    if !removed.is_empty() && !removed.starts_with("un") {
        crate::host::run_status(
            Command::new("dpkg").args(["--purge", PACKAGE]),
            "dpkg --purge",
        )?;
    }
    let after = status();
    if !after.is_empty() && !after.starts_with("un") {
        bail!("dpkg still knows {PACKAGE} after purge: {after}");
    }
    Ok(())
}

/// A page `man` formatted for a terminal, without its overstrikes
/// (`X\x08X` bold, `_\x08X` underlined).
fn plain_text(page: &str) -> String {
    let mut out: Vec<char> = Vec::with_capacity(page.len());
    for c in page.chars() {
        if c == '\u{8}' {
            out.pop();
        } else {
            out.push(c);
        }
    }
    out.into_iter().collect()
}

/// Whether this process's effective uid is 0 (from /proc/self/status).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// The packaging step of `cargo xtask test`: the dist tree (the static
/// binary in an empty chroot here and in the VM on each of `kernels`,
/// default the matrix), then the package installed and removed here
/// (root only; otherwise skipped, saying so). Returns the summary lines
/// and the passed, failed and skipped counts.
pub(crate) fn test_step(kernels: &[String]) -> (Vec<String>, u64, u64, u64) {
    let mut lines = Vec::new();
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let mut count = |name: &str, r: Result<()>, lines: &mut Vec<String>| match r {
        Ok(()) => {
            passed += 1;
            lines.push(format!("{name}: ok"));
        }
        Err(e) => {
            failed += 1;
            eprintln!("xtask: {name}: {e:#}");
            lines.push(format!("{name}: FAILED ({e})"));
        }
    };
    let dist = match dist::build() {
        Ok(d) => d,
        Err(e) => {
            count("cargo xtask dist", Err(e), &mut lines);
            return (lines, passed, failed, skipped);
        }
    };
    count(
        "static binary (empty chroot, host and VM)",
        dist::check_all(&dist, kernels),
        &mut lines,
    );
    if !is_root() {
        println!("SKIP the Debian package check: it installs a package, which needs root");
        lines.push("Debian package: SKIP (not root)".to_string());
        skipped += 1;
    } else {
        count(
            "Debian package (dpkg -i, man -w, dpkg -r/--purge)",
            build(&dist).and_then(|deb| check(&deb)),
            &mut lines,
        );
    }
    (lines, passed, failed, skipped)
}

/// `cargo xtask deb [--check]`.
pub(crate) fn run(check_it: bool) -> Result<()> {
    let dist = dist::build()?;
    let deb = build(&dist)?;
    if check_it {
        check(&deb)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn overstrikes_removed() {
        assert_eq!(
            super::plain_text("-\u{8}--\u{8}-e\u{8}e _\u{8}<_\u{8}S"),
            "--e <S"
        );
    }

    /// Both licences, each in its own paragraph; the MIT text is the
    /// repository's, every line of it indented (a blank one as ` .`).
    #[test]
    fn the_copyright_file_states_both_licences() {
        let c = super::copyright().unwrap();
        assert!(c.contains("\nLicense: Expat or Apache-2.0\n\nLicense: Expat\n MIT License\n .\n"));
        assert!(c.contains("\n\nLicense: Apache-2.0\n"));
        assert!(c.contains("/usr/share/common-licenses/Apache-2.0"));
        let expat = c.split("License: Expat\n").nth(1).unwrap();
        let text: Vec<&str> = expat.lines().take_while(|l| !l.is_empty()).collect();
        assert!(text.len() > 10 && text.iter().all(|l| l.starts_with(' ')));
    }
}
