//! Unit tests of the parent module.

use super::*;
use crate::analysis::hist::Bucket;
use kprobe_perf_spec::BaseType;

/// vfs_read(fd, count), openat(path: string, flags), close(fd: s32).
fn probes() -> Vec<ProbeFields> {
    vec![
        ProbeFields::new(
            "vfs_read",
            vec![
                ArgField::new("fd", ArgKind::Integer),
                ArgField::new("count", ArgKind::Integer),
            ],
        ),
        ProbeFields::new(
            "openat",
            vec![
                ArgField::new("path", ArgKind::String),
                ArgField::new("arg2", ArgKind::Integer),
            ],
        ),
        ProbeFields::new("close", vec![ArgField::new("ret", ArgKind::Integer)]),
    ]
}

fn ev(probe: usize, comm: &str, pid: i32, args: Vec<Value>) -> Event {
    Event {
        probe,
        cpu: 1,
        pid,
        tid: pid,
        comm: Arc::from(comm),
        time_ns: 0,
        ip: 0,
        probe_addr: 0,
        ret_addr: None,
        callchain: Vec::new(),
        args,
    }
}

fn u(v: u64) -> Value {
    Value::new(v, BaseType::Unsigned(64))
}

fn read(comm: &str, pid: i32, count: u64) -> Event {
    ev(0, comm, pid, vec![u(3), u(count)])
}

fn table(t: &CountTable) -> Vec<(String, u64)> {
    t.rows
        .iter()
        .map(|r| {
            let k: Vec<String> = r.key.iter().map(ToString::to_string).collect();
            (k.join(","), r.count)
        })
        .collect()
}

#[test]
fn count_by_comm_and_pid() {
    let p = probes();
    let by = parse_count_by("comm, pid", &p).unwrap();
    assert_eq!(by.keys, vec![CountKey::Comm, CountKey::Pid]);
    let mut a = Aggregator::new(&p, vec![by], vec![]);
    for (comm, pid, n) in [("cat", 10, 3), ("dd", 20, 5), ("cat", 11, 3), ("sh", 5, 1)] {
        for _ in 0..n {
            a.record(&read(comm, pid, 1));
        }
    }
    let s = a.take();
    assert_eq!(s.counts[0].keys, vec!["comm", "pid"]);
    // Ties (3, 3) by key: cat,10 before cat,11.
    assert_eq!(
        table(&s.counts[0]),
        vec![
            ("dd,20".to_string(), 5),
            ("cat,10".to_string(), 3),
            ("cat,11".to_string(), 3),
            ("sh,5".to_string(), 1),
        ]
    );
    assert_eq!(s.counts[0].total, 12);
    assert_eq!(a.snapshot().counts[0].rows, vec![]);
}

#[test]
fn count_by_named_argument_and_probe() {
    let p = probes();
    let by = parse_count_by("probe,count", &p).unwrap();
    let mut a = Aggregator::new(&p, vec![by], vec![]);
    for count in [4096, 4096, 512, 4096, 1] {
        a.record(&read("cat", 1, count));
    }
    a.record(&ev(2, "cat", 1, vec![Value::new(0, BaseType::Signed(32))]));
    let s = a.snapshot();
    assert_eq!(
        table(&s.counts[0]),
        vec![
            ("vfs_read,4096".to_string(), 3),
            ("vfs_read,1".to_string(), 1),
            ("vfs_read,512".to_string(), 1),
            ("close,-".to_string(), 1),
        ]
    );
    let json = serde_json::to_string(&s.counts[0].rows[0]).unwrap();
    assert_eq!(json, r#"{"key":["vfs_read",4096],"count":3}"#);
    // A string key.
    let by = parse_count_by("path", &p).unwrap();
    let mut a = Aggregator::new(&p, vec![by], vec![]);
    for path in ["/etc/passwd", "/tmp", "/etc/passwd"] {
        a.record(&ev(1, "cat", 1, vec![Value::Str(Some(path.into())), u(0)]));
    }
    assert_eq!(
        table(&a.snapshot().counts[0]),
        vec![
            ("\"/etc/passwd\"".to_string(), 2),
            ("\"/tmp\"".to_string(), 1)
        ]
    );
}

#[test]
fn key_and_argument_errors() {
    let p = probes();
    assert_eq!(
        parse_count_by("comm,size", &p).unwrap_err().to_string(),
        "unknown key \"size\" in the count keys: the keys are comm, pid, tid, cpu, probe, or \
         an argument name (vfs_read: fd, count; openat: path, arg2; close: ret)"
    );
    assert_eq!(parse_count_by(" ", &p), Err(AnalysisError::EmptyKeyList));
    // argN by position when no probe has that name.
    let by = parse_count_by("arg1", &p).unwrap();
    assert_eq!(
        by.keys,
        vec![CountKey::Arg {
            name: "arg1".into(),
            index: vec![Some(0), Some(0), Some(0)]
        }]
    );
    // arg2 is a name in openat: the name wins, others lack it.
    let by = parse_count_by("arg2", &p).unwrap();
    assert_eq!(
        by.keys,
        vec![CountKey::Arg {
            name: "arg2".into(),
            index: vec![None, Some(1), None]
        }]
    );
    assert_eq!(
        parse_hist("path", &p).unwrap_err().to_string(),
        "a log2 histogram of path: argument path of probe openat is a string, not a number; \
         a histogram needs an integer argument (count its values by path instead)"
    );
    assert_eq!(
        parse_hist("len", &p).unwrap_err().to_string(),
        "no probe has an argument named \"len\" for a log2 histogram; the arguments are: vfs_read: fd, \
         count; openat: path, arg2; close: ret"
    );
    assert_eq!(
        parse_lhist("count:0,100", &p).unwrap_err().to_string(),
        "linear histogram \"count:0,100\": the range has 2 numbers, not 3; write \
         ARG:MIN,MAX,STEP, e.g. size:0,4096,512"
    );
    assert_eq!(
        parse_lhist("count", &p).unwrap_err().to_string(),
        "linear histogram \"count\": no ':' between the argument and its range; write \
         ARG:MIN,MAX,STEP, e.g. size:0,4096,512"
    );
    assert_eq!(
        parse_lhist("count:0,1k,10", &p).unwrap_err().to_string(),
        "linear histogram \"count:0,1k,10\": \"1k\" is not an integer; write \
         ARG:MIN,MAX,STEP, e.g. size:0,4096,512"
    );
    assert_eq!(
        parse_lhist("count:5,0,1", &p).unwrap_err(),
        AnalysisError::Hist(crate::analysis::HistError::EmptyRange { min: 5, max: 0 })
    );
    assert_eq!(
        parse_linear("0,100,10"),
        Ok(LinearRange::new(0, 100, 10).unwrap())
    );
    assert_eq!(
        parse_linear("0,x,10").unwrap_err().to_string(),
        "linear buckets \"0,x,10\": \"x\" is not an integer; write MIN,MAX,STEP, e.g. \
         0,1000,100"
    );
    assert_eq!(
        parse_linear("0,10,-1").unwrap_err().to_string(),
        "linear histogram step -1 must be above 0 (e.g. 0,1000,100)"
    );
    let plain = [ProbeFields::new("p", vec![])];
    assert!(parse_hist("x", &plain)
        .unwrap_err()
        .to_string()
        .ends_with("the arguments are: no probe has arguments"));
}

#[test]
fn hist_and_lhist_of_an_argument() {
    let p = probes();
    let hist = parse_hist("count", &p).unwrap();
    let lhist = parse_lhist("ret:-4,4,2", &p).unwrap();
    let log_ret = parse_hist("ret", &p).unwrap();
    let mut a = Aggregator::new(&p, vec![], vec![hist, lhist, log_ret]);
    for count in [0, 1, 100, 4096, 4096, 5000] {
        a.record(&read("cat", 1, count));
    }
    for ret in [-9, -2, -1, 0, 3, 7] {
        a.record(&ev(
            2,
            "cat",
            1,
            vec![Value::new(ret as u64, BaseType::Signed(32))],
        ));
    }
    let s = a.take();
    assert_eq!(s.hists[0].arg, "count");
    assert_eq!(s.hists[0].probes.len(), 1);
    let counts: Vec<(Option<i128>, u64)> = s.hists[0].probes[0]
        .hist
        .buckets()
        .iter()
        .map(|b| (b.low, b.count))
        .filter(|b| b.1 > 0)
        .collect();
    assert_eq!(
        counts,
        vec![(Some(0), 1), (Some(1), 1), (Some(64), 1), (Some(4096), 3)]
    );
    let ret = &s.hists[1].probes[0];
    assert_eq!(ret.probe, "close");
    let open = |low, high, count| Bucket { low, high, count };
    assert_eq!(
        ret.hist.buckets(),
        vec![
            open(None, Some(-4), 1),
            open(Some(-4), Some(-2), 0),
            open(Some(-2), Some(0), 2),
            open(Some(0), Some(2), 1),
            open(Some(2), Some(4), 1),
            open(Some(4), None, 1),
        ]
    );
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["hists"][1]["arg"], "ret");
    assert_eq!(json["hists"][1]["probes"][0]["probe"], "close");
    assert_eq!(
        json["hists"][1]["probes"][0]["hist"]["buckets"][0],
        serde_json::json!({"low": null, "high": -4, "count": 1})
    );
    assert_eq!(json["hists"][2]["probes"][0]["negative"], 3);
    // log2 of a signed argument: negatives counted apart.
    assert_eq!(s.hists[2].probes[0].negative, 3);
    assert_eq!(s.hists[2].probes[0].hist.count(), 3);
    assert!(a.snapshot().hists[0].probes.is_empty());
}
