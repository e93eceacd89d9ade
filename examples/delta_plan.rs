//! Plans one snapshot of a Delta table the way `tfshard convert delta` does (log replay
//! through delta_kernel, then the data files in record order), without reading any data:
//! what `scripts/bench_delta.sh` times on the 300,000-file log beside deltalake's load.
//!
//! ```text
//! delta_plan TABLE        # prints {"version", "files", "seconds"}
//! ```

use std::time::Instant;

use tfshard::convert::{DeltaOptions, DeltaTable};

fn main() -> Result<(), tfshard::Error> {
    let table = std::env::args().nth(1).expect("usage: delta_plan TABLE");
    let started = Instant::now();
    let snapshot = DeltaTable::open(
        table.as_ref(),
        &DeltaOptions::default(),
        tfshard::store::IoOptions::default(),
    )?;
    let roots: Vec<usize> = (0..snapshot.schema.fields().len()).collect();
    let files = snapshot.scan_files(&roots, &[])?;
    println!(
        "{{\"version\": {}, \"files\": {}, \"seconds\": {:.3}}}",
        snapshot
            .version()
            .map_or("null".to_owned(), |v| v.to_string()),
        files.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
