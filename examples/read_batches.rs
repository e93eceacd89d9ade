//! Reads shards through the pipeline (one epoch, files in order, no shuffle) and prints
//! each batch as a JSON line: per column its values (bytes as base64), row splits and,
//! for a SequenceExample's feature lists, step splits. `scripts/tf_interop.py` compares
//! them with what TensorFlow's parsers give for the same records.
//!
//! `cargo run --example read_batches -- PATH BATCH_SIZE [--cache]`

use base64::Engine as _;
use serde_json::{json, Map, Value};
use tfshard::pipeline::{CacheMode, Pipeline, Values};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, batch, rest @ ..] = args.as_slice() else {
        return Err("usage: read_batches PATH BATCH_SIZE [--cache]".into());
    };
    let mut builder = Pipeline::builder(vec![path.into()])
        .with_batch(batch.parse()?, false)
        .with_interleave(1, 1);
    let mut epochs = 1;
    if rest.iter().any(|a| a == "--cache") {
        // The second epoch comes from the cache; print only that one.
        builder = builder.with_cache(CacheMode::Memory).with_epochs(2);
        epochs = 2;
    }
    for batch in builder.build()? {
        let batch = batch?;
        if batch.epoch + 1 != epochs {
            continue;
        }
        let mut columns = Map::new();
        for c in &batch.columns {
            let values = match &c.values {
                Values::Int64(v) => json!(v),
                Values::Float(v) => json!(v),
                Values::Bytes(v) => json!(v
                    .iter()
                    .map(|b| base64::engine::general_purpose::STANDARD.encode(b))
                    .collect::<Vec<_>>()),
            };
            columns.insert(
                c.name.clone(),
                json!({"values": values, "row_splits": c.row_splits, "step_splits": c.step_splits}),
            );
        }
        println!(
            "{}",
            json!({"rows": batch.rows, "columns": Value::Object(columns)})
        );
    }
    Ok(())
}
