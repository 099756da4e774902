//! `record --count-by`, `--hist`, `--lhist` over a workload of known
//! sizes (`write_sizes`: 3 writes of 1 byte by thread `kpw_small`, 5 of
//! 100 bytes by `kpw_medium`, 7 of 5000 bytes by `kpw_large`, each one
//! call of vfs_write): exact counts per key and per bucket, in text and
//! JSON, and `-q` prints only the maps.

use std::process::{Command, Output};

use kprobe_perf_tests::{kprobe_perf_bin, kprobes_available};

fn record(extra: &[&str]) -> Output {
    let out = Command::new(kprobe_perf_bin())
        .args(["record", "-q", "-e", "p:vfs_write count=$arg3:u64"])
        .args(extra)
        .args(["--", env!("CARGO_BIN_EXE_write_sizes")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

const MAPS: &[&str] = &[
    "--count-by",
    "comm",
    "--hist",
    "count",
    "--lhist",
    "count:0,6000,2000",
];

#[test]
fn count_by_comm_and_hist_in_text() {
    if !kprobes_available("count_by_comm_and_hist_in_text") {
        return;
    }
    let out = record(MAPS);
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    let lines: Vec<&str> = text.lines().collect();
    // The count map, highest first.
    assert_eq!(
        lines[..4],
        [
            "COMM        COUNT",
            "kpw_large       7",
            "kpw_medium      5",
            "kpw_small       3"
        ],
        "{text}"
    );
    // The log2 histogram: 1 byte, [64, 128), [4K, 8K).
    let bucket = |label: &str| -> Vec<u64> {
        lines
            .iter()
            .filter(|l| l.starts_with(label))
            .map(|l| {
                l[label.len()..]
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect()
    };
    assert_eq!(bucket("[1] "), [3]);
    assert_eq!(bucket("[64, 128) "), [5]);
    assert_eq!(bucket("[4K, 8K) "), [7]);
    // The linear one: [0, 2000) holds 1 and 100, [4000, 6000) 5000.
    assert_eq!(bucket("[0, 2000) "), [8]);
    assert_eq!(bucket("[2000, 4000) "), [0]);
    assert_eq!(bucket("[4000, 6000) "), [7]);
    // -q with maps: nothing but the maps on stdout.
    assert!(!text.contains("vfs_write:"), "{text}");
}

#[test]
fn count_by_and_hist_in_json() {
    if !kprobes_available("count_by_and_hist_in_json") {
        return;
    }
    let mut args = MAPS.to_vec();
    args.extend(["--count-by", "comm,count", "--json"]);
    let out = record(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "-q --json prints the maps only: {text}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    let counts = &v["maps"]["counts"];
    let rows = |t: &serde_json::Value| -> Vec<(String, u64)> {
        t["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let key: Vec<String> = r["key"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|k| k.to_string().trim_matches('"').to_string())
                    .collect();
                (key.join(","), r["count"].as_u64().unwrap())
            })
            .collect()
    };
    assert_eq!(
        rows(&counts[0]),
        [
            ("kpw_large".to_string(), 7),
            ("kpw_medium".into(), 5),
            ("kpw_small".into(), 3)
        ]
    );
    assert_eq!(counts[0]["total"].as_u64(), Some(15));
    assert_eq!(
        rows(&counts[1]),
        [
            ("kpw_large,5000".to_string(), 7),
            ("kpw_medium,100".into(), 5),
            ("kpw_small,1".into(), 3)
        ]
    );
    let hists = v["maps"]["hists"].as_array().unwrap();
    let buckets = |h: &serde_json::Value| -> Vec<(i64, u64)> {
        h["probes"][0]["hist"]["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["count"].as_u64() != Some(0))
            .map(|b| {
                (
                    b["low"].as_i64().unwrap_or(i64::MIN),
                    b["count"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(buckets(&hists[0]), [(1, 3), (64, 5), (4096, 7)]);
    assert_eq!(buckets(&hists[1]), [(0, 8), (4000, 7)]);
    assert_eq!(
        hists[0]["probes"][0]["hist"]["sum"].as_u64(),
        Some(3 + 500 + 35_000)
    );
}
