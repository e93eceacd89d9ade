//! `tfshard finalize OUT`: publishes the parts of `--num-workers` runs as one set.

use std::path::PathBuf;

use clap::Args;

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
            Some(name) => crate::tfds::version_dir(&self.output, name),
            None => self.output.clone(),
        };
        let mut finalizer = crate::finalize::Finalizer::builder(&output)
            .with_overwrite(self.overwrite)
            .with_io(self.common.io()?);
        if let Some(prefix) = &self.prefix {
            finalizer = finalizer.with_prefix(prefix.clone());
        }
        let report = finalizer.build()?.run()?;
        if self.common.json {
            output::print_json(&report.to_json())?;
        } else if !self.common.quiet {
            for s in &report.sets {
                let (what, workers) = match (s.already_published, s.appended) {
                    (true, _) => ("already published by another finalize:", String::new()),
                    (false, None) => ("finalized", format!(" from {} workers", s.workers)),
                    (false, Some((g, retired))) => (
                        "finalized",
                        format!(
                            " from {} workers, generation {g} ({retired} shard{} retired)",
                            s.workers,
                            if retired == 1 { "" } else { "s" }
                        ),
                    ),
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
