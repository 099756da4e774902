//! Compressed records in a build without the `zstd` feature: `-z` and
//! a file's compressed records are refused with the reason.

use std::io;

/// What a build without libzstd says.
const NO_ZSTD: &str = "this kprobe-perf was built without zstd (the `zstd` feature; \
     the static musl binary has none, as libzstd is C): use a build with it, such as \
     `cargo install --path cli`, or record without -z";

/// A compressor: never made in this build.
pub(crate) struct Compressor;

impl Compressor {
    pub(crate) fn new(_level: u32) -> io::Result<Compressor> {
        Err(io::Error::other(NO_ZSTD))
    }

    pub(crate) fn push(&mut self, _parts: &[&[u8]]) -> io::Result<Option<&[u8]>> {
        Err(io::Error::other(NO_ZSTD))
    }

    pub(crate) fn flush(&mut self) -> io::Result<&[u8]> {
        Err(io::Error::other(NO_ZSTD))
    }

    pub(crate) fn feature(&self) -> Vec<u8> {
        Vec::new()
    }
}

/// A decompressor: never made in this build.
pub(crate) struct Decompressor {
    pub(crate) offset: u64,
}

impl Decompressor {
    pub(crate) fn new() -> io::Result<Decompressor> {
        Err(io::Error::other(NO_ZSTD))
    }

    pub(crate) fn feed(&mut self, _kind: u32, _body: &[u8], _offset: u64) -> Result<(), String> {
        Err(NO_ZSTD.into())
    }

    pub(crate) fn has_record(&self) -> bool {
        false
    }

    pub(crate) fn next(&mut self) -> Option<(u32, u16, &[u8])> {
        None
    }
}
