//! Reader throughput beside `cat`, page cache warm, one thread, full CRC checks.
//!
//! `cargo bench --bench read` writes two ~1 GB files under `target/bench-data/` (once):
//! ~200-byte records and ~100 KB records, then prints MB/s of `cat FILE > /dev/null`,
//! of our `RecordReader` (both CRCs checked), of the reader without the data CRC, and of
//! the CRC32C alone, each the median of several runs of at least one second.
//! `TFSHARD_BENCH_MB` changes the file size.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use tfshard::tfrecord::{RecordReader, RecordWriter};

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-data")
}

fn make(path: &Path, record_bytes: usize, total_bytes: u64) {
    if path.metadata().is_ok_and(|m| m.len() >= total_bytes) {
        return;
    }
    let mut w = RecordWriter::new(BufWriter::with_capacity(
        1 << 20,
        File::create(path).unwrap(),
    ));
    let mut x = 0x2545_f491u32;
    let mut record = vec![0u8; record_bytes];
    let mut written = 0u64;
    while written < total_bytes {
        for b in record.iter_mut() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x as u8;
        }
        w.write_record(&record).unwrap();
        written += record_bytes as u64 + 16;
    }
    w.into_inner().unwrap().flush().unwrap();
}

/// Median seconds per pass over `runs` timed batches of at least one second each.
fn time(mut pass: impl FnMut()) -> f64 {
    pass(); // warm the page cache and the code
    let mut per_pass = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let mut n = 0;
        while start.elapsed().as_secs_f64() < 1.0 {
            pass();
            n += 1;
        }
        per_pass.push(start.elapsed().as_secs_f64() / n as f64);
    }
    per_pass.sort_by(f64::total_cmp);
    per_pass[per_pass.len() / 2]
}

fn read_all(path: &Path, check_data: bool) -> u64 {
    let file = File::open(path).unwrap();
    let len = file.metadata().unwrap().len();
    let mut reader = RecordReader::new(file)
        .with_total_len(len)
        .with_check_data_crc(check_data);
    let mut records = 0;
    while reader.read_record().unwrap().is_some() {
        records += 1;
    }
    records
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let mb: u64 = std::env::var("TFSHARD_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let dir = data_dir();
    std::fs::create_dir_all(&dir).unwrap();
    println!("reader benchmark: one thread, page cache warm, median of 5 (MB = 10^6 bytes)");
    println!(
        "{:<22} {:>10} {:>12} {:>12} {:>12} {:>10} {:>10}",
        "file", "records", "cat MB/s", "ours MB/s", "no-data-CRC", "crc MB/s", "ours/cat"
    );
    for (name, record_bytes) in [("200-byte records", 200), ("100-KB records", 100_000)] {
        let path = dir.join(format!("read-{record_bytes}.tfrecord"));
        make(&path, record_bytes, mb * 1_000_000);
        let bytes = path.metadata().unwrap().len() as f64;
        let cat = time(|| {
            let status = Command::new("cat")
                .arg(&path)
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
        });
        let mut records = 0;
        let ours = time(|| records = read_all(&path, true));
        let no_data_crc = time(|| {
            read_all(&path, false);
        });
        let data = std::fs::read(&path).unwrap();
        let crc = time(|| {
            std::hint::black_box(crc32c::crc32c(&data));
        });
        drop(data);
        let rate = |s: f64| bytes / s / 1e6;
        println!(
            "{:<22} {:>10} {:>12.0} {:>12.0} {:>12.0} {:>10.0} {:>9.0}%",
            name,
            records,
            rate(cat),
            rate(ours),
            rate(no_data_crc),
            rate(crc),
            100.0 * cat / ours
        );
    }
}
