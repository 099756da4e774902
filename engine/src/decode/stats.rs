//! The counters a session keeps while decoding: events per probe, lost
//! and undecodable records, throttling. Shared by the decoder
//! ([`crate::decode::records`]) and the session ([`crate::session`]), which both
//! re-export them, and read by the [`Summary`](crate::session::summary::Summary); with the
//! counts the kernel keeps ([`CallCounts`], [`KernelCounts`]).

use std::collections::BTreeMap;

/// Counters a session keeps; none of them is ever silently dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionStats {
    /// Events decoded per probe.
    pub hits: Vec<u64>,
    /// Samples `PERF_RECORD_LOST` records reported, summed over CPUs: a
    /// floor, counted as records arrive (the kernel writes one only once
    /// a ring has room again). The exact figure, per probe and in all, is
    /// the [`Summary`](crate::session::summary::Summary)'s `loss`.
    pub lost: u64,
    /// Records that could not be decoded.
    pub undecodable: u64,
    /// Samples lost (`PERF_RECORD_LOST`) per CPU (`None`: the record did
    /// not say), summed over the probes sharing that CPU's ring.
    pub lost_per_cpu: BTreeMap<Option<u32>, u64>,
    /// `PERF_RECORD_THROTTLE` / `UNTHROTTLE` records per (CPU, probe): the
    /// kernel stopped sampling that probe on that CPU for exceeding
    /// `perf_event_max_sample_rate`, and resumed it.
    pub throttling: BTreeMap<(Option<u32>, usize), Throttling>,
    /// Per probe, returns handed over with their entry values unknown:
    /// return probes whose entry values are joined in user space
    /// (the planner's entry joins) when the entry was not seen (lost, or
    /// before the start). Empty when no probe is joined.
    pub entry_unknown: Vec<u64>,
    /// Per probe, events its filter rejected in user space (decoded,
    /// counted in [`SessionStats::hits`], never handed over). Empty when
    /// no probe filters in user space; kernel-side rejections are not
    /// counted anywhere (the kernel drops them before the ring).
    pub filtered: Vec<u64>,
    /// Bytes of records read from the rings (headers included).
    pub ring_bytes: u64,
}

/// How often the kernel throttled one probe on one CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Throttling {
    /// `PERF_RECORD_THROTTLE` records: sampling stopped.
    pub throttled: u64,
    /// `PERF_RECORD_UNTHROTTLE` records: sampling resumed.
    pub unthrottled: u64,
}

impl SessionStats {
    /// Samples of the user's probes decoded so far: the sum of
    /// [`SessionStats::hits`] (a hidden probe's are not counted there).
    pub(crate) fn shown_hits(&self) -> u64 {
        self.hits.iter().sum()
    }

    /// Counts a `PERF_RECORD_LOST` of `count` samples on `cpu`.
    pub(crate) fn note_lost(&mut self, cpu: Option<u32>, count: u64) {
        self.lost += count;
        *self.lost_per_cpu.entry(cpu).or_default() += count;
    }

    /// Counts a `PERF_RECORD_THROTTLE` or `UNTHROTTLE` record (`change`)
    /// of `probe` on `cpu`.
    pub(crate) fn note_throttle(&mut self, cpu: Option<u32>, probe: usize, change: ThrottleChange) {
        let t = self.throttling.entry((cpu, probe)).or_default();
        match change {
            ThrottleChange::Throttled => t.throttled += 1,
            ThrottleChange::Unthrottled => t.unthrottled += 1,
        }
    }

    /// Throttle records of `probe`, summed over CPUs.
    pub(crate) fn throttling_of(&self, probe: usize) -> Throttling {
        self.throttling
            .iter()
            .filter(|((_, p), _)| *p == probe)
            .fold(Throttling::default(), |acc, (_, t)| Throttling {
                throttled: acc.throttled + t.throttled,
                unthrottled: acc.unthrottled + t.unthrottled,
            })
    }
}

/// What a throttle record says the kernel did to a probe on a CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ThrottleChange {
    /// `PERF_RECORD_THROTTLE`: sampling stopped.
    Throttled,
    /// `PERF_RECORD_UNTHROTTLE`: sampling resumed.
    Unthrottled,
}

/// Calls of a PMU kretprobe's function, as the kernel counted them: the
/// entries (a counting-only kprobe at the function's entry, which writes
/// no sample) and the returns the kretprobe reported (its own count,
/// samples lost to a full ring included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallCounts {
    /// Calls that entered the function while the session was enabled.
    pub entries: u64,
    /// Returns the kretprobe reported.
    pub returns: u64,
}

impl CallCounts {
    /// Calls whose entry was counted and whose return was not: missed for
    /// lack of a kretprobe instance, or still running at the end.
    pub fn unreturned(&self) -> u64 {
        self.entries.saturating_sub(self.returns)
    }
}

/// Hits and misses the kernel counted for a tracefs probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelCounts {
    /// Times the probe fired.
    pub hits: u64,
    /// Times it could not run (for a kretprobe: no free instance, so the
    /// return was not reported).
    pub misses: u64,
}
