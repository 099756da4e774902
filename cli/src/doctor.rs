//! The checks `kprobe-perf info` starts with: can this kernel, and this
//! process, do what kprobe-perf is asked? Each check is `ok` or
//! `missing`, and a missing one names its fix (a command to run or the
//! kernel configuration to build with).

use std::io::Write;
use std::path::{Path, PathBuf};

/// One answer of the doctor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Check {
    /// What is checked: "kprobe PMU", "BTF" ...
    pub what: &'static str,
    /// Present and usable.
    pub ok: bool,
    /// What was found (or not), and where.
    pub detail: String,
    /// For a missing piece: what to do.
    pub fix: Option<String>,
}

impl Check {
    fn ok(what: &'static str, detail: String) -> Check {
        Check {
            what,
            ok: true,
            detail,
            fix: None,
        }
    }

    fn missing(what: &'static str, detail: String, fix: String) -> Check {
        Check {
            what,
            ok: false,
            detail,
            fix: Some(fix),
        }
    }
}

/// The perf event sources (PMUs) of dynamic probes.
const PMU_DIR: &str = "/sys/bus/event_source/devices";
/// The line of the tracefs README that announces fprobe events (`f:`).
const FPROBE_FORMAT: &str = "f[:[<group>/][<event>]]";

/// Capability bit numbers (linux/capability.h).
const CAP_SYS_ADMIN: u32 = 21;
const CAP_SYSLOG: u32 = 34;
const CAP_PERFMON: u32 = 38;

/// Every check, in the order printed.
pub(crate) fn checks(release: &str) -> Vec<Check> {
    let config = KernelConfig::load(release);
    let mut out = vec![
        pmu_check(
            "kprobe PMU",
            "kprobe",
            &["CONFIG_KPROBES", "CONFIG_KPROBE_EVENTS"],
            &config,
        ),
        pmu_check(
            "uprobe PMU",
            "uprobe",
            &["CONFIG_UPROBES", "CONFIG_UPROBE_EVENTS"],
            &config,
        ),
    ];
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let tracefs = tracefs_mount(&mounts);
    out.push(tracefs_check(tracefs.as_deref()));
    out.push(fprobe_check(tracefs.as_deref(), &config));
    out.push(btf_check(&config));
    let caps = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| cap_eff(&s));
    out.push(kptr_check(caps));
    out.push(paranoid_check(caps));
    out.push(lockdown_check());
    out.push(caps_check(caps));
    out
}

/// Writes the checks: `  ok       WHAT: DETAIL`, or `  missing  ...`
/// followed by an indented `fix: ...` line.
pub(crate) fn print(out: &mut impl Write, checks: &[Check]) -> std::io::Result<()> {
    let missing = checks.iter().filter(|c| !c.ok).count();
    writeln!(
        out,
        "checks: {} ok, {missing} missing{}",
        checks.len() - missing,
        if missing > 0 {
            " (each with its fix)"
        } else {
            ""
        }
    )?;
    for c in checks {
        let mark = if c.ok { "ok" } else { "missing" };
        writeln!(out, "  {mark:<8} {}: {}", c.what, c.detail)?;
        if let Some(fix) = &c.fix {
            writeln!(out, "           fix: {fix}")?;
        }
    }
    Ok(())
}

/// The running kernel's build configuration, when a copy is readable
/// (`/boot/config-RELEASE`, as Debian installs it).
struct KernelConfig {
    path: PathBuf,
    text: Option<String>,
}

impl KernelConfig {
    fn load(release: &str) -> KernelConfig {
        let path = PathBuf::from(format!("/boot/config-{release}"));
        let text = std::fs::read_to_string(&path).ok();
        KernelConfig { path, text }
    }

    /// What the configuration says of OPTION, e.g. "CONFIG_KPROBES is not
    /// set in /boot/config-6.1.0-50-amd64", or nothing when unknown.
    fn says(&self, option: &str) -> Option<String> {
        let text = self.text.as_deref()?;
        let value = config_value(text, option);
        Some(match value {
            Some(v) => format!("{option}={v} in {}", self.path.display()),
            None => format!("{option} is not set in {}", self.path.display()),
        })
    }

    /// " (CONFIG_A is not set in ...; CONFIG_B=y in ...)" for the options
    /// a missing piece depends on, or "" when no configuration is readable.
    fn note(&self, options: &[&str]) -> String {
        let said: Vec<String> = options.iter().filter_map(|o| self.says(o)).collect();
        if said.is_empty() {
            String::new()
        } else {
            format!(" ({})", said.join("; "))
        }
    }
}

/// `y`, `m` or a string for `OPTION=...`, `None` for `# OPTION is not set`
/// or no line at all.
fn config_value(text: &str, option: &str) -> Option<String> {
    text.lines().find_map(|l| {
        l.strip_prefix(option)
            .and_then(|rest| rest.strip_prefix('='))
            .map(str::to_string)
    })
}

fn pmu_check(what: &'static str, pmu: &str, options: &[&str], config: &KernelConfig) -> Check {
    let dir = Path::new(PMU_DIR).join(pmu);
    match std::fs::read_to_string(dir.join("type")) {
        Ok(t) => Check::ok(what, format!("{} (type {})", dir.display(), t.trim())),
        Err(e) => Check::missing(
            what,
            format!(
                "{} {}{}",
                dir.display(),
                absent_or(&e),
                config.note(options)
            ),
            format!(
                "run a kernel built with {}=y (Linux 4.17 or later has this PMU)",
                options.join("=y and ")
            ),
        ),
    }
}

/// "is absent" for a file that does not exist, else the error.
fn absent_or(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound {
        "is absent".to_string()
    } else {
        format!("is unreadable: {e}")
    }
}

/// Where tracefs is mounted, from /proc/self/mounts (the first mount of
/// type tracefs).
fn tracefs_mount(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, kind) = (f.next()?, f.next()?, f.next()?);
        (kind == "tracefs").then(|| PathBuf::from(unescape_mount(dir)))
    })
}

/// /proc/self/mounts writes spaces and tabs in paths as octal escapes.
fn unescape_mount(path: &str) -> String {
    path.replace("\\040", " ").replace("\\011", "\t")
}

fn tracefs_check(tracefs: Option<&Path>) -> Check {
    let what = "tracefs";
    let Some(root) = tracefs else {
        if kprobe_perf_engine::tracefs::Tracefs::mount_plan()
            == kprobe_perf_engine::tracefs::MountPlan::WouldMount
        {
            return Check::ok(
                what,
                format!("not mounted; a probe that needs it mounts it at {} (as perf does) and leaves it mounted", kprobe_perf_engine::tracefs::TRACING_MOUNT),
            );
        }
        return Check::missing(
            what,
            "not mounted (no tracefs line in /proc/self/mounts), and this process may not mount it"
                .to_string(),
            "mount -t tracefs nodev /sys/kernel/tracing (needs CONFIG_FTRACE=y)".to_string(),
        );
    };
    let files = ["kprobe_events", "uprobe_events", "dynamic_events"];
    let (present, absent): (Vec<&str>, Vec<&str>) =
        files.iter().partition(|f| root.join(f).exists());
    let detail = format!(
        "mounted at {}; {}{}",
        root.display(),
        if present.is_empty() {
            "none of kprobe_events, uprobe_events, dynamic_events".to_string()
        } else {
            present.join(", ")
        },
        if absent.is_empty() || present.is_empty() {
            String::new()
        } else {
            format!("; no {}", absent.join(", "))
        }
    );
    if absent.is_empty() {
        return Check::ok(what, detail);
    }
    let options: Vec<&str> = absent
        .iter()
        .map(|f| match *f {
            "kprobe_events" => "CONFIG_KPROBE_EVENTS=y",
            "uprobe_events" => "CONFIG_UPROBE_EVENTS=y",
            _ => "CONFIG_KPROBE_EVENTS=y or CONFIG_UPROBE_EVENTS=y (for dynamic_events)",
        })
        .collect();
    Check::missing(
        what,
        detail,
        format!(
            "run a kernel built with {} (--backend tracefs, and kernel probes that fetch memory, need kprobe_events and dynamic_events)",
            options.join(", ")
        ),
    )
}

/// Whether the tracefs README lists the fprobe event format (`f:`), as
/// kernels with CONFIG_FPROBE_EVENTS (6.5 and later) do.
pub(crate) fn readme_has_fprobe(readme: &str) -> bool {
    readme
        .lines()
        .any(|l| l.trim_start().contains(FPROBE_FORMAT))
}

fn fprobe_check(tracefs: Option<&Path>, config: &KernelConfig) -> Check {
    let what = "fprobe events";
    let fix = "run a kernel built with CONFIG_FPROBE_EVENTS=y (Linux 6.5 or later)".to_string();
    let Some(root) = tracefs else {
        return Check::missing(
            what,
            "unknown: tracefs is not mounted".to_string(),
            format!("mount tracefs (mount -t tracefs nodev /sys/kernel/tracing) to read its README; then, if still missing, {fix}"),
        );
    };
    let readme = root.join("README");
    match std::fs::read_to_string(&readme) {
        Ok(text) if readme_has_fprobe(&text) => Check::ok(
            what,
            format!(
                "{} lists the f[:[<group>/][<event>]] format",
                readme.display()
            ),
        ),
        Ok(_) => Check::missing(
            what,
            format!(
                "{} has no f[:[<group>/][<event>]] format{}",
                readme.display(),
                config.note(&["CONFIG_FPROBE_EVENTS"])
            ),
            fix,
        ),
        Err(e) => Check::missing(what, format!("{} unreadable: {e}", readme.display()), fix),
    }
}

fn btf_check(config: &KernelConfig) -> Check {
    let what = "BTF";
    let path = kprobe_perf_engine::kernel::VMLINUX_BTF;
    match std::fs::metadata(path) {
        Ok(md) => Check::ok(
            what,
            format!("{path} ({} bytes): arguments can be named", md.len()),
        ),
        Err(e) => Check::missing(
            what,
            format!(
                "{path} {}{}; arguments must be given as registers or $argN",
                absent_or(&e),
                config.note(&["CONFIG_DEBUG_INFO_BTF"])
            ),
            "run a kernel built with CONFIG_DEBUG_INFO_BTF=y (and sysfs mounted)".to_string(),
        ),
    }
}

/// CapEff from /proc/self/status, as a bit mask.
pub(crate) fn cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

fn has(caps: Option<u64>, cap: u32) -> bool {
    caps.is_some_and(|c| c & (1u64 << cap) != 0)
}

fn read_sysctl(name: &str) -> Option<i64> {
    std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

fn kptr_check(caps: Option<u64>) -> Check {
    let what = "kptr_restrict";
    let Some(v) = read_sysctl("kptr_restrict") else {
        return Check::missing(
            what,
            "/proc/sys/kernel/kptr_restrict unreadable".to_string(),
            "mount /proc".to_string(),
        );
    };
    let syslog = has(caps, CAP_SYSLOG);
    let visible = match v {
        0 => true,
        1 => syslog,
        _ => false,
    };
    let detail = format!(
        "kernel.kptr_restrict = {v}: /proc/kallsyms shows addresses to this process: {}",
        if visible { "yes" } else { "no" }
    );
    if visible {
        Check::ok(what, detail)
    } else if v == 1 {
        Check::missing(
            what,
            detail,
            "run as root (CAP_SYSLOG), or sysctl -w kernel.kptr_restrict=0".to_string(),
        )
    } else {
        Check::missing(
            what,
            detail,
            "sysctl -w kernel.kptr_restrict=1 (then run as root) or =0: at 2 no process sees addresses"
                .to_string(),
        )
    }
}

fn paranoid_check(caps: Option<u64>) -> Check {
    let what = "perf_event_paranoid";
    let Some(v) = read_sysctl("perf_event_paranoid") else {
        return Check::missing(
            what,
            "/proc/sys/kernel/perf_event_paranoid is absent".to_string(),
            "run a kernel built with CONFIG_PERF_EVENTS=y".to_string(),
        );
    };
    // CAP_SYS_ADMIN passes every level; CAP_PERFMON not Debian's level 3
    // (its patch asks for CAP_SYS_ADMIN there: README, Requirements).
    let privileged = has(caps, CAP_SYS_ADMIN) || (has(caps, CAP_PERFMON) && v <= 2);
    if privileged || v <= -1 {
        Check::ok(
            what,
            format!(
                "kernel.perf_event_paranoid = {v}{}",
                if privileged {
                    " (not a limit for this process: it holds CAP_SYS_ADMIN, or CAP_PERFMON at level 2 or below)"
                } else {
                    ""
                }
            ),
        )
    } else {
        Check::missing(
            what,
            format!(
                "kernel.perf_event_paranoid = {v} limits this process (it holds neither CAP_SYS_ADMIN nor, at this level, a CAP_PERFMON that would do)"
            ),
            "see Capabilities below; or sysctl -w kernel.perf_event_paranoid=-1".to_string(),
        )
    }
}

/// The active lockdown mode: the bracketed word of
/// `none [integrity] confidentiality`.
pub(crate) fn lockdown_mode(text: &str) -> Option<&str> {
    let start = text.find('[')? + 1;
    let len = text[start..].find(']')?;
    Some(&text[start..start + len])
}

fn lockdown_check() -> Check {
    let what = "lockdown";
    let path = "/sys/kernel/security/lockdown";
    match std::fs::read_to_string(path) {
        // securityfs is mounted (it lists the LSMs) but has no lockdown.
        Err(_) if Path::new("/sys/kernel/security/lsm").exists() => Check::ok(
            what,
            format!("{path} is absent: this kernel has no lockdown LSM"),
        ),
        Err(_) => Check::missing(
            what,
            "unknown: securityfs is not mounted at /sys/kernel/security".to_string(),
            "mount -t securityfs securityfs /sys/kernel/security (then run info again to read the lockdown mode)".to_string(),
        ),
        Ok(text) => match lockdown_mode(&text) {
            Some("confidentiality") => Check::missing(
                what,
                format!(
                    "{path}: confidentiality: the kernel refuses kprobes, register samples (PERF_SAMPLE_REGS_INTR), tracefs and /proc/kcore"
                ),
                "boot with lockdown=integrity or none on the kernel command line (it cannot be lowered at run time; with Secure Boot, turn it off in the firmware or sign a kernel without lockdown)".to_string(),
            ),
            Some("integrity") => Check::ok(
                what,
                format!("{path}: integrity (probes allowed; only confidentiality refuses them)"),
            ),
            Some(mode) => Check::ok(what, format!("{path}: {mode}")),
            None => Check::ok(what, format!("{path}: {}", text.trim())),
        },
    }
}

fn caps_check(caps: Option<u64>) -> Check {
    let what = "capabilities";
    let Some(c) = caps else {
        return Check::missing(
            what,
            "no CapEff line in /proc/self/status".to_string(),
            "mount /proc".to_string(),
        );
    };
    let held: Vec<&str> = [
        (CAP_PERFMON, "CAP_PERFMON"),
        (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
        (CAP_SYSLOG, "CAP_SYSLOG"),
    ]
    .iter()
    .filter(|(bit, _)| has(caps, *bit))
    .map(|(_, name)| *name)
    .collect();
    let detail = format!(
        "CapEff {c:016x}: {}",
        if held.is_empty() {
            "none of CAP_PERFMON, CAP_SYS_ADMIN, CAP_SYSLOG".to_string()
        } else {
            held.join(", ")
        }
    );
    if has(caps, CAP_PERFMON) || has(caps, CAP_SYS_ADMIN) {
        Check::ok(what, detail)
    } else {
        Check::missing(
            what,
            format!("{detail} (kprobes need CAP_SYS_ADMIN, or CAP_PERFMON where perf_event_paranoid is 2 or below; uprobes need CAP_SYS_ADMIN on kernels with the 6.16 change and its stable backports)"),
            "run as root, or grant the binary a capability as the README's Requirements say for your kernel".to_string(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fprobe_line_of_the_6_12_readme() {
        let with = "\t   Format: p[:[<group>/][<event>]] <place> [<args>]\n\
                    \t           f[:[<group>/][<event>]] <func-name>[%return] [<args>]\n";
        let without = "\t   Format: p[:[<group>/][<event>]] <place> [<args>]\n\
                       \t           r[maxactive][:[<group>/][<event>]] <place> [<args>]\n";
        assert!(readme_has_fprobe(with));
        assert!(!readme_has_fprobe(without));
    }

    #[test]
    fn cap_eff_bits() {
        let status = "Name:\tx\nCapPrm:\t0000000000000000\nCapEff:\t0000004000000000\n";
        let c = cap_eff(status);
        assert_eq!(c, Some(1 << 38));
        assert!(has(c, CAP_PERFMON));
        assert!(!has(c, CAP_SYS_ADMIN));
        assert_eq!(cap_eff("Name:\tx\n"), None);
    }

    #[test]
    fn lockdown_modes() {
        assert_eq!(
            lockdown_mode("[none] integrity confidentiality\n"),
            Some("none")
        );
        assert_eq!(
            lockdown_mode("none integrity [confidentiality]\n"),
            Some("confidentiality")
        );
        assert_eq!(lockdown_mode("none"), None);
    }

    #[test]
    fn tracefs_from_mounts() {
        let mounts = "proc /proc proc rw 0 0\n\
                      nodev /sys/kernel/debug/tra\\040ce tracefs rw 0 0\n\
                      nodev /sys/kernel/tracing tracefs rw 0 0\n";
        assert_eq!(
            tracefs_mount(mounts),
            Some(PathBuf::from("/sys/kernel/debug/tra ce"))
        );
        assert_eq!(tracefs_mount("proc /proc proc rw 0 0\n"), None);
    }

    #[test]
    fn config_values() {
        let text =
            "CONFIG_KPROBES=y\n# CONFIG_FPROBE_EVENTS is not set\nCONFIG_KPROBES_ON_FTRACE=y\n";
        assert_eq!(config_value(text, "CONFIG_KPROBES"), Some("y".into()));
        assert_eq!(config_value(text, "CONFIG_FPROBE_EVENTS"), None);
        assert_eq!(config_value(text, "CONFIG_KPROBE"), None);
    }
}
