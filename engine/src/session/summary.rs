//! What a session counted, in one value: [`Summary`], made by
//! [`Session::summary`](crate::session::Session::summary). Text and JSON outputs
//! only render it; the loss accounting is done here, once.

use std::collections::BTreeMap;

use serde::{Serialize, Serializer};

use crate::decode::stats::{CallCounts, KernelCounts, SessionStats, Throttling};
use crate::plan::filter::FilterRuns;
use crate::plan::{Backend, ProbePlan};

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
    /// Events handed over (decoded, less those a user-space filter dropped).
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
    /// For a return probe whose entry values are joined in user space
    /// (entry joins), when any probe is: the returns handed over
    /// with their entry values unknown (their entry was not seen).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry_unknown: Option<u64>,
    /// The probe's filter, where it ran and what it dropped (only for a
    /// probe with a filter).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<FilterSummary>,
}

/// Where a probe's filter ran, and what it dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FilterSummary {
    /// The filter as written.
    pub expr: String,
    /// `kernel` or `user`.
    pub runs: &'static str,
    /// Why not in the kernel (user space only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Events the user-space filter dropped. `None` in the kernel, which
    /// drops them before the ring and counts them nowhere a perf event
    /// can read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped: Option<u64>,
}

impl FilterSummary {
    fn of(plan: &ProbePlan, dropped: u64) -> Option<FilterSummary> {
        let f = plan.filter.as_ref()?;
        Some(match f.runs() {
            FilterRuns::Kernel(_) => FilterSummary {
                expr: f.text().to_string(),
                runs: "kernel",
                reason: None,
                dropped: None,
            },
            FilterRuns::UserSpace(why) => FilterSummary {
                expr: f.text().to_string(),
                runs: "user",
                reason: Some(why.clone()),
                dropped: Some(dropped),
            },
        })
    }
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
    /// The probe (its index in [`Session::plans`](crate::session::Session::plans)).
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
/// rings are drained (after [`Session::disable`](crate::session::Session::disable)
/// and a last drain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Summary {
    /// Events handed over, over every probe.
    pub events: u64,
    /// Samples lost (or not kept), over every probe: the sum of the
    /// probes' exact losses, or, when the kernel's counts could not be
    /// read, the samples `PERF_RECORD_LOST` records reported (see
    /// [`Summary::exact`]).
    #[serde(flatten)]
    pub loss: Loss,
    /// Samples `PERF_RECORD_LOST` records reported (a floor: the kernel
    /// writes one only once a ring has room again). A record counts every
    /// event of its ring, a hidden entry probe's
    /// (entry joins) included, which the other loss figures
    /// leave out.
    pub lost_records: u64,
    /// Records that could not be decoded.
    pub undecodable: u64,
    /// Samples of the user's probes lost per CPU ring, exact (CPUs that
    /// lost nothing are left out); from `PERF_RECORD_LOST` when the counts
    /// could not be read.
    pub lost_per_cpu: Vec<CpuLoss>,
    /// Throttling per (CPU, probe).
    pub throttling: Vec<ProbeThrottling>,
    /// Per probe, in the order of [`Session::plans`](crate::session::Session::plans).
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
                let decoded = stats.hits.get(i).copied().unwrap_or(0);
                let dropped = stats.filtered.get(i).copied().unwrap_or(0);
                let events = decoded.saturating_sub(dropped);
                let lost = k
                    .hits
                    .as_ref()
                    .and_then(|h| h.get(i))
                    .map(|h| h.saturating_sub(decoded));
                ProbeSummary {
                    event: p.event.clone(),
                    backend: p.backend,
                    events,
                    loss: kind.with(lost),
                    kernel: k.kernel.get(i).copied().flatten(),
                    calls: k.calls.as_ref().and_then(|c| c.get(i).copied().flatten()),
                    throttling: stats.throttling_of(i),
                    entry_unknown: stats.entry_unknown.get(i).copied(),
                    filter: FilterSummary::of(p, dropped),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::BackendChoice;
    use kprobe_perf_arch::Arch;

    fn plans() -> Vec<ProbePlan> {
        let syms = kprobe_perf_symbols::KernelSymbols::parse(
            "ffffffff81000000 T _text\nffffffff81234570 T do_sys_openat2\nffffffff81234660 T do_sys_open\n",
        )
        .unwrap();
        [
            ("p:a do_sys_openat2", BackendChoice::Pmu),
            ("r:b do_sys_open", BackendChoice::Pmu),
            ("p:c do_sys_open", BackendChoice::Tracefs),
        ]
        .iter()
        .map(|(s, b)| {
            crate::plan::resolve(
                kprobe_perf_spec::ProbeSpec::parse(s, Arch::X86_64).unwrap(),
                &syms,
                Arch::X86_64,
                *b,
            )
            .unwrap()
        })
        .collect()
    }

    fn stats() -> SessionStats {
        let mut st = SessionStats {
            hits: vec![10, 4, 7],
            undecodable: 1,
            ..Default::default()
        };
        st.note_lost(Some(1), 3);
        st.note_throttle(Some(0), 1, crate::decode::stats::ThrottleChange::Throttled);
        st.note_throttle(
            Some(0),
            1,
            crate::decode::stats::ThrottleChange::Unthrottled,
        );
        st.note_throttle(Some(1), 1, crate::decode::stats::ThrottleChange::Throttled);
        st
    }

    fn kernel(overwrite: bool, read: bool) -> KernelSide {
        KernelSide {
            overwrite,
            hits: read.then(|| vec![15, 4, 7]),
            lost_per_cpu: read.then(|| BTreeMap::from([(Some(0), 2), (Some(1), 3)])),
            calls: read.then(|| {
                vec![
                    None,
                    Some(CallCounts {
                        entries: 6,
                        returns: 4,
                    }),
                    None,
                ]
            }),
            kernel: vec![None, None, Some(KernelCounts { hits: 7, misses: 2 })],
            dumped: 9,
        }
    }

    #[test]
    fn losses_are_exact_per_probe_and_summed() {
        let s = Summary::new(&plans(), &stats(), kernel(false, true));
        assert!(s.exact);
        assert_eq!(s.events, 21);
        assert_eq!(s.loss, Loss::Lost(Some(5)));
        assert_eq!(s.lost_records, 3);
        let lost: Vec<Option<u64>> = s.probes.iter().map(|p| p.loss.count()).collect();
        assert_eq!(lost, [Some(5), Some(0), Some(0)]);
        assert_eq!(s.probes[1].calls.map(|c| c.unreturned()), Some(2));
        assert_eq!(
            s.probes[1].throttling,
            Throttling {
                throttled: 2,
                unthrottled: 1
            }
        );
        assert_eq!(s.overwrite, None);
    }

    /// The JSON the CLI prints: keys sorted (through a `Value`), optional
    /// counts left out, the loss named by the mode.
    #[test]
    fn json_has_the_summary_keys_and_numbers() {
        let s = Summary::new(&plans(), &stats(), kernel(false, true));
        let json = serde_json::to_value(&s).unwrap().to_string();
        assert_eq!(
            json,
            concat!(
                r#"{"events":21,"lost":5,"lost_per_cpu":[{"cpu":0,"lost":2},{"cpu":1,"lost":3}],"lost_records":3,"#,
                r#""probes":[{"backend":"pmu","event":"a","events":10,"lost":5,"throttled":0,"unthrottled":0},"#,
                r#"{"backend":"pmu","entries":6,"event":"b","events":4,"lost":0,"throttled":2,"unreturned":2,"unthrottled":1},"#,
                r#"{"backend":"tracefs","event":"c","events":7,"kernel_hits":7,"kernel_misses":2,"lost":0,"throttled":0,"unthrottled":0}],"#,
                r#""throttling":[{"cpu":0,"event":"b","throttled":1,"unthrottled":1},{"cpu":1,"event":"b","throttled":1,"unthrottled":0}],"#,
                r#""undecodable":1}"#
            )
        );
    }

    /// A probe's filter: where it ran, and in user space why and what it
    /// dropped; the events are those handed over, the loss counts from
    /// the samples decoded (dropped ones included).
    #[test]
    fn filters_say_where_they_ran_and_what_they_dropped() {
        let mut plans = plans();
        plans[0] = plans[0].clone().with_filter("comm == \"sh\"").unwrap();
        plans[2] = plans[2].clone().with_filter("pid == 1").unwrap();
        let mut st = stats();
        st.filtered = vec![0, 0, 4];
        let s = Summary::new(&plans, &st, kernel(false, true));
        assert_eq!(s.events, 17);
        assert_eq!(s.probes[2].events, 3);
        assert_eq!(s.probes[2].loss, Loss::Lost(Some(0)));
        assert_eq!(s.probes[1].filter, None);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(
            json["probes"][0]["filter"].to_string(),
            r#"{"expr":"comm == \"sh\"","runs":"kernel"}"#
        );
        assert_eq!(
            json["probes"][2]["filter"].to_string(),
            r#"{"dropped":4,"expr":"pid == 1","reason":"`pid` (the process id) is in no field of the kernel's records, which carry only the thread id (`common_pid`, which `tid` names)","runs":"user"}"#
        );
        assert_eq!(json["probes"][1].get("filter"), None);
    }

    #[test]
    fn without_the_kernels_counts_losses_come_from_lost_records() {
        let s = Summary::new(&plans(), &stats(), kernel(true, false));
        assert!(!s.exact);
        assert_eq!(s.loss, Loss::NotKept(Some(3)));
        assert_eq!(
            s.overwrite,
            Some(FlightWindow {
                held: 9,
                overwritten: None
            })
        );
        let json = serde_json::to_value(&s).unwrap().to_string();
        assert!(
            json.contains(r#""not_kept":3,"overwrite":{"held":9,"overwritten":null}"#),
            "{json}"
        );
        assert!(
            json.contains(r#""lost_per_cpu":[{"cpu":1,"lost":3}]"#),
            "{json}"
        );
        assert!(
            json.contains(r#""event":"a","events":10,"not_kept":null,"#),
            "{json}"
        );
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v.get("lost"), None, "{json}");
        assert_eq!(v["probes"][0].get("lost"), None, "{json}");
    }
}
