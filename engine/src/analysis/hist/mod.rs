//! Histograms: power-of-two buckets ([`Log2Hist`]) and fixed-width
//! buckets ([`LinearHist`]), each with count, sum, min, max, average and
//! percentiles.
//!
//! # How percentiles are computed
//!
//! Percentiles use the nearest-rank definition: the p-th percentile of
//! `n` values is the value of rank `ceil(p/100 * n)` (at least 1) in
//! ascending order, so it is always one of the recorded values.
//!
//! A histogram keeps every recorded value until it has seen more than its
//! exact limit (4,096 values;
//! 8 bytes a value); up to then the percentiles are exact
//! ([`Percentiles::exact`] is true). Past the limit it drops those values
//! and estimates from the buckets: the bucket holding the value of that
//! rank is found exactly (so the estimate always lies in the same bucket
//! as the true value), and inside it the values are assumed spread evenly
//! from its lowest to its highest possible value, both narrowed to the
//! minimum and maximum seen. A bucket holding one value gives its middle.

use serde::Serialize;

/// How many values a histogram keeps for exact percentiles, by default.
pub(crate) const DEFAULT_EXACT_LIMIT: usize = 4096;

/// The most buckets a [`LinearHist`] may have between its bounds.
pub(crate) const MAX_LINEAR_BUCKETS: u64 = 10_000;

/// The percentiles the summaries report, in thousandths.
const SUMMARY_THOUSANDTHS: [u32; 4] = [500, 900, 990, 999];

/// Why a linear histogram cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HistError {
    /// `min` is not below `max`.
    #[error(
        "linear histogram range {min},{max} is empty: MIN must be below MAX (e.g. 0,1000,100)"
    )]
    EmptyRange {
        /// The lower bound given.
        min: i64,
        /// The upper bound given.
        max: i64,
    },
    /// `step` is 0 or negative.
    #[error("linear histogram step {step} must be above 0 (e.g. 0,1000,100)")]
    BadStep {
        /// The step given.
        step: i64,
    },
    /// The range holds more than 10,000 steps.
    #[error(
        "linear histogram {min},{max},{step} would have {buckets} buckets, more than \
         {MAX_LINEAR_BUCKETS}: use a larger step or a narrower range"
    )]
    TooManyBuckets {
        /// The lower bound given.
        min: i64,
        /// The upper bound given.
        max: i64,
        /// The step given.
        step: i64,
        /// The buckets the range would need.
        buckets: u128,
    },
}

/// One bucket of a histogram, for output: the values `low <= v < high`.
/// `None` is an open end (the below-min and above-max buckets of a
/// [`LinearHist`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Bucket {
    /// Lowest value of the bucket (inclusive); `None`: no lower bound.
    pub low: Option<i128>,
    /// Bound above the bucket (exclusive); `None`: no upper bound.
    pub high: Option<i128>,
    /// Values recorded in it.
    pub count: u64,
}

/// The percentiles a histogram reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Percentiles<T> {
    /// Median.
    pub p50: T,
    /// 90th percentile.
    pub p90: T,
    /// 99th percentile.
    pub p99: T,
    /// 99.9th percentile.
    pub p999: T,
    /// True when computed from every value; false when estimated from the
    /// buckets (see the [module documentation](self)).
    pub exact: bool,
}

/// The values kept for exact percentiles, until there are too many.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ExactValues<T> {
    values: Vec<T>,
    limit: usize,
    overflowed: bool,
}

impl<T: Copy + Ord> ExactValues<T> {
    fn new(limit: usize) -> Self {
        ExactValues {
            values: Vec::new(),
            limit,
            overflowed: false,
        }
    }

    fn push(&mut self, v: T) {
        if self.overflowed {
            return;
        }
        if self.values.len() >= self.limit {
            self.overflowed = true;
            self.values = Vec::new();
        } else {
            self.values.push(v);
        }
    }

    fn merge(&mut self, other: &ExactValues<T>) {
        if self.overflowed {
            return;
        }
        if other.overflowed || self.values.len() + other.values.len() > self.limit {
            self.overflowed = true;
            self.values = Vec::new();
        } else {
            self.values.extend_from_slice(&other.values);
        }
    }

    fn sorted(&self) -> Option<Vec<T>> {
        (!self.overflowed).then(|| {
            let mut v = self.values.clone();
            v.sort_unstable();
            v
        })
    }
}

/// Rank (1-based) of the `thousandths`/1000 quantile among `count` values.
fn rank(count: u64, thousandths: u32) -> u64 {
    let r = (u128::from(count) * u128::from(thousandths)).div_ceil(1000);
    (r as u64).clamp(1, count)
}

/// The value of rank `rank` estimated from `(low, high_exclusive, count)`
/// buckets in ascending order, the observed extremes `lo`..=`hi`.
fn estimate(
    buckets: impl Iterator<Item = (i128, i128, u64)>,
    rank: u64,
    lo: i128,
    hi: i128,
) -> i128 {
    let mut before = 0u64;
    for (low, high, count) in buckets {
        if count == 0 {
            continue;
        }
        if before + count >= rank {
            let first = low.max(lo);
            let last = (high - 1).min(hi).max(first);
            if count == 1 {
                return first + (last - first) / 2;
            }
            let within = i128::from(rank - before - 1);
            return first + (last - first) * within / i128::from(count - 1);
        }
        before += count;
    }
    hi
}

/// Index of the log2 bucket of `v`: 0 for 0, `k + 1` for `[2^k, 2^(k+1))`.
fn log2_index(v: u64) -> usize {
    (u64::BITS - v.leading_zeros()) as usize
}

/// `[low, high)` of log2 bucket `i`.
fn log2_bounds(i: usize) -> (i128, i128) {
    if i == 0 {
        (0, 1)
    } else {
        (1i128 << (i - 1), 1i128 << i)
    }
}

/// A histogram of `u64` values in power-of-two buckets: one bucket for 0,
/// then bucket `k` holds `[2^k, 2^(k+1))` for k in 0..64.
///
/// Serialized (JSON) as `{kind: "log2", count, sum, min, max, average,
/// percentiles, buckets: [{low, high, count}]}`, the buckets from the
/// lowest non-empty one to the highest (empty ones between included).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Log2Hist {
    /// Boxed: keeps [`Hist`] small.
    counts: Box<[u64; 65]>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
    exact: ExactValues<u64>,
}

impl Default for Log2Hist {
    fn default() -> Self {
        Log2Hist::new()
    }
}

impl Log2Hist {
    /// An empty histogram keeping 4,096 values for exact percentiles.
    pub fn new() -> Log2Hist {
        Log2Hist::with_exact_limit(DEFAULT_EXACT_LIMIT)
    }

    /// An empty histogram keeping up to `limit` values for exact
    /// percentiles (0: always estimate from the buckets).
    pub(crate) fn with_exact_limit(limit: usize) -> Log2Hist {
        Log2Hist {
            counts: Box::new([0; 65]),
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
            exact: ExactValues::new(limit),
        }
    }

    /// Adds one value.
    pub fn record(&mut self, v: u64) {
        self.counts[log2_index(v)] += 1;
        self.count += 1;
        self.sum = self.sum.saturating_add(u128::from(v));
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.exact.push(v);
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Log2Hist) {
        if other.count == 0 {
            return;
        }
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.exact.merge(&other.exact);
    }

    /// Returns the values recorded so far and empties `self` (same exact
    /// limit): one interval's histogram.
    pub fn take(&mut self) -> Log2Hist {
        let fresh = Log2Hist::with_exact_limit(self.exact.limit);
        std::mem::replace(self, fresh)
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the values (saturating).
    pub fn sum(&self) -> u128 {
        self.sum
    }

    /// Smallest value, if any.
    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    /// Largest value, if any.
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    /// Mean of the values, if any.
    pub fn average(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// Values in the bucket holding `v`.
    #[cfg(test)]
    pub(crate) fn count_in_bucket_of(&self, v: u64) -> u64 {
        self.counts[log2_index(v)]
    }

    /// The `thousandths`/1000 quantile (500: median, 999: p99.9), if any
    /// value; `thousandths` above 1000 counts as 1000.
    pub fn percentile(&self, thousandths: u32) -> Option<u64> {
        self.percentiles_of(&[thousandths]).map(|(v, _)| v[0])
    }

    /// p50, p90, p99 and p99.9, if any value.
    pub fn percentiles(&self) -> Option<Percentiles<u64>> {
        let (v, exact) = self.percentiles_of(&SUMMARY_THOUSANDTHS)?;
        Some(Percentiles {
            p50: v[0],
            p90: v[1],
            p99: v[2],
            p999: v[3],
            exact,
        })
    }

    fn percentiles_of(&self, qs: &[u32]) -> Option<(Vec<u64>, bool)> {
        if self.count == 0 {
            return None;
        }
        let ranks = qs.iter().map(|&q| rank(self.count, q.min(1000)));
        match self.exact.sorted() {
            Some(sorted) => Some((
                ranks
                    .map(|r| sorted.get(r as usize - 1).copied().unwrap_or(self.max))
                    .collect(),
                true,
            )),
            None => Some((
                ranks
                    .map(|r| {
                        let buckets = self.counts.iter().enumerate().map(|(i, &c)| {
                            let (l, h) = log2_bounds(i);
                            (l, h, c)
                        });
                        let e = estimate(buckets, r, self.min.into(), self.max.into());
                        u64::try_from(e).unwrap_or(self.max)
                    })
                    .collect(),
                false,
            )),
        }
    }

    /// The buckets from the lowest non-empty to the highest non-empty one
    /// (none when empty).
    pub fn buckets(&self) -> Vec<Bucket> {
        let first = self.counts.iter().position(|&c| c > 0);
        let last = self.counts.iter().rposition(|&c| c > 0);
        match (first, last) {
            (Some(f), Some(l)) => (f..=l)
                .map(|i| {
                    let (low, high) = log2_bounds(i);
                    Bucket {
                        low: Some(low),
                        high: Some(high),
                        count: self.counts[i],
                    }
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

#[derive(Serialize)]
struct HistView<T, S> {
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    range: Option<LinearRange>,
    count: u64,
    sum: S,
    min: Option<T>,
    max: Option<T>,
    average: Option<f64>,
    percentiles: Option<Percentiles<T>>,
    buckets: Vec<Bucket>,
}

impl Serialize for Log2Hist {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        HistView {
            kind: "log2",
            range: None,
            count: self.count,
            sum: self.sum,
            min: self.min(),
            max: self.max(),
            average: self.average(),
            percentiles: self.percentiles(),
            buckets: self.buckets(),
        }
        .serialize(s)
    }
}

/// Buckets of `step` needed from `min` up to `max` (`min < max`,
/// `step > 0`).
fn span_buckets(min: i64, max: i64, step: i64) -> u128 {
    let span = (i128::from(max) - i128::from(min)).unsigned_abs();
    span.div_ceil(u128::from(step.unsigned_abs()))
}

/// The bounds of a [`LinearHist`]: buckets `[min + k*step, min +
/// (k+1)*step)` up to `max` (exclusive; the last bucket is narrower when
/// `step` does not divide `max - min`), plus one bucket below `min` and one
/// at or above `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct LinearRange {
    /// Lowest value of the first bucket.
    pub min: i64,
    /// Bound above the last bucket (exclusive).
    pub max: i64,
    /// Width of a bucket.
    pub step: i64,
}

impl LinearRange {
    /// Checks `min < max`, `step > 0` and at most 10,000 buckets.
    pub fn new(min: i64, max: i64, step: i64) -> Result<LinearRange, HistError> {
        if min >= max {
            return Err(HistError::EmptyRange { min, max });
        }
        if step <= 0 {
            return Err(HistError::BadStep { step });
        }
        let buckets = span_buckets(min, max, step);
        if buckets > u128::from(MAX_LINEAR_BUCKETS) {
            return Err(HistError::TooManyBuckets {
                min,
                max,
                step,
                buckets,
            });
        }
        Ok(LinearRange { min, max, step })
    }

    /// Buckets between `min` and `max`.
    pub(crate) fn inner_buckets(&self) -> usize {
        span_buckets(self.min, self.max, self.step) as usize
    }
}

/// A histogram of `i64` values in fixed-width buckets (see
/// [`LinearRange`]).
///
/// Serialized (JSON) as [`Log2Hist`] is, with `kind: "linear"` and the
/// `range`; the below-min bucket has `low: null`, the above-max one
/// `high: null`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinearHist {
    range: LinearRange,
    /// Below min, the inner buckets, at or above max.
    counts: Vec<u64>,
    count: u64,
    sum: i128,
    min: i64,
    max: i64,
    exact: ExactValues<i64>,
}

impl LinearHist {
    /// An empty histogram over `range`, keeping 4,096 values for exact
    /// percentiles.
    pub fn new(range: LinearRange) -> LinearHist {
        LinearHist::with_exact_limit(range, DEFAULT_EXACT_LIMIT)
    }

    /// An empty histogram keeping up to `limit` values for exact
    /// percentiles.
    pub(crate) fn with_exact_limit(range: LinearRange, limit: usize) -> LinearHist {
        LinearHist {
            range,
            counts: vec![0; range.inner_buckets() + 2],
            count: 0,
            sum: 0,
            min: i64::MAX,
            max: i64::MIN,
            exact: ExactValues::new(limit),
        }
    }

    /// The bounds.
    pub fn range(&self) -> LinearRange {
        self.range
    }

    fn index(&self, v: i64) -> usize {
        let r = self.range;
        if v < r.min {
            0
        } else if v >= r.max {
            self.counts.len() - 1
        } else {
            1 + ((i128::from(v) - i128::from(r.min)) / i128::from(r.step)) as usize
        }
    }

    /// `[low, high)` of bucket `i` (open ends as `None`).
    fn bounds(&self, i: usize) -> (Option<i128>, Option<i128>) {
        let r = self.range;
        if i == 0 {
            (None, Some(r.min.into()))
        } else if i == self.counts.len() - 1 {
            (Some(r.max.into()), None)
        } else {
            let low = i128::from(r.min) + (i as i128 - 1) * i128::from(r.step);
            (
                Some(low),
                Some((low + i128::from(r.step)).min(r.max.into())),
            )
        }
    }

    /// Adds one value.
    pub fn record(&mut self, v: i64) {
        let i = self.index(v);
        self.counts[i] += 1;
        self.count += 1;
        self.sum = self.sum.saturating_add(i128::from(v));
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.exact.push(v);
    }

    /// Returns the values recorded so far and empties `self`.
    pub fn take(&mut self) -> LinearHist {
        let fresh = LinearHist::with_exact_limit(self.range, self.exact.limit);
        std::mem::replace(self, fresh)
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the values (saturating).
    pub fn sum(&self) -> i128 {
        self.sum
    }

    /// Smallest value, if any.
    pub fn min(&self) -> Option<i64> {
        (self.count > 0).then_some(self.min)
    }

    /// Largest value, if any.
    pub fn max(&self) -> Option<i64> {
        (self.count > 0).then_some(self.max)
    }

    /// Mean of the values, if any.
    pub fn average(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// The `thousandths`/1000 quantile, if any value.
    pub fn percentile(&self, thousandths: u32) -> Option<i64> {
        self.percentiles_of(&[thousandths]).map(|(v, _)| v[0])
    }

    /// p50, p90, p99 and p99.9, if any value.
    pub fn percentiles(&self) -> Option<Percentiles<i64>> {
        let (v, exact) = self.percentiles_of(&SUMMARY_THOUSANDTHS)?;
        Some(Percentiles {
            p50: v[0],
            p90: v[1],
            p99: v[2],
            p999: v[3],
            exact,
        })
    }

    fn percentiles_of(&self, qs: &[u32]) -> Option<(Vec<i64>, bool)> {
        if self.count == 0 {
            return None;
        }
        let ranks = qs.iter().map(|&q| rank(self.count, q.min(1000)));
        match self.exact.sorted() {
            Some(sorted) => Some((
                ranks
                    .map(|r| sorted.get(r as usize - 1).copied().unwrap_or(self.max))
                    .collect(),
                true,
            )),
            None => {
                let (lo, hi) = (i128::from(self.min), i128::from(self.max));
                Some((
                    ranks
                        .map(|r| {
                            let buckets = self.counts.iter().enumerate().map(|(i, &c)| {
                                let (l, h) = self.bounds(i);
                                (l.unwrap_or(lo), h.unwrap_or(hi + 1), c)
                            });
                            i64::try_from(estimate(buckets, r, lo, hi)).unwrap_or(self.max)
                        })
                        .collect(),
                    false,
                ))
            }
        }
    }

    /// The buckets from the lowest non-empty to the highest non-empty one
    /// (none when empty).
    pub fn buckets(&self) -> Vec<Bucket> {
        let first = self.counts.iter().position(|&c| c > 0);
        let last = self.counts.iter().rposition(|&c| c > 0);
        match (first, last) {
            (Some(f), Some(l)) => (f..=l)
                .map(|i| {
                    let (low, high) = self.bounds(i);
                    Bucket {
                        low,
                        high,
                        count: self.counts[i],
                    }
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

impl Serialize for LinearHist {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        HistView {
            kind: "linear",
            range: Some(self.range),
            count: self.count,
            sum: self.sum,
            min: self.min(),
            max: self.max(),
            average: self.average(),
            percentiles: self.percentiles(),
            buckets: self.buckets(),
        }
        .serialize(s)
    }
}

/// Which histogram to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HistShape {
    /// Power-of-two buckets ([`Log2Hist`]).
    #[default]
    Log2,
    /// Fixed-width buckets ([`LinearHist`]).
    Linear(LinearRange),
}

impl HistShape {
    /// An empty histogram of this shape.
    pub(crate) fn new_hist(self) -> Hist {
        match self {
            HistShape::Log2 => Hist::Log2(Log2Hist::new()),
            HistShape::Linear(r) => Hist::Linear(LinearHist::new(r)),
        }
    }
}

/// A histogram of either shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum Hist {
    /// Power-of-two buckets.
    Log2(Log2Hist),
    /// Fixed-width buckets.
    Linear(LinearHist),
}

impl Hist {
    /// Adds an unsigned value (saturated to `i64::MAX` in a linear one).
    pub(crate) fn record_u64(&mut self, v: u64) {
        match self {
            Hist::Log2(h) => h.record(v),
            Hist::Linear(h) => h.record(i64::try_from(v).unwrap_or(i64::MAX)),
        }
    }

    /// Adds a signed value. A log2 histogram cannot hold a negative value:
    /// it is not added and `false` is returned.
    pub(crate) fn record_i64(&mut self, v: i64) -> bool {
        match self {
            Hist::Log2(h) => match u64::try_from(v) {
                Ok(u) => {
                    h.record(u);
                    true
                }
                Err(_) => false,
            },
            Hist::Linear(h) => {
                h.record(v);
                true
            }
        }
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        match self {
            Hist::Log2(h) => h.count(),
            Hist::Linear(h) => h.count(),
        }
    }

    /// Returns the values so far and empties `self`.
    pub fn take(&mut self) -> Hist {
        match self {
            Hist::Log2(h) => Hist::Log2(h.take()),
            Hist::Linear(h) => Hist::Linear(h.take()),
        }
    }

    /// The buckets, as [`Log2Hist::buckets`].
    pub fn buckets(&self) -> Vec<Bucket> {
        match self {
            Hist::Log2(h) => h.buckets(),
            Hist::Linear(h) => h.buckets(),
        }
    }
}

#[cfg(test)]
mod tests;
