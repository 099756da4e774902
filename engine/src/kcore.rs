//! The live kernel text from `/proc/kcore`: an ELF64 core file whose
//! PT_LOAD segments map kernel virtual addresses to file offsets.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::preflight::KernelTextSource;

/// `/proc/kcore`, opened, with its loadable segments.
pub struct Kcore {
    file: File,
    /// (virtual address, size, file offset)
    segments: Vec<(u64, u64, u64)>,
}

const PT_LOAD: u32 = 1;

fn u16_at(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u16::from_le_bytes)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

impl Kcore {
    /// Opens `/proc/kcore` (root, CONFIG_PROC_KCORE).
    pub fn open() -> io::Result<Kcore> {
        Self::open_path("/proc/kcore")
    }

    /// Opens a kcore-format file.
    pub fn open_path(path: &str) -> io::Result<Kcore> {
        let file = File::open(path)?;
        let mut header = [0u8; 64];
        file.read_exact_at(&mut header, 0)?;
        if header[..4] != *b"\x7fELF" || header[4] != 2 || header[5] != 1 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{path} is not a little-endian ELF64 core"),
            ));
        }
        let phoff = u64_at(&header, 0x20);
        let phentsize = u64::from(u16_at(&header, 0x36));
        let phnum = u64::from(u16_at(&header, 0x38));
        let mut segments = Vec::new();
        for i in 0..phnum {
            let mut ph = [0u8; 56];
            file.read_exact_at(&mut ph, phoff + i * phentsize)?;
            if u32_at(&ph, 0) == PT_LOAD {
                segments.push((u64_at(&ph, 16), u64_at(&ph, 32), u64_at(&ph, 8)));
            }
        }
        Ok(Kcore { file, segments })
    }
}

impl KernelTextSource for Kcore {
    fn read_text(&self, address: u64, len: usize) -> Result<Vec<u8>, String> {
        let end = address.saturating_add(len as u64);
        let (vaddr, _, offset) = self
            .segments
            .iter()
            .find(|(v, size, _)| *v <= address && end <= v.saturating_add(*size))
            .ok_or_else(|| format!("0x{address:x} is in no segment of /proc/kcore"))?;
        let mut buf = vec![0u8; len];
        self.file
            .read_exact_at(&mut buf, offset + (address - vaddr))
            .map_err(|e| format!("reading 0x{address:x} from /proc/kcore: {e}"))?;
        Ok(buf)
    }

    fn describe(&self) -> String {
        "/proc/kcore (live text)".into()
    }
}
