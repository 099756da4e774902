//! The kernel's dynamic PMUs (`kprobe`, `uprobe`) as sysfs describes them.

use std::io;
use std::path::Path;

use crate::attach::error::AttachError;

/// Where the kernel lists its PMUs.
pub(crate) const SYSFS_PMUS: &str = "/sys/bus/event_source/devices";

/// A dynamic probe PMU: its type number and the config bit for return probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbePmu {
    /// `perf_event_attr.type`.
    pub type_: u32,
    /// Bit of `config` that makes a return probe (`format/retprobe`).
    pub retprobe_bit: u32,
}

impl ProbePmu {
    /// Reads `kprobe` or `uprobe` from sysfs; `Ok(None)` when the kernel has
    /// no such PMU.
    pub fn discover(name: &str) -> Result<Option<ProbePmu>, AttachError> {
        Self::discover_in(Path::new(SYSFS_PMUS), name)
    }

    /// As [`ProbePmu::discover`], under another sysfs root (for tests).
    pub(crate) fn discover_in(root: &Path, name: &str) -> Result<Option<ProbePmu>, AttachError> {
        let dir = root.join(name);
        let path = dir.join("type");
        let type_text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(AttachError::io(
                    format!("reading the {name} PMU from {}", path.display()),
                    e,
                ))
            }
        };
        let type_ = type_text
            .trim()
            .parse()
            .map_err(|_| AttachError::Malformed {
                path: path.display().to_string(),
                reason: format!("the PMU type is not a number: {type_text:?}"),
            })?;
        let retprobe_bit = std::fs::read_to_string(dir.join("format/retprobe"))
            .ok()
            .and_then(|f| parse_config_bit(&f))
            .unwrap_or(0);
        Ok(Some(ProbePmu {
            type_,
            retprobe_bit,
        }))
    }
}

/// Parses a one-bit PMU format such as `config:0`.
fn parse_config_bit(format: &str) -> Option<u32> {
    format.trim().strip_prefix("config:")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_type_and_retprobe_bit() {
        let root = std::env::temp_dir().join(format!("kprobe-perf-pmu-{}", std::process::id()));
        let dir = root.join("kprobe/format");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(root.join("kprobe/type"), "6\n").unwrap();
        std::fs::write(dir.join("retprobe"), "config:0\n").unwrap();
        let pmu = ProbePmu::discover_in(&root, "kprobe").unwrap();
        assert_eq!(
            pmu,
            Some(ProbePmu {
                type_: 6,
                retprobe_bit: 0
            })
        );
        assert_eq!(ProbePmu::discover_in(&root, "uprobe").unwrap(), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
