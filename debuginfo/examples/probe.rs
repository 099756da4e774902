//! A perf-probe-like front end over the library, for trying it by hand:
//!
//! ```text
//! cargo run -p kprobe-perf-debuginfo --example probe -- VMLINUX -D 'do_sys_openat2 filename dfd how->flags'
//! cargo run -p kprobe-perf-debuginfo --example probe -- VMLINUX -V do_sys_openat2
//! cargo run -p kprobe-perf-debuginfo --example probe -- VMLINUX -L do_sys_openat2
//! ```
//! `--no-inlines` before the mode skips inlined copies. `-D` may be given
//! several times; each line of standard input is a question when the spec is `-`.

use std::io::BufRead as _;

use kprobe_perf_debuginfo::{DebugFile, DebugInfo, Instance, Options, ProbeArg, ProbePoint};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut opts = Options::default();
    if let Some(i) = args.iter().position(|a| a == "--no-inlines") {
        args.remove(i);
        opts.inlines = false;
    }
    let [path, rest @ ..] = args.as_slice() else {
        return Err("usage: probe VMLINUX (-D SPEC | -V POINT | -L FUNC)...".into());
    };
    let file = DebugFile::open(path)?;
    let di = DebugInfo::new(&file)?;
    for pair in rest.chunks(2) {
        let [mode, spec] = pair else {
            return Err("a mode needs its argument".into());
        };
        if spec == "-" {
            for line in std::io::stdin().lock().lines() {
                let line = line?;
                if let Err(e) = answer(&di, mode, &line, &opts) {
                    println!("error: {e}");
                }
            }
        } else {
            answer(&di, mode, spec, &opts)?;
        }
    }
    Ok(())
}

fn answer(
    di: &DebugInfo<'_>,
    mode: &str,
    spec: &str,
    opts: &Options,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut words = spec.split_whitespace();
    let point_text = words.next().ok_or("empty spec")?;
    let point = ProbePoint::parse(point_text)?;
    match mode {
        "-D" => {
            let args = words.map(ProbeArg::parse).collect::<Result<Vec<_>, _>>()?;
            let event = point_text
                .split([':', ';', '@'])
                .next()
                .unwrap_or("probe")
                .replace('/', "_");
            let resolved = di.resolve(&point, &args, opts)?;
            for p in &resolved.probes {
                println!("{}", p.definition("probe", &event));
            }
            for (site, why) in &resolved.refused {
                eprintln!("skipped {}: {why}", site.location);
            }
        }
        "-V" => {
            println!("Available variables at {point_text}");
            for site in di.sites(&point, opts)? {
                let how = match &site.instance {
                    Instance::OutOfLine => String::new(),
                    Instance::Inlined { call, .. } => format!(" (inlined at {call})"),
                };
                println!("\t@<{}> {}{how}", site.location, site.source);
                let mut vars: Vec<String> = di
                    .variables(&site)?
                    .iter()
                    .map(|v| format!("{}\t{}", v.type_name, v.name))
                    .collect();
                vars.sort();
                for v in vars {
                    println!("\t\t{v}");
                }
            }
        }
        "-L" => {
            let ProbePoint::Function { name, file, .. } = &point else {
                return Err("-L takes a function".into());
            };
            let lines = di.lines(name, file.as_deref())?;
            println!("<{name}@{}:{}>", lines.file, lines.decl_line);
            for l in lines.lines {
                println!("      {}  ({l})", l.saturating_sub(lines.decl_line));
            }
        }
        "-R" => {
            let site = di
                .sites(&point, &Options { inlines: false })?
                .into_iter()
                .next()
                .ok_or("no site")?;
            for (a, f, l, stmt) in di.rows_between(
                point_text,
                site.address,
                site.address
                    + std::env::var("SPAN")
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(96),
            )? {
                println!(
                    "+{} {f}:{l}{}",
                    a - site.address,
                    if stmt { "" } else { " (not stmt)" }
                );
            }
        }
        other => return Err(format!("unknown mode {other}").into()),
    }
    Ok(())
}
