//! What the coverage-guided fuzz targets of `fuzz/libfuzzer` (cargo fuzz,
//! libFuzzer) check of one input, and the fixtures and seeds they start
//! from: the probe parser (`spec_parse`: no panic, and the canonical form
//! of every accepted definition parses to the same definition and prints
//! identically), the record decoder (`record_decode`) and the perf.data
//! reader (`perfdata_read`), which must not panic whatever the bytes.
//!
//! `cargo xtask fuzz [TARGET|all] [--secs N]` runs them from their
//! checked-in corpora (`fuzz/libfuzzer/corpus/TARGET`); `cargo xtask fuzz
//! seed` writes the seeds (the fixtures below and the grammar oracle's
//! corpus).

pub mod fixtures;
pub mod targets;
