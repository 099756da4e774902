//! The kernel's dynamic PMUs (`kprobe`, `uprobe`) as sysfs describes them,
//! the ones a session's plans need, and the capabilities they ask for.

use std::io;
use std::path::Path;

use crate::attach::error::AttachError;
use crate::attach::sys::{self, SYSFS_PMUS};
use crate::plan::{AttachPoint, Backend, ProbePlan};

/// A dynamic probe PMU: its type number and the config bit for return probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) struct ProbePmu {
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
    #[cfg_attr(feature = "test-util", visibility::make(pub))]
    pub(crate) fn discover(name: &str) -> Result<Option<ProbePmu>, AttachError> {
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

/// Checks what a newcomer hits first: a kernel without the kprobe PMU, or
/// a process without the capability to use it.
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) fn preflight() -> Result<ProbePmu, AttachError> {
    let pmu = ProbePmu::discover("kprobe")?.ok_or_else(|| AttachError::NoKprobePmu {
        dir: format!("{SYSFS_PMUS}/kprobe"),
    })?;
    check_capabilities()?;
    Ok(pmu)
}

/// Fails unless this process has CAP_PERFMON or CAP_SYS_ADMIN.
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) fn check_capabilities() -> Result<(), AttachError> {
    let caps =
        sys::effective_capabilities().map_err(|e| AttachError::io("reading capabilities", e))?;
    let has = |cap: u32| caps & (1u64 << cap) != 0;
    if !has(sys::CAP_PERFMON) && !has(sys::CAP_SYS_ADMIN) {
        let exe = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "kprobe-perf".into());
        return Err(AttachError::NotPermitted { exe });
    }
    Ok(())
}

/// The PMUs the plans need (kprobe, uprobe), checked to exist; without a
/// kprobe PMU probe, the capabilities are still checked.
pub(crate) fn probe_pmus(
    plans: &[ProbePlan],
) -> Result<(Option<ProbePmu>, Option<ProbePmu>), AttachError> {
    let needs_kprobe_pmu = plans
        .iter()
        .any(|p| p.backend == Backend::Pmu && !p.is_user());
    let pmu = if needs_kprobe_pmu {
        Some(preflight()?)
    } else {
        check_capabilities()?;
        None
    };
    let uprobe_pmu = if plans
        .iter()
        .any(|p| p.is_user() && p.backend == Backend::Pmu)
    {
        let pmu = ProbePmu::discover("uprobe")?.ok_or_else(|| AttachError::NoUprobePmu {
            dir: format!("{SYSFS_PMUS}/uprobe"),
        })?;
        let counted = plans.iter().find(|p| {
            p.backend == Backend::Pmu
                && matches!(
                    p.attach,
                    AttachPoint::User {
                        ref_ctr: Some(_),
                        ..
                    }
                )
        });
        if let (Some(p), None) = (counted, pmu.ref_ctr_shift) {
            return Err(AttachError::NoRefCtrOffset {
                probe: p.spec.to_string(),
                dir: format!("{SYSFS_PMUS}/uprobe"),
            });
        }
        Some(pmu)
    } else {
        None
    };
    Ok((pmu, uprobe_pmu))
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
