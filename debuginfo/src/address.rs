//! The functions inlined at an address and its source line, from a debug
//! file's DWARF (what names the frames of kernel stacks), through
//! `addr2line` over the file mapped in place.
//!
//! A vmlinux linked with `--emit-relocs` keeps `.rela.debug_*` sections.
//! They are not applied: the debug sections of a linked file already hold
//! the link-time values (applying Debian 6.1's, as `addr2line`'s own
//! loader does, took 7 s and 1 GB before the first answer; mapped in
//! place, 0.17 s and 146 MB).

use std::path::Path;

use addr2line::gimli;

use crate::error::{Error, Result};
use crate::file::DebugFile;

type Reader = gimli::EndianSlice<'static, gimli::RunTimeEndian>;

/// One source-level frame at an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressFrame {
    /// The function, when DWARF names it (assembly has no function).
    pub function: Option<String>,
    /// The source file, as the DWARF gives it.
    pub file: Option<String>,
    /// The line (0: unknown).
    pub line: u32,
}

/// Answers "what is at this address" from one debug file.
pub struct AddressLookup {
    context: addr2line::Context<Reader>,
}

impl std::fmt::Debug for AddressLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressLookup").finish_non_exhaustive()
    }
}

impl AddressLookup {
    /// Maps the debug file at `path` for lookups. The mapping is kept
    /// for the rest of the process (the lookups borrow it): open each file
    /// once.
    pub fn open(path: &Path) -> Result<AddressLookup> {
        let file: &'static DebugFile = Box::leak(Box::new(DebugFile::open(path)?));
        let obj = file.object()?;
        let endian = if object::Object::is_little_endian(&obj) {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let section = |name: &str| crate::file::section_bytes(file, &obj, name);
        let mut dwarf =
            gimli::Dwarf::load(|id| section(id.name()).map(|d| Reader::new(d, endian)))?;
        // A dwz file's units and strings, which this one's point into.
        if let Some(alt) = file.alt()? {
            let alt_obj = alt.object()?;
            let section = |name: &str| crate::file::section_bytes(alt, &alt_obj, name);
            dwarf.set_sup(gimli::Dwarf::load(|id| {
                section(id.name()).map(|d| Reader::new(d, endian))
            })?);
        }
        let context = addr2line::Context::from_dwarf(dwarf).map_err(|e| Error::Elf {
            path: file.path().to_path_buf(),
            reason: format!("reading its DWARF: {e}"),
        })?;
        Ok(AddressLookup { context })
    }

    /// The frames at `address` (link-time), innermost (inlined) first;
    /// empty when the DWARF does not cover it.
    pub fn frames(&self, address: u64) -> Vec<AddressFrame> {
        let mut out = Vec::new();
        let Ok(mut frames) = self.context.find_frames(address).skip_all_loads() else {
            return out;
        };
        while let Ok(Some(f)) = frames.next() {
            let function = f
                .function
                .as_ref()
                .and_then(|n| n.raw_name().ok().map(|s| s.into_owned()));
            let (file, line) = f.location.as_ref().map_or((None, 0), |l| {
                (l.file.map(str::to_string), l.line.unwrap_or(0))
            });
            out.push(AddressFrame {
                function,
                file,
                line,
            });
        }
        out
    }
}
