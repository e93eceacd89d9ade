//! The floor a converter cannot beat: arrow-rs decoding Parquet files to Arrow batches
//! and dropping them, row groups in parallel on `--threads` (default all) cores, with the
//! converter's batch size. Used by `scripts/bench_convert.sh`.
//!
//! `cargo run --release --example decode_parquet -- [--threads N] FILE...`

use std::fs::File;
use std::time::Instant;

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rayon::prelude::*;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if let Some(i) = args.iter().position(|a| a == "--threads") {
        threads = args[i + 1].parse().expect("--threads N");
        args.drain(i..i + 2);
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .expect("one pool");
    let start = Instant::now();
    let units: Vec<(String, usize)> = args
        .iter()
        .flat_map(|path| {
            let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(path).expect("open"))
                .expect("parquet");
            let groups = builder.metadata().num_row_groups();
            (0..groups).map(move |g| (path.clone(), g))
        })
        .collect();
    let rows: usize = units
        .par_iter()
        .map(|(path, group)| {
            let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).expect("open"))
                .expect("parquet")
                .with_row_groups(vec![*group])
                .with_batch_size(tfshard::convert::PARQUET_BATCH_ROWS)
                .build()
                .expect("reader");
            reader.map(|b| b.expect("decode").num_rows()).sum::<usize>()
        })
        .sum();
    println!("{rows} rows in {:.3} s", start.elapsed().as_secs_f64());
}
