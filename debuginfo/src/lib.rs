//! Probe points and variables by source line and name, from DWARF debug
//! info: what `perf probe` answers from the kernel's vmlinux, as a library
//! beside `kprobe-perf-symbols` and below the engine.
//!
//! ```no_run
//! use kprobe_perf_debuginfo::{DebugFile, DebugInfo, Options, ProbeArg, ProbePoint};
//! # fn main() -> Result<(), kprobe_perf_debuginfo::Error> {
//! let file = DebugFile::open("/usr/lib/debug/boot/vmlinux-6.12.117+deb12-amd64")?;
//! let dwarf = DebugInfo::new(&file)?;
//! let point = ProbePoint::parse("do_sys_openat2")?;
//! let args: Vec<ProbeArg> = ["filename", "dfd", "how->flags"]
//!     .iter()
//!     .map(|a| ProbeArg::parse(a))
//!     .collect::<Result<_, _>>()?;
//! for probe in dwarf.resolve(&point, &args, &Options::default())?.probes {
//!     // p:probe/do_sys_openat2 do_sys_openat2+0 filename=%si:x64 dfd=%di:s32 flags=+0(%dx):x64
//!     println!("{}", probe.definition("probe", "do_sys_openat2"));
//! }
//! # Ok(()) }
//! ```
//!
//! # Cost
//!
//! The file is mapped, never read whole. A question about a function on a
//! file never indexed reads only the units that can define its name: those
//! holding the name's string (or its offset in `.debug_str`), found by a
//! substring search of `.debug_info` (tens of milliseconds on a distro
//! vmlinux). A question that needs every unit's names (a source file's
//! lines, a listing of functions, a name in very many places, a file with
//! split, dwz or string-offsets DWARF) builds a name index from the
//! top-level entries of every unit (two threads) and keeps it in
//! [`cache_dir`] under the file's build ID, so later processes map it
//! instead. A query parses only the units that define the function it names.
//!
//! # Differential test against perf
//!
//! `cargo run --release -p kprobe-perf-debuginfo --example differential -- VMLINUX [N] [SEED]`
//! asks perf and this crate the same N questions and prints the agreement.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]
#![deny(missing_docs)]

mod address;
mod debuginfo;
pub mod debuginfod;
mod dies;
mod error;
mod file;
mod glob;
mod index;
mod lazy;
mod lines;
pub mod locate;
mod point;
mod reloc;
mod sites;
mod split;
mod types;
mod vars;

pub use address::{AddressFrame, AddressLookup};
pub use debuginfo::{DebugInfo, Options};
pub use error::{Error, Result};
pub use file::DebugFile;
pub use index::cache_dir;
pub use lines::FunctionLines;
pub use point::{Access, FunctionPart, ProbeArg, ProbePoint};
pub use sites::{Instance, Site};
pub use vars::{FetchArg, ProbeSite, Resolved, Variable};
