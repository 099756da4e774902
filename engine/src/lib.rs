//! kprobe-perf engine: dynamic kernel probes through perf_event_open.
//!
//! The path of a probe: [`spec`] parses a kprobe_events definition,
//! [`plan`] resolves it against the kernel's symbols and the architecture's
//! registers, [`session`] opens it through the kprobe PMU on every CPU (or
//! for one process) and reads the per-CPU rings, and [`decode`] turns each
//! sample into an [`Event`]. See `examples/record.rs` for an embedding.

#![deny(missing_docs)]

pub mod decode;
pub mod error;
pub mod plan;
pub mod pmu;
pub mod ring;
pub mod session;
pub mod spec;
pub mod sys;

pub use decode::{Event, Value};
pub use error::Error;
pub use kprobe_perf_arch::Arch;
pub use kprobe_perf_symbols::KernelSymbols;
pub use plan::ProbePlan;
pub use session::{RecordTarget, Session, SessionOptions, SessionStats};
pub use spec::ProbeSpec;

/// Parses and plans probe definitions for this machine's architecture.
///
/// `symbols` may be empty (kallsyms unreadable); names are then left for
/// the kernel to check.
pub fn plan_probes<S: AsRef<str>>(
    specs: &[S],
    symbols: &KernelSymbols,
) -> Result<Vec<ProbePlan>, Error> {
    let arch = Arch::host().ok_or_else(|| {
        Error::io(
            "choosing the register table",
            std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "kprobe-perf supports x86_64 and aarch64",
            ),
        )
    })?;
    specs
        .iter()
        .map(|s| {
            let spec = ProbeSpec::parse(s.as_ref(), arch)?;
            Ok(plan::resolve(spec, symbols, arch)?)
        })
        .collect()
}
