//! Where `list`, `probe --lines` and `record` get kernel text bytes.

use kprobe_perf_engine::preflight::KernelTextSource;

/// The live kernel text, if this process may read it.
pub fn open() -> Option<Box<dyn KernelTextSource>> {
    kprobe_perf_engine::kcore::Kcore::open()
        .ok()
        .map(|k| Box::new(k) as Box<dyn KernelTextSource>)
}
