//! Debian kernel packages for the VM: which ones, where they are cached, and
//! how they are fetched (`apt-get download`) and unpacked (`dpkg-deb -x`).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::host;

/// A kernel the VM can boot, unpacked under the cache directory.
#[derive(Debug, Clone)]
pub(crate) struct Kernel {
    /// Short label used in summaries (`6.1`, `6.12`, or the path given).
    pub label: String,
    /// `vmlinuz` image.
    pub image: PathBuf,
    /// `lib/modules/<release>` of the same package, if any.
    pub modules: Option<PathBuf>,
    /// The directory holding `vmlinux-<release>` and `System.map-<release>`
    /// from the matching `-dbg` package, if fetched.
    pub debug_boot: Option<PathBuf>,
    /// The guest's architecture.
    pub arch: GuestArch,
    /// A static busybox for the guest's architecture (`None`: the host's
    /// `/bin/busybox`, for an x86_64 guest).
    pub busybox: Option<PathBuf>,
}

/// The architecture a VM emulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum GuestArch {
    /// x86_64 (`qemu-system-x86_64`): the guest runs the host's binaries
    /// in a chroot of the host's root file system.
    #[default]
    X86_64,
    /// arm64 (`qemu-system-aarch64 -M virt`, TCG): the host's root is
    /// shown but not chrooted into (its binaries are x86_64); commands run
    /// in the initramfs with an arm64 busybox, and must be static aarch64
    /// builds.
    Arm64,
}

impl GuestArch {
    /// Parses `--arch`.
    pub(crate) fn parse(name: &str) -> Result<GuestArch> {
        match name {
            "x86_64" | "amd64" => Ok(GuestArch::X86_64),
            "arm64" | "aarch64" => Ok(GuestArch::Arm64),
            other => bail!("unknown --arch {other:?}: use x86_64 or arm64"),
        }
    }

    /// The Rust target of static builds that run in this guest.
    pub(crate) fn musl_target(self) -> &'static str {
        match self {
            GuestArch::X86_64 => "x86_64-unknown-linux-musl",
            GuestArch::Arm64 => "aarch64-unknown-linux-musl",
        }
    }
}

/// The series the arm64 set runs on (see `test::ARM64`), oldest first.
pub(crate) const ARM64_MATRIX: &[&str] = &["6.1", "6.12"];

/// The series the full test matrix covers, oldest first.
pub(crate) const MATRIX: &[&str] = &["6.1", "6.12"];

/// The series that run the smoke set (see `test::SMOKE`), oldest first.
pub(crate) const SMOKE_MATRIX: &[&str] = &["5.10", "6.12-rt", "sid"];

/// Every series `--kernel` accepts, for messages.
const SERIES_NAMES: &str = "5.10, 6.1, 6.12, 6.12-rt, sid";

/// Where a series' packages come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The host's own apt sources (Debian 12, bookworm).
    Host,
    /// A private apt configuration under the cache, with these
    /// `deb` lines; the host's sources and apt state are never changed.
    Private {
        /// A directory name for its lists and state.
        name: &'static str,
        /// `(URI, suite)` pairs, component `main`.
        suites: &'static [(&'static str, &'static str)],
    },
}

/// One kernel series: where its packages are, and the package-name
/// pattern of its generic (not -cloud) image.
#[derive(Debug, Clone, Copy)]
struct Series {
    source: Source,
    regex: &'static str,
}

const DEBIAN: &str = "http://deb.debian.org/debian";
const DEBIAN_SECURITY: &str = "http://deb.debian.org/debian-security";

fn series(name: &str) -> Result<Series> {
    Ok(match name {
        // Debian 11 (bullseye): 5.10 LTS.
        "5.10" => Series {
            source: Source::Private {
                name: "bullseye",
                suites: &[(DEBIAN, "bullseye"), (DEBIAN_SECURITY, "bullseye-security")],
            },
            regex: r"^linux-image-5\.10\.0-[0-9]+-amd64-unsigned$",
        },
        "6.1" => Series {
            source: Source::Host,
            regex: r"^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$",
        },
        "6.12" => Series {
            source: Source::Host,
            regex: r"^linux-image-6\.12\.[0-9]+\+deb[0-9]+-amd64-unsigned$",
        },
        // PREEMPT_RT build of the same 6.12 series.
        "6.12-rt" => Series {
            source: Source::Host,
            regex: r"^linux-image-6\.12\.[0-9]+\+deb[0-9]+-rt-amd64-unsigned$",
        },
        // The newest kernel Debian unstable offers (its image packages
        // have no -unsigned twin any more).
        "sid" => Series {
            source: Source::Private {
                name: "sid",
                suites: &[(DEBIAN, "sid")],
            },
            regex: r"^linux-image-[0-9]+\.[0-9]+\.[0-9]+\+deb[0-9]+-amd64(-unsigned)?$",
        },
        other => bail!(
            "unknown kernel series {other:?}: use one of {SERIES_NAMES}, or a path to a vmlinuz"
        ),
    })
}

/// Debian 12's own suites, for a private (arm64) apt configuration.
const BOOKWORM: &[(&str, &str)] = &[
    (DEBIAN, "bookworm"),
    (DEBIAN, "bookworm-updates"),
    (DEBIAN_SECURITY, "bookworm-security"),
];

/// An arm64 series: the 6.1 and 6.12 generic images of Debian 12, through
/// a private apt configuration whose architecture is arm64.
fn arm64_series(name: &str) -> Result<Series> {
    let regex = match name {
        "6.1" => r"^linux-image-6\.1\.0-[0-9]+-arm64-unsigned$",
        "6.12" => r"^linux-image-6\.12\.[0-9]+\+deb[0-9]+-arm64-unsigned$",
        other => bail!(
            "no arm64 kernel series {other:?}: --arch arm64 takes 6.1 or 6.12, or a path to an arm64 vmlinuz"
        ),
    };
    Ok(Series {
        source: Source::Private {
            name: "bookworm-arm64",
            suites: BOOKWORM,
        },
        regex,
    })
}

/// Resolves `--kernel` for an `--arch arm64` VM: the image and modules of
/// the series (no `-dbg` package: the arm64 set needs no vmlinux), and
/// Debian's `busybox-static` for arm64, both through the private apt
/// configuration `apt/bookworm-arm64` under the cache.
pub(crate) fn resolve_arm64(spec: &str, cache: &Path) -> Result<Kernel> {
    let series = arm64_series(spec)?;
    let Source::Private { name, suites } = series.source else {
        bail!("arm64 series come from a private apt configuration");
    };
    let apt = Apt::new_for(name, suites, "arm64", cache)?;
    let busybox_dir = cache.join("busybox-static-arm64");
    let busybox = busybox_dir.join("bin/busybox");
    if !busybox.is_file() {
        unpack(&apt, "busybox-static", &busybox_dir)?;
    }
    if !busybox.is_file() {
        bail!(
            "busybox-static (arm64) has no bin/busybox under {}",
            busybox_dir.display()
        );
    }
    let mut kernel = if spec.contains('/') || Path::new(spec).exists() {
        resolve(spec, cache)?
    } else {
        let package = apt.newest_package(series.regex)?;
        let dir = cache.join(&package);
        let stamp = dir.join(".unpacked");
        if !stamp.exists() {
            fetch(&apt, &package, &dir)?;
            std::fs::write(&stamp, b"")?;
        }
        let (image, release) = image_and_modules(&dir)?;
        Kernel {
            label: format!("arm64-{spec}"),
            image,
            modules: Some(release),
            debug_boot: None,
            arch: GuestArch::Arm64,
            busybox: None,
        }
    };
    kernel.arch = GuestArch::Arm64;
    kernel.busybox = Some(busybox);
    Ok(kernel)
}

/// Resolves `--kernel` (a series name or a path to a kernel image), with
/// the series' `-dbg` package (vmlinux, System.map, modules' debug
/// files), which the tests and benchmarks read.
pub(crate) fn resolve(spec: &str, cache: &Path) -> Result<Kernel> {
    resolve_as(spec, cache, true)
}

/// [`resolve`] without the `-dbg` package (about 1 GB): what the demo
/// needs, as kprobe-perf reads the guest's own /proc/kallsyms.
pub(crate) fn resolve_image_only(spec: &str, cache: &Path) -> Result<Kernel> {
    resolve_as(spec, cache, false)
}

fn resolve_as(spec: &str, cache: &Path, with_debug: bool) -> Result<Kernel> {
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
            arch: GuestArch::X86_64,
            busybox: None,
        });
    }
    let series = series(spec)?;
    let apt = Apt::new(series.source, cache)?;
    let package = apt.newest_package(series.regex)?;
    let dir = cache.join(&package);
    let stamp = dir.join(".unpacked");
    if !stamp.exists() {
        fetch(&apt, &package, &dir)?;
        std::fs::write(&stamp, b"")?;
    }
    let (image, release) = image_and_modules(&dir)?;
    let version = release
        .file_name()
        .and_then(|n| n.to_str())
        .context("module tree without a name")?
        .to_string();
    // The stamp names what is unpacked: a cache unpacked before the
    // modules' debug files were is unpacked again.
    let debug_stamp = dir.join(DEBUG_STAMP);
    if with_debug && !debug_stamp.exists() {
        fetch_debug(&apt, &package, &version, &dir)?;
        std::fs::write(&debug_stamp, b"")?;
    }
    Ok(Kernel {
        label: spec.to_string(),
        image,
        modules: Some(release),
        debug_boot: debug_stamp.exists().then(|| dir.join("usr/lib/debug/boot")),
        arch: GuestArch::X86_64,
        busybox: None,
    })
}

/// apt-get / apt-cache with either the host's configuration or a private
/// one (sources list, lists, cache and state under the VM cache).
struct Apt {
    /// `-o` options of the private configuration (empty for the host's).
    options: Vec<String>,
    /// Where the private configuration lives (for messages).
    private_dir: Option<PathBuf>,
}

impl Apt {
    fn new(source: Source, cache: &Path) -> Result<Apt> {
        let Source::Private { name, suites } = source else {
            return Ok(Apt {
                options: Vec::new(),
                private_dir: None,
            });
        };
        Apt::new_for(name, suites, "amd64", cache)
    }

    /// A private configuration `name` for packages of `arch` (`amd64`,
    /// `arm64`): apt sees only that architecture, and neither the host's
    /// dpkg architectures nor its sources change.
    fn new_for(name: &str, suites: &[(&str, &str)], arch: &str, cache: &Path) -> Result<Apt> {
        let dir = cache.join("apt").join(name);
        for sub in ["lists/partial", "archives/partial"] {
            std::fs::create_dir_all(dir.join(sub))
                .with_context(|| format!("creating {}", dir.join(sub).display()))?;
        }
        let keyring = "/usr/share/keyrings/debian-archive-keyring.gpg";
        if !Path::new(keyring).exists() {
            bail!("{keyring} is missing: apt-get install debian-archive-keyring");
        }
        let list: String = suites
            .iter()
            .map(|(uri, suite)| format!("deb [signed-by={keyring}] {uri} {suite} main\n"))
            .collect();
        let sources = dir.join("sources.list");
        std::fs::write(&sources, list).with_context(|| format!("writing {}", sources.display()))?;
        let d = dir.display();
        let mut options = vec![
            format!("Dir::Etc::SourceList={}", sources.display()),
            "Dir::Etc::SourceParts=/dev/null".to_string(),
            format!("Dir::State::Lists={d}/lists"),
            format!("Dir::Cache={d}"),
            format!("Dir::Cache::Archives={d}/archives"),
            format!("APT::Architecture={arch}"),
            // Downloads go to the cache as root; apt's sandbox user could
            // not write there and says so on every download.
            "APT::Sandbox::User=root".to_string(),
        ];
        if arch != "amd64" {
            // Only this architecture, whatever the host's dpkg knows.
            options.push(format!("APT::Architectures::={arch}"));
        }
        Ok(Apt {
            options,
            private_dir: Some(dir),
        })
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        for o in &self.options {
            c.arg("-o").arg(o);
        }
        c
    }

    /// Asks apt for the newest package matching `regex`. Runs `apt-get
    /// update` (of the private lists only, when private) when the lists
    /// know none (a fresh machine).
    fn newest_package(&self, regex: &str) -> Result<String> {
        let mut names = self.search(regex)?;
        if names.is_empty() {
            host::run_status(
                self.command("apt-get").args(["update", "-qq"]),
                "apt-get update",
            )?;
            names = self.search(regex)?;
        }
        names.sort_by_key(|n| version_key(n));
        names.pop().with_context(|| match &self.private_dir {
            Some(d) => format!("apt knows no package matching {regex} in the sources of {}", d.display()),
            None => format!("apt knows no package matching {regex}; is a Debian bookworm (or newer) source configured?"),
        })
    }

    fn search(&self, regex: &str) -> Result<Vec<String>> {
        let out = self
            .command("apt-cache")
            .args(["search", "--names-only", regex])
            .output()
            .context("running apt-cache (this harness needs a Debian-family host)")?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect())
    }

    /// `apt-get download PACKAGE` into `dir`. On a fresh cache the private
    /// lists are empty (nothing asked apt for a kernel yet: the arm64
    /// busybox is the first download), so they are read first when apt
    /// knows no package of that name.
    fn download(&self, package: &str, dir: &Path) -> Result<()> {
        if self.private_dir.is_some()
            && !self
                .search(&exact_regex(package))?
                .iter()
                .any(|n| n == package)
        {
            host::run_status(
                self.command("apt-get").args(["update", "-qq"]),
                "apt-get update",
            )?;
        }
        host::run_status(
            self.command("apt-get")
                .arg("download")
                .arg(package)
                .current_dir(dir),
            "apt-get download",
        )
    }
}

/// A regex (apt-cache's) that matches exactly `name`: `+` and `.` are
/// common in package names.
fn exact_regex(name: &str) -> String {
    let escaped: String = name
        .chars()
        .flat_map(|c| {
            let meta = r".+*?()[]{}|^$\".contains(c);
            meta.then_some('\\').into_iter().chain(Some(c))
        })
        .collect();
    format!("^{escaped}$")
}

/// The vmlinuz and the `lib/modules/<release>` tree of an unpacked kernel:
/// `boot/vmlinuz-*` and `lib/modules` (Debian 11, 12), or
/// `usr/lib/modules/<release>/vmlinuz` beside its modules (unstable).
fn image_and_modules(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    for root in ["lib/modules", "usr/lib/modules"] {
        let modules_root = dir.join(root);
        let Ok(entries) = std::fs::read_dir(&modules_root) else {
            continue;
        };
        let Some(release) = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| p.is_dir())
        else {
            continue;
        };
        let image = match find_one(&dir.join("boot"), "vmlinuz-") {
            Ok(image) => image,
            Err(_) if release.join("vmlinuz").is_file() => release.join("vmlinuz"),
            Err(e) => return Err(e),
        };
        return Ok((image, release));
    }
    bail!(
        "no lib/modules/<release> or usr/lib/modules/<release> under {}",
        dir.display()
    )
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

/// Numeric runs of a package name, for a version-aware sort.
fn version_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// Downloads and unpacks a kernel package into `dir`. Newer Debian
/// kernels (unstable since 6.17 or so) ship the image package as a stub
/// that depends on `linux-binary-*` (the vmlinuz) and `linux-modules-*`:
/// those are unpacked into the same directory when the stub has no
/// `boot/`.
fn fetch(apt: &Apt, package: &str, dir: &Path) -> Result<()> {
    let _ = std::fs::remove_dir_all(dir);
    unpack(apt, package, dir)?;
    if image_and_modules(dir).is_err() {
        if let Some(rest) = package.strip_prefix("linux-image-") {
            for part in ["linux-binary-", "linux-modules-"] {
                unpack(apt, &format!("{part}{rest}"), dir)?;
            }
        }
    }
    Ok(())
}

/// `apt-get download` one package and `dpkg-deb -x` it into `dir`.
fn unpack(apt: &Apt, package: &str, dir: &Path) -> Result<()> {
    let parent = dir.parent().context("cache dir has no parent")?;
    std::fs::create_dir_all(parent)?;
    eprintln!(
        "xtask: downloading {package} (cached under {})",
        parent.display()
    );
    let dl = parent.join("download");
    let _ = std::fs::remove_dir_all(&dl);
    std::fs::create_dir_all(&dl)?;
    apt.download(package, &dl)?;
    let deb = find_one(&dl, package)?;
    host::run_status(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(dir),
        "dpkg-deb -x",
    )?;
    std::fs::remove_dir_all(&dl)?;
    Ok(())
}

/// The stamp of an unpacked `-dbg` package: vmlinux, System.map and the
/// debug files of [`MODULE_DEBUG`].
const DEBUG_STAMP: &str = ".dbg-unpacked-2";

/// The modules whose debug files (`.ko` with DWARF) are unpacked beside
/// the vmlinux, under `usr/lib/debug/lib/modules/<release>/`: 9p's, which
/// the guest loads for its root file system (source points in modules).
const MODULE_DEBUG: &[&str] = &[
    "kernel/fs/9p/9p.ko",
    "kernel/net/9p/9pnet.ko",
    "kernel/net/9p/9pnet_virtio.ko",
];

/// The vmlinux and System.map of `package` from its `-dbg` package (about
/// 0.9-1 GiB), and the debug files of [`MODULE_DEBUG`]: only those files
/// are unpacked, and tar stops reading once it has them (the vmlinux
/// comes first, the 9p modules about half way), which takes a minute at
/// most.
fn fetch_debug(apt: &Apt, package: &str, release: &str, dir: &Path) -> Result<()> {
    let dbg = format!(
        "{}-dbg",
        package.strip_suffix("-unsigned").unwrap_or(package)
    );
    let parent = dir.parent().context("cache dir has no parent")?;
    eprintln!("xtask: downloading {dbg} for its vmlinux, System.map and modules' debug files (the image package's System.map is a placeholder): the tests compare symbols, boundaries and source lines with them");
    let dl = parent.join("download-dbg");
    let _ = std::fs::remove_dir_all(&dl);
    std::fs::create_dir_all(&dl)?;
    apt.download(&dbg, &dl)?;
    let deb = find_one(&dl, &dbg)?;
    // Debian 11 and 12 put both files under usr/lib/debug/boot; unstable
    // keeps them in usr/lib/debug/lib/modules/<release>/ (boot/ holds a
    // link). Either way they end up as boot/vmlinux-<release> and
    // boot/System.map-<release>, where the tests look for them.
    let boot = "./usr/lib/debug/boot";
    let layouts = [
        [
            format!("{boot}/vmlinux-{release}"),
            format!("{boot}/System.map-{release}"),
        ],
        [
            format!("./usr/lib/debug/lib/modules/{release}/vmlinux"),
            format!("./usr/lib/debug/lib/modules/{release}/System.map"),
        ],
    ];
    let mut found = None;
    for wanted in &layouts {
        // dpkg-deb complains of a broken pipe when tar stops early; tar's
        // status is the pipeline's.
        // The modules' files are taken when there; tar's status (which
        // says some member was missing) is not what decides.
        let modules: Vec<String> = MODULE_DEBUG
            .iter()
            .map(|m| format!("./usr/lib/debug/lib/modules/{release}/{m}"))
            .collect();
        Command::new("sh")
            .arg("-c")
            .arg("deb=$1; dir=$2; shift 2; dpkg-deb --fsys-tarfile \"$deb\" 2>/dev/null | tar -x -C \"$dir\" --occurrence=1 \"$@\" 2>/dev/null")
            .arg("sh")
            .arg(&deb)
            .arg(dir)
            .args(wanted)
            .args(&modules)
            .status()
            .context("running dpkg-deb and tar")?;
        if wanted.iter().all(|w| dir.join(w).is_file()) {
            for m in &modules {
                if !dir.join(m).is_file() {
                    eprintln!(
                        "xtask: {dbg} has no {m}: source points in that module cannot be tested"
                    );
                }
            }
            found = Some(wanted);
            break;
        }
    }
    std::fs::remove_dir_all(&dl)?;
    let Some([vmlinux, system_map]) = found else {
        bail!(
            "{dbg} has neither {} nor {}",
            layouts[0].join(" and "),
            layouts[1].join(" and ")
        );
    };
    let boot = dir.join(boot);
    std::fs::create_dir_all(&boot)?;
    for (from, name) in [(vmlinux, "vmlinux"), (system_map, "System.map")] {
        let to = boot.join(format!("{name}-{release}"));
        if dir.join(from) != to {
            let _ = std::fs::remove_file(&to);
            std::fs::rename(dir.join(from), &to)
                .with_context(|| format!("moving {from} to {}", to.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names_become_exact_regexes() {
        assert_eq!(exact_regex("busybox-static"), "^busybox-static$");
        assert_eq!(
            exact_regex("linux-image-7.2.13+deb14-amd64"),
            r"^linux-image-7\.2\.13\+deb14-amd64$"
        );
    }

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
        assert!(series("4.19").is_err());
        for s in MATRIX.iter().chain(SMOKE_MATRIX) {
            assert!(series(s).is_ok(), "{s}");
        }
        for s in ARM64_MATRIX {
            assert!(arm64_series(s).is_ok(), "{s}");
        }
        assert!(arm64_series("5.10").is_err());
        assert_eq!(GuestArch::parse("aarch64").unwrap(), GuestArch::Arm64);
        assert!(GuestArch::parse("riscv64").is_err());
    }
}
