//! The DWARF of one debug file, for naming frames: its sections read in
//! place from the mapped file, a compressed section (Debian's debug
//! packages compress theirs) decompressed once and kept on disk, keyed
//! by the file's build ID, so that later runs map it instead of
//! inflating it again; split DWARF's `.dwo` files and `.dwp` package
//! read beside it.
//!
//! A file's bytes (its map, and any section decompressed in memory) live
//! as long as the process: the frames of a debug file are asked for
//! until the end of a run, and each file is opened once.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use addr2line::{gimli, LookupContinuation as _};
use object::{Object as _, ObjectSection as _};

/// What the lookups read: bytes that live as long as the process.
pub(crate) type R = gimli::EndianSlice<'static, gimli::RunTimeEndian>;

/// One debug file's DWARF, and what is read beside it.
pub(crate) struct DebugDwarf {
    pub(crate) ctx: addr2line::Context<R>,
    object: object::File<'static>,
    symbols: std::sync::OnceLock<object::SymbolMap<object::SymbolMapName<'static>>>,
    package: Option<gimli::DwarfPackage<R>>,
}

/// Maps `path` for the rest of the process.
fn map_forever(path: &Path) -> Option<&'static [u8]> {
    let file = std::fs::File::open(path).ok()?;
    // SAFETY: the map is read-only and private, and only read as bytes.
    // A debug file truncated while it is mapped would make reads past its
    // new end fault (SIGBUS); debug files are replaced by rename when a
    // package is upgraded, not rewritten in place, which is the accepted
    // risk of every debugger that maps them.
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    Some(&**Box::leak(Box::new(map)))
}

/// Where the decompressed sections of the file of build ID `id` are
/// kept, beside the debug info index's cache: `sections/ID` under
/// `$KPROBE_PERF_CACHE_DIR`, else `$XDG_CACHE_HOME/kprobe-perf`, else
/// `~/.cache/kprobe-perf`.
fn cache_dir(id: &[u8]) -> Option<PathBuf> {
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    if let Some(d) = std::env::var_os("KPROBE_PERF_CACHE_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d).join("sections").join(hex));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("kprobe-perf").join("sections").join(hex))
}

/// The bytes of section `name` of `obj` (empty when it has none): in
/// place, or decompressed, from the cache when an earlier run put them
/// there (of the size the section's header gives), else inflated and
/// put there (a cache that cannot be written is only slower).
fn section(obj: &object::File<'static>, name: &str, cache: Option<&Path>) -> &'static [u8] {
    let Some(sec) = obj.section_by_name(name) else {
        return &[];
    };
    let size = match sec.compressed_data() {
        Ok(c) if c.format != object::CompressionFormat::None => c.uncompressed_size,
        _ => return sec.data().unwrap_or(&[]),
    };
    let kept = cache.map(|d| d.join(name.trim_start_matches('.')));
    if let Some(k) = &kept {
        let cached = std::fs::metadata(k).is_ok_and(|m| m.len() == size);
        if let Some(bytes) = cached.then(|| map_forever(k)).flatten() {
            return bytes;
        }
    }
    let bytes: &'static [u8] = match sec.uncompressed_data() {
        Ok(Cow::Borrowed(b)) => b,
        Ok(Cow::Owned(v)) => v.leak(),
        Err(_) => &[],
    };
    if let Some(k) = kept.filter(|_| bytes.len() as u64 == size) {
        let _ = keep(&k, bytes);
    }
    bytes
}

/// Writes `bytes` to `path` whole or not at all (a temporary file,
/// renamed), so that a run reading the cache never sees half of it.
fn keep(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

fn endian(obj: &object::File<'_>) -> gimli::RunTimeEndian {
    if obj.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    }
}

impl DebugDwarf {
    /// Opens the debug file at `path`; `None` when it cannot be read or
    /// is not an object file.
    pub(crate) fn open(path: &Path) -> Option<DebugDwarf> {
        let object = object::File::parse(map_forever(path)?).ok()?;
        let cache = object.build_id().ok().flatten().and_then(cache_dir);
        let e = endian(&object);
        let mut dwarf = gimli::Dwarf::load(|id| {
            Ok::<_, ()>(R::new(section(&object, id.name(), cache.as_deref()), e))
        })
        .ok()?;
        dwarf.populate_abbreviations_cache(gimli::AbbreviationsCacheStrategy::Duplicates);
        let ctx = addr2line::Context::from_dwarf(dwarf).ok()?;
        Some(DebugDwarf {
            ctx,
            object,
            symbols: std::sync::OnceLock::new(),
            package: package(path),
        })
    }

    /// The symbol table's entry holding `svma`: its name and address.
    pub(crate) fn symbol(&self, svma: u64) -> Option<(&'static str, u64)> {
        let map = self.symbols.get_or_init(|| self.object.symbol_map());
        map.containing(svma).map(|s| (s.name(), s.address()))
    }

    /// The frames at `svma`, innermost first, loading split DWARF where a
    /// unit's is elsewhere.
    pub(crate) fn frames(&self, svma: u64) -> Option<addr2line::FrameIter<'_, R>> {
        let mut lookup = self.ctx.find_frames(svma);
        loop {
            match lookup {
                addr2line::LookupResult::Output(out) => return out.ok(),
                addr2line::LookupResult::Load { load, continuation } => {
                    lookup = continuation.resume(self.split(&load));
                }
            }
        }
    }

    /// The split DWARF a unit asks for: from the `.dwp` package beside
    /// the file, else the `.dwo` file its skeleton names (relative to
    /// its compilation directory), of the same DWO id.
    fn split(&self, load: &addr2line::SplitDwarfLoad<R>) -> Option<Arc<gimli::Dwarf<R>>> {
        if let Some(p) = &self.package {
            if let Ok(Some(cu)) = p.find_cu(load.dwo_id, &load.parent) {
                return Some(Arc::new(cu));
            }
        }
        let mut path = PathBuf::new();
        if let Some(dir) = &load.comp_dir {
            path.push(std::str::from_utf8(dir.slice()).ok()?);
        }
        path.push(std::str::from_utf8(load.path?.slice()).ok()?);
        let object = object::File::parse(map_forever(&path)?).ok()?;
        let e = endian(&object);
        let mut dwo = gimli::Dwarf::load(|id| {
            let bytes = id.dwo_name().map_or(&[][..], |n| section(&object, n, None));
            Ok::<_, ()>(R::new(bytes, e))
        })
        .ok()?;
        let header = dwo.units().next().ok()??;
        if dwo.unit(header).ok()?.dwo_id != Some(load.dwo_id) {
            return None;
        }
        dwo.make_dwo(&load.parent);
        Some(Arc::new(dwo))
    }
}

/// The DWARF package (`.dwp`) beside the debug file at `path`
/// (`libfoo.so.dwp`, `prog.dwp`), if there is one.
fn package(path: &Path) -> Option<gimli::DwarfPackage<R>> {
    let mut name = path.file_name()?.to_os_string();
    name.push(".dwp");
    let dwp = path.with_file_name(name);
    let object = object::File::parse(map_forever(&dwp)?).ok()?;
    let e = endian(&object);
    gimli::DwarfPackage::load(
        |id| {
            let bytes = id.dwo_name().map_or(&[][..], |n| section(&object, n, None));
            Ok::<_, gimli::Error>(R::new(bytes, e))
        },
        R::new(&[], e),
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compressed_section_is_inflated_once_then_mapped_from_the_cache() {
        let dir = std::env::temp_dir().join(format!("kprobe-perf-unwind-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = std::env::current_exe().unwrap();
        let z = dir.join("compressed");
        let ok = std::process::Command::new("objcopy")
            .arg("--compress-debug-sections=zlib")
            .arg(&exe)
            .arg(&z)
            .status()
            .unwrap();
        assert!(ok.success(), "objcopy --compress-debug-sections failed");
        let plain = std::fs::read(&exe).unwrap();
        let plain = object::File::parse(&plain[..]).unwrap();
        let want = plain
            .section_by_name(".debug_line")
            .unwrap()
            .data()
            .unwrap();
        let obj = object::File::parse(map_forever(&z).unwrap()).unwrap();
        let sec = obj.section_by_name(".debug_line").unwrap();
        assert_ne!(
            sec.compressed_data().unwrap().format,
            object::CompressionFormat::None
        );
        let cache = dir.join("cache");
        assert_eq!(section(&obj, ".debug_line", Some(&cache)), want);
        let kept = cache.join("debug_line");
        assert_eq!(std::fs::read(&kept).unwrap(), want);
        // The next open reads the cache, not the file: a cache of the
        // right size is taken as it is.
        std::fs::write(&kept, vec![7u8; want.len()]).unwrap();
        assert_eq!(
            section(&obj, ".debug_line", Some(&cache)),
            vec![7u8; want.len()]
        );
        // One of another size is not: the section is inflated again.
        std::fs::write(&kept, b"short").unwrap();
        assert_eq!(section(&obj, ".debug_line", Some(&cache)), want);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
