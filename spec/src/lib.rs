//! The probe language: kprobe_events definitions (and the prototype form of
//! function based events) parsed into a typed AST. Pure: no I/O, no symbol
//! lookup; validation that needs only the architecture happens here.
//!
//! Accepted forms:
//! - `p[:[GRP/][EVENT]] [MOD:]SYM[+offs]|MEMADDR [FETCHARGS]`
//! - `p[:[GRP/][EVENT]] [MOD:]SYM[+0]%return [FETCHARGS]` (a return probe)
//! - `r[MAXACTIVE][:[GRP/][EVENT]] [MOD:]SYM[+0] [FETCHARGS]`
//! - `p|r[:[GRP/][EVENT]] /PATH:SYMBOL[+offs]|/PATH:0xOFFSET [FETCHARGS]` (uprobes)
//! - `f[:[GRP/][EVENT]] SYM[%return] [FETCHARGS]` (an fprobe event; SYM may
//!   be a glob, one event for every matching function; `$retval` among the
//!   args makes it a return probe, as the kernel does)
//! - `f[MAXACTIVE][:[GRP/][EVENT]] SYM%return [FETCHARGS]`
//! - `t[:[GRP/][EVENT]] TRACEPOINT [FETCHARGS]` (a probe on a tracepoint)
//! - `-:[GRP/]EVENT [PROBE-POINT [ARGS]]` (delete; see [`Definition`])
//! - `e[:[GRP/][EVENT]] SYSTEM.EVENT [FETCHARGS]` (an event probe, see
//!   [`EventProbe`]; parsed, not yet recorded)
//! - uprobes also as `/PATH:0xOFFSET[%return](0xREF_CTR)` (a reference
//!   counter, as USDT semaphores use)
//! - the short form `p:SYM [FETCHARGS]`: when what follows the colon has a
//!   module or path prefix or an offset, or is followed only by fetch
//!   args, it is the target and the event name is generated;
//! - the prototype form `FUNC(TYPE NAME, ...)` (see [`proto`]).
//!
//! FETCHARGS: `%REG`, `@ADDR`, `@SYM[+|-offs]`, `@+OFFS` (uprobes),
//! `$stackN`, `$stack`, `$argN`, `$retval`, `$comm`, `\IMM`,
//! `+|-[u]OFFS(FETCHARG)` nested to any depth, a bare `NAME` (resolved
//! later from BTF), BTF member access `NAME->field[->field|.field...]`,
//! `$arg*` (every parameter, by BTF), each with optional `NAME=` and
//! `:TYPE` (`u8..u64`, `s8..s64`, `x8..x64`, `char`, `string`, `ustring`,
//! `symbol`, `symstr`, `%pd`, `%pD`, `b<width>@<offset>/<container>`, and
//! arrays `TYPE[N]`).
//!
//! The grammar is the union of what recent kernels accept; which of these
//! forms the running kernel has is checked when a probe is planned (from
//! tracefs's `README`, see [`KernelFeatures`]).
//!
//! ```
//! use kprobe_perf_spec::{ProbeSpec, ProbeKind, FetchBase};
//! use kprobe_perf_arch::Arch;
//! let s = ProbeSpec::parse("r:myret do_sys_openat2 ret=$retval:s64", Arch::X86_64).unwrap();
//! assert_eq!(s.kind, ProbeKind::Return { maxactive: None });
//! assert_eq!(s.event_name(), "myret");
//! assert_eq!(s.args[0].fetch.base, FetchBase::Retval);
//! assert_eq!(s.to_string(), "r:myret do_sys_openat2 ret=$retval:s64");
//! assert_eq!(s.qualified().to_string(), "r:kprobes/myret do_sys_openat2 ret=$retval:s64");
//! ```
#![cfg_attr(not(test), warn(unused_crate_dependencies))]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::fmt;

mod args;
pub mod boot;
mod features;
mod parse;
pub mod proto;
mod target;
#[cfg(test)]
mod tests;

pub use args::{MAX_ARG_BODY, MAX_PARAM};
pub use features::{KernelFeatures, Lacking};
pub use parse::SpecError;

/// Longest argument list the kernel accepts (`MAX_TRACE_ARGS`).
pub const MAX_ARGS: usize = 128;
/// Largest kretprobe maxactive the kernel accepts (`KRETPROBE_MAXACTIVE_MAX`).
pub const MAX_MAXACTIVE: u32 = 4096;
/// Largest array length the kernel accepts (`MAX_ARRAY_LEN`).
pub const MAX_ARRAY_LEN: u32 = 64;
/// The group the kernel uses when none is given.
pub const DEFAULT_GROUP: &str = "kprobes";
/// The group of an fprobe event when none is given (`FPROBE_EVENT_SYSTEM`).
pub const FPROBE_GROUP: &str = "fprobes";
/// The group of a tracepoint probe when none is given
/// (`TRACEPOINT_EVENT_SYSTEM`).
pub const TPROBE_GROUP: &str = "tracepoints";
/// Longest event or group name the kernel accepts (`MAX_EVENT_NAME_LEN`
/// less the NUL).
pub const MAX_EVENT_NAME: usize = 63;
/// Longest argument name the kernel accepts (`MAX_ARG_NAME_LEN`; the
/// kernel refuses only longer ones).
pub const MAX_ARG_NAME: usize = 32;
/// Field names the kernel reserves in every probe event.
pub const RESERVED_NAMES: &[&str] = &[
    "common_type",
    "common_flags",
    "common_preempt_count",
    "common_pid",
    "common_tgid",
    "__probe_ip",
    "__probe_ret_ip",
    "__probe_func",
];

/// A byte range of the input, for pointing at mistakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    /// Byte offset of the first character.
    pub start: usize,
    /// Length in bytes (shown as at least one caret).
    pub len: usize,
}

impl Span {
    /// Writes the three lines of a refusal: `message`, then `input`
    /// indented, then carets under this span (counted in characters; at
    /// least one).
    pub fn write_under(
        &self,
        f: &mut std::fmt::Formatter<'_>,
        message: &str,
        input: &str,
    ) -> std::fmt::Result {
        let start = self.start.min(input.len());
        let pad = input.get(..start).map_or(start, |s| s.chars().count());
        let width = input
            .get(start..(start + self.len).min(input.len()))
            .map_or(1, |s| s.chars().count().max(1));
        write!(
            f,
            "{message}\n  {input}\n  {}{}",
            " ".repeat(pad),
            "^".repeat(width)
        )
    }
}

/// One line of kprobe_events input: a probe, or the deletion of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Definition {
    /// `p:`/`r:` or the prototype form.
    Probe(ProbeSpec),
    /// `-:[GRP/]EVENT [PROBE-POINT [ARGS]]`: the kernel deletes the
    /// event only when it was defined with these words (when given).
    Delete {
        /// The group, when given.
        group: Option<String>,
        /// The event; empty in `-:GRP/` (every event of the group).
        event: String,
        /// The probe point and arguments the event must have been defined
        /// with, as written (the kernel compares them word by word).
        matching: Vec<String>,
    },
    /// `e[:[GRP/][EVENT]] SYSTEM.EVENT [ARGS]`: an event probe (5.15+).
    EventProbe(EventProbe),
}

/// An event probe: a new event that fires with an existing trace event
/// and records fields of it (trace_eprobe.c). The kernel gives eprobes
/// no perf handler, so the engine records them from ftrace's buffer
/// (docs/probes.md, "Event probes").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventProbe {
    /// `GRP`; the kernel's default is `eprobes`.
    pub group: Option<String>,
    /// `EVENT`; the kernel's default is the attached event's name.
    pub event: Option<String>,
    /// The attached event's system (`sched` of `sched.sched_switch`).
    pub system: String,
    /// The attached event (`sched_switch`).
    pub attached: String,
    /// Fetch arguments (`$FIELD` reads a field of the attached event).
    pub args: Vec<FetchArg>,
}

/// The group of an event probe when none is given (`EPROBE_EVENT_SYSTEM`).
pub const EPROBE_GROUP: &str = "eprobes";

impl EventProbe {
    /// The same probe with group and event spelled out as the kernel names
    /// them.
    pub fn qualified(&self) -> EventProbe {
        EventProbe {
            group: Some(
                self.group
                    .clone()
                    .unwrap_or_else(|| EPROBE_GROUP.to_string()),
            ),
            event: Some(self.event.clone().unwrap_or_else(|| self.attached.clone())),
            ..self.clone()
        }
    }
}

impl fmt::Display for EventProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("e")?;
        match (&self.group, &self.event) {
            (Some(g), Some(e)) => write!(f, ":{g}/{e}")?,
            (Some(g), None) => write!(f, ":{g}/")?,
            (None, Some(e)) => write!(f, ":{e}")?,
            (None, None) => {}
        }
        write!(f, " {}.{}", self.system, self.attached)?;
        for a in &self.args {
            write!(f, " {a}")?;
        }
        Ok(())
    }
}

/// Entry probe or return probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// `p`: fires when the instruction at the target runs.
    Entry,
    /// `r[MAXACTIVE]` or `p ...%return`: fires when the function returns.
    Return {
        /// Instances for concurrent calls; `None` is the kernel default.
        maxactive: Option<u32>,
    },
}

/// Where in a user binary a uprobe goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserLocation {
    /// `SYMBOL[+offs]`, resolved from the binary's symbol table.
    Symbol {
        /// The ELF symbol.
        name: String,
        /// Offset into it.
        offset: u64,
    },
    /// `0xOFFSET`: a file offset, as the uprobe PMU takes it.
    Offset(u64),
    /// `0xOFFSET(0xREF_CTR)`: a file offset and the file offset of the
    /// reference counter (a USDT semaphore) the kernel increments while
    /// the probe is armed.
    Counted {
        /// The probe's file offset.
        offset: u64,
        /// The reference counter's file offset.
        ref_ctr: u64,
    },
    /// `usdt:PATH:PROVIDER:NAME`: the statically defined tracepoints
    /// (SDT, `<sys/sdt.h>`) of the binary's `.note.stapsdt` notes that
    /// match; `PROVIDER` and `NAME` may be globs, and `PATH` `*` (every
    /// file the recorded processes map). Each site becomes a
    /// uprobe at its file offset, with its semaphore as the reference
    /// counter, and `$argN` is its Nth operand.
    Sdt {
        /// The provider, or a glob of providers.
        provider: String,
        /// The probe's name, or a glob of names.
        name: String,
    },
}

/// Where the probe goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `[MOD:]SYM[@0xADDR][+offs]`.
    Symbol {
        /// Module, for `MOD:SYM`.
        module: Option<String>,
        /// Symbol name.
        name: String,
        /// `SYM@0xADDR`: which of several functions sharing the name.
        instance: Option<u64>,
        /// Offset into the symbol.
        offset: u64,
    },
    /// `MEMADDR`: an absolute kernel text address.
    Address(u64),
    /// `/PATH:LOCATION`: a uprobe.
    User {
        /// The binary or library.
        path: String,
        /// Where in it.
        location: UserLocation,
    },
    /// `f:... SYM`: an fprobe event on a function's entry (or return),
    /// through ftrace; `SYM` may be a glob (`vfs_*`), one event for every
    /// function it matches.
    Fprobe {
        /// The function, or a glob of functions.
        name: String,
    },
    /// `t:... TRACEPOINT`: a probe on a tracepoint (its arguments are
    /// the tracepoint's, by BTF).
    Tracepoint {
        /// The tracepoint, as in `sched_switch`.
        name: String,
    },
}

impl Target {
    /// True when the probe is at the very start of a function (offset 0,
    /// or an address/file offset, whose position the planner checks).
    pub fn at_entry(&self) -> bool {
        match self {
            Target::Symbol { offset, .. } => *offset == 0,
            Target::User {
                location: UserLocation::Symbol { offset, .. },
                ..
            } => *offset == 0,
            Target::Address(_)
            | Target::Fprobe { .. }
            | Target::Tracepoint { .. }
            | Target::User {
                location:
                    UserLocation::Offset(_) | UserLocation::Counted { .. } | UserLocation::Sdt { .. },
                ..
            } => true,
        }
    }

    /// True for the forms only the kernel's dynamic events can define
    /// (fprobe and tracepoint probes): no PMU carries them.
    pub fn is_dynamic_only(&self) -> bool {
        matches!(self, Target::Fprobe { .. } | Target::Tracepoint { .. })
    }

    /// True for a uprobe.
    pub fn is_user(&self) -> bool {
        matches!(self, Target::User { .. })
    }
}

/// An immediate value (`\IMM`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Immediate {
    /// A number (`\123`, `\0x10`, `\-1`).
    Number(i64),
    /// A string (`\"text"`).
    String(String),
}

/// Where the value of a fetch argument starts before any dereference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchBase {
    /// `%REG`.
    Register(String),
    /// `$argN` (1-based).
    Arg(u32),
    /// `$retval`.
    Retval,
    /// `$stack`: the stack pointer.
    Stack,
    /// `$stackN`: the Nth word on the stack.
    StackEntry(u32),
    /// `$comm`: the current task's command name.
    Comm,
    /// `@ADDR`: memory at a kernel address.
    Address(u64),
    /// `@SYM[+|-offs]`: memory at a data symbol.
    Symbol {
        /// The symbol.
        name: String,
        /// Signed offset from it.
        offset: i64,
    },
    /// `@+OFFS`: memory at a file offset of the probed binary (uprobes).
    FileOffset(u64),
    /// `\IMM`.
    Immediate(Immediate),
    /// A bare name, to be resolved to `$argN` from BTF by the planner.
    Name(String),
    /// `NAME->field[->field|.field...]`: a member of a parameter (or of a
    /// tracepoint argument), found and fetched by the kernel through BTF.
    Member {
        /// The parameter.
        name: String,
        /// The members, outermost last.
        path: Vec<Member>,
    },
    /// `$arg*`: every parameter of the function, named and typed by the
    /// kernel from BTF.
    AllArgs,
    /// `$FIELD` in an event probe (`e:`): a field of the attached event.
    EventField(String),
}

/// One step of a BTF member access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// `->` (through a pointer) rather than `.` (within a struct).
    pub through_pointer: bool,
    /// The member.
    pub field: String,
}

/// One `+|-[u]OFFS(...)` step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deref {
    /// Signed offset added to the address before reading.
    pub offset: i64,
    /// `u`: the address is in user space.
    pub user: bool,
}

/// A fetch: a base and the dereferences applied to it, innermost first.
/// `+8(+0(%di))` is base `%di` with derefs `[+0, +8]`. Kept flat so that
/// any depth of nesting costs no recursion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetch {
    /// The starting value.
    pub base: FetchBase,
    /// Dereferences, innermost first.
    pub derefs: Vec<Deref>,
}

impl Fetch {
    /// True when the value comes from memory (which only the kernel can
    /// read at hit time): a dereference, `@ADDR`, `@SYM`, `@+OFFS`.
    pub fn reads_memory(&self) -> bool {
        !self.derefs.is_empty()
            || matches!(
                self.base,
                FetchBase::Address(_) | FetchBase::Symbol { .. } | FetchBase::FileOffset(_)
            )
            || matches!(&self.base, FetchBase::Member { path, .. } if path.iter().any(|m| m.through_pointer))
    }
}

/// A scalar or special type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaseType {
    /// `uN`: unsigned decimal.
    Unsigned(u8),
    /// `sN`: signed decimal.
    Signed(u8),
    /// `xN`: hexadecimal.
    Hex(u8),
    /// `string`: a NUL-terminated kernel string.
    String,
    /// `ustring`: a NUL-terminated user string.
    UString,
    /// `symbol`: a pointer shown as `sym+off`.
    Symbol,
    /// `char`: one byte shown as a character.
    Char,
    /// `symstr`: an address the kernel turns into `sym+off/size`, stored
    /// as a string.
    SymStr,
    /// `%pd`: a `struct dentry *`, shown as its name (the kernel fetches
    /// `d_name.name` as a string).
    Dentry,
    /// `%pD`: a `struct file *`, shown as the name of its dentry.
    File,
    /// `b<width>@<offset>/<container>` (all in bits).
    Bitfield {
        /// Width of the field.
        width: u8,
        /// Offset of its lowest bit in the container.
        offset: u8,
        /// Container size (8, 16, 32 or 64).
        container: u8,
    },
}

impl BaseType {
    /// True for `string` and `ustring`.
    pub fn is_string(self) -> bool {
        matches!(self, BaseType::String | BaseType::UString)
    }

    /// True for every type the kernel stores as a `__data_loc` string
    /// (`string`, `ustring`, `symstr`, `%pd`, `%pD`).
    pub fn is_data_loc(self) -> bool {
        matches!(
            self,
            BaseType::String
                | BaseType::UString
                | BaseType::SymStr
                | BaseType::Dentry
                | BaseType::File
        )
    }
}

/// `:TYPE`, possibly an array `TYPE[N]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgType {
    /// The element type.
    pub base: BaseType,
    /// `[N]`: number of elements.
    pub array: Option<u32>,
}

impl ArgType {
    /// A plain (non-array) type.
    pub const fn scalar(base: BaseType) -> ArgType {
        ArgType { base, array: None }
    }

    /// The default type on 64-bit machines: `x64`.
    pub const DEFAULT: ArgType = ArgType::scalar(BaseType::Hex(64));
}

/// One fetch argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchArg {
    /// `NAME=`; `None` means a generated name (see [`ProbeSpec::arg_name`]).
    pub name: Option<String>,
    /// Where the value comes from.
    pub fetch: Fetch,
    /// `:TYPE`; `None` is the default (`string` for `$comm`, else x64).
    pub ty: Option<ArgType>,
}

impl FetchArg {
    /// The type in effect: as given, or the kernel's default (`string`
    /// for `$comm` and immediate strings, x64 otherwise).
    pub fn effective_type(&self) -> ArgType {
        self.ty.unwrap_or(match self.fetch.base {
            FetchBase::Comm | FetchBase::Immediate(Immediate::String(_)) => {
                ArgType::scalar(BaseType::String)
            }
            _ => ArgType::DEFAULT,
        })
    }
}

/// A parsed probe definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    /// Entry or return.
    pub kind: ProbeKind,
    /// `GRP` of `GRP/EVENT`.
    pub group: Option<String>,
    /// `EVENT`; when `None`, [`ProbeSpec::event_name`] generates one.
    pub event: Option<String>,
    /// Where the probe goes.
    pub target: Target,
    /// Fetch arguments in order.
    pub args: Vec<FetchArg>,
}

fn sanitize(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl ProbeSpec {
    /// The event name: as given, or generated the way the kernel does
    /// (`p_SYM_OFFS`, `r_MOD_SYM_OFFS`, `p_0xADDR`; for uprobes
    /// `p_BASENAME_0xOFFS` with the basename cut at its first `.`, `-` or
    /// `_`, and `p_BASENAME_SYM_OFFS` for the symbol form), with characters
    /// other than letters, digits and `_` replaced by `_`.
    pub fn event_name(&self) -> String {
        if let Some(e) = &self.event {
            return e.clone();
        }
        let prefix = match self.kind {
            ProbeKind::Entry => 'p',
            ProbeKind::Return { .. } => 'r',
        };
        // As __trace_fprobe_create names them: `SYM__entry`, `SYM__exit`,
        // and the tracepoint itself (`_` first when it starts with a digit).
        let raw = match &self.target {
            Target::Fprobe { name } => {
                let end = if self.is_return() { "exit" } else { "entry" };
                format!("{name}__{end}")
            }
            Target::Tracepoint { name } if name.starts_with(|c: char| c.is_ascii_digit()) => {
                format!("_{name}")
            }
            Target::Tracepoint { name } => name.clone(),
            Target::Symbol {
                module: Some(m),
                name,
                offset,
                ..
            } => format!("{prefix}_{m}_{name}_{offset}"),
            Target::Symbol { name, offset, .. } => format!("{prefix}_{name}_{offset}"),
            Target::Address(a) => format!("{prefix}_0x{a:x}"),
            Target::User { path, location } => {
                let base = path.rsplit('/').next().unwrap_or(path);
                let tail = base.split(['.', '-', '_']).next().unwrap_or(base);
                match location {
                    UserLocation::Offset(o) | UserLocation::Counted { offset: o, .. } => {
                        format!("{prefix}_{tail}_0x{o:x}")
                    }
                    UserLocation::Symbol { name, offset } => {
                        format!("{prefix}_{tail}_{name}_{offset}")
                    }
                    // As perf names an SDT event: by the probe's name.
                    UserLocation::Sdt { name, .. } => name.clone(),
                }
            }
        };
        sanitize(&raw)
    }

    /// The group name: as given, or `kprobes` (`uprobes` for uprobes,
    /// `fprobes` and `tracepoints` for fprobe and tracepoint probes).
    pub fn group_name(&self) -> &str {
        match (&self.group, &self.target) {
            (Some(g), _) => g,
            (None, Target::User { .. }) => "uprobes",
            (None, Target::Fprobe { .. }) => FPROBE_GROUP,
            (None, Target::Tracepoint { .. }) => TPROBE_GROUP,
            (None, _) => DEFAULT_GROUP,
        }
    }

    /// The display name of argument `i`: as given, the BTF name for a bare
    /// name, or `arg{i+1}` as the kernel generates it.
    pub fn arg_name(&self, i: usize) -> String {
        match self.args.get(i) {
            Some(FetchArg { name: Some(n), .. }) => n.clone(),
            Some(FetchArg {
                fetch:
                    Fetch {
                        base: FetchBase::Name(n),
                        derefs,
                    },
                ..
            }) if derefs.is_empty() => n.clone(),
            _ => format!("arg{}", i + 1),
        }
    }

    /// The same probe with group and event spelled out as the kernel would
    /// name them: the canonical form `probe --parse` prints.
    pub fn qualified(&self) -> ProbeSpec {
        ProbeSpec {
            group: Some(self.group_name().to_string()),
            event: Some(self.event_name()),
            ..self.clone()
        }
    }

    /// The module of a `MOD:SYM` target.
    pub fn target_module(&self) -> Option<&str> {
        match &self.target {
            Target::Symbol {
                module: Some(m), ..
            } => Some(m),
            _ => None,
        }
    }

    /// True for a return probe.
    pub fn is_return(&self) -> bool {
        matches!(self.kind, ProbeKind::Return { .. })
    }
}

impl fmt::Display for BaseType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BaseType::Unsigned(b) => write!(f, "u{b}"),
            BaseType::Signed(b) => write!(f, "s{b}"),
            BaseType::Hex(b) => write!(f, "x{b}"),
            BaseType::String => f.write_str("string"),
            BaseType::UString => f.write_str("ustring"),
            BaseType::Symbol => f.write_str("symbol"),
            BaseType::Char => f.write_str("char"),
            BaseType::SymStr => f.write_str("symstr"),
            BaseType::Dentry => f.write_str("%pd"),
            BaseType::File => f.write_str("%pD"),
            BaseType::Bitfield {
                width,
                offset,
                container,
            } => write!(f, "b{width}@{offset}/{container}"),
        }
    }
}

impl fmt::Display for ArgType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.base)?;
        if let Some(n) = self.array {
            write!(f, "[{n}]")?;
        }
        Ok(())
    }
}

fn write_signed(f: &mut fmt::Formatter<'_>, v: i64) -> fmt::Result {
    if v < 0 {
        write!(f, "-{}", v.unsigned_abs())
    } else {
        write!(f, "+{v}")
    }
}

impl fmt::Display for Fetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in self.derefs.iter().rev() {
            if d.offset < 0 {
                f.write_str("-")?;
            } else {
                f.write_str("+")?;
            }
            if d.user {
                f.write_str("u")?;
            }
            write!(f, "{}(", d.offset.unsigned_abs())?;
        }
        match &self.base {
            FetchBase::Register(r) => write!(f, "%{r}")?,
            FetchBase::Arg(n) => write!(f, "$arg{n}")?,
            FetchBase::Retval => f.write_str("$retval")?,
            FetchBase::Stack => f.write_str("$stack")?,
            FetchBase::StackEntry(n) => write!(f, "$stack{n}")?,
            FetchBase::Comm => f.write_str("$comm")?,
            FetchBase::Address(a) => write!(f, "@0x{a:x}")?,
            FetchBase::Symbol { name, offset } => {
                write!(f, "@{name}")?;
                if *offset != 0 {
                    write_signed(f, *offset)?;
                }
            }
            FetchBase::FileOffset(o) => write!(f, "@+0x{o:x}")?,
            FetchBase::Immediate(Immediate::Number(n)) => write!(f, "\\{n}")?,
            FetchBase::Immediate(Immediate::String(s)) => write!(f, "\\\"{s}\"")?,
            FetchBase::Name(n) => f.write_str(n)?,
            FetchBase::Member { name, path } => {
                f.write_str(name)?;
                for m in path {
                    f.write_str(if m.through_pointer { "->" } else { "." })?;
                    f.write_str(&m.field)?;
                }
            }
            FetchBase::AllArgs => f.write_str("$arg*")?,
            FetchBase::EventField(n) => write!(f, "${n}")?,
        }
        for _ in &self.derefs {
            f.write_str(")")?;
        }
        Ok(())
    }
}

impl fmt::Display for FetchArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(n) = &self.name {
            write!(f, "{n}=")?;
        }
        write!(f, "{}", self.fetch)?;
        if let Some(t) = self.ty {
            write!(f, ":{t}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Symbol {
                module,
                name,
                instance,
                offset,
            } => {
                if let Some(m) = module {
                    write!(f, "{m}:")?;
                }
                f.write_str(name)?;
                if let Some(a) = instance {
                    write!(f, "@0x{a:x}")?;
                }
                if *offset != 0 {
                    write!(f, "+{offset}")?;
                }
                Ok(())
            }
            Target::Address(a) => write!(f, "0x{a:x}"),
            Target::User { path, location } => match location {
                UserLocation::Sdt { provider, name } => {
                    write!(f, "usdt:{path}:{provider}:{name}")
                }
                UserLocation::Offset(o) => write!(f, "{path}:0x{o:x}"),
                UserLocation::Counted { offset, ref_ctr } => {
                    write!(f, "{path}:0x{offset:x}(0x{ref_ctr:x})")
                }
                UserLocation::Symbol { name, offset: 0 } => write!(f, "{path}:{name}"),
                UserLocation::Symbol { name, offset } => write!(f, "{path}:{name}+{offset}"),
            },
            Target::Fprobe { name } | Target::Tracepoint { name } => f.write_str(name),
        }
    }
}

impl fmt::Display for ProbeSpec {
    /// kprobe_events syntax, normalised (numbers, spacing), with exactly the
    /// group and event the AST holds; see [`ProbeSpec::qualified`] for the
    /// form with both spelled out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (
            Target::User {
                location: UserLocation::Sdt { .. },
                ..
            },
            None,
            None,
        ) = (&self.target, &self.group, &self.event)
        {
            // The SDT form on its own: `usdt:PATH:PROVIDER:NAME ARGS`.
            write!(f, "{}", self.target)?;
            for a in &self.args {
                write!(f, " {a}")?;
            }
            return Ok(());
        }
        match (&self.target, self.kind) {
            (Target::Fprobe { .. }, ProbeKind::Return { maxactive: Some(n) }) => write!(f, "f{n}")?,
            (Target::Fprobe { .. }, _) => f.write_str("f")?,
            (Target::Tracepoint { .. }, _) => f.write_str("t")?,
            (_, ProbeKind::Entry) => f.write_str("p")?,
            (_, ProbeKind::Return { maxactive: None }) => f.write_str("r")?,
            (_, ProbeKind::Return { maxactive: Some(n) }) => write!(f, "r{n}")?,
        }
        match (&self.group, &self.event) {
            (Some(g), Some(e)) => write!(f, ":{g}/{e}")?,
            (Some(g), None) => write!(f, ":{g}/")?,
            (None, Some(e)) => write!(f, ":{e}")?,
            (None, None) => {}
        }
        write!(f, " {}", self.target)?;
        if matches!(self.target, Target::Fprobe { .. }) && self.is_return() {
            f.write_str("%return")?;
        }
        for a in &self.args {
            write!(f, " {a}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Definition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Definition::Probe(p) => write!(f, "{p}"),
            Definition::Delete {
                group,
                event,
                matching,
            } => {
                f.write_str("-:")?;
                if let Some(g) = group {
                    write!(f, "{g}/")?;
                }
                f.write_str(event)?;
                for w in matching {
                    write!(f, " {w}")?;
                }
                Ok(())
            }
            Definition::EventProbe(e) => write!(f, "{e}"),
        }
    }
}
