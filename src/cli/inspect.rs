//! `tfshard inspect PATH`: records as JSON lines.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::{output, CliResult, Common, ReadFlags};
use crate::example::decode::push_json;
use crate::records::{Inspector, ReadSettings};

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
        let mut inspector = Inspector::builder(&self.file).with_io(self.common.io()?);
        if let Some(limit) = self.limit {
            inspector = inspector.with_limit(limit);
        }
        inspector = inspector.with_reading(
            self.read.compression.resolve(),
            self.read.record_type.resolve(),
        );
        let mut out = output::stdout();
        let mut line = String::new();
        inspector.build()?.run(|record| {
            line.clear();
            push_json(&mut line, &record);
            line.push('\n');
            out.write_all(line.as_bytes())?;
            Ok(true)
        })?;
        out.flush()?;
        Ok(())
    }
}
