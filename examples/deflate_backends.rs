//! Deflate back-ends at level 6 over fixed-size chunks of a record stream, on every
//! core: how fast, and how small, each one is. `tfshard` picked its back-ends from this
//! (see `src/tfrecord/deflate.rs` and docs/performance.md).
//!
//! ```text
//! cargo run --release --example deflate_backends -- [--threads N] FILE...
//! ```
//!
//! The files are read whole and concatenated (use plain `.tfrecord` shards).
//! Candidates: zlib-rs with each chunk primed by the 32 KiB before it (one stream, as
//! pigz and our zlib writer do); zlib-rs with independent chunks; libdeflate with each
//! chunk its own gzip member (as BGZF and our gzip writer do).

use std::time::Instant;

use flate2::{Compress, Compression, FlushCompress};
use rayon::prelude::*;

const KIB: usize = 1024;

fn zlib_rs(window: &[u8], chunk: &[u8]) -> usize {
    let mut c = Compress::new(Compression::new(6), false);
    if !window.is_empty() {
        c.set_dictionary(window)
            .expect("a raw stream takes a dictionary");
    }
    let mut out = Vec::with_capacity(chunk.len() + chunk.len() / 999 + 64);
    c.compress_vec(chunk, &mut out, FlushCompress::Sync)
        .expect("compresses");
    out.len()
}

fn libdeflate(chunk: &[u8]) -> usize {
    let level = libdeflater::CompressionLvl::new(6).expect("a valid level");
    let mut c = libdeflater::Compressor::new(level);
    let mut out = vec![0u8; c.gzip_compress_bound(chunk.len())];
    c.gzip_compress(chunk, &mut out).expect("fits its bound")
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut threads = std::thread::available_parallelism()?.get();
    if let Some(at) = args.iter().position(|a| a == "--threads") {
        threads = args.get(at + 1).ok_or("--threads N")?.parse()?;
        args.drain(at..at + 2);
    }
    if args.is_empty() {
        return Err("usage: deflate_backends [--threads N] FILE...".into());
    }
    let mut data = Vec::new();
    for path in &args {
        data.extend(std::fs::read(path)?);
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    println!(
        "{:.1} MB of records, level 6, {threads} threads",
        data.len() as f64 / 1e6
    );
    println!(
        "{:<34} {:>9} {:>8} {:>10} {:>8}",
        "back-end", "chunk", "seconds", "MB/s", "size %"
    );
    for chunk in [128 * KIB, 512 * KIB, 2048 * KIB] {
        let starts: Vec<usize> = (0..data.len()).step_by(chunk).collect();
        let candidates: [(&str, &(dyn Fn(usize) -> usize + Sync)); 3] = [
            ("zlib-rs, primed (one stream)", &|start| {
                let end = (start + chunk).min(data.len());
                zlib_rs(
                    &data[start.saturating_sub(32 * KIB)..start],
                    &data[start..end],
                )
            }),
            ("zlib-rs, independent chunks", &|start| {
                let end = (start + chunk).min(data.len());
                zlib_rs(&[], &data[start..end]) + 18
            }),
            ("libdeflate, gzip member per chunk", &|start| {
                libdeflate(&data[start..(start + chunk).min(data.len())])
            }),
        ];
        for (name, compress) in candidates {
            let t = Instant::now();
            let bytes: usize = pool.install(|| starts.par_iter().map(|&s| compress(s)).sum());
            let secs = t.elapsed().as_secs_f64();
            println!(
                "{name:<34} {:>6} KiB {secs:>8.2} {:>10.0} {:>7.2}%",
                chunk / KIB,
                data.len() as f64 / secs / 1e6,
                100.0 * bytes as f64 / data.len() as f64
            );
        }
    }
    Ok(())
}
