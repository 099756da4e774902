//! Call trees: the entries and returns of a set of functions, per
//! thread, rebuilt into the tree of each call of a root function, with
//! durations, self times, return values and the frame where an error
//! first arose.
//!
//! A [`CallTreeBuilder`] is given the traced functions
//! ([`TracedFunction`]: a name, what it returns, and whether trees start
//! at it) and then their [`CallEvent`]s in time order, as a session
//! delivers them. Per thread it keeps the calls open: an entry of a root
//! outside any tree starts a tree; inside a tree every entry opens a
//! frame under the innermost open one, and a return closes the innermost
//! open call of its function. Recursion and interrupts (whose handlers
//! run on the interrupted thread and return before it goes on) nest as
//! they ran. A tree closes when its root returns; [`CallTreeBuilder::take_finished`]
//! hands it over as a [`CallTree`]: its [`Frame`]s in entry order, each
//! with its depth, caller, times, return value and [`CallError`].
//!
//! # Errors
//!
//! By the function's return type ([`ReturnKind`], from BTF): a signed
//! integer in -4095..-1 is a negative errno (named: `-ENOENT`), a pointer
//! that is NULL or an `ERR_PTR` is an error. [`CallTree::error_path`]
//! follows the error down: from the root, the last callee that returned
//! an error (the one its caller passed on), down to the frame none of
//! whose callees returned one, where the error first arose.
//!
//! # Nothing silently wrong
//!
//! A tree the builder could not see whole is closed with what is
//! [`Missing`], never shown as another path:
//! - a root that returns with no entry seen (the call began before the
//!   recording): a tree of its return alone, [`Missing::RootEntry`];
//! - a return that skips open calls (their returns missed, a return probe
//!   out of instances): those calls are [`Missing::Return`];
//! - a return inside a tree with no entry there: [`Missing::Entry`];
//! - lost events ([`CallTreeBuilder::events_lost`]): every tree open or
//!   not yet taken is [`Missing::EventsLost`], and the open ones close;
//! - the thread's exit inside the call, the end of the recording.
//!
//! ```
//! use kprobe_perf_engine::analysis::{
//!     CallEvent, CallSite, CallTreeBuilder, CallTreeOptions, ReturnKind, TracedFunction,
//! };
//!
//! let int = ReturnKind::Integer { size: 4, signed: true };
//! let mut b = CallTreeBuilder::new(
//!     vec![
//!         TracedFunction::new("do_sys_openat2", int, true),
//!         TracedFunction::new("path_openat", ReturnKind::Pointer, false),
//!         TracedFunction::new("lookup_fast", ReturnKind::Pointer, false),
//!     ],
//!     CallTreeOptions::default(),
//! );
//! let enoent = (-2i64) as u64;
//! for (f, site, t) in [
//!     (0, CallSite::Entry, 100),
//!     (1, CallSite::Entry, 110),
//!     (2, CallSite::Entry, 120),
//!     (2, CallSite::Return { retval: Some(enoent) }, 150),
//!     (1, CallSite::Return { retval: Some(enoent) }, 170),
//!     (0, CallSite::Return { retval: Some(enoent) }, 200),
//! ] {
//!     b.record(CallEvent::new(f, site, 42, 42, t));
//! }
//! let trees = b.take_finished();
//! let tree = &trees[0];
//! assert!(tree.is_complete());
//! assert_eq!(tree.root().duration_ns(), Some(100));
//! assert_eq!(tree.error_path(), [0, 1, 2]);
//! assert_eq!(tree.frames[2].error.map(|e| e.to_string()).as_deref(), Some("ERR_PTR(-ENOENT)"));
//! assert_eq!(tree.root().self_ns, Some(40));
//! ```

mod btf;
mod builder;
mod errno;
mod note;
mod probes;
mod tree;

pub use builder::{CallEvent, CallSite, CallTreeBuilder, CallTreeOptions, TracedFunction};
pub use errno::errno_name;
pub use note::{functions_from_note, functions_note, FUNCTIONS_NOTE, LOST_NOTE};
pub use probes::CallProbes;
pub use tree::{CallError, CallTree, Frame, FunctionTime, Missing, ReturnKind};

#[cfg(test)]
mod tests;
