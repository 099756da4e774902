//! Callchains named: which stacks a session asks the kernel for
//! ([`CallGraph`], set on the probes' attrs) and the frames a sample's
//! chain holds ([`StackFrame`], read by the decoder) are re-exported here;
//! this module names those frames: kernel frames from
//! kallsyms (modules included), user frames from the symbol tables of
//! the binaries the process had mapped (from the MMAP records the kernel
//! writes, or `/proc/PID/maps` for a live process none named).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use kprobe_perf_symbols::elf::{AddressSymbol, UserBinary};
use kprobe_perf_symbols::KernelSymbols;

use crate::decode::records::RingRecord;
use crate::decode::records::{RECORD_MMAP, RECORD_MMAP2};
use crate::decode::Event;

pub use crate::attach::attr::{CallGraph, DEFAULT_DWARF_STACK};
pub use crate::decode::frames::StackFrame;

/// A frame with its name, as `perf script` prints it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamedFrame {
    /// The address.
    pub address: u64,
    /// The function holding it, when known.
    pub symbol: Option<Arc<str>>,
    /// The address's offset from the function's start (0 when unknown).
    pub offset: u64,
    /// Where the function lives: `[kernel.kallsyms]`, `[MODULE]` for a
    /// module, a binary's path, or `[unknown]`.
    pub object: Arc<str>,
    /// A user-space frame.
    pub user: bool,
    /// A function inlined, at this address, into the frame that follows
    /// (from the binary's DWARF; `perf script` prints `(inlined)` for
    /// its object). Its offset is the address's offset in the function
    /// it is inlined in.
    pub inlined: bool,
    /// Where in the source, from the binary's DWARF: the line of the
    /// address for the innermost frame of an address, the line of the
    /// call for a frame another is inlined in. `None` without DWARF.
    pub source: Option<SourceLine>,
    /// For a user frame in a mapped file: the address relative to that
    /// file's mapping (address - mapping start + file offset), which
    /// `perf script` prints for such frames in place of the address (its
    /// `sample__fprintf_callchain` prints the binary offset of a user
    /// address in a DSO, the virtual address otherwise).
    pub in_file: Option<u64>,
}

/// A source file and line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceLine {
    /// The file, as the DWARF names it (often an absolute path).
    pub file: Arc<str>,
    /// The line (0: the DWARF gives none).
    pub line: u32,
}

/// Names of the kernel's return trampolines (6.1+ rethook, 5.15 to 5.19,
/// before): a kretprobe's stack starts at its function's caller, so a
/// frame in one of these is dropped when it appears.
const TRAMPOLINES: [&str; 3] = [
    "arch_rethook_trampoline",
    "__kretprobe_trampoline",
    "kretprobe_trampoline",
];

/// One executable mapping of a process.
#[derive(Debug, Clone)]
struct Mapping {
    start: u64,
    end: u64,
    page_offset: u64,
    path: Arc<str>,
}

/// The executable mappings of processes, from MMAP records (and, for a
/// live session, `/proc/PID/maps` of processes no record named).
#[derive(Debug, Default)]
pub struct ProcessMaps {
    by_pid: HashMap<i32, Vec<Mapping>>,
    /// Counts the changes: frames named from the mappings stay named
    /// while it stays the same.
    generation: u64,
}

impl ProcessMaps {
    /// Notes that process `pid` mapped `path` at `start` for `len` bytes
    /// from file offset `page_offset`. A later mapping of the same range
    /// (after exec) hides the earlier one.
    pub fn add(&mut self, pid: i32, start: u64, len: u64, page_offset: u64, path: &str) {
        if path.is_empty() || len == 0 {
            return;
        }
        self.generation += 1;
        self.by_pid.entry(pid).or_default().push(Mapping {
            start,
            end: start.saturating_add(len),
            page_offset,
            path: Arc::from(path),
        });
    }

    /// Notes the mapping of a raw `PERF_RECORD_MMAP` or `PERF_RECORD_MMAP2`
    /// record (`kind`, `misc` and `body` as an [`crate::session::sink::EventSink`] gets
    /// them); other records are ignored.
    pub fn note_record(&mut self, record: RingRecord<'_>) {
        let RingRecord { kind, misc, body } = record;
        use linux_perf_event_reader::{Mmap2Record, MmapRecord, RawData};
        type E = byteorder::NativeEndian;
        let data = if body.1.is_empty() {
            RawData::Single(body.0)
        } else {
            RawData::Split(body.0, body.1)
        };
        match kind {
            RECORD_MMAP => {
                if let Ok(m) = MmapRecord::parse::<E>(data, misc) {
                    if m.is_executable {
                        let path = m.path.as_slice();
                        let path = String::from_utf8_lossy(&path);
                        self.add(m.pid, m.address, m.length, m.page_offset, &path);
                    }
                }
            }
            RECORD_MMAP2 => {
                if let Ok(m) = Mmap2Record::parse::<E>(data, misc) {
                    if m.protection & (libc::PROT_EXEC as u32) != 0 {
                        let path = m.path.as_slice();
                        let path = String::from_utf8_lossy(&path);
                        self.add(m.pid, m.address, m.length, m.page_offset, &path);
                    }
                }
            }
            _ => {}
        }
    }

    /// True when some mapping of `pid` is known.
    pub fn knows(&self, pid: i32) -> bool {
        self.by_pid.contains_key(&pid)
    }

    /// Reads the executable mappings of a live process from
    /// `/proc/PID/maps` (nothing when it is gone).
    pub fn read_proc(&mut self, pid: i32) {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            // Remembered as known, so that /proc is not asked again.
            self.by_pid.entry(pid).or_default();
            return;
        };
        for line in text.lines() {
            let mut f = line.split_whitespace();
            let (Some(range), Some(perms), Some(off), _, _, Some(path)) =
                (f.next(), f.next(), f.next(), f.next(), f.next(), f.next())
            else {
                continue;
            };
            if !perms.contains('x') || !path.starts_with('/') {
                continue;
            }
            let Some((start, end)) = range.split_once('-') else {
                continue;
            };
            if let (Ok(start), Ok(end), Ok(off)) = (
                u64::from_str_radix(start, 16),
                u64::from_str_radix(end, 16),
                u64::from_str_radix(off, 16),
            ) {
                self.add(pid, start, end.saturating_sub(start), off, path);
            }
        }
        self.by_pid.entry(pid).or_default();
        self.generation += 1;
    }

    /// The newest mapping of `pid` holding `address`: its path and the
    /// file offset of the address.
    fn find(&self, pid: i32, address: u64) -> Option<(&Arc<str>, u64)> {
        self.by_pid
            .get(&pid)?
            .iter()
            .rev()
            .find(|m| address >= m.start && address < m.end)
            .map(|m| (&m.path, address - m.start + m.page_offset))
    }
}

/// Where separate debug files are found by build ID (as perf and gdb
/// look for them: `ab/cdef....debug` for build ID `abcdef...`).
const DEBUG_BY_BUILD_ID: &str = "/usr/lib/debug/.build-id";

/// What naming frames in one binary needs: its loadable segments (file
/// offset, size, address) and its functions by address, from its
/// separate debug file when one is installed (which has the local
/// functions a stripped library lacks), else from its own tables.
struct BinarySymbols {
    segments: Vec<(u64, u64, u64)>,
    functions: Vec<AddressSymbol>,
}

impl BinarySymbols {
    fn read(path: &Path) -> Option<BinarySymbols> {
        let binary = UserBinary::open(path).ok()?;
        let debug = binary.build_id().filter(|id| id.len() > 1).and_then(|id| {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            let file = Path::new(DEBUG_BY_BUILD_ID)
                .join(&hex[..2])
                .join(format!("{}.debug", &hex[2..]));
            UserBinary::open(&file).ok()?.functions_by_address().ok()
        });
        let functions = match debug {
            Some(f) if !f.is_empty() => f,
            _ => binary.functions_by_address().ok()?,
        };
        Some(BinarySymbols {
            segments: binary.segments(),
            functions,
        })
    }

    /// The address the binary's headers give file offset `offset`.
    fn vaddr(&self, offset: u64) -> Option<u64> {
        self.segments.iter().find_map(|&(off, size, vaddr)| {
            (offset >= off && offset - off < size).then(|| vaddr + (offset - off))
        })
    }

    /// The function holding file offset `offset`, and the offset into it.
    fn at(&self, offset: u64) -> Option<(&str, u64)> {
        let address = self.vaddr(offset)?;
        let i = self
            .functions
            .partition_point(|s| s.address <= address)
            .checked_sub(1)?;
        let f = self.functions.get(i)?;
        (address - f.address < f.size).then(|| (f.name.as_str(), address - f.address))
    }
}

/// Names the frames of events' callchains: kernel frames from a
/// [`KernelSymbols`], user frames from the symbol tables of mapped
/// binaries (each read once).
#[derive(Default)]
pub struct StackSymbolizer {
    /// By path as the mappings give it (read once each).
    binaries: HashMap<Arc<str>, Option<BinarySymbols>>,
    kernel_object: Option<Arc<str>>,
    unknown: Option<Arc<str>>,
    modules: HashMap<String, Arc<str>>,
    names: HashMap<Box<str>, Arc<str>>,
    /// Kernel frames already named, by address, as a range of `named`:
    /// kernel text does not move, and a probe's stacks repeat the same
    /// few return addresses (looked up in kallsyms, or the kernel's DWARF,
    /// and named once each, not at every event).
    kernel_frames: FrameRanges<u64>,
    /// User frames already named, by process and address, while the
    /// mappings stay as they were ([`ProcessMaps`]' generation): each
    /// frame's mapping is found by a scan and its function by a search.
    user_frames: FrameRanges<(i32, u64)>,
    user_frames_of: u64,
    /// How many times the caches started again ([`StackSymbolizer::epoch`]).
    epoch: u64,
    /// [`StackSymbolizer::frames_into`]'s ids, kept for their room.
    ids: Vec<FrameId>,
    /// The frames the two caches index: an address's inlined frames,
    /// then its function's ([`FrameId`]).
    named: Vec<NamedFrame>,
    /// Inlined frames from the binaries' DWARF, where there is some.
    sources: kprobe_perf_unwind::SourceLookup,
    /// The running kernel's debug file and the KASLR slide (running minus
    /// link-time address), when kernel frames are named from DWARF.
    kernel_dwarf: Option<(std::path::PathBuf, u64)>,
    /// The lookup in `kernel_dwarf`'s file, opened at the first kernel
    /// frame (`Err`: it could not be; frames are named from kallsyms).
    kernel_lookup: Option<Result<kprobe_perf_debuginfo::AddressLookup, String>>,
}

type FrameRanges<K> = HashMap<
    K,
    std::ops::Range<u32>,
    std::hash::BuildHasherDefault<crate::decode::records::IntHasher>,
>;

/// Frames kept named before the caches start again.
const FRAMES_KEPT: usize = 1 << 16;

/// A frame named by a [`StackSymbolizer`] ([`StackSymbolizer::name_frames`]),
/// read with [`StackSymbolizer::frame`]; valid while the symbolizer's
/// [`StackSymbolizer::epoch`] stays the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameId(u32);

impl FrameId {
    /// Its place among the frames named in this epoch: small and dense,
    /// for a table kept beside the symbolizer (a frame's text, say).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// The shared copy of `s` in `names`.
fn intern(names: &mut HashMap<Box<str>, Arc<str>>, s: &str) -> Arc<str> {
    if let Some(n) = names.get(s) {
        return n.clone();
    }
    let n: Arc<str> = Arc::from(s);
    names.insert(Box::from(s), n.clone());
    n
}

impl std::fmt::Debug for StackSymbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackSymbolizer")
            .field("binaries", &self.binaries.len())
            .finish()
    }
}

impl StackSymbolizer {
    /// A symbolizer with no binary read yet.
    pub fn new() -> StackSymbolizer {
        StackSymbolizer::default()
    }

    /// Names kernel frames from the DWARF of `debug_file` too (the
    /// running kernel's vmlinux with debug info, e.g. from Debian's
    /// `linux-image-VERSION-dbg`): the functions inlined at each address,
    /// as perf names them, and the source lines. `slide` is the KASLR
    /// slide (running address minus link-time address), see
    /// [`Kernel::kernel_dwarf`](crate::Kernel::kernel_dwarf). Module frames
    /// are named from kallsyms only.
    pub fn with_kernel_dwarf(mut self, debug_file: std::path::PathBuf, slide: u64) -> Self {
        self.kernel_dwarf = Some((debug_file, slide));
        self
    }

    /// The frames of `e`'s callchain, named, innermost first; a
    /// kretprobe's return trampoline is left out. `maps` gives the
    /// processes' mappings (see [`ProcessMaps`]).
    pub fn frames(
        &mut self,
        e: &Event,
        kernel: &KernelSymbols,
        maps: &ProcessMaps,
    ) -> Vec<NamedFrame> {
        let mut out = Vec::with_capacity(e.callchain.len());
        self.frames_into(e, kernel, maps, &mut out);
        out
    }

    /// As [`StackSymbolizer::frames`], into `out` (cleared first), whose
    /// room is then used again from one event to the next.
    pub(crate) fn frames_into(
        &mut self,
        e: &Event,
        kernel: &KernelSymbols,
        maps: &ProcessMaps,
        out: &mut Vec<NamedFrame>,
    ) {
        let mut ids = std::mem::take(&mut self.ids);
        self.name_frames(e, kernel, maps, &mut ids);
        out.clear();
        out.extend(ids.iter().map(|&id| self.frame(id).clone()));
        self.ids = ids;
    }

    /// As [`StackSymbolizer::frames`], without a copy: `out` (cleared
    /// first) is filled with the ids of the frames, each read with
    /// [`StackSymbolizer::frame`] until the next call (the names are kept
    /// here, shared by every event that has the frame).
    pub fn name_frames(
        &mut self,
        e: &Event,
        kernel: &KernelSymbols,
        maps: &ProcessMaps,
        out: &mut Vec<FrameId>,
    ) {
        out.clear();
        // The caches start again when the mappings change (a user frame's
        // name may change with them) or hold too many frames; the ids
        // handed out before index them no longer.
        if self.user_frames_of != maps.generation || self.named.len() >= FRAMES_KEPT {
            self.user_frames.clear();
            self.kernel_frames.clear();
            self.named.clear();
            self.user_frames_of = maps.generation;
            self.epoch += 1;
        }
        for f in &e.callchain {
            let range = if f.user {
                self.user_frames(e.pid, f.address, maps)
            } else {
                self.kernel_frames(f.address, kernel)
            };
            out.extend(range.map(FrameId));
        }
    }

    /// Changes each time the ids [`StackSymbolizer::name_frames`] gave
    /// before stop being valid (the mappings changed, or too many frames
    /// were kept); the ids it gives are valid in the epoch after the call.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// A frame [`StackSymbolizer::name_frames`] named.
    pub fn frame(&self, id: FrameId) -> &NamedFrame {
        static UNKNOWN: std::sync::OnceLock<NamedFrame> = std::sync::OnceLock::new();
        match self.named.get(id.0 as usize) {
            Some(f) => f,
            None => UNKNOWN.get_or_init(NamedFrame::default),
        }
    }

    /// The frames at kernel `address`, as a range of `named`: from the
    /// kernel's DWARF when it is given (its inlined functions, innermost
    /// first, then its function's), else from kallsyms; none for a
    /// trampoline.
    fn kernel_frames(&mut self, address: u64, kernel: &KernelSymbols) -> std::ops::Range<u32> {
        if let Some(r) = self.kernel_frames.get(&address) {
            return r.clone();
        }
        let start = self.named.len() as u32;
        if self.kernel_dwarf.is_some() {
            let named = self.kernel_frames_from_dwarf(address, kernel);
            self.named.extend(named);
        } else {
            let named = self.name_kernel_frame(address, kernel);
            let trampoline = named
                .symbol
                .as_deref()
                .is_some_and(|s| TRAMPOLINES.contains(&s));
            if !trampoline {
                self.named.push(named);
            }
        }
        let range = start..self.named.len() as u32;
        self.kernel_frames.insert(address, range.clone());
        range
    }

    fn unknown(&mut self) -> Arc<str> {
        self.unknown
            .get_or_insert_with(|| Arc::from("[unknown]"))
            .clone()
    }

    /// The frames at kernel `address` named from kallsyms and the
    /// kernel's DWARF: its inlined functions, innermost first, then its
    /// function's (a trampoline gives none).
    fn kernel_frames_from_dwarf(
        &mut self,
        address: u64,
        kernel: &KernelSymbols,
    ) -> Vec<NamedFrame> {
        let own = self.name_kernel_frame(address, kernel);
        let mut named = Vec::new();
        let trampoline = own
            .symbol
            .as_deref()
            .is_some_and(|s| TRAMPOLINES.contains(&s));
        if !trampoline {
            let core = own.symbol.is_some() && own.object.starts_with("[kernel");
            let source = match &self.kernel_dwarf {
                Some((path, slide)) if core => {
                    let lookup = self.kernel_lookup.get_or_insert_with(|| {
                        kprobe_perf_debuginfo::AddressLookup::open(path).map_err(|e| e.to_string())
                    });
                    lookup
                        .as_ref()
                        .map(|l| l.frames(address.wrapping_sub(*slide)))
                        .unwrap_or_default()
                }
                _ => Vec::new(),
            };
            let at = source
                .iter()
                .map(|f| (f.function.as_deref(), f.file.as_deref(), f.line));
            named = inline_frames(own, at, &mut self.names);
        }
        named
    }

    fn name_kernel_frame(&mut self, address: u64, kernel: &KernelSymbols) -> NamedFrame {
        let Some(loc) = kernel.symbolize(address) else {
            return NamedFrame {
                address,
                symbol: None,
                offset: 0,
                object: self.unknown(),
                user: false,
                inlined: false,
                source: None,
                in_file: None,
            };
        };
        let object = match &loc.symbol.module {
            Some(m) => match self.modules.get(m) {
                Some(o) => o.clone(),
                None => {
                    let o: Arc<str> = Arc::from(format!("[{m}]"));
                    self.modules.insert(m.clone(), o.clone());
                    o
                }
            },
            None => self
                .kernel_object
                .get_or_insert_with(|| Arc::from("[kernel.kallsyms]"))
                .clone(),
        };
        NamedFrame {
            address,
            symbol: Some(intern(&mut self.names, &loc.symbol.name)),
            offset: loc.offset,
            object,
            user: false,
            inlined: false,
            source: None,
            in_file: None,
        }
    }

    /// The frames at user `address` of `pid` (its inlined functions, then
    /// its own), as a range of `named`.
    fn user_frames(&mut self, pid: i32, address: u64, maps: &ProcessMaps) -> std::ops::Range<u32> {
        if let Some(r) = self.user_frames.get(&(pid, address)) {
            return r.clone();
        }
        let start = self.named.len() as u32;
        self.name_user_frames(pid, address, maps);
        let range = start..self.named.len() as u32;
        self.user_frames.insert((pid, address), range.clone());
        range
    }

    /// Names user `address` of `pid` into `named`: the functions
    /// inlined there (as perf names them: a DWARF frame named as the
    /// symbol is the symbol's own frame, any other is inlined, with the
    /// symbol's offset), else its function from the symbol table.
    fn name_user_frames(&mut self, pid: i32, address: u64, maps: &ProcessMaps) {
        let Some((path, file_offset)) = maps.find(pid, address) else {
            let object = self.unknown();
            self.named.push(NamedFrame {
                address,
                symbol: None,
                offset: 0,
                object,
                user: true,
                inlined: false,
                source: None,
                in_file: None,
            });
            return;
        };
        let path = path.clone();
        let StackSymbolizer {
            binaries,
            names,
            sources,
            named,
            ..
        } = self;
        let binary = match binaries.get(&path) {
            Some(b) => b,
            None => binaries
                .entry(path.clone())
                .or_insert_with(|| BinarySymbols::read(Path::new(&*path))),
        };
        let found = binary
            .as_ref()
            .and_then(|b| b.at(file_offset))
            .map(|(name, offset)| (intern(names, name), offset));
        let frame = |symbol: Option<Arc<str>>, offset: u64, inlined: bool| NamedFrame {
            address,
            symbol,
            offset,
            object: path.clone(),
            user: true,
            inlined,
            source: None,
            in_file: Some(file_offset),
        };
        let Some((name, offset)) = found else {
            named.push(frame(None, 0, false));
            return;
        };
        let svma = binary.as_ref().and_then(|b| b.vaddr(file_offset));
        let inline = svma
            .map(|a| sources.frames(Path::new(&*path), a))
            .unwrap_or_default();
        let at = inline
            .iter()
            .map(|f| (f.function.as_deref(), f.file.as_deref(), f.line));
        named.extend(inline_frames(frame(Some(name), offset, false), at, names));
    }
}

/// The frames at one address: `own` (its function, from a symbol table)
/// and the functions DWARF says are inlined there, `source` (function,
/// file, line), innermost first, named as perf names them: a DWARF frame
/// named as the symbol is the symbol's own frame, any other is inlined
/// (at `own`'s address and offset). Without DWARF, `own` alone.
fn inline_frames<'s>(
    own: NamedFrame,
    source: impl IntoIterator<Item = (Option<&'s str>, Option<&'s str>, u32)>,
    names: &mut HashMap<Box<str>, Arc<str>>,
) -> Vec<NamedFrame> {
    let mut out: Vec<NamedFrame> = source
        .into_iter()
        .map(|(function, file, line)| {
            let mut named = own.clone();
            // A frame DWARF does not name (assembly) is the symbol's own.
            let fname = function.or(own.symbol.as_deref()).unwrap_or("??");
            if own.symbol.as_deref() != Some(fname) {
                named.symbol = Some(intern(names, fname));
                named.inlined = true;
            }
            named.source = file.map(|file| SourceLine {
                file: intern(names, file),
                line,
            });
            named
        })
        .collect();
    if out.is_empty() {
        out.push(own);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dwarf_frames_are_named_as_perf_names_them() {
        let own = NamedFrame {
            address: 0xffff_ffff_8124_3e1d,
            symbol: Some(Arc::from("do_syscall_64")),
            offset: 0x5d,
            object: Arc::from("[kernel.kallsyms]"),
            ..NamedFrame::default()
        };
        let src = |function, line| (function, Some("arch/x86/entry/common.c"), line);
        let mut names = HashMap::new();
        let named = inline_frames(
            own.clone(),
            [
                src(Some("do_syscall_x64"), 46),
                src(Some("do_syscall_64"), 76),
            ],
            &mut names,
        );
        let shown: Vec<(&str, bool, u32, u64)> = named
            .iter()
            .map(|f| {
                let line = f.source.as_ref().map_or(0, |s| s.line);
                (f.symbol.as_deref().unwrap_or(""), f.inlined, line, f.offset)
            })
            .collect();
        assert_eq!(
            shown,
            [
                ("do_syscall_x64", true, 46, 0x5d),
                ("do_syscall_64", false, 76, 0x5d)
            ]
        );
        // Assembly: DWARF has a line and no function; the symbol keeps
        // the frame.
        let named = inline_frames(own.clone(), [src(None, 121)], &mut names);
        assert_eq!(named.len(), 1);
        assert_eq!(named[0].symbol.as_deref(), Some("do_syscall_64"));
        assert!(!named[0].inlined);
        assert_eq!(named[0].source.as_ref().map(|s| s.line), Some(121));
        // No DWARF: the symbol's frame alone.
        assert_eq!(inline_frames(own.clone(), [], &mut names), [own]);
    }

    #[test]
    fn kernel_frames_are_named_from_kallsyms_and_trampolines_dropped() {
        let kallsyms = "ffffffff81000000 T do_sys_openat2\n\
                        ffffffff81000100 T __x64_sys_openat\n\
                        ffffffff81000200 T arch_rethook_trampoline\n\
                        ffffffff81000300 T do_syscall_64\n\
                        ffffffff81000400 T _etext\n\
                        ffffffffc0000000 t ext4_read\t[ext4]\n\
                        ffffffffc0000100 t ext4_end\t[ext4]\n";
        let ks = KernelSymbols::parse(kallsyms).unwrap();
        let e = Event {
            callchain: [
                0xffff_ffff_8100_0105,
                0xffff_ffff_8100_0200,
                0xffff_ffff_8100_0342,
                0xffff_ffff_c000_0010,
            ]
            .into_iter()
            .map(|address| StackFrame {
                address,
                user: false,
            })
            .collect(),
            ..Event::default()
        };
        let mut s = StackSymbolizer::new();
        let named = s.frames(&e, &ks, &ProcessMaps::default());
        let got: Vec<(Option<&str>, u64, &str)> = named
            .iter()
            .map(|f| (f.symbol.as_deref(), f.offset, &*f.object))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some("__x64_sys_openat"), 5, "[kernel.kallsyms]"),
                (Some("do_syscall_64"), 0x42, "[kernel.kallsyms]"),
                (Some("ext4_read"), 0x10, "[ext4]"),
            ]
        );
    }

    #[no_mangle]
    #[inline(never)]
    extern "C" fn kprobe_perf_stack_test_target(a: u64) -> u64 {
        std::hint::black_box(a.wrapping_mul(3))
    }

    /// A user frame in this very test binary, mapped as /proc/self/maps
    /// says, is named from its symbol table with its offset.
    #[test]
    fn user_frames_are_named_from_the_mapped_binary() {
        assert_eq!(kprobe_perf_stack_test_target(2), 6);
        let pid = std::process::id() as i32;
        let mut maps = ProcessMaps::default();
        maps.read_proc(pid);
        let addr = kprobe_perf_stack_test_target as *const () as usize as u64;
        let e = Event {
            pid,
            callchain: vec![StackFrame {
                address: addr + 3,
                user: true,
            }],
            ..Event::default()
        };
        let named = StackSymbolizer::new().frames(&e, &KernelSymbols::default(), &maps);
        assert_eq!(
            named[0].symbol.as_deref(),
            Some("kprobe_perf_stack_test_target")
        );
        assert_eq!(named[0].offset, 3);
        let exe = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(&*named[0].object, exe.to_str().unwrap());
    }

    #[test]
    fn user_frames_without_a_mapping_are_unknown() {
        let mut maps = ProcessMaps::default();
        maps.add(7, 0x1000, 0x1000, 0, "/nonexistent/binary");
        let e = Event {
            pid: 7,
            callchain: vec![
                StackFrame {
                    address: 0x1010,
                    user: true,
                },
                StackFrame {
                    address: 0x9000,
                    user: true,
                },
            ],
            ..Event::default()
        };
        let named = StackSymbolizer::new().frames(&e, &KernelSymbols::default(), &maps);
        assert_eq!(&*named[0].object, "/nonexistent/binary");
        assert_eq!(named[0].symbol, None);
        assert_eq!(&*named[1].object, "[unknown]");
    }
}
