//! `tfshard verify PATH...`: frame, manifest and (with --deep) schema checks.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::{output, CliError, CliResult, Common, ReadFlags};
use crate::describe::StatsReader;
use crate::records::ReadSettings;
use crate::stats::drift::{Anomaly, Thresholds};
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
    /// Compare the set's statistics with a baseline's (another set, TFRecord files, or a statistics file, ours or TFDV's): drift is an anomaly (exit 1).
    #[arg(long, value_name = "BASE")]
    pub baseline: Option<PathBuf>,
    /// With --baseline: the threshold of FEATURE's comparators (default 0.1, or the schema's drift comparator's); repeatable.
    #[arg(long, value_name = "FEATURE=X", requires = "baseline")]
    pub threshold: Vec<String>,
    /// Check the set's statistics against a TFDV Schema in text format (presence, values per record, domains, types; its drift thresholds with --baseline).
    #[arg(long, value_name = "FILE")]
    pub schema: Option<PathBuf>,
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

    /// The thresholds `--threshold` gives.
    fn thresholds(&self) -> Result<Thresholds, CliError> {
        let mut t = Thresholds::default();
        for given in &self.threshold {
            let parsed = given
                .rsplit_once('=')
                .and_then(|(f, x)| Some((f, x.parse::<f64>().ok().filter(|x| *x >= 0.0)?)));
            let Some((feature, x)) = parsed else {
                return Err(CliError::Usage(format!(
                    "--threshold {given:?}: give FEATURE=X, X a number at least 0"
                )));
            };
            t.per_feature.insert(feature.to_owned(), x);
        }
        Ok(t)
    }

    /// The anomalies of the set's statistics against the schema's constraints, then
    /// against the baseline's statistics.
    fn anomalies(
        &self,
        base: Option<&crate::stats::proto::DatasetFeatureStatistics>,
        schema: Option<&crate::stats::tfdv_schema::Schema>,
        thresholds: &Thresholds,
    ) -> Result<Vec<Anomaly>, CliError> {
        let reader = StatsReader::builder(self.paths.clone())
            .with_io(self.common.io()?)
            .with_reading(
                self.read.compression.resolve(),
                self.read.record_type.resolve(),
            )
            .build()?;
        let stats =
            crate::describe::statistics(&reader, &crate::progress::NoProgress, &mut |_| {})?;
        Ok(crate::stats::anomalies(&stats, schema, base, thresholds))
    }

    /// Verifies; exit 1 when any problem or anomaly is found.
    pub fn run(&self) -> CliResult {
        let verifier = self.to_builder()?.build()?;
        // A baseline or threshold that cannot be read is a usage error, found before the
        // shards are read.
        let schema =
            match &self.schema {
                Some(path) => {
                    let text = std::fs::read_to_string(path).map_err(|e| {
                        CliError::Usage(format!("--schema {}: cannot be read: {e}", path.display()))
                    })?;
                    Some(crate::stats::tfdv_schema::parse_text(&text).map_err(|e| {
                        CliError::Usage(format!("--schema {}: {e}", path.display()))
                    })?)
                }
                None => None,
            };
        let mut thresholds = self.thresholds()?;
        if let Some(schema) = &schema {
            // The schema's drift thresholds, but where --threshold gives one.
            for (f, t) in crate::stats::tfdv_schema::drift_thresholds(schema) {
                thresholds.per_feature.entry(f).or_insert(t);
            }
        }
        let base = self.common.baseline(self.baseline.as_deref())?;
        let bar = output::Bar::new(&self.common, "bytes");
        let report = verifier.run(&bar);
        bar.clear();
        let mut report = report?;
        // (A set with problems is not compared: its statistics would not be its data's.)
        let anomalies = if base.is_none() && schema.is_none() {
            None
        } else if report.ok {
            Some(self.anomalies(base.as_ref(), schema.as_ref(), &thresholds)?)
        } else {
            Some(Vec::new())
        };
        let anomalous = anomalies.as_ref().is_some_and(|a| !a.is_empty());
        report.ok &= !anomalous;
        if self.common.json {
            let mut json = serde_json::to_value(&report).map_err(std::io::Error::other)?;
            if let Some(a) = &anomalies {
                json["anomalies"] = serde_json::to_value(a).map_err(std::io::Error::other)?;
            }
            output::print_json(&json)?;
        } else {
            let mut out = output::stdout();
            for p in &report.problems {
                writeln!(out, "{p}")?;
            }
            for a in anomalies.iter().flatten() {
                writeln!(out, "{a}")?;
            }
            if !self.common.quiet || !report.ok {
                let verdict = if report.ok {
                    "OK".to_owned()
                } else if report.problems.is_empty() {
                    let n = anomalies.as_ref().map_or(0, Vec::len);
                    format!("{n} {}", if n == 1 { "anomaly" } else { "anomalies" })
                } else {
                    let n = report.problems.len();
                    format!("{n} problem{}", if n == 1 { "" } else { "s" })
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
