//! A rebuilt call tree: its frames in entry order, what is missing from
//! it, where an error first arose and where the time went.

use std::fmt;
use std::sync::Arc;

use super::errno::errno_name;
use crate::decode::Value;

/// What a traced function returns, as its BTF prototype says: what tells
/// an error from a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ReturnKind {
    /// An integer of `size` bytes (1, 2, 4 or 8): a signed one in
    /// -4095..-1 is an error (a negative errno).
    Integer {
        /// Size in bytes.
        size: u8,
        /// Signed or not (an unsigned integer is never an error).
        signed: bool,
    },
    /// A pointer: NULL or an `ERR_PTR` (-4095..-1) is an error.
    Pointer,
    /// `void`: no return value.
    Void,
    /// Not known (no BTF for the function): never an error.
    #[default]
    Unknown,
}

impl ReturnKind {
    /// The return value `raw` (the whole register) as this type holds it:
    /// an integer narrower than 64 bits is cut to its size and, when
    /// signed, sign-extended (the register's upper bits are not part of
    /// the value).
    pub fn value(self, raw: u64) -> u64 {
        match self {
            ReturnKind::Integer { size, signed } if size > 0 && size < 8 => {
                let bits = u32::from(size) * 8;
                let cut = raw & ((1u64 << bits) - 1);
                if signed && cut >> (bits - 1) == 1 {
                    cut | !((1u64 << bits) - 1)
                } else {
                    cut
                }
            }
            _ => raw,
        }
    }

    /// The error `raw` stands for in a function of this return type.
    pub fn error(self, raw: u64) -> Option<CallError> {
        let v = self.value(raw) as i64;
        match self {
            ReturnKind::Integer { signed: true, .. } if (-4095..=-1).contains(&v) => {
                Some(CallError::Errno(-v as i32))
            }
            ReturnKind::Pointer if raw == 0 => Some(CallError::Null),
            ReturnKind::Pointer if (-4095..=-1).contains(&v) => Some(CallError::ErrPtr(-v as i32)),
            _ => None,
        }
    }
}

/// An error a call returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CallError {
    /// A negative errno from an integer-returning function (the number is
    /// positive here: 2 for -ENOENT).
    Errno(i32),
    /// NULL from a pointer-returning function.
    Null,
    /// An `ERR_PTR(-errno)` from a pointer-returning function.
    ErrPtr(i32),
}

impl CallError {
    /// The errno, if the error carries one.
    pub fn errno(self) -> Option<i32> {
        match self {
            CallError::Errno(n) | CallError::ErrPtr(n) => Some(n),
            CallError::Null => None,
        }
    }
}

impl fmt::Display for CallError {
    /// `-ENOENT`, `NULL`, `ERR_PTR(-ENOENT)` (`-600` for a number with no
    /// name).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let named = |f: &mut fmt::Formatter<'_>, n: i32| match errno_name(n) {
            Some(name) => write!(f, "-{name}"),
            None => write!(f, "-{n}"),
        };
        match self {
            CallError::Errno(n) => named(f, *n),
            CallError::Null => f.write_str("NULL"),
            CallError::ErrPtr(n) => {
                f.write_str("ERR_PTR(")?;
                named(f, *n)?;
                f.write_str(")")
            }
        }
    }
}

/// One call in a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Frame {
    /// Index of the function in the builder's list.
    pub function: usize,
    /// 0 for the root, 1 for its callees ...
    pub depth: u32,
    /// The index of the caller's frame (`None` for the root).
    pub parent: Option<usize>,
    /// CPU of the entry (of the return for a root whose entry was not
    /// seen).
    pub cpu: u32,
    /// Time of the entry; `None` when it was not seen.
    pub entry_ns: Option<u64>,
    /// Time of the return; `None` when it was not seen.
    pub return_ns: Option<u64>,
    /// The return value (cut to the function's return type; see
    /// [`ReturnKind::value`]); `None` when the return was not seen or
    /// carries no value.
    pub retval: Option<u64>,
    /// The error the return value stands for.
    pub error: Option<CallError>,
    /// The entry's arguments, as the entry event carried them.
    pub args: Vec<Value>,
    /// The duration less the durations of the traced callees (`None`
    /// when the duration, or a callee's, is unknown).
    pub self_ns: Option<u64>,
}

impl Frame {
    /// Return time minus entry time, when both were seen.
    pub fn duration_ns(&self) -> Option<u64> {
        Some(self.return_ns?.saturating_sub(self.entry_ns?))
    }

    /// The return value as a signed number (`-2` for -ENOENT).
    pub fn retval_signed(&self) -> Option<i64> {
        self.retval.map(|v| v as i64)
    }
}

/// What is missing from an incomplete tree. A tree with anything missing
/// is never shown as a complete path: the frames it has are right, the
/// ones it lacks are said here.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missing {
    /// The root's entry was not seen: the call began before the first
    /// event (or its entry was lost). Its calls before that are unknown,
    /// and none is shown.
    RootEntry,
    /// The return of the call in frame `frame` was not seen: the return
    /// probe missed it (a kretprobe or fprobe out of return instances),
    /// or an outer function returned first. Its callees' order is right;
    /// its own end is unknown.
    Return {
        /// The frame.
        frame: usize,
    },
    /// A return came for a call of `function` whose entry was not seen
    /// inside the tree (its entry missed or lost): the calls after that
    /// entry may belong under it rather than where they are shown.
    Entry {
        /// The function whose entry is missing.
        function: usize,
    },
    /// Events were lost while the tree was being built: any call may be
    /// missing from it.
    EventsLost,
    /// The thread exited inside the call (the calls still open never
    /// returned).
    ThreadExited,
    /// The recording ended while the call was running.
    Unfinished,
    /// The tree reached the most frames a tree keeps; later calls are
    /// left out.
    TooManyFrames {
        /// Frames left out.
        dropped: u64,
    },
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::RootEntry => f.write_str("the root's entry was not seen (the call began before the recording, or its entry was lost); its calls are not shown"),
            Missing::Return { frame } => write!(f, "the return of frame {frame} was not seen (a return probe missed it)"),
            Missing::Entry { function } => write!(f, "a return of function {function} came without its entry"),
            Missing::EventsLost => f.write_str("events were lost during the call"),
            Missing::ThreadExited => f.write_str("the thread exited inside the call"),
            Missing::Unfinished => f.write_str("the call was still running when the recording ended"),
            Missing::TooManyFrames { dropped } => write!(f, "{dropped} calls left out past the most frames a tree keeps"),
        }
    }
}

/// A function's share of one tree's time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FunctionTime {
    /// Index of the function in the builder's list.
    pub function: usize,
    /// Its calls in the tree.
    pub calls: u64,
    /// The sum of their durations (nested calls of the same function are
    /// each counted, as function_graph shows them).
    pub total_ns: u64,
    /// The sum of their self times.
    pub self_ns: u64,
}

/// The calls of one root call, as one thread made them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallTree {
    /// Thread id.
    pub tid: i32,
    /// Process id.
    pub pid: i32,
    /// Command name of the thread (at the root's first event).
    pub comm: Arc<str>,
    /// The frames in entry order (a depth-first walk): frame 0 is the
    /// root.
    pub frames: Vec<Frame>,
    /// What is missing (empty: the tree is complete).
    pub missing: Vec<Missing>,
}

impl CallTree {
    /// The root call.
    pub fn root(&self) -> &Frame {
        &self.frames[0]
    }

    /// True when nothing is missing.
    pub fn is_complete(&self) -> bool {
        self.missing.is_empty()
    }

    /// The frames called directly by frame `i`, in order.
    pub fn children(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        self.frames
            .iter()
            .enumerate()
            .skip(i + 1)
            .take_while(move |(_, f)| f.depth > self.frames[i].depth)
            .filter(move |(_, f)| f.parent == Some(i))
            .map(|(j, _)| j)
    }

    /// The frames from the root down to the deepest one where the root's
    /// error first arose: from each frame that returned an error, the
    /// last of its callees that returned one (the one whose error it
    /// passed on), down to a frame none of whose callees did. Empty when
    /// the root returned no error.
    pub fn error_path(&self) -> Vec<usize> {
        let mut path = Vec::new();
        if self.frames.first().and_then(|f| f.error).is_none() {
            return path;
        }
        let mut at = 0;
        path.push(at);
        while let Some(next) = self
            .children(at)
            .filter(|&c| self.frames[c].error.is_some())
            .last()
        {
            path.push(next);
            at = next;
        }
        path
    }

    /// Each function's calls, total and self time in this tree, the
    /// largest self time first (frames of unknown duration left out).
    pub fn self_times(&self) -> Vec<FunctionTime> {
        let mut out: Vec<FunctionTime> = Vec::new();
        for f in &self.frames {
            let (Some(total), Some(own)) = (f.duration_ns(), f.self_ns) else {
                continue;
            };
            match out.iter_mut().find(|t| t.function == f.function) {
                Some(t) => {
                    t.calls += 1;
                    t.total_ns += total;
                    t.self_ns += own;
                }
                None => out.push(FunctionTime {
                    function: f.function,
                    calls: 1,
                    total_ns: total,
                    self_ns: own,
                }),
            }
        }
        out.sort_by(|a, b| b.self_ns.cmp(&a.self_ns).then(a.function.cmp(&b.function)));
        out
    }

    /// Fills each frame's self time from the durations (once the tree is
    /// closed): its duration less its callees' (unknown when any of
    /// them is), each callee taken off its caller from the last frame
    /// back (a callee comes after its caller).
    pub(super) fn compute_self_times(&mut self) {
        for f in &mut self.frames {
            f.self_ns = f.duration_ns();
        }
        for i in (1..self.frames.len()).rev() {
            let f = &self.frames[i];
            let (Some(p), d) = (f.parent, f.duration_ns()) else {
                continue;
            };
            if let Some(caller) = self.frames.get_mut(p) {
                caller.self_ns = match (caller.self_ns, d) {
                    (Some(own), Some(d)) => Some(own.saturating_sub(d)),
                    _ => None,
                };
            }
        }
    }
}
