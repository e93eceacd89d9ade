//! `tfshard finalize OUT`: publishes the parts of `--num-workers` runs as one set.

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use super::{output, CliResult, Common};

/// Arguments of `finalize`.
#[derive(Args, Debug)]
pub struct FinalizeArgs {
    /// The output folder (or URL) the workers wrote their parts to.
    pub output: PathBuf,
    /// Finalize only this prefix (or split) [default: every prefix with parts].
    #[arg(long, value_name = "NAME")]
    pub prefix: Option<String>,
    /// Replace an existing set of the same prefix.
    #[arg(long)]
    pub overwrite: bool,
    /// The workers ran with --tfds NAME: finalize OUT/NAME/1.0.0, and write TFDS's files.
    #[arg(long, value_name = "NAME", conflicts_with = "prefix")]
    pub tfds: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

impl FinalizeArgs {
    /// Finalizes and reports.
    pub fn run(&self) -> CliResult {
        let output = match &self.tfds {
            Some(name) => super::convert::tfds_dir(&self.output, name),
            None => self.output.clone(),
        };
        let mut finalizer = crate::finalize::Finalizer::builder(&output)
            .with_overwrite(self.overwrite)
            .with_io(self.common.io()?);
        if let Some(prefix) = &self.prefix {
            finalizer = finalizer.with_prefix(prefix.clone());
        }
        let report = finalizer.build()?.run()?;
        let (sets, seconds) = (report.sets, report.seconds);
        let records: u64 = sets.iter().map(|s| s.records).sum();
        let shards: u64 = sets.iter().map(|s| s.shards).sum();
        let bytes: u64 = sets.iter().map(|s| s.bytes).sum();
        let workers = sets.first().map_or(0, |s| s.workers);
        let found = sets.iter().all(|s| s.already_published);
        if self.common.json {
            let single = sets.len() == 1;
            let mut value = json!({
                "output": output,
                "manifest": if single { json!(sets[0].manifest) } else { json!(null) },
                "records": records,
                "shards": shards,
                "bytes": bytes,
                "seconds": seconds,
                "workers": workers,
            });
            if found {
                value["already_published"] = json!(true);
            }
            if !single {
                value["splits"] = sets
                    .iter()
                    .map(|s| {
                        (
                            s.prefix.clone(),
                            json!({"manifest": s.manifest, "records": s.records, "shards": s.shards, "bytes": s.bytes}),
                        )
                    })
                    .collect::<serde_json::Map<_, _>>()
                    .into();
            }
            output::print_json(&value)?;
        } else if !self.common.quiet {
            for s in &sets {
                let (what, workers) = if s.already_published {
                    ("already published by another finalize:", String::new())
                } else {
                    ("finalized", format!(" from {} workers", s.workers))
                };
                eprintln!(
                    "{what} {} records in {} shard{} ({:.1} MB){workers}: {}",
                    s.records,
                    s.shards,
                    if s.shards == 1 { "" } else { "s" },
                    s.bytes as f64 / 1e6,
                    s.manifest.display()
                );
            }
        }
        Ok(())
    }
}
