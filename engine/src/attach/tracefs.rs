//! The tracefs control path, used only where the perf PMUs offer nothing:
//! kretprobe maxactive, fetch arguments the kernel must read at hit time
//! (memory, strings, stack entries), and uprobes whose events must follow
//! a command's forks. Probes are defined in `kprobe_events` /
//! `dynamic_events` or `uprobe_events` under a group private to one
//! session (`kprobe_perf_<pid>_<n>`), opened as tracepoint events, and
//! removed again when the [`TracefsProbes`] guard is dropped. When the
//! process dies without dropping it (SIGKILL, abort), the
//! [`Guardian`](crate::Guardian) removes them, if one was started; and any
//! start removes the groups of processes that are gone
//! (`remove_stale_if_mounted`).
//!
//! Nothing here parses trace text output: only `id`, `format`, the event
//! lists, `error_log` and `kprobe_profile` are read.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::attach::sys;

/// Prefix of every group this engine creates; the pid follows (then `_`
/// and the session's number in that process).
pub(crate) const GROUP_PREFIX: &str = "kprobe_perf_";

/// Where tracefs is mounted when it is mounted here, as perf mounts it.
pub const TRACING_MOUNT: &str = "/sys/kernel/tracing";

/// Set once this process has mounted tracefs.
static MOUNTED_HERE: OnceLock<PathBuf> = OnceLock::new();

/// Where this process mounted tracefs, if it did
/// ([`Tracefs::find_or_mount`]); the mount is left in place, as perf
/// leaves it.
pub fn mounted_here() -> Option<&'static Path> {
    MOUNTED_HERE.get().map(PathBuf::as_path)
}

/// What [`Tracefs::find_or_mount`] would do on this machine now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountPlan {
    /// tracefs is mounted at [`TRACING_MOUNT`], or elsewhere and this
    /// process may not mount: nothing to do.
    Mounted,
    /// tracefs is absent, and this process may mount it at
    /// [`TRACING_MOUNT`]: it will when a probe needs it.
    WouldMount,
    /// tracefs is absent, and this process may not mount it (no
    /// CAP_SYS_ADMIN, or no mount point).
    CannotMount,
}

/// Errors of the tracefs path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TracefsError {
    /// tracefs is mounted nowhere.
    #[error("tracefs is not mounted (neither /sys/kernel/tracing nor /sys/kernel/debug/tracing has its files), and probes defined through kprobe_events or uprobe_events (maxactive rN:, arguments read from memory, uprobes of a recorded command) need it: mount it with: mount -t tracefs nodev /sys/kernel/tracing")]
    NotMounted,
    /// tracefs is mounted nowhere, and mounting it failed for a reason
    /// other than a lack of privilege.
    #[error("tracefs is not mounted, and mounting it at {TRACING_MOUNT} failed ({source}); probes defined through kprobe_events or uprobe_events need it: check that this kernel has CONFIG_TRACING and that {TRACING_MOUNT} exists, then mount it with: mount -t tracefs nodev {TRACING_MOUNT}")]
    MountFailed {
        /// The OS error of mount(2).
        source: io::Error,
    },
    /// tracefs is there but this process may not read it.
    #[error("{root} cannot be read by this process (tracefs is root-only by default): run as root, or remount it with -o gid=GROUP and give that group access", root = .root.display())]
    NotReadable {
        /// The mount point.
        root: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// tracefs is mounted but the kernel has no kprobe events.
    #[error("tracefs is mounted at {root} but has no kprobe_events: this kernel was built without CONFIG_KPROBE_EVENTS, so a probe that needs a kprobe_events definition (maxactive rN:, arguments read from memory, strings, $stackN, 64 or more probes at once, the tracefs backend) cannot be defined; {instead}", root = .root.display(), instead = if *.kprobe_pmu { "use a kernel with CONFIG_KPROBE_EVENTS=y, or keep to register arguments and plain r: on the PMU backend, which needs no tracefs" } else { "it has no kprobe PMU either (/sys/bus/event_source/devices/kprobe is absent, CONFIG_KPROBES is off), so no kernel probe works here: use a kernel with CONFIG_KPROBES=y and CONFIG_KPROBE_EVENTS=y (uprobes still work)" })]
    NoKprobeEvents {
        /// The mount point.
        root: PathBuf,
        /// Whether the kprobe PMU exists (probes without tracefs needs).
        kprobe_pmu: bool,
    },
    /// tracefs is mounted but the kernel has no uprobe events.
    #[error("tracefs is mounted at {root} but has no uprobe_events: this kernel was built without CONFIG_UPROBE_EVENTS, and uprobes that follow a command's forks need a uprobe_events definition; use a kernel with CONFIG_UPROBE_EVENTS=y, or record system-wide", root = .root.display())]
    NoUprobeEvents {
        /// The mount point.
        root: PathBuf,
    },
    /// The kernel refused a definition.
    #[error("the kernel refused the definition `{definition}`: {reason}")]
    Refused {
        /// What was written.
        definition: String,
        /// The kernel's `error_log` line, or the errno.
        reason: String,
    },
    /// Reading or writing a tracefs file failed (the OS error is the
    /// `source()`).
    #[error("{}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A `format` file had an unexpected shape.
    #[error("{path}: no field {field}")]
    Format {
        /// The file.
        path: PathBuf,
        /// The field looked for.
        field: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> TracefsError + '_ {
    move |source| TracefsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A mounted tracefs.
#[derive(Debug, Clone)]
pub struct Tracefs {
    root: PathBuf,
}

/// Which kind of dynamic event a definition is, and so which list holds
/// it and where its removal is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// A kprobe or kretprobe (`kprobe_events`).
    Kernel,
    /// A uprobe or uretprobe (`uprobe_events`).
    User,
}

impl ProbeKind {
    /// The tracefs file listing (and removing) this kind.
    pub(crate) fn list_file(self) -> &'static str {
        match self {
            ProbeKind::Kernel => "kprobe_events",
            ProbeKind::User => "uprobe_events",
        }
    }
}

/// One dynamic event of ours, as listed by the kernel.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Defined {
    /// kprobe or uprobe.
    pub kind: ProbeKind,
    /// Its group.
    pub group: String,
    /// Its event name.
    pub event: String,
}

/// One field of an event's `format` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The field's C declaration without the name (`u64`, `__data_loc char[]`).
    pub c_type: String,
    /// Its name.
    pub name: String,
    /// Byte offset in the raw record.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// `signed:1` in the format (an integer the kernel compares signed).
    pub signed: bool,
}

/// Parses the field lines of a `format` file.
pub(crate) fn parse_format(text: &str) -> Vec<Field> {
    let mut fields = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("field:") else {
            continue;
        };
        let mut decl = "";
        let mut offset = None;
        let mut size = None;
        let mut signed = false;
        for part in rest.split(';').map(str::trim) {
            if let Some(v) = part.strip_prefix("signed:") {
                signed = v.trim() == "1";
            } else if let Some(v) = part.strip_prefix("offset:") {
                offset = v.parse().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.parse().ok();
            } else if !part.is_empty() && !part.contains(':') {
                decl = part;
            }
        }
        let (Some(offset), Some(size)) = (offset, size) else {
            continue;
        };
        // "u64 dfd", "__data_loc char[] path", "u16 x[4]"
        let (c_type, name) = match decl.rsplit_once(' ') {
            Some((t, n)) => (t.trim(), n.trim()),
            None => ("", decl),
        };
        let name = name.split('[').next().unwrap_or(name);
        fields.push(Field {
            c_type: c_type.to_string(),
            name: name.to_string(),
            offset,
            size,
            signed,
        });
    }
    fields
}

/// The fields of a `format` file as a filter sees them (name and
/// [`FieldType`](crate::plan::filter::FieldType) by the kernel's rules).
pub(crate) fn filter_fields(fields: &[Field]) -> Vec<crate::plan::filter::FieldDef> {
    fields
        .iter()
        .map(|f| {
            crate::plan::filter::FieldDef::new(
                f.name.clone(),
                crate::plan::filter::FieldType::from_format(&f.c_type, f.size, f.signed),
            )
        })
        .collect()
}

/// The `(group, event)` of each line of an event list (`kprobe_events`,
/// `uprobe_events`, `dynamic_events`) whose group starts with
/// [`GROUP_PREFIX`].
pub(crate) fn parse_event_list(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let head = l.split_whitespace().next()?;
            let (_, name) = head.split_once(':')?;
            let (g, e) = name.split_once('/')?;
            g.starts_with(GROUP_PREFIX)
                .then(|| (g.to_string(), e.to_string()))
        })
        .collect()
}

impl Tracefs {
    /// Finds the tracefs mount (whatever dynamic events the kernel has).
    pub fn find() -> Result<Tracefs, TracefsError> {
        let mut unreadable = None;
        for root in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
            let root = PathBuf::from(root);
            // An unmounted /sys/kernel/tracing is an empty directory.
            match std::fs::metadata(root.join("events")) {
                Ok(m) if m.is_dir() => return Ok(Tracefs { root }),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    unreadable.get_or_insert(TracefsError::NotReadable { root, source: e });
                }
                Err(_) => {
                    // /sys/kernel/tracing itself may be closed to us.
                    if let Err(e) = std::fs::read_dir(&root) {
                        if e.kind() == io::ErrorKind::PermissionDenied {
                            unreadable.get_or_insert(TracefsError::NotReadable { root, source: e });
                        }
                    }
                }
            }
        }
        Err(unreadable.unwrap_or(TracefsError::NotMounted))
    }

    /// Finds tracefs at [`TRACING_MOUNT`], and mounts it there when it is
    /// not, as perf's tracing-path code does (rather than go through
    /// debugfs's automount), for a probe that needs it. Where this
    /// process may not mount (EPERM, EACCES), any other mount
    /// [`Tracefs::find`] sees serves, else the error is
    /// [`TracefsError::NotMounted`], which says how to mount it.
    pub fn find_or_mount() -> Result<Tracefs, TracefsError> {
        let root = PathBuf::from(TRACING_MOUNT);
        if root.join("events").is_dir() {
            return Ok(Tracefs { root });
        }
        match sys::mount_tracefs(c"/sys/kernel/tracing") {
            Ok(()) => {
                let _ = MOUNTED_HERE.set(root);
                Tracefs::find()
            }
            Err(e) => Tracefs::find().map_err(|not_found| match not_found {
                TracefsError::NotMounted
                    if !matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) =>
                {
                    TracefsError::MountFailed { source: e }
                }
                other => other,
            }),
        }
    }

    /// What [`Tracefs::find_or_mount`] would do now, without doing it.
    pub fn mount_plan() -> MountPlan {
        const CAP_SYS_ADMIN: u32 = 21;
        if Path::new(TRACING_MOUNT).join("events").is_dir() {
            return MountPlan::Mounted;
        }
        let may_mount =
            sys::effective_capabilities().is_ok_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0);
        if may_mount && Path::new(TRACING_MOUNT).is_dir() {
            MountPlan::WouldMount
        } else if Tracefs::find().is_ok() {
            MountPlan::Mounted
        } else {
            MountPlan::CannotMount
        }
    }

    /// Fails with the cause when this kernel cannot define `kind` probes.
    pub(crate) fn require(&self, kind: ProbeKind) -> Result<(), TracefsError> {
        if self.root.join(kind.list_file()).exists() {
            return Ok(());
        }
        let root = self.root.clone();
        Err(match kind {
            ProbeKind::Kernel => TracefsError::NoKprobeEvents {
                root,
                kprobe_pmu: Path::new(crate::attach::pmu::SYSFS_PMUS)
                    .join("kprobe")
                    .exists(),
            },
            ProbeKind::User => TracefsError::NoUprobeEvents { root },
        })
    }

    /// The mount point.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn append(&self, file: &str, line: &str) -> Result<(), TracefsError> {
        let path = self.root.join(file);
        let mut f = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(io_err(&path))?;
        f.write_all(format!("{line}\n").as_bytes())
            .map_err(|e| TracefsError::Refused {
                definition: line.to_string(),
                reason: self.last_error().unwrap_or_else(|| e.to_string()),
            })
    }

    /// The kernel's explanation of the last refused write (error_log,
    /// Linux 5.4+), when it has one.
    fn last_error(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.root.join("error_log")).ok()?;
        let mut lines = text.lines().rev();
        // The log ends with "  Command: ..." and a caret line; the message
        // is the line carrying "[kprobe]"/"trace_kprobe:"/"trace_uprobe:".
        lines
            .find(|l| {
                l.contains("kprobe")
                    || l.contains("uprobe")
                    || l.contains("fprobe")
                    || l.contains("trace_probe")
            })
            .map(|l| {
                l.split_once("]: ")
                    .or_else(|| l.split_once("error: "))
                    .map_or(l, |(_, msg)| msg)
                    .trim()
                    .to_string()
            })
    }

    /// True when this process may define `kind` probes here: the file
    /// it writes them to exists and opens for appending (not truncating,
    /// which would remove every probe; nothing is written).
    pub(crate) fn can_define(&self, kind: ProbeKind) -> bool {
        self.require(kind).is_ok()
            && OpenOptions::new()
                .append(true)
                .open(self.root.join(self.kind_file(kind)))
                .is_ok()
    }

    /// Defines one probe of `kind` (a kprobe_events or uprobe_events line
    /// with group and event).
    pub fn define(&self, kind: ProbeKind, definition: &str) -> Result<(), TracefsError> {
        self.require(kind)?;
        let file = match kind {
            ProbeKind::Kernel if self.root.join("dynamic_events").exists() => "dynamic_events",
            _ => kind.list_file(),
        };
        self.append(file, definition)
    }

    /// The file that lists and removes probes of `kind`: for kernel
    /// probes `dynamic_events` where the kernel has it (fprobe and
    /// tracepoint probes are not in kprobe_events), else kprobe_events;
    /// uprobe_events for uprobes.
    fn kind_file(&self, kind: ProbeKind) -> &'static str {
        match kind {
            ProbeKind::Kernel if self.root.join("dynamic_events").exists() => "dynamic_events",
            _ => kind.list_file(),
        }
    }

    /// Removes one probe.
    pub fn remove(&self, kind: ProbeKind, group: &str, event: &str) -> Result<(), TracefsError> {
        self.append(self.kind_file(kind), &format!("-:{group}/{event}"))
    }

    /// The tracepoint id of an event (for `PERF_TYPE_TRACEPOINT`).
    pub(crate) fn event_id(&self, group: &str, event: &str) -> Result<u64, TracefsError> {
        let path = self.root.join("events").join(group).join(event).join("id");
        let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
        text.trim().parse().map_err(|_| TracefsError::Format {
            path,
            field: "id".into(),
        })
    }

    /// The path of an event's `format` file.
    pub(crate) fn format_path(&self, group: &str, event: &str) -> PathBuf {
        self.root
            .join("events")
            .join(group)
            .join(event)
            .join("format")
    }

    /// The fields of an event's record.
    pub fn format(&self, group: &str, event: &str) -> Result<Vec<Field>, TracefsError> {
        let path = self.format_path(group, event);
        let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
        Ok(parse_format(&text))
    }

    /// Why the kernel refuses `filter` on `group/event`, in its own
    /// words: `PERF_EVENT_IOC_SET_FILTER` only says EINVAL and logs
    /// nothing, so the filter is written to the event's `filter` file in
    /// a private instance (`instances/kprobe_perf_<pid>_filter`, removed
    /// again), whose `error_log` then holds the kernel's message, the
    /// filter and a caret. `None` when the kernel takes it there too, or
    /// no instance can be made.
    pub fn explain_filter(&self, group: &str, event: &str, filter: &str) -> Option<String> {
        let dir = self
            .root
            .join("instances")
            .join(format!("{GROUP_PREFIX}{}_filter", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        let file = dir.join("events").join(group).join(event).join("filter");
        let written = OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&file)
            .and_then(|mut f| f.write_all(filter.as_bytes()));
        let log = std::fs::read_to_string(dir.join("error_log")).unwrap_or_default();
        let _ = std::fs::remove_dir(&dir);
        if written.is_ok() {
            return None;
        }
        filter_error_from_log(&log)
    }

    /// Hits and misses of an event, from `kprobe_profile`.
    pub fn profile(&self, event: &str) -> Option<(u64, u64)> {
        let text = std::fs::read_to_string(self.root.join("kprobe_profile")).ok()?;
        text.lines().find_map(|l| {
            let mut parts = l.split_whitespace();
            let name = parts.next()?;
            let name = name.rsplit('/').next().unwrap_or(name);
            if name != event {
                return None;
            }
            Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
        })
    }

    /// The tracing instances of ours (`instances/kprobe_perf_<pid>_<n>`).
    pub(crate) fn our_instances(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.root.join("instances"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| pid_of_group(n).is_some())
            })
            .map(|e| e.path())
            .collect()
    }

    /// Every kprobe and uprobe of ours currently defined (a list this
    /// process cannot read counts as empty).
    pub fn our_events(&self) -> Vec<Defined> {
        let list = |kind: ProbeKind| {
            let text =
                std::fs::read_to_string(self.root.join(self.kind_file(kind))).unwrap_or_default();
            parse_event_list(&text)
        };
        let user = list(ProbeKind::User);
        // dynamic_events lists the uprobes too: each once, as a uprobe.
        let kernel = list(ProbeKind::Kernel)
            .into_iter()
            .filter(|e| !user.contains(e))
            .map(|(group, event)| Defined {
                kind: ProbeKind::Kernel,
                group,
                event,
            });
        kernel
            .chain(user.iter().cloned().map(|(group, event)| Defined {
                kind: ProbeKind::User,
                group,
                event,
            }))
            .collect()
    }
}

/// Sessions opened by this process so far (the `<n>` of the next group).
static SESSIONS: AtomicU64 = AtomicU64::new(0);

/// A new group private to one session of this process:
/// `kprobe_perf_<pid>_<n>`.
pub(crate) fn new_group() -> String {
    let n = SESSIONS.fetch_add(1, Ordering::Relaxed);
    format!("{GROUP_PREFIX}{}_{n}", std::process::id())
}

/// The pid in a group of ours: `kprobe_perf_<pid>` (older releases) or
/// `kprobe_perf_<pid>_<n>`.
pub(crate) fn pid_of_group(group: &str) -> Option<u32> {
    let rest = group.strip_prefix(GROUP_PREFIX)?;
    let (pid, n) = rest.split_once('_').unwrap_or((rest, "0"));
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Removes events left by processes of this engine that are gone.
/// Returns how many were removed.
pub(crate) fn remove_stale(fs: &Tracefs) -> usize {
    let mut removed = 0;
    // Their instances first: an event enabled in one cannot be removed.
    for dir in fs.our_instances() {
        let alive = dir
            .file_name()
            .and_then(|n| pid_of_group(&n.to_string_lossy()))
            .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if !alive && std::fs::remove_dir(&dir).is_ok() {
            removed += 1;
        }
    }
    for d in fs.our_events() {
        let alive =
            pid_of_group(&d.group).is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if !alive && fs.remove(d.kind, &d.group, &d.event).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// [`remove_stale`] when tracefs is mounted and readable; nothing (0)
/// otherwise. Every session start calls it, whatever its backend.
pub(crate) fn remove_stale_if_mounted() -> usize {
    Tracefs::find().map_or(0, |fs| remove_stale(&fs))
}

/// Removes every event and tracing instance of ours, whoever created
/// it (`kprobe-perf cleanup`).
/// Events still in use by a live session stay (the kernel answers EBUSY).
pub fn remove_all(fs: &Tracefs) -> (usize, Vec<String>) {
    let mut removed = 0;
    let mut busy = Vec::new();
    // Instances first (an eprobe enabled in one cannot be removed); a live
    // session's is busy while its buffers are open.
    for dir in fs.our_instances() {
        match std::fs::remove_dir(&dir) {
            Ok(()) => removed += 1,
            Err(_) => busy.push(format!(
                "instances/{}",
                dir.file_name().unwrap_or_default().to_string_lossy()
            )),
        }
    }
    for d in fs.our_events() {
        match fs.remove(d.kind, &d.group, &d.event) {
            Ok(()) => removed += 1,
            Err(_) => busy.push(format!("{}/{}", d.group, d.event)),
        }
    }
    (removed, busy)
}

/// Removes every event of `groups`, retrying those the kernel still
/// holds (EBUSY while the perf fds of a dead process are being released)
/// until `patience` has passed. Returns the events that stayed.
pub(crate) fn remove_groups(
    fs: &Tracefs,
    groups: &std::collections::HashSet<String>,
    patience: std::time::Duration,
) -> Vec<Defined> {
    let deadline = std::time::Instant::now() + patience;
    // A group's instance first (an event enabled in it cannot be removed):
    // its rmdir disables its events; the kernel refuses it (EBUSY) while
    // the dead process's buffer files are being released.
    for g in groups {
        let dir = fs.root().join("instances").join(g);
        let _ = remove_instance_dir(&dir, patience);
    }
    loop {
        let left: Vec<Defined> = fs
            .our_events()
            .into_iter()
            .filter(|d| groups.contains(&d.group))
            .filter(|d| fs.remove(d.kind, &d.group, &d.event).is_err())
            .collect();
        if left.is_empty() || std::time::Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The last filter error of an `error_log` (`[time] event filter parse
/// error: error: MESSAGE`, then `  Command: FILTER` and a caret line): the
/// message, then the filter and the caret, each on its own line.
pub(crate) fn filter_error_from_log(log: &str) -> Option<String> {
    let lines: Vec<&str> = log.lines().collect();
    let at = lines.iter().rposition(|l| l.contains("filter"))?;
    let head = lines[at];
    let message = head
        .rsplit_once("error: ")
        .map_or(head, |(_, m)| m)
        .trim()
        .to_string();
    let mut out = message;
    if let Some(cmd) = lines.get(at + 1) {
        if let Some((indent, command)) = cmd.split_once("Command: ") {
            let width = indent.len() + "Command: ".len();
            out.push_str("\n  ");
            out.push_str(command);
            if let Some(caret) = lines.get(at + 2) {
                let pos = caret.find('^').unwrap_or(width).saturating_sub(width);
                out.push_str(&format!("\n  {}^", " ".repeat(pos)));
            }
        }
    }
    Some(out)
}

/// This process's end of the socket to the [`Guardian`](crate::Guardian),
/// once it runs: the groups it is to remove when this process dies are
/// written here (the guardian sets it; this module only writes to it).
pub(crate) static GROUPS_TO_GUARD: OnceLock<Mutex<OwnedFd>> = OnceLock::new();

/// Tells the guardian (if running) to remove `group` when this process
/// dies. Called before anything is defined in the group.
fn tell_guardian(group: &str) {
    let Some(channel) = GROUPS_TO_GUARD.get() else {
        return;
    };
    let Ok(fd) = channel.lock() else {
        return;
    };
    // A guardian that is gone cannot be helped: removal on drop and at
    // the next start remain.
    let _ = sys::send_all(&fd, format!("{group}\n").as_bytes());
}

/// Events one session defined; removed on drop (after the perf fds that
/// use them are closed: keep this guard declared before them, or drop it
/// last).
#[derive(Debug)]
pub struct TracefsProbes {
    fs: Tracefs,
    group: String,
    events: Vec<(ProbeKind, String)>,
}

impl TracefsProbes {
    /// An empty set in a new private group, which the
    /// [`Guardian`](crate::Guardian) (if running) is told about before
    /// anything is defined in it.
    pub fn new(fs: Tracefs) -> TracefsProbes {
        let group = new_group();
        tell_guardian(&group);
        TracefsProbes {
            fs,
            group,
            events: Vec::new(),
        }
    }

    /// The tracefs this set lives in.
    pub fn tracefs(&self) -> &Tracefs {
        &self.fs
    }

    /// The private group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// Defines `p|r...:GROUP/EVENT REST` of `kind` and remembers it for
    /// removal.
    pub fn define(
        &mut self,
        kind: ProbeKind,
        definition: &str,
        event: &str,
    ) -> Result<(), TracefsError> {
        self.fs.define(kind, definition)?;
        self.events.push((kind, event.to_string()));
        Ok(())
    }

    /// Removes every event now; returns the ones the kernel kept.
    pub fn remove_all(&mut self) -> Vec<String> {
        let mut kept = Vec::new();
        for (kind, e) in self.events.drain(..) {
            if self.fs.remove(kind, &self.group, &e).is_err() {
                kept.push(e);
            }
        }
        kept
    }
}

impl Drop for TracefsProbes {
    fn drop(&mut self) {
        let _ = self.remove_all();
    }
}

/// Removes `dir` (a tracing instance), retrying while the kernel says it is busy.
pub(crate) fn remove_instance_dir(
    dir: &Path,
    patience: std::time::Duration,
) -> std::io::Result<()> {
    let deadline = std::time::Instant::now() + patience;
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_errors_come_from_the_last_filter_entry_of_error_log() {
        let log = "[   10.000000] trace_kprobe: error: Invalid fetch argument\n  Command: p:x y\n             ^\n\
                   [   12.500000] event filter parse error: error: Field not found\n  Command: dfdx == 1\n           ^\n";
        assert_eq!(
            filter_error_from_log(log).unwrap(),
            "Field not found\n  dfdx == 1\n  ^"
        );
        let log = "[ 1.0] event filter parse error: error: Illegal operation for field type\n  Command: a < 1 || comm < \"x\"\n                          ^\n";
        assert_eq!(
            filter_error_from_log(log).unwrap(),
            "Illegal operation for field type\n  a < 1 || comm < \"x\"\n                 ^"
        );
        assert_eq!(
            filter_error_from_log("[ 1.0] trace_kprobe: error: x\n"),
            None
        );
    }

    #[test]
    fn format_fields_as_filter_fields() {
        let text = "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
            \tfield:u64 count;\toffset:16;\tsize:8;\tsigned:0;\n\
            \tfield:__data_loc char[] path;\toffset:24;\tsize:4;\tsigned:1;\n";
        let fields = filter_fields(&parse_format(text));
        let got: Vec<String> = fields
            .iter()
            .map(|f| format!("{} {}", f.name, f.ty))
            .collect();
        assert_eq!(got, ["common_pid s32", "count u64", "path string"]);
    }

    #[test]
    fn format_fields() {
        let text = "name: ev\nID: 1234\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
            \tfield:unsigned long __probe_ip;\toffset:8;\tsize:8;\tsigned:0;\n\
            \tfield:s32 dfd;\toffset:16;\tsize:4;\tsigned:1;\n\
            \tfield:__data_loc char[] path;\toffset:20;\tsize:4;\tsigned:1;\n\
            \tfield:u16 x[4];\toffset:24;\tsize:8;\tsigned:0;\n\nprint fmt: \"...\"\n";
        let f = parse_format(text);
        let names: Vec<_> = f
            .iter()
            .map(|f| (f.name.as_str(), f.offset, f.size))
            .collect();
        assert_eq!(
            names,
            vec![
                ("common_type", 0, 2),
                ("common_pid", 4, 4),
                ("__probe_ip", 8, 8),
                ("dfd", 16, 4),
                ("path", 20, 4),
                ("x", 24, 8)
            ]
        );
        assert_eq!(f[4].c_type, "__data_loc char[]");
    }

    #[test]
    fn group_pids() {
        assert_eq!(pid_of_group("kprobe_perf_1234"), Some(1234));
        assert_eq!(pid_of_group("kprobe_perf_1234_0"), Some(1234));
        assert_eq!(pid_of_group("kprobe_perf_1234_17"), Some(1234));
        assert_eq!(pid_of_group("kprobe_perf_1234_x"), None);
        assert_eq!(pid_of_group("kprobe_perf_"), None);
        assert_eq!(pid_of_group("kprobes"), None);
    }

    #[test]
    fn groups_differ_per_session() {
        let (a, b) = (new_group(), new_group());
        assert_ne!(a, b);
        assert_eq!(pid_of_group(&a), Some(std::process::id()));
        assert_eq!(pid_of_group(&b), Some(std::process::id()));
    }

    #[test]
    fn event_lists_of_both_kinds() {
        let text = "p:kprobe_perf_12_0/a do_sys_openat2\n\
            r8:kprobe_perf_12_0/b do_sys_openat2\n\
            p:kprobe_perf_7/c /bin/true:0x0000000000001000 a=%di\n\
            p:other/d do_sys_open\n";
        assert_eq!(
            parse_event_list(text),
            vec![
                ("kprobe_perf_12_0".to_string(), "a".to_string()),
                ("kprobe_perf_12_0".to_string(), "b".to_string()),
                ("kprobe_perf_7".to_string(), "c".to_string()),
            ]
        );
    }
}
