//! The counts of a stretch of a recording: [`Summary::since`], what a
//! rotated perf.data file stores for its own span.

use super::summary::{CpuLoss, FilterSummary, Loss, ProbeSummary, ProbeThrottling, Summary};
use crate::decode::stats::{CallCounts, KernelCounts, Throttling};

impl Summary {
    /// What was counted after `earlier` (a summary of the same session,
    /// taken before): every count is this one's less `earlier`'s. A loss
    /// is the growth of the loss known at each summary; samples still in
    /// the rings when `earlier` was taken count as lost in it until a
    /// drain reads them, so a span's loss is at least 0, never negative.
    pub fn since(&self, earlier: &Summary) -> Summary {
        let probes = self
            .probes
            .iter()
            .enumerate()
            .map(|(i, p)| match earlier.probes.get(i) {
                Some(e) => probe_since(p, e),
                None => p.clone(),
            })
            .collect();
        Summary {
            events: self.events.saturating_sub(earlier.events),
            loss: loss_since(self.loss, earlier.loss),
            lost_records: self.lost_records.saturating_sub(earlier.lost_records),
            undecodable: self.undecodable.saturating_sub(earlier.undecodable),
            lost_per_cpu: self
                .lost_per_cpu
                .iter()
                .map(|c| {
                    let before = earlier.lost_per_cpu.iter().find(|e| e.cpu == c.cpu);
                    CpuLoss {
                        cpu: c.cpu,
                        lost: c.lost.saturating_sub(before.map_or(0, |e| e.lost)),
                    }
                })
                .filter(|c| c.lost > 0)
                .collect(),
            throttling: self
                .throttling
                .iter()
                .map(|t| {
                    let before = earlier
                        .throttling
                        .iter()
                        .find(|e| e.cpu == t.cpu && e.probe == t.probe);
                    ProbeThrottling {
                        throttling: throttling_since(t.throttling, before.map(|e| e.throttling)),
                        ..t.clone()
                    }
                })
                .filter(|t| t.throttling != Throttling::default())
                .collect(),
            probes,
            overwrite: self.overwrite,
            exact: self.exact && earlier.exact,
        }
    }
}

/// One probe's counts after `e`.
fn probe_since(p: &ProbeSummary, e: &ProbeSummary) -> ProbeSummary {
    ProbeSummary {
        events: p.events.saturating_sub(e.events),
        loss: loss_since(p.loss, e.loss),
        kernel: p.kernel.map(|k| KernelCounts {
            hits: k.hits.saturating_sub(e.kernel.map_or(0, |x| x.hits)),
            misses: k.misses.saturating_sub(e.kernel.map_or(0, |x| x.misses)),
        }),
        calls: p.calls.map(|c| CallCounts {
            entries: c.entries.saturating_sub(e.calls.map_or(0, |x| x.entries)),
            returns: c.returns.saturating_sub(e.calls.map_or(0, |x| x.returns)),
        }),
        throttling: throttling_since(p.throttling, Some(e.throttling)),
        entry_unknown: p
            .entry_unknown
            .map(|n| n.saturating_sub(e.entry_unknown.unwrap_or(0))),
        filter: p.filter.as_ref().map(|f| FilterSummary {
            dropped: f
                .dropped
                .map(|n| n.saturating_sub(e.filter.as_ref().and_then(|x| x.dropped).unwrap_or(0))),
            ..f.clone()
        }),
        ..p.clone()
    }
}

/// `now`'s loss less `before`'s (unknown when either is).
fn loss_since(now: Loss, before: Loss) -> Loss {
    let n = match (now.count(), before.count()) {
        (Some(a), Some(b)) => Some(a.saturating_sub(b)),
        _ => None,
    };
    match now {
        Loss::Lost(_) => Loss::Lost(n),
        Loss::NotKept(_) => Loss::NotKept(n),
    }
}

/// `now` less `before`.
fn throttling_since(now: Throttling, before: Option<Throttling>) -> Throttling {
    let b = before.unwrap_or_default();
    Throttling {
        throttled: now.throttled.saturating_sub(b.throttled),
        unthrottled: now.unthrottled.saturating_sub(b.unthrottled),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(events: u64, lost: u64, cpu_lost: u64) -> Summary {
        Summary {
            events,
            loss: Loss::Lost(Some(lost)),
            lost_records: cpu_lost,
            undecodable: 0,
            lost_per_cpu: vec![CpuLoss {
                cpu: Some(1),
                lost: cpu_lost,
            }],
            throttling: Vec::new(),
            probes: Vec::new(),
            overwrite: None,
            exact: true,
        }
    }

    #[test]
    fn a_span_counts_what_came_after_the_earlier_summary() {
        let s = summary(1500, 7, 7).since(&summary(1000, 4, 4));
        assert_eq!(s.events, 500);
        assert_eq!(s.loss, Loss::Lost(Some(3)));
        assert_eq!(s.lost_records, 3);
        assert_eq!(
            s.lost_per_cpu,
            vec![CpuLoss {
                cpu: Some(1),
                lost: 3
            }]
        );
    }

    #[test]
    fn a_loss_that_shrank_since_is_no_loss_of_the_span() {
        // Samples in the rings at the earlier summary counted as lost
        // there, and were read after it.
        let s = summary(1500, 0, 0).since(&summary(1000, 2, 0));
        assert_eq!(s.loss, Loss::Lost(Some(0)));
        assert!(s.lost_per_cpu.is_empty());
    }
}
