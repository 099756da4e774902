use super::*;
use kprobe_perf_engine::cli::plan::{self, BackendChoice};
use kprobe_perf_engine::{Arch, ProbeSpec};
use serde_json::{Map, Value as Json};
use std::sync::Arc;

/// The object as a `serde_json::Value` map prints it: the layout the
/// writer must reproduce byte for byte.
fn reference(e: &Event, plan: &ProbePlan, symbols: &KernelSymbols) -> String {
    fn value(v: &Value, symbols: &KernelSymbols) -> Json {
        match v {
            Value::Int {
                raw,
                ty: BaseType::Signed(_),
            } => json!(*raw as i64),
            Value::Int {
                raw,
                ty: BaseType::Symbol,
            } => json!(location(symbols, *raw)),
            Value::Int { raw, .. } => json!(raw),
            Value::Str(s) => json!(s),
            Value::Array(items) => Json::Array(items.iter().map(|i| value(i, symbols)).collect()),
            Value::Unknown => Json::Null,
        }
    }
    let mut args = Map::new();
    let mut unknown = std::collections::BTreeMap::new();
    for (a, v) in plan.args.iter().zip(&e.args) {
        args.insert(a.name.clone(), value(v, symbols));
        // The last of equal names is the one printed.
        unknown.insert(a.name.clone(), matches!(v, Value::Unknown));
    }
    let unknown: Vec<&String> = unknown
        .iter()
        .filter(|(_, u)| **u)
        .map(|(n, _)| n)
        .collect();
    let mut obj = json!({
        "type": "event",
        "event": plan.event,
        "comm": e.comm.as_ref(),
        "pid": e.pid,
        "tid": e.tid,
        "cpu": e.cpu,
        "time_ns": e.time_ns,
        "probe_addr": e.probe_addr,
        "args": args,
    });
    if let Json::Object(m) = &mut obj {
        if !unknown.is_empty() {
            m.insert("unknown".into(), json!(unknown));
        }
        match e.ret_addr {
            Some(r) => {
                m.insert("function".into(), json!(function(symbols, e.probe_addr)));
                m.insert("ret_addr".into(), json!(r));
                m.insert("ret_location".into(), json!(location(symbols, r)));
            }
            None => {
                m.insert("location".into(), json!(location(symbols, e.probe_addr)));
            }
        }
    }
    obj.to_string()
}

#[test]
fn objects_match_a_sorted_serde_json_map_byte_for_byte() {
    let symbols = crate::test_support::open_symbols();
    let plan = |spec: &str| crate::test_support::planned(spec, &symbols, BackendChoice::Tracefs);
    let plans = [
        // Names out of order, so that the writer must sort them.
        plan("p:do_sys_openat2 zz=%di:s32 flags=%dx:x32 a=%cx:u16 path=+0(%si):string"),
        plan("r:do_sys_open ret=$retval:s64 at=%di:symbol"),
        plan("p:do_sys_open"),
        plan("p:do_sys_openat2 arr=+0(%si):u8[3] s=+0(%si):string"),
    ];
    let int = |raw: u64, ty| Value::Int { raw, ty };
    let event = |probe: usize, comm: &str, args: Vec<Value>| {
        let mut e = Event::default();
        e.probe = probe;
        e.cpu = 3;
        e.pid = 41;
        e.tid = -1;
        e.comm = Arc::from(comm);
        e.time_ns = u64::MAX;
        e.probe_addr = if probe == 1 || probe == 2 {
            0xffff_ffff_8123_4690
        } else {
            0xffff_ffff_8123_45a0
        };
        e.ret_addr = (probe == 1).then_some(0xffff_ffff_8123_45b7);
        e.args = args;
        e
    };
    let strings = [
        "plain",
        "",
        "quote\" back\\slash",
        "tab\tnew\nline\r\u{1}\u{1f}",
        "del\u{7f} é ✓ 𝄞",
        "</script>",
    ];
    let mut events = Vec::new();
    for s in strings {
        events.push(event(
            0,
            s,
            vec![
                int(u64::MAX - 99, BaseType::Signed(32)),
                int(0x8000, BaseType::Hex(32)),
                int(420, BaseType::Unsigned(16)),
                Value::Str(Some(s.to_string())),
            ],
        ));
    }
    events.push(event(
        0,
        "x",
        vec![
            int(0, BaseType::Signed(64)),
            int(u64::MAX, BaseType::Hex(64)),
            int(0, BaseType::Unsigned(8)),
            Value::Str(None),
        ],
    ));
    events.push(event(
        1,
        "ret",
        vec![
            int(u64::MAX, BaseType::Signed(64)),
            int(0xffff_ffff_8123_4600, BaseType::Symbol),
        ],
    ));
    events.push(event(
        1,
        "ret",
        vec![Value::Unknown, int(7, BaseType::Symbol)],
    ));
    events.push(event(2, "bare", vec![]));
    // The usual object for every name, and for one too long for its
    // piece (which takes the general path, the second time too).
    let long = "n".repeat(100);
    for s in strings.iter().copied().chain([long.as_str()]) {
        events.push(event(2, s, vec![]));
    }
    events.push(event(
        3,
        "arr",
        vec![
            Value::Array(vec![
                int(1, BaseType::Unsigned(8)),
                Value::Unknown,
                Value::Array(vec![Value::Str(Some("a\"b".into()))]),
            ]),
            Value::Str(Some("s".into())),
        ],
    ));
    events.push(event(
        3,
        "empty",
        vec![Value::Array(vec![]), Value::Unknown],
    ));
    let mut w = EventWriter::default();
    let mut int_objects = 0;
    // Twice: the second time from the writer's caches.
    for _ in 0..2 {
        for e in &events {
            let mut out = Vec::new();
            w.event(&mut out, e, &plans[e.probe], &symbols);
            let ours = String::from_utf8(out).unwrap();
            assert_eq!(ours, reference(e, &plans[e.probe], &symbols));
            // And it parses back.
            serde_json::from_str::<Json>(&ours).unwrap();
            // The same event handed over as it waited in the queue.
            let mut room = vec![0u8; USUAL_OBJECT_ROOM];
            let put = crate::test_support::as_int_event(e, |i| {
                w.put_usual_ints(&mut room, i, &plans[e.probe], &symbols)
            });
            if let Some(Some(n)) = put {
                int_objects += 1;
                assert_eq!(
                    String::from_utf8(room[..n].to_vec()).unwrap(),
                    reference(e, &plans[e.probe], &symbols)
                );
            }
        }
    }
    // The argument-less probe's, but for the name too long for its piece.
    assert_eq!(int_objects, 2 * (1 + strings.len()));
}

#[test]
fn equal_argument_names_keep_the_last_as_a_map_does() {
    let symbols =
        KernelSymbols::parse("ffffffff81000000 T _text\nffffffff812345a0 T do_sys_openat2\n")
            .unwrap();
    let Ok(spec) = ProbeSpec::parse("p:do_sys_openat2 b=%di:u8 a=%si:u8", Arch::X86_64) else {
        panic!("spec");
    };
    let mut p = plan::resolve(spec, &symbols, Arch::X86_64, BackendChoice::Pmu).unwrap();
    // The grammar refuses equal names; a plan built by hand may still
    // have them.
    p.args[1].name = "b".into();
    let mut e = Event::default();
    e.args = vec![
        Value::Int {
            raw: 1,
            ty: BaseType::Unsigned(8),
        },
        Value::Int {
            raw: 2,
            ty: BaseType::Unsigned(8),
        },
    ];
    let mut out = Vec::new();
    EventWriter::default().event(&mut out, &e, &p, &symbols);
    assert_eq!(String::from_utf8(out).unwrap(), reference(&e, &p, &symbols));
}
