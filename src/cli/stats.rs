//! `tfshard stats PATH...`: statistics of the records of shards or any TFRecord files, as
//! a table, as JSON, or as TFDV's `DatasetFeatureStatisticsList`.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::{output, CliError, CliResult, Common, ReadFlags};
use crate::describe::{statistics, StatsReader};
use crate::records::ReadSettings;
use crate::stats::{summarize, to_json, to_tfdv_bytes, FeatureSummary};

/// `--format`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One line per feature (or the JSON of `--json`).
    Table,
    /// TFDV's `DatasetFeatureStatisticsList`, binary, written to `-o FILE`
    /// (`tfdv.load_stats_binary` reads it).
    Tfdv,
}

/// Arguments of `stats`.
#[derive(Args, Debug)]
pub struct StatsArgs {
    /// Shards, folders of shards, or manifests.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Where `--format tfdv` writes.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write a self-contained HTML page: per feature its numbers and a chart (histogram or top values), the baseline's beside it.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Only generation G of the set (`--append`'s): merged from its shards' kept partial statistics, else computed from its shards.
    #[arg(long, value_name = "G")]
    pub generation: Option<u32>,
    /// Show a baseline's statistics beside these (another set, TFRecord files, or a statistics file, ours or TFDV's): in --html, and in --json under "baseline".
    #[arg(long, value_name = "BASE")]
    pub baseline: Option<PathBuf>,
    #[command(flatten)]
    pub read: ReadFlags,
    #[command(flatten)]
    pub common: Common,
}

impl StatsArgs {
    /// Computes and prints (or writes) the statistics.
    pub fn run(&self) -> CliResult {
        if self.format == Format::Tfdv && self.output.is_none() {
            return Err(CliError::Usage(
                "--format tfdv writes a binary file: give it with -o FILE".into(),
            ));
        }
        let reader = StatsReader::builder(self.paths.clone())
            .with_io(self.common.io()?)
            .with_reading(
                self.read.compression.resolve(),
                self.read.record_type.resolve(),
            )
            .with_generation(self.generation)
            .build()?;
        let base = self.common.baseline(self.baseline.as_deref())?;
        let bar = output::Bar::new(&self.common, "bytes");
        let quiet = self.common.quiet;
        let stats = statistics(&reader, &bar, &mut |path| {
            if !quiet {
                eprintln!(
                    "note: {} is not the manifest's (an interrupted writer's): computing the \
                     statistics from the shards",
                    path.display()
                );
            }
        });
        bar.clear();
        let stats = stats?;
        if let Some(path) = &self.html {
            let title = self
                .paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" ");
            let page = crate::stats::html::page(&title, &stats, base.as_ref());
            crate::store::atomic::write_atomic(path, page.as_bytes(), false)?;
            if !self.common.json && !self.common.quiet {
                eprintln!(
                    "wrote {} ({} features{})",
                    path.display(),
                    stats.features.len(),
                    if base.is_some() {
                        ", the baseline beside them"
                    } else {
                        ""
                    }
                );
            }
        }
        if let Some(path) = &self.output {
            let bytes = to_tfdv_bytes(&stats);
            crate::store::atomic::write_atomic(path, &bytes, false)?;
            if !self.common.json && !self.common.quiet {
                eprintln!(
                    "wrote {} ({} bytes, {} features, {} records)",
                    path.display(),
                    bytes.len(),
                    stats.features.len(),
                    stats.num_examples
                );
            }
            if self.format == Format::Tfdv && !self.common.json {
                return Ok(());
            }
        }
        if self.common.json {
            let mut json = to_json(&stats);
            if let Some(base) = &base {
                json["baseline"] = to_json(base);
            }
            let mut out = output::stdout();
            serde_json::to_writer(&mut out, &json).map_err(std::io::Error::other)?;
            out.write_all(b"\n")?;
            out.flush()?;
            return Ok(());
        }
        let features = summarize(&stats);
        let mut out = output::stdout();
        writeln!(
            out,
            "{} records, {} features",
            stats.num_examples,
            features.len()
        )?;
        let width = features
            .iter()
            .map(|f| f.name.len())
            .max()
            .unwrap_or(0)
            .max(7);
        writeln!(
            out,
            "{:width$}  {:6}  {:>7}  values",
            "feature", "type", "present"
        )?;
        for f in &features {
            writeln!(out, "{}", line(f, stats.num_examples, width))?;
        }
        out.flush()?;
        Ok(())
    }
}

/// One feature's line: name, type, present %, then min / mean / max and the deciles as a
/// bar, or the unique count and the top values.
fn line(f: &FeatureSummary, records: u64, width: usize) -> String {
    let present = if records == 0 {
        0.0
    } else {
        100.0 * f.present as f64 / records as f64
    };
    let mut s = format!("{:width$}  {:6}  {:>6.1}%  ", f.name, f.kind, present);
    if let Some(n) = &f.numbers {
        s += &format!(
            "min {} mean {} max {}  {}",
            short(n.min),
            short(n.mean),
            short(n.max),
            decile_bar(&n.deciles, n.min, n.max)
        );
        if n.nan > 0 {
            s += &format!("  NaN {}", n.nan);
        }
    } else if let Some(t) = &f.strings {
        let top: Vec<String> = t
            .top_values
            .iter()
            .take(3)
            .map(|(v, c)| format!("{:?} {c}", clip(v)))
            .collect();
        s += &format!("{} unique", t.unique);
        if !top.is_empty() {
            s += &format!("  top {}", top.join(", "));
        }
    }
    s
}

/// A number in at most 4 significant digits.
fn short(v: f64) -> String {
    if v.is_finite() && v != 0.0 && (v.abs() >= 1e6 || v.abs() < 1e-3) {
        format!("{v:.3e}")
    } else if v.is_finite() && v.fract() != 0.0 {
        format!("{v:.4}")
    } else {
        format!("{v}")
    }
}

fn clip(v: &str) -> String {
    if v.chars().count() > 16 {
        v.chars().take(15).collect::<String>() + "…"
    } else {
        v.to_owned()
    }
}

/// Where each decile falls between min and max, as one of eight block heights.
fn decile_bar(deciles: &[f64], min: f64, max: f64) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if !(min.is_finite() && max.is_finite()) || max <= min {
        return String::new();
    }
    deciles
        .iter()
        .map(|d| {
            let at = ((d - min) / (max - min) * 7.0).round().clamp(0.0, 7.0);
            BLOCKS[at as usize]
        })
        .collect()
}
