//! The perf.data reader and replay: any file, no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kprobe_perf_fuzz::targets::replay_file(data);
});
