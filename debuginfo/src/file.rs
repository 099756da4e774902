//! One ELF file with DWARF, mapped read-only, and the views over it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use object::{Object, ObjectSection, ObjectSymbol};

use crate::error::{Error, Result};
use crate::reloc::Relocated;

/// The reader type: a slice of the mapped file.
pub(crate) type R<'a> = gimli::EndianSlice<'a, gimli::RunTimeEndian>;

/// An ELF file mapped into memory. Sections are read in place: nothing is
/// copied, and pages the queries do not touch are never read from disk.
/// A section stored compressed (`SHF_COMPRESSED` with zlib or zstd, or
/// GNU's older `.zdebug_*`) is decompressed once, on first use, into
/// memory the file keeps.
#[derive(Debug)]
pub struct DebugFile {
    path: PathBuf,
    map: memmap2::Mmap,
    /// For a relocatable file (a kernel module's `.ko`): its sections'
    /// layout and relocated debug sections, made on first use.
    relocated: OnceLock<Option<Relocated>>,
    /// The compressed sections, by the name asked for (`.debug_info` also
    /// for a `.zdebug_info`), each decompressed on first use.
    decompressed: OnceLock<HashMap<String, OnceLock<Vec<u8>>>>,
    /// The supplementary file whose units and strings this one's DWARF
    /// refers to (dwz's `.gnu_debugaltlink`, DWARF 5's `.debug_sup`),
    /// opened on first use.
    alt: OnceLock<Option<Box<DebugFile>>>,
    /// Files read beside this one (split DWARF's `.dwo` files and
    /// `.dwp`), each opened once and kept: slots made on first use, one
    /// per possible file, and which path is in which slot.
    companions: OnceLock<Vec<OnceLock<Option<DebugFile>>>>,
    companion_slots: Mutex<HashMap<PathBuf, usize>>,
}

impl DebugFile {
    /// Maps the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        // SAFETY: the map is read-only and private. Another process
        // truncating the file while it is mapped would make reads fault
        // (SIGBUS); debug files are not rewritten in place by package
        // managers (they are replaced by rename), which is the accepted
        // risk of every debugger that maps them.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
        // Queries jump around the file: read only the pages they touch
        // (no read-ahead), which keeps the resident set small. Advice only.
        let _ = map.advise(memmap2::Advice::Random);
        Ok(DebugFile {
            path,
            map,
            relocated: OnceLock::new(),
            decompressed: OnceLock::new(),
            alt: OnceLock::new(),
            companions: OnceLock::new(),
            companion_slots: Mutex::new(HashMap::new()),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// The GNU build ID of the file (from its `.note.gnu.build-id` or
    /// `.notes`), if it has one.
    pub fn build_id(&self) -> Result<Option<Vec<u8>>> {
        let obj = self.object()?;
        let id = obj.build_id().map_err(|e| self.elf_error(e))?;
        Ok(id.map(<[u8]>::to_vec))
    }

    /// The `.gnu_debuglink` of the file: the debug file's name and CRC.
    pub fn debuglink(&self) -> Result<Option<(String, u32)>> {
        let obj = self.object()?;
        let link = obj.gnu_debuglink().map_err(|e| self.elf_error(e))?;
        Ok(link.map(|(name, crc)| (String::from_utf8_lossy(name).into_owned(), crc)))
    }

    /// Whether the file carries DWARF (a non-empty `.debug_info`).
    pub fn has_dwarf(&self) -> bool {
        self.object()
            .ok()
            .and_then(|o| o.section_by_name(".debug_info").map(|s| s.size() > 0))
            .unwrap_or(false)
    }

    /// Whether the file is relocatable (ELF `ET_REL`: a kernel module's
    /// `.ko`), whose DWARF is read with its relocations applied.
    pub fn is_relocatable(&self) -> bool {
        self.object()
            .is_ok_and(|o| o.kind() == object::ObjectKind::Relocatable)
    }

    /// The layout and relocated debug sections of a relocatable file,
    /// made once; `None` for a linked file (read in place).
    pub(crate) fn relocated(&self) -> Result<Option<&Relocated>> {
        if let Some(r) = self.relocated.get() {
            return Ok(r.as_ref());
        }
        let obj = self.object()?;
        let made = if obj.kind() == object::ObjectKind::Relocatable {
            Some(Relocated::new(&obj, &self.path)?)
        } else {
            None
        };
        // Another thread may have made it first: either copy is the same.
        let _ = self.relocated.set(made);
        Ok(self.relocated.get().and_then(Option::as_ref))
    }

    pub(crate) fn object(&self) -> Result<object::File<'_>> {
        object::File::parse(&*self.map).map_err(|e| self.elf_error(e))
    }

    pub(crate) fn elf_error(&self, e: object::Error) -> Error {
        Error::Elf {
            path: self.path.clone(),
            reason: e.to_string(),
        }
    }
}

/// A function symbol of the ELF symbol table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FuncSymbol<'a> {
    pub(crate) address: u64,
    pub(crate) size: u64,
    pub(crate) name: &'a str,
    global: bool,
}

/// The function symbols of a file, sorted by address, one per address.
#[derive(Debug, Default)]
pub(crate) struct SymbolTable<'a> {
    symbols: Vec<FuncSymbol<'a>>,
}

impl<'a> SymbolTable<'a> {
    /// The function symbols of `obj`; `relocated`: the layout of a
    /// relocatable file's sections, whose symbols are section offsets.
    pub(crate) fn new(obj: &object::File<'a>, relocated: Option<&Relocated>) -> Self {
        let address = |s: &object::Symbol<'a, '_>| -> Option<u64> {
            match relocated {
                Some(r) => Some(r.base(s.section_index()?).checked_add(s.address())?),
                None => Some(s.address()),
            }
        };
        let mut symbols: Vec<FuncSymbol<'a>> = obj
            .symbols()
            .filter(|s| s.kind() == object::SymbolKind::Text)
            .filter_map(|s| {
                let address = address(&s).filter(|&a| a != 0)?;
                Some(FuncSymbol {
                    address,
                    size: s.size(),
                    name: s.name().ok().filter(|n| !n.is_empty())?,
                    global: s.is_global(),
                })
            })
            .collect();
        // Among aliases at one address keep the one a reader expects:
        // global first, then the fewest leading underscores, then the shortest.
        let rank = |s: &FuncSymbol<'a>| -> (u64, bool, usize, usize, &'a str) {
            let unders = s.name.len() - s.name.trim_start_matches('_').len();
            (s.address, !s.global, unders, s.name.len(), s.name)
        };
        symbols.sort_by(|a, b| rank(a).cmp(&rank(b)));
        symbols.dedup_by_key(|s| s.address);
        SymbolTable { symbols }
    }

    /// The symbol holding `address`, and the offset into it.
    pub(crate) fn symbolize(&self, address: u64) -> Option<(FuncSymbol<'a>, u64)> {
        let i = self.symbols.partition_point(|s| s.address <= address);
        let sym = *self.symbols.get(i.checked_sub(1)?)?;
        let off = address - sym.address;
        if sym.size != 0 && off >= sym.size {
            return None;
        }
        Some((sym, off))
    }
}

/// The other names of the function symbol `name` of a linked file: the
/// function symbols at its address, global ones first.
pub(crate) fn aliases(obj: &object::File<'_>, name: &str) -> Vec<String> {
    let text = |s: &object::Symbol<'_, '_>| s.kind() == object::SymbolKind::Text;
    let Some(address) = obj
        .symbols()
        .find(|s| text(s) && s.name() == Ok(name))
        .map(|s| s.address())
        .filter(|&a| a != 0)
    else {
        return Vec::new();
    };
    let mut names: Vec<(bool, String)> = obj
        .symbols()
        .filter(|s| text(s) && s.address() == address)
        .filter_map(|s| Some((!s.is_global(), s.name().ok()?.to_string())))
        .filter(|(_, n)| n != name && !n.is_empty())
        .collect();
    names.sort();
    names.dedup();
    names.into_iter().map(|(_, n)| n).collect()
}

/// Formats `address` as SYMBOL+OFFSET (or 0xADDRESS when no symbol holds it).
pub(crate) fn sym_off(symbols: &SymbolTable<'_>, address: u64) -> String {
    match symbols.symbolize(address) {
        Some((s, off)) => format!("{}+{}", s.name, off),
        None => format!("0x{address:x}"),
    }
}

/// The call frame information of a file: `.debug_frame` (the kernel's),
/// else `.eh_frame` (a user binary's, which gcc and clang emit instead).
pub(crate) enum Frames<'a> {
    /// `.debug_frame`.
    Debug(gimli::DebugFrame<R<'a>>),
    /// `.eh_frame`, with the section addresses its pointers are relative to.
    Eh(gimli::EhFrame<R<'a>>, gimli::BaseAddresses),
}

/// Loads the DWARF sections of `file` without copying them.
pub(crate) fn load_dwarf<'a>(
    file: &'a DebugFile,
    obj: &object::File<'a>,
) -> Result<(gimli::Dwarf<R<'a>>, Frames<'a>)> {
    let dwarf = load_with_sup(file, obj)?;
    let frames = load_frames(file, obj, endian(obj))?;
    Ok((dwarf, frames))
}

/// Loads the DWARF of `file` and, when it has one, of its supplementary
/// (dwz) file, which the first's `DW_FORM_GNU_ref_alt`/`GNU_strp_alt`
/// (`ref_sup`/`strp_sup`) forms point into.
fn load_with_sup<'a>(file: &'a DebugFile, obj: &object::File<'a>) -> Result<gimli::Dwarf<R<'a>>> {
    let endian = endian(obj);
    let section = |name: &str| section_bytes(file, obj, name);
    let mut dwarf = gimli::Dwarf::load(|id| section(id.name()).map(|d| R::new(d, endian)))?;
    if let Some(alt) = file.alt()? {
        let alt_obj = alt.object()?;
        let section = |name: &str| section_bytes(alt, &alt_obj, name);
        let sup = gimli::Dwarf::load(|id| section(id.name()).map(|d| R::new(d, endian)))?;
        dwarf.set_sup(sup);
    }
    Ok(dwarf)
}

impl DebugFile {
    /// The supplementary file this file's DWARF refers to, opened once:
    /// `None` when it names none.
    pub(crate) fn alt(&self) -> Result<Option<&DebugFile>> {
        if let Some(a) = self.alt.get() {
            return Ok(a.as_deref());
        }
        let found = match self.alt_link()? {
            Some((name, id)) => Some(Box::new(self.find_alt(&name, &id)?)),
            None => None,
        };
        let _ = self.alt.set(found);
        Ok(self.alt.get().and_then(Option::as_deref))
    }

    /// The file at `path` read beside this one (a `.dwo` or `.dwp`),
    /// opened once and kept; `None` when it is not there or not ELF.
    /// `most`: how many such files there can be (asked once).
    pub(crate) fn companion(
        &self,
        path: &Path,
        most: impl FnOnce() -> usize,
    ) -> Result<Option<&DebugFile>> {
        let slots = self
            .companions
            .get_or_init(|| (0..most()).map(|_| OnceLock::new()).collect());
        let slot = {
            let mut index = self.companion_slots.lock().map_err(|_| Error::Elf {
                path: path.to_path_buf(),
                reason: "a thread reading it panicked".into(),
            })?;
            let next = index.len();
            *index.entry(path.to_path_buf()).or_insert(next)
        };
        let Some(slot) = slots.get(slot) else {
            return Ok(None);
        };
        let file = slot.get_or_init(|| DebugFile::open(path).ok().filter(|f| f.object().is_ok()));
        Ok(file.as_ref())
    }

    /// The supplementary file's name and build ID (or DWARF 5 checksum),
    /// from `.gnu_debugaltlink` or `.debug_sup`.
    fn alt_link(&self) -> Result<Option<(PathBuf, Vec<u8>)>> {
        let obj = self.object()?;
        if let Some((name, id)) = obj.gnu_debugaltlink().map_err(|e| self.elf_error(e))? {
            let name = PathBuf::from(String::from_utf8_lossy(name).into_owned());
            return Ok(Some((name, id.to_vec())));
        }
        let sup = section_bytes(self, &obj, ".debug_sup")?;
        Ok(debug_sup(sup))
    }

    /// Finds the supplementary file `name` (absolute, or relative to
    /// this file's directory), else by build ID under /usr/lib/debug.
    fn find_alt(&self, name: &Path, id: &[u8]) -> Result<DebugFile> {
        let dir = self.path.parent().unwrap_or(Path::new("/"));
        let mut tried = vec![dir.join(name)];
        if let Some((first, rest)) = id.split_first() {
            tried.push(
                Path::new("/usr/lib/debug/.build-id")
                    .join(format!("{first:02x}"))
                    .join(format!("{}.debug", hex(rest))),
            );
        }
        for path in &tried {
            if !path.is_file() {
                continue;
            }
            let alt = DebugFile::open(path)?;
            let matches = alt.build_id()?.is_none_or(|b| id.is_empty() || b == id);
            if matches {
                return Ok(alt);
            }
        }
        Err(Error::NoAltFile {
            path: self.path.clone(),
            build_id: hex(id),
            tried,
        })
    }
}

/// The file name and checksum of a DWARF 5 `.debug_sup` section
/// (version 5, `is_supplementary` 0, a NUL-terminated name, a ULEB128
/// length and the checksum, in practice the build ID).
fn debug_sup(bytes: &[u8]) -> Option<(PathBuf, Vec<u8>)> {
    let rest = bytes.get(2..)?;
    let (&is_sup, rest) = rest.split_first()?;
    if is_sup != 0 {
        return None;
    }
    let nul = rest.iter().position(|&b| b == 0)?;
    let name = PathBuf::from(String::from_utf8_lossy(&rest[..nul]).into_owned());
    let mut reader = gimli::EndianSlice::new(rest.get(nul + 1..)?, gimli::LittleEndian);
    let len = gimli::Reader::read_uleb128(&mut reader).ok()?;
    let sum = reader.slice().get(..usize::try_from(len).ok()?)?;
    Some((name, sum.to_vec()))
}

/// The bytes of section `name` of `file` (empty when there is none):
/// relocated for a relocatable file, decompressed once when the file
/// stores it compressed, else in place.
pub(crate) fn section_bytes<'a>(
    file: &'a DebugFile,
    obj: &object::File<'a>,
    name: &str,
) -> Result<&'a [u8]> {
    if let Some(data) = file.relocated()?.and_then(|r| r.section(name)) {
        return Ok(data);
    }
    let Some(sec) = obj.section_by_name(name) else {
        return Ok(&[]);
    };
    let range = sec.compressed_file_range().map_err(|e| file.elf_error(e))?;
    if range.format == object::CompressionFormat::None {
        return sec.data().map_err(|e| file.elf_error(e));
    }
    file.decompressed(obj, name, &sec)
}

impl DebugFile {
    /// The decompressed bytes of the compressed section `sec` (asked for
    /// as `name`), made once and kept with the file.
    fn decompressed<'a>(
        &'a self,
        obj: &object::File<'a>,
        name: &str,
        sec: &object::Section<'a, '_>,
    ) -> Result<&'a [u8]> {
        let slots = self.decompressed.get_or_init(|| compressed_names(obj));
        let Some(slot) = slots.get(name) else {
            return Err(self.section_error(name, "it is compressed but was not listed as such"));
        };
        if let Some(data) = slot.get() {
            return Ok(data);
        }
        let data = sec
            .uncompressed_data()
            .map_err(|e| self.section_error(name, &format!("decompressing it failed: {e}")))?;
        // Another thread may have made it first: either copy is the same.
        let _ = slot.set(data.into_owned());
        Ok(slot.get().map_or(&[], Vec::as_slice))
    }

    fn section_error(&self, name: &str, why: &str) -> Error {
        Error::Elf {
            path: self.path.clone(),
            reason: format!("section {name}: {why}; the file may be truncated or damaged: reinstall the debug package"),
        }
    }
}

/// The names (as asked for: `.debug_X`, also for `.zdebug_X`) of the
/// compressed sections of `obj`, with empty slots for their bytes.
fn compressed_names(obj: &object::File<'_>) -> HashMap<String, OnceLock<Vec<u8>>> {
    obj.sections()
        .filter(|s| {
            s.compressed_file_range()
                .is_ok_and(|r| r.format != object::CompressionFormat::None)
        })
        .filter_map(|s| {
            let name = s.name().ok()?;
            let name = match name.strip_prefix(".zdebug_") {
                Some(rest) => format!(".debug_{rest}"),
                None => name.to_string(),
            };
            Some((name, OnceLock::new()))
        })
        .collect()
}

/// The call frame information of `file`: `.debug_frame`, else `.eh_frame`
/// when it has bytes (a separate debug file keeps it as NOBITS).
pub(crate) fn load_frames<'a>(
    file: &'a DebugFile,
    obj: &object::File<'a>,
    endian: gimli::RunTimeEndian,
) -> Result<Frames<'a>> {
    let section = |name: &str| section_bytes(file, obj, name);
    let debug_frame = section(".debug_frame")?;
    let eh = obj
        .section_by_name(".eh_frame")
        .filter(|s| s.kind() != object::SectionKind::UninitializedData);
    let frames = match eh {
        // A separate debug file keeps .eh_frame as NOBITS: no bytes there.
        Some(sec) if debug_frame.is_empty() => {
            let mut eh = gimli::EhFrame::new(section(".eh_frame")?, endian);
            eh.set_address_size(8);
            let mut bases = gimli::BaseAddresses::default().set_eh_frame(sec.address());
            if let Some(text) = obj.section_by_name(".text") {
                bases = bases.set_text(text.address());
            }
            if let Some(got) = obj.section_by_name(".got") {
                bases = bases.set_got(got.address());
            }
            Frames::Eh(eh, bases)
        }
        _ => {
            let mut frame = gimli::DebugFrame::new(debug_frame, endian);
            frame.set_address_size(8);
            Frames::Debug(frame)
        }
    };
    Ok(frames)
}

impl Frames<'_> {
    /// Whether there is no call frame information at all.
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Frames::Debug(f) => {
                let bases = gimli::BaseAddresses::default();
                let mut e = gimli::UnwindSection::entries(f, &bases);
                !matches!(e.next(), Ok(Some(_)))
            }
            Frames::Eh(..) => false,
        }
    }
}

/// The byte order of `obj`, as gimli takes it.
pub(crate) fn endian(obj: &object::File<'_>) -> gimli::RunTimeEndian {
    if obj.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
