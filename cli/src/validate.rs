//! Checks of `record`'s numbers, lists and paths, run by clap as it parses
//! them: each refusal says what is wrong and what is accepted, before any
//! probe is planned or the kernel touched. Usage errors print as one
//! `kprobe-perf: ` line and exit 1, as every other error does.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kprobe_perf_engine::cli::cpus;

/// The longest `-d`: 365 days, in seconds.
pub(crate) const MAX_DURATION_SECS: f64 = 365.0 * 24.0 * 3600.0;
/// The largest ring per CPU or thread, in bytes (`-m`, `--overwrite-size`).
pub(crate) const MAX_RING_BYTES: usize = 1 << 30;

/// `-d SECS`: a finite number of seconds, more than 0 and at most
/// [`MAX_DURATION_SECS`].
pub(crate) fn duration(text: &str) -> Result<f64, String> {
    let accepted = format!(
        "give a number of seconds more than 0 and at most {MAX_DURATION_SECS:.0} (365 days), such as 10 or 0.5"
    );
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("not a number; {accepted}"))?;
    if !secs.is_finite() {
        return Err(format!("not a finite number; {accepted}"));
    }
    if secs <= 0.0 {
        return Err(format!("not more than 0; {accepted}"));
    }
    if secs > MAX_DURATION_SECS {
        return Err(format!("too long; {accepted}"));
    }
    Ok(secs)
}

/// The most pages a ring may have (a power of two: 1 GiB with 4 KiB pages).
fn max_ring_pages() -> usize {
    let page = kprobe_perf_engine::cli::os::page_size().max(1);
    1usize << (MAX_RING_BYTES / page).max(1).ilog2()
}

/// `-m PAGES`: a power of two from 1 to a ring of [`MAX_RING_BYTES`],
/// as a number of pages or, as perf takes it, a size with a unit (`512K`,
/// `1M`, `2G`, `65536B`) that is a power of two of pages.
pub(crate) fn mmap_pages(text: &str) -> Result<usize, String> {
    let max = max_ring_pages();
    let page = kprobe_perf_engine::cli::os::page_size().max(1) as u64;
    let accepted = format!(
        "give a power of two from 1 to {max} pages, or a size such as 512K or 1M ({} MiB at most per ring)",
        MAX_RING_BYTES >> 20
    );
    let text = text.trim();
    let unit = match text.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('B') => Some(1u64),
        Some('K') => Some(1 << 10),
        Some('M') => Some(1 << 20),
        Some('G') => Some(1 << 30),
        _ => None,
    };
    let number = match unit {
        Some(_) => &text[..text.len() - 1],
        None => text,
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("not a number of pages or a size; {accepted}"))?;
    let pages = match unit {
        None => n,
        Some(unit) => {
            let bytes = n.saturating_mul(unit);
            if bytes % page != 0 {
                return Err(format!(
                    "{text} is not a whole number of {} KiB pages; {accepted}",
                    page >> 10
                ));
            }
            bytes / page
        }
    };
    if pages == 0 {
        return Err(format!("a ring needs at least one page; {accepted}"));
    }
    if pages > max as u64 {
        return Err(format!("more than {max} pages; {accepted}"));
    }
    if !pages.is_power_of_two() {
        let below = 1u64 << pages.ilog2();
        return Err(match unit {
            None => format!(
                "not a power of two; {accepted}, such as {below} or {}",
                below * 2
            ),
            Some(_) => format!(
                "{text} is {pages} pages, not a power of two; {accepted}, such as {}K or {}K",
                (below * page) >> 10,
                (below * 2 * page) >> 10
            ),
        });
    }
    usize::try_from(pages).map_err(|_| accepted)
}

/// Shortest and longest `-I` interval, in milliseconds.
const INTERVAL_MS: (u64, u64) = (10, 3_600_000);

/// `-I`'s milliseconds, in `stat`, `record` and `latency` alike: a whole
/// number from 10 to 3600000.
pub(crate) fn interval_ms(text: &str) -> Result<u64, String> {
    let (lo, hi) = INTERVAL_MS;
    match text.parse::<u64>() {
        Ok(ms) if (lo..=hi).contains(&ms) => Ok(ms),
        _ => Err(format!(
            "{text:?} is not an interval: give whole milliseconds from {lo} to {hi} (e.g. -I 1000 for every second)"
        )),
    }
}

/// `--overwrite-size MIB`: from 1 MiB to [`MAX_RING_BYTES`].
pub(crate) fn overwrite_mib(text: &str) -> Result<usize, String> {
    let max = MAX_RING_BYTES >> 20;
    let accepted = format!("give a number of MiB from 1 to {max}");
    let mib: u64 = text
        .trim()
        .parse()
        .map_err(|_| format!("not a whole number of MiB; {accepted}"))?;
    if mib == 0 || mib > max as u64 {
        return Err(format!("out of range; {accepted}"));
    }
    usize::try_from(mib).map_err(|_| accepted)
}

/// A `-C` list: online CPUs, sorted, each once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CpuList(pub Vec<u32>);

/// `-C LIST`: CPUs of this machine that are online. Numbers are checked
/// against the possible CPUs before a range is expanded.
pub(crate) fn cpu_list(text: &str) -> Result<CpuList, String> {
    let list = cpus::parse_cpu_list(text, cpus::cpu_limit()).map_err(|e| e.to_string())?;
    if let Ok(online) = cpus::online_cpus() {
        let offline: Vec<u32> = list
            .iter()
            .copied()
            .filter(|c| !online.contains(c))
            .collect();
        if !offline.is_empty() {
            return Err(format!(
                "CPU {} is not online; the online CPUs are {}",
                cpus::format_cpu_list(&offline),
                cpus::format_cpu_list(&online)
            ));
        }
    }
    Ok(CpuList(list))
}

/// A positive pid or tid that names a task in /proc.
fn task_id(text: &str, what: &str, plural: &str) -> Result<i32, String> {
    let id: i64 = text
        .trim()
        .parse()
        .map_err(|_| format!("not a {what}; give the number of a running {what}, e.g. from ps"))?;
    let id = i32::try_from(id)
        .ok()
        .filter(|&i| i > 0)
        .ok_or_else(|| {
            format!("no {what} has this number ({plural} are numbered from 1 to kernel.pid_max); give the number of a running {what}, e.g. from ps")
        })?;
    if !Path::new(&format!("/proc/{id}")).exists() {
        return Err(format!(
            "no {what} {id} is running (nothing in /proc/{id}); give the number of a running {what}, e.g. from ps"
        ));
    }
    Ok(id)
}

/// One pid of `-p`.
pub(crate) fn pid(text: &str) -> Result<i32, String> {
    task_id(text, "process", "processes")
}

/// One tid of `-t`.
pub(crate) fn tid(text: &str) -> Result<i32, String> {
    task_id(text, "thread", "threads")
}

/// Sorts pids or tids and drops repeats: a task listed twice would have
/// each of its events counted twice.
pub(crate) fn merge_duplicates(ids: &mut Vec<i32>) {
    ids.sort_unstable();
    ids.dedup();
}

/// Where a `-G` cgroup is: a path, or a name under /sys/fs/cgroup.
pub(crate) fn cgroup_path(cg: &Path) -> PathBuf {
    if cg.is_absolute() {
        cg.to_path_buf()
    } else {
        Path::new("/sys/fs/cgroup").join(cg)
    }
}

/// `-G CGROUP`: an existing directory of the cgroup hierarchy.
pub(crate) fn cgroup(text: &str) -> Result<PathBuf, String> {
    let given = PathBuf::from(text);
    let dir = cgroup_path(&given);
    if text.is_empty() || !dir.is_dir() {
        return Err(format!(
            "no cgroup directory {}; give a directory of the cgroup2 hierarchy, as a path or a name under /sys/fs/cgroup (e.g. system.slice)",
            dir.display()
        ));
    }
    Ok(given)
}

/// Prints a command-line error as one `kprobe-perf: ` line (clap's tip,
/// if any, kept on that line) and returns exit status 1; help and version
/// requests print as clap prints them.
pub(crate) fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return if e.exit_code() == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    say!("kprobe-perf: {}", usage_line(&e));
    ExitCode::FAILURE
}

/// The one line [`usage_error`] prints for `e`.
pub(crate) fn usage_line(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    // `-:EVENT` is read as the short options `-:`, `-E`, ...
    if e.kind() == ErrorKind::UnknownArgument
        && matches!(e.get(ContextKind::InvalidArg), Some(ContextValue::String(a)) if a == "-:")
    {
        return "unexpected argument '-:': a deletion (-:EVENT) is a SPEC, given after `--` \
                as any SPEC that starts with a hyphen (probe --parse -- -:myprobe) (see --help)"
            .to_string();
    }
    one_line(&e.render().to_string())
}

/// Clap's rendered error on one line: the message, then its tips; the
/// usage and "For more information" lines give way to a pointer to --help.
fn one_line(rendered: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for line in rendered.lines().map(str::trim) {
        if line.is_empty() {
            continue;
        }
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        parts.push(line.strip_prefix("error: ").unwrap_or(line));
    }
    let mut text = String::new();
    for p in parts {
        if !text.is_empty() {
            text.push_str(if text.ends_with(':') { " " } else { "; " });
        }
        text.push_str(p);
    }
    text.push_str(" (see --help)");
    text
}

/// `-zN` / `--compression-level N`: a zstd level from 1 to 22, as perf
/// record takes it (0, as perf, is its default level, 1).
pub(crate) fn compression_level(text: &str) -> Result<u32, String> {
    if !cfg!(feature = "zstd") {
        return Err(
            "this kprobe-perf was built without zstd (libzstd is C, and the static \
             musl binary leaves it out): record without -z, or use a build that has it \
             (`cargo install --path cli`)"
                .into(),
        );
    }
    let max = kprobe_perf_engine::perfdata::MAX_COMPRESSION_LEVEL;
    match text.trim().parse::<u32>() {
        Ok(0) => Ok(kprobe_perf_engine::perfdata::DEFAULT_COMPRESSION_LEVEL),
        Ok(n) if n <= max => Ok(n),
        _ => Err(format!(
            "`{text}` is not a compression level: give a number from 1 (fastest, the default) to {max} (smallest), e.g. -z3"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("10"), Ok(10.0));
        assert_eq!(duration("0.5"), Ok(0.5));
        assert_eq!(duration("31536000"), Ok(MAX_DURATION_SECS));
        for bad in [
            "inf",
            "-inf",
            "NaN",
            "1e300",
            "0",
            "-1",
            "-0",
            "",
            "1s",
            "31536000.5",
        ] {
            assert!(duration(bad).is_err(), "{bad}");
        }
        assert!(duration("NaN")
            .unwrap_err()
            .starts_with("not a finite number; give"));
        assert!(duration("1e300").unwrap_err().starts_with("too long; give"));
        assert!(duration("-1")
            .unwrap_err()
            .starts_with("not more than 0; give"));
    }

    #[test]
    fn ring_sizes() {
        let max = max_ring_pages();
        assert!(max.is_power_of_two());
        assert_eq!(
            max * kprobe_perf_engine::cli::os::page_size(),
            MAX_RING_BYTES
        );
        assert_eq!(mmap_pages("1"), Ok(1));
        assert_eq!(mmap_pages("128"), Ok(128));
        assert_eq!(mmap_pages(&max.to_string()), Ok(max));
        let e = mmap_pages("3").unwrap_err();
        assert!(
            e.starts_with("not a power of two;") && e.ends_with("such as 2 or 4"),
            "{e}"
        );
        for bad in ["0", "-1", "", "x", "1099511627776", &(2 * max).to_string()] {
            assert!(mmap_pages(bad).is_err(), "{bad}");
        }
        // Sizes as perf takes them (4 KiB pages here).
        if kprobe_perf_engine::cli::os::page_size() == 4096 {
            assert_eq!(mmap_pages("512K"), Ok(128));
            assert_eq!(mmap_pages("1M"), Ok(256));
            assert_eq!(mmap_pages("1m"), Ok(256));
            assert_eq!(mmap_pages("8192B"), Ok(2));
            assert_eq!(mmap_pages("1G"), Ok(max));
            assert_eq!(
                mmap_pages("3M").unwrap_err(),
                "3M is 768 pages, not a power of two; give a power of two from 1 to 262144 pages, \
                 or a size such as 512K or 1M (1024 MiB at most per ring), such as 2048K or 4096K"
            );
            assert_eq!(
                mmap_pages("1000B").unwrap_err(),
                "1000B is not a whole number of 4 KiB pages; give a power of two from 1 to 262144 \
                 pages, or a size such as 512K or 1M (1024 MiB at most per ring)"
            );
            for bad in ["2G", "0K", "K", "-1M", "18446744073709551615G"] {
                assert!(mmap_pages(bad).is_err(), "{bad}");
            }
        }
        assert_eq!(overwrite_mib("1"), Ok(1));
        assert_eq!(overwrite_mib("1024"), Ok(1024));
        for bad in ["0", "1025", "-1", "18446744073709551616", "0.5"] {
            assert!(overwrite_mib(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn intervals_are_validated() {
        assert_eq!(interval_ms("1000"), Ok(1000));
        assert_eq!(interval_ms("10"), Ok(10));
        for bad in ["9", "0", "-5", "1.5", "x", "3600001"] {
            let e = interval_ms(bad).unwrap_err();
            assert!(e.contains("from 10 to 3600000"), "{bad}: {e}");
        }
        // One rule and one message for the -I of every command.
        use clap::CommandFactory;
        for line in [
            ["record", "-e", "p:/bin/sh:main", "-I", "0"],
            ["stat", "-e", "p:/bin/sh:main", "-I", "0"],
            ["latency", "/bin/sh:main", "--json", "-I", "0"],
        ] {
            let argv = std::iter::once("kprobe-perf").chain(line);
            let e = crate::Cli::command()
                .try_get_matches_from(argv)
                .err()
                .unwrap();
            assert_eq!(
                usage_line(&e),
                "invalid value '0' for '--interval <MS>': \"0\" is not an interval: give whole \
                 milliseconds from 10 to 3600000 (e.g. -I 1000 for every second) (see --help)",
                "{line:?}"
            );
        }
    }

    #[test]
    fn cpu_lists_are_online_cpus() {
        assert_eq!(cpu_list("0,0"), Ok(CpuList(vec![0])));
        let e = cpu_list("0-4294967295").unwrap_err();
        assert!(
            e.starts_with("bad CPU list \"0-4294967295\": CPU 4294967295 does not exist"),
            "{e}"
        );
        let beyond = cpus::cpu_limit();
        assert!(cpu_list(&beyond.to_string()).is_err());
    }

    #[test]
    fn task_ids() {
        let me = std::process::id() as i32;
        assert_eq!(pid(&me.to_string()), Ok(me));
        assert_eq!(tid(&me.to_string()), Ok(me));
        for bad in ["0", "-1", "", "x", "2147483648", "99999999"] {
            assert!(pid(bad).is_err(), "{bad}");
        }
        assert_eq!(
            pid("0").unwrap_err(),
            "no process has this number (processes are numbered from 1 to kernel.pid_max); give the number of a running process, e.g. from ps"
        );
        let mut ids = vec![3, 1, 3, 2, 1];
        merge_duplicates(&mut ids);
        assert_eq!(ids, [1, 2, 3]);
    }

    #[test]
    fn paths() {
        assert!(cgroup("no/such/cgroup/kprobe-perf").is_err());
        assert!(cgroup("").is_err());
    }

    /// A flag no command knows is refused wherever it is: after a probe
    /// definition, after `probe --vars`'s point (which once swallowed it
    /// as a SPEC and ignored it), after a function or a pattern.
    #[test]
    fn unknown_flags_are_errors_everywhere() {
        use clap::CommandFactory;
        let me = std::process::id().to_string();
        let lines: [&[&str]; 13] = [
            &["record", "-e", "p:/bin/sh:main"],
            &["record", "-e", "p:/bin/sh:main", "-p", &me],
            &["latency", "/bin/sh:main"],
            &["stat", "-e", "p:/bin/sh:main"],
            &["cleanup"],
            &["script", "-i", "perf.data"],
            &["probe", "--parse", "p:/bin/sh:main"],
            &["probe", "-D", "main", "-x", "/bin/sh"],
            &["probe", "--vars", "main", "-x", "/bin/sh"],
            &["probe", "--definition", "main"],
            &["probe", "--source", "main"],
            &["list", "tcp_*"],
            &["info"],
        ];
        for line in lines {
            for flag in ["--nonsense", "--range", "-Q"] {
                let argv = std::iter::once("kprobe-perf")
                    .chain(line.iter().copied())
                    .chain([flag]);
                let e = match crate::Cli::command().try_get_matches_from(argv) {
                    Ok(_) => panic!("{line:?} {flag} was accepted"),
                    Err(e) => e,
                };
                // clap's tips (a similar flag, `-- FLAG`) follow.
                let said = one_line(&e.render().to_string());
                assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument, "{said}");
                assert!(
                    said.starts_with(&format!("unexpected argument '{flag}' found")),
                    "{line:?}: {said}"
                );
            }
        }
    }

    #[test]
    fn clap_errors_fold_into_one_line() {
        let rendered = "error: unexpected argument '-x' found\n\n  tip: to pass '-x' as a value, use '-- -x'\n\nUsage: kprobe-perf record [OPTIONS]\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(rendered),
            "unexpected argument '-x' found; tip: to pass '-x' as a value, use '-- -x' (see --help)"
        );
        let rendered = "error: the following required arguments were not provided:\n  --event <SPEC>\n\nUsage: kprobe-perf record --event <SPEC>\n";
        assert_eq!(
            one_line(rendered),
            "the following required arguments were not provided: --event <SPEC> (see --help)"
        );
    }
}
