//! The benchmark harnesses of `cargo xtask bench` (attach, decode,
//! spec), kept out of the published engine crate's examples. Shared
//! helpers live here.

pub mod rng;
