//! CPU lists as text (`0-3,6`), parsed and written back: pure, shared by
//! [`crate::attach::cpus`] (which reads the kernel's lists) and the attach errors
//! (which show the online CPUs).

use std::fmt;

/// The largest number of CPUs a Linux kernel can be built for
/// (`CONFIG_NR_CPUS` is at most 8192): no CPU number reaches it.
pub const MAX_CPUS: u32 = 8192;

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
/// use kprobe_perf_engine::cli::cpus::parse_cpu_list;
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
