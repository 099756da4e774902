//! zstd-compressed records, as `perf record -z` writes them and `perf
//! script` reads them: the records of the data section, compressed as one
//! zstd stream, go out in `PERF_RECORD_COMPRESSED` records (type 81: a
//! header, then the stream's bytes up to the record's end), each ending
//! at a flush of the stream, so that a reader decompresses each record
//! as it comes with one decompression context for the whole file. The
//! `HEADER_COMPRESSED` feature (see [`Compressor::feature`]) tells perf
//! how large the records decompress to at most. (perf's writer is
//! `zstd_compress_stream_to_records` in tools/perf/util/zstd.c, its
//! reader `perf_session__process_compressed_event`.)

//!
//! libzstd is C: a build without the `zstd` feature (the static musl
//! binaries, which no C cross compiler builds for) has no compression,
//! and says so when `-z` is asked for or a compressed record is read.

#[cfg(feature = "zstd")]
mod zstd;
#[cfg(feature = "zstd")]
pub(crate) use zstd::{Compressor, Decompressor};

#[cfg(not(feature = "zstd"))]
mod off;
#[cfg(not(feature = "zstd"))]
pub(crate) use off::{Compressor, Decompressor};

/// `PERF_RECORD_COMPRESSED`: a header, then zstd stream bytes.
pub(crate) const RECORD_COMPRESSED: u32 = 81;
/// `PERF_RECORD_COMPRESSED2` (perf 6.15 on): a header, a u64 size of
/// the zstd bytes that follow, then the bytes padded to 8.
pub(crate) const RECORD_COMPRESSED2: u32 = 83;
/// perf record's `-z` level when none is given (`comp_level_default`
/// in tools/perf/builtin-record.c: the fastest).
pub const DEFAULT_LEVEL: u32 = 1;
/// The highest level perf record takes (`comp_level_max`).
pub const MAX_LEVEL: u32 = 22;
