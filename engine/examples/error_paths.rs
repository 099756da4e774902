//! A profiler of error paths, from the library: entry and return probes
//! on a few kernel functions, the calls of the first one rebuilt per
//! thread into trees ([`CallTreeBuilder`]), and each call that returned
//! an error printed with its path down to the function where the error
//! first arose. As root, on a kernel with kprobes:
//!
//! ```text
//! cargo run -p kprobe-perf-engine --example error_paths -- \
//!     do_sys_openat2,do_filp_open,path_openat,link_path_walk,walk_component,lookup_fast \
//!     cat /nonexistent
//! ```

use kprobe_perf_engine::analysis::CallProbes;
use kprobe_perf_engine::{
    sink_fn, BackendChoice, CallTree, CallTreeBuilder, CallTreeOptions, CommandScope, Kernel,
    KernelOptions, RecordTarget, Session, SessionOptions, TracedFunction,
};

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut argv = std::env::args().skip(1);
    let names: Vec<String> = argv
        .next()
        .ok_or("give the functions (the root first, comma-separated), then a command")?
        .split(',')
        .map(str::to_string)
        .collect();
    let command: Vec<String> = argv.collect();
    if command.is_empty() {
        return Err("give the command to run after the functions".into());
    }
    // The first function is the root; what each returns comes from BTF.
    let functions: Vec<TracedFunction> = names
        .iter()
        .enumerate()
        .map(|(i, n)| TracedFunction::from_kernel_btf(n, i == 0))
        .collect();
    // An entry and a return probe per function; the return's first
    // argument is the return value.
    let mut specs: Vec<String> = names.iter().map(|n| format!("p:{n}")).collect();
    specs.extend(names.iter().map(|n| format!("r:{n} ret=$retval:x64")));
    let kernel = Kernel::discover(KernelOptions::default())?;
    let plans = kernel.plan(&specs, BackendChoice::Auto)?;
    kernel.check(&plans)?;
    let mut probes = CallProbes::new(&plans, &functions);
    let mut trees = CallTreeBuilder::new(functions, CallTreeOptions::default());
    let target = RecordTarget::Command {
        argv: command,
        scope: CommandScope::Descendants,
    };
    let mut session = Session::open(plans, SessionOptions::default().with_target(target))?;
    session.enable()?;
    let symbols = kernel.symbols();
    let mut lost = 0;
    while session.command_status()?.is_none() {
        let mut sink = sink_fn(|e| {
            if let Some(call) = probes.call_event(e, symbols) {
                trees.record(call);
            }
        });
        session.poll(Some(std::time::Duration::from_millis(100)), &mut sink)?;
        // A loss may have broken any tree still open or not yet taken.
        if session.stats().lost > lost {
            lost = session.stats().lost;
            trees.events_lost();
        }
        for tree in trees.take_finished() {
            print_error_path(&tree, trees.functions());
        }
    }
    session.disable()?;
    let mut sink = sink_fn(|e| {
        if let Some(call) = probes.call_event(e, symbols) {
            trees.record(call);
        }
    });
    session.poll(Some(std::time::Duration::ZERO), &mut sink)?;
    if session.stats().lost > lost {
        trees.events_lost();
    }
    for tree in trees.finish() {
        print_error_path(&tree, trees.functions());
    }
    Ok(())
}

/// A call that returned an error: its path, then what is missing.
fn print_error_path(tree: &CallTree, functions: &[TracedFunction]) {
    let path = tree.error_path();
    if path.is_empty() {
        return;
    }
    println!("{}[{}]:", tree.comm, tree.tid);
    for i in path {
        let f = &tree.frames[i];
        let duration = f
            .duration_ns()
            .map_or_else(|| "?".to_string(), |d| format!("{d}ns"));
        let error = f.error.map(|e| e.to_string()).unwrap_or_default();
        println!(
            "  {:indent$}{} {duration} {error}",
            "",
            functions[f.function].name,
            indent = 2 * f.depth as usize
        );
    }
    for m in &tree.missing {
        println!("  incomplete: {m}");
    }
}
