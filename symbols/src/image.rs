//! The kernel image on disk: an unstripped (or stripped) `vmlinux` ELF and
//! `System.map`. They give what `/proc/kallsyms` lacks: the exact size of
//! each function (ELF `st_size`, where kallsyms only knows the distance to
//! the next symbol) and the bytes of kernel text when `/proc/kcore` cannot
//! be read. Their addresses are link-time ones; [`KaslrSlide`] maps them to
//! the running kernel and refuses an image built for another kernel.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use object::elf::{
    FileHeader64, SectionHeader64, Sym64, SHF_ALLOC, SHN_UNDEF, SHT_NOBITS, SHT_NOTE, SHT_SYMTAB,
    STT_FUNC,
};
use object::read::elf::{FileHeader, SectionHeader, Sym};
use object::{LittleEndian, ReadCache};

use crate::KernelSymbols;

/// Errors from reading a kernel image or matching it to the running kernel.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// The file could not be read (why: the `source()`, which a caller
    /// printing the chain shows once).
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not a 64-bit little-endian ELF.
    #[error("{path} is not a vmlinux ELF image: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's reason.
        reason: String,
    },
    /// A System.map with no kernel symbols, such as the placeholder Debian
    /// installs in /boot.
    #[error("{path} holds no kernel symbols (Debian's /boot copy is a placeholder; the real System.map comes with the linux-image-VERSION-dbg package, in /usr/lib/debug/boot)")]
    Placeholder {
        /// The file.
        path: PathBuf,
    },
    /// The image's build ID differs from the running kernel's.
    #[error("{path} was built for another kernel: its build ID is {image}, the running kernel's (/sys/kernel/notes) is {running}; give the vmlinux of `uname -r`")]
    BuildIdMismatch {
        /// The image.
        path: PathBuf,
        /// The image's build ID, hex.
        image: String,
        /// The running kernel's, hex.
        running: String,
    },
    /// Symbols moved by different amounts: the image belongs to another
    /// build.
    #[error("{path} does not match the running kernel: _text is slid by 0x{slide:x}, but {mismatched} of {checked} symbols are not (first: {example}); give the vmlinux or System.map of `uname -r`")]
    SlideMismatch {
        /// The image or map.
        path: PathBuf,
        /// The slide `_text` gives.
        slide: u64,
        /// How many symbols were compared.
        checked: usize,
        /// How many disagreed.
        mismatched: usize,
        /// The first disagreement, `name: running 0x.. image 0x..`.
        example: String,
    },
    /// The slide cannot be computed.
    #[error("cannot relate {path} to the running kernel: {reason}")]
    NoSlide {
        /// The image or map.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// A symbol of the image, at its link-time address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSymbol {
    /// Name.
    pub name: String,
    /// Link-time address.
    pub address: u64,
    /// `st_size` (0 for assembly without `.size`, and for System.map).
    pub size: u64,
    /// True for functions (`STT_FUNC`, or `T`/`t` in System.map).
    pub is_function: bool,
}

/// A vmlinux or System.map: symbols at link-time addresses and, for a
/// vmlinux, the bytes of its allocated sections.
pub struct KernelImage {
    path: PathBuf,
    file: Option<File>,
    /// (link address, size, file offset) of allocated sections with bytes.
    sections: Vec<(u64, u64, u64)>,
    /// Sorted by address, functions before other symbols at one address.
    symbols: Vec<ImageSymbol>,
    by_name: HashMap<String, Vec<usize>>,
    build_id: Option<Vec<u8>>,
}

impl std::fmt::Debug for KernelImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelImage")
            .field("path", &self.path)
            .field("sections", &self.sections.len())
            .field("symbols", &self.symbols.len())
            .finish_non_exhaustive()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The GNU build ID in a sequence of ELF notes (the `.notes` section, or
/// `/sys/kernel/notes`).
pub fn build_id_in_notes(notes: &[u8]) -> Option<Vec<u8>> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let word = |at: usize| -> Option<usize> {
        let b = notes.get(at..at + 4)?;
        usize::try_from(u32::from_le_bytes(b.try_into().ok()?)).ok()
    };
    let mut at = 0usize;
    while at + 12 <= notes.len() {
        let (namesz, descsz, kind) = (word(at)?, word(at + 4)?, word(at + 8)?);
        let name_at = at + 12;
        let desc_at = name_at.checked_add(namesz.checked_add(3)? & !3)?;
        let next = desc_at.checked_add(descsz.checked_add(3)? & !3)?;
        let name = notes.get(name_at..name_at + namesz)?;
        if kind == NT_GNU_BUILD_ID as usize && name == b"GNU\0" {
            return notes.get(desc_at..desc_at + descsz).map(<[u8]>::to_vec);
        }
        at = next;
    }
    None
}

/// The running kernel's build ID, from `/sys/kernel/notes` (readable by
/// everyone), if the kernel has one.
pub fn running_build_id() -> Option<Vec<u8>> {
    std::fs::read("/sys/kernel/notes")
        .ok()
        .and_then(|n| build_id_in_notes(&n))
}

/// Where distributions install the vmlinux of kernel `release`, in the
/// order they are tried.
pub fn vmlinux_candidates(release: &str) -> Vec<PathBuf> {
    [
        format!("/usr/lib/debug/boot/vmlinux-{release}"),
        format!("/usr/lib/debug/lib/modules/{release}/vmlinux"),
        format!("/boot/vmlinux-{release}"),
        format!("/lib/modules/{release}/build/vmlinux"),
        format!("/lib/modules/{release}/vmlinux"),
    ]
    .into_iter()
    .map(PathBuf::from)
    .collect()
}

/// Where distributions install the System.map of kernel `release`.
pub fn system_map_candidates(release: &str) -> Vec<PathBuf> {
    [
        format!("/usr/lib/debug/boot/System.map-{release}"),
        format!("/boot/System.map-{release}"),
        format!("/lib/modules/{release}/build/System.map"),
    ]
    .into_iter()
    .map(PathBuf::from)
    .collect()
}

/// The largest System.map read (it is read whole; a kernel's has a few
/// hundred thousand lines, well under 64 MiB).
pub const MAX_SYSTEM_MAP_BYTES: u64 = 256 << 20;

/// The defined, named symbols of an ELF symbol table (`strings` its
/// string table); an entry whose name is out of bounds or not UTF-8 is
/// left out.
fn named_symbols(entries: &[Sym64<LittleEndian>], strings: &[u8]) -> Vec<ImageSymbol> {
    let endian = LittleEndian;
    let mut symbols = Vec::new();
    for e in entries {
        let address = e.st_value(endian);
        if address == 0 || e.st_shndx(endian) == SHN_UNDEF {
            continue;
        }
        let at = usize::try_from(e.st_name(endian)).unwrap_or(usize::MAX);
        let Some(rest) = strings.get(at..) else {
            continue;
        };
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        let Ok(name) = std::str::from_utf8(&rest[..end]) else {
            continue;
        };
        if name.is_empty() {
            continue;
        }
        symbols.push(ImageSymbol {
            name: name.to_string(),
            address,
            size: e.st_size(endian),
            is_function: e.st_type() == STT_FUNC,
        });
    }
    symbols
}

impl KernelImage {
    /// Reads a vmlinux: its symbol table (if not stripped), its allocated
    /// sections and its build ID. Section bytes are read on demand.
    pub fn open_vmlinux(path: &Path) -> Result<KernelImage, ImageError> {
        let read_error = |source| ImageError::Read {
            path: path.to_path_buf(),
            source,
        };
        let parse_error = |reason: String| ImageError::Parse {
            path: path.to_path_buf(),
            reason,
        };
        // A regular file: a FIFO would block, a device never end.
        let (file, file_len) = crate::file::open_regular(path).map_err(read_error)?;
        // Headers through object's cache; the symbol and string tables
        // are read whole, one pread each (a string at a time is a system
        // call per symbol, minutes over 9p under TCG).
        let cache = ReadCache::new(&file);
        let header =
            FileHeader64::<LittleEndian>::parse(&cache).map_err(|e| parse_error(e.to_string()))?;
        if !header.is_little_endian() {
            return Err(parse_error("big-endian images are not supported".into()));
        }
        let endian = LittleEndian;
        // Every section read or kept lies inside the file, so that no
        // allocation exceeds the file's size.
        let inside = |sh: &SectionHeader64<LittleEndian>| -> Result<(), ImageError> {
            let (offset, size) = (sh.sh_offset(endian), sh.sh_size(endian));
            match offset.checked_add(size) {
                Some(end) if end <= file_len => Ok(()),
                _ => Err(parse_error(format!(
                    "a section of {size} bytes at byte {offset} runs past the end of the file ({file_len} bytes): the file is truncated or corrupt"
                ))),
            }
        };
        let headers = header
            .section_headers(endian, &cache)
            .map_err(|e| parse_error(e.to_string()))?;
        let read_section = |sh: &SectionHeader64<LittleEndian>| -> Result<Vec<u8>, ImageError> {
            inside(sh)?;
            let len = usize::try_from(sh.sh_size(endian))
                .map_err(|_| parse_error("a section too large to read".into()))?;
            let mut buf = vec![0u8; len];
            file.read_exact_at(&mut buf, sh.sh_offset(endian))
                .map_err(read_error)?;
            Ok(buf)
        };
        let mut sections = Vec::new();
        let mut build_id = None;
        let mut symtab = None;
        for sh in headers {
            let (kind, flags) = (sh.sh_type(endian), sh.sh_flags(endian));
            if kind == SHT_NOTE && build_id.is_none() {
                build_id = build_id_in_notes(&read_section(sh)?);
            }
            if kind == SHT_SYMTAB {
                symtab = Some(sh);
            }
            let addr = sh.sh_addr(endian);
            if flags.0 & SHF_ALLOC.0 == 0 || kind == SHT_NOBITS || addr == 0 {
                continue;
            }
            inside(sh)?;
            sections.push((addr, sh.sh_size(endian), sh.sh_offset(endian)));
        }
        let mut symbols = Vec::new();
        if let Some(sh) = symtab {
            let strtab = usize::try_from(sh.sh_link(endian))
                .ok()
                .and_then(|i| headers.get(i))
                .ok_or_else(|| parse_error("the symbol table has no string table".into()))?;
            let strings = read_section(strtab)?;
            let table = read_section(sh)?;
            let entries = object::pod::slice_from_all_bytes::<Sym64<LittleEndian>>(&table)
                .map_err(|_| parse_error("a symbol table of partial entries".into()))?;
            symbols = named_symbols(entries, &strings);
        }
        symbols.sort_by(|a, b| {
            a.address
                .cmp(&b.address)
                .then(b.is_function.cmp(&a.is_function))
                .then(b.size.cmp(&a.size))
        });
        Ok(KernelImage {
            by_name: index(&symbols),
            path: path.to_path_buf(),
            file: Some(file),
            sections,
            symbols,
            build_id,
        })
    }

    /// Reads a System.map (`ADDR TYPE NAME` lines): names and link-time
    /// addresses, no sizes and no bytes.
    pub fn open_system_map(path: &Path) -> Result<KernelImage, ImageError> {
        let text =
            crate::file::read_regular_text(path, MAX_SYSTEM_MAP_BYTES).map_err(|source| {
                ImageError::Read {
                    path: path.to_path_buf(),
                    source,
                }
            })?;
        let mut symbols = Vec::new();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (Some(addr), Some(kind), Some(name), None) =
                (words.next(), words.next(), words.next(), words.next())
            else {
                continue;
            };
            let Ok(address) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if kind.len() != 1 {
                continue;
            }
            symbols.push(ImageSymbol {
                name: name.to_string(),
                address,
                size: 0,
                is_function: matches!(kind, "T" | "t" | "W" | "w"),
            });
        }
        if !symbols.iter().any(|s| s.name == "_text") {
            return Err(ImageError::Placeholder {
                path: path.to_path_buf(),
            });
        }
        symbols.sort_by_key(|s| s.address);
        Ok(KernelImage {
            by_name: index(&symbols),
            path: path.to_path_buf(),
            file: None,
            sections: Vec::new(),
            symbols,
            build_id: None,
        })
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True when the image has section bytes (a vmlinux, stripped or not).
    pub fn has_text(&self) -> bool {
        !self.sections.is_empty()
    }

    /// The image's symbols, by address (empty for a stripped vmlinux).
    pub fn symbols(&self) -> &[ImageSymbol] {
        &self.symbols
    }

    /// The GNU build ID in the image's notes.
    pub fn build_id(&self) -> Option<&[u8]> {
        self.build_id.as_deref()
    }

    /// Every symbol named `name`.
    pub fn lookup(&self, name: &str) -> Vec<&ImageSymbol> {
        self.by_name
            .get(name)
            .map(|v| v.iter().filter_map(|&i| self.symbols.get(i)).collect())
            .unwrap_or_default()
    }

    /// The function starting exactly at link address `address`, preferring
    /// one with a size.
    pub fn function_at(&self, address: u64) -> Option<&ImageSymbol> {
        let first = self.symbols.partition_point(|s| s.address < address);
        self.symbols[first..]
            .iter()
            .take_while(|s| s.address == address)
            .find(|s| s.is_function)
    }

    /// `len` bytes at link address `address`, from the file.
    pub fn read(&self, address: u64, len: usize) -> Result<Vec<u8>, String> {
        let file = self
            .file
            .as_ref()
            .ok_or_else(|| format!("{} is a symbol map and holds no bytes", self.path.display()))?;
        let end = address.saturating_add(len as u64);
        let (start, _, offset) = self
            .sections
            .iter()
            .find(|(a, size, _)| *a <= address && end <= a.saturating_add(*size))
            .ok_or_else(|| format!("0x{address:x} is in no section of {}", self.path.display()))?;
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, offset + (address - start))
            .map_err(|e| format!("reading {}: {e}", self.path.display()))?;
        Ok(buf)
    }

    /// Relates this image to the running kernel's symbols: the KASLR slide
    /// from `_text`, confirmed on up to 64 functions spread over the core
    /// kernel, and the build IDs when both are known (`running`, from
    /// [`running_build_id`]).
    pub fn slide_against(
        &self,
        live: &KernelSymbols,
        running: Option<&[u8]>,
    ) -> Result<KaslrSlide, ImageError> {
        if let (Some(image), Some(running)) = (self.build_id(), running) {
            if image != running {
                return Err(ImageError::BuildIdMismatch {
                    path: self.path.clone(),
                    image: hex(image),
                    running: hex(running),
                });
            }
        }
        let no_slide = |reason: &str| ImageError::NoSlide {
            path: self.path.clone(),
            reason: reason.to_string(),
        };
        if live.addresses_hidden() {
            return Err(no_slide(
                "/proc/kallsyms hides addresses from this process (run as root or lower kernel.kptr_restrict)",
            ));
        }
        if self.symbols.is_empty() {
            return Err(no_slide(
                "it has no symbol table (a stripped vmlinux); give the System.map of the same build too",
            ));
        }
        let anchor = |name: &str| -> Option<(u64, u64)> {
            let l = live.lookup(name);
            let i = self.lookup(name);
            match (l.as_slice(), i.as_slice()) {
                ([l], [i, ..]) if l.module.is_none() => Some((l.address, i.address)),
                _ => None,
            }
        };
        let (live_text, image_text) = anchor("_text")
            .ok_or_else(|| no_slide("_text is missing from kallsyms or from the image"))?;
        let slide = live_text.wrapping_sub(image_text);
        // Unique core functions spread over the table.
        let core: Vec<_> = live
            .iter()
            .filter(|s| s.module.is_none() && s.is_text())
            .collect();
        let step = (core.len() / 64).max(1);
        let mut checked = 0usize;
        let mut mismatched = 0usize;
        let mut example = String::new();
        for s in core.iter().step_by(step) {
            if live.lookup(&s.name).len() != 1 {
                continue;
            }
            let [i] = self.lookup(&s.name)[..] else {
                continue;
            };
            checked += 1;
            if s.address.wrapping_sub(i.address) != slide {
                if mismatched == 0 {
                    example = format!(
                        "{}: running 0x{:x}, image 0x{:x}",
                        s.name, s.address, i.address
                    );
                }
                mismatched += 1;
            }
        }
        if mismatched > 0 {
            return Err(ImageError::SlideMismatch {
                path: self.path.clone(),
                slide,
                checked,
                mismatched,
                example,
            });
        }
        Ok(KaslrSlide {
            slide,
            checked,
            build_id_checked: self.build_id.is_some() && running.is_some(),
        })
    }
}

fn index(symbols: &[ImageSymbol]) -> HashMap<String, Vec<usize>> {
    let mut map: HashMap<String, Vec<usize>> = HashMap::with_capacity(symbols.len());
    for (i, s) in symbols.iter().enumerate() {
        map.entry(s.name.clone()).or_default().push(i);
    }
    map
}

/// How far the running kernel was moved from its link-time addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KaslrSlide {
    /// Running address minus link-time address (wrapping).
    pub slide: u64,
    /// Functions beyond `_text` found moved by exactly `slide`.
    pub checked: usize,
    /// True when the build IDs were compared (and matched).
    pub build_id_checked: bool,
}

impl KaslrSlide {
    /// The running address of link-time `address`.
    pub fn to_running(&self, address: u64) -> u64 {
        address.wrapping_add(self.slide)
    }

    /// The link-time address of running `address`.
    pub fn to_link(&self, address: u64) -> u64 {
        address.wrapping_sub(self.slide)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(name.len() as u32).to_le_bytes());
        v.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        v.extend_from_slice(&kind.to_le_bytes());
        v.extend_from_slice(name);
        v.resize(v.len().next_multiple_of(4), 0);
        v.extend_from_slice(desc);
        v.resize(v.len().next_multiple_of(4), 0);
        v
    }

    #[test]
    fn build_id_is_found_after_other_notes() {
        let mut notes = note(b"Xen\0", 6, &[1, 2, 3]);
        notes.extend(note(b"GNU\0", 3, &[0xeb, 0x4f, 0xbc, 0xd0, 0x37]));
        assert_eq!(
            build_id_in_notes(&notes),
            Some(vec![0xeb, 0x4f, 0xbc, 0xd0, 0x37])
        );
        assert_eq!(build_id_in_notes(&notes[..20]), None);
        assert_eq!(build_id_in_notes(&[0xff; 40]), None);
    }

    fn map(text: &str) -> (tempdir::Dir, PathBuf) {
        let dir = tempdir::Dir::new();
        let path = dir.0.join("System.map");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    mod tempdir {
        pub(super) struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub(super) fn new() -> Dir {
                use std::sync::atomic::{AtomicUsize, Ordering};
                static N: AtomicUsize = AtomicUsize::new(0);
                let p = std::env::temp_dir().join(format!(
                    "kprobe-perf-image-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    const MAP: &str = "0000000000000000 D __per_cpu_start\n\
                       ffffffff81000000 T _stext\n\
                       ffffffff81000000 T _text\n\
                       ffffffff81076650 T __fentry__\n\
                       ffffffff81363fa0 t do_sys_openat2\n\
                       ffffffff81364100 T do_sys_open\n";

    #[test]
    fn system_map_gives_the_slide_and_catches_another_build() {
        let (_d, path) = map(MAP);
        let image = KernelImage::open_system_map(&path).unwrap();
        assert!(!image.has_text());
        assert_eq!(
            image.lookup("do_sys_openat2")[0].address,
            0xffffffff81363fa0
        );
        let live = KernelSymbols::parse(
            "ffffffff9a000000 T _stext\nffffffff9a000000 T _text\nffffffff9a076650 T __fentry__\n\
             ffffffff9a363fa0 t do_sys_openat2\nffffffff9a364100 T do_sys_open\n",
        )
        .unwrap();
        let slide = image.slide_against(&live, None).unwrap();
        assert_eq!(slide.slide, 0x19000000);
        assert_eq!(slide.checked, 5);
        assert_eq!(slide.to_running(0xffffffff81363fa0), 0xffffffff9a363fa0);

        let other = KernelSymbols::parse(
            "ffffffff9a000000 T _stext\nffffffff9a000000 T _text\nffffffff9a076650 T __fentry__\n\
             ffffffff9a363fb0 t do_sys_openat2\nffffffff9a364100 T do_sys_open\n",
        )
        .unwrap();
        let err = image.slide_against(&other, None).unwrap_err().to_string();
        assert!(
            err.ends_with("does not match the running kernel: _text is slid by 0x19000000, but 1 of 5 symbols are not (first: do_sys_openat2: running 0xffffffff9a363fb0, image 0xffffffff81363fa0); give the vmlinux or System.map of `uname -r`"),
            "{err}"
        );
    }

    #[test]
    fn debian_placeholder_map_is_named_as_such() {
        let (_d, path) = map(
            "ffffffffffffffff B The real System.map is in the linux-image-<version>-dbg package\n",
        );
        let err = KernelImage::open_system_map(&path).unwrap_err();
        assert!(matches!(err, ImageError::Placeholder { .. }), "{err}");
    }

    #[test]
    fn build_ids_must_match() {
        let (_d, path) = map(MAP);
        let mut image = KernelImage::open_system_map(&path).unwrap();
        image.build_id = Some(vec![0xab, 0xcd]);
        let live = KernelSymbols::parse(MAP).unwrap();
        let err = image
            .slide_against(&live, Some(&[0xab, 0xce]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("its build ID is abcd, the running kernel's (/sys/kernel/notes) is abce"),
            "{err}"
        );
        let ok = image.slide_against(&live, Some(&[0xab, 0xcd])).unwrap();
        assert!(ok.build_id_checked);
        assert_eq!(ok.slide, 0);
    }
}
