//! Where kernel text bytes come from: the live text in `/proc/kcore` (an
//! ELF64 core file whose PT_LOAD segments map kernel virtual addresses to
//! file offsets), or a vmlinux on disk moved by the KASLR slide.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use kprobe_perf_symbols::image::{KaslrSlide, KernelImage};
use object::elf::{FileHeader64, PT_LOAD};
use object::read::elf::{FileHeader, ProgramHeader};
use object::{LittleEndian, ReadCache};

use crate::preflight::KernelTextSource;

/// `/proc/kcore`, opened, with its loadable segments.
pub struct Kcore {
    file: File,
    /// (virtual address, size, file offset)
    segments: Vec<(u64, u64, u64)>,
}

impl Kcore {
    /// Opens `/proc/kcore` (root, CONFIG_PROC_KCORE).
    pub fn open() -> io::Result<Kcore> {
        Self::open_path("/proc/kcore")
    }

    /// Opens a kcore-format file: a little-endian ELF64 core whose
    /// `PT_LOAD` program headers map kernel addresses to file offsets.
    pub fn open_path(path: &str) -> io::Result<Kcore> {
        let file = File::open(path)?;
        let not_core = |reason: &dyn std::fmt::Display| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{path} is not a little-endian ELF64 core: {reason}"),
            )
        };
        // Only the headers are read, through object's cache (kcore is as
        // large as the kernel's address space).
        let segments = {
            let cache = ReadCache::new(&file);
            let header = FileHeader64::<LittleEndian>::parse(&cache).map_err(|e| not_core(&e))?;
            if !header.is_little_endian() {
                return Err(not_core(&"it is big-endian"));
            }
            header
                .program_headers(LittleEndian, &cache)
                .map_err(|e| not_core(&e))?
                .iter()
                .filter(|ph| ph.p_type(LittleEndian) == PT_LOAD)
                .map(|ph| {
                    (
                        ph.p_vaddr(LittleEndian),
                        ph.p_filesz(LittleEndian),
                        ph.p_offset(LittleEndian),
                    )
                })
                .collect()
        };
        Ok(Kcore { file, segments })
    }

    /// The loadable segments: (kernel virtual address, size, file offset).
    pub fn segments(&self) -> &[(u64, u64, u64)] {
        &self.segments
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

/// Kernel text from a vmlinux on disk, at running addresses (moved by the
/// KASLR slide). Runtime patching (alternatives, jump labels, static calls,
/// ftrace) is not visible in it.
pub struct ImageText {
    image: Arc<KernelImage>,
    slide: KaslrSlide,
}

impl ImageText {
    /// Text of `image`, whose link-time addresses `slide` moves to the
    /// running kernel's.
    pub fn new(image: impl Into<Arc<KernelImage>>, slide: KaslrSlide) -> ImageText {
        ImageText {
            image: image.into(),
            slide,
        }
    }

    /// The image.
    pub fn image(&self) -> &KernelImage {
        &self.image
    }

    /// The slide in use.
    pub fn slide(&self) -> KaslrSlide {
        self.slide
    }

    /// The ELF size of the function that starts at running `address`.
    pub fn function_size(&self, address: u64) -> Option<u64> {
        self.image
            .function_at(self.slide.to_link(address))
            .map(|s| s.size)
            .filter(|&s| s > 0)
    }
}

impl KernelTextSource for ImageText {
    fn read_text(&self, address: u64, len: usize) -> Result<Vec<u8>, String> {
        self.image.read(self.slide.to_link(address), len)
    }

    fn describe(&self) -> String {
        format!(
            "{} (link-time text moved by the KASLR slide 0x{:x}; runtime patching is not visible)",
            self.image.path().display(),
            self.slide.slide
        )
    }

    fn function_size(&self, address: u64) -> Option<u64> {
        ImageText::function_size(self, address)
    }
}

/// The live text when readable, else a vmlinux; function sizes from the
/// vmlinux's symbol table whenever there is one.
pub struct TextSources {
    /// `/proc/kcore`.
    pub live: Option<Kcore>,
    /// A vmlinux matched to the running kernel.
    pub image: Option<ImageText>,
}

impl TextSources {
    /// None when neither source is there.
    pub fn into_source(self) -> Option<Box<dyn KernelTextSource>> {
        match (self.live.is_some(), self.image.is_some()) {
            (false, false) => None,
            _ => Some(Box::new(self)),
        }
    }
}

impl KernelTextSource for TextSources {
    fn read_text(&self, address: u64, len: usize) -> Result<Vec<u8>, String> {
        match (&self.live, &self.image) {
            (Some(live), _) => live.read_text(address, len),
            (None, Some(image)) => image.read_text(address, len),
            (None, None) => Err("no kernel text source".into()),
        }
    }

    fn describe(&self) -> String {
        match (&self.live, &self.image) {
            (Some(live), Some(image)) => format!(
                "{}; function sizes from {}",
                live.describe(),
                image.image().path().display()
            ),
            (Some(live), None) => live.describe(),
            (None, Some(image)) => image.describe(),
            (None, None) => "nothing".into(),
        }
    }

    fn function_size(&self, address: u64) -> Option<u64> {
        self.image.as_ref()?.function_size(address)
    }
}
