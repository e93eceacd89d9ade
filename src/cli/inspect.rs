//! `tfshard inspect PATH`: records as JSON lines.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::{output, CliResult, Common, ReadFlags};
use tfshard::dataset::Dataset;
use tfshard::example::decode::push_json;
use tfshard::records::for_each_record;

/// Arguments of `inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The shard to print (any name), or a folder or manifest: its shards in order.
    #[arg(value_name = "PATH")]
    pub file: PathBuf,
    /// Print at most N records.
    #[arg(long, short = 'n', value_name = "N")]
    pub limit: Option<u64>,
    #[command(flatten)]
    pub read: ReadFlags,
    #[command(flatten)]
    pub common: Common,
}

impl InspectArgs {
    /// Prints each record as one JSON object per line.
    pub fn run(&self) -> CliResult {
        let dataset = Dataset::discover(std::slice::from_ref(&self.file), self.common.io()?)?;
        let record_type = self
            .read
            .record_type
            .resolve()
            .unwrap_or_else(|| dataset.record_type());
        let mut out = output::stdout();
        let mut line = String::new();
        let mut printed = 0u64;
        let limit = self.limit.unwrap_or(u64::MAX);
        if limit == 0 {
            return Ok(());
        }
        for shard in &dataset.shards {
            for_each_record(
                shard,
                self.read.compression.resolve(),
                record_type,
                dataset.io,
                |record| {
                    line.clear();
                    push_json(&mut line, &record);
                    line.push('\n');
                    out.write_all(line.as_bytes())?;
                    printed += 1;
                    Ok(printed < limit)
                },
            )?;
            if printed >= limit {
                break;
            }
        }
        out.flush()?;
        Ok(())
    }
}
