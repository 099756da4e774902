//! perf.data files, as `perf record` writes them and `perf script` reads
//! them: a header, the records exactly as the rings held them, the attrs
//! with their event ids, and feature sections (event names, host
//! description). kprobe-perf adds a private feature section holding the
//! probe definitions and the kernel symbols its output used, so that a
//! replay ([`Replay`]) decodes and prints the events as the live run did.
//!
//! Layout written ([`Writer`]):
//!
//! ```text
//! 0      perf_file_header (104 bytes): magic PERFILE2, attrs, data, features bitmap
//! 104    data: records (kernel MMAP for [kernel.kallsyms], COMM, SAMPLE, LOST,
//!        FINISHED_ROUND after each poll round)
//! end    feature section table, then the features in bit order
//!        ids of each attr, then the attrs (perf_event_attr + ids section)
//!        the hidden probes' records, if any (see [`FEAT_HIDDEN`])
//! ```

mod boot;
mod compress;
mod file_sink;
mod meta;
mod reader;
mod replay;
mod writer;

pub use boot::write_boot_recording;
pub use compress::{
    DEFAULT_LEVEL as DEFAULT_COMPRESSION_LEVEL, MAX_LEVEL as MAX_COMPRESSION_LEVEL,
};
pub use file_sink::{note_addresses, FileSink};
pub use meta::{symbol_subset, FileBuildId, Metadata, StoredProbe};
pub use reader::{FileAttr, FileRecord, Reader, Unfinished};
pub use replay::Replay;
pub use writer::{tracing_data, ReadBack, Writer};

/// `PERFILE2`, little-endian.
pub(crate) const MAGIC: u64 = 0x3245_4c49_4652_4550;
/// Size of `struct perf_file_header`.
pub(crate) const HEADER_SIZE: u64 = 104;
/// The block right after the header of a file that is not finished yet
/// ([`Writer::new_readable`]) starts with these 8 bytes; then, each as a
/// u64 size and bytes padded to 8, kprobe-perf's metadata (as
/// [`FEAT_KPROBE_PERF`] holds it) and its hidden probes' attrs (as
/// [`FEAT_HIDDEN`], with an empty region). The attrs and their ids
/// follow, then the data. Such a file's header has no feature bits and
/// says how far the data went at the last round's end; a finished file's
/// header replaces it, the block left unused.
pub(crate) const UNFINISHED: &[u8; 8] = b"KPUNFIN1";
/// Bits of the features bitmap.
pub(crate) const FEATURE_BITS: u32 = 256;

/// `HEADER_TRACING_DATA`: event formats of tracepoint attrs.
pub(crate) const FEAT_TRACING_DATA: u32 = 1;
/// `HEADER_BUILD_ID`: the build IDs of the files samples are in.
pub(crate) const FEAT_BUILD_ID: u32 = 2;
/// `HEADER_HOSTNAME`.
pub(crate) const FEAT_HOSTNAME: u32 = 3;
/// `HEADER_OSRELEASE`.
pub(crate) const FEAT_OSRELEASE: u32 = 4;
/// `HEADER_VERSION`.
pub(crate) const FEAT_VERSION: u32 = 5;
/// `HEADER_ARCH`.
pub(crate) const FEAT_ARCH: u32 = 6;
/// `HEADER_NRCPUS`.
pub(crate) const FEAT_NRCPUS: u32 = 7;
/// `HEADER_CMDLINE`.
pub(crate) const FEAT_CMDLINE: u32 = 11;
/// `HEADER_EVENT_DESC`: each attr with its name and ids.
pub(crate) const FEAT_EVENT_DESC: u32 = 12;
/// `HEADER_COMPRESSED`: how the records are compressed (see
/// `compress`).
pub(crate) const FEAT_COMPRESSED: u32 = 27;
/// kprobe-perf's own section ([`Metadata`]); perf skips bits it does not
/// know.
pub(crate) const FEAT_KPROBE_PERF: u32 = 200;
/// kprobe-perf's hidden probes: probes the session opened for its own
/// use (the entry half of a joined return probe, [`crate::plan::entry_join`]),
/// whose attrs and samples perf must not see (perf shows the user's
/// events only). The section holds, little-endian:
///
/// ```text
/// u32 number of hidden attrs, u32 attr size (as the header's, less 16)
/// per attr: the attr bytes, u32 number of ids, the u64 ids
/// u64 offset, u64 size: the region of their records, after the attrs
/// ```
///
/// The region holds perf records like the data section's, with a mark
/// after the samples of each round: a `FINISHED_ROUND` record whose body
/// is the u64 index of the data section's `FINISHED_ROUND` that ends the
/// same round (from 0), so that a reader merges them round by round.
pub(crate) const FEAT_HIDDEN: u32 = 201;

pub use crate::decode::records::RECORD_MMAP;
/// `PERF_RECORD_LOST`.
pub const RECORD_LOST: u32 = perf_event_open_sys::bindings::PERF_RECORD_LOST;
/// `PERF_RECORD_FINISHED_ROUND` (a perf-only record type).
pub(crate) const RECORD_FINISHED_ROUND: u32 = 68;
/// `PERF_RECORD_MISC_KERNEL`.
pub const MISC_KERNEL: u16 = perf_event_open_sys::bindings::PERF_RECORD_MISC_KERNEL as u16;

/// Why a perf.data file cannot be read. Every variant names the byte
/// offset where the problem is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PerfDataError {
    /// Reading or writing the file failed.
    #[error("{what} at byte {offset}: {source}")]
    Io {
        /// What was being read or written.
        what: String,
        /// Where.
        offset: u64,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file header or a section table is wrong.
    #[error("bad perf.data header at byte {offset}: {reason}")]
    Header {
        /// Where.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A record of the data section is truncated or corrupt.
    #[error("record #{index} (type {kind}) at byte {offset}: {reason}")]
    Record {
        /// Index of the record in the data section (from 0).
        index: u64,
        /// Its `perf_event_header.type`.
        kind: u32,
        /// Byte offset of its header in the file.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A feature section is truncated or corrupt.
    #[error("feature section {feature} at byte {offset}: {reason}")]
    Feature {
        /// The feature bit.
        feature: u32,
        /// Where.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}

/// `perf_file_section`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Section {
    /// Byte offset in the file.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

/// perf's string encoding in feature sections: a u32 length (padded to 64
/// bytes, NUL included), then the bytes, NUL-padded.
pub(crate) fn put_string(out: &mut Vec<u8>, s: &str) {
    let len = (s.len() + 1).div_ceil(64) * 64;
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    out.resize(out.len() + len - s.len(), 0);
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod third_party_reader_tests;
