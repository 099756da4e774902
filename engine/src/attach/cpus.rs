//! CPU lists (`0-3,6`): the one parser for the user's `-C` lists and the
//! kernel's sysfs lists (`/sys/devices/system/cpu/online`, `possible`).
//!
//! Every number is checked against a limit before a range is expanded, so
//! `0-4294967295` is an error, not a 16 GiB allocation; the result is
//! sorted and free of duplicates (`0,0` is CPU 0 once).

pub use crate::attach::cpu_list::{
    format_cpu_list, parse_cpu_list, CpuListError, CpuListProblem, MAX_CPUS,
};
use crate::attach::error::AttachError;

const ONLINE: &str = "/sys/devices/system/cpu/online";
const POSSIBLE: &str = "/sys/devices/system/cpu/possible";

fn read_sysfs_list(path: &str) -> Result<Vec<u32>, AttachError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| AttachError::io(format!("reading {path}"), e))?;
    parse_cpu_list(&text, MAX_CPUS).map_err(|e| AttachError::Malformed {
        path: path.to_string(),
        reason: e.to_string(),
    })
}

/// The online CPUs (`/sys/devices/system/cpu/online`).
pub fn online_cpus() -> Result<Vec<u32>, AttachError> {
    read_sysfs_list(ONLINE)
}

/// The CPUs the kernel could ever bring online
/// (`/sys/devices/system/cpu/possible`).
pub fn possible_cpus() -> Result<Vec<u32>, AttachError> {
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
