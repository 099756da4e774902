//! Unit tests of the parent module.

use super::*;

fn bucket(low: i128, high: i128, count: u64) -> Bucket {
    Bucket {
        low: Some(low),
        high: Some(high),
        count,
    }
}

#[test]
fn log2_buckets_hold_exact_counts() {
    let mut h = Log2Hist::new();
    for v in [0, 0, 1, 2, 3, 4, 7, 8, 1023, 1024, 2047, 2048] {
        h.record(v);
    }
    assert_eq!(
        h.buckets(),
        vec![
            bucket(0, 1, 2),
            bucket(1, 2, 1),
            bucket(2, 4, 2),
            bucket(4, 8, 2),
            bucket(8, 16, 1),
            bucket(16, 32, 0),
            bucket(32, 64, 0),
            bucket(64, 128, 0),
            bucket(128, 256, 0),
            bucket(256, 512, 0),
            bucket(512, 1024, 1),
            bucket(1024, 2048, 2),
            bucket(2048, 4096, 1),
        ]
    );
    assert_eq!(h.count(), 12);
    assert_eq!(h.sum(), 1 + 2 + 3 + 4 + 7 + 8 + 1023 + 1024 + 2047 + 2048);
    assert_eq!((h.min(), h.max()), (Some(0), Some(2048)));
    assert_eq!(h.count_in_bucket_of(1500), 2);
    let mut top = Log2Hist::new();
    top.record(u64::MAX);
    top.record(1 << 63);
    assert_eq!(top.buckets(), vec![bucket(1 << 63, 1 << 64, 2)]);
    assert_eq!(top.sum(), u128::from(u64::MAX) + (1u128 << 63));
}

#[test]
fn empty_hist_has_no_stats() {
    let h = Log2Hist::new();
    assert_eq!(h.buckets(), vec![]);
    assert_eq!((h.min(), h.max(), h.average()), (None, None, None));
    assert_eq!(h.percentiles(), None);
}

/// 1..=1000: nearest rank gives p50 = 500, p90 = 900, p99 = 990,
/// p99.9 = 999.
#[test]
fn exact_percentiles_use_nearest_rank() {
    let mut h = Log2Hist::new();
    for v in (1..=1000).rev() {
        h.record(v);
    }
    let p = h.percentiles().unwrap();
    assert_eq!(
        (p.p50, p.p90, p.p99, p.p999, p.exact),
        (500, 900, 990, 999, true)
    );
    assert_eq!(h.average(), Some(500.5));
    assert_eq!(h.percentile(1000), Some(1000));
    assert_eq!(h.percentile(0), Some(1));
    let mut one = Log2Hist::new();
    one.record(42);
    let p = one.percentiles().unwrap();
    assert_eq!((p.p50, p.p999), (42, 42));
}

/// Past the exact limit, the estimate lies in the true value's bucket,
/// interpolated inside it.
#[test]
fn estimated_percentiles_stay_in_the_right_bucket() {
    let mut h = Log2Hist::with_exact_limit(10);
    // 900 values of 100 (bucket [64,128)), 100 of 5000 ([4096,8192)).
    for _ in 0..900 {
        h.record(100);
    }
    for _ in 0..100 {
        h.record(5000);
    }
    let p = h.percentiles().unwrap();
    assert!(!p.exact);
    // 100s lie in [64, 128), narrowed to [100, 127] by the minimum:
    // rank 500 of 900 gives 100 + 27 * 499 / 899 = 114, rank 900 its
    // top, 127. The 5000s lie in [4096, 8192), narrowed to [4096,
    // 5000]: rank 990 is the 90th of 100, 4096 + 904 * 89 / 99 = 4908;
    // rank 999, 4096 + 904 * 98 / 99 = 4990.
    assert_eq!((p.p50, p.p90, p.p99, p.p999), (114, 127, 4908, 4990));
    for (estimate, truth) in [(p.p50, 100), (p.p90, 100), (p.p99, 5000), (p.p999, 5000)] {
        assert_eq!(log2_index(estimate), log2_index(truth));
    }
    // Spread values: 1..=1024 in [512, 1024) hold ranks 512..=1023.
    let mut s = Log2Hist::with_exact_limit(0);
    for v in 1..=1024 {
        s.record(v);
    }
    // rank 512 is the first of bucket [512,1024): its low end.
    assert_eq!(s.percentile(500), Some(512));
    // rank 922 (p90): 512 + 511 * (922 - 511 - 1) / 511 = 922.
    assert_eq!(s.percentile(900), Some(922));
    // p99.9: rank 1023 is the last of [512,1024): 1023.
    assert_eq!(s.percentile(999), Some(1023));
    assert_eq!(s.percentile(1000), Some(1024));
}

proptest::proptest! {
    /// The estimate of every percentile lies in the bucket of the
    /// exact nearest-rank value, for log2 and linear histograms.
    #[test]
    fn estimates_share_the_exact_bucket(
        values in proptest::collection::vec(0u64..1_000_000, 1..300),
        q in 0u32..=1000,
    ) {
        let mut exact = Log2Hist::new();
        let mut est = Log2Hist::with_exact_limit(0);
        let range = LinearRange::new(1000, 900_000, 7000).unwrap();
        let mut lexact = LinearHist::new(range);
        let mut lest = LinearHist::with_exact_limit(range, 0);
        for &v in &values {
            exact.record(v);
            est.record(v);
            lexact.record(v as i64);
            lest.record(v as i64);
        }
        let (x, e) = (exact.percentile(q).unwrap(), est.percentile(q).unwrap());
        proptest::prop_assert_eq!(log2_index(x), log2_index(e), "exact {} estimate {}", x, e);
        let (x, e) = (lexact.percentile(q).unwrap(), lest.percentile(q).unwrap());
        proptest::prop_assert_eq!(lexact.index(x), lest.index(e), "exact {} estimate {}", x, e);
        proptest::prop_assert!(e >= lexact.min().unwrap() && e <= lexact.max().unwrap());
    }
}

#[test]
fn merge_and_take() {
    let mut a = Log2Hist::with_exact_limit(3);
    a.record(1);
    a.record(2);
    let mut b = Log2Hist::with_exact_limit(3);
    b.record(8);
    a.merge(&b);
    assert!(a.percentiles().unwrap().exact);
    assert_eq!(a.percentile(1000), Some(8));
    a.merge(&b);
    assert_eq!(a.count(), 4);
    assert!(!a.percentiles().unwrap().exact);
    let taken = a.take();
    assert_eq!(taken.count(), 4);
    assert_eq!(a.count(), 0);
    a.record(3);
    assert!(a.percentiles().unwrap().exact);
}

#[test]
fn linear_range_is_checked() {
    assert_eq!(
        LinearRange::new(10, 10, 1),
        Err(HistError::EmptyRange { min: 10, max: 10 })
    );
    assert_eq!(
        LinearRange::new(0, 10, 0),
        Err(HistError::BadStep { step: 0 })
    );
    assert_eq!(
        LinearRange::new(0, 10_001, 1),
        Err(HistError::TooManyBuckets {
            min: 0,
            max: 10_001,
            step: 1,
            buckets: 10_001
        })
    );
    assert_eq!(
        LinearRange::new(i64::MIN, i64::MAX, 1)
            .unwrap_err()
            .to_string(),
        format!(
            "linear histogram {},{},1 would have {} buckets, more than 10000: use a \
             larger step or a narrower range",
            i64::MIN,
            i64::MAX,
            u64::MAX
        )
    );
    assert_eq!(
        LinearRange::new(0, 10_000, 1).unwrap().inner_buckets(),
        10_000
    );
    assert_eq!(LinearRange::new(0, 25, 10).unwrap().inner_buckets(), 3);
}

#[test]
fn linear_buckets_hold_exact_counts() {
    assert_eq!(
        LinearRange::new(0, 25, 0),
        Err(HistError::BadStep { step: 0 })
    );
    let mut h = LinearHist::new(LinearRange::new(0, 25, 10).unwrap());
    for v in [-5, -1, 0, 9, 10, 19, 19, 20, 24, 25, 1000] {
        h.record(v);
    }
    let open = |low: Option<i128>, high: Option<i128>, count| Bucket { low, high, count };
    assert_eq!(
        h.buckets(),
        vec![
            open(None, Some(0), 2),
            bucket(0, 10, 2),
            bucket(10, 20, 3),
            bucket(20, 25, 2),
            open(Some(25), None, 2),
        ]
    );
    assert_eq!((h.min(), h.max(), h.sum()), (Some(-5), Some(1000), 1120));
    let p = h.percentiles().unwrap();
    // sorted: -5 -1 0 9 10 19 19 20 24 25 1000; rank 6 = 19.
    assert_eq!((p.p50, p.p90, p.p99, p.exact), (19, 25, 1000, true));
    // Estimated: ranks 10 and 11 are in the above-max bucket
    // [25, 1000]: its first and last value.
    let mut e = LinearHist::with_exact_limit(h.range(), 0);
    for v in [-5, -1, 0, 9, 10, 19, 19, 20, 24, 25, 1000] {
        e.record(v);
    }
    assert_eq!(e.percentile(900), Some(25));
    assert_eq!(e.percentile(1000), Some(1000));
    assert_eq!(e.percentile(0), Some(-5));
}

#[test]
fn json_shape() {
    let mut h = Log2Hist::new();
    h.record(0);
    h.record(3);
    h.record(3);
    let json = serde_json::to_string(&h).unwrap();
    assert_eq!(
        json,
        r#"{"kind":"log2","count":3,"sum":6,"min":0,"max":3,"average":2.0,"percentiles":{"p50":3,"p90":3,"p99":3,"p999":3,"exact":true},"buckets":[{"low":0,"high":1,"count":1},{"low":1,"high":2,"count":0},{"low":2,"high":4,"count":2}]}"#
    );
    let mut l = Hist::Linear(LinearHist::new(LinearRange::new(0, 10, 5).unwrap()));
    l.record_i64(12);
    let json = serde_json::to_string(&l).unwrap();
    assert_eq!(
        json,
        r#"{"kind":"linear","range":{"min":0,"max":10,"step":5},"count":1,"sum":12,"min":12,"max":12,"average":12.0,"percentiles":{"p50":12,"p90":12,"p99":12,"p999":12,"exact":true},"buckets":[{"low":10,"high":null,"count":1}]}"#
    );
}
