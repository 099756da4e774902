//! Symbols of user-space ELF binaries and libraries, for uprobes: where a
//! function is, as the file offset the uprobe PMU takes.

use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

/// Errors from reading a user binary.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElfError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not an ELF object this reader understands.
    #[error("{path} is not a readable ELF file: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's reason.
        reason: String,
    },
    /// No function of that name.
    #[error("{path} has no function {name} in its symbol tables (stripped binaries keep only exported ones; give a file offset instead: {path}:0xOFFSET)")]
    NotFound {
        /// The file.
        path: PathBuf,
        /// The name.
        name: String,
    },
    /// The symbol's address lies in no loadable segment.
    #[error("{name} in {path} is at 0x{address:x}, outside every loadable segment")]
    NoSegment {
        /// The file.
        path: PathBuf,
        /// The name.
        name: String,
        /// Its virtual address.
        address: u64,
    },
}

/// A function of a user binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserSymbol {
    /// The symbol's name.
    pub name: String,
    /// Its virtual address in the file's own address space.
    pub address: u64,
    /// Its size in bytes (0 when the table does not say).
    pub size: u64,
    /// The file offset of its first byte (what the uprobe PMU takes).
    pub file_offset: u64,
}

/// The largest binary whose symbol tables are read (it is read whole).
pub const MAX_BINARY_BYTES: u64 = 4 << 30;

/// The size in bytes of the binary at `path`, which must be a regular
/// file (a uprobe in a device, FIFO or directory is refused here, before
/// the kernel is asked).
pub fn binary_size(path: &Path) -> Result<u64, ElfError> {
    crate::file::open_regular(path)
        .map(|(_, size)| size)
        .map_err(|source| ElfError::Read {
            path: path.to_path_buf(),
            source,
        })
}

/// The function `name` of the binary at `path`, from `.symtab` or, when
/// stripped, `.dynsym`.
pub fn find_function(path: &Path, name: &str) -> Result<UserSymbol, ElfError> {
    let data =
        crate::file::read_regular(path, MAX_BINARY_BYTES).map_err(|source| ElfError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    let file = object::File::parse(&*data).map_err(|e| ElfError::Parse {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let sym = file
        .symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.kind() == SymbolKind::Text && s.address() != 0 && s.name() == Ok(name))
        .ok_or_else(|| ElfError::NotFound {
            path: path.to_path_buf(),
            name: name.to_string(),
        })?;
    let address = sym.address();
    let file_offset = file
        .segments()
        .find_map(|seg| {
            let (off, size) = seg.file_range();
            let start = seg.address();
            (address >= start && address - start < size).then(|| off + (address - start))
        })
        .ok_or_else(|| ElfError::NoSegment {
            path: path.to_path_buf(),
            name: name.to_string(),
            address,
        })?;
    Ok(UserSymbol {
        name: name.to_string(),
        address,
        size: sym.size(),
        file_offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_function_of_this_test_binary() {
        let exe = std::env::current_exe().unwrap();
        // main of the test harness is always there, and unmangled.
        let main = find_function(&exe, "main").unwrap();
        assert!(main.address > 0);
        assert!(main.file_offset > 0 && main.file_offset < std::fs::metadata(&exe).unwrap().len());
        let e = find_function(&exe, "no_such_function_kprobe_perf").unwrap_err();
        assert!(matches!(e, ElfError::NotFound { .. }), "{e}");
        let e = find_function(Path::new("/proc/cpuinfo"), "main").unwrap_err();
        assert!(matches!(e, ElfError::Parse { .. }), "{e}");
    }

    #[test]
    fn only_regular_files_are_read() {
        let e = find_function(Path::new("/dev/zero"), "main").unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot read /dev/zero: it is a character device, not a regular file"
        );
        let e = binary_size(Path::new("/")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot read /: it is a directory, not a regular file"
        );
        let exe = std::env::current_exe().unwrap();
        assert_eq!(
            binary_size(&exe).unwrap(),
            std::fs::metadata(&exe).unwrap().len()
        );
    }
}
