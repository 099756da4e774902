//! The tracefs control path, used only where the kprobe PMU offers nothing:
//! kretprobe maxactive and fetch arguments the kernel must read at hit time
//! (memory, strings, stack entries). Probes are defined in `dynamic_events`
//! under a group private to this process (`kprobe_perf_<pid>`), opened as
//! tracepoint events, and removed again when the [`TracefsProbes`] guard is
//! dropped. Groups left by a process that died are removed by
//! [`remove_stale`].
//!
//! Nothing here parses trace text output: only `id`, `format`,
//! `dynamic_events`, `error_log` and `kprobe_profile` are read.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Prefix of every group this engine creates; the pid follows.
pub const GROUP_PREFIX: &str = "kprobe_perf_";

/// Errors of the tracefs path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TracefsError {
    /// tracefs is not mounted (or the kernel lacks dynamic events).
    #[error("tracefs is not mounted at /sys/kernel/tracing or /sys/kernel/debug/tracing (mount it with: mount -t tracefs nodev /sys/kernel/tracing)")]
    NotMounted,
    /// The kernel refused a definition.
    #[error("the kernel refused the definition `{definition}`: {reason}")]
    Refused {
        /// What was written.
        definition: String,
        /// The kernel's `error_log` line, or the errno.
        reason: String,
    },
    /// Reading or writing a tracefs file failed.
    #[error("{path}: {source}")]
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
}

/// Parses the field lines of a `format` file.
pub fn parse_format(text: &str) -> Vec<Field> {
    let mut fields = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("field:") else {
            continue;
        };
        let mut decl = "";
        let mut offset = None;
        let mut size = None;
        for part in rest.split(';').map(str::trim) {
            if let Some(v) = part.strip_prefix("offset:") {
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
        });
    }
    fields
}

impl Tracefs {
    /// Finds the tracefs mount.
    pub fn find() -> Result<Tracefs, TracefsError> {
        ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.join("kprobe_events").exists())
            .map(|root| Tracefs { root })
            .ok_or(TracefsError::NotMounted)
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
        // is the line carrying "[kprobe]"/"[trace_kprobe]".
        lines
            .find(|l| l.contains("kprobe") || l.contains("fprobe") || l.contains("trace_probe"))
            .map(|l| {
                l.split_once("]: ")
                    .map_or(l, |(_, msg)| msg)
                    .trim()
                    .to_string()
            })
    }

    /// Defines one probe (a kprobe_events line with group and event).
    pub fn define(&self, definition: &str) -> Result<(), TracefsError> {
        let file = if self.root.join("dynamic_events").exists() {
            "dynamic_events"
        } else {
            "kprobe_events"
        };
        self.append(file, definition)
    }

    /// The file that lists and removes every kind of dynamic event
    /// (fprobe and tracepoint probes are not in kprobe_events).
    fn events_file(&self) -> &'static str {
        if self.root.join("dynamic_events").exists() {
            "dynamic_events"
        } else {
            "kprobe_events"
        }
    }

    /// Removes one probe.
    pub fn remove(&self, group: &str, event: &str) -> Result<(), TracefsError> {
        self.append(self.events_file(), &format!("-:{group}/{event}"))
    }

    /// The tracepoint id of an event (for `PERF_TYPE_TRACEPOINT`).
    pub fn event_id(&self, group: &str, event: &str) -> Result<u64, TracefsError> {
        let path = self.root.join("events").join(group).join(event).join("id");
        let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
        text.trim().parse().map_err(|_| TracefsError::Format {
            path,
            field: "id".into(),
        })
    }

    /// The fields of an event's record.
    pub fn format(&self, group: &str, event: &str) -> Result<Vec<Field>, TracefsError> {
        let path = self
            .root
            .join("events")
            .join(group)
            .join(event)
            .join("format");
        let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
        Ok(parse_format(&text))
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

    /// Every `(group, event)` of ours currently defined.
    pub fn our_events(&self) -> Vec<(String, String)> {
        let text = std::fs::read_to_string(self.root.join(self.events_file())).unwrap_or_default();
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
}

/// The private group of this process.
pub fn own_group() -> String {
    format!("{GROUP_PREFIX}{}", std::process::id())
}

fn pid_of_group(group: &str) -> Option<u32> {
    group.strip_prefix(GROUP_PREFIX)?.parse().ok()
}

/// Removes events left by processes of this engine that are gone.
/// Returns how many were removed.
pub fn remove_stale(fs: &Tracefs) -> usize {
    let mut removed = 0;
    for (group, event) in fs.our_events() {
        let alive =
            pid_of_group(&group).is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if !alive && fs.remove(&group, &event).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Removes every event of ours, whoever created it (`kprobe-perf cleanup`).
/// Events still in use by a live session stay (the kernel answers EBUSY).
pub fn remove_all(fs: &Tracefs) -> (usize, Vec<String>) {
    let mut removed = 0;
    let mut busy = Vec::new();
    for (group, event) in fs.our_events() {
        match fs.remove(&group, &event) {
            Ok(()) => removed += 1,
            Err(_) => busy.push(format!("{group}/{event}")),
        }
    }
    (removed, busy)
}

/// Events this process defined; removed on drop (after the perf fds that
/// use them are closed: keep this guard declared before them, or drop it
/// last).
#[derive(Debug)]
pub struct TracefsProbes {
    fs: Tracefs,
    group: String,
    events: Vec<String>,
}

impl TracefsProbes {
    /// An empty set in this process's private group.
    pub fn new(fs: Tracefs) -> TracefsProbes {
        TracefsProbes {
            fs,
            group: own_group(),
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

    /// Defines `p|r...:GROUP/EVENT REST` and remembers it for removal.
    pub fn define(&mut self, definition: &str, event: &str) -> Result<(), TracefsError> {
        self.fs.define(definition)?;
        self.events.push(event.to_string());
        Ok(())
    }

    /// Removes every event now; returns the ones the kernel kept.
    pub fn remove_all(&mut self) -> Vec<String> {
        let mut kept = Vec::new();
        for e in self.events.drain(..) {
            if self.fs.remove(&self.group, &e).is_err() {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(pid_of_group("kprobes"), None);
    }
}
