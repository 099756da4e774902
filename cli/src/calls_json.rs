//! `calls --json`: one tree as one JSON object, written straight into a
//! line buffer: no intermediate value, no allocation per frame. The
//! object's keys are in byte order (as a serde_json map writes them), and
//! strings are escaped as serde_json escapes them.

use std::fmt::Write;

use kprobe_perf_engine::analysis::{CallError, Frame, Missing};
use kprobe_perf_engine::{CallTree, TracedFunction};

/// The functions' names and parameters, already as JSON strings.
pub(crate) struct JsonNames {
    names: Vec<String>,
    /// Per function, its parameters' names as JSON strings, sorted (the
    /// order of a JSON object's keys), each with its index in the list.
    params: Vec<Vec<(String, usize)>>,
}

impl JsonNames {
    pub(crate) fn new(functions: &[TracedFunction]) -> JsonNames {
        let quoted = |s: &str| {
            let mut q = String::new();
            push_str(&mut q, s);
            q
        };
        JsonNames {
            names: functions.iter().map(|f| quoted(&f.name)).collect(),
            params: functions
                .iter()
                .map(|f| {
                    let mut p: Vec<(String, usize)> = f
                        .params
                        .iter()
                        .enumerate()
                        .map(|(i, p)| (quoted(p), i))
                        .collect();
                    // Stable: parameters of one name stay in order.
                    p.sort_by(|a, b| a.0.cmp(&b.0));
                    p
                })
                .collect(),
        }
    }

    fn name(&self, function: usize) -> &str {
        self.names.get(function).map_or("\"?\"", String::as_str)
    }
}

/// `s` as a JSON string, quoted, escaped as serde_json escapes: `"`, `\`
/// and the control characters (by their short forms where JSON has one).
pub(crate) fn push_str(out: &mut String, s: &str) {
    out.push('"');
    let mut plain = 0;
    for (i, b) in s.bytes().enumerate() {
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[plain..i]);
        match short {
            "" => {
                let _ = write!(out, "\\u{b:04x}");
            }
            s => out.push_str(s),
        }
        plain = i + 1;
    }
    out.push_str(&s[plain..]);
    out.push('"');
}

/// A number.
#[inline]
fn push_int(out: &mut String, v: impl itoa::Integer) {
    out.push_str(itoa::Buffer::new().format(v));
}

/// A number, or `null`.
#[inline]
fn push_opt(out: &mut String, v: Option<impl itoa::Integer>) {
    match v {
        Some(v) => push_int(out, v),
        None => out.push_str("null"),
    }
}

/// An error as a JSON string (`"-ENOENT"`, `"ERR_PTR(-ENOENT)"`,
/// `"NULL"`: nothing to escape), or `null`.
fn push_error(out: &mut String, e: Option<CallError>) {
    match e {
        Some(e) => {
            let _ = write!(out, "\"{e}\"");
        }
        None => out.push_str("null"),
    }
}

/// One tree as one line of JSON (see docs/calls.md, "JSON Lines");
/// `missing_text` says what a [`Missing`] lacks in words.
pub(crate) fn tree_line(
    out: &mut String,
    tree: &CallTree,
    names: &JsonNames,
    missing_text: impl Fn(&Missing) -> String,
) {
    let root = tree.root();
    out.push_str("{\"comm\":");
    push_str(out, &tree.comm);
    out.push_str(match tree.is_complete() {
        true => ",\"complete\":true",
        false => ",\"complete\":false",
    });
    out.push_str(",\"duration_ns\":");
    push_opt(out, root.duration_ns());
    out.push_str(",\"error\":");
    push_error(out, root.error);
    out.push_str(",\"error_path\":[");
    for (n, i) in tree.error_path().into_iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str(names.name(tree.frames[i].function));
    }
    out.push_str("],\"frames\":[");
    for (n, f) in tree.frames.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        frame(out, f, names);
    }
    out.push_str("],\"missing\":[");
    for (n, m) in tree.missing.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        push_str(out, &missing_text(m));
    }
    out.push_str("],\"pid\":");
    push_int(out, tree.pid);
    out.push_str(",\"ret\":");
    push_opt(out, root.retval_signed());
    out.push_str(",\"root\":");
    out.push_str(names.name(root.function));
    out.push_str(",\"self_times\":[");
    for (n, t) in tree.self_times().iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str("{\"calls\":");
        push_int(out, t.calls);
        out.push_str(",\"function\":");
        out.push_str(names.name(t.function));
        out.push_str(",\"self_ns\":");
        push_int(out, t.self_ns);
        out.push_str(",\"total_ns\":");
        push_int(out, t.total_ns);
        out.push('}');
    }
    out.push_str("],\"tid\":");
    push_int(out, tree.tid);
    out.push_str("}\n");
}

/// One frame's object.
fn frame(out: &mut String, f: &Frame, names: &JsonNames) {
    out.push_str("{\"args\":{");
    if !f.args.is_empty() {
        let params = names.params.get(f.function).map_or(&[][..], |p| &p[..]);
        let mut first = true;
        for (k, (p, i)) in params.iter().enumerate() {
            let Some(v) = f.args.get(*i) else { continue };
            // Of parameters of one name, the last with a value wins, as
            // in a map.
            let later = params[k + 1..]
                .iter()
                .take_while(|(q, _)| q == p)
                .any(|(_, j)| *j < f.args.len());
            if later {
                continue;
            }
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(p);
            out.push(':');
            push_str(out, &v.to_string());
        }
    }
    out.push_str("},\"cpu\":");
    push_int(out, f.cpu);
    out.push_str(",\"depth\":");
    push_int(out, f.depth);
    out.push_str(",\"duration_ns\":");
    push_opt(out, f.duration_ns());
    out.push_str(",\"entry_ns\":");
    push_opt(out, f.entry_ns);
    out.push_str(",\"error\":");
    push_error(out, f.error);
    out.push_str(",\"function\":");
    out.push_str(names.name(f.function));
    out.push_str(",\"parent\":");
    push_opt(out, f.parent);
    out.push_str(",\"ret\":");
    push_opt(out, f.retval_signed());
    out.push_str(",\"return_ns\":");
    push_opt(out, f.return_ns);
    out.push_str(",\"self_ns\":");
    push_opt(out, f.self_ns);
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        for s in [
            "plain",
            "",
            "a\"b\\c",
            "tab\there\nnew\rret",
            "\u{8}\u{c}\u{1}\u{1f}\u{7f}",
            "é ünïcode ✓",
        ] {
            let mut out = String::new();
            push_str(&mut out, s);
            assert_eq!(out, serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }
}
