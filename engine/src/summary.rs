//! What a session counted, in one value: [`Summary`], made by
//! [`Session::summary`](crate::Session::summary). Text and JSON outputs
//! only render it; the loss accounting is done here, once.

use std::collections::BTreeMap;

use serde::{Serialize, Serializer};

use crate::plan::{Backend, ProbePlan};
use crate::session::{CallCounts, KernelCounts, SessionStats, Throttling};

/// Samples the kernel counted and the session did not hand over. Its
/// name in JSON is the variant's (`lost` or `not_kept`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Loss {
    /// Lost to a full ring. `None`: the kernel's counts could not be read.
    Lost(Option<u64>),
    /// Flight-recorder mode: not kept (overwritten by design, or dropped
    /// while a dump paused the rings); not called a loss.
    NotKept(Option<u64>),
}

impl Loss {
    /// The count, whatever its name.
    pub fn count(&self) -> Option<u64> {
        match self {
            Loss::Lost(n) | Loss::NotKept(n) => *n,
        }
    }

    /// True for [`Loss::NotKept`].
    pub fn is_not_kept(&self) -> bool {
        matches!(self, Loss::NotKept(_))
    }

    fn with(&self, n: Option<u64>) -> Loss {
        match self {
            Loss::Lost(_) => Loss::Lost(n),
            Loss::NotKept(_) => Loss::NotKept(n),
        }
    }
}

/// One probe's counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ProbeSummary {
    /// The probe's event name.
    pub event: String,
    /// How it was opened.
    #[serde(serialize_with = "backend_name")]
    pub backend: Backend,
    /// Events decoded.
    pub events: u64,
    /// Exact: the hits the kernel counted minus the events decoded.
    #[serde(flatten)]
    pub loss: Loss,
    /// For a tracefs kprobe, the hits and misses of `kprobe_profile`.
    #[serde(flatten, serialize_with = "kernel_counts")]
    pub kernel: Option<KernelCounts>,
    /// For a PMU kretprobe or uretprobe, the calls that entered and
    /// returned.
    #[serde(flatten, serialize_with = "call_counts")]
    pub calls: Option<CallCounts>,
    /// Throttle records, summed over CPUs.
    #[serde(flatten)]
    pub throttling: Throttling,
}

/// Samples lost by one CPU's ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CpuLoss {
    /// The CPU (`None`: the rings per thread, summed).
    pub cpu: Option<u32>,
    /// Samples lost (in flight-recorder mode: not kept).
    pub lost: u64,
}

/// Throttling of one probe on one CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ProbeThrottling {
    /// The CPU (`None`: the record did not say).
    pub cpu: Option<u32>,
    /// The probe (its index in [`Session::plans`](crate::Session::plans)).
    #[serde(skip)]
    pub probe: usize,
    /// The probe's event name.
    pub event: String,
    /// Its throttle and unthrottle records.
    #[serde(flatten)]
    pub throttling: Throttling,
}

/// The flight recorder's window: what the dumps held, and what the
/// kernel counted beyond it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FlightWindow {
    /// Events handed over by every dump.
    pub held: u64,
    /// The kernel's hits not in any dump (`None`: its counts could not
    /// be read).
    pub overwritten: Option<u64>,
}

/// Everything a session counted: events, exact losses, the kernel's
/// counts, throttling, and the flight recorder's window. Exact once the
/// rings are drained (after [`Session::disable`](crate::Session::disable)
/// and a last drain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Summary {
    /// Events decoded, over every probe.
    pub events: u64,
    /// Samples lost (or not kept), over every probe: the sum of the
    /// probes' exact losses, or, when the kernel's counts could not be
    /// read, the samples `PERF_RECORD_LOST` records reported (see
    /// [`Summary::exact`]).
    #[serde(flatten)]
    pub loss: Loss,
    /// Samples `PERF_RECORD_LOST` records reported (a floor: the kernel
    /// writes one only once a ring has room again).
    pub lost_records: u64,
    /// Records that could not be decoded.
    pub undecodable: u64,
    /// Samples lost per CPU ring, exact (CPUs that lost nothing are left
    /// out); from `PERF_RECORD_LOST` when the counts could not be read.
    pub lost_per_cpu: Vec<CpuLoss>,
    /// Throttling per (CPU, probe).
    pub throttling: Vec<ProbeThrottling>,
    /// Per probe, in the order of [`Session::plans`](crate::Session::plans).
    pub probes: Vec<ProbeSummary>,
    /// The flight recorder's window (flight-recorder mode only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<FlightWindow>,
    /// False when the kernel's counts could not be read: the losses are
    /// then those `PERF_RECORD_LOST` reported.
    #[serde(skip)]
    pub exact: bool,
}

/// What the session read from the kernel for a summary; `None` where a
/// read failed.
pub(crate) struct KernelSide {
    pub(crate) overwrite: bool,
    pub(crate) hits: Option<Vec<u64>>,
    pub(crate) lost_per_cpu: Option<BTreeMap<Option<u32>, u64>>,
    pub(crate) calls: Option<Vec<Option<CallCounts>>>,
    pub(crate) kernel: Vec<Option<KernelCounts>>,
    pub(crate) dumped: u64,
}

impl Summary {
    pub(crate) fn new(plans: &[ProbePlan], stats: &SessionStats, k: KernelSide) -> Summary {
        let name = |i: usize| plans.get(i).map_or("?", |p| p.event.as_str()).to_string();
        let kind = if k.overwrite {
            Loss::NotKept(None)
        } else {
            Loss::Lost(None)
        };
        let probes: Vec<ProbeSummary> = plans
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let events = stats.hits.get(i).copied().unwrap_or(0);
                let lost = k
                    .hits
                    .as_ref()
                    .and_then(|h| h.get(i))
                    .map(|h| h.saturating_sub(events));
                ProbeSummary {
                    event: p.event.clone(),
                    backend: p.backend,
                    events,
                    loss: kind.with(lost),
                    kernel: k.kernel.get(i).copied().flatten(),
                    calls: k.calls.as_ref().and_then(|c| c.get(i).copied().flatten()),
                    throttling: stats.throttling_of(i),
                }
            })
            .collect();
        let exact = k.hits.is_some();
        let total_lost = if exact {
            probes.iter().filter_map(|p| p.loss.count()).sum()
        } else {
            stats.lost
        };
        let held = k.dumped;
        let overwritten = k
            .hits
            .as_ref()
            .map(|h| h.iter().sum::<u64>().saturating_sub(held));
        Summary {
            events: probes.iter().map(|p| p.events).sum(),
            loss: kind.with(Some(total_lost)),
            lost_records: stats.lost,
            undecodable: stats.undecodable,
            lost_per_cpu: k
                .lost_per_cpu
                .as_ref()
                .unwrap_or(&stats.lost_per_cpu)
                .iter()
                .map(|(&cpu, &lost)| CpuLoss { cpu, lost })
                .collect(),
            throttling: stats
                .throttling
                .iter()
                .map(|(&(cpu, probe), &throttling)| ProbeThrottling {
                    cpu,
                    probe,
                    event: name(probe),
                    throttling,
                })
                .collect(),
            probes,
            overwrite: k.overwrite.then_some(FlightWindow { held, overwritten }),
            exact,
        }
    }
}

fn backend_name<S: Serializer>(b: &Backend, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match b {
        Backend::Pmu => "pmu",
        Backend::Tracefs => "tracefs",
    })
}

/// `kernel_hits` and `kernel_misses`, or nothing.
fn kernel_counts<S: Serializer>(c: &Option<KernelCounts>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(None)?;
    if let Some(c) = c {
        m.serialize_entry("kernel_hits", &c.hits)?;
        m.serialize_entry("kernel_misses", &c.misses)?;
    }
    m.end()
}

/// `entries` and `unreturned`, or nothing.
fn call_counts<S: Serializer>(c: &Option<CallCounts>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(None)?;
    if let Some(c) = c {
        m.serialize_entry("entries", &c.entries)?;
        m.serialize_entry("unreturned", &c.unreturned())?;
    }
    m.end()
}
