//! CPU lists (`0-3,6`): the one parser for the user's `-C` lists and the
//! kernel's sysfs lists (`/sys/devices/system/cpu/online`, `possible`).
//!
//! Every number is checked against a limit before a range is expanded, so
//! `0-4294967295` is an error, not a 16 GiB allocation; the result is
//! sorted and free of duplicates (`0,0` is CPU 0 once).

use std::fmt;

/// The largest number of CPUs a Linux kernel can be built for
/// (`CONFIG_NR_CPUS` is at most 8192): no CPU number reaches it.
pub const MAX_CPUS: u32 = 8192;

const ONLINE: &str = "/sys/devices/system/cpu/online";
const POSSIBLE: &str = "/sys/devices/system/cpu/possible";

/// A CPU list that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad CPU list {list:?}: {problem}; write CPU numbers and ranges such as 0-3,6")]
pub struct CpuListError {
    /// The list as given.
    pub list: String,
    /// What is wrong with it.
    pub problem: CpuListProblem,
}

/// What is wrong with a CPU list.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CpuListProblem {
    /// No CPU at all.
    Empty,
    /// A part that is not a CPU number or a range of them.
    NotANumber {
        /// The part, as written.
        part: String,
    },
    /// A range whose end comes before its start (`3-1`).
    Backward {
        /// Its first CPU.
        first: u32,
        /// Its last CPU.
        last: u32,
    },
    /// A CPU number at or beyond the limit.
    TooLarge {
        /// The number, as written.
        cpu: String,
        /// CPUs are numbered below this.
        limit: u32,
    },
}

impl fmt::Display for CpuListProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuListProblem::Empty => write!(f, "it names no CPU"),
            CpuListProblem::NotANumber { part } => {
                write!(f, "{part:?} is not a CPU number or a range FIRST-LAST")
            }
            CpuListProblem::Backward { first, last } => {
                write!(f, "the range {first}-{last} runs backward")
            }
            CpuListProblem::TooLarge { cpu, limit } => write!(
                f,
                "CPU {cpu} does not exist: this machine's CPUs are numbered 0 to {}",
                limit.saturating_sub(1)
            ),
        }
    }
}

/// Parses a CPU list such as `0-3,6` (surrounding white space and empty
/// parts ignored, as in sysfs files), refusing any CPU number `>= limit`
/// before it expands a range. Returns the CPUs sorted, each once.
///
/// ```
/// use kprobe_perf_engine::cpus::parse_cpu_list;
/// assert_eq!(parse_cpu_list("3,0-2,2", 8).unwrap(), vec![0, 1, 2, 3]);
/// assert!(parse_cpu_list("0-4294967295", 8).is_err());
/// ```
pub fn parse_cpu_list(text: &str, limit: u32) -> Result<Vec<u32>, CpuListError> {
    let limit = limit.min(MAX_CPUS);
    let fail = |problem| CpuListError {
        list: text.to_string(),
        problem,
    };
    // `s` is a number of `part`, the piece between commas.
    let number = |s: &str, part: &str| -> Result<u32, CpuListError> {
        let digits = s.trim();
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(fail(CpuListProblem::NotANumber {
                part: part.to_string(),
            }));
        }
        match digits.parse::<u32>() {
            Ok(n) if n < limit => Ok(n),
            _ => Err(fail(CpuListProblem::TooLarge {
                cpu: digits.to_string(),
                limit,
            })),
        }
    };
    // One flag per CPU below the limit: duplicates merge, and the memory
    // is bounded whatever the text says.
    let mut present = vec![false; limit as usize];
    for part in text.trim().split(',').map(str::trim) {
        if part.is_empty() {
            continue;
        }
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (number(a, part)?, number(b, part)?),
            None => {
                let n = number(part, part)?;
                (n, n)
            }
        };
        if first > last {
            return Err(fail(CpuListProblem::Backward { first, last }));
        }
        for p in &mut present[first as usize..=last as usize] {
            *p = true;
        }
    }
    let cpus: Vec<u32> = (0..limit).filter(|&c| present[c as usize]).collect();
    if cpus.is_empty() {
        return Err(fail(CpuListProblem::Empty));
    }
    Ok(cpus)
}

/// Writes sorted CPUs back as a list with ranges: `[0, 1, 2, 5]` -> `0-2,5`.
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while let Some(&first) = cpus.get(i) {
        let mut last = first;
        while cpus.get(i + 1) == Some(&(last.wrapping_add(1))) {
            last += 1;
            i += 1;
        }
        parts.push(if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        });
        i += 1;
    }
    parts.join(",")
}

fn read_sysfs_list(path: &str) -> Result<Vec<u32>, crate::Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| crate::Error::io(format!("reading {path}"), e))?;
    parse_cpu_list(&text, MAX_CPUS).map_err(|e| crate::Error::Malformed {
        path: path.to_string(),
        reason: e.to_string(),
    })
}

/// The online CPUs (`/sys/devices/system/cpu/online`).
pub fn online_cpus() -> Result<Vec<u32>, crate::Error> {
    read_sysfs_list(ONLINE)
}

/// The CPUs the kernel could ever bring online
/// (`/sys/devices/system/cpu/possible`).
pub fn possible_cpus() -> Result<Vec<u32>, crate::Error> {
    read_sysfs_list(POSSIBLE)
}

/// The limit for a user's CPU list: one past the highest possible CPU
/// ([`MAX_CPUS`] when sysfs cannot say).
pub fn cpu_limit() -> u32 {
    possible_cpus()
        .ok()
        .and_then(|c| c.last().map(|&l| l + 1))
        .unwrap_or(MAX_CPUS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(text: &str, limit: u32) -> CpuListProblem {
        parse_cpu_list(text, limit).unwrap_err().problem
    }

    #[test]
    fn lists_parse_sorted_and_merged() {
        assert_eq!(parse_cpu_list("0-3,5\n", 8).unwrap(), vec![0, 1, 2, 3, 5]);
        assert_eq!(parse_cpu_list("0", 1).unwrap(), vec![0]);
        assert_eq!(parse_cpu_list("0,0", 8).unwrap(), vec![0]);
        assert_eq!(parse_cpu_list("5,1-2,2-3,1", 8).unwrap(), vec![1, 2, 3, 5]);
        assert_eq!(parse_cpu_list(" 1 , 3 ,", 8).unwrap(), vec![1, 3]);
        assert_eq!(parse_cpu_list("7", 8).unwrap(), vec![7]);
    }

    #[test]
    fn bad_lists_say_what_is_wrong() {
        assert_eq!(problem("", 8), CpuListProblem::Empty);
        assert_eq!(problem(",,", 8), CpuListProblem::Empty);
        assert_eq!(
            problem("x", 8),
            CpuListProblem::NotANumber { part: "x".into() }
        );
        assert_eq!(
            problem("-1", 8),
            CpuListProblem::NotANumber { part: "-1".into() }
        );
        assert_eq!(
            problem("+1", 8),
            CpuListProblem::NotANumber { part: "+1".into() }
        );
        assert_eq!(
            problem("1-2-3", 8),
            CpuListProblem::NotANumber {
                part: "1-2-3".into()
            }
        );
        assert_eq!(
            problem("3-1", 8),
            CpuListProblem::Backward { first: 3, last: 1 }
        );
        assert_eq!(
            problem("8", 8),
            CpuListProblem::TooLarge {
                cpu: "8".into(),
                limit: 8
            }
        );
        let e = parse_cpu_list("0-4294967295", 2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad CPU list \"0-4294967295\": CPU 4294967295 does not exist: this machine's CPUs are numbered 0 to 1; write CPU numbers and ranges such as 0-3,6"
        );
        // Beyond u32 and beyond any kernel's NR_CPUS, whatever the limit.
        assert_eq!(
            problem("99999999999999999999", u32::MAX),
            CpuListProblem::TooLarge {
                cpu: "99999999999999999999".into(),
                limit: MAX_CPUS
            }
        );
    }

    #[test]
    fn lists_format_with_ranges() {
        assert_eq!(format_cpu_list(&[0, 1, 2, 5]), "0-2,5");
        assert_eq!(format_cpu_list(&[3]), "3");
        assert_eq!(format_cpu_list(&[0, 2, 4, 5]), "0,2,4-5");
        assert_eq!(format_cpu_list(&[]), "");
    }

    #[test]
    fn this_machine_has_cpus() {
        let online = online_cpus().unwrap();
        let possible = possible_cpus().unwrap();
        assert!(!online.is_empty());
        assert!(online.iter().all(|c| possible.contains(c)));
        assert_eq!(cpu_limit(), possible.last().unwrap() + 1);
    }
}
