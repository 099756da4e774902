//! Debian kernel packages for the VM: which ones, where they are cached, and
//! how they are fetched (`apt-get download`) and unpacked (`dpkg-deb -x`).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::host;

/// A kernel the VM can boot, unpacked under the cache directory.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// Short label used in summaries (`6.1`, `6.12`, or the path given).
    pub label: String,
    /// `vmlinuz` image.
    pub image: PathBuf,
    /// `lib/modules/<release>` of the same package, if any.
    pub modules: Option<PathBuf>,
    /// The directory holding `vmlinux-<release>` and `System.map-<release>`
    /// from the matching `-dbg` package, if fetched.
    pub debug_boot: Option<PathBuf>,
}

/// The series the test matrix covers, oldest first.
pub const MATRIX: &[&str] = &["6.1", "6.12"];

/// The package-name pattern of a series' generic (not -cloud, not -rt) image.
fn package_regex(series: &str) -> Result<&'static str> {
    Ok(match series {
        "6.1" => r"^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$",
        "6.12" => r"^linux-image-6\.12\.[0-9]+\+deb[0-9]+-amd64-unsigned$",
        other => bail!("unknown kernel series {other:?}: use 6.1, 6.12, or a path to a vmlinuz"),
    })
}

/// Resolves `--kernel` (a series of [`MATRIX`] or a path to a kernel image).
pub fn resolve(spec: &str, cache: &Path) -> Result<Kernel> {
    let path = Path::new(spec);
    if spec.contains('/') || path.exists() {
        let image = path
            .canonicalize()
            .with_context(|| format!("kernel image {spec} not found"))?;
        return Ok(Kernel {
            label: spec.to_string(),
            image,
            modules: None,
            debug_boot: None,
        });
    }
    let package = newest_package(spec)?;
    let dir = cache.join(&package);
    let stamp = dir.join(".unpacked");
    if !stamp.exists() {
        fetch(&package, &dir)?;
        std::fs::write(&stamp, b"")?;
    }
    let image = find_one(&dir.join("boot"), "vmlinuz-")?;
    let modules_root = dir.join("lib/modules");
    let release = std::fs::read_dir(&modules_root)
        .with_context(|| format!("reading {}", modules_root.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .with_context(|| format!("no module tree under {}", modules_root.display()))?;
    let version = release
        .file_name()
        .and_then(|n| n.to_str())
        .context("module tree without a name")?
        .to_string();
    let debug_stamp = dir.join(".dbg-unpacked");
    if !debug_stamp.exists() {
        fetch_debug(&package, &version, &dir)?;
        std::fs::write(&debug_stamp, b"")?;
    }
    Ok(Kernel {
        label: spec.to_string(),
        image,
        modules: Some(release),
        debug_boot: Some(dir.join("usr/lib/debug/boot")),
    })
}

fn find_one(dir: &Path, prefix: &str) -> Result<PathBuf> {
    std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .with_context(|| format!("no {prefix}* in {}", dir.display()))
}

/// Asks apt for the newest package of a series. Runs `apt-get update` only
/// when the local lists know none (a fresh machine).
fn newest_package(series: &str) -> Result<String> {
    let regex = package_regex(series)?;
    let mut names = apt_search(regex)?;
    if names.is_empty() {
        host::run_status(
            Command::new("apt-get").args(["update", "-qq"]),
            "apt-get update",
        )?;
        names = apt_search(regex)?;
    }
    names.sort_by_key(|n| version_key(n));
    names.pop().with_context(|| {
        format!("apt knows no package matching {regex}; is a Debian bookworm (or newer) source configured?")
    })
}

fn apt_search(regex: &str) -> Result<Vec<String>> {
    let out = Command::new("apt-cache")
        .args(["search", "--names-only", regex])
        .output()
        .context("running apt-cache (this harness needs a Debian-family host)")?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// Numeric runs of a package name, for a version-aware sort.
fn version_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

fn fetch(package: &str, dir: &Path) -> Result<()> {
    let parent = dir.parent().context("cache dir has no parent")?;
    std::fs::create_dir_all(parent)?;
    eprintln!(
        "xtask: downloading {package} (cached under {})",
        parent.display()
    );
    let dl = parent.join("download");
    let _ = std::fs::remove_dir_all(&dl);
    std::fs::create_dir_all(&dl)?;
    host::run_status(
        Command::new("apt-get")
            .arg("download")
            .arg(package)
            .current_dir(&dl),
        "apt-get download",
    )?;
    let deb = find_one(&dl, package)?;
    let _ = std::fs::remove_dir_all(dir);
    host::run_status(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(dir),
        "dpkg-deb -x",
    )?;
    std::fs::remove_dir_all(&dl)?;
    Ok(())
}

/// The vmlinux and System.map of `package` from its `-dbg` package (about
/// 0.9-1 GiB): only those two files are unpacked, and tar stops reading
/// once it has them (they come first), which takes seconds.
fn fetch_debug(package: &str, release: &str, dir: &Path) -> Result<()> {
    let dbg = format!(
        "{}-dbg",
        package.strip_suffix("-unsigned").unwrap_or(package)
    );
    let parent = dir.parent().context("cache dir has no parent")?;
    eprintln!("xtask: downloading {dbg} for its vmlinux and System.map");
    let dl = parent.join("download-dbg");
    let _ = std::fs::remove_dir_all(&dl);
    std::fs::create_dir_all(&dl)?;
    host::run_status(
        Command::new("apt-get")
            .arg("download")
            .arg(&dbg)
            .current_dir(&dl),
        "apt-get download",
    )?;
    let deb = find_one(&dl, &dbg)?;
    let wanted = [
        format!("./usr/lib/debug/boot/vmlinux-{release}"),
        format!("./usr/lib/debug/boot/System.map-{release}"),
    ];
    // dpkg-deb complains of a broken pipe when tar stops early; tar's
    // status is the pipeline's.
    host::run_status(
        Command::new("sh")
            .arg("-c")
            .arg("dpkg-deb --fsys-tarfile \"$1\" 2>/dev/null | tar -x -C \"$2\" --occurrence=1 \"$3\" \"$4\"")
            .arg("sh")
            .arg(&deb)
            .arg(dir)
            .args(&wanted),
        "unpacking vmlinux and System.map",
    )?;
    std::fs::remove_dir_all(&dl)?;
    for w in &wanted {
        let p = dir.join(w);
        if !p.is_file() {
            bail!("{dbg} has no {w}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_by_numeric_runs() {
        let mut v = [
            "linux-image-6.1.0-9-amd64-unsigned".to_string(),
            "linux-image-6.1.0-56-amd64-unsigned".to_string(),
            "linux-image-6.1.0-10-amd64-unsigned".to_string(),
        ];
        v.sort_by_key(|n| version_key(n));
        assert_eq!(v.last().unwrap(), "linux-image-6.1.0-56-amd64-unsigned");
    }

    #[test]
    fn unknown_series_is_refused() {
        assert!(package_regex("5.10").is_err());
        assert!(package_regex("6.12").is_ok());
    }
}
