//! Every `perf_event_attr` the engine opens or writes is built here: a
//! session's probe events and their entry counters, the sample layout a
//! decoder reads (and a perf.data file stores), and the bare probe that
//! preflight asks the kernel about.
//!
//! Nothing here knows a session: the settings come in as plain values, so
//! that the decoder ([`crate::decode::records`]), the session and preflight all
//! depend on this module and none on another.

use kprobe_perf_arch::boundary::ProbeSite;
use perf_event_open_sys::bindings::{
    PERF_SAMPLE_CPU, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_RAW,
    PERF_SAMPLE_REGS_INTR, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
};

use crate::attach::pmu::ProbePmu;
use crate::attach::sys::{self, perf_event_attr};
use crate::plan::{AttachPoint, ProbePlan};

/// Which callchains each sample carries (`-g` / `--call-graph`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallGraph {
    /// The kernel stack only (`exclude_callchain_user`).
    Kernel,
    /// The user stack only, walked by frame pointer by the kernel
    /// (`exclude_callchain_kernel`).
    User,
    /// Both, the kernel's first (innermost), the user stack walked by
    /// frame pointer.
    Both,
    /// The kernel stack, and the user stack unwound in user space from
    /// DWARF call frame information: each sample carries the user
    /// registers (`PERF_SAMPLE_REGS_USER`) and a copy of the top
    /// `stack_size` bytes of the user stack (`PERF_SAMPLE_STACK_USER`),
    /// as `perf record --call-graph dwarf` records them.
    Dwarf {
        /// Bytes of user stack copied per sample (a multiple of 8, at most
        /// 65528; perf's default is 8192).
        stack_size: u32,
    },
}

/// The user stack bytes `--call-graph dwarf` copies by default, as perf.
pub const DEFAULT_DWARF_STACK: u32 = 8192;

impl CallGraph {
    /// True when kernel frames are recorded.
    pub fn kernel(self) -> bool {
        matches!(
            self,
            CallGraph::Kernel | CallGraph::Both | CallGraph::Dwarf { .. }
        )
    }

    /// True when the kernel walks user frames by frame pointer.
    pub fn user(self) -> bool {
        matches!(self, CallGraph::User | CallGraph::Both)
    }

    /// The user stack bytes each sample copies, for DWARF unwinding.
    pub fn dwarf_stack(self) -> Option<u32> {
        match self {
            CallGraph::Dwarf { stack_size } => Some(stack_size),
            _ => None,
        }
    }
}

/// The user registers a DWARF sample carries: every general-purpose
/// register perf records with `--call-graph dwarf` (x86_64: all but the
/// segment registers DS, ES, FS and GS; aarch64: x0..x30, sp and pc), so
/// that perf can unwind a perf.data file written from these samples too.
pub(crate) fn user_regs_mask() -> u64 {
    if cfg!(target_arch = "aarch64") {
        (1u64 << 33) - 1
    } else {
        ((1u64 << 24) - 1) & !(0xf << 12)
    }
}

/// The attr type of a tracefs-defined probe's tracepoint event.
const PERF_TYPE_TRACEPOINT: u32 = perf_event_open_sys::bindings::PERF_TYPE_TRACEPOINT;

/// How a probe is opened: through the kprobe (or uprobe) PMU, or as the
/// tracepoint (its id) of a tracefs-defined event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opener {
    Pmu(ProbePmu),
    Tracepoint(u64),
}

/// The side records the first event of a ring asks for, besides its
/// samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SideRecords {
    /// None: a ring's other events (its first asks for them), or an attr
    /// stored in a perf.data file.
    None,
    /// Thread names (COMM, also at exec).
    Comm,
    /// Thread names and executable mappings (for perf to name uprobe
    /// samples' functions).
    CommAndMmap,
}

/// What a session's settings say about every event's attr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EventSettings {
    /// Data pages per ring (the wakeup watermark is a quarter of it).
    pub(crate) mmap_pages: usize,
    /// The ring is written backward (flight recorder).
    pub(crate) write_backward: bool,
    /// The event is inherited by the tasks its task creates.
    pub(crate) inherit: bool,
    /// The event is armed when its task calls exec.
    pub(crate) enable_on_exec: bool,
    /// The callchains each sample carries, if any.
    pub(crate) call_graph: Option<CallGraph>,
}

/// The `sample_type` a session asks the kernel for with this plan: every
/// sample carries its event id, ip, pid/tid, time, cpu and raw data, plus
/// the registers the arguments need.
pub fn sample_type(plan: &ProbePlan) -> u64 {
    let mut t = PERF_SAMPLE_IDENTIFIER
        | PERF_SAMPLE_IP
        | PERF_SAMPLE_TID
        | PERF_SAMPLE_TIME
        | PERF_SAMPLE_CPU
        | PERF_SAMPLE_RAW;
    if plan.regs_mask != 0 {
        t |= PERF_SAMPLE_REGS_INTR;
    }
    u64::from(t)
}

/// An attr of this kernel ABI's size, every other field zero.
fn empty() -> perf_event_attr {
    perf_event_attr {
        size: sys::ATTR_SIZE,
        ..Default::default()
    }
}

/// Makes `attr` a PMU probe: at a function's entry or return, `config2`
/// being kprobe_addr (no name) or probe_offset (with a name or a uprobe
/// path).
fn set_pmu_probe(attr: &mut perf_event_attr, pmu: ProbePmu, site: ProbeSite, config2: u64) {
    attr.type_ = pmu.type_;
    if site == ProbeSite::Return {
        attr.config |= 1u64 << pmu.retprobe_bit;
    }
    attr.__bindgen_anon_4.config2 = config2;
}

/// Sets the sample layout of `plan`: one sample per hit, with
/// [`sample_type`], its registers, and the sample_id trailer on every
/// other record.
fn set_sampling(attr: &mut perf_event_attr, plan: &ProbePlan) {
    attr.__bindgen_anon_1.sample_period = 1;
    attr.sample_type = sample_type(plan);
    if attr.sample_type & u64::from(PERF_SAMPLE_REGS_INTR) != 0 {
        attr.sample_regs_intr = plan.regs_mask;
    }
    attr.set_sample_id_all(1);
}

/// Adds `PERF_SAMPLE_CALLCHAIN` to `attr`'s samples: the kernel stack,
/// the user stack (walked by frame pointer), or both; for DWARF
/// unwinding, the kernel stack with the user registers and stack bytes.
fn set_callchain(attr: &mut perf_event_attr, graph: CallGraph) {
    use perf_event_open_sys::bindings::{
        PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER,
    };
    attr.sample_type |= u64::from(PERF_SAMPLE_CALLCHAIN);
    attr.set_exclude_callchain_kernel(u64::from(!graph.kernel()));
    attr.set_exclude_callchain_user(u64::from(!graph.user()));
    if let Some(size) = graph.dwarf_stack() {
        attr.sample_type |= u64::from(PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER);
        attr.sample_regs_user = user_regs_mask();
        attr.sample_stack_user = size;
    }
}

/// The attr with the sample layout a session uses for `plan`
/// (`sample_type`, `sample_regs_intr`, `sample_id_all`), for decoding
/// recorded or made-up records without a session.
pub(crate) fn sample_layout(plan: &ProbePlan) -> perf_event_attr {
    let mut attr = empty();
    set_sampling(&mut attr, plan);
    attr
}

/// The attr of one of a session's probe events, disabled: the probe
/// (`opener`), its samples, its ring's wakeups, its target's flags, and
/// the `side` records the first event of a ring asks for.
pub(crate) fn probe_event(
    opener: Opener,
    plan: &ProbePlan,
    settings: &EventSettings,
    side: SideRecords,
) -> perf_event_attr {
    let mut attr = empty();
    match opener {
        Opener::Pmu(pmu) => {
            let site = if plan.is_return() {
                ProbeSite::Return
            } else {
                ProbeSite::Entry
            };
            let config2 = match &plan.attach {
                AttachPoint::Address(a) => *a,
                AttachPoint::Symbol { offset, .. } | AttachPoint::User { offset, .. } => *offset,
            };
            set_pmu_probe(&mut attr, pmu, site, config2);
            if let (
                AttachPoint::User {
                    ref_ctr: Some(c), ..
                },
                Some(shift),
            ) = (&plan.attach, pmu.ref_ctr_shift)
            {
                // The semaphore's file offset; a PMU without the field
                // was refused when the session looked it up.
                attr.config |= c.checked_shl(shift).unwrap_or(0);
            }
        }
        Opener::Tracepoint(id) => {
            attr.type_ = PERF_TYPE_TRACEPOINT;
            attr.config = id;
        }
    }
    set_sampling(&mut attr, plan);
    if let Some(graph) = settings.call_graph {
        set_callchain(&mut attr, graph);
    }
    attr.set_disabled(1);
    if settings.write_backward {
        attr.set_write_backward(1);
    }
    // Wake the reader once a quarter of the ring is full; callers also poll
    // with a timeout, so sparse events are never held back for long.
    attr.set_watermark(1);
    let ring_bytes = settings.mmap_pages.saturating_mul(sys::page_size());
    attr.__bindgen_anon_2.wakeup_watermark = u32::try_from(ring_bytes / 4).unwrap_or(u32::MAX);
    match side {
        SideRecords::None => {}
        SideRecords::Comm | SideRecords::CommAndMmap => {
            attr.set_comm(1);
            attr.set_comm_exec(1);
            // FORK (and EXIT) records: a child is called what its parent
            // was until it execs or renames itself (a COMM record), as
            // perf names it; read from /proc later, it would have the name
            // it took afterwards.
            attr.set_task(1);
            // Executable mappings, for perf to name uprobe samples' functions.
            attr.set_mmap(u64::from(side == SideRecords::CommAndMmap));
            if side == SideRecords::CommAndMmap
                && settings
                    .call_graph
                    .and_then(CallGraph::dwarf_stack)
                    .is_some()
            {
                // As perf records them with --call-graph dwarf: every
                // mapping (an unwinder reads .eh_frame_hdr from a file's
                // read-only segment), with MMAP2's protection bits.
                attr.set_mmap2(1);
                attr.set_mmap_data(1);
            }
        }
    }
    if settings.inherit {
        attr.set_inherit(1);
    }
    if settings.enable_on_exec {
        attr.set_enable_on_exec(1);
    }
    attr
}

/// `attr` of a `MOD:SYM` (or inherited) kprobe turned to go by the
/// address kallsyms gave for its symbol (`symbol_address`): config2
/// becomes the symbol's address plus the probe's offset. To be opened with
/// no name (config1 null).
pub(crate) fn by_address(
    attr: &perf_event_attr,
    plan: &ProbePlan,
    symbol_address: u64,
) -> perf_event_attr {
    let mut by_addr = *attr;
    if let AttachPoint::Symbol { offset, .. } = plan.attach {
        by_addr.__bindgen_anon_4.config2 = symbol_address.wrapping_add(offset);
    }
    by_addr
}

/// The counting-only form of a probe event's `attr`: the same probe
/// (config, config1/config2), target flags (inherit, enable_on_exec) and
/// disabled state, sampling nothing and writing nothing to any ring. The
/// kernel adds one to its count at each hit (perf_tp_event ->
/// perf_swevent_event, which returns before any sample when the period is
/// 0), read with read(2).
pub(crate) fn counter(event: &perf_event_attr) -> perf_event_attr {
    let mut attr = *event;
    attr.__bindgen_anon_1.sample_period = 0;
    attr.sample_type = 0;
    attr.sample_regs_intr = 0;
    attr.set_exclude_callchain_kernel(0);
    attr.set_exclude_callchain_user(0);
    attr.__bindgen_anon_2.wakeup_events = 0;
    attr.set_watermark(0);
    attr.set_sample_id_all(0);
    attr.set_write_backward(0);
    attr.set_comm(0);
    attr.set_comm_exec(0);
    attr.set_mmap(0);
    attr
}

/// The counting-only twin of a kretprobe's `attr`: the same function
/// (name or address) and target, at its entry, as a [`counter`].
pub(crate) fn entry_counter(ret: &perf_event_attr, retprobe_bit: u32) -> perf_event_attr {
    let mut attr = counter(ret);
    attr.config &= !(1u64 << retprobe_bit);
    attr
}

/// A bare disabled PMU probe at `offset` into a named function (the
/// name goes in config1 when opened), sampling nothing: what preflight
/// asks the kernel to register.
#[cfg(feature = "test-util")]
pub(crate) fn bare_probe(pmu: ProbePmu, offset: u64, site: ProbeSite) -> perf_event_attr {
    let mut attr = empty();
    set_pmu_probe(&mut attr, pmu, site, offset);
    attr.set_disabled(1);
    attr
}

/// Asks the kernel itself: opens a disabled kprobe on `name+offset`
/// through the kprobe PMU on CPU 0 and returns the fd, or the kernel's
/// error. A disabled probe is registered but never armed, so no kernel
/// text is patched; closing the fd unregisters it. Used to measure the
/// predictions against the kernel ([`Preflight`](crate::kernel::preflight::Preflight)
/// predicts without opening anything).
#[cfg(feature = "test-util")]
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) fn ask_kernel(
    pmu: ProbePmu,
    name: &str,
    offset: u64,
    kind: ProbeSite,
) -> std::io::Result<std::os::fd::OwnedFd> {
    let name = std::ffi::CString::new(name)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let attr = bare_probe(pmu, offset, kind);
    sys::perf_event_open(&attr, Some(&name), -1, 0, 0)
}
