//! `tfshard convert parquet|delta|iceberg|images|tfrecord`.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::{Args, Subcommand, ValueEnum};

use super::{output, CliError, CliResult, Common};
use crate::convert::{
    ConvertSummary, Converter, ConverterBuilder, Labels, OnError, ParquetDecoder, Partitioning,
    DEFAULT_SHUFFLE_MEMORY,
};
use crate::example::RecordType;
use crate::progress::CancelToken;
use crate::tfrecord::Compression;

/// `convert` subcommands.
#[derive(Subcommand, Debug)]
pub enum ConvertCommand {
    /// Parquet files, or folders of them, into TFRecord shards of tf.train.Example.
    #[command(
        after_help = "Examples:\n  tfshard convert parquet testdata/small.parquet -o out/\n  \
        tfshard convert parquet warehouse/events/ -o out/ --target-shard-size 128MiB --compression gzip --json"
    )]
    Parquet(ParquetArgs),
    /// One snapshot of a Delta Lake table (latest, --version or --timestamp) into shards of tf.train.Example.
    #[command(
        after_help = "Examples:\n  tfshard convert delta warehouse/events -o out/\n  \
        tfshard convert delta s3://lake/events -o s3://ml/events-v12 --version 12 --json"
    )]
    Delta(DeltaArgs),
    /// One snapshot of an Apache Iceberg table (current, --snapshot-id or --timestamp) into shards of tf.train.Example.
    #[command(
        after_help = "Examples:\n  tfshard convert iceberg warehouse/db/events -o out/\n  \
        tfshard convert iceberg s3://lake/db/events -o s3://ml/events --snapshot-id 4387213311232 --json"
    )]
    Iceberg(IcebergArgs),
    /// A folder of images, one sub-folder per class, into shards of tf.train.Example.
    #[command(after_help = "Examples:\n  tfshard convert images photos/ -o out/\n  \
        tfshard convert images photos/ -o out/ --labels labels.csv --on-error skip")]
    Images(ImagesArgs),
    /// Existing TFRecord files (any writer's), or folders of them, resharded: payloads copied byte for byte, framing and compression rewritten.
    #[command(
        after_help = "Examples:\n  tfshard convert tfrecord spark-out/ -o out/ --target-shard-size 128MiB\n  \
        tfshard convert tfrecord big.tfrecord.gz -o out/ --min-shards 8 --shuffle --json"
    )]
    Tfrecord(TfrecordArgs),
}

/// `--record-type` of `convert tfrecord`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputRecordType {
    /// The type the manifest (ours, or TFDS's) beside the inputs says, else example.
    Auto,
    /// tf.train.Example.
    Example,
    /// tf.train.SequenceExample.
    SequenceExample,
    /// Opaque payloads: copied without parsing; the manifest lists no features.
    Bytes,
}

/// Arguments of `convert tfrecord`.
#[derive(Args, Debug)]
pub struct TfrecordArgs {
    /// TFRecord files, folders (walked for *.tfrecord*, *.tfrec*, *-of-* and part-* files, or read as the manifest or dataset_info.json in them lists), manifests or store URLs, in the order given.
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
    #[command(flatten)]
    pub shard: ShardFlags,
    /// What the payloads are: parsed to infer the manifest's features (never rewritten).
    #[arg(long, value_enum, default_value_t = InputRecordType::Auto)]
    pub record_type: InputRecordType,
    /// Compression of the inputs: auto detects it per file (by .gz/.zlib, else by the first bytes).
    #[arg(long, value_enum, default_value_t = super::ReadCompression::Auto)]
    pub input_compression: super::ReadCompression,
    /// Spread the conversion over N workers (machines); each converts its share of the input files (by bytes) into a part; then run `tfshard finalize`.
    #[arg(long, value_name = "N", requires = "worker_index")]
    pub num_workers: Option<u64>,
    /// This worker's index, 0 to N-1 (e.g. $JOB_COMPLETION_INDEX).
    #[arg(long, value_name = "I", requires = "num_workers")]
    pub worker_index: Option<u64>,
    #[command(flatten)]
    pub common: Common,
}

impl TfrecordArgs {
    /// Resolves flags into the library's builder.
    pub fn to_builder(&self) -> Result<ConverterBuilder, CliError> {
        let mut builder = self
            .shard
            .apply(Converter::tfrecord(self.inputs.clone()))?
            .with_threads(self.common.thread_count())
            .with_io(self.common.io()?);
        let record_type = match self.record_type {
            InputRecordType::Auto => None,
            InputRecordType::Example => Some(RecordType::Example),
            InputRecordType::SequenceExample => Some(RecordType::SequenceExample),
            InputRecordType::Bytes => Some(RecordType::Bytes),
        };
        if let Some(t) = record_type {
            builder = builder.with_record_type(t);
        }
        if let Some(c) = self.input_compression.resolve() {
            builder = builder.with_input_compression(c);
        }
        if let (Some(count), Some(index)) = (self.num_workers, self.worker_index) {
            builder = builder.with_worker(count, index);
        }
        Ok(builder)
    }
}

/// `--on-error`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnErrorFlag {
    /// Stop with exit 1 naming the file.
    Fail,
    /// Leave it out, warn, and list it in the manifest's `skipped`.
    Skip,
}

/// Arguments of `convert images`.
#[derive(Args, Debug)]
pub struct ImagesArgs {
    /// The image folder.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    #[command(flatten)]
    pub shard: ShardFlags,
    /// Labels: `dirname` (each first-level folder is a class, sorted, 0..K-1), `none`, or a CSV file with columns filename,label.
    #[arg(long, value_name = "dirname|none|FILE.csv", default_value = "dirname")]
    pub labels: String,
    /// File extensions to read (case-insensitive) [default: jpg,jpeg,png,gif,bmp,webp].
    #[arg(long, value_delimiter = ',', value_name = "EXT,EXT")]
    pub extensions: Option<Vec<String>>,
    /// A file that is not a readable image: stop (fail) or leave it out (skip).
    #[arg(long, value_enum, default_value_t = OnErrorFlag::Fail)]
    pub on_error: OnErrorFlag,
    #[command(flatten)]
    pub common: Common,
}

impl ImagesArgs {
    /// Resolves flags into the library's builder.
    pub fn to_builder(&self) -> Result<ConverterBuilder, CliError> {
        let mut builder = self
            .shard
            .apply(Converter::images(self.dir.clone()))?
            .with_threads(self.common.thread_count())
            .with_io(self.common.io()?)
            .with_labels(match self.labels.as_str() {
                "dirname" => Labels::DirName,
                "none" => Labels::None,
                file => Labels::Csv(PathBuf::from(file)),
            })
            .with_on_error(match self.on_error {
                OnErrorFlag::Fail => OnError::Fail,
                OnErrorFlag::Skip => OnError::Skip,
            });
        if let Some(given) = &self.extensions {
            let extensions = given
                .iter()
                .map(|e| e.trim_start_matches('.').to_owned())
                .collect();
            builder = builder.with_extensions(extensions);
        }
        Ok(builder)
    }
}

/// `--compression` of writers.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteCompression {
    /// Plain records.
    None,
    /// One gzip member per shard (TensorFlow: compression_type="GZIP").
    Gzip,
    /// One zlib stream per shard (TensorFlow: compression_type="ZLIB").
    Zlib,
}

/// `--record-type` of writers.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteRecordType {
    /// tf.train.Example.
    Example,
    /// tf.train.SequenceExample: lists of lists become feature_lists.
    SequenceExample,
}

/// Flags every conversion takes.
#[derive(Args, Debug, Clone)]
pub struct ShardFlags {
    /// Output folder (created if missing).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: PathBuf,
    /// Target size of a shard on disk: B, KB, MB, GB (powers of 1000), KiB, MiB, GiB.
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    pub target_shard_size: String,
    /// At most N records per shard.
    #[arg(long, value_name = "N")]
    pub max_records_per_shard: Option<u64>,
    /// At least N shards (one per training worker), cut evenly by bytes when the output is small.
    #[arg(long, value_name = "N")]
    pub min_shards: Option<u64>,
    /// Shard name prefix: PREFIX-00000-of-00012.tfrecord [default: data].
    #[arg(long, value_name = "NAME")]
    pub prefix: Option<String>,
    /// Also write the layout TensorFlow Datasets loads: shards, manifests and TFDS's
    /// files in OUT/NAME/1.0.0 (tfds.builder_from_directory("OUT/NAME/1.0.0")).
    #[arg(long, value_name = "NAME")]
    pub tfds: Option<String>,
    /// Compression of the shards.
    #[arg(long, value_enum, default_value_t = WriteCompression::None)]
    pub compression: WriteCompression,
    /// Replace this prefix's shards and manifest in a non-empty output folder.
    #[arg(long)]
    pub overwrite: bool,
    /// Reuse the shards an interrupted or killed run finished (checked by size and CRC32C), and keep this run's if it is interrupted.
    #[arg(long)]
    pub resume: bool,
    /// Convert only what the inputs gained or changed since the set in OUT, as a new generation of it (shards that held changed or removed records are retired and their live records converted again).
    #[arg(long)]
    pub append: bool,
    /// With --append: keep the last N generations' pinned manifests (OUT/PREFIX.manifest-gNNNNN.json) and the shards they list, for training runs that pinned them.
    #[arg(long, value_name = "N")]
    pub retain: Option<u32>,
    /// Also write an NVIDIA DALI index ({shard}.idx) per shard (uncompressed only).
    #[arg(long)]
    pub index: bool,
    /// Count the statistics of the records written (TFDV's format): PREFIX.stats.pb, named in the manifest, and each shard's partial statistics beside it ({shard}.stats), so appends, workers and resumed runs keep them exact. An append must use the set's choice.
    #[arg(long, overrides_with = "no_stats")]
    pub stats: bool,
    /// Do not count statistics (the default for now).
    #[arg(long, overrides_with = "stats")]
    pub no_stats: bool,
    #[command(flatten)]
    pub shuffle: ShuffleFlags,
}

/// The shuffle and split flags.
#[derive(Args, Debug, Clone)]
pub struct ShuffleFlags {
    /// Write the records in a global, seeded random order (an external sort in bounded memory).
    #[arg(long)]
    pub shuffle: bool,
    /// Seed of --shuffle and of position-based --split.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Memory for --shuffle's in-memory sorts (the output does not depend on it) [default: 1GiB].
    #[arg(long, value_name = "SIZE")]
    pub shuffle_memory: Option<String>,
    /// Folder for --shuffle's temporary files, and for shards before upload to a URL output [default: a hidden folder in the output folder; $TMPDIR for a URL output].
    #[arg(long, value_name = "DIR")]
    pub tmp_dir: Option<PathBuf>,
    /// Split the records: NAME=FRACTION,... (fractions sum to 1); each split gets its own shards and manifest, named by the split.
    #[arg(long, value_name = "NAME=FRACTION,...")]
    pub split: Option<String>,
    /// Assign splits by a stable hash of this column's value (stays put when rows are added or reordered).
    #[arg(long, value_name = "COLUMN")]
    pub split_key: Option<String>,
}

/// Parses `train=0.8,validation=0.1,test=0.1` (the library checks the names and that
/// the fractions sum to 1).
pub fn parse_splits(text: &str) -> Result<Vec<(String, f64)>, CliError> {
    let mut out: Vec<(String, f64)> = Vec::new();
    for part in text.split(',') {
        let Some((name, fraction)) = part.split_once('=') else {
            return Err(CliError::Usage(format!(
                "invalid --split {part:?}: use NAME=FRACTION"
            )));
        };
        let fraction: f64 = fraction.trim().parse().map_err(|_| {
            CliError::Usage(format!("invalid --split fraction in {part:?}: a number"))
        })?;
        out.push((name.trim().to_owned(), fraction));
    }
    Ok(out)
}

impl ShuffleFlags {
    fn apply(&self, mut builder: ConverterBuilder) -> Result<ConverterBuilder, CliError> {
        builder = builder.with_seed(self.seed);
        if self.shuffle {
            let memory_bytes = match &self.shuffle_memory {
                Some(size) => parse_size(size)?,
                None => DEFAULT_SHUFFLE_MEMORY,
            };
            builder = builder.with_shuffle(memory_bytes);
        }
        if let Some(dir) = &self.tmp_dir {
            builder = builder.with_tmp_dir(dir.clone());
        }
        if let Some(split) = &self.split {
            builder = builder.with_splits(parse_splits(split)?);
        }
        if let Some(key) = &self.split_key {
            builder = builder.with_split_key(key.clone());
        }
        Ok(builder)
    }
}

/// Arguments of `convert parquet`.
#[derive(Args, Debug)]
pub struct ParquetArgs {
    /// Parquet files, or folders walked for *.parquet, in the order given.
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
    #[command(flatten)]
    pub shard: ShardFlags,
    #[command(flatten)]
    pub table: TableFlags,
    /// Count Hive key=value folders from here (a folder or URL holding the inputs) [default: each folder input].
    #[arg(long, value_name = "DIR|URL")]
    pub partition_base: Option<PathBuf>,
    /// Hive partition features: auto (when every file has the same keys), hive (required) or none.
    #[arg(long, value_enum, default_value_t = PartitioningFlag::Auto)]
    pub partitioning: PartitioningFlag,
    #[command(flatten)]
    pub common: Common,
}

/// Arguments of `convert delta`.
#[derive(Args, Debug)]
pub struct DeltaArgs {
    /// The Delta table: a folder or a store URL (the folder holding _delta_log/).
    #[arg(value_name = "TABLE")]
    pub table_path: PathBuf,
    #[command(flatten)]
    pub shard: ShardFlags,
    #[command(flatten)]
    pub table: TableFlags,
    /// The snapshot as of commit N [default: the latest].
    #[arg(long, value_name = "N", conflicts_with = "timestamp")]
    pub version: Option<u64>,
    /// The last commit at or before this time (RFC 3339, e.g. 2026-11-30T00:00:00Z).
    #[arg(long, value_name = "T")]
    pub timestamp: Option<String>,
    /// Keep the data files of this partition value: KEY=VALUE as the log writes it (repeatable; all must hold).
    #[arg(long, value_name = "KEY=VALUE")]
    pub partition_filter: Vec<String>,
    #[command(flatten)]
    pub common: Common,
}

/// Arguments of `convert iceberg`.
#[derive(Args, Debug)]
pub struct IcebergArgs {
    /// The Iceberg table: its folder or store URL (holding metadata/), or one *.metadata.json.
    #[arg(value_name = "TABLE")]
    pub table_path: PathBuf,
    #[command(flatten)]
    pub shard: ShardFlags,
    #[command(flatten)]
    pub table: TableFlags,
    /// The snapshot with this id [default: the current one].
    #[arg(
        long,
        value_name = "N",
        conflicts_with = "timestamp",
        allow_negative_numbers = true
    )]
    pub snapshot_id: Option<i64>,
    /// The snapshot current at this time, by the table's snapshot log (RFC 3339, e.g. 2026-11-30T00:00:00Z).
    #[arg(long, value_name = "T")]
    pub timestamp: Option<String>,
    /// Keep the data files of this partition value: KEY=VALUE, KEY a partition field (or an identity field's column), a date as 2026-11-30 (repeatable; all must hold).
    #[arg(long, value_name = "KEY=VALUE")]
    pub partition_filter: Vec<String>,
    #[command(flatten)]
    pub common: Common,
}

/// The flags of a table's columns and workers (`convert parquet`, `delta` and `iceberg`).
#[derive(Args, Debug)]
pub struct TableFlags {
    /// Keep only these columns (flattened names like parent/child; a struct's name keeps all its children).
    #[arg(long, value_delimiter = ',', value_name = "A,B")]
    pub columns: Option<Vec<String>>,
    /// Drop these columns.
    #[arg(long, value_delimiter = ',', value_name = "C,D")]
    pub exclude: Vec<String>,
    /// Rename a column's feature: --rename old=new (repeatable).
    #[arg(long, value_name = "OLD=NEW")]
    pub rename: Vec<String>,
    /// Message type of the records.
    #[arg(long, value_enum, default_value_t = WriteRecordType::Example)]
    pub record_type: WriteRecordType,
    /// Spread the conversion over N workers (machines); each converts its share of the row groups into a part; then run `tfshard finalize`.
    #[arg(long, value_name = "N", requires = "worker_index")]
    pub num_workers: Option<u64>,
    /// This worker's index, 0 to N-1 (e.g. $JOB_COMPLETION_INDEX).
    #[arg(long, value_name = "I", requires = "num_workers")]
    pub worker_index: Option<u64>,
    /// Which decoder reads the columns: auto (fixed-size lists of numbers without nulls through tfshard's own page decoder, the rest through arrow-rs) or arrow-rs (every column through arrow-rs; the output is the same).
    #[arg(long, value_enum, default_value_t = DecoderFlag::Auto)]
    pub parquet_decoder: DecoderFlag,
}

impl TableFlags {
    fn apply(&self, mut builder: ConverterBuilder) -> Result<ConverterBuilder, CliError> {
        builder = builder
            .with_record_type(match self.record_type {
                WriteRecordType::Example => RecordType::Example,
                WriteRecordType::SequenceExample => RecordType::SequenceExample,
            })
            .with_parquet_decoder(match self.parquet_decoder {
                DecoderFlag::Auto => ParquetDecoder::Auto,
                DecoderFlag::ArrowRs => ParquetDecoder::ArrowRs,
            });
        if let Some(columns) = &self.columns {
            builder = builder.with_columns(columns.clone());
        }
        if !self.exclude.is_empty() {
            builder = builder.with_exclude(self.exclude.clone());
        }
        if !self.rename.is_empty() {
            builder = builder.with_rename(parse_rename(&self.rename)?);
        }
        if let (Some(count), Some(index)) = (self.num_workers, self.worker_index) {
            builder = builder.with_worker(count, index);
        }
        Ok(builder)
    }
}

/// `--parquet-decoder`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecoderFlag {
    /// Fixed-size lists through tfshard's decoder where it can, the rest through arrow-rs.
    Auto,
    /// Every column through arrow-rs.
    ArrowRs,
}

/// `--partitioning`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitioningFlag {
    /// On when every file has the same keys in the same order.
    Auto,
    /// Required: an error unless every file has the same keys.
    Hive,
    /// Off.
    None,
}

/// `--target-shard-size` and the like: [`crate::units::parse_size`], a usage error.
pub fn parse_size(text: &str) -> Result<u64, CliError> {
    crate::units::parse_size(text).map_err(CliError::Usage)
}

fn parse_rename(pairs: &[String]) -> Result<Vec<(String, String)>, CliError> {
    pairs
        .iter()
        .map(|p| match p.split_once('=') {
            Some((old, new)) if !old.is_empty() && !new.is_empty() => {
                Ok((old.to_owned(), new.to_owned()))
            }
            _ => Err(CliError::Usage(format!(
                "invalid --rename {p:?}: use --rename old=new"
            ))),
        })
        .collect()
}

impl ShardFlags {
    fn apply(&self, builder: ConverterBuilder) -> Result<ConverterBuilder, CliError> {
        let mut builder = builder
            .with_target_shard_bytes(parse_size(&self.target_shard_size)?)
            .with_compression(match self.compression {
                WriteCompression::None => Compression::None,
                WriteCompression::Gzip => Compression::Gzip,
                WriteCompression::Zlib => Compression::Zlib,
            })
            .with_index(self.index)
            .with_stats(self.stats && !self.no_stats)
            .with_overwrite(self.overwrite)
            .with_append(self.append)
            .with_resume(self.resume);
        if let Some(prefix) = &self.prefix {
            builder = builder.with_prefix(prefix.clone());
        }
        if let Some(n) = self.retain {
            builder = builder.with_retain(n);
        }
        if let Some(n) = self.max_records_per_shard {
            builder = builder.with_max_records_per_shard(n);
        }
        if let Some(n) = self.min_shards {
            builder = builder.with_min_shards(n);
        }
        let output = match &self.tfds {
            Some(name) => {
                builder = builder.with_tfds(name.clone());
                crate::tfds::version_dir(&self.output, name)
            }
            None => self.output.clone(),
        };
        let builder = self.shuffle.apply(builder)?;
        Ok(builder.with_output(output))
    }
}

impl ParquetArgs {
    /// Resolves flags into the library's builder.
    pub fn to_builder(&self) -> Result<ConverterBuilder, CliError> {
        let builder = Converter::parquet(self.inputs.clone());
        let mut builder = self.table.apply(self.shard.apply(builder)?)?;
        // (Auto is the library's default.)
        if self.partitioning != PartitioningFlag::Auto {
            builder = builder.with_partitioning(match self.partitioning {
                PartitioningFlag::Auto => Partitioning::Auto,
                PartitioningFlag::Hive => Partitioning::Hive,
                PartitioningFlag::None => Partitioning::None,
            });
        }
        if let Some(base) = &self.partition_base {
            builder = builder.with_partition_base(base.clone());
        }
        Ok(builder
            .with_threads(self.common.thread_count())
            .with_io(self.common.io()?))
    }
}

impl DeltaArgs {
    /// Resolves flags into the library's builder.
    pub fn to_builder(&self) -> Result<ConverterBuilder, CliError> {
        let mut builder = Converter::delta(self.table_path.clone());
        if let Some(v) = self.version {
            builder = builder.with_version(v);
        }
        let flags = (&self.shard, &self.table, &self.common);
        table_flags(
            builder,
            flags,
            self.timestamp.as_ref(),
            &self.partition_filter,
        )
    }
}

impl IcebergArgs {
    /// Resolves flags into the library's builder.
    pub fn to_builder(&self) -> Result<ConverterBuilder, CliError> {
        let mut builder = Converter::iceberg(self.table_path.clone());
        if let Some(id) = self.snapshot_id {
            builder = builder.with_snapshot_id(id);
        }
        let flags = (&self.shard, &self.table, &self.common);
        table_flags(
            builder,
            flags,
            self.timestamp.as_ref(),
            &self.partition_filter,
        )
    }
}

/// The flags `convert delta` and `convert iceberg` share: shards, columns, workers,
/// `--timestamp` and `--partition-filter`.
fn table_flags(
    builder: ConverterBuilder,
    (shard, table, common): (&ShardFlags, &TableFlags, &Common),
    timestamp: Option<&String>,
    filters: &[String],
) -> Result<ConverterBuilder, CliError> {
    let mut builder = table
        .apply(shard.apply(builder)?)?
        .with_threads(common.thread_count())
        .with_io(common.io()?);
    if let Some(t) = timestamp {
        builder = builder.with_timestamp(t.clone());
    }
    for filter in filters {
        let Some((key, value)) = filter.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            return Err(CliError::Usage(format!(
                "invalid --partition-filter {filter:?}: use KEY=VALUE"
            )));
        };
        builder = builder.with_partition_filter(key, value);
    }
    Ok(builder)
}

/// SIGINT/SIGTERM cancel the run (which removes its temporaries) and record which
/// signal came, for the exit code; a second one ends the process at once.
fn install_signal_handlers(cancel: &CancelToken) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let seen = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        let _ = signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, seen.clone());
        let _ = signal_hook::flag::register(sig, seen.clone());
        let _ = signal_hook::flag::register_usize(sig, super::signal_received(), sig as usize);
        let _ = signal_hook::flag::register(sig, cancel.flag());
    }
}

/// Prints the summary: JSON with `--json`, a short report otherwise.
fn report(common: &Common, summary: &ConvertSummary) -> CliResult {
    if common.json {
        output::print_json(&summary.to_json())?;
    } else if !common.quiet {
        if let Some(a) = &summary.append {
            if let Some(why) = &a.reconverted {
                println!("{why}: every generation retired, the snapshot converted again");
            }
            if a.up_to_date {
                let at = match &summary.table {
                    Some(t) => format!("at {}", t.snapshot_words()),
                    None => "(no input gained or changed)".into(),
                };
                println!("up to date {at}: nothing written");
                return Ok(());
            }
            println!(
                "generation {}: {} shard{} retired",
                a.generation,
                a.retired,
                if a.retired == 1 { "" } else { "s" }
            );
        }
        println!(
            "wrote {} records in {} shard{} ({:.1} MB) to {} in {:.2} s ({:.0} MB/s)",
            summary.records,
            summary.shards,
            if summary.shards == 1 { "" } else { "s" },
            summary.bytes as f64 / 1e6,
            summary.output.display(),
            summary.seconds,
            output::mb_per_sec(summary.bytes, summary.seconds),
        );
        if let Some(t) = &summary.table {
            match &t.timestamp {
                Some(at) => println!(
                    "read {} table {} at {} (committed {at})",
                    t.format,
                    t.location,
                    t.snapshot_words()
                ),
                None if t.format == "iceberg" => {
                    println!("read iceberg table {}: no snapshot yet", t.location)
                }
                None => println!("read {} table {}: no commit yet", t.format, t.location),
            }
        }
        if let Some(m) = &summary.manifest {
            println!("manifest: {}", m.display());
        }
        if let Some(r) = summary.reused {
            println!(
                "reused {} shard{} ({:.1} MB) that an earlier run had finished; {} of their records not read again",
                r.shards,
                if r.shards == 1 { "" } else { "s" },
                r.bytes as f64 / 1e6,
                r.unread_records
            );
        }
        for s in &summary.splits {
            println!(
                "{}: {} records in {} shards, manifest: {}",
                s.name,
                s.records,
                s.shards,
                s.manifest.display()
            );
        }
    }
    Ok(())
}

impl ConvertCommand {
    /// The common flags of the subcommand.
    pub fn common(&self) -> &Common {
        match self {
            ConvertCommand::Parquet(args) => &args.common,
            ConvertCommand::Delta(args) => &args.common,
            ConvertCommand::Iceberg(args) => &args.common,
            ConvertCommand::Images(args) => &args.common,
            ConvertCommand::Tfrecord(args) => &args.common,
        }
    }

    /// Runs the conversion.
    pub fn run(self) -> CliResult {
        let (builder, unit) = match &self {
            ConvertCommand::Parquet(args) => (args.to_builder()?, "rows"),
            ConvertCommand::Delta(args) => (args.to_builder()?, "rows"),
            ConvertCommand::Iceberg(args) => (args.to_builder()?, "rows"),
            ConvertCommand::Images(args) => (args.to_builder()?, "files"),
            ConvertCommand::Tfrecord(args) => (args.to_builder()?, "bytes"),
        };
        let common = self.common();
        let converter = builder.build()?;
        install_signal_handlers(&converter.options().cancel);
        let bar = output::Bar::new(common, unit);
        let result = converter.run(&bar);
        bar.clear();
        let summary = result?;
        if summary.skipped > 0 && !common.quiet {
            eprintln!(
                "warning: skipped {} file{} (listed with reasons in the manifest's \"skipped\")",
                summary.skipped,
                if summary.skipped == 1 { "" } else { "s" }
            );
        }
        report(common, &summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renames() {
        assert_eq!(
            parse_rename(&["a=b".into()]).unwrap(),
            vec![("a".into(), "b".into())]
        );
        assert!(parse_rename(&["ab".into()]).is_err());
        assert!(parse_rename(&["=b".into()]).is_err());
    }
}
