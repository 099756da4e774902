//! Where kernel text bytes come from: the live text in `/proc/kcore` (an
//! ELF64 core file whose PT_LOAD segments map kernel virtual addresses to
//! file offsets), or a vmlinux on disk moved by the KASLR slide.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use kprobe_perf_symbols::image::{KaslrSlide, KernelImage};

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

/// Kernel text from a vmlinux on disk, at running addresses (moved by the
/// KASLR slide). Runtime patching (alternatives, jump labels, static calls,
/// ftrace) is not visible in it.
pub struct ImageText {
    image: KernelImage,
    slide: KaslrSlide,
}

impl ImageText {
    /// Text of `image`, whose link-time addresses `slide` moves to the
    /// running kernel's.
    pub fn new(image: KernelImage, slide: KaslrSlide) -> ImageText {
        ImageText { image, slide }
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
