//! What the harness needs from the host: Debian packages, installed when
//! missing and running as root, or named precisely otherwise.

use anyhow::{bail, Context, Result};
use std::process::Command;

/// Debian packages the VM harness uses, with a file that shows each is there.
const NEEDED: &[(&str, &str)] = &[
    ("qemu-system-x86", "/usr/bin/qemu-system-x86_64"),
    ("busybox-static", "/usr/share/doc/busybox-static"),
    ("kmod", "/usr/sbin/depmod"),
    ("xz-utils", "/usr/bin/xz"),
];

/// Installs whatever of [`NEEDED`] (plus `extra`) is missing, never
/// removing an installed package: apt runs with `--no-remove`, after a
/// simulation that must show no removal. When the default release's
/// versions would need one (a `qemu-utils` from bookworm-backports breaks
/// bookworm's `qemu-system-common`, so apt would remove it to install
/// `qemu-system-x86`), the release of the installed package of the same
/// source is tried instead (`-t bookworm-backports`); if that does not do
/// either, nothing is installed and the message says what to do.
pub(crate) fn ensure_packages(extra: &[(&str, &str)]) -> Result<()> {
    let missing: Vec<&str> = NEEDED
        .iter()
        .chain(extra)
        .filter(|(_, probe)| !std::path::Path::new(probe).exists())
        .map(|(pkg, _)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let root = effective_uid() == 0;
    if !root {
        bail!(
            "missing host packages; install them with: sudo apt-get install --no-remove -y {}",
            missing.join(" ")
        );
    }
    eprintln!("xtask: installing {}", missing.join(" "));
    let mut update = Command::new("apt-get");
    update.args(["update", "-qq"]);
    run_status(&mut update, "apt-get update")?;
    let args = install_args(&missing)?;
    let mut install = apt_get();
    install
        .args(&args.options)
        .args([
            "install",
            "-y",
            "-qq",
            "--no-remove",
            "--no-install-recommends",
        ])
        .args(&args.packages);
    run_status(&mut install, "apt-get install --no-remove").with_context(|| {
        format!(
            "installing {} failed; no package was removed (--no-remove). Install them yourself, choosing versions that keep your installed packages, then rerun",
            missing.join(" ")
        )
    })
}

fn apt_get() -> Command {
    let mut c = Command::new("apt-get");
    c.env("DEBIAN_FRONTEND", "noninteractive")
        .env("LC_ALL", "C");
    c
}

/// What `apt-get install -s` says it would do.
#[derive(Clone)]
struct Simulation {
    ok: bool,
    /// Packages it would remove (`Remv` lines).
    removals: Vec<String>,
    /// Its complaints (`E:` lines, unmet dependencies).
    problems: Vec<String>,
}

fn simulate(args: &InstallArgs) -> Result<Simulation> {
    let out = apt_get()
        .args(&args.options)
        .args(["install", "-s", "--no-install-recommends"])
        .args(&args.packages)
        .output()
        .context("could not start apt-get install -s")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(parse_simulation(out.status.success(), &text))
}

fn parse_simulation(ok: bool, text: &str) -> Simulation {
    let removals = text
        .lines()
        .filter_map(|l| l.strip_prefix("Remv "))
        .filter_map(|r| r.split_whitespace().next())
        .map(str::to_string)
        .collect();
    let problems = text
        .lines()
        .filter(|l| l.starts_with("E: ") || l.contains(" but ") || l.contains("Breaks:"))
        .map(|l| l.trim().to_string())
        .collect();
    Simulation {
        ok,
        removals,
        problems,
    }
}

/// How to call `apt-get install`: apt options (a private sources list
/// and state, when a release the host does not list is needed) and the
/// arguments after `install`.
#[derive(Debug, Default)]
struct InstallArgs {
    options: Vec<String>,
    packages: Vec<String>,
}

/// The arguments for `apt-get install` that install `missing` without
/// removing anything, checked by simulation: the default release, else
/// each way below in turn, else an error saying what to do.
fn install_args(missing: &[&str]) -> Result<InstallArgs> {
    let plain: Vec<String> = missing.iter().map(|p| p.to_string()).collect();
    let first = simulate(&InstallArgs {
        options: Vec::new(),
        packages: plain.clone(),
    })?;
    if first.ok && first.removals.is_empty() {
        return Ok(InstallArgs {
            options: Vec::new(),
            packages: plain,
        });
    }
    // The release an installed sibling (same source package) came from,
    // the packages apt wanted to remove first.
    let mut siblings = installed_siblings(missing);
    siblings.sort_by_key(|(name, _, _)| !first.removals.contains(name));
    let attempt = Attempt {
        missing,
        plain: &plain,
        first: &first,
        siblings: &siblings,
    };
    if let Some(args) = attempt.via_a_siblings_release()? {
        return Ok(args);
    }
    if let Some(args) = attempt.via_unlisted_backports()? {
        return Ok(args);
    }
    if let Some(args) = attempt.with_backports_dependencies()? {
        return Ok(args);
    }
    bail!(
        "nothing was installed: apt would {} to install {}; {}",
        what_went_wrong(&first),
        missing.join(" "),
        attempt.advice()
    )
}

/// An installed package of the same source as a missing one: its name,
/// its version, and the releases apt lists it in.
type Sibling = (String, String, Vec<String>);

/// What an install that the default release cannot do has to go on.
struct Attempt<'a> {
    missing: &'a [&'a str],
    plain: &'a [String],
    /// The default release's simulation.
    first: &'a Simulation,
    siblings: &'a [Sibling],
}

impl Attempt<'_> {
    /// The release an installed sibling came from (`-t RELEASE`).
    fn via_a_siblings_release(&self) -> Result<Option<InstallArgs>> {
        for (pkg, version, suite) in self
            .siblings
            .iter()
            .flat_map(|(p, v, suites)| suites.iter().map(move |s| (p, v, s)))
        {
            let mut packages = vec!["-t".to_string(), suite.clone()];
            packages.extend(self.plain.iter().cloned());
            let args = InstallArgs {
                options: Vec::new(),
                packages,
            };
            let sim = simulate(&args)?;
            if sim.ok && sim.removals.is_empty() {
                eprintln!(
                    "xtask: installing {} from {suite}, the release of your {pkg} {version}: the default release's versions would {}",
                    self.missing.join(" "),
                    what_went_wrong(self.first)
                );
                return Ok(Some(args));
            }
        }
        Ok(None)
    }

    /// A backports version whose release the host's sources no longer
    /// list (a machine image built with backports, its sources reset
    /// since): that release is added to a private copy of the sources,
    /// with its own package lists, for this install only; the host's
    /// sources and lists are not changed.
    fn via_unlisted_backports(&self) -> Result<Option<InstallArgs>> {
        for (pkg, version, _) in self.siblings.iter().filter(|(_, _, s)| s.is_empty()) {
            let Some(suite) = backports_suite(version, &os_codename()) else {
                continue;
            };
            let options = private_sources_with(&suite)?;
            let mut packages = vec!["-t".to_string(), suite.clone()];
            packages.extend(self.plain.iter().cloned());
            let args = InstallArgs { options, packages };
            let sim = simulate(&args)?;
            if sim.ok && sim.removals.is_empty() {
                eprintln!(
                    "xtask: installing {} from {suite}, the release of your {pkg} {version} (not in your apt sources: added for this install only, in a private sources list under {}): the default release's versions would {}",
                    self.missing.join(" "),
                    host_apt_dir().display(),
                    what_went_wrong(self.first)
                );
                return Ok(Some(args));
            }
        }
        Ok(None)
    }

    /// An installed backports library holds a dependency back
    /// (bookworm's libdw1 needs bookworm's libelf1; the host has
    /// backports' libelf1, which QEMU from backports may have brought):
    /// the packages that say so come from that backports release too,
    /// each named with its release (`libdw1/bookworm-backports`), while
    /// what was asked for stays at the default release.
    fn with_backports_dependencies(&self) -> Result<Option<InstallArgs>> {
        let codename = os_codename();
        let mut pinned: Vec<String> = Vec::new();
        let mut options: Option<Vec<String>> = None;
        let mut sim = self.first.clone();
        for _ in 0..4 {
            let held = held_by_backports(&sim.problems, &codename);
            let new: Vec<String> = held
                .iter()
                .map(|(pkg, suite)| format!("{pkg}/{suite}"))
                .filter(|p| !pinned.contains(p))
                .collect();
            let Some((_, suite)) = held.first() else {
                break;
            };
            if new.is_empty() {
                break;
            }
            if options.is_none() {
                options = Some(private_sources_with(suite)?);
            }
            pinned.extend(new);
            let args = InstallArgs {
                options: options.clone().unwrap_or_default(),
                packages: self.plain.iter().chain(&pinned).cloned().collect(),
            };
            sim = simulate(&args)?;
            if sim.ok && sim.removals.is_empty() {
                eprintln!(
                    "xtask: installing {} with {} (your installed backports packages need them; {suite} added for this install only, in a private sources list under {}): the default release's versions would {}",
                    self.missing.join(" "),
                    pinned.join(" "),
                    host_apt_dir().display(),
                    what_went_wrong(self.first)
                );
                return Ok(Some(args));
            }
        }
        Ok(None)
    }

    /// What to do when no way worked.
    fn advice(&self) -> String {
        let missing = self.missing.join(" ");
        match self.siblings.first() {
            Some((pkg, version, suites)) if !suites.is_empty() => format!(
                "your {pkg} {version} comes from {}: install the same release's packages yourself (sudo apt-get install --no-remove -t {} {missing}), or make your {pkg} match the default release, then rerun",
                suites.join(", "),
                suites[0],
            ),
            Some((pkg, version, _)) => format!(
                "your {pkg} {version} comes from no release apt lists (a .deb installed by hand, or a release removed from sources.list): add that release back and install its {missing} (apt-get install --no-remove -t RELEASE ...), or make your {pkg} match the default release, then rerun",
            ),
            None => format!(
                "install them yourself, choosing versions that keep your installed packages (sudo apt-get install --no-remove {missing}), then rerun",
            ),
        }
    }
}

fn what_went_wrong(sim: &Simulation) -> String {
    if !sim.removals.is_empty() {
        format!("remove your installed {}", sim.removals.join(", "))
    } else {
        format!("fail ({})", sim.problems.join("; "))
    }
}

/// Installed packages built from the same source as one of `missing` (and
/// not among them), with their version and the releases (suites) that
/// version comes from.
fn installed_siblings(missing: &[&str]) -> Vec<Sibling> {
    let query = Command::new("dpkg-query")
        .args([
            "-W",
            "-f",
            "${db:Status-Abbrev}\t${Package}\t${source:Package}\t${Version}\n",
        ])
        .output();
    let Ok(query) = query else {
        return Vec::new();
    };
    let installed = String::from_utf8_lossy(&query.stdout).into_owned();
    let mut found = Vec::new();
    for pkg in missing {
        let show = Command::new("apt-cache")
            .args(["show", "--no-all-versions", pkg])
            .env("LC_ALL", "C")
            .output();
        let Ok(show) = show else { continue };
        let source = source_of(pkg, &String::from_utf8_lossy(&show.stdout));
        for line in installed.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let [status, name, src, version] = f[..] else {
                continue;
            };
            if !status.starts_with("ii")
                || src != source
                || missing.contains(&name)
                || found.iter().any(|(n, _, _)| n == name)
            {
                continue;
            }
            let policy = Command::new("apt-cache")
                .args(["policy", name])
                .env("LC_ALL", "C")
                .output();
            let Ok(policy) = policy else { continue };
            let suites = suites_of(&String::from_utf8_lossy(&policy.stdout), version);
            found.push((name.to_string(), version.to_string(), suites));
        }
    }
    found
}

/// The source package of `pkg` in `apt-cache show` output (`Source: qemu
/// (1:7.2...)`), or `pkg` itself when the field is absent.
fn source_of(pkg: &str, show: &str) -> String {
    show.lines()
        .find_map(|l| l.strip_prefix("Source: "))
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or(pkg)
        .to_string()
}

/// The suites (`bookworm-backports`) `apt-cache policy` lists for `version`.
fn suites_of(policy: &str, version: &str) -> Vec<String> {
    let mut current: Option<&str> = None;
    let mut suites = Vec::new();
    for line in policy.lines() {
        let indent = line.len() - line.trim_start().len();
        let words: Vec<&str> = line.split_whitespace().collect();
        if line.trim_start().starts_with("***") {
            current = words.get(1).copied();
        } else if indent == 5 {
            current = words.first().copied();
        } else if indent >= 8 && current == Some(version) {
            if let (Some(url), Some(dist)) = (words.get(1), words.get(2)) {
                if url.contains("://") {
                    let suite = dist.split('/').next().unwrap_or(dist).to_string();
                    if !suites.contains(&suite) {
                        suites.push(suite);
                    }
                }
            }
        }
    }
    suites
}

/// The backports release a `~bpoNN` version comes from, named after the
/// host's release (`1:10.0.2+ds-2+deb13u1~bpo12+1` on bookworm:
/// `bookworm-backports`); `None` for other versions.
fn backports_suite(version: &str, codename: &str) -> Option<String> {
    let (_, after) = version.split_once("~bpo")?;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    (!digits.is_empty() && !codename.is_empty()).then(|| format!("{codename}-backports"))
}

/// Packages whose dependency apt cannot meet because a backports
/// version is installed (`libdw1 : Depends: libelf1 (= 0.188-2.1) but
/// 0.192-4~bpo12+1 is to be installed`), with that backports release.
fn held_by_backports(problems: &[String], codename: &str) -> Vec<(String, String)> {
    let mut held: Vec<(String, String)> = Vec::new();
    for line in problems {
        let Some((pkg, rest)) = line.split_once(" : ") else {
            continue;
        };
        let Some((_, after_but)) = rest.split_once(" but ") else {
            continue;
        };
        let version = after_but.split_whitespace().next().unwrap_or("");
        let pkg = pkg.trim().to_string();
        if let Some(suite) = backports_suite(version, codename) {
            if !held.iter().any(|(p, _)| *p == pkg) {
                held.push((pkg, suite));
            }
        }
    }
    held
}

/// `VERSION_CODENAME` of /etc/os-release (`bookworm`), or "".
fn os_codename() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_default()
}

/// Where the private apt sources and lists of [`private_sources_with`] live.
fn host_apt_dir() -> std::path::PathBuf {
    crate::vm_cache().join("host-apt")
}

/// apt options for a private copy of the host's sources plus `suite` of
/// Debian's mirror, with private package lists and cache, after an
/// `apt-get update` of them. The host's sources, lists and cache are left
/// as they are; dpkg's database (what is installed) is the host's.
fn private_sources_with(suite: &str) -> Result<Vec<String>> {
    let dir = host_apt_dir();
    let parts = dir.join("sources.list.d");
    if parts.exists() {
        std::fs::remove_dir_all(&parts).with_context(|| format!("clearing {}", parts.display()))?;
    }
    for d in [
        parts.clone(),
        dir.join("lists/partial"),
        dir.join("cache/archives/partial"),
    ] {
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    }
    if let Ok(entries) = std::fs::read_dir("/etc/apt/sources.list.d") {
        for e in entries.flatten() {
            let name = e.file_name();
            let n = name.to_string_lossy();
            if n.ends_with(".list") || n.ends_with(".sources") {
                std::fs::copy(e.path(), parts.join(&name))
                    .with_context(|| format!("copying {}", e.path().display()))?;
            }
        }
    }
    let keyring = "/usr/share/keyrings/debian-archive-keyring.gpg";
    std::fs::write(
        parts.join("kprobe-perf-xtask-backports.sources"),
        format!("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: {suite}\nComponents: main\nSigned-By: {keyring}\n"),
    )
    .context("writing the private backports source")?;
    let options = vec![
        "-o".to_string(),
        format!("Dir::Etc::SourceParts={}", parts.display()),
        "-o".to_string(),
        format!("Dir::State::Lists={}", dir.join("lists").display()),
        "-o".to_string(),
        format!("Dir::Cache={}", dir.join("cache").display()),
    ];
    let mut update = apt_get();
    update.args(&options).args(["update", "-qq"]);
    run_status(
        &mut update,
        &format!("apt-get update (with {suite} added privately)"),
    )?;
    Ok(options)
}

fn effective_uid() -> u32 {
    // /proc/self/status has "Uid: real effective saved fs".
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2))
                .and_then(|u| u.parse().ok())
        })
        .unwrap_or(u32::MAX)
}

/// Runs a command to completion, failing with its name if it fails.
pub(crate) fn run_status(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("could not start {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What apt-cache policy printed on a bookworm host with qemu-utils
    /// from backports.
    const POLICY: &str = "qemu-utils:
  Installed: 1:10.0.2+ds-2+deb13u1~bpo12+1
  Candidate: 1:10.0.2+ds-2+deb13u1~bpo12+1
  Version table:
 *** 1:10.0.2+ds-2+deb13u1~bpo12+1 100
        100 http://deb.debian.org/debian bookworm-backports/main amd64 Packages
        100 /var/lib/dpkg/status
     1:7.2+dfsg-7+deb12u18+b3 500
        500 http://deb.debian.org/debian bookworm/main amd64 Packages
     1:7.2+dfsg-7+deb12u15 500
        500 http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
";

    #[test]
    fn the_installed_versions_release_is_found() {
        assert_eq!(
            suites_of(POLICY, "1:10.0.2+ds-2+deb13u1~bpo12+1"),
            ["bookworm-backports"]
        );
        assert_eq!(
            suites_of(POLICY, "1:7.2+dfsg-7+deb12u15"),
            ["bookworm-security"]
        );
        assert!(suites_of(POLICY, "9:9").is_empty());
    }

    #[test]
    fn removals_and_complaints_are_read() {
        let sim = parse_simulation(
            true,
            "Remv qemu-utils [1:10.0.2+ds-2+deb13u1~bpo12+1]\nInst qemu-system-x86 (1:7.2)\n",
        );
        assert_eq!(sim.removals, ["qemu-utils"]);
        assert_eq!(what_went_wrong(&sim), "remove your installed qemu-utils");
        let sim = parse_simulation(
            false,
            " qemu-utils : Breaks: qemu-system-common (< 1:8.0+dfsg-5~) but 1:7.2+dfsg-7+deb12u18+b3 is to be installed\nE: Error, pkgProblemResolver::Resolve generated breaks\n",
        );
        assert!(sim.removals.is_empty());
        assert_eq!(sim.problems.len(), 2);
    }

    #[test]
    fn backports_versions_name_their_release() {
        assert_eq!(
            backports_suite("1:10.0.2+ds-2+deb13u1~bpo12+1", "bookworm").as_deref(),
            Some("bookworm-backports")
        );
        assert_eq!(
            backports_suite("1:7.2+dfsg-7+deb12u18+b3", "bookworm"),
            None
        );
        assert_eq!(backports_suite("1.0~bpo", "bookworm"), None);
        assert_eq!(backports_suite("1.0~bpo12+1", ""), None);
    }

    #[test]
    fn dependents_held_back_by_a_backports_library_are_named() {
        let sim = parse_simulation(
            false,
            "The following packages have unmet dependencies:\n libdw1 : Depends: libelf1 (= 0.188-2.1) but 0.192-4~bpo12+1 is to be installed\n qemu-utils : Breaks: qemu-system-common (< 1:8.0+dfsg-5~) but 1:7.2+dfsg-7+deb12u18+b3 is to be installed\nE: Unable to correct problems, you have held broken packages.\n",
        );
        assert_eq!(
            held_by_backports(&sim.problems, "bookworm"),
            [("libdw1".to_string(), "bookworm-backports".to_string())]
        );
    }

    #[test]
    fn source_names_come_from_apt_cache_show() {
        assert_eq!(
            source_of(
                "qemu-system-x86",
                "Package: qemu-system-x86\nSource: qemu (1:7.2+dfsg-7+deb12u18)\n"
            ),
            "qemu"
        );
        assert_eq!(source_of("kmod", "Package: kmod\nVersion: 30\n"), "kmod");
    }
}
