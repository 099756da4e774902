//! `record --count-by`, `--hist`, `--lhist`: maps of the recorded events,
//! built by the engine's [`Aggregator`] and printed at the end, and every
//! `-I MS` with it (text in bpftrace's manner, or one JSON object).

use std::io::{self, Write};
use std::time::{Duration, Instant};

use anyhow::Result;
use kprobe_perf_engine::analysis::{
    parse_count_by, parse_hist, parse_lhist, render, Aggregator, ProbeFields,
};
use kprobe_perf_engine::{Event, ProbePlan};

/// The aggregation options of `record`.
#[derive(clap::Args, Default)]
pub(crate) struct AggregateArgs {
    /// Count the events by KEY[,KEY...] (comm, pid, tid, cpu, probe, or an
    /// argument's name: `NAME=` in the definition, else argN) and print
    /// the counts, highest first, at the end (repeatable: one map each).
    #[arg(
        long = "count-by",
        value_name = "KEY[,KEY...]",
        conflicts_with = "overwrite"
    )]
    pub count_by: Vec<String>,
    /// A log2 histogram of integer argument ARG, per probe that has it,
    /// printed at the end (repeatable).
    #[arg(long, value_name = "ARG", conflicts_with = "overwrite")]
    pub hist: Vec<String>,
    /// A linear histogram of integer argument ARG with buckets of STEP from
    /// MIN up to MAX (plus one below MIN and one at or above MAX), printed
    /// at the end (repeatable).
    #[arg(
        long,
        value_name = "ARG:MIN,MAX,STEP",
        allow_hyphen_values = true,
        conflicts_with = "overwrite"
    )]
    pub lhist: Vec<String>,
    /// With --count-by, --hist or --lhist: also print (and reset) the maps
    /// every MS milliseconds.
    #[arg(short = 'I', long = "interval", value_name = "MS", value_parser = crate::validate::interval_ms, allow_negative_numbers = true)]
    pub interval: Option<u64>,
}

/// The maps of a recording and when to print them.
pub(crate) struct Aggregation {
    agg: Aggregator,
    json: bool,
    start: Instant,
    interval: Option<Duration>,
    next: Option<Instant>,
}

impl Aggregation {
    /// The aggregation `args` ask for over `plans` (`None`: none asked).
    pub(crate) fn new(
        args: &AggregateArgs,
        plans: &[ProbePlan],
        json: bool,
    ) -> Result<Option<Self>> {
        if args.count_by.is_empty() && args.hist.is_empty() && args.lhist.is_empty() {
            if args.interval.is_some() {
                anyhow::bail!(
                    "-I prints the maps of --count-by, --hist or --lhist: give one of those too"
                );
            }
            return Ok(None);
        }
        let probes: Vec<ProbeFields> = plans.iter().map(ProbeFields::of).collect();
        let counts = args
            .count_by
            .iter()
            .map(|s| parse_count_by(s, &probes))
            .collect::<Result<Vec<_>, _>>()?;
        let mut hists = args
            .hist
            .iter()
            .map(|s| parse_hist(s, &probes))
            .collect::<Result<Vec<_>, _>>()?;
        for s in &args.lhist {
            hists.push(parse_lhist(s, &probes)?);
        }
        let start = Instant::now();
        let interval = args.interval.map(Duration::from_millis);
        Ok(Some(Aggregation {
            agg: Aggregator::new(&probes, counts, hists),
            json,
            start,
            interval,
            next: interval.map(|i| start + i),
        }))
    }

    /// Takes one event.
    pub(crate) fn record(&mut self, e: &Event) {
        self.agg.record(e);
    }

    /// With -I, prints the maps when an interval has passed.
    pub(crate) fn tick(&mut self, out: &mut impl Write) -> io::Result<()> {
        let (Some(next), Some(i)) = (self.next, self.interval) else {
            return Ok(());
        };
        let now = Instant::now();
        if now < next {
            return Ok(());
        }
        let mut next = next + i;
        while next <= now {
            next += i;
        }
        self.next = Some(next);
        self.print(out, true)
    }

    /// Prints the maps at the end (with -I: those of the last interval).
    pub(crate) fn finish(&mut self, out: &mut impl Write) -> io::Result<()> {
        let interval = self.interval.is_some();
        self.print(out, interval)
    }

    fn print(&mut self, out: &mut impl Write, interval: bool) -> io::Result<()> {
        let snap = self.agg.take();
        let elapsed = self.start.elapsed();
        if self.json {
            let mut v = serde_json::json!({ "maps": snap });
            if let (true, serde_json::Value::Object(m)) = (interval, &mut v) {
                m.insert("elapsed_ms".into(), (elapsed.as_millis() as u64).into());
            }
            writeln!(out, "{v}")?;
        } else {
            if interval {
                writeln!(out, "@ {:.3}s", elapsed.as_secs_f64())?;
            }
            write!(out, "{}", render::render_aggregate(&snap, None))?;
            writeln!(out)?;
        }
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::{AggregateArgs, Aggregation};

    #[test]
    fn nothing_asked_is_none_and_interval_alone_is_refused() {
        let none = Aggregation::new(&AggregateArgs::default(), &[], false).unwrap();
        assert!(none.is_none());
        let args = AggregateArgs {
            interval: Some(1000),
            ..AggregateArgs::default()
        };
        let err = Aggregation::new(&args, &[], false).err().unwrap();
        assert_eq!(
            err.to_string(),
            "-I prints the maps of --count-by, --hist or --lhist: give one of those too"
        );
    }
}
