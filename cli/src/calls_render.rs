//! How `calls` prints the engine's trees: error paths (the default),
//! function_graph-like trees (`--graph`), or one JSON object per tree.

use std::fmt::Write as _;
use std::io::{self, Write};

use kprobe_perf_engine::analysis::render::write_duration;
use kprobe_perf_engine::analysis::{Frame, Missing};
use kprobe_perf_engine::{CallTree, ReturnKind, TracedFunction};

use crate::calls_json::{tree_line, JsonNames};

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

/// Bytes of text the renderer keeps before it writes them.
const BUFFERED: usize = 64 << 10;

/// Which trees are printed, and how.
pub(crate) struct Renderer {
    mode: Mode,
    /// Print root calls that returned no error (errors mode).
    success: bool,
    /// Only root calls at least this long.
    min_ns: Option<u64>,
    /// Print the entry arguments.
    args: bool,
    /// The text of the trees not yet written (up to [`BUFFERED`] bytes:
    /// written in large pieces, not copied again).
    buf: String,
    /// The functions' names as JSON strings (--json), made at the first
    /// tree.
    json_names: Option<JsonNames>,
}

impl Renderer {
    pub(crate) fn new(mode: Mode, success: bool, min_ns: Option<u64>, args: bool) -> Renderer {
        Renderer {
            mode,
            success,
            min_ns,
            args,
            buf: String::new(),
            json_names: None,
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

    /// Writes `tree` if it is shown (into the renderer's buffer, written
    /// out once it is large and by [`Renderer::flush`]); returns whether
    /// it was.
    pub(crate) fn tree(
        &mut self,
        w: &mut impl Write,
        tree: &CallTree,
        functions: &[TracedFunction],
    ) -> io::Result<bool> {
        if !self.shows(tree) {
            return Ok(false);
        }
        let mut out = std::mem::take(&mut self.buf);
        match self.mode {
            Mode::Errors => self.errors(&mut out, tree, functions),
            Mode::Graph => self.graph(&mut out, tree, functions),
            Mode::Json => {
                let names = self
                    .json_names
                    .get_or_insert_with(|| JsonNames::new(functions));
                tree_line(&mut out, tree, names, |m| missing_text(m, tree, functions));
            }
        }
        self.buf = out;
        if self.buf.len() >= BUFFERED {
            self.flush(w)?;
        }
        Ok(true)
    }

    /// Writes the trees' text not yet written.
    pub(crate) fn flush(&mut self, w: &mut impl Write) -> io::Result<()> {
        let written = w.write_all(self.buf.as_bytes());
        self.buf.clear();
        written
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
            out.push_str("  ");
            push_duration(out, f, 10);
            push_indent(out, 2 + 2 * f.depth as usize);
            out.push_str(name(functions, f.function));
            self.push_args(out, f, functions);
            out.push_str(" = ");
            push_ret(out, f, functions);
            out.push('\n');
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
            out.push_str("  ");
            push_duration(out, f, 10);
            out.push_str(" | ");
            push_indent(out, 2 * f.depth as usize);
            out.push_str("} = ");
            push_ret(out, f, functions);
            out.push_str(" /* ");
            out.push_str(name(functions, f.function));
            out.push_str(" */\n");
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
            out.push_str("  ");
            match leaf {
                true => push_duration(out, f, 10),
                false => push_indent(out, 10),
            }
            out.push_str(" | ");
            push_indent(out, 2 * f.depth as usize);
            out.push_str(name(functions, f.function));
            self.push_args(out, f, functions);
            if leaf {
                out.push_str(" = ");
                push_ret(out, f, functions);
                out.push_str(";\n");
            } else {
                out.push_str(" {\n");
                open.push(i);
            }
        }
        while let Some(j) = open.pop() {
            close(out, j);
        }
        out.push_str("  self: ");
        for (n, t) in tree.self_times().iter().enumerate() {
            if n > 0 {
                out.push_str(", ");
            }
            out.push_str(name(functions, t.function));
            out.push(' ');
            write_duration(out, t.self_ns, None);
            if t.calls > 1 {
                let _ = write!(out, " ({} calls)", t.calls);
            }
        }
        out.push('\n');
        missing(out, tree, functions);
    }

    /// `(name=value, ...)` with --args (BTF's names, as many as the
    /// function takes), else `()`.
    fn push_args(&self, out: &mut String, f: &Frame, functions: &[TracedFunction]) {
        if !self.args {
            out.push_str("()");
            return;
        }
        let params = functions.get(f.function).map_or(&[][..], |t| &t.params[..]);
        out.push('(');
        for (n, (v, p)) in f.args.iter().zip(params).enumerate() {
            if n > 0 {
                out.push_str(", ");
            }
            let _ = write!(out, "{p}={v}");
        }
        out.push(')');
    }
}

fn name(functions: &[TracedFunction], i: usize) -> &str {
    functions.get(i).map_or("?", |f| f.name.as_str())
}

/// Spaces to indent and pad with.
const SPACES: &str = "                                                                ";

/// `n` spaces.
fn push_indent(out: &mut String, n: usize) {
    let mut n = n;
    while n > 0 {
        let k = n.min(SPACES.len());
        out.push_str(&SPACES[..k]);
        n -= k;
    }
}

/// The frame's duration (`?` when not known), right-aligned in `width`.
fn push_duration(out: &mut String, f: &Frame, width: usize) {
    let at = out.len();
    match f.duration_ns() {
        Some(d) => write_duration(out, d, None),
        None => out.push('?'),
    }
    let len = out.len() - at;
    if len < width {
        out.insert_str(at, &SPACES[..(width - len).min(SPACES.len())]);
    }
}

/// The return value as the function's type says: an error by name, an
/// integer in decimal, a pointer in hex; `?` when not seen.
fn push_ret(out: &mut String, f: &Frame, functions: &[TracedFunction]) {
    if let Some(e) = f.error {
        let _ = write!(out, "{e}");
        return;
    }
    let Some(v) = f.retval else {
        out.push('?');
        return;
    };
    let _ = match functions.get(f.function).map(|t| t.returns) {
        Some(ReturnKind::Integer { signed: true, .. }) => write!(out, "{}", v as i64),
        Some(ReturnKind::Integer { .. }) => write!(out, "{v}"),
        Some(ReturnKind::Void) => write!(out, "void"),
        _ => write!(out, "{v:#x}"),
    };
}

/// `comm-tid [cpu] seconds: root = ret (duration)` and `(incomplete)`.
fn head(out: &mut String, tree: &CallTree, functions: &[TracedFunction]) {
    let root = tree.root();
    let at = root.entry_ns.or(root.return_ns).unwrap_or(0);
    let _ = write!(
        out,
        "{}-{} [{:03}] {}.{:06}: {} = ",
        tree.comm,
        tree.tid,
        root.cpu,
        at / 1_000_000_000,
        at % 1_000_000_000 / 1_000,
        name(functions, root.function),
    );
    push_ret(out, root, functions);
    out.push_str(" (");
    push_duration(out, root, 0);
    out.push(')');
    if !tree.is_complete() {
        out.push_str(" INCOMPLETE");
    }
    out.push('\n');
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
        let _ = writeln!(out, "  incomplete: {}", missing_text(m, tree, functions));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kprobe_perf_engine::{CallEvent, CallSite, CallTreeBuilder, CallTreeOptions};

    /// One tree as a serde_json value: what [`tree_line`] must write, byte
    /// for byte.
    fn json(tree: &CallTree, functions: &[TracedFunction]) -> serde_json::Value {
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
        let mut r = Renderer::new(mode, success, min_ns, false);
        r.tree(&mut out, &t, &functions).unwrap();
        r.flush(&mut out).unwrap();
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
        let v: serde_json::Value = serde_json::from_str(&render(Mode::Json, false, None)).unwrap();
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

    /// Trees with arguments, a missed return, a return without its entry,
    /// a root without its entry, and a thread name to escape.
    fn odd_trees() -> (Vec<CallTree>, Vec<TracedFunction>) {
        use kprobe_perf_engine::spec::BaseType;
        use kprobe_perf_engine::Value;
        let int = ReturnKind::Integer {
            size: 4,
            signed: true,
        };
        let mut open = TracedFunction::new("open", int, true);
        open.params = vec!["dfd".into(), "name".into(), "b".into(), "b".into()];
        let functions = vec![
            open,
            TracedFunction::new("walk\\x", ReturnKind::Pointer, false),
            TracedFunction::new("lookup", ReturnKind::Unknown, false),
        ];
        let mut b = CallTreeBuilder::new(functions.clone(), CallTreeOptions::default());
        let args = vec![
            Value::Int {
                raw: (-100i64) as u64,
                ty: BaseType::Signed(32),
            },
            Value::Str(Some("/tmp/\"x\"\n".into())),
            Value::Int {
                raw: 7,
                ty: BaseType::Hex(64),
            },
        ];
        let ret = |v: i64| CallSite::Return {
            retval: Some(v as u64),
        };
        for (f, site, t, tid) in [
            (0, ret(3), 500, 8),
            (0, CallSite::Entry, 1_000, 7),
            (1, CallSite::Entry, 2_000, 7),
            (2, CallSite::Entry, 3_000, 7),
            (1, ret(0), 5_000, 7),
            (2, ret(1), 5_500, 7),
            (0, ret(-13), 9_000, 7),
            (0, CallSite::Entry, 10_000, 7),
        ] {
            let mut e = CallEvent::new(f, site, 7, tid, t);
            e.comm = "c\"a\tt".into();
            if f == 0 && site == CallSite::Entry {
                e.args = args.clone();
            }
            b.record(e);
        }
        (b.finish(), functions)
    }

    #[test]
    fn json_lines_are_what_serde_json_writes_byte_for_byte() {
        let (mut trees, functions) = odd_trees();
        trees.push(tree().0);
        assert_eq!(trees.len(), 4);
        for args in [false, true] {
            let mut r = Renderer::new(Mode::Json, true, None, args);
            for t in &trees {
                let mut out = Vec::new();
                r.tree(&mut out, t, &functions).unwrap();
                r.flush(&mut out).unwrap();
                let want = json(t, &functions).to_string() + "\n";
                assert_eq!(String::from_utf8(out).unwrap(), want);
            }
        }
    }
}
