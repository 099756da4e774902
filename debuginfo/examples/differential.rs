//! Differential test against `perf probe` (the oracle), offline on a vmlinux.
//!
//! ```text
//! cargo run --release -p kprobe-perf-debuginfo --example differential -- VMLINUX [N] [SEED] [REPORT] [SRCDIR]
//! cargo run --release -p kprobe-perf-debuginfo --example differential -- -x BINARY [N] [SEED] [REPORT]
//! ```
//!
//! With `-x BINARY` (a user binary or library, e.g. libc.so.6 with
//! libc6-dbg installed), the debug file is found as the CLI finds it
//! (build ID, debuglink) and perf runs `perf probe -x BINARY`. Its `-D`
//! names a uprobe by file offset (`PATH:0xOFF`); both answers are then
//! keyed by link-time address. perf reads the kernel's tracefs README
//! for the fetch types it may use; where the host's tracefs has none (a
//! container, a kernel without probe events), perf is pointed
//! (`TRACEFS_PATH`) at a README that states a 6.1 kernel's uprobe features.
//!
//! With SRCDIR (the kernel's source tree), the N questions are lazy lines
//! instead: `-D 'FUNC;PATTERN'` for random functions whose source file is
//! there, PATTERN the start of one of the function's lines with code (up
//! to its first character that is not a letter, digit, `_`, `=`, `-`,
//! `>` or `.`) and `*`; perf runs with `-s SRCDIR`. The sites are compared.
//!
//! Samples N questions over random functions of the file (a third each):
//! `-V FUNC` (variables at each site), `-D 'FUNC VARS'` and
//! `-D 'FUNC:RLINE VARS'` (VARS taken from perf's own -V answer at that point,
//! RLINE from this crate's line listing). perf runs two at a time. Answers
//! are compared up to argument names and order of sites: the same
//! SYMBOL+OFFSET set, and at each site the same fetch args and types.
//! Prints the agreement, and writes each disagreement to REPORT
//! (default `target/debuginfo-differential.txt`). With
//! `DIFFERENTIAL_PERF_CACHE=FILE`, perf's answers are kept in FILE and
//! reused by the next run of the same questions.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use kprobe_perf_debuginfo::{DebugFile, DebugInfo, Options, ProbeArg, ProbePoint};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Per site: SYMBOL+OFFSET -> fetch args (without names), or variables.
type Answer = Result<BTreeMap<String, BTreeSet<String>>, String>;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("-x") {
        args.remove(0);
        if let Some(b) = args.first() {
            let _ = USER_BINARY.set(b.clone());
        }
    }
    let Some(vmlinux) = args.first() else {
        eprintln!("usage: differential VMLINUX [N] [SEED] [REPORT] [SRCDIR]\n       differential -x BINARY [N] [SEED] [REPORT]");
        std::process::exit(2);
    };
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100);
    let seed: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let report = args
        .get(3)
        .cloned()
        .unwrap_or_else(|| "target/debuginfo-differential.txt".into());
    let result = match args.get(4) {
        Some(src) => run_lazy(vmlinux, n, seed, &report, src),
        None => run(vmlinux, n, seed, &report).map(|_| ()),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// The user binary `perf probe -x` is asked about (`-x BINARY`); unset:
/// a vmlinux, `perf probe -k`.
pub(crate) static USER_BINARY: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The debug file of `path`: the file itself for a vmlinux; for a user
/// binary the one found by build ID or debuglink, and the binary (whose
/// call frame information a separate debug file lacks).
fn open(path: &str) -> Result<(DebugFile, Option<DebugFile>), Box<dyn std::error::Error>> {
    if USER_BINARY.get().is_some() {
        let debug = kprobe_perf_debuginfo::locate::find_user(std::path::Path::new(path))?;
        return Ok((debug, Some(DebugFile::open(path)?)));
    }
    Ok((DebugFile::open(path)?, None))
}

/// Asks N questions and returns the tally of verdicts.
pub(crate) fn run(
    vmlinux: &str,
    n: usize,
    seed: u64,
    report: &str,
) -> Result<BTreeMap<String, usize>, Box<dyn std::error::Error>> {
    let _ = VMLINUX.set(vmlinux.to_string());
    let (file, binary) = open(vmlinux)?;
    let mut di = DebugInfo::new(&file)?;
    if let Some(b) = &binary {
        di = di.with_call_frames_of(b)?;
    }
    let mut rng = Rng(seed);
    let functions: Vec<&str> = di
        .functions()?
        .filter(|f| f.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    // The points: FUNC for kinds 0 and 1, FUNC:RLINE for kind 2.
    let mut points = Vec::with_capacity(n);
    for i in 0..n {
        let f = functions[rng.below(functions.len())];
        let point = if i % 3 == 2 {
            match di.lines(f, None) {
                Ok(l) if !l.lines.is_empty() => {
                    let line = l.lines[rng.below(l.lines.len())];
                    format!("{f}:{}", line.saturating_sub(l.decl_line))
                }
                _ => f.to_string(),
            }
        } else {
            f.to_string()
        };
        points.push(point);
    }
    eprintln!("{n} questions; asking perf -V at each point (2 at a time)...");
    let t = Instant::now();
    let perf_v = parallel(&points, |p| perf(vmlinux, "-V", p));
    eprintln!("perf -V: {:.1} s", t.elapsed().as_secs_f64());
    // The questions: kind 0 compares -V; kinds 1 and 2 ask -D with perf's variables.
    let mut questions = Vec::with_capacity(n);
    for (i, point) in points.iter().enumerate() {
        if i % 3 == 0 {
            questions.push(("-V", point.clone()));
            continue;
        }
        let vars: Vec<String> = parse_v(&perf_v[i].0)
            .ok()
            .and_then(|m| m.into_values().next())
            .map(|s| {
                s.into_iter()
                    .map(|v| v.split('\t').nth(1).unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default();
        let mut chosen: Vec<String> = Vec::new();
        for v in vars {
            if chosen.len() < 4 && rng.below(3) != 0 && !v.is_empty() {
                chosen.push(v);
            }
        }
        questions.push((
            "-D",
            format!("{point} {}", chosen.join(" ")).trim().to_string(),
        ));
    }
    let t = Instant::now();
    let ours: Vec<Answer> = questions.iter().map(|(m, q)| ask_ours(&di, m, q)).collect();
    let ours_time = t.elapsed();
    let d_questions: Vec<String> = questions
        .iter()
        .filter(|(m, _)| *m == "-D")
        .map(|(_, q)| q.clone())
        .collect();
    let t = Instant::now();
    let perf_d = parallel(&d_questions, |q| perf(vmlinux, "-D", q));
    eprintln!("perf -D: {:.1} s", t.elapsed().as_secs_f64());
    let mut d_iter = perf_d.into_iter();
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let mut lines = Vec::new();
    for (i, ((mode, q), ours)) in questions.iter().zip(&ours).enumerate() {
        let theirs = if *mode == "-V" {
            parse_v(&perf_v[i].0)
        } else {
            d_iter
                .next()
                .map(|(out, _)| parse_d(&out))
                .unwrap_or(Err("no answer".into()))
        };
        let (ours, theirs) = (&normalize(ours), &normalize(&theirs));
        let verdict = compare(&di, mode, q, ours, theirs);
        *tally.entry(verdict.clone()).or_default() += 1;
        if verdict != "agree" {
            lines.push(format!(
                "[{verdict}] perf {mode} '{q}'\n  perf: {theirs:?}\n  ours: {ours:?}\n"
            ));
        }
    }
    let agree = tally.get("agree").copied().unwrap_or(0);
    let equivalent: usize = tally
        .iter()
        .filter(|(k, _)| k.starts_with("equivalent"))
        .map(|(_, v)| v)
        .sum();
    let perf_wrong: usize = tally
        .iter()
        .filter(|(k, _)| k.starts_with("perf wrong"))
        .map(|(_, v)| v)
        .sum();
    println!(
        "{n} questions (seed {seed}) on {vmlinux}\n  agree: {agree} ({:.1}%)\n  agree or equivalent: {} ({:.1}%)\n  ours answered all in {:.3} s",
        100.0 * agree as f64 / n as f64,
        agree + equivalent,
        100.0 * (agree + equivalent) as f64 / n as f64,
        ours_time.as_secs_f64()
    );
    // The questions perf answered (and kprobe-perf too, or not).
    let perf_answered = n - tally
        .iter()
        .filter(|(k, _)| k.starts_with("perf failed"))
        .map(|(_, v)| v)
        .sum::<usize>();
    println!(
        "  agree, equivalent, or perf demonstrably wrong: {} ({:.1}%; {:.2}% of the {perf_answered} perf answered)",
        agree + equivalent + perf_wrong,
        100.0 * (agree + equivalent + perf_wrong) as f64 / n as f64,
        100.0 * (agree + equivalent + perf_wrong) as f64 / perf_answered.max(1) as f64
    );
    for (k, v) in &tally {
        println!("  {k}: {v}");
    }
    std::fs::write(report, lines.join("\n"))?;
    println!("  disagreements written to {report}");
    Ok(tally)
}

/// The lazy-line questions (see the top of this file).
fn run_lazy(
    vmlinux: &str,
    n: usize,
    seed: u64,
    report: &str,
    src: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let file = DebugFile::open(vmlinux)?;
    let di = DebugInfo::new(&file)?.with_source_dir(Some(std::path::Path::new(src)));
    let mut rng = Rng(seed);
    let functions: Vec<&str> = di
        .functions()?
        .filter(|f| f.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    let mut questions = Vec::with_capacity(n);
    let mut tries = 0;
    while questions.len() < n && tries < n * 50 {
        tries += 1;
        let f = functions[rng.below(functions.len())];
        let Ok(l) = di.lines(f, None) else { continue };
        let Ok(text) = std::fs::read_to_string(std::path::Path::new(src).join(&l.file)) else {
            continue;
        };
        let body: Vec<u64> = l
            .lines
            .iter()
            .copied()
            .filter(|&x| x > l.decl_line)
            .collect();
        if body.is_empty() {
            continue;
        }
        let line = body[rng.below(body.len())];
        let Some(code) = text.lines().nth(line as usize - 1) else {
            continue;
        };
        let head: String = code
            .chars()
            .filter(|c| !c.is_whitespace())
            .take_while(|c| c.is_ascii_alphanumeric() || "_=->.".contains(*c))
            .collect();
        if head.len() >= 2 {
            questions.push(format!("{f};{head}*"));
        }
    }
    let t = Instant::now();
    let ours: Vec<Answer> = questions.iter().map(|q| ask_ours(&di, "-D", q)).collect();
    let ours_time = t.elapsed();
    let t = Instant::now();
    let perf_d = parallel(&questions, |q| perf_with(vmlinux, &["-s", src, "-D"], q));
    eprintln!("perf -D: {:.1} s", t.elapsed().as_secs_f64());
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let mut lines = Vec::new();
    for ((q, ours), (out, _)) in questions.iter().zip(&ours).zip(perf_d) {
        let theirs = parse_d(&out);
        let (ours, theirs) = (&normalize(ours), &normalize(&theirs));
        let verdict = compare(&di, "-D", q, ours, theirs);
        *tally.entry(verdict.clone()).or_default() += 1;
        if verdict != "agree" {
            lines.push(format!(
                "[{verdict}] perf -s SRC -D '{q}'\n  perf: {theirs:?}\n  ours: {ours:?}\n"
            ));
        }
    }
    let agree = tally.get("agree").copied().unwrap_or(0);
    println!(
        "{} lazy-line questions (seed {seed}) on {vmlinux}\n  agree: {agree} ({:.1}%)\n  ours answered all in {:.3} s",
        questions.len(),
        100.0 * agree as f64 / questions.len().max(1) as f64,
        ours_time.as_secs_f64()
    );
    for (k, v) in &tally {
        println!("  {k}: {v}");
    }
    std::fs::write(report, lines.join("\n"))?;
    println!("  disagreements written to {report}");
    Ok(())
}

fn parallel(items: &[String], f: impl Fn(&str) -> (String, bool) + Sync) -> Vec<(String, bool)> {
    let next = AtomicUsize::new(0);
    let out = Mutex::new(vec![(String::new(), false); items.len()]);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                if let Ok(mut o) = out.lock() {
                    o[i] = r;
                }
            });
        }
    });
    out.into_inner().unwrap_or_default()
}

fn perf(vmlinux: &str, mode: &str, q: &str) -> (String, bool) {
    perf_with(vmlinux, &[mode], q)
}

/// perf's answers kept between runs when `DIFFERENTIAL_PERF_CACHE` names a
/// file: a record per question, `KEYLEN OUTLEN OK\nKEYOUT`. perf takes a
/// second per question; the cache lets the comparison be rerun after a
/// change on this side in seconds.
static CACHE: Mutex<Option<std::collections::HashMap<String, (String, bool)>>> = Mutex::new(None);

fn cache_path() -> Option<String> {
    std::env::var("DIFFERENTIAL_PERF_CACHE").ok()
}

fn cached(key: &str) -> Option<(String, bool)> {
    let path = cache_path()?;
    let mut guard = CACHE.lock().ok()?;
    let table = guard.get_or_insert_with(|| load_cache(&path));
    table.get(key).cloned()
}

fn load_cache(path: &str) -> std::collections::HashMap<String, (String, bool)> {
    let mut table = std::collections::HashMap::new();
    let Ok(bytes) = std::fs::read(path) else {
        return table;
    };
    let mut rest = &bytes[..];
    while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
        let head = String::from_utf8_lossy(&rest[..nl]).into_owned();
        let mut it = head
            .split(' ')
            .map(|w| w.parse::<usize>().unwrap_or(usize::MAX));
        let (Some(k), Some(o), Some(ok)) = (it.next(), it.next(), it.next()) else {
            break;
        };
        let body = &rest[nl + 1..];
        if k.saturating_add(o) > body.len() {
            break;
        }
        let key = String::from_utf8_lossy(&body[..k]).into_owned();
        let out = String::from_utf8_lossy(&body[k..k + o]).into_owned();
        table.insert(key, (out, ok == 1));
        rest = &body[k + o..];
    }
    table
}

fn remember(key: &str, answer: &(String, bool)) {
    let Some(path) = cache_path() else { return };
    let Ok(mut guard) = CACHE.lock() else { return };
    let table = guard.get_or_insert_with(|| load_cache(&path));
    table.insert(key.to_string(), answer.clone());
    let record = format!(
        "{} {} {}\n{key}{}",
        key.len(),
        answer.0.len(),
        u8::from(answer.1),
        answer.0
    );
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = f.write_all(record.as_bytes());
    }
}

fn perf_with(vmlinux: &str, mode: &[&str], q: &str) -> (String, bool) {
    let key = format!("{vmlinux}\t{}\t{q}", mode.join(" "));
    if let Some(hit) = cached(&key) {
        return hit;
    }
    let answer = run_perf(vmlinux, mode, q);
    remember(&key, &answer);
    answer
}

fn run_perf(vmlinux: &str, mode: &[&str], q: &str) -> (String, bool) {
    let mut perf = Command::new("perf");
    match USER_BINARY.get() {
        Some(_) => {
            perf.args(["probe", "-x", vmlinux]);
            if let Some(dir) = tracefs_path() {
                perf.env("TRACEFS_PATH", dir);
            }
        }
        None => {
            perf.args(["probe", "-k", vmlinux]);
        }
    }
    match perf.args(mode).arg(q).output() {
        Ok(o) => (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            o.status.success(),
        ),
        Err(e) => (format!("cannot run perf: {e}"), false),
    }
}

/// Where perf finds a tracefs README for `-x` questions: none (the
/// host's) when the host's tracefs has one, else a directory with one
/// that states a 6.1 kernel's uprobe features (made once).
fn tracefs_path() -> Option<&'static str> {
    static DIR: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        if std::path::Path::new("/sys/kernel/tracing/README").exists() {
            return None;
        }
        // One directory for every run: its files are always the same.
        let dir = std::env::temp_dir().join("kpp-differential-tracefs");
        std::fs::create_dir_all(&dir).ok()?;
        // The lines perf's probe-file.c looks for: place and fetch-arg
        // syntax, and the x8/16/32/64 types.
        let readme = "  place (uprobe): <path>:<offset>[%return][(ref_ctr_offset)]\n  fetcharg: %<register>, @<address>, @<symbol>[+|-<offset>],\n\t    \\imm-value, \\\"imm-string\"\n  type: s8/16/32/64, u8/16/32/64, x8/16/32/64, char, string, symbol,\n";
        std::fs::write(dir.join("README"), readme).ok()?;
        for f in ["uprobe_events", "kprobe_events"] {
            std::fs::write(dir.join(f), "").ok()?;
        }
        Some(dir.to_string_lossy().into_owned())
    })
    .as_deref()
}

/// perf's `PATH:0xOFF` (a uprobe's file offset) as `0xADDRESS`, the
/// link-time address the offset is loaded at; other locations as given.
fn user_location(loc: &str) -> String {
    let Some((_, off)) = loc.rsplit_once(":0x") else {
        return loc.to_string();
    };
    let (Some(bin), Ok(off)) = (USER_BINARY.get(), u64::from_str_radix(off, 16)) else {
        return loc.to_string();
    };
    let address = std::fs::read(bin).ok().and_then(|bytes| {
        use object::{Object as _, ObjectSegment as _};
        let obj = object::File::parse(&*bytes).ok()?;
        obj.segments().find_map(|s| {
            let (start, size) = s.file_range();
            (start <= off && off < start + size).then(|| s.address() + (off - start))
        })
    });
    address.map_or_else(|| loc.to_string(), |a| format!("0x{a:x}"))
}

fn parse_d(out: &str) -> Answer {
    let mut m = BTreeMap::new();
    for line in out.lines().filter(|l| l.starts_with("p:")) {
        let mut words = line.split_whitespace().skip(1);
        let Some(loc) = words.next().map(user_location) else {
            continue;
        };
        let args: Vec<String> = words
            .map(|a| a.split_once('=').map_or(a, |(_, v)| v).to_string())
            .collect();
        m.insert(loc.to_string(), BTreeSet::from([args.join(" ")]));
    }
    if m.is_empty() {
        return Err(perf_reason(out));
    }
    Ok(m)
}

/// perf's stderr lines, the reason it gave no answer.
fn perf_reason(out: &str) -> String {
    let r: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("#stderr "))
        .filter(|l| !l.contains("Error: Failed"))
        .collect();
    if r.is_empty() {
        "no answer".into()
    } else {
        r.join(" / ")
    }
}

fn parse_v(out: &str) -> Answer {
    let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut cur = None;
    for line in out.lines() {
        let t = line.trim();
        if let Some(loc) = t
            .strip_prefix("@<")
            .and_then(|r| r.split_once('>'))
            .map(|(l, _)| l.to_string())
        {
            m.entry(loc.clone()).or_default();
            cur = Some(loc);
        } else if line.starts_with("\t\t") && t != "(No matched variables)" {
            if let Some(c) = &cur {
                m.entry(c.clone()).or_default().insert(t.to_string());
            }
        }
    }
    if m.is_empty() {
        return Err(perf_reason(out));
    }
    Ok(m)
}

fn ask_ours(di: &DebugInfo<'_>, mode: &str, q: &str) -> Answer {
    let mut words = q.split_whitespace();
    let point = ProbePoint::parse(words.next().unwrap_or_default()).map_err(|e| e.to_string())?;
    let opts = Options::default();
    let mut m = BTreeMap::new();
    if mode == "-V" {
        for site in di.sites(&point, &opts).map_err(|e| e.to_string())? {
            let vars = di.variables(&site).map_err(|e| e.to_string())?;
            // Functions of one name (static ones in several files) can
            // share a SYMBOL+0 spelling: their variables are merged, as
            // perf's listing is read (`parse_v`).
            m.entry(site.location.clone())
                .or_insert_with(BTreeSet::new)
                .extend(vars.iter().map(|v| format!("{}\t{}", v.type_name, v.name)));
        }
        return Ok(m);
    }
    let args = words
        .map(ProbeArg::parse)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    // Per site, so that a point whose every site is refused still shows its sites.
    let sites = di.sites(&point, &opts).map_err(|e| e.to_string())?;
    let mut r = kprobe_perf_debuginfo::Resolved {
        probes: Vec::new(),
        refused: Vec::new(),
    };
    for site in sites {
        match di.probe_at(&site, &args) {
            Ok(p) => r.probes.push(p),
            Err(e) => r.refused.push((site, e)),
        }
    }
    for p in r.probes {
        let fetched: Vec<String> = p
            .args
            .iter()
            .map(|a| {
                let s = a.to_string();
                s.split_once('=').map_or(s.clone(), |(_, v)| v.to_string())
            })
            .collect();
        m.insert(site_key(&p.site), BTreeSet::from([fetched.join(" ")]));
    }
    for (site, why) in r.refused {
        m.insert(site_key(&site), BTreeSet::from([format!("REFUSED: {why}")]));
    }
    Ok(m)
}

/// How a `-D` answer names a site: SYMBOL+OFFSET as perf -k does, or
/// the address for a user binary (perf -x gives a file offset).
fn site_key(site: &kprobe_perf_debuginfo::Site) -> String {
    match USER_BINARY.get() {
        Some(_) => format!("0x{:x}", site.address),
        None => site.location.clone(),
    }
}

/// Spellings that name the same thing: a compiler clone's symbol
/// (`f.isra.0+8`) and its source function (`f+8`) are the same address.
fn normalize(a: &Answer) -> Answer {
    a.as_ref().map_err(Clone::clone).map(|m| {
        m.iter()
            .map(|(k, v)| {
                let key = match k.split_once('+') {
                    Some((sym, off)) => format!("{}+{off}", sym.split('.').next().unwrap_or(sym)),
                    None => k.clone(),
                };
                (key, v.clone())
            })
            .collect()
    })
}

fn compare(di: &DebugInfo<'_>, mode: &str, q: &str, ours: &Answer, theirs: &Answer) -> String {
    let s = |x: &str| x.to_string();
    match (ours, theirs) {
        (Err(_), Err(_)) => s("agree"),
        (Ok(o), Err(t)) if t.contains("Too many( > 128)") && o.len() > 128 => {
            s("equivalent: perf stops at 128 sites, we give them all")
        }
        (Ok(o), Err(_)) if o.values().flatten().any(|v| v.starts_with("REFUSED")) => {
            s("equivalent: perf fails the whole point when a site cannot fetch an argument; we refuse that site")
        }
        (Ok(_), Err(t)) => format!("perf failed, we answered: {}", t.chars().take(60).collect::<String>()),
        (Err(_), Ok(t)) if t.keys().all(|k| k.starts_with("_text+")) => {
            s("equivalent: no DWARF scope; perf fell back to the symbol table (the engine's job)")
        }
        (Err(e), Ok(_)) if e.contains("DW_OP_stack_value") => {
            s("perf wrong: a computed value (DW_OP_stack_value) read by perf as memory at reg+off; we refuse")
        }
        (Err(e), Ok(_)) => format!("we failed, perf answered: {}", e.chars().take(50).collect::<String>()),
        (Ok(o), Ok(t)) if o == t => s("agree"),
        (Ok(o), Ok(t)) => {
            if o.keys().ne(t.keys()) {
                if same_addresses(o.keys(), t.keys()) {
                    return s("equivalent: the same addresses, named by other symbols");
                }
                if o.len() == t.len()
                    && t.keys().filter(|k| !o.contains_key(*k)).all(|k| on_data(k))
                {
                    return s("perf wrong: puts a site in a data object (a function in .exit.text, which perf places at another address)");
                }
                return s("different sites");
            }
            if mode == "-V" {
                return compare_v(di, q, o, t);
            }
            let vars: Vec<&str> = q.split_whitespace().skip(1).collect();
            let mut labels = BTreeSet::new();
            for (k, ov) in o {
                if ov == &t[k] {
                    continue;
                }
                match site_difference(ov, &t[k], &vars) {
                    Some(label) => labels.insert(label),
                    None => return s("different fetch args"),
                };
            }
            // perf's mistakes first; then what is equivalent.
            labels
                .iter()
                .find(|l| l.starts_with("perf wrong"))
                .or_else(|| labels.iter().next())
                .map_or_else(|| s("different fetch args"), |l| s(l))
        }
    }
}

/// The vmlinux's symbols (from `nm`, read once when a comparison needs
/// them), to tell whether two spellings `SYM+OFF` are one address.
static SYMBOLS: std::sync::OnceLock<std::collections::HashMap<String, (u64, char)>> =
    std::sync::OnceLock::new();
static VMLINUX: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn symbols() -> &'static std::collections::HashMap<String, (u64, char)> {
    SYMBOLS.get_or_init(|| {
        let Some(path) = VMLINUX.get() else {
            return Default::default();
        };
        let Ok(out) = Command::new("nm").arg(path).output() else {
            return Default::default();
        };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let addr = u64::from_str_radix(w.next()?, 16).ok()?;
                let kind = w.next()?.chars().next()?;
                Some((w.next()?.to_string(), (addr, kind)))
            })
            .collect()
    })
}

fn address_of(site: &str) -> Option<u64> {
    let (sym, off) = site.rsplit_once('+')?;
    Some(symbols().get(sym)?.0 + off.parse::<u64>().ok()?)
}

/// A site `SYM+OFF` whose symbol is a data object (`nm` type d, D, b or B).
fn on_data(site: &str) -> bool {
    site.rsplit_once('+')
        .and_then(|(sym, _)| symbols().get(sym))
        .is_some_and(|(_, kind)| "dDbB".contains(*kind))
}

/// Two site lists that name the same addresses.
fn same_addresses<'k>(
    ours: impl Iterator<Item = &'k String>,
    theirs: impl Iterator<Item = &'k String>,
) -> bool {
    let a: Option<BTreeSet<u64>> = ours.map(|k| address_of(k)).collect();
    let b: Option<BTreeSet<u64>> = theirs.map(|k| address_of(k)).collect();
    matches!((a, b), (Some(a), Some(b)) if a == b)
}

/// Why our answer at one site differs from perf's, when the difference is
/// one of the known classes (each shown in docs/source-vs-perf.md).
fn site_difference(
    ours: &BTreeSet<String>,
    theirs: &BTreeSet<String>,
    vars: &[&str],
) -> Option<&'static str> {
    let refused = |what: &str| {
        ours.iter()
            .all(|v| v.starts_with("REFUSED") && v.contains(what))
    };
    if refused("REFUSED") && theirs.iter().any(|s| s.contains("\\deade12d")) {
        return Some("equivalent: perf reads 0xdeade12d where we refuse an optimized-out variable");
    }
    if refused("DW_OP_stack_value") {
        return Some("perf wrong: a computed value (DW_OP_stack_value) read by perf as memory at reg+off; we refuse");
    }
    if refused("DW_OP_piece") {
        return Some("perf wrong: fetches one piece of a variable split over several places (DW_OP_piece); we refuse");
    }
    if refused("DW_OP_entry_value") {
        return Some("perf wrong: reads a register's value now where the location is its value at the function's entry (DW_OP_entry_value); we refuse");
    }
    if part_of_longer(ours) {
        return Some("perf wrong: translates the first operations of a longer expression that a fetch cannot compute; we refuse");
    }
    // perf reads a global named after the local variable (`@attr+0`),
    // which no symbol is: the kernel refuses the definition.
    let local_as_symbol = vars.iter().any(|v| {
        let name = v.split_once('=').map_or(*v, |(n, _)| n);
        theirs.iter().any(|t| t.contains(&format!("@{name}+0")))
    });
    if refused("REFUSED") && local_as_symbol {
        return Some(
            "perf wrong: reads a symbol named after a local variable (no such symbol); we refuse",
        );
    }
    if first_load_only(ours, theirs) {
        return Some("perf wrong: reads the first load of a longer expression (DW_OP_deref chain); we fetch the whole chain");
    }
    if register_value_read_as_memory(ours, theirs) {
        return Some("perf wrong: a value that is a register (DW_OP_bregN 0; DW_OP_stack_value) read by perf as memory at it; we fetch the register");
    }
    None
}

/// Every argument ours or, where ours is the register `%r`, perf's the
/// memory at it, `+0(%r)`: the location `DW_OP_breg7 0; DW_OP_stack_value`
/// says the value is the register (a pointer to an object on the stack).
fn register_value_read_as_memory(ours: &BTreeSet<String>, theirs: &BTreeSet<String>) -> bool {
    args_differ_only_where(ours, theirs, |o, t| {
        o.starts_with('%') && t == format!("+0({o})")
    })
}

/// Whether one site's arguments, ours and perf's, differ (somewhere) and
/// only where `differs(our fetch, perf's fetch)` holds of two arguments of
/// the same type.
fn args_differ_only_where(
    ours: &BTreeSet<String>,
    theirs: &BTreeSet<String>,
    differs: impl Fn(&str, &str) -> bool,
) -> bool {
    let (Some(o), Some(t)) = (ours.iter().next(), theirs.iter().next()) else {
        return false;
    };
    let (o, t): (Vec<&str>, Vec<&str>) = (o.split(' ').collect(), t.split(' ').collect());
    o.len() == t.len()
        && o != t
        && o.iter().zip(&t).all(|(a, b)| {
            let (fa, ta) = a.rsplit_once(':').unwrap_or((a, ""));
            let (fb, tb) = b.rsplit_once(':').unwrap_or((b, ""));
            a == b || (ta == tb && differs(fa, fb))
        })
}

/// True when we refused a site because an argument's location is an
/// expression of several operations with no fetch equivalent (shifts,
/// sums of two loads, ...): perf's fetch there reads its first operation.
fn part_of_longer(ours: &BTreeSet<String>) -> bool {
    ours.iter().all(|v| {
        v.starts_with("REFUSED")
            && v.contains("has no kprobe fetch equivalent")
            && v.matches("}, ").count() >= 1
    })
}

/// True when every argument of perf's answer is ours or the innermost load
/// of ours: perf translated only the first operations of a location like
/// `DW_OP_breg5 0; DW_OP_deref; DW_OP_plus_uconst 8; DW_OP_deref`
/// (`+0(%di)`), where the whole expression is `+0(+8(+0(%di)))`.
fn first_load_only(ours: &BTreeSet<String>, theirs: &BTreeSet<String>) -> bool {
    args_differ_only_where(ours, theirs, |o, t| {
        o.len() > t.len() && o.contains(&format!("({t})"))
    })
}

/// Explains a -V difference by asking, for each variable perf lists and we
/// do not, why we refuse it.
/// The key of a `-D` answer for the site `-V` lists as `loc` (they
/// differ for a user binary: an address, SYMBOL+OFFSET).
fn d_key(di: &DebugInfo<'_>, q: &str, loc: &str) -> String {
    if USER_BINARY.get().is_none() {
        return loc.to_string();
    }
    let point = q.split_whitespace().next().map(ProbePoint::parse);
    let Some(Ok(point)) = point else {
        return loc.to_string();
    };
    let sites = di.sites(&point, &Options::default()).unwrap_or_default();
    sites
        .iter()
        .find(|s| {
            normalize(&Ok(BTreeMap::from([(s.location.clone(), BTreeSet::new())])))
                .is_ok_and(|m| m.contains_key(loc))
        })
        .map_or_else(|| loc.to_string(), site_key)
}

/// Whether a fetch reads the stack relative to the CFA (a local whose
/// frame base is `DW_OP_call_frame_cfa`): `+N(%sp)`, or our refusal of
/// an aggregate there.
fn cfa_based(fetched: &str) -> bool {
    fetched.contains("(%sp)")
        || fetched.contains("is a struct")
        || fetched.contains("is an array")
        || fetched.contains("union")
}

fn compare_v(
    di: &DebugInfo<'_>,
    q: &str,
    o: &BTreeMap<String, BTreeSet<String>>,
    t: &BTreeMap<String, BTreeSet<String>>,
) -> String {
    let names = |set: &BTreeSet<String>| -> BTreeSet<String> {
        set.iter()
            .map(|v| v.rsplit('\t').next().unwrap_or("").to_string())
            .collect()
    };
    let mut reasons = BTreeSet::new();
    for (loc, tv) in t {
        let (on, tn) = (names(&o[loc]), names(tv));
        if on == tn {
            if o[loc] != *tv {
                reasons.insert("type spelled differently");
            }
            continue;
        }
        let key = d_key(di, q, loc);
        for extra in on.difference(&tn) {
            let fetched = normalize(&ask_ours(di, "-D", &format!("{q} {extra}")))
                .ok()
                .and_then(|m| m.get(&key).map(|v| v.iter().cloned().collect::<String>()))
                .unwrap_or_default();
            reasons.insert(if fetched.starts_with('\\') {
                "we list more: constants (DW_OP_lit/const + stack_value, or DW_AT_const_value), fetched as immediates"
            } else if USER_BINARY.get().is_some() && cfa_based(&fetched) {
                "perf wrong: omits a stack variable (frame base DW_OP_call_frame_cfa): it reads call frame information from the separate debug file only, whose .eh_frame has no bytes, and its -D says it does not support the location; we read the binary's"
            } else {
                "we list more"
            });
        }
        for missing in tn.difference(&on) {
            let why = match normalize(&ask_ours(di, "-D", &format!("{q} {missing}"))) {
                Ok(m) => m
                    .get(&key)
                    .map(|v| v.iter().cloned().collect::<String>())
                    .unwrap_or_default(),
                Err(e) => e,
            };
            reasons.insert(if why.contains("DW_OP_stack_value") {
                "perf wrong: lists a computed value it reads as memory"
            } else if why.contains("has no kprobe fetch equivalent") {
                "perf wrong: lists a value computed by an expression no fetch can compute (shifts, sums of loads), which it reads as its first operation"
            } else if why.contains("entry_value") {
                // perf reads the register as it is now.
                "perf wrong: lists a variable whose location is a register's value at the function's entry (DW_OP_entry_value), which it reads as the register now"
            } else if why.contains("DW_OP_piece") {
                "perf wrong: lists a variable split over several places (DW_OP_piece), of which its fetch reads one"
            } else if why.contains("register with no x86-64 name") {
                "perf wrong: lists a variable held in a register no fetch can read (a floating-point value in an SSE register), which its -D refuses"
            } else if why.contains("no location") {
                // perf's -V also lists a variable whose location list does
                // not cover the address; its -D then fails ("Failed to
                // find the location").
                "perf wrong: lists a variable with no location at this address, which its -D refuses"
            } else {
                "unexplained"
            });
        }
    }
    let r: Vec<&str> = reasons.into_iter().collect();
    let benign = |x: &&str| {
        *x == "type spelled differently"
            || x.starts_with("perf wrong")
            || x.starts_with("we list more: constants")
    };
    if !r.iter().all(benign) {
        format!("different variables: {}", r.join(", "))
    } else if r
        .iter()
        .any(|x| x.starts_with("perf wrong: lists a computed"))
    {
        "perf wrong: lists a computed value (DW_OP_stack_value) that it reads as memory; we refuse it".into()
    } else if let Some(w) = r.iter().find(|x| x.starts_with("perf wrong: omits")) {
        (*w).to_string()
    } else if let Some(w) = r.iter().find(|x| x.starts_with("perf wrong")) {
        format!("{w}; we leave it out")
    } else if r.iter().any(|x| x.starts_with("we list more: constants")) {
        "equivalent+: we also list constant-valued variables (fetched as immediates); perf omits them".into()
    } else {
        "equivalent: same variables, type spelled differently".into()
    }
}
