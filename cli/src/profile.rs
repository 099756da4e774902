//! `--profile FILE.json`: the probes' hits as a profile the Firefox
//! Profiler (<https://profiler.firefox.com>) and samply open, written with
//! the `fxprof-processed-profile` crate (samply's): one sample per event,
//! on its process and thread, at its time, with its named stack (the
//! probe's event name innermost, so that several probes stay apart).

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use fxprof_processed_profile::{
    CategoryColor, CategoryPairHandle, CpuDelta, Frame, FrameFlags, FrameInfo, ProcessHandle,
    Profile, ReferenceTimestamp, SamplingInterval, ThreadHandle, Timestamp,
};
use kprobe_perf_engine::stack::NamedFrame;
use kprobe_perf_engine::Event;

/// A profile being filled, event by event.
pub(crate) struct ProfileBuilder {
    profile: Profile,
    processes: HashMap<i32, ProcessHandle>,
    threads: HashMap<i32, ThreadHandle>,
    kernel: CategoryPairHandle,
    user: CategoryPairHandle,
    probe: CategoryPairHandle,
    /// The first event's time: the profile's times count from it.
    start_ns: Option<u64>,
    samples: u64,
}

impl ProfileBuilder {
    pub(crate) fn new() -> ProfileBuilder {
        let mut profile = Profile::new(
            "kprobe-perf",
            ReferenceTimestamp::from_system_time(std::time::SystemTime::now()),
            SamplingInterval::from_millis(1),
        );
        profile.set_os_name("Linux");
        let kernel = profile.add_category("Kernel", CategoryColor::Orange).into();
        let user = profile.add_category("User", CategoryColor::Blue).into();
        let probe = profile.add_category("Probe", CategoryColor::Green).into();
        ProfileBuilder {
            profile,
            processes: HashMap::new(),
            threads: HashMap::new(),
            kernel,
            user,
            probe,
            start_ns: None,
            samples: 0,
        }
    }

    fn thread(&mut self, e: &Event, at: Timestamp) -> ThreadHandle {
        if let Some(t) = self.threads.get(&e.tid) {
            return *t;
        }
        let process = *self.processes.entry(e.pid).or_insert_with(|| {
            self.profile
                .add_process(&e.comm, u32::try_from(e.pid).unwrap_or(0), at)
        });
        let thread = self.profile.add_thread(
            process,
            u32::try_from(e.tid).unwrap_or(0),
            at,
            e.pid == e.tid,
        );
        self.profile.set_thread_name(thread, &e.comm);
        self.threads.insert(e.tid, thread);
        thread
    }

    /// One event of probe `event`, with its frames named innermost first.
    pub(crate) fn add(&mut self, e: &Event, event: &str, frames: &[NamedFrame]) {
        let start = *self.start_ns.get_or_insert(e.time_ns);
        let at = Timestamp::from_nanos_since_reference(e.time_ns.saturating_sub(start));
        let thread = self.thread(e, at);
        let mut infos = Vec::with_capacity(frames.len() + 1);
        for f in frames.iter().rev() {
            let label = match &f.symbol {
                Some(s) => format!("{s} ({})", short(&f.object)),
                None => format!("0x{:x} ({})", f.address, short(&f.object)),
            };
            infos.push(FrameInfo {
                frame: Frame::Label(self.profile.intern_string(&label)),
                category_pair: if f.user { self.user } else { self.kernel },
                flags: FrameFlags::empty(),
            });
        }
        infos.push(FrameInfo {
            frame: Frame::Label(self.profile.intern_string(event)),
            category_pair: self.probe,
            flags: FrameFlags::empty(),
        });
        let stack = self.profile.intern_stack_frames(thread, infos.into_iter());
        self.profile
            .add_sample(thread, at, stack, CpuDelta::ZERO, 1);
        self.samples += 1;
    }

    /// Writes the profile as JSON to `path` (created as `-o` creates its
    /// file).
    pub(crate) fn write(&self, path: &Path, force: bool) -> Result<u64> {
        let json = serde_json::to_vec(&self.profile).context("serializing the profile")?;
        crate::output::write_new("--profile", path, force, &json)?;
        Ok(self.samples)
    }
}

/// A binary's file name, or the object as given (`[kernel.kallsyms]`).
fn short(object: &str) -> &str {
    if object.starts_with('/') {
        object.rsplit('/').next().unwrap_or(object)
    } else {
        object
    }
}
