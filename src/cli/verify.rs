//! `tfshard verify PATH...`: frame, manifest and (with --deep) schema checks.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::{output, CliError, CliResult, Common, ReadFlags};
use crate::records::ReadSettings;
use crate::verify::{Verifier, VerifierBuilder};

/// Arguments of `verify`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// Shards, folders (checked against their manifests, or every shard in them) or manifests.
    #[arg(required_unless_present = "manifest", value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Check against this manifest.
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// Also decode every record and check it against the schema.
    #[arg(long)]
    pub deep: bool,
    #[command(flatten)]
    pub read: ReadFlags,
    #[command(flatten)]
    pub common: Common,
}

impl VerifyArgs {
    /// Resolves flags into the library's builder.
    pub fn to_builder(&self) -> Result<VerifierBuilder, CliError> {
        let mut builder = Verifier::builder(self.paths.clone())
            .with_deep(self.deep)
            .with_threads(self.common.thread_count())
            .with_io(self.common.io()?);
        if let Some(manifest) = &self.manifest {
            builder = builder.with_manifest(manifest.clone());
        }
        Ok(builder.with_reading(
            self.read.compression.resolve(),
            self.read.record_type.resolve(),
        ))
    }

    /// Verifies; exit 1 when any problem is found.
    pub fn run(&self) -> CliResult {
        let verifier = self.to_builder()?.build()?;
        let bar = output::Bar::new(&self.common, "bytes");
        let report = verifier.run(&bar);
        bar.clear();
        let report = report?;
        if self.common.json {
            output::print_json(&serde_json::to_value(&report).map_err(std::io::Error::other)?)?;
        } else {
            let mut out = output::stdout();
            for p in &report.problems {
                writeln!(out, "{p}")?;
            }
            if !self.common.quiet || !report.ok {
                let verdict = if report.ok {
                    "OK".to_owned()
                } else {
                    format!(
                        "{} problem{}",
                        report.problems.len(),
                        if report.problems.len() == 1 { "" } else { "s" }
                    )
                };
                writeln!(
                    out,
                    "verified {} shards, {} records, {:.1} MB in {:.2} s ({:.0} MB/s): {verdict}",
                    report.shards,
                    report.records,
                    report.bytes as f64 / 1e6,
                    report.seconds,
                    output::mb_per_sec(report.bytes, report.seconds)
                )?;
            }
            out.flush()?;
        }
        if report.ok {
            Ok(())
        } else {
            Err(CliError::Failed)
        }
    }
}
