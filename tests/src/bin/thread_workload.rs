//! `thread_workload READY PATH THREADS OPENS`: a process for `-p` tests.
//! Until a line arrives on stdin, its main thread opens READY every
//! 50 ms (so a recorder can see that it records it); then it starts
//! THREADS threads, each printing `tid N` and opening PATH OPENS times
//! (the path need not exist), waits for them, and exits 0.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(ready), Some(path), Some(threads), Some(opens)) = (
        args.get(1).cloned(),
        args.get(2).cloned(),
        args.get(3).and_then(|n| n.parse::<usize>().ok()),
        args.get(4).and_then(|n| n.parse::<usize>().ok()),
    ) else {
        eprintln!("usage: thread_workload READY PATH THREADS OPENS");
        std::process::exit(2);
    };
    let go = Arc::new(AtomicBool::new(false));
    let go2 = Arc::clone(&go);
    // The stdin reader is a thread of its own, started before any
    // recording: recorded too, it opens nothing.
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        go2.store(true, Ordering::SeqCst);
    });
    while !go.load(Ordering::SeqCst) {
        let _ = std::fs::File::open(&ready);
        std::thread::sleep(Duration::from_millis(50));
    }
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || {
                let tid = kprobe_perf_engine::sys::gettid();
                println!("tid {tid}");
                let _ = std::io::stdout().flush();
                for _ in 0..opens {
                    let _ = std::fs::File::open(&path);
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
}
