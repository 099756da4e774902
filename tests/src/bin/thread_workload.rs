//! A process for `-p` tests, in two modes:
//!
//! `thread_workload burst READY PATH THREADS OPENS`: until a line arrives
//! on stdin, the main thread opens READY every 50 ms (so a recorder can
//! see that it records it); then it starts THREADS threads, each printing
//! `tid N` and opening PATH OPENS times (the path need not exist), waits
//! for them, and exits 0.
//!
//! `thread_workload churn READY PATH`: the main thread starts one thread
//! after another, each printing `tid N` and opening PATH once, and opens
//! READY between them, every 2 ms, without pause: threads keep appearing
//! while a recorder attaches. At the first line on stdin it prints
//! `mark`; at the second it stops and exits 0.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn worker(path: &str, opens: usize) {
    let tid = kprobe_perf_engine::cli::os::gettid();
    println!("tid {tid}");
    let _ = std::io::stdout().flush();
    for _ in 0..opens {
        let _ = std::fs::File::open(path);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).cloned();
    let count = |i: usize| args.get(i).and_then(|n| n.parse::<usize>().ok());
    let lines = Arc::new(AtomicUsize::new(0));
    let lines2 = Arc::clone(&lines);
    // The stdin reader is a thread of its own, started before any
    // recording: recorded too, it opens nothing.
    std::thread::spawn(move || {
        for _ in std::io::stdin().lock().lines() {
            lines2.fetch_add(1, Ordering::SeqCst);
        }
    });
    match (arg(1).as_deref(), arg(2), arg(3)) {
        (Some("burst"), Some(ready), Some(path)) => {
            let (Some(threads), Some(opens)) = (count(4), count(5)) else {
                eprintln!("usage: thread_workload burst READY PATH THREADS OPENS");
                std::process::exit(2);
            };
            while lines.load(Ordering::SeqCst) == 0 {
                let _ = std::fs::File::open(&ready);
                std::thread::sleep(Duration::from_millis(50));
            }
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    let path = path.clone();
                    std::thread::spawn(move || worker(&path, opens))
                })
                .collect();
            for w in workers {
                let _ = w.join();
            }
        }
        (Some("churn"), Some(ready), Some(path)) => {
            let mut marked = false;
            while lines.load(Ordering::SeqCst) < 2 {
                if !marked && lines.load(Ordering::SeqCst) == 1 {
                    marked = true;
                    println!("mark");
                }
                let p = path.clone();
                let _ = std::thread::spawn(move || worker(&p, 1)).join();
                let _ = std::fs::File::open(&ready);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        _ => {
            eprintln!("usage: thread_workload burst|churn READY PATH [THREADS OPENS]");
            std::process::exit(2);
        }
    }
}
