//! The record decoder: runs of records (samples of five probes, PMU and
//! tracefs, entry and return, with strings and arrays; COMM, LOST,
//! THROTTLE, UNTHROTTLE), each whole or split as at a ring's wrap,
//! through a fresh decoder: no panic, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kprobe_perf_fuzz::targets::decode_records(data);
});
