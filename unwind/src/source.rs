//! Inlined frames and `file:line` of an address, from the DWARF of the
//! file that holds it (or of its debug file), through `addr2line`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::dwarf::DebugDwarf;
use crate::object::ElfFile;

/// One source-level frame at an address: a function, possibly inlined
/// into the next frame, and where in the source it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFrame {
    /// The function's name, demangled; `None` when DWARF does not name it.
    pub function: Option<String>,
    /// The source file.
    pub file: Option<String>,
    /// The line in it (0: unknown).
    pub line: u32,
    /// Whether this frame is inlined into the next one (every frame but
    /// the outermost of an address).
    pub inlined: bool,
}

/// The DWARF of each debug file, opened on first use.
#[derive(Default)]
pub(crate) struct SourceCache {
    loaders: HashMap<PathBuf, Option<DebugDwarf>>,
}

impl SourceCache {
    fn loader(&mut self, path: PathBuf) -> Option<&DebugDwarf> {
        self.loaders
            .entry(path)
            .or_insert_with_key(|p| DebugDwarf::open(p))
            .as_ref()
    }

    /// The symbol holding `svma` of `file` and the offset into it: from
    /// its debug file's symbol table, else its own (`.symtab` or
    /// `.dynsym`).
    pub(crate) fn symbol(
        &mut self,
        file: &ElfFile,
        debug_root: &Path,
        svma: u64,
    ) -> Option<(String, u64)> {
        let mut paths = vec![file.path.clone()];
        if let Some(debug) = file.debug_file(debug_root).filter(|d| *d != file.path) {
            paths.insert(0, debug);
        }
        for p in paths {
            if let Some((name, address)) = self.loader(p).and_then(|l| l.symbol(svma)) {
                return Some((name.to_string(), svma.wrapping_sub(address)));
            }
        }
        None
    }

    /// The frames at `svma` of `file`, innermost first.
    pub(crate) fn frames(
        &mut self,
        file: &ElfFile,
        debug_root: &Path,
        svma: u64,
    ) -> Vec<SourceFrame> {
        let Some(debug) = file.debug_file(debug_root) else {
            return Vec::new();
        };
        let Some(loader) = self.loader(debug) else {
            return Vec::new();
        };
        let Some(mut iter) = loader.frames(svma) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while let Ok(Some(frame)) = iter.next() {
            let function = frame
                .function
                .as_ref()
                .and_then(|n| n.demangle().ok().map(|s| s.into_owned()));
            let (file, line) = frame
                .location
                .as_ref()
                .map(|l| (l.file.map(str::to_string), l.line.unwrap_or(0)))
                .unwrap_or((None, 0));
            out.push(SourceFrame {
                function,
                file,
                line,
                inlined: true,
            });
        }
        if let Some(last) = out.last_mut() {
            last.inlined = false;
        }
        out
    }
}

/// Inlined frames and `file:line` of addresses in binaries, looked up
/// by path, apart from any unwinding: what names the frames of stacks
/// unwound earlier (or by the kernel).
pub struct SourceLookup {
    files: crate::object::FileCache,
    sources: SourceCache,
    debug_root: PathBuf,
}

impl Default for SourceLookup {
    fn default() -> Self {
        SourceLookup::new()
    }
}

impl SourceLookup {
    /// A lookup that finds debug files under `/usr/lib/debug` (by build
    /// ID, or by `.gnu_debuglink`), or in the binary itself.
    pub fn new() -> SourceLookup {
        SourceLookup {
            files: crate::object::FileCache::default(),
            sources: SourceCache::default(),
            debug_root: PathBuf::from("/usr/lib/debug"),
        }
    }

    /// The source frames at `svma` (the address as the binary's own
    /// headers place it) of the binary at `path`, innermost (inlined)
    /// first; empty when no DWARF covers it. Files are read once.
    pub fn frames(&mut self, path: &Path, svma: u64) -> Vec<SourceFrame> {
        let Some(file) = self.files.get(path) else {
            return Vec::new();
        };
        self.sources.frames(&file, &self.debug_root, svma)
    }
}
