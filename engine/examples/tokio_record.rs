//! Embedding kprobe-perf in a tokio program: the session moves to a reader
//! task, which awaits it as an `AsyncSession` (the engine's `tokio`
//! feature: no `unsafe` here) and drains the rings when they are readable (and on a timer, since a ring wakes its
//! reader only once a quarter full), while a blocking task opens a file.
//!
//! `tokio_record PROBE PATH COUNT` records PROBE on every CPU, opens PATH
//! COUNT times, then prints how many events this process's opens of PATH
//! gave (PROBE's first argument is compared with PATH) and the session's
//! exact loss. Run as root on a kernel with the kprobe PMU:
//! `cargo run -p kprobe-perf-engine --example tokio_record --
//! 'p:do_sys_openat2 path=+0(%si):ustring' /etc/hostname 100`.

use std::ops::ControlFlow;
use std::time::Duration;

use kprobe_perf_engine::Flow;
use kprobe_perf_engine::{
    AsyncSession, BackendChoice, Event, EventSink, Kernel, KernelOptions, Session, SessionOptions,
    Value,
};
use tokio::sync::oneshot;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Drains at least this often: a ring's fd is readable only once a
/// quarter of it is full.
const TICK: Duration = Duration::from_millis(250);

/// Counts the events of this process whose first argument is `path`.
struct Opens {
    path: String,
    pid: i32,
    events: u64,
    matching: u64,
}

impl EventSink for Opens {
    type Error = kprobe_perf_engine::Error;

    fn event(&mut self, e: &Event) -> Result<Flow, Self::Error> {
        self.events += 1;
        if e.pid == self.pid
            && matches!(e.args.first(), Some(Value::Str(Some(p))) if *p == self.path)
        {
            self.matching += 1;
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// What woke the reader.
enum Wake {
    Readable,
    Tick,
    Stop,
}

/// The reader task: owns the session, drains it until `stop`, then
/// disables it and drains what is left.
async fn read(
    session: Session,
    mut sink: Opens,
    mut stop: oneshot::Receiver<()>,
) -> Result<(Opens, u64, Option<u64>), BoxError> {
    let mut session = AsyncSession::new(session)?;
    let mut wakeups = 0u64;
    loop {
        let wake = tokio::select! {
            ready = session.readable() => {
                ready?;
                Wake::Readable
            }
            _ = tokio::time::sleep(TICK) => Wake::Tick,
            _ = &mut stop => Wake::Stop,
        };
        match wake {
            Wake::Readable => {
                wakeups += 1;
                session.session_mut().drain(&mut sink)?;
            }
            Wake::Tick => {
                session.session_mut().drain(&mut sink)?;
            }
            Wake::Stop => break,
        }
    }
    let mut session = session.into_inner();
    session.disable()?;
    // Disabled: this drain hands over every event still held back.
    session.drain(&mut sink)?;
    let lost = session.summary().loss.count();
    Ok((sink, wakeups, lost))
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Display, not Debug: the message says what to do.
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), BoxError> {
    // Before any thread: the guardian removes the tracefs definitions of
    // this process's sessions if it dies without doing it.
    kprobe_perf_engine::Guardian::start()?;
    let mut args = std::env::args().skip(1);
    let (Some(probe), Some(path), Some(count)) = (args.next(), args.next(), args.next()) else {
        return Err("usage: tokio_record PROBE PATH COUNT".into());
    };
    let count: u64 = count
        .parse()
        .map_err(|_| format!("COUNT must be a whole number, not {count:?}"))?;
    let kernel = Kernel::discover(KernelOptions::default())?;
    let plans = kernel.plan(&[probe], BackendChoice::Auto)?;
    let mut session = Session::open(plans, SessionOptions::default())?;
    session.enable()?;
    let sink = Opens {
        path: path.clone(),
        pid: i32::try_from(std::process::id())?,
        events: 0,
        matching: 0,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (sink, wakeups, lost) = runtime.block_on(async move {
        let (stop, stopped) = oneshot::channel();
        // The session is Send: it moves to the reader task.
        let reader = tokio::spawn(read(session, sink, stopped));
        let opened = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            for _ in 0..count {
                std::fs::File::open(&path)?;
            }
            Ok(())
        })
        .await?;
        // The reader stops even when an open failed.
        let _ = stop.send(());
        let read = reader.await?;
        opened?;
        read
    })?;
    println!("opens: {count}");
    println!("matching events: {}", sink.matching);
    println!("all events: {}", sink.events);
    println!("readable wakeups: {wakeups}");
    match lost {
        Some(n) => println!("lost: {n}"),
        None => println!("lost: unknown (the kernel's counts could not be read)"),
    }
    Ok(())
}
