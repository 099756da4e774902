//! Writes the seed corpora of the fuzz targets into DIR/TARGET/ (file
//! names are the inputs' hashes, as libFuzzer names what it keeps): the
//! parser's hand-written definitions, the fixture records (the whole run,
//! whole and split, and each record alone) and the fixture perf.data file.

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::path::Path;

use kprobe_perf_fuzz::targets::{encode_records, record_seeds, SPEC_SEEDS};

fn write(dir: &Path, target: &str, input: &[u8]) -> std::io::Result<()> {
    let d = dir.join(target);
    std::fs::create_dir_all(&d)?;
    let h = BuildHasherDefault::<DefaultHasher>::default().hash_one(input);
    std::fs::write(d.join(format!("seed-{h:016x}")), input)
}

fn main() -> std::io::Result<()> {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: seed_corpora DIR");
        std::process::exit(2);
    };
    let dir = Path::new(&dir);
    for s in SPEC_SEEDS {
        write(dir, "spec_parse", s.as_bytes())?;
    }
    let (records, file) = record_seeds();
    write(dir, "record_decode", &encode_records(&records, false))?;
    write(dir, "record_decode", &encode_records(&records, true))?;
    for r in &records {
        write(
            dir,
            "record_decode",
            &encode_records(std::slice::from_ref(r), false),
        )?;
    }
    write(dir, "perfdata_read", &file)?;
    println!(
        "seeds: {} definitions, {} record runs, 1 perf.data file ({} bytes) in {}",
        SPEC_SEEDS.len(),
        records.len() + 2,
        file.len(),
        dir.display()
    );
    Ok(())
}
