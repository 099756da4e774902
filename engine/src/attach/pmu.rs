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
    /// First bit of `config` that holds a uprobe's reference counter
    /// offset (`format/ref_ctr_offset`, `config:32-63`, Linux 4.20+);
    /// `None` when the PMU has none.
    pub ref_ctr_shift: Option<u32>,
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
        let ref_ctr_shift = std::fs::read_to_string(dir.join("format/ref_ctr_offset"))
            .ok()
            .and_then(|f| parse_config_range_start(&f));
        Ok(Some(ProbePmu {
            type_,
            retprobe_bit,
            ref_ctr_shift,
        }))
    }
}

/// Parses a one-bit PMU format such as `config:0`.
fn parse_config_bit(format: &str) -> Option<u32> {
    format.trim().strip_prefix("config:")?.parse().ok()
}

/// The first bit of a PMU format range such as `config:32-63`.
fn parse_config_range_start(format: &str) -> Option<u32> {
    let range = format.trim().strip_prefix("config:")?;
    range.split('-').next()?.parse().ok()
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
                retprobe_bit: 0,
                ref_ctr_shift: None,
            })
        );
        assert_eq!(ProbePmu::discover_in(&root, "uprobe").unwrap(), None);
        // The uprobe PMU's reference counter, as Linux 4.20+ describes it.
        let dir = root.join("uprobe/format");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(root.join("uprobe/type"), "7\n").unwrap();
        std::fs::write(dir.join("retprobe"), "config:0\n").unwrap();
        std::fs::write(dir.join("ref_ctr_offset"), "config:32-63\n").unwrap();
        let pmu = ProbePmu::discover_in(&root, "uprobe").unwrap().unwrap();
        assert_eq!(pmu.ref_ctr_shift, Some(32));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
