//! `tfshard compact OUT`: the small generations of a set rewritten as full-size shards.

use std::path::PathBuf;

use clap::Args;

use super::{output, CliResult, Common};

/// Arguments of `compact`.
#[derive(Args, Debug)]
pub struct CompactArgs {
    /// The output folder (or URL) holding the set.
    pub output: PathBuf,
    /// The set's shard prefix.
    #[arg(long, value_name = "NAME", default_value = crate::convert::DEFAULT_PREFIX)]
    pub prefix: String,
    /// Target shard size [default: the set's]; KB/MB/GB are powers of 1000, KiB/MiB/GiB of 1024.
    #[arg(long, value_name = "SIZE")]
    pub target_shard_size: Option<String>,
    /// Keep the last N generations' pinned manifests and the shards they list.
    #[arg(long, value_name = "N")]
    pub retain: Option<u32>,
    #[command(flatten)]
    pub common: Common,
}

impl CompactArgs {
    /// Compacts and reports.
    pub fn run(&self) -> CliResult {
        let mut options = crate::compact::CompactOptions::new(&self.output);
        options.prefix = self.prefix.clone();
        options.io = self.common.io()?;
        options.retain = self.retain;
        if let Some(size) = &self.target_shard_size {
            options.target_bytes = Some(super::convert::parse_size(size)?);
        }
        if options.retain == Some(0) {
            return Err(crate::error::Error::invalid_option(
                "retain",
                "keep at least 1 generation",
            )
            .into());
        }
        let summary = crate::compact::compact(&options)?;
        if self.common.json {
            output::print_json(&summary.to_json())?;
        } else if !self.common.quiet {
            if summary.compacted.is_empty() {
                println!("nothing to compact: {}", summary.manifest.display());
            } else {
                println!(
                    "compacted generations {:?} ({} shards) into generation {}: {} records in {} shard{} ({:.1} MB), manifest: {}",
                    summary.compacted,
                    summary.replaced,
                    summary.generation,
                    summary.records,
                    summary.shards,
                    if summary.shards == 1 { "" } else { "s" },
                    summary.bytes as f64 / 1e6,
                    summary.manifest.display()
                );
            }
        }
        Ok(())
    }
}
