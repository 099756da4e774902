//! Counts by key (`--count-by KEY[,KEY...]`) and histograms of a numeric
//! argument (`--hist ARG`, `--lhist ARG:MIN,MAX,STEP`), over events.
//!
//! Keys: `comm`, `pid`, `tid`, `cpu`, `probe`, or an argument name as the
//! plan names it (`NAME=` in the definition, else `argN`, 1-based). These
//! built-in names win over an argument of the same name; `argN` also
//! reaches the N-th argument of a probe whose arguments are named, when no
//! probe has an argument literally named `argN`. Events of a probe without
//! the argument count under `-` ([`KeyPart::Missing`]) in a count map,
//! and are left out of an argument's histograms.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

use super::hist::{Hist, HistShape, LinearRange};
use super::{AnalysisError, KeyPart};
use crate::decode::{Event, Value};
use crate::plan::{ArgSource, ProbePlan};

/// What an argument holds, for deciding what may be histogrammed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArgKind {
    /// An integer ([`Value::Int`]).
    Integer,
    /// A string.
    String,
    /// An array.
    Array,
}

/// One argument of a probe: its name and kind.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ArgField {
    /// The name the plan gives it.
    pub name: String,
    /// What it holds.
    pub kind: ArgKind,
}

impl ArgField {
    /// An argument named `name` holding `kind`.
    pub fn new(name: impl Into<String>, kind: ArgKind) -> ArgField {
        ArgField {
            name: name.into(),
            kind,
        }
    }
}

/// What the aggregation knows of a probe: its event name and arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProbeFields {
    /// The event name.
    pub name: String,
    /// Its arguments, in plan order.
    pub args: Vec<ArgField>,
}

impl ProbeFields {
    /// A probe named `name` with `args`.
    pub fn new(name: impl Into<String>, args: Vec<ArgField>) -> ProbeFields {
        ProbeFields {
            name: name.into(),
            args,
        }
    }

    /// The fields of a planned probe.
    pub fn of(plan: &ProbePlan) -> ProbeFields {
        let args = plan
            .args
            .iter()
            .map(|a| {
                let kind = match (a.source, a.ty.array) {
                    (ArgSource::Comm, _) => ArgKind::String,
                    (_, Some(_)) => ArgKind::Array,
                    _ if a.ty.base.is_data_loc() => ArgKind::String,
                    _ => ArgKind::Integer,
                };
                ArgField::new(a.name.clone(), kind)
            })
            .collect();
        ProbeFields::new(plan.event.clone(), args)
    }
}

/// `probe: a, b; probe2: c` for error messages.
fn describe_arguments(probes: &[ProbeFields]) -> String {
    let with_args: Vec<String> = probes
        .iter()
        .filter(|p| !p.args.is_empty())
        .map(|p| {
            let names: Vec<&str> = p.args.iter().map(|a| a.name.as_str()).collect();
            format!("{}: {}", p.name, names.join(", "))
        })
        .collect();
    if with_args.is_empty() {
        "no probe has arguments".to_string()
    } else {
        with_args.join("; ")
    }
}

/// Per probe, the index of argument `name` (see the module
/// documentation); `None` when no probe has it.
fn resolve_arg(name: &str, probes: &[ProbeFields]) -> Option<Vec<Option<usize>>> {
    let by_name: Vec<Option<usize>> = probes
        .iter()
        .map(|p| p.args.iter().position(|a| a.name == name))
        .collect();
    if by_name.iter().any(Option::is_some) {
        return Some(by_name);
    }
    let n: usize = name.strip_prefix("arg")?.parse().ok()?;
    let by_position: Vec<Option<usize>> = probes
        .iter()
        .map(|p| n.checked_sub(1).filter(|&i| i < p.args.len()))
        .collect();
    by_position
        .iter()
        .any(Option::is_some)
        .then_some(by_position)
}

/// One key of a `--count-by`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CountKey {
    /// The command name.
    Comm,
    /// The process id.
    Pid,
    /// The thread id.
    Tid,
    /// The CPU.
    Cpu,
    /// The probe (by event name).
    Probe,
    /// An argument.
    Arg {
        /// Its name as given.
        name: String,
        /// Per probe, the argument's index (`None`: the probe lacks it).
        index: Vec<Option<usize>>,
    },
}

impl CountKey {
    /// The key's name (`comm`, ..., or the argument's).
    pub fn name(&self) -> &str {
        match self {
            CountKey::Comm => "comm",
            CountKey::Pid => "pid",
            CountKey::Tid => "tid",
            CountKey::Cpu => "cpu",
            CountKey::Probe => "probe",
            CountKey::Arg { name, .. } => name,
        }
    }
}

/// A parsed `--count-by KEY[,KEY...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CountBy {
    /// The keys, in the order given.
    pub keys: Vec<CountKey>,
}

/// Parses `--count-by KEY[,KEY...]` for `probes` (see the module
/// documentation for the keys).
pub fn parse_count_by(spec: &str, probes: &[ProbeFields]) -> Result<CountBy, AnalysisError> {
    if spec.trim().is_empty() {
        return Err(AnalysisError::EmptyKeyList);
    }
    let keys = spec
        .split(',')
        .map(|k| {
            let k = k.trim();
            Ok(match k {
                "comm" => CountKey::Comm,
                "pid" => CountKey::Pid,
                "tid" => CountKey::Tid,
                "cpu" => CountKey::Cpu,
                "probe" => CountKey::Probe,
                name => CountKey::Arg {
                    name: name.to_string(),
                    index: resolve_arg(name, probes).ok_or_else(|| AnalysisError::UnknownKey {
                        option: "the count keys",
                        key: name.to_string(),
                        builtins: "comm, pid, tid, cpu, probe",
                        arguments: describe_arguments(probes),
                    })?,
                },
            })
        })
        .collect::<Result<Vec<_>, AnalysisError>>()?;
    Ok(CountBy { keys })
}

/// A parsed `--hist ARG` or `--lhist ARG:MIN,MAX,STEP`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistBy {
    /// The argument's name as given.
    pub arg: String,
    /// Per probe, the argument's index (`None`: the probe lacks it).
    pub index: Vec<Option<usize>>,
    /// Log2 or linear.
    pub shape: HistShape,
}

fn hist_by(
    option: &'static str,
    arg: &str,
    probes: &[ProbeFields],
    shape: HistShape,
) -> Result<HistBy, AnalysisError> {
    let index = resolve_arg(arg, probes).ok_or_else(|| AnalysisError::UnknownArgument {
        option,
        name: arg.to_string(),
        arguments: describe_arguments(probes),
    })?;
    for (p, i) in probes.iter().zip(&index) {
        let Some(a) = i.and_then(|i| p.args.get(i)) else {
            continue;
        };
        let kind = match a.kind {
            ArgKind::Integer => continue,
            ArgKind::String => "string",
            ArgKind::Array => "array",
        };
        return Err(AnalysisError::NotNumeric {
            option,
            name: arg.to_string(),
            probe: p.name.clone(),
            kind,
        });
    }
    Ok(HistBy {
        arg: arg.to_string(),
        index,
        shape,
    })
}

/// Parses `--hist ARG`: a log2 histogram of integer argument `ARG`, one
/// per probe that has it. A string or array argument is refused.
pub fn parse_hist(arg: &str, probes: &[ProbeFields]) -> Result<HistBy, AnalysisError> {
    hist_by("a log2 histogram", arg.trim(), probes, HistShape::Log2)
}

enum RangeError {
    Syntax(String),
    Hist(super::HistError),
}

fn parse_range(range: &str) -> Result<LinearRange, RangeError> {
    let nums = range
        .split(',')
        .map(|n| {
            n.trim()
                .parse::<i64>()
                .map_err(|_| RangeError::Syntax(format!("{:?} is not an integer", n.trim())))
        })
        .collect::<Result<Vec<i64>, _>>()?;
    let [min, max, step] = nums[..] else {
        return Err(RangeError::Syntax(format!(
            "the range has {} numbers, not 3",
            nums.len()
        )));
    };
    LinearRange::new(min, max, step).map_err(RangeError::Hist)
}

/// Parses `--linear MIN,MAX,STEP` (latency buckets, in the chosen unit).
pub fn parse_linear(spec: &str) -> Result<LinearRange, AnalysisError> {
    parse_range(spec).map_err(|e| match e {
        RangeError::Syntax(why) => AnalysisError::BadLinear {
            spec: spec.to_string(),
            why,
        },
        RangeError::Hist(h) => AnalysisError::Hist(h),
    })
}

/// Parses `--lhist ARG:MIN,MAX,STEP`: a linear histogram (see
/// [`LinearRange`]).
pub fn parse_lhist(spec: &str, probes: &[ProbeFields]) -> Result<HistBy, AnalysisError> {
    let bad = |why: &str| AnalysisError::BadLhist {
        spec: spec.to_string(),
        why: why.to_string(),
    };
    let (arg, range) = spec
        .rsplit_once(':')
        .ok_or_else(|| bad("no ':' between the argument and its range"))?;
    let range = parse_range(range).map_err(|e| match e {
        RangeError::Syntax(why) => bad(&why),
        RangeError::Hist(h) => AnalysisError::Hist(h),
    })?;
    hist_by(
        "a linear histogram",
        arg.trim(),
        probes,
        HistShape::Linear(range),
    )
}

/// One row of a [`CountTable`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CountRow {
    /// The key's parts, in the order of [`CountTable::keys`].
    pub key: Vec<KeyPart>,
    /// Events with that key.
    pub count: u64,
}

/// The counts of one `--count-by`, sorted by count (largest first), ties
/// by key (ascending).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CountTable {
    /// The key names.
    pub keys: Vec<String>,
    /// One row per distinct key.
    pub rows: Vec<CountRow>,
    /// Sum of the counts.
    pub total: u64,
}

/// The histogram of an argument for one probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ProbeHist {
    /// The probe's event name.
    pub probe: String,
    /// The values.
    pub hist: Hist,
    /// Negative values a log2 histogram cannot hold (left out of it).
    pub negative: u64,
}

/// The histograms of one `--hist`/`--lhist`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ArgHists {
    /// The argument's name.
    pub arg: String,
    /// One per probe that has the argument and had events, in probe
    /// order.
    pub probes: Vec<ProbeHist>,
}

/// What an [`Aggregator`] holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AggregateSnapshot {
    /// One per `--count-by`, in the order given.
    pub counts: Vec<CountTable>,
    /// One per `--hist`/`--lhist`, in the order given.
    pub hists: Vec<ArgHists>,
}

struct HistState {
    spec: HistBy,
    /// Per probe: the histogram and its negative values.
    per_probe: Vec<Option<(Hist, u64)>>,
}

/// Counts and histograms over events.
pub struct Aggregator {
    names: Vec<Arc<str>>,
    counts: Vec<(CountBy, HashMap<Vec<KeyPart>, u64>)>,
    hists: Vec<HistState>,
    /// The key being built (no allocation for a key already counted).
    scratch: Vec<KeyPart>,
}

impl Aggregator {
    /// An aggregator for `probes` (indexed as the events' `probe`), with
    /// the parsed `--count-by`s and `--hist`/`--lhist`s.
    pub fn new(probes: &[ProbeFields], counts: Vec<CountBy>, hists: Vec<HistBy>) -> Aggregator {
        Aggregator {
            names: probes.iter().map(|p| Arc::from(p.name.as_str())).collect(),
            counts: counts.into_iter().map(|c| (c, HashMap::new())).collect(),
            hists: hists
                .into_iter()
                .map(|spec| HistState {
                    per_probe: vec![None; spec.index.len()],
                    spec,
                })
                .collect(),
            scratch: Vec::new(),
        }
    }

    fn probe_name(&self, probe: usize) -> Arc<str> {
        self.names
            .get(probe)
            .cloned()
            .unwrap_or_else(|| Arc::from(format!("probe{probe}")))
    }

    /// Takes one event.
    pub fn record(&mut self, e: &Event) {
        let mut key = std::mem::take(&mut self.scratch);
        for i in 0..self.counts.len() {
            key.clear();
            for k in &self.counts[i].0.keys {
                key.push(match k {
                    CountKey::Comm => KeyPart::Comm(e.comm.clone()),
                    CountKey::Pid => KeyPart::Pid(e.pid),
                    CountKey::Tid => KeyPart::Tid(e.tid),
                    CountKey::Cpu => KeyPart::Cpu(e.cpu),
                    CountKey::Probe => KeyPart::Probe {
                        index: e.probe,
                        name: self.probe_name(e.probe),
                    },
                    CountKey::Arg { index, .. } => index
                        .get(e.probe)
                        .copied()
                        .flatten()
                        .and_then(|a| e.args.get(a))
                        .map_or(KeyPart::Missing, KeyPart::of_value),
                });
            }
            let map = &mut self.counts[i].1;
            match map.get_mut(key.as_slice()) {
                Some(n) => *n += 1,
                None => {
                    map.insert(key.clone(), 1);
                }
            }
        }
        self.scratch = key;
        for h in &mut self.hists {
            let Some(Value::Int { raw, ty }) = h
                .spec
                .index
                .get(e.probe)
                .copied()
                .flatten()
                .and_then(|a| e.args.get(a))
            else {
                continue;
            };
            let Some(slot) = h.per_probe.get_mut(e.probe) else {
                continue;
            };
            let (hist, negative) = slot.get_or_insert_with(|| (h.spec.shape.new_hist(), 0));
            if matches!(ty, kprobe_perf_spec::BaseType::Signed(_)) {
                if !hist.record_i64(*raw as i64) {
                    *negative += 1;
                }
            } else {
                hist.record_u64(*raw);
            }
        }
    }

    /// What the aggregator holds, without resetting it.
    pub fn snapshot(&self) -> AggregateSnapshot {
        let counts = self
            .counts
            .iter()
            .map(|(spec, map)| {
                let mut rows: Vec<CountRow> = map
                    .iter()
                    .map(|(k, &count)| CountRow {
                        key: k.clone(),
                        count,
                    })
                    .collect();
                rows.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
                CountTable {
                    keys: spec.keys.iter().map(|k| k.name().to_string()).collect(),
                    total: rows.iter().map(|r| r.count).sum(),
                    rows,
                }
            })
            .collect();
        let hists = self
            .hists
            .iter()
            .map(|h| ArgHists {
                arg: h.spec.arg.clone(),
                probes: h
                    .per_probe
                    .iter()
                    .enumerate()
                    .filter_map(|(p, slot)| {
                        slot.as_ref().map(|(hist, negative)| ProbeHist {
                            probe: self.probe_name(p).to_string(),
                            hist: hist.clone(),
                            negative: *negative,
                        })
                    })
                    .collect(),
            })
            .collect();
        AggregateSnapshot { counts, hists }
    }

    /// The snapshot, then starts again empty (one interval).
    pub fn take(&mut self) -> AggregateSnapshot {
        let s = self.snapshot();
        for (_, map) in &mut self.counts {
            map.clear();
        }
        for h in &mut self.hists {
            h.per_probe.iter_mut().for_each(|slot| *slot = None);
        }
        s
    }
}

#[cfg(test)]
mod tests;
