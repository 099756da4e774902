//! Folded stacks, the format flame graph tools read: one line per distinct
//! stack, `comm;outermost;...;innermost COUNT`, sorted. With the
//! `flamegraph` feature, [`FoldedStacks::flamegraph`] draws them as an SVG
//! flame graph (with the `inferno` crate).
//!
//! ```
//! use std::sync::Arc;
//! use kprobe_perf_engine::analysis::FoldedStacks;
//! use kprobe_perf_engine::stack::NamedFrame;
//! use kprobe_perf_engine::Event;
//!
//! let frame = |name: &str| NamedFrame {
//!     symbol: Some(Arc::from(name)),
//!     object: Arc::from("[kernel.kallsyms]"),
//!     ..NamedFrame::default()
//! };
//! let mut event = Event::default();
//! event.comm = Arc::from("cat");
//! let mut folded = FoldedStacks::new();
//! // Frames innermost first, as `StackSymbolizer::frames_into` names them.
//! for _ in 0..2 {
//!     folded.add(&event, &[frame("do_sys_openat2"), frame("do_syscall_64")], None);
//! }
//! folded.add(&event, &[frame("vfs_read"), frame("do_syscall_64")], None);
//! assert_eq!(
//!     folded.lines(),
//!     ["cat;do_syscall_64;do_sys_openat2 2", "cat;do_syscall_64;vfs_read 1"]
//! );
//! ```

use std::collections::HashMap;
use std::io::Write;

use crate::decode::Event;
use crate::stack::NamedFrame;

/// Counts of folded stacks.
#[derive(Debug, Default, Clone)]
pub struct FoldedStacks {
    counts: HashMap<String, u64>,
    key: String,
}

impl FoldedStacks {
    /// No stack counted yet.
    pub fn new() -> FoldedStacks {
        FoldedStacks::default()
    }

    /// Counts the stack of `e`, whose frames are `frames`, innermost
    /// first. `innermost`, when given and not already the innermost
    /// frame's function, is added below it: a return probe's callchain
    /// starts at the caller, and this names the probed function.
    pub fn add(&mut self, e: &Event, frames: &[NamedFrame], innermost: Option<&str>) {
        let key = &mut self.key;
        key.clear();
        push_folded(key, &e.comm);
        for f in frames.iter().rev() {
            key.push(';');
            match &f.symbol {
                Some(s) => push_folded(key, s),
                None if f.object.starts_with('[') => key.push_str(&f.object),
                None => {
                    key.push('[');
                    push_folded(key, &f.object);
                    key.push(']');
                }
            }
        }
        if let Some(name) = innermost {
            if frames.first().and_then(|f| f.symbol.as_deref()) != Some(name) {
                key.push(';');
                push_folded(key, name);
            }
        }
        match self.counts.get_mut(key.as_str()) {
            Some(n) => *n += 1,
            None => {
                self.counts.insert(key.clone(), 1);
            }
        }
    }

    /// True when no stack was counted.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// The folded lines, `stack count`, sorted.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .counts
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        lines.sort();
        lines
    }

    /// Writes [`FoldedStacks::lines`], each ending with a newline.
    pub fn write_folded(&self, mut w: impl Write) -> std::io::Result<()> {
        for l in self.lines() {
            w.write_all(l.as_bytes())?;
            w.write_all(b"\n")?;
        }
        Ok(())
    }

    /// Draws the stacks as an SVG flame graph titled `title`, its widths
    /// counted in events.
    #[cfg(feature = "flamegraph")]
    pub fn flamegraph(&self, title: &str, w: impl Write) -> Result<(), FlameGraphError> {
        let lines = self.lines();
        if lines.is_empty() {
            return Err(FlameGraphError::Empty);
        }
        let mut opts = inferno::flamegraph::Options::default();
        opts.title = title.to_string();
        opts.count_name = "events".to_string();
        inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w)
            .map_err(|e| FlameGraphError::Draw(e.to_string()))
    }
}

/// Why a flame graph was not drawn.
#[cfg(feature = "flamegraph")]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FlameGraphError {
    /// No event had a callchain.
    #[error("no event had a callchain, so there is nothing to draw")]
    Empty,
    /// Drawing or writing failed.
    #[error("drawing the flame graph: {0}")]
    Draw(String),
}

/// Appends `s` without the folded format's separators: `;` splits frames
/// and a newline would split lines (the count is taken from the last
/// blank, so blanks may stay).
fn push_folded(key: &mut String, s: &str) {
    key.extend(
        s.chars()
            .map(|c| if c == ';' || c == '\n' { '_' } else { c }),
    );
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn frame(symbol: Option<&str>, object: &str) -> NamedFrame {
        NamedFrame {
            symbol: symbol.map(Arc::from),
            object: Arc::from(object),
            ..NamedFrame::default()
        }
    }

    #[test]
    fn names_lose_their_separators_and_unnamed_frames_name_their_object() {
        let e = Event {
            comm: Arc::from("a;b\nc"),
            ..Event::default()
        };
        let mut f = FoldedStacks::new();
        f.add(
            &e,
            &[
                frame(None, "/usr/lib/libc.so.6"),
                frame(None, "[unknown]"),
                frame(Some("x;y"), "ls"),
            ],
            None,
        );
        assert_eq!(f.lines(), ["a_b_c;x_y;[unknown];[/usr/lib/libc.so.6] 1"]);
    }

    #[test]
    fn a_return_probe_names_its_function_innermost_once() {
        let e = Event::default();
        let mut f = FoldedStacks::new();
        f.add(&e, &[frame(Some("caller"), "k")], Some("callee"));
        f.add(&e, &[frame(Some("callee"), "k")], Some("callee"));
        assert_eq!(f.lines(), [";callee 1", ";caller;callee 1"]);
        let mut out = Vec::new();
        f.write_folded(&mut out).unwrap();
        assert_eq!(out, b";callee 1\n;caller;callee 1\n");
    }

    #[cfg(feature = "flamegraph")]
    #[test]
    fn a_flame_graph_is_an_svg_with_its_title_and_none_is_drawn_from_nothing() {
        let mut f = FoldedStacks::new();
        assert_eq!(f.flamegraph("t", Vec::new()), Err(FlameGraphError::Empty));
        f.add(&Event::default(), &[frame(Some("fn_a"), "k")], None);
        let mut svg = Vec::new();
        f.flamegraph("stacks of p_x", &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.starts_with("<?xml"), "{}", &svg[..40]);
        assert!(svg.contains("stacks of p_x") && svg.contains("fn_a"));
    }
}
