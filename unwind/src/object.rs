//! One ELF file as the unwinder needs it: its unwind sections (shared by
//! every process that maps it), its load segments (to place it in a
//! process), and how to find its debug info.

use std::collections::HashMap;
use std::ops::{Deref, Range};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::{Object as _, ObjectSection as _, ObjectSegment as _};

use crate::Error;

/// A section's bytes inside a file mapped once: cheap to clone, what
/// framehop's modules hold.
#[derive(Clone, Default)]
pub(crate) struct Bytes {
    file: Option<Arc<memmap2::Mmap>>,
    range: Range<usize>,
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.file
            .as_deref()
            .and_then(|f| f.get(self.range.clone()))
            .unwrap_or_default()
    }
}

/// Maps the file at `path` read-only: only the pages the unwinder reads
/// (the unwind tables, the code around a sampled address) are ever
/// read, where reading the file whole copied every byte of a library
/// into memory at each run.
fn map(path: &Path) -> std::io::Result<memmap2::Mmap> {
    let file = std::fs::File::open(path)?;
    // SAFETY: the map is read-only and private, and only read as bytes.
    // Another process truncating the file while it is mapped would make
    // reads past the new end fault (SIGBUS); binaries and libraries are
    // replaced by rename when a package is upgraded, not rewritten in
    // place, which is the accepted risk of every debugger and profiler
    // that maps them (perf maps them too).
    unsafe { memmap2::Mmap::map(&file) }
}

/// A section: its address range as the file states it, and its bytes.
#[derive(Clone)]
pub(crate) struct Section {
    pub(crate) svma: Range<u64>,
    pub(crate) bytes: Bytes,
}

/// A `PT_LOAD` segment: where the file's bytes at `offset` go.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Segment {
    pub(crate) vaddr: u64,
    pub(crate) offset: u64,
    pub(crate) file_size: u64,
}

/// What one ELF file gives: the sections framehop reads, its segments,
/// its build ID and debug link.
pub(crate) struct ElfFile {
    pub(crate) path: PathBuf,
    pub(crate) text: Option<Section>,
    pub(crate) eh_frame: Option<Section>,
    pub(crate) eh_frame_hdr: Option<Section>,
    pub(crate) debug_frame: Option<Section>,
    pub(crate) got: Option<Range<u64>>,
    pub(crate) segments: Vec<Segment>,
    pub(crate) build_id: Option<Vec<u8>>,
    pub(crate) debuglink: Option<String>,
    pub(crate) has_dwarf: bool,
}

impl ElfFile {
    /// Maps `path` (once) and notes its sections and segments.
    pub(crate) fn read(path: &Path) -> Result<ElfFile, Error> {
        let bytes = map(path).map_err(|e| Error::Read {
            path: path.to_path_buf(),
            error: e,
        })?;
        let file = Arc::new(bytes);
        let elf = object::File::parse(&file[..]).map_err(|e| Error::NotElf {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        let section = |name: &str| -> Option<Section> {
            let s = elf.section_by_name(name)?;
            let (offset, size) = s.file_range()?;
            let start = usize::try_from(offset).ok()?;
            let end = start.checked_add(usize::try_from(size).ok()?)?;
            (end <= file.len()).then(|| Section {
                svma: s.address()..s.address().saturating_add(s.size()),
                bytes: Bytes {
                    file: Some(Arc::clone(&file)),
                    range: start..end,
                },
            })
        };
        let segments = elf
            .segments()
            .map(|s| {
                let (offset, file_size) = s.file_range();
                Segment {
                    vaddr: s.address(),
                    offset,
                    file_size,
                }
            })
            .collect();
        let got = elf
            .section_by_name(".got")
            .map(|s| s.address()..s.address().saturating_add(s.size()));
        let build_id = elf.build_id().ok().flatten().map(<[u8]>::to_vec);
        let debuglink = elf
            .gnu_debuglink()
            .ok()
            .flatten()
            .and_then(|(name, _crc)| std::str::from_utf8(name).ok().map(str::to_string));
        let has_dwarf = elf.section_by_name(".debug_info").is_some();
        Ok(ElfFile {
            path: path.to_path_buf(),
            text: section(".text"),
            eh_frame: section(".eh_frame"),
            eh_frame_hdr: section(".eh_frame_hdr"),
            debug_frame: section(".debug_frame"),
            got,
            segments,
            build_id,
            debuglink,
            has_dwarf,
        })
    }

    /// The address the file's virtual address 0 is mapped at, for a
    /// mapping at `start` of the file from offset `pgoff`: the segment
    /// holding `pgoff` places it.
    pub(crate) fn base_avma(&self, start: u64, pgoff: u64) -> u64 {
        let seg = self
            .segments
            .iter()
            .find(|s| pgoff >= s.offset & !0xfff && pgoff < s.offset + s.file_size.max(1));
        match seg {
            // base + vaddr + (pgoff - offset) = start
            Some(s) => start
                .wrapping_sub(pgoff)
                .wrapping_add(s.offset)
                .wrapping_sub(s.vaddr),
            None => start.wrapping_sub(pgoff),
        }
    }

    /// Where this file's DWARF is: a build-ID debug file, the
    /// `.gnu_debuglink` file, or the file itself; `None` when none has it.
    pub(crate) fn debug_file(&self, debug_root: &Path) -> Option<PathBuf> {
        if let Some(id) = self.build_id.as_deref().filter(|id| id.len() >= 2) {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            let p = debug_root
                .join(".build-id")
                .join(&hex[..2])
                .join(format!("{}.debug", &hex[2..]));
            if p.is_file() {
                return Some(p);
            }
        }
        if let Some(link) = &self.debuglink {
            let dir = self.path.parent().unwrap_or(Path::new("/"));
            let rel = dir.strip_prefix("/").unwrap_or(dir);
            for p in [
                dir.join(link),
                dir.join(".debug").join(link),
                debug_root.join(rel).join(link),
            ] {
                if p.is_file() && p != self.path {
                    return Some(p);
                }
            }
        }
        self.has_dwarf.then(|| self.path.clone())
    }
}

/// Every ELF file read so far, by path: a library mapped by many
/// processes is read once.
#[derive(Default)]
pub(crate) struct FileCache {
    files: HashMap<PathBuf, Option<Arc<ElfFile>>>,
}

impl FileCache {
    /// The file at `path`, read on first use; `None` when it cannot be
    /// read (gone, not ELF), remembered so it is tried once.
    pub(crate) fn get(&mut self, path: &Path) -> Option<Arc<ElfFile>> {
        self.files
            .entry(path.to_path_buf())
            .or_insert_with(|| ElfFile::read(path).ok().map(Arc::new))
            .clone()
    }
}
