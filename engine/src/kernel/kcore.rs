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

use crate::kernel::preflight::KernelTextSource;

/// `/proc/kcore`, opened, with its loadable segments.
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) struct Kcore {
    file: File,
    /// (virtual address, size, file offset)
    segments: Vec<(u64, u64, u64)>,
}

impl Kcore {
    /// Opens `/proc/kcore` (root, CONFIG_PROC_KCORE).
    #[cfg_attr(feature = "test-util", visibility::make(pub))]
    pub(crate) fn open() -> io::Result<Kcore> {
        Self::open_path("/proc/kcore")
    }

    /// Opens a kcore-format file: a little-endian ELF64 core whose
    /// `PT_LOAD` program headers map kernel addresses to file offsets.
    pub(crate) fn open_path(path: &str) -> io::Result<Kcore> {
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
    #[cfg(test)]
    fn segments(&self) -> &[(u64, u64, u64)] {
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
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) struct ImageText {
    image: Arc<KernelImage>,
    slide: KaslrSlide,
}

impl ImageText {
    /// Text of `image`, whose link-time addresses `slide` moves to the
    /// running kernel's.
    #[cfg_attr(feature = "test-util", visibility::make(pub))]
    pub(crate) fn new(image: impl Into<Arc<KernelImage>>, slide: KaslrSlide) -> ImageText {
        ImageText {
            image: image.into(),
            slide,
        }
    }

    /// The image.
    pub(crate) fn image(&self) -> &KernelImage {
        &self.image
    }

    /// The ELF size of the function that starts at running `address`.
    pub(crate) fn function_size(&self, address: u64) -> Option<u64> {
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
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) struct TextSources {
    /// `/proc/kcore`.
    pub live: Option<Kcore>,
    /// A vmlinux matched to the running kernel.
    pub image: Option<ImageText>,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A little-endian ELF64 core with a PT_NOTE and two PT_LOAD
    /// segments, as /proc/kcore lays them out: headers, then the bytes of
    /// each segment at its file offset.
    fn core_file() -> Vec<u8> {
        const EHDR: usize = 64;
        const PHDR: usize = 56;
        let mut b = vec![0u8; EHDR];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2; // ELFCLASS64
        b[5] = 1; // ELFDATA2LSB
        b[6] = 1; // EV_CURRENT
        b[16..18].copy_from_slice(&4u16.to_le_bytes()); // ET_CORE
        b[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
        b[20..24].copy_from_slice(&1u32.to_le_bytes());
        b[32..40].copy_from_slice(&(EHDR as u64).to_le_bytes()); // e_phoff
        b[52..54].copy_from_slice(&(EHDR as u16).to_le_bytes()); // e_ehsize
        b[54..56].copy_from_slice(&(PHDR as u16).to_le_bytes()); // e_phentsize
        b[56..58].copy_from_slice(&3u16.to_le_bytes()); // e_phnum
        let phdr = |kind: u32, offset: u64, vaddr: u64, size: u64| {
            let mut p = vec![0u8; PHDR];
            p[..4].copy_from_slice(&kind.to_le_bytes());
            p[4..8].copy_from_slice(&7u32.to_le_bytes()); // RWX
            p[8..16].copy_from_slice(&offset.to_le_bytes());
            p[16..24].copy_from_slice(&vaddr.to_le_bytes());
            p[24..32].copy_from_slice(&0u64.to_le_bytes());
            p[32..40].copy_from_slice(&size.to_le_bytes());
            p[40..48].copy_from_slice(&size.to_le_bytes());
            p[48..56].copy_from_slice(&4096u64.to_le_bytes());
            p
        };
        b.extend(phdr(4, 0x100, 0, 0x10)); // PT_NOTE
        b.extend(phdr(1, 0x200, 0xffff_ffff_8100_0000, 0x20));
        b.extend(phdr(1, 0x300, 0xffff_8880_0000_0000, 0x10));
        b.resize(0x310, 0);
        for (i, byte) in b[0x200..0x220].iter_mut().enumerate() {
            *byte = 0x90 + i as u8;
        }
        b[0x300..0x310].fill(0xcc);
        b
    }

    #[test]
    fn the_load_segments_of_an_elf64_core_map_addresses_to_bytes() {
        let dir = std::env::temp_dir().join(format!("kcore-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kcore");
        std::fs::write(&path, core_file()).unwrap();
        let kcore = Kcore::open_path(path.to_str().unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            kcore.segments(),
            [
                (0xffff_ffff_8100_0000, 0x20, 0x200),
                (0xffff_8880_0000_0000, 0x10, 0x300)
            ]
        );
        assert_eq!(
            kcore.read_text(0xffff_ffff_8100_0004, 3).unwrap(),
            [0x94, 0x95, 0x96]
        );
        assert_eq!(
            kcore.read_text(0xffff_8880_0000_000e, 2).unwrap(),
            [0xcc, 0xcc]
        );
        // Past a segment's end, and between segments.
        assert_eq!(
            kcore.read_text(0xffff_ffff_8100_001f, 2).unwrap_err(),
            "0xffffffff8100001f is in no segment of /proc/kcore"
        );
        assert!(kcore.read_text(0x1000, 1).is_err());
    }

    #[test]
    fn a_file_that_is_not_an_elf64_core_is_refused() {
        let dir = std::env::temp_dir().join(format!("kcore-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kcore");
        let mut b = core_file();
        b[4] = 1; // ELFCLASS32
        std::fs::write(&path, b).unwrap();
        let e = Kcore::open_path(path.to_str().unwrap()).err().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(
            e.to_string().starts_with(&format!(
                "{} is not a little-endian ELF64 core: ",
                path.display()
            )),
            "{e}"
        );
    }
}
