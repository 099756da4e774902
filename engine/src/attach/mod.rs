//! The only stage that makes system calls: the syscall layer ([`sys`]),
//! the per-CPU rings ([`ring`]), the `perf_event_attr`s ([`attr`]), the
//! probe PMUs, CPUs, processes and the recorded command, and the tracefs
//! definer with its guardian.

pub(crate) mod attr;
pub(crate) mod command;
mod cpu_list;
pub mod cpus;
mod definition;
pub(crate) mod error;
pub(crate) mod guardian;
pub(crate) mod instance;
pub mod os;
#[cfg_attr(not(feature = "test-util"), allow(unreachable_pub))] // in `testing`
pub mod pmu;
pub(crate) mod process;
/// The per-CPU ring reader (public with the `test-util` feature only).
#[cfg(feature = "test-util")]
pub mod ring;
#[cfg(not(feature = "test-util"))]
#[allow(unreachable_pub)] // public with test-util
pub(crate) mod ring;
/// The one syscall layer (public with the `test-util` feature only:
/// tests that open perf events by hand).
#[cfg(feature = "test-util")]
pub mod sys;
#[cfg(not(feature = "test-util"))]
#[allow(unreachable_pub)] // public with test-util
pub(crate) mod sys;
pub(crate) mod target;
pub mod tracefs;
