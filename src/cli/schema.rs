//! `tfshard schema PATH...`: the feature spec, as JSON or as a Python parsing spec; or a
//! TFDV `Schema` inferred from the statistics.

use std::io::Write;

use clap::{Args, ValueEnum};

use super::{output, CliResult, Common, ReadFlags};
use crate::example::schema::to_python;
use crate::records::{ReadSettings, SchemaReader};

/// `--format`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The manifest's `features` list.
    Json,
    /// A dict to paste into `tf.io.parse_example` (a tuple for SequenceExamples).
    Python,
    /// A TFDV `Schema` in text format, inferred from the statistics (stored, or computed
    /// from the records): what `verify --schema` reads.
    Tfdv,
}

/// Arguments of `schema`.
#[derive(Args, Debug)]
pub struct SchemaArgs {
    /// Shards, folders of shards, or manifests.
    #[arg(required = true)]
    pub paths: Vec<std::path::PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
    #[command(flatten)]
    pub read: ReadFlags,
    #[command(flatten)]
    pub common: Common,
}

impl SchemaArgs {
    /// Prints the spec.
    pub fn run(&self) -> CliResult {
        if self.format == Format::Tfdv {
            let reader = crate::describe::StatsReader::builder(self.paths.clone())
                .with_io(self.common.io()?)
                .with_reading(
                    self.read.compression.resolve(),
                    self.read.record_type.resolve(),
                )
                .build()?;
            let bar = output::Bar::new(&self.common, "bytes");
            let stats = crate::describe::statistics(&reader, &bar, &mut |_| {});
            bar.clear();
            let mut out = output::stdout();
            out.write_all(crate::stats::tfdv_schema::infer_text(&stats?).as_bytes())?;
            out.flush()?;
            return Ok(());
        }
        let mut reader = SchemaReader::builder(self.paths.clone()).with_io(self.common.io()?);
        reader = reader.with_reading(
            self.read.compression.resolve(),
            self.read.record_type.resolve(),
        );
        let schema = reader.build()?.run()?;
        let (spec, record_type) = (schema.features, schema.record_type);
        let mut out = output::stdout();
        match self.format {
            Format::Json => {
                serde_json::to_writer_pretty(&mut out, &spec).map_err(std::io::Error::other)?;
                out.write_all(b"\n")?;
            }
            Format::Python => writeln!(out, "{}", to_python(&spec, record_type))?,
            Format::Tfdv => unreachable!("written above"),
        }
        out.flush()?;
        Ok(())
    }
}
