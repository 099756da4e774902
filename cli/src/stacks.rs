//! Callchains in the output: `-g` / `--call-graph` on `record`, each
//! frame printed under its event as `perf script` prints it (text) or as
//! an array (JSON), and the stacks counted into the folded format
//! (`--stacks-folded`) and drawn as a flame graph (`--flamegraph`, with
//! inferno), live or from a recorded file.

use std::path::PathBuf;

use anyhow::{Context, Result};
use kprobe_perf_engine::analysis::FoldedStacks;
use kprobe_perf_engine::cli::plan::AttachPoint;
use kprobe_perf_engine::stack::{CallGraph, FrameId, NamedFrame, ProcessMaps, StackSymbolizer};
use kprobe_perf_engine::{Event, KernelSymbols, ProbePlan};

/// `record`'s callchain flags.
#[derive(clap::Args, Default)]
pub(crate) struct CallGraphArgs {
    /// Record each hit's callchain, kernel and user stacks (user stacks
    /// by frame pointer): as `--call-graph both`. Each frame is printed
    /// under its event as `perf script` prints it, a `callchain` array
    /// with --json, and -o files carry the chains for `perf script` and
    /// `perf report -g`.
    #[arg(short = 'g', conflicts_with = "call_graph")]
    pub g: bool,
    /// Record each hit's callchain: `kernel` (the kernel stack, named from
    /// kallsyms, modules included), `user` (the user stack, walked by
    /// frame pointer and named from the mapped binaries' symbol tables:
    /// code built without frame pointers gives short or wrong user
    /// stacks), `both` (or perf's `fp`), or `dwarf[,SIZE]` (the kernel stack, and the user
    /// stack unwound in user space from the binaries' DWARF call frame
    /// information, as `perf record --call-graph dwarf`: each sample
    /// carries the user registers and a copy of the top SIZE bytes of the
    /// user stack, 8192 by default, a multiple of 8 up to 65528; for
    /// binaries built without frame pointers, as most distributions build
    /// them). A kretprobe's stack starts at its function's caller.
    #[arg(long, value_parser = parse_call_graph, value_name = "WHICH")]
    pub call_graph: Option<CallGraphArg>,
    #[command(flatten)]
    pub out: StackOutputArgs,
}

/// Which stacks `--call-graph` records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CallGraphArg {
    Kernel,
    User,
    Both,
    /// The user stack bytes each sample copies.
    Dwarf(u32),
}

/// `kernel`, `user`, `both` (`fp`), `dwarf` or `dwarf,SIZE`.
fn parse_call_graph(s: &str) -> std::result::Result<CallGraphArg, String> {
    let (what, size) = match s.split_once(',') {
        Some((w, n)) => (w, Some(n)),
        None => (s, None),
    };
    let arg = match (what, size) {
        ("kernel", None) => CallGraphArg::Kernel,
        ("user", None) => CallGraphArg::User,
        // perf's `fp`: kernel and user chains, the user one by frame
        // pointer, as `both`.
        ("both" | "fp", None) => CallGraphArg::Both,
        ("dwarf", None) => CallGraphArg::Dwarf(kprobe_perf_engine::stack::DEFAULT_DWARF_STACK),
        ("dwarf", Some(n)) => {
            let size: u32 = n
                .parse()
                .map_err(|_| format!("the dwarf stack size `{n}` is not a number of bytes"))?;
            if size == 0 || !size.is_multiple_of(8) || size > 65528 {
                return Err(format!(
                    "the dwarf stack size {size} must be a multiple of 8 from 8 to 65528 (the kernel's limit)"
                ));
            }
            CallGraphArg::Dwarf(size)
        }
        (_, Some(_)) => {
            return Err(format!(
                "only dwarf takes a size (dwarf,SIZE), not `{what}`"
            ))
        }
        _ => {
            return Err(format!(
                "`{s}` is not one of kernel, user, both, fp (as both), dwarf, dwarf,SIZE"
            ))
        }
    };
    Ok(arg)
}

/// Where aggregated stacks go (`record` and `script`).
#[derive(clap::Args, Default)]
pub(crate) struct StackOutputArgs {
    /// Write the count of each distinct stack to FILE in the folded format
    /// (`comm;outermost;...;innermost COUNT`, one line per stack, the
    /// probed function innermost), for flamegraph.pl, inferno or
    /// speedscope. Needs callchains: in `record`, with no `-g` or
    /// `--call-graph` it implies `--call-graph kernel` for kernel probes,
    /// `user` for uprobes (`both` for a mix); in `script`, a file
    /// recorded with them. FILE is created as -o creates its file (an existing FILE renamed to
    /// FILE.old, or removed with `record --force`; mode 0600).
    #[arg(long, value_name = "FILE")]
    pub stacks_folded: Option<PathBuf>,
    /// Draw the stacks as a flame graph, an SVG file (made with the
    /// inferno crate): one box per function, as wide as the share of
    /// events whose stack passes through it, callers below callees.
    /// Needs callchains as --stacks-folded does (in `record`, implied
    /// as there when no `-g` or `--call-graph` is given).
    /// FILE is created as --stacks-folded creates its file.
    #[arg(long, value_name = "FILE.svg")]
    pub flamegraph: Option<PathBuf>,
    /// Write the events as a profile for the Firefox Profiler
    /// (profiler.firefox.com; `samply load FILE.json` opens it too): one
    /// sample per event, on its process and thread, at its time, with its
    /// stack named as in the text output and the probe's event name
    /// innermost. Needs callchains as --stacks-folded does (in `record`,
    /// implied as there when no `-g` or `--call-graph` is given). FILE
    /// is created as --stacks-folded creates its file.
    #[arg(long, value_name = "FILE.json")]
    pub profile: Option<PathBuf>,
    /// Under each user frame of the text output, its source file and line
    /// from the binary's DWARF (its own, or its debug file by build ID or
    /// debug link under /usr/lib/debug), on a line of its own as
    /// `perf script -F +srcline` prints it: two spaces, the file's base
    /// name, a colon, the line, and `(inlined)` there for an inlined
    /// frame. Frames without DWARF have none (perf prints `BINARY[ADDR]`
    /// for them). JSON frames carry `file` and `line` whenever they are
    /// known.
    #[arg(long)]
    pub srcline: bool,
}

impl StackOutputArgs {
    fn any(&self) -> bool {
        self.stacks_folded.is_some() || self.flamegraph.is_some() || self.profile.is_some()
    }

    /// Refuses, before anything is attached, paths no file could be
    /// written at.
    pub(crate) fn check(&self) -> Result<()> {
        for (flag, p) in [
            ("--stacks-folded", &self.stacks_folded),
            ("--flamegraph", &self.flamegraph),
            ("--profile", &self.profile),
        ] {
            if let Some(p) = p {
                crate::output::check(p).map_err(|e| crate::output::named(flag, e))?;
            }
        }
        Ok(())
    }
}

impl CallGraphArgs {
    /// The callchains asked for, whether any are (a picture of stacks
    /// asks for some: see [`CallGraphArgs::graph_for`]).
    pub(crate) fn graph(&self) -> Option<CallGraph> {
        match (self.g, self.call_graph) {
            (_, Some(CallGraphArg::Kernel)) => Some(CallGraph::Kernel),
            (_, Some(CallGraphArg::User)) => Some(CallGraph::User),
            (_, Some(CallGraphArg::Both)) | (true, None) => Some(CallGraph::Both),
            (_, Some(CallGraphArg::Dwarf(stack_size))) => Some(CallGraph::Dwarf { stack_size }),
            (false, None) if self.out.any() => Some(CallGraph::Kernel),
            (false, None) => None,
        }
    }

    /// The callchains of [`CallGraphArgs::graph`] for `plans`. A picture
    /// of stacks (`--stacks-folded`, `--flamegraph`, `--profile`) without
    /// `-g` or `--call-graph` asks for the stacks where the probes are:
    /// user ones (by frame pointer) for uprobes, kernel ones for kernel
    /// probes, both for a mix. A uprobe's kernel stack is empty: its
    /// picture was one box per command. Said on stderr, since the user
    /// named no stack.
    pub(crate) fn graph_for(&self, plans: &[ProbePlan]) -> Option<CallGraph> {
        let graph = self.graph();
        if self.g || self.call_graph.is_some() || graph.is_none() {
            return graph;
        }
        let user = plans
            .iter()
            .any(|p| matches!(p.attach, AttachPoint::User { .. }));
        let kernel = plans
            .iter()
            .any(|p| !matches!(p.attach, AttachPoint::User { .. }));
        let (implied, which) = match (user, kernel) {
            (true, false) => (
                CallGraph::User,
                "the uprobes' user stacks, by frame pointer (as --call-graph user)",
            ),
            (true, true) => (
                CallGraph::Both,
                "kernel and user stacks, for kernel probes and uprobes (as --call-graph both)",
            ),
            _ => return graph,
        };
        say!("kprobe-perf: no -g or --call-graph given: the stacks drawn are {which}");
        Some(implied)
    }
}

/// What printing and counting stacks keeps between events.
pub(crate) struct Stacks {
    symbolizer: StackSymbolizer,
    /// Mappings from the MMAP records seen so far.
    pub(crate) maps: ProcessMaps,
    /// A live session: processes no MMAP record named are read from
    /// `/proc/PID/maps`.
    live: bool,
    /// Counts of folded stacks, when asked for.
    folded: Option<FoldedStacks>,
    /// The profile of `--profile`, when asked for.
    profile: Option<crate::profile::ProfileBuilder>,
    /// The frames of the last event seen, named by `symbolizer`.
    frames: Vec<FrameId>,
    /// The same frames, copied, for the folded stacks and the profile.
    named: Vec<NamedFrame>,
    /// Each frame's text, by [`FrameId::index`], in `text_bytes` (an
    /// empty range: not written yet), for the symbolizer's epoch
    /// `text_epoch`: a frame is formatted once, then copied.
    text_of: Vec<std::ops::Range<u32>>,
    text_bytes: Vec<u8>,
    text_epoch: u64,
    /// `--srcline`.
    srcline: bool,
}

impl Stacks {
    /// For a live recording (`live`) or a replay, keeping what `out`
    /// asks for (folded stacks, a flame graph, a profile).
    pub(crate) fn new(live: bool, out: &StackOutputArgs) -> Stacks {
        Stacks {
            symbolizer: StackSymbolizer::new(),
            maps: ProcessMaps::default(),
            live,
            folded: (out.stacks_folded.is_some() || out.flamegraph.is_some())
                .then(FoldedStacks::new),
            profile: out
                .profile
                .is_some()
                .then(crate::profile::ProfileBuilder::new),
            frames: Vec::new(),
            named: Vec::new(),
            text_of: Vec::new(),
            text_bytes: Vec::new(),
            text_epoch: 0,
            srcline: out.srcline,
        }
    }

    /// Names kernel frames from the DWARF of `debug_file` too (see
    /// [`kernel_dwarf`]).
    pub(crate) fn name_kernel_frames_from(&mut self, debug_file: PathBuf, slide: u64) {
        self.symbolizer = std::mem::take(&mut self.symbolizer).with_kernel_dwarf(debug_file, slide);
    }

    /// Whether stacks are kept (folded stacks, a flame graph, a profile).
    pub(crate) fn counts(&self) -> bool {
        self.folded.is_some() || self.profile.is_some()
    }

    /// Names `e`'s frames (kept for [`Stacks::write_text`] and
    /// [`Stacks::write_json`]) and counts its stack. `maps` overrides the
    /// kept mappings (a replay's).
    pub(crate) fn see(
        &mut self,
        e: &Event,
        plan: &ProbePlan,
        kernel: &KernelSymbols,
        maps: Option<&ProcessMaps>,
    ) {
        if self.live && !self.maps.knows(e.pid) && e.callchain.iter().any(|f| f.user) {
            self.maps.read_proc(e.pid);
        }
        let maps = maps.unwrap_or(&self.maps);
        self.symbolizer
            .name_frames(e, kernel, maps, &mut self.frames);
        if !self.counts() {
            return;
        }
        self.named.clear();
        let symbolizer = &self.symbolizer;
        self.named
            .extend(self.frames.iter().map(|&id| symbolizer.frame(id).clone()));
        if let Some(p) = self.profile.as_mut() {
            p.add(e, &plan.event, &self.named);
        }
        let Some(folded) = self.folded.as_mut() else {
            return;
        };
        // The probed function innermost: a kretprobe's stack starts at
        // its caller.
        let probed = plan
            .is_return()
            .then(|| kernel.symbolize(e.probe_addr))
            .flatten();
        folded.add(e, &self.named, probed.as_ref().map(|l| &*l.symbol.name));
    }

    /// Appends the frames named by the last [`Stacks::see`] to a text
    /// line, one per line as `perf script` prints them (tab, address
    /// right-aligned in 16 columns, `sym+0xOFF`, the object in
    /// parentheses), then an empty line.
    pub(crate) fn write_text(&mut self, line: &mut Vec<u8>) {
        if self.frames.is_empty() {
            return;
        }
        if self.text_epoch != self.symbolizer.epoch() {
            self.text_of.clear();
            self.text_bytes.clear();
            self.text_epoch = self.symbolizer.epoch();
        }
        for &id in &self.frames {
            let i = id.index();
            if self.text_of.len() <= i {
                self.text_of.resize(i + 1, 0..0);
            }
            if self.text_of[i].is_empty() {
                let start = self.text_bytes.len();
                let frame = self.symbolizer.frame(id);
                frame_text(&mut self.text_bytes, frame, self.srcline);
                self.text_of[i] = start as u32..self.text_bytes.len() as u32;
            }
            let r = &self.text_of[i];
            line.extend_from_slice(&self.text_bytes[r.start as usize..r.end as usize]);
        }
        line.push(b'\n');
    }

    /// Adds a `callchain` array (each frame's address, symbol, offset
    /// and object) to the JSON object in `line`.
    pub(crate) fn write_json(&self, line: &mut Vec<u8>) {
        let frames = self.frames.iter().map(|&id| self.symbolizer.frame(id));
        json_callchain(line, frames);
    }

    /// Writes the folded stacks and the flame graph `args` ask for.
    /// `title` names the probes.
    pub(crate) fn finish(&self, args: &StackOutputArgs, force: bool, title: &str) -> Result<()> {
        if let (Some(p), Some(path)) = (&self.profile, &args.profile) {
            p.write(path, force)?;
        }
        let Some(folded) = self.folded.as_ref() else {
            return Ok(());
        };
        if let Some(p) = &args.stacks_folded {
            let mut text = Vec::new();
            folded.write_folded(&mut text)?;
            crate::output::write_new("--stacks-folded", p, force, &text)?;
        }
        if let Some(p) = &args.flamegraph {
            let mut svg = Vec::new();
            folded
                .flamegraph(title, &mut svg)
                .with_context(|| format!("--flamegraph {}", p.display()))?;
            crate::output::write_new("--flamegraph", p, force, &svg)?;
        }
        Ok(())
    }
}

/// With `--vmlinux` and callchains (`stacks`): the debug file and KASLR
/// slide that name kernel frames from DWARF (inlined functions, source
/// lines). A vmlinux without DWARF, or of another build, is said on
/// stderr, and kernel frames are then named from kallsyms alone.
pub(crate) fn kernel_dwarf(
    kernel: &kprobe_perf_engine::Kernel,
    image: &crate::image_args::ImageArgs,
    stacks: bool,
) -> Option<(PathBuf, u64)> {
    if !stacks || image.vmlinux.is_none() {
        return None;
    }
    match kernel.kernel_dwarf() {
        Ok(found) => Some(found),
        Err(e) => {
            say!(
                "kprobe-perf: kernel frames are named from kallsyms only, without inlined functions or source lines: {:#}",
                anyhow::Error::from(e)
            );
            None
        }
    }
}

/// The flame graph's title: the probes' events.
pub(crate) fn title(plans: &[ProbePlan]) -> String {
    let names: Vec<&str> = plans.iter().map(|p| p.event.as_str()).collect();
    format!("kprobe-perf: stacks of {}", names.join(", "))
}

/// Appends `v` in lowercase hex, right-aligned in `width` columns (as
/// `{:width$x}` would, without the formatter's cost per frame).
fn put_hex_right(line: &mut Vec<u8>, v: u64, width: usize) {
    // Formatted into a buffer on the stack and copied once: this runs
    // twice for each of millions of frames in `script -i` of a large
    // file, where a push per digit cost a tenth of the time.
    let digits = ((64 - v.leading_zeros() as usize).div_ceil(4)).max(1);
    let pad = width.saturating_sub(digits);
    if pad > 16 {
        line.extend(std::iter::repeat_n(b' ', pad - 16));
    }
    let mut buf = [b' '; 32];
    let end = pad.min(16) + digits;
    for (i, b) in buf[end - digits..end].iter_mut().rev().enumerate() {
        *b = b"0123456789abcdef"[((v >> (i * 4)) & 0xf) as usize];
    }
    line.extend_from_slice(&buf[..end]);
}

/// Adds a `callchain` array of `frames` (each frame's address, symbol,
/// offset and object) to the JSON object in `line`.
fn json_callchain<'f>(line: &mut Vec<u8>, frames: impl Iterator<Item = &'f NamedFrame>) {
    if line.last() != Some(&b'}') {
        return;
    }
    line.pop();
    // Keys sorted, as a serde_json map prints them.
    line.extend_from_slice(b",\"callchain\":[");
    for (n, f) in frames.enumerate() {
        if n > 0 {
            line.push(b',');
        }
        line.extend_from_slice(b"{\"address\":");
        crate::json::put_int(line, f.address);
        if let Some(src) = f.source.as_ref() {
            line.extend_from_slice(b",\"file\":");
            crate::json::put_str(line, &src.file);
        }
        if f.inlined {
            line.extend_from_slice(b",\"inlined\":true");
        }
        if let Some(src) = f.source.as_ref() {
            line.extend_from_slice(b",\"line\":");
            crate::json::put_int(line, u64::from(src.line));
        }
        line.extend_from_slice(b",\"object\":");
        crate::json::put_str(line, &f.object);
        line.extend_from_slice(b",\"offset\":");
        crate::json::put_int(line, f.offset);
        line.extend_from_slice(b",\"symbol\":");
        match f.symbol.as_deref() {
            Some(s) => crate::json::put_str(line, s),
            None => line.extend_from_slice(b"null"),
        }
        line.push(b'}');
    }
    line.extend_from_slice(b"]}");
}

/// Appends one frame as `perf script` prints it (see
/// [`Stacks::write_text`]): a newline and a tab, the address (a user
/// frame's offset in its file, as perf prints it)
/// right-aligned in 16 columns, `sym+0xOFF`, the object in parentheses,
/// and with `srcline` its source line on a line of its own.
fn frame_text(line: &mut Vec<u8>, f: &NamedFrame, srcline: bool) {
    line.extend_from_slice(b"\n\t");
    // perf prints a user frame in a file at its offset in the file.
    put_hex_right(line, f.in_file.unwrap_or(f.address), 16);
    line.push(b' ');
    match &f.symbol {
        Some(s) => {
            line.extend_from_slice(s.as_bytes());
            line.extend_from_slice(b"+0x");
            put_hex_right(line, f.offset, 0);
        }
        None => line.extend_from_slice(b"[unknown]"),
    }
    let src = f.source.as_ref().filter(|_| srcline);
    if !f.inlined {
        line.extend_from_slice(b" (");
        line.extend_from_slice(f.object.as_bytes());
        line.push(b')');
    } else if src.is_none() {
        line.extend_from_slice(b" (inlined)");
    }
    // perf's layout: the source on a line of its own, and an
    // inlined frame's mark after it.
    if let Some(src) = src {
        line.extend_from_slice(b"\n  ");
        let base = src.file.rsplit('/').next().unwrap_or(&src.file);
        line.extend_from_slice(base.as_bytes());
        line.push(b':');
        crate::json::put_int(line, u64::from(src.line));
        if f.inlined {
            line.extend_from_slice(b" (inlined)");
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_is_right_aligned_as_the_formatter_aligns_it() {
        for (v, w) in [
            (0u64, 16),
            (0x7f12_3456_789a, 16),
            (u64::MAX, 16),
            (0x1c, 0),
            (0, 0),
            (0x1c, 40),
            (0xabc, 3),
            (0x10, 1),
            (0x0123_4567_89ab_cdef, 16),
        ] {
            let mut line = Vec::new();
            super::put_hex_right(&mut line, v, w);
            assert_eq!(String::from_utf8(line).unwrap(), format!("{v:w$x}"));
        }
    }

    use super::*;

    #[test]
    fn a_picture_of_stacks_implies_kernel_callchains() {
        let mut args = CallGraphArgs::default();
        assert!(args.graph().is_none());
        args.out.flamegraph = Some("f.svg".into());
        assert!(matches!(args.graph(), Some(CallGraph::Kernel)));
        args.out.flamegraph = None;
        args.out.stacks_folded = Some("f.folded".into());
        assert!(matches!(args.graph(), Some(CallGraph::Kernel)));
        args.call_graph = Some(CallGraphArg::User);
        assert!(matches!(args.graph(), Some(CallGraph::User)));
        args.call_graph = None;
        args.g = true;
        assert!(matches!(args.graph(), Some(CallGraph::Both)));
    }

    #[test]
    fn call_graph_values_and_dwarf_sizes() {
        assert_eq!(parse_call_graph("both"), Ok(CallGraphArg::Both));
        assert_eq!(parse_call_graph("dwarf"), Ok(CallGraphArg::Dwarf(8192)));
        assert_eq!(
            parse_call_graph("dwarf,16384"),
            Ok(CallGraphArg::Dwarf(16384))
        );
        let e = parse_call_graph("dwarf,100").unwrap_err();
        assert!(e.contains("multiple of 8"), "{e}");
        let e = parse_call_graph("dwarf,65536").unwrap_err();
        assert!(e.contains("65528"), "{e}");
        let e = parse_call_graph("user,8").unwrap_err();
        assert!(e.contains("only dwarf takes a size"), "{e}");
        assert_eq!(parse_call_graph("fp"), Ok(CallGraphArg::Both));
        assert_eq!(
            parse_call_graph("lbr").unwrap_err(),
            "`lbr` is not one of kernel, user, both, fp (as both), dwarf, dwarf,SIZE"
        );
    }

    #[test]
    fn json_callchains_match_a_sorted_serde_json_map() {
        let frames = [
            NamedFrame {
                address: 0xffff_ffff_8123_45a0,
                symbol: Some("do_sys_openat2".into()),
                offset: 0x10,
                object: "[kernel.kallsyms]".into(),
                user: false,
                inlined: false,
                source: None,
                in_file: None,
            },
            NamedFrame {
                address: 7,
                symbol: None,
                offset: 0,
                object: "/opt/a \"b\"\n".into(),
                user: true,
                inlined: true,
                source: Some(kprobe_perf_engine::stack::SourceLine {
                    file: "/src/a.c".into(),
                    line: 12,
                }),
                in_file: Some(7),
            },
        ];
        let mut line = b"{\"type\":\"event\"}".to_vec();
        json_callchain(&mut line, frames.iter());
        let frames: Vec<_> = frames
            .iter()
            .map(|f| {
                let mut j = serde_json::json!({
                    "address": f.address,
                    "symbol": f.symbol.as_deref(),
                    "offset": f.offset,
                    "object": &*f.object,
                });
                // Only an inlined frame says so; the source when known.
                if f.inlined {
                    j["inlined"] = true.into();
                }
                if let Some(src) = f.source.as_ref() {
                    j["file"] = (&*src.file).into();
                    j["line"] = src.line.into();
                }
                j
            })
            .collect();
        let want = format!(
            "{{\"type\":\"event\",\"callchain\":{}}}",
            serde_json::json!(frames)
        );
        assert_eq!(String::from_utf8(line).unwrap(), want);
    }
}
