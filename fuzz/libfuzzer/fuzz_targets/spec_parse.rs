//! The probe parser: no panic, and every accepted definition's canonical
//! form (what `Display` prints) parses to the same definition and prints
//! again identically.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Err(e) = kprobe_perf_fuzz::targets::spec_round_trip(&text) {
        panic!("{e}");
    }
});
