//! The exact advice for each errno perf_event_open returns, per kind of
//! probe, and for each permission situation.

use super::*;

const T: &str = "do_sys_openat2+4";
const U: &str = "/bin/x:0x1139";

#[test]
fn every_kprobe_errno_has_its_own_advice() {
    let cases: &[(i32, &str)] = &[
        (libc::ENOENT, "the kernel found no symbol or address do_sys_openat2+4 (or its module is not loaded)"),
        (libc::EADDRNOTAVAIL, "do_sys_openat2+4 names several symbols; give the address of the one you mean"),
        (libc::EILSEQ, "do_sys_openat2+4 is not on an instruction boundary, or that instruction cannot be probed"),
        (libc::EINVAL, "the kernel refuses to probe do_sys_openat2+4: it is blacklisted (NOKPROBE, noinstr, entry code), notrace, a jump-label/static-call site, or a return probe not at a function entry"),
        (libc::EOPNOTSUPP, "kprobes cannot handle the instruction at do_sys_openat2+4; pick another offset"),
        (libc::E2BIG, "the symbol name is longer than the kernel's KSYM_NAME_LEN"),
        (libc::EMFILE, "out of file descriptors: each probe needs one per CPU; raise the limit with `ulimit -n`"),
        (libc::ENODEV, "the kprobe PMU rejected the event type"),
        (libc::EBUSY, "the kernel refused the probe"),
        (524, "the kernel refused the probe"),
        (libc::ENOEXEC, "the kernel refused the probe"),
    ];
    for &(errno, want) in cases {
        assert_eq!(explain_kprobe_errno(errno, T), want, "errno {errno}");
        assert_eq!(
            explain_open_errno(errno, T, OpenedAs::Kprobe),
            want,
            "errno {errno}"
        );
        // A tracefs-defined probe fails for the same reasons a kprobe does.
        assert_eq!(
            explain_open_errno(errno, T, OpenedAs::Tracepoint),
            want,
            "errno {errno}"
        );
    }
}

#[test]
fn every_uprobe_errno_has_its_own_advice() {
    let path_max = "the path of /bin/x:0x1139 is longer than the kernel's PATH_MAX (4096)";
    let cases: &[(i32, &str)] = &[
        (524, "the uprobe layer refuses the instruction at /bin/x:0x1139 (ENOTSUPP): an int3, int n, hlt, in/out or far branch, a segment or lock prefix, a 66-prefixed branch, or a VEX instruction whose opcode byte the kernel's table refuses (arch_uprobe_analyze_insn); pick another instruction"),
        (libc::ENOEXEC, "the kernel cannot decode an instruction at /bin/x:0x1139 (ENOEXEC): the offset is probably not an instruction start, or not code"),
        (libc::EINVAL, "the kernel refuses the uprobe at /bin/x:0x1139: the offset is beyond the end of the file, misaligned (arm64: 4 bytes), the path is not a regular file, or another uprobe at that offset uses a different reference-counter (USDT semaphore) offset"),
        (libc::ENOENT, "no such file for the uprobe at /bin/x:0x1139: the path must exist when the probe is opened"),
        (libc::ENOTDIR, "a component of the path of /bin/x:0x1139 is not a directory"),
        (libc::ELOOP, "too many symbolic links in the path of /bin/x:0x1139"),
        (libc::ENAMETOOLONG, path_max),
        (libc::E2BIG, path_max),
        (libc::EIO, "the kernel could not read the instruction at /bin/x:0x1139 from the file (or its file system cannot hold uprobes)"),
        (libc::EEXIST, "a uprobe event of the same name already exists for /bin/x:0x1139; remove it or name this probe differently"),
        (libc::ENOMEM, "the kernel is out of memory for the uprobe"),
        (libc::EMFILE, "out of file descriptors: each probe needs one per CPU; raise the limit with `ulimit -n`"),
        (libc::EOPNOTSUPP, "the uprobe PMU refused the event's attributes (branch-stack sampling or extended registers)"),
        (libc::ENODEV, "the uprobe PMU rejected the event type"),
        (libc::EBUSY, "the kernel refused the uprobe"),
    ];
    for &(errno, want) in cases {
        assert_eq!(explain_uprobe_errno(errno, U), want, "errno {errno}");
        assert_eq!(
            explain_open_errno(errno, U, OpenedAs::Uprobe),
            want,
            "errno {errno}"
        );
    }
}

#[test]
fn eacces_and_eperm_are_explained_from_this_process_s_privileges() {
    for as_ in [OpenedAs::Kprobe, OpenedAs::Uprobe, OpenedAs::Tracepoint] {
        let want = explain_permission(as_, Privilege::current(), &this_exe());
        for errno in [libc::EACCES, libc::EPERM] {
            assert_eq!(explain_open_errno(errno, T, as_), want, "{as_:?} {errno}");
        }
    }
}

fn permission(as_: OpenedAs, perfmon: bool, sys_admin: bool, paranoid: Option<i32>) -> String {
    explain_permission(
        as_,
        Privilege {
            perfmon,
            sys_admin,
            paranoid,
        },
        "/usr/bin/kprobe-perf",
    )
}

#[test]
fn each_permission_situation_has_its_own_advice() {
    use OpenedAs::{Kprobe, Tracepoint, Uprobe};
    let lockdown = |what: &str, cap: &str| {
        format!("the kernel refuses {what} although this process has {cap}: kernel lockdown (/sys/kernel/security/lockdown) or a security module (SELinux, AppArmor) forbids them")
    };
    // CAP_SYS_ADMIN: nothing is missing, so something else forbids it,
    // whatever the sysctl.
    for paranoid in [None, Some(2), Some(3)] {
        assert_eq!(
            permission(Kprobe, false, true, paranoid),
            lockdown("kprobes", "CAP_SYS_ADMIN")
        );
        assert_eq!(
            permission(Uprobe, true, true, paranoid),
            lockdown("uprobes", "CAP_SYS_ADMIN")
        );
        assert_eq!(
            permission(Tracepoint, false, true, paranoid),
            lockdown("tracefs-defined probes", "CAP_SYS_ADMIN")
        );
    }
    // Uprobes want CAP_SYS_ADMIN, whatever else the process has.
    let uprobes = "uprobes need CAP_SYS_ADMIN on Linux 6.16+ and on stable kernels updated since July 2025: run as root, or `setcap cap_sys_admin+ep /usr/bin/kprobe-perf`";
    for paranoid in [None, Some(2), Some(3)] {
        assert_eq!(permission(Uprobe, false, false, paranoid), uprobes);
        assert_eq!(
            permission(Uprobe, true, false, paranoid),
            "uprobes need CAP_SYS_ADMIN on Linux 6.16+ and on stable kernels updated since July 2025 (this process has CAP_PERFMON, which they no longer accept): run as root, or `setcap cap_sys_admin+ep /usr/bin/kprobe-perf`"
        );
    }
    // Debian's paranoid level 3 (or above).
    for level in [3, 4] {
        assert_eq!(
            permission(Kprobe, false, false, Some(level)),
            format!("kernel.perf_event_paranoid is {level} (a Debian kernel patch), which lets only CAP_SYS_ADMIN open perf events: run `sysctl kernel.perf_event_paranoid=2` (then CAP_PERFMON is enough for kprobes), run as root, or `setcap cap_sys_admin+ep /usr/bin/kprobe-perf`")
        );
    }
    assert_eq!(
        permission(Tracepoint, true, false, Some(3)),
        "kernel.perf_event_paranoid is 3 (a Debian kernel patch), which lets only CAP_SYS_ADMIN open perf events; CAP_PERFMON is not enough: run `sysctl kernel.perf_event_paranoid=2` (then CAP_PERFMON is enough for tracefs-defined probes), run as root, or `setcap cap_sys_admin+ep /usr/bin/kprobe-perf`"
    );
    // CAP_PERFMON below level 3: enough, so something else forbids it.
    for paranoid in [None, Some(-1), Some(2)] {
        let perfmon_refused = |what: &str| {
            format!("the kernel refuses {what} although this process has CAP_PERFMON: kernel lockdown (/sys/kernel/security/lockdown) or a security module (SELinux, AppArmor) forbids them, or this kernel predates CAP_PERFMON (5.8) and wants CAP_SYS_ADMIN")
        };
        assert_eq!(
            permission(Kprobe, true, false, paranoid),
            perfmon_refused("kprobes")
        );
        assert_eq!(
            permission(Tracepoint, true, false, paranoid),
            perfmon_refused("tracefs-defined probes")
        );
        // No capability at all.
        assert_eq!(
            permission(Kprobe, false, false, paranoid),
            "kprobes need CAP_PERFMON or CAP_SYS_ADMIN, which this process lacks: run as root, or `setcap cap_perfmon+ep /usr/bin/kprobe-perf`"
        );
        assert_eq!(
            permission(Tracepoint, false, false, paranoid),
            "tracefs-defined probes need CAP_PERFMON or CAP_SYS_ADMIN, which this process lacks: run as root, or `setcap cap_perfmon+ep /usr/bin/kprobe-perf`"
        );
    }
}

#[test]
fn an_open_error_names_the_probe_the_place_and_the_reason() {
    let e = AttachError::Open {
        probe: "p:do_sys_openat2".into(),
        where_: "CPU 3".into(),
        reason: explain_kprobe_errno(libc::ENOENT, "do_sys_openat2"),
        source: io::Error::from_raw_os_error(libc::ENOENT),
    };
    assert_eq!(
        e.to_string(),
        "cannot attach p:do_sys_openat2 on CPU 3: the kernel found no symbol or address do_sys_openat2 (or its module is not loaded)"
    );
    let source = std::error::Error::source(&e).map(|s| s.to_string());
    assert_eq!(
        source.as_deref(),
        Some("No such file or directory (os error 2)")
    );
}

fn says(as_: OpenedAs, perfmon: bool, sys_admin: bool, paranoid: i32) -> String {
    explain_permission(
        as_,
        Privilege {
            perfmon,
            sys_admin,
            paranoid: Some(paranoid),
        },
        "/usr/bin/kprobe-perf",
    )
}

/// The cases seen for real (README, Requirements): each names the
/// capability or sysctl that is missing.
#[test]
fn permission_advice_names_what_is_missing() {
    assert_eq!(
        says(OpenedAs::Uprobe, true, false, 2),
        "uprobes need CAP_SYS_ADMIN on Linux 6.16+ and on stable kernels updated since July 2025 (this process has CAP_PERFMON, which they no longer accept): run as root, or `setcap cap_sys_admin+ep /usr/bin/kprobe-perf`"
    );
    assert_eq!(
        says(OpenedAs::Kprobe, true, false, 3),
        "kernel.perf_event_paranoid is 3 (a Debian kernel patch), which lets only CAP_SYS_ADMIN open perf events; CAP_PERFMON is not enough: run `sysctl kernel.perf_event_paranoid=2` (then CAP_PERFMON is enough for kprobes), run as root, or `setcap cap_sys_admin+ep /usr/bin/kprobe-perf`"
    );
    assert_eq!(
        says(OpenedAs::Kprobe, false, false, 2),
        "kprobes need CAP_PERFMON or CAP_SYS_ADMIN, which this process lacks: run as root, or `setcap cap_perfmon+ep /usr/bin/kprobe-perf`"
    );
    assert!(
        says(OpenedAs::Kprobe, false, true, 3).contains("although this process has CAP_SYS_ADMIN")
    );
    assert!(
        says(OpenedAs::Kprobe, true, false, 2).contains("although this process has CAP_PERFMON")
    );
    assert!(!says(OpenedAs::Uprobe, false, false, 2).contains("CAP_PERFMON"));
}

#[test]
fn uprobe_errnos_name_uprobe_causes() {
    let t = "/bin/x:0x1139";
    assert!(explain_open_errno(524, t, OpenedAs::Uprobe)
        .starts_with("the uprobe layer refuses the instruction at /bin/x:0x1139 (ENOTSUPP)"));
    let einval = explain_open_errno(libc::EINVAL, t, OpenedAs::Uprobe);
    assert!(
        einval.contains("beyond the end of the file") && !einval.contains("blacklisted"),
        "{einval}"
    );
    assert!(explain_open_errno(libc::ENOENT, t, OpenedAs::Uprobe).starts_with("no such file"));
    assert!(explain_open_errno(libc::EINVAL, "f", OpenedAs::Kprobe).contains("blacklisted"));
}
