//! `calls --timeline FILE`: every tree as slices on its thread in the
//! Chrome trace-event JSON format (`{"traceEvents": [...]}`, complete
//! events `"ph": "X"` in microseconds), which Perfetto UI and
//! chrome://tracing open. A call that returned an error is coloured
//! (`"cname": "terrible"`) and carries its error in `args`; a call whose
//! end was not seen is a slice of no duration with `"incomplete"`.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufWriter, Write};

use kprobe_perf_engine::{CallTree, TracedFunction};

/// The file being written: its events streamed, closed at the end.
pub(crate) struct Timeline {
    w: BufWriter<File>,
    /// An event was written (the next one needs a comma).
    any: bool,
    /// Threads already named (metadata events).
    named: HashSet<i32>,
}

impl Timeline {
    /// Starts the file's JSON object.
    pub(crate) fn create(file: File) -> io::Result<Timeline> {
        let mut w = BufWriter::new(file);
        w.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
        Ok(Timeline {
            w,
            any: false,
            named: HashSet::new(),
        })
    }

    fn event(&mut self, v: &serde_json::Value) -> io::Result<()> {
        if self.any {
            self.w.write_all(b",\n")?;
        }
        self.any = true;
        serde_json::to_writer(&mut self.w, v).map_err(io::Error::from)
    }

    /// Every frame of `tree` as a slice on its thread.
    pub(crate) fn tree(&mut self, tree: &CallTree, functions: &[TracedFunction]) -> io::Result<()> {
        if self.named.insert(tree.tid) {
            self.event(&serde_json::json!({
                "name": "thread_name", "ph": "M", "pid": tree.pid, "tid": tree.tid,
                "args": { "name": format!("{}-{}", tree.comm, tree.tid) },
            }))?;
        }
        for f in &tree.frames {
            let Some(start) = f.entry_ns.or(f.return_ns) else {
                continue;
            };
            let mut v = serde_json::json!({
                "name": functions.get(f.function).map_or("?", |t| t.name.as_str()),
                "cat": "call",
                "ph": "X",
                "ts": start as f64 / 1000.0,
                "dur": f.duration_ns().unwrap_or(0) as f64 / 1000.0,
                "pid": tree.pid,
                "tid": tree.tid,
                "args": { "ret": f.retval_signed(), "depth": f.depth },
            });
            if let Some(e) = f.error {
                v["cname"] = "terrible".into();
                v["args"]["error"] = e.to_string().into();
            }
            if f.duration_ns().is_none() {
                v["args"]["incomplete"] = "its entry or its return was not seen".into();
            }
            self.event(&v)?;
        }
        Ok(())
    }

    /// Closes the JSON object and writes it out.
    pub(crate) fn finish(mut self) -> io::Result<()> {
        self.w.write_all(b"\n]}\n")?;
        self.w.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kprobe_perf_engine::{CallEvent, CallSite, CallTreeBuilder, CallTreeOptions, ReturnKind};

    #[test]
    fn trees_become_complete_events_with_errors_marked() {
        let int = ReturnKind::Integer {
            size: 4,
            signed: true,
        };
        let functions = vec![
            TracedFunction::new("open", int, true),
            TracedFunction::new("lookup", int, false),
        ];
        let mut b = CallTreeBuilder::new(functions.clone(), CallTreeOptions::default());
        let enoent = Some((-2i64) as u64);
        for (f, site, t) in [
            (0, CallSite::Entry, 1_000),
            (1, CallSite::Entry, 2_000),
            (1, CallSite::Return { retval: enoent }, 2_500),
            (0, CallSite::Return { retval: Some(0) }, 4_000),
        ] {
            b.record(CallEvent::new(f, site, 5, 6, t));
        }
        let path = std::env::temp_dir().join(format!("kpf-timeline-{}.json", std::process::id()));
        let mut t = Timeline::create(File::create(&path).unwrap()).unwrap();
        for tree in b.take_finished() {
            t.tree(&tree, &functions).unwrap();
        }
        t.finish().unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let _ = std::fs::remove_file(&path);
        let events = v["traceEvents"].as_array().unwrap();
        assert_eq!(events[0]["ph"], "M");
        assert_eq!(events[1]["name"], "open");
        assert_eq!(events[1]["ts"], 1.0);
        assert_eq!(events[1]["dur"], 3.0);
        assert_eq!(
            (events[1]["pid"].clone(), events[1]["tid"].clone()),
            (5.into(), 6.into())
        );
        assert_eq!(events[2]["name"], "lookup");
        assert_eq!(events[2]["cname"], "terrible");
        assert_eq!(events[2]["args"]["error"], "-ENOENT");
        assert!(events[1].get("cname").is_none());
    }
}
