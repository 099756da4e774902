//! The zstd side of compressed records (the `zstd` feature): libzstd
//! through zstd-safe.

use std::io;

use zstd_safe::{CCtx, CParameter, DCtx, InBuffer, OutBuffer};

use super::{MAX_LEVEL, RECORD_COMPRESSED, RECORD_COMPRESSED2};

/// `PERF_COMP_ZSTD`, the feature's compression type.
const COMP_ZSTD: u32 = 1;
/// Records waiting are compressed once this many bytes wait, and no
/// `PERF_RECORD_COMPRESSED` holds more than this much uncompressed: the
/// `mmap_len` of the feature, what perf's reader sizes its buffer for
/// one record's decompressed bytes by (perf record gives its rings'
/// size, 516 KiB by default).
const CHUNK: usize = 256 << 10;
/// The most stream bytes one record holds: its size is a u16, header
/// included (perf's `max_record_size` is one less).
const MAX_PAYLOAD: usize = (1 << 16) - 8 - 1;

fn zstd_err(what: &str, code: usize) -> io::Error {
    io::Error::other(format!("{what}: {}", zstd_safe::get_error_name(code)))
}

/// Compresses the records of a file's data section into
/// `PERF_RECORD_COMPRESSED` records.
pub(crate) struct Compressor {
    cctx: CCtx<'static>,
    level: u32,
    /// Records waiting to be compressed.
    pending: Vec<u8>,
    /// Compressed records ready to be written.
    out: Vec<u8>,
    /// One record's stream bytes.
    scratch: Vec<u8>,
    /// Bytes compressed, and the bytes of the records they became
    /// (headers included), for the feature's ratio.
    bytes_in: u64,
    bytes_out: u64,
}

impl Compressor {
    /// A compressor at zstd `level` (1 to [`MAX_LEVEL`]).
    pub(crate) fn new(level: u32) -> io::Result<Compressor> {
        let mut cctx = CCtx::try_create()
            .ok_or_else(|| io::Error::other("creating a zstd compression context"))?;
        let lvl = i32::try_from(level.clamp(1, MAX_LEVEL)).unwrap_or(1);
        cctx.set_parameter(CParameter::CompressionLevel(lvl))
            .map_err(|c| zstd_err("setting the zstd compression level", c))?;
        Ok(Compressor {
            cctx,
            level,
            pending: Vec::with_capacity(CHUNK * 2),
            out: Vec::new(),
            scratch: vec![0; MAX_PAYLOAD],
            bytes_in: 0,
            bytes_out: 0,
        })
    }

    /// Takes records (whole ones, in `parts` one after the other); returns
    /// the compressed records to write once enough have waited.
    pub(crate) fn push(&mut self, parts: &[&[u8]]) -> io::Result<Option<&[u8]>> {
        for p in parts {
            self.pending.extend_from_slice(p);
        }
        if self.pending.len() < CHUNK {
            return Ok(None);
        }
        self.flush().map(Some)
    }

    /// Compresses every record waiting; returns the compressed records to
    /// write (none when nothing waited).
    pub(crate) fn flush(&mut self) -> io::Result<&[u8]> {
        self.out.clear();
        let pending = std::mem::take(&mut self.pending);
        for chunk in pending.chunks(CHUNK) {
            self.compress(chunk)?;
        }
        self.pending = pending;
        self.pending.clear();
        Ok(&self.out)
    }

    /// Compresses `chunk` into records appended to `out`, the stream
    /// flushed at its end.
    fn compress(&mut self, chunk: &[u8]) -> io::Result<()> {
        let mut input = InBuffer::around(chunk);
        loop {
            let mut output = OutBuffer::around(&mut self.scratch[..]);
            let left = self
                .cctx
                .compress_stream2(
                    &mut output,
                    &mut input,
                    zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_flush,
                )
                .map_err(|c| zstd_err("compressing records", c))?;
            let n = output.pos();
            if n > 0 {
                let size = (8 + n) as u16;
                self.out.extend_from_slice(&RECORD_COMPRESSED.to_ne_bytes());
                self.out.extend_from_slice(&0u16.to_ne_bytes());
                self.out.extend_from_slice(&size.to_ne_bytes());
                self.out.extend_from_slice(&self.scratch[..n]);
                self.bytes_out += 8 + n as u64;
            }
            if left == 0 && input.pos() == chunk.len() {
                break;
            }
        }
        self.bytes_in += chunk.len() as u64;
        Ok(())
    }

    /// perf's `HEADER_COMPRESSED` section: u32 version (0), type (zstd),
    /// level, ratio (bytes in over bytes out, rounded, as perf record
    /// gives it) and the most bytes a record decompresses to.
    pub(crate) fn feature(&self) -> Vec<u8> {
        let ratio = match self.bytes_out {
            0 => 0,
            out => ((self.bytes_in as f64 / out as f64) + 0.5) as u32,
        };
        let mut b = Vec::with_capacity(20);
        for v in [0, COMP_ZSTD, self.level, ratio, CHUNK as u32] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// Decompresses a file's `PERF_RECORD_COMPRESSED` records, one zstd
/// stream across them, and hands out the records they held.
pub(crate) struct Decompressor {
    dctx: DCtx<'static>,
    /// Decompressed bytes: `buf[start..]` not handed out yet.
    buf: Vec<u8>,
    start: usize,
    /// Where the last compressed record was (for errors and for the
    /// records it held), and how many records have been handed out.
    pub(crate) offset: u64,
}

impl Decompressor {
    pub(crate) fn new() -> io::Result<Decompressor> {
        let dctx = DCtx::try_create()
            .ok_or_else(|| io::Error::other("creating a zstd decompression context"))?;
        Ok(Decompressor {
            dctx,
            buf: Vec::new(),
            start: 0,
            offset: 0,
        })
    }

    /// Decompresses the body of a compressed record of type `kind` at
    /// `offset` in the file.
    pub(crate) fn feed(&mut self, kind: u32, body: &[u8], offset: u64) -> Result<(), String> {
        let src = match kind {
            RECORD_COMPRESSED2 => {
                let size = body
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_ne_bytes)
                    .ok_or("a PERF_RECORD_COMPRESSED2 without its data size")?;
                usize::try_from(size)
                    .ok()
                    .and_then(|n| body.get(8..8 + n))
                    .ok_or_else(|| format!("data size {size} runs past the record's end"))?
            }
            _ => body,
        };
        self.buf.drain(..self.start);
        self.start = 0;
        self.offset = offset;
        let mut input = InBuffer::around(src);
        // Until the input is used up and the stream gives no more.
        loop {
            let before = self.buf.len();
            let room = CHUNK.max(src.len() * 4);
            self.buf.resize(before + room, 0);
            let mut output = OutBuffer::around(&mut self.buf[before..]);
            let res = self.dctx.decompress_stream(&mut output, &mut input);
            let n = output.pos();
            self.buf.truncate(before + n);
            res.map_err(|c| format!("zstd: {}", zstd_safe::get_error_name(c)))?;
            if input.pos() == src.len() && n < room {
                break;
            }
        }
        Ok(())
    }

    /// True when a whole record waits.
    pub(crate) fn has_record(&self) -> bool {
        self.next_size().is_some()
    }

    fn next_size(&self) -> Option<usize> {
        let h = self.buf.get(self.start..self.start + 8)?;
        let size = usize::from(u16::from_ne_bytes([h[6], h[7]]));
        (size >= 8 && self.start + size <= self.buf.len()).then_some(size)
    }

    /// The next whole record waiting: its type, misc and body.
    pub(crate) fn next(&mut self) -> Option<(u32, u16, &[u8])> {
        let size = self.next_size()?;
        let at = self.start;
        self.start += size;
        let h = &self.buf[at..at + 8];
        let kind = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]);
        let misc = u16::from_ne_bytes([h[4], h[5]]);
        Some((kind, misc, &self.buf[at + 8..at + size]))
    }

    #[cfg(test)]
    /// Bytes left that are not a whole record (a record cut short at
    /// the end, or a header whose size cannot be right).
    pub(crate) fn leftover(&self) -> usize {
        self.buf.len() - self.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, body: &[u8]) -> Vec<u8> {
        let mut r = kind.to_ne_bytes().to_vec();
        r.extend_from_slice(&0u16.to_ne_bytes());
        r.extend_from_slice(&((8 + body.len()) as u16).to_ne_bytes());
        r.extend_from_slice(body);
        r
    }

    #[test]
    fn records_come_back_as_they_went_in() {
        let mut c = Compressor::new(3).unwrap();
        let mut want = Vec::new();
        let mut file = Vec::new();
        for i in 0..20_000u32 {
            let body: Vec<u8> = (0..48).map(|j| (i as u8).wrapping_add(j)).collect();
            let r = record(9, &body);
            want.push(body);
            if let Some(out) = c.push(&[&r]).unwrap() {
                file.extend_from_slice(out);
            }
        }
        file.extend_from_slice(c.flush().unwrap());
        let mut d = Decompressor::new().unwrap();
        let mut got = Vec::new();
        let mut at = 0;
        let mut records = 0;
        while at < file.len() {
            let size = usize::from(u16::from_ne_bytes([file[at + 6], file[at + 7]]));
            let kind = u32::from_ne_bytes(file[at..at + 4].try_into().unwrap());
            assert_eq!(kind, RECORD_COMPRESSED);
            d.feed(kind, &file[at + 8..at + size], at as u64).unwrap();
            while let Some((k, _, b)) = d.next() {
                assert_eq!(k, 9);
                got.push(b.to_vec());
            }
            at += size;
            records += 1;
        }
        assert_eq!(got, want);
        assert_eq!(d.leftover(), 0);
        // 20,000 56-byte records (1.1 MB) in more than one record, far
        // smaller.
        assert!(records > 1, "{records}");
        assert!(file.len() * 5 < 20_000 * 56, "{}", file.len());
        let f = c.feature();
        assert_eq!(&f[..12], &[0, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0]);
        assert_eq!(u32::from_le_bytes(f[16..20].try_into().unwrap()), 256 << 10);
    }
}
