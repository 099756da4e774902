//! How `calls` prints the engine's trees: error paths (the default),
//! function_graph-like trees (`--graph`), or one JSON object per tree.

use std::io::{self, Write};

use kprobe_perf_engine::analysis::render::format_duration;
use kprobe_perf_engine::analysis::{Frame, Missing};
use kprobe_perf_engine::{CallTree, ReturnKind, TracedFunction};

/// What is printed of each tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The root call and its path down to where its error arose.
    Errors,
    /// The whole tree, indented, with its self times.
    Graph,
    /// One JSON object per tree.
    Json,
}

/// Which trees are printed, and how.
pub(crate) struct Renderer {
    mode: Mode,
    /// Print root calls that returned no error (errors mode).
    success: bool,
    /// Only root calls at least this long.
    min_ns: Option<u64>,
    /// Print the entry arguments.
    args: bool,
}

impl Renderer {
    pub(crate) fn new(mode: Mode, success: bool, min_ns: Option<u64>, args: bool) -> Renderer {
        Renderer {
            mode,
            success,
            min_ns,
            args,
        }
    }

    /// Whether `tree` is printed: an error (or --success, --graph,
    /// --json), and at least --min long (a root of unknown duration is
    /// not).
    fn shows(&self, tree: &CallTree) -> bool {
        let failed = tree.root().error.is_some();
        let by_outcome = failed || self.success || self.mode != Mode::Errors;
        let by_time = match self.min_ns {
            Some(min) => tree.root().duration_ns().is_some_and(|d| d >= min),
            None => true,
        };
        by_outcome && by_time
    }

    /// Writes `tree` if it is shown; returns whether it was.
    pub(crate) fn tree(
        &self,
        w: &mut impl Write,
        tree: &CallTree,
        functions: &[TracedFunction],
    ) -> io::Result<bool> {
        if !self.shows(tree) {
            return Ok(false);
        }
        let mut out = String::new();
        match self.mode {
            Mode::Errors => self.errors(&mut out, tree, functions),
            Mode::Graph => self.graph(&mut out, tree, functions),
            Mode::Json => out = json(tree, functions).to_string() + "\n",
        }
        w.write_all(out.as_bytes())?;
        Ok(true)
    }

    /// The root's line, then the error path (or the root alone), then
    /// what is missing.
    fn errors(&self, out: &mut String, tree: &CallTree, functions: &[TracedFunction]) {
        head(out, tree, functions);
        let mut path = tree.error_path();
        if path.is_empty() {
            path.push(0);
        }
        for i in path {
            let f = &tree.frames[i];
            out.push_str(&format!(
                "  {:>10}  {:indent$}{}{} = {}\n",
                duration(f),
                "",
                name(functions, f.function),
                self.call_args(f, functions),
                ret(f, functions),
                indent = 2 * f.depth as usize
            ));
        }
        missing(out, tree, functions);
    }

    /// function_graph's layout: `name() {` ... `} = ret`, a leaf as
    /// `name() = ret;`, durations where each call closes; then the self
    /// times.
    fn graph(&self, out: &mut String, tree: &CallTree, functions: &[TracedFunction]) {
        head(out, tree, functions);
        let mut open: Vec<usize> = Vec::new();
        let close = |out: &mut String, j: usize| {
            let f = &tree.frames[j];
            out.push_str(&format!(
                "  {:>10} | {:indent$}}} = {} /* {} */\n",
                duration(f),
                "",
                ret(f, functions),
                name(functions, f.function),
                indent = 2 * f.depth as usize
            ));
        };
        for (i, f) in tree.frames.iter().enumerate() {
            while open
                .last()
                .is_some_and(|&j| tree.frames[j].depth >= f.depth)
            {
                if let Some(j) = open.pop() {
                    close(out, j);
                }
            }
            let leaf = tree.frames.get(i + 1).is_none_or(|n| n.depth <= f.depth);
            let call = format!(
                "{}{}",
                name(functions, f.function),
                self.call_args(f, functions)
            );
            let indent = 2 * f.depth as usize;
            if leaf {
                out.push_str(&format!(
                    "  {:>10} | {:indent$}{call} = {};\n",
                    duration(f),
                    "",
                    ret(f, functions)
                ));
            } else {
                out.push_str(&format!("  {:>10} | {:indent$}{call} {{\n", "", ""));
                open.push(i);
            }
        }
        while let Some(j) = open.pop() {
            close(out, j);
        }
        let times: Vec<String> = tree
            .self_times()
            .iter()
            .map(|t| {
                let calls = if t.calls > 1 {
                    format!(" ({} calls)", t.calls)
                } else {
                    String::new()
                };
                format!(
                    "{} {}{calls}",
                    name(functions, t.function),
                    format_duration(t.self_ns, None)
                )
            })
            .collect();
        out.push_str(&format!("  self: {}\n", times.join(", ")));
        missing(out, tree, functions);
    }

    /// `(name=value, ...)` with --args (BTF's names, as many as the
    /// function takes), else `()`.
    fn call_args(&self, f: &Frame, functions: &[TracedFunction]) -> String {
        if !self.args {
            return "()".into();
        }
        let params = functions.get(f.function).map_or(&[][..], |t| &t.params[..]);
        let shown: Vec<String> = f
            .args
            .iter()
            .zip(params)
            .map(|(v, p)| format!("{p}={v}"))
            .collect();
        format!("({})", shown.join(", "))
    }
}

fn name(functions: &[TracedFunction], i: usize) -> &str {
    functions.get(i).map_or("?", |f| f.name.as_str())
}

fn duration(f: &Frame) -> String {
    f.duration_ns()
        .map_or_else(|| "?".into(), |d| format_duration(d, None))
}

/// The return value as the function's type says: an error by name, an
/// integer in decimal, a pointer in hex; `?` when not seen.
fn ret(f: &Frame, functions: &[TracedFunction]) -> String {
    if let Some(e) = f.error {
        return e.to_string();
    }
    let Some(v) = f.retval else {
        return "?".into();
    };
    match functions.get(f.function).map(|t| t.returns) {
        Some(ReturnKind::Integer { signed: true, .. }) => (v as i64).to_string(),
        Some(ReturnKind::Integer { .. }) => v.to_string(),
        Some(ReturnKind::Void) => "void".into(),
        _ => format!("{v:#x}"),
    }
}

/// `comm-tid [cpu] seconds: root = ret (duration)` and `(incomplete)`.
fn head(out: &mut String, tree: &CallTree, functions: &[TracedFunction]) {
    let root = tree.root();
    let at = root.entry_ns.or(root.return_ns).unwrap_or(0);
    out.push_str(&format!(
        "{}-{} [{:03}] {}.{:06}: {} = {} ({}){}\n",
        tree.comm,
        tree.tid,
        root.cpu,
        at / 1_000_000_000,
        at % 1_000_000_000 / 1_000,
        name(functions, root.function),
        ret(root, functions),
        duration(root),
        if tree.is_complete() {
            ""
        } else {
            " INCOMPLETE"
        }
    ));
}

/// What an incomplete tree lacks, in words, frames by their function.
fn missing_text(m: &Missing, tree: &CallTree, functions: &[TracedFunction]) -> String {
    match m {
        Missing::Return { frame } => {
            let f = tree.frames.get(*frame).map_or(usize::MAX, |f| f.function);
            format!(
                "the return of {} (depth {}) was not seen: a return probe missed it",
                name(functions, f),
                tree.frames.get(*frame).map_or(0, |f| f.depth)
            )
        }
        Missing::Entry { function } => format!(
            "a return of {} came without its entry: the calls after it may belong under it",
            name(functions, *function)
        ),
        other => other.to_string(),
    }
}

fn missing(out: &mut String, tree: &CallTree, functions: &[TracedFunction]) {
    for m in &tree.missing {
        out.push_str(&format!(
            "  incomplete: {}\n",
            missing_text(m, tree, functions)
        ));
    }
}

/// One tree as a JSON object: the thread, the root's outcome, the error
/// path (function names), every frame, the self times, what is missing.
pub(crate) fn json(tree: &CallTree, functions: &[TracedFunction]) -> serde_json::Value {
    let root = tree.root();
    let frames: Vec<serde_json::Value> = tree
        .frames
        .iter()
        .map(|f| {
            let params = functions.get(f.function).map_or(&[][..], |t| &t.params[..]);
            let args: serde_json::Map<String, serde_json::Value> = f
                .args
                .iter()
                .zip(params)
                .map(|(v, p)| (p.clone(), v.to_string().into()))
                .collect();
            serde_json::json!({
                "function": name(functions, f.function),
                "depth": f.depth,
                "parent": f.parent,
                "cpu": f.cpu,
                "entry_ns": f.entry_ns,
                "return_ns": f.return_ns,
                "duration_ns": f.duration_ns(),
                "self_ns": f.self_ns,
                "ret": f.retval_signed(),
                "error": f.error.map(|e| e.to_string()),
                "args": args,
            })
        })
        .collect();
    let self_times: Vec<serde_json::Value> = tree
        .self_times()
        .iter()
        .map(|t| {
            serde_json::json!({
                "function": name(functions, t.function),
                "calls": t.calls,
                "total_ns": t.total_ns,
                "self_ns": t.self_ns,
            })
        })
        .collect();
    serde_json::json!({
        "comm": &*tree.comm,
        "pid": tree.pid,
        "tid": tree.tid,
        "root": name(functions, root.function),
        "ret": root.retval_signed(),
        "error": root.error.map(|e| e.to_string()),
        "duration_ns": root.duration_ns(),
        "complete": tree.is_complete(),
        "missing": tree.missing.iter().map(|m| missing_text(m, tree, functions)).collect::<Vec<_>>(),
        "error_path": tree.error_path().iter().map(|&i| name(functions, tree.frames[i].function)).collect::<Vec<_>>(),
        "frames": frames,
        "self_times": self_times,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kprobe_perf_engine::{CallEvent, CallSite, CallTreeBuilder, CallTreeOptions};

    /// open -> walk -> lookup (-ENOENT), on thread 7 of `cat`.
    fn tree() -> (CallTree, Vec<TracedFunction>) {
        let int = ReturnKind::Integer {
            size: 4,
            signed: true,
        };
        let functions = vec![
            TracedFunction::new("open", int, true),
            TracedFunction::new("walk", ReturnKind::Pointer, false),
            TracedFunction::new("lookup", int, false),
        ];
        let mut b = CallTreeBuilder::new(functions.clone(), CallTreeOptions::default());
        let enoent = Some((-2i64) as u64);
        for (f, site, t) in [
            (0, CallSite::Entry, 1_000),
            (1, CallSite::Entry, 2_000),
            (2, CallSite::Entry, 3_000),
            (2, CallSite::Return { retval: enoent }, 4_500),
            (1, CallSite::Return { retval: enoent }, 5_000),
            (0, CallSite::Return { retval: enoent }, 9_000),
        ] {
            let mut e = CallEvent::new(f, site, 7, 7, t);
            e.comm = "cat".into();
            b.record(e);
        }
        (b.take_finished().remove(0), functions)
    }

    fn render(mode: Mode, success: bool, min_ns: Option<u64>) -> String {
        let (t, functions) = tree();
        let mut out = Vec::new();
        Renderer::new(mode, success, min_ns, false)
            .tree(&mut out, &t, &functions)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn errors_mode_prints_the_path_to_where_the_error_arose() {
        assert_eq!(
            render(Mode::Errors, false, None),
            "cat-7 [000] 0.000001: open = -ENOENT (8.000us)\n\
             \x20    8.000us  open() = -ENOENT\n\
             \x20    3.000us    walk() = ERR_PTR(-ENOENT)\n\
             \x20    1.500us      lookup() = -ENOENT\n"
        );
    }

    #[test]
    fn graph_mode_nests_and_ends_with_self_times() {
        assert_eq!(
            render(Mode::Graph, true, None),
            "cat-7 [000] 0.000001: open = -ENOENT (8.000us)\n\
             \x20            | open() {\n\
             \x20            |   walk() {\n\
             \x20    1.500us |     lookup() = -ENOENT;\n\
             \x20    3.000us |   } = ERR_PTR(-ENOENT) /* walk */\n\
             \x20    8.000us | } = -ENOENT /* open */\n\
             \x20 self: open 5.000us, walk 1.500us, lookup 1.500us\n"
        );
    }

    #[test]
    fn min_keeps_the_slow_roots_only() {
        assert!(render(Mode::Graph, true, Some(8_001)).is_empty());
        assert!(!render(Mode::Graph, true, Some(8_000)).is_empty());
    }

    #[test]
    fn json_has_the_path_and_frames() {
        let (t, functions) = tree();
        let v = json(&t, &functions);
        assert_eq!(v["error"], "-ENOENT");
        assert_eq!(v["complete"], true);
        assert_eq!(
            v["error_path"],
            serde_json::json!(["open", "walk", "lookup"])
        );
        assert_eq!(v["frames"][2]["parent"], 1);
        assert_eq!(v["frames"][2]["ret"], -2);
        assert_eq!(v["self_times"][0]["function"], "open");
    }
}
