//! The front door of conversions: [`Converter`]'s constructors, one per kind of input,
//! and [`ConverterBuilder`]'s setters, which refuse what does not apply to the input;
//! `build()` checks every rule about the options before anything is read.

use std::path::{Path, PathBuf};

use super::{
    parquet, run, ArrowStream, ConvertOptions, ConvertSummary, DeltaOptions, IcebergOptions,
    ImageOptions, Labels, OnError, Open, ParquetDecoder, Partitioning, ShuffleOptions,
    TfrecordOptions, WorkerShare,
};
use crate::error::{Error, Result};
use crate::example::RecordType;
use crate::progress::{CancelToken, Progress};
use crate::store;
use crate::tfrecord::Compression;

/// What a converter reads.
#[derive(Debug, Clone)]
enum Input {
    Parquet,
    Arrow(ArrowStream),
    Delta(DeltaOptions),
    Iceberg(IcebergOptions),
    Images(ImageOptions),
    Tfrecord(TfrecordOptions),
}

/// Builds a [`Converter`]: `Converter::parquet(inputs)` or `Converter::images(dir)`.
#[derive(Debug, Clone)]
pub struct ConverterBuilder {
    options: ConvertOptions,
    input: Input,
    /// The first setter that does not apply to the source (`build()` refuses it).
    misapplied: Option<&'static str>,
}

/// A checked conversion, ready to run (see the module docs).
#[derive(Debug)]
pub struct Converter {
    options: ConvertOptions,
    source: Box<dyn Open>,
    pool: rayon::ThreadPool,
}

impl Converter {
    /// Parquet files, or folders walked for `*.parquet`, in the order given.
    pub fn parquet(inputs: Vec<PathBuf>) -> ConverterBuilder {
        ConverterBuilder {
            options: ConvertOptions::new(inputs, PathBuf::new()),
            input: Input::Parquet,
            misapplied: None,
        }
    }

    /// The record batches of an Arrow stream, in stream order, with the Parquet mapping
    /// (the Python module's `convert` of a pyarrow Table, a polars DataFrame, a DuckDB
    /// relation). Read once: `--min-shards`, `--resume`, `--num-workers` and Hive
    /// partitioning do not apply.
    pub fn arrow(stream: ArrowStream) -> ConverterBuilder {
        ConverterBuilder {
            options: ConvertOptions::new(vec![stream.name().into()], PathBuf::new()),
            input: Input::Arrow(stream),
            misapplied: None,
        }
    }

    /// One snapshot of a Delta Lake table (a folder or a store URL): the latest, or the
    /// one [`ConverterBuilder::with_version`] or [`ConverterBuilder::with_timestamp`]
    /// names.
    pub fn delta(table: impl Into<PathBuf>) -> ConverterBuilder {
        ConverterBuilder {
            options: ConvertOptions::new(vec![table.into()], PathBuf::new()),
            input: Input::Delta(DeltaOptions::default()),
            misapplied: None,
        }
    }

    /// One snapshot of an Apache Iceberg table (its root, a folder or a store URL, or one
    /// `*.metadata.json`): the current one, or the one
    /// [`ConverterBuilder::with_snapshot_id`] or [`ConverterBuilder::with_timestamp`]
    /// names.
    pub fn iceberg(table: impl Into<PathBuf>) -> ConverterBuilder {
        ConverterBuilder {
            options: ConvertOptions::new(vec![table.into()], PathBuf::new()),
            input: Input::Iceberg(IcebergOptions::default()),
            misapplied: None,
        }
    }

    /// Existing TFRecord files, folders of them (walked for TFRecord names, or read in
    /// the order a manifest or TFDS's `dataset_info.json` beside them gives) and store
    /// URLs: their payloads written again, byte for byte, into this run's shards.
    pub fn tfrecord(inputs: Vec<PathBuf>) -> ConverterBuilder {
        ConverterBuilder {
            options: ConvertOptions::new(inputs, PathBuf::new()),
            input: Input::Tfrecord(TfrecordOptions::default()),
            misapplied: None,
        }
    }

    /// A folder of images, one sub-folder per class (labels from folder names, the
    /// common extensions, a bad file stops the run; see [`ImageOptions`]).
    pub fn images(dir: impl Into<PathBuf>) -> ConverterBuilder {
        ConverterBuilder {
            options: ConvertOptions::new(vec![dir.into()], PathBuf::new()),
            input: Input::Images(ImageOptions::default()),
            misapplied: None,
        }
    }

    /// The options the run follows.
    pub fn options(&self) -> &ConvertOptions {
        &self.options
    }

    /// Converts: reads every input, writes the shards and commits them with their
    /// manifests, on the run's own thread pool.
    ///
    /// # Errors
    ///
    /// Bad input (named by file, column and row), a non-empty output folder without
    /// overwrite, an I/O error, or [`Interrupted`](crate::error::ErrorKind::Interrupted) once the cancel token is
    /// cancelled. On any error the output folder holds none of this run's files, and an
    /// earlier run's output is left as it was.
    pub fn run(&self, progress: &dyn Progress) -> Result<ConvertSummary> {
        let options = &self.options;
        self.pool.install(|| run(options, &*self.source, progress))
    }
}

impl ConverterBuilder {
    /// Records that `option` does not apply to this converter's source: `build()`
    /// refuses it, rather than ignoring it.
    fn only_for(mut self, images: bool, option: &'static str) -> Self {
        let is_images = matches!(self.input, Input::Images(_));
        if is_images != images && self.misapplied.is_none() {
            self.misapplied = Some(option);
        }
        self
    }

    /// Records that `option` does not apply to TFRecord inputs.
    fn not_for_tfrecord(mut self, option: &'static str) -> Self {
        if matches!(self.input, Input::Tfrecord(_)) {
            self.misapplied.get_or_insert(option);
        }
        self
    }

    /// The inputs' compression (default: detected per file, by name, else by the first
    /// bytes). TFRecord inputs only.
    pub fn with_input_compression(mut self, compression: Compression) -> Self {
        match &mut self.input {
            Input::Tfrecord(t) => t.input_compression = Some(compression),
            _ => {
                self.misapplied.get_or_insert("input-compression");
            }
        }
        self
    }

    /// Records that `option` does not apply to a Delta or Iceberg table.
    fn not_for_tables(mut self, option: &'static str) -> Self {
        if matches!(self.input, Input::Delta(_) | Input::Iceberg(_)) {
            self.misapplied.get_or_insert(option);
        }
        self
    }

    fn images_mut(&mut self) -> Option<&mut ImageOptions> {
        match &mut self.input {
            Input::Images(images) => Some(images),
            _ => None,
        }
    }

    /// Records that `option` applies to Delta tables only.
    fn delta_mut(&mut self, option: &'static str) -> Option<&mut DeltaOptions> {
        match &mut self.input {
            Input::Delta(delta) => Some(delta),
            _ => {
                self.misapplied.get_or_insert(option);
                None
            }
        }
    }

    /// The Delta table's snapshot as of commit `version` (default: the latest). Delta
    /// only.
    pub fn with_version(mut self, version: u64) -> Self {
        if let Some(delta) = self.delta_mut("version") {
            delta.version = Some(version);
        }
        self
    }

    /// The Iceberg table's snapshot `id` (default: the current one). Iceberg only.
    pub fn with_snapshot_id(mut self, id: i64) -> Self {
        match &mut self.input {
            Input::Iceberg(iceberg) => iceberg.snapshot_id = Some(id),
            _ => {
                self.misapplied.get_or_insert("snapshot-id");
            }
        }
        self
    }

    /// The table's snapshot at `timestamp` (RFC 3339): a Delta table's last commit at or
    /// before it, an Iceberg table's snapshot current then. Tables only.
    pub fn with_timestamp(mut self, timestamp: impl Into<String>) -> Self {
        match &mut self.input {
            Input::Delta(delta) => delta.timestamp = Some(timestamp.into()),
            Input::Iceberg(iceberg) => iceberg.timestamp = Some(timestamp.into()),
            _ => {
                self.misapplied.get_or_insert("timestamp");
            }
        }
        self
    }

    /// Keep the data files whose partition `key` has the value `value` (as a Delta log
    /// writes it; an Iceberg partition field's value, a date as `2026-11-28`);
    /// repeatable, all must hold. Tables only.
    pub fn with_partition_filter(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        let filter = (key.into(), value.into());
        match &mut self.input {
            Input::Delta(delta) => delta.partition_filters.push(filter),
            Input::Iceberg(iceberg) => iceberg.partition_filters.push(filter),
            _ => {
                self.misapplied.get_or_insert("partition-filter");
            }
        }
        self
    }

    /// The output folder or URL (required).
    pub fn with_output(mut self, dir: impl AsRef<Path>) -> Self {
        self.options.output = dir.as_ref().to_path_buf();
        self
    }

    /// Shard file name prefix (default `data`): a plain file name.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.prefix = prefix.into();
        self
    }

    /// Target shard size on disk, in bytes (default 256 MiB).
    pub fn with_target_shard_bytes(mut self, bytes: u64) -> Self {
        self.options.target_bytes = bytes;
        self
    }

    /// At most this many records per shard.
    pub fn with_max_records_per_shard(mut self, records: u64) -> Self {
        self.options.max_records = Some(records);
        self
    }

    /// At least this many shards per output.
    pub fn with_min_shards(mut self, shards: u64) -> Self {
        self.options.min_shards = Some(shards);
        self
    }

    /// Compression of the shards.
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.options.compression = compression;
        self
    }

    /// Replace this prefix's existing output.
    pub fn with_overwrite(mut self, overwrite: bool) -> Self {
        self.options.overwrite = overwrite;
        self
    }

    /// Also write a DALI `.idx` file per shard (uncompressed shards only).
    pub fn with_index(mut self, index: bool) -> Self {
        self.options.index = index;
        self
    }

    /// Count statistics while converting and keep them with the set (default: no): a
    /// `{prefix}.stats.pb` in TFDV's format named in the manifest, and each shard's
    /// partial statistics beside it (`{shard}.stats`).
    pub fn with_stats(mut self, stats: bool) -> Self {
        self.options.stats = stats;
        self
    }

    /// Keep only these columns (flattened names; a struct's name keeps its children).
    /// Parquet only.
    pub fn with_columns(mut self, columns: Vec<String>) -> Self {
        self.options.encode.columns = Some(columns);
        self.only_for(false, "columns").not_for_tfrecord("columns")
    }

    /// Drop these columns, after `columns`. Parquet only.
    pub fn with_exclude(mut self, columns: Vec<String>) -> Self {
        self.options.encode.exclude = columns;
        self.only_for(false, "exclude").not_for_tfrecord("exclude")
    }

    /// Rename features: `(old, new)` pairs, after selection. Parquet only.
    pub fn with_rename(mut self, pairs: Vec<(String, String)>) -> Self {
        self.options.encode.rename = pairs;
        self.only_for(false, "rename").not_for_tfrecord("rename")
    }

    /// `tf.train.Example` (default) or `tf.train.SequenceExample`; for TFRecord inputs
    /// also [`RecordType::Bytes`] (default: the input manifest's type, else Example).
    /// Not for images.
    pub fn with_record_type(mut self, record_type: RecordType) -> Self {
        self.options.encode.record_type = record_type;
        if let Input::Tfrecord(t) = &mut self.input {
            t.record_type = Some(record_type);
        }
        self.only_for(false, "record-type")
    }

    /// Assign splits by a stable hash of this column's value (with splits); for
    /// TFRecord inputs, of this feature's value. Not for images.
    pub fn with_split_key(mut self, column: impl Into<String>) -> Self {
        self.options.encode.split_key = Some(column.into());
        self.only_for(false, "split-key")
    }

    /// Threads of the run's pool (default: every core).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.options.threads = threads;
        self
    }

    /// A token that stops the run when cancelled.
    pub fn with_cancel(mut self, cancel: CancelToken) -> Self {
        self.options.cancel = cancel;
        self
    }

    /// Seed of the shuffle and of position-based splits (default 0).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.options.seed = seed;
        self
    }

    /// `(name, fraction)` splits, fractions summing to 1; the names replace the prefix.
    pub fn with_splits(mut self, splits: Vec<(String, f64)>) -> Self {
        self.options.splits = Some(splits);
        self
    }

    /// A global, seeded shuffle of the records, sorting with at most `memory_bytes` in
    /// memory (see [`DEFAULT_SHUFFLE_MEMORY`](super::DEFAULT_SHUFFLE_MEMORY); the output does not depend on it).
    pub fn with_shuffle(mut self, memory_bytes: u64) -> Self {
        let tmp_dir = (self.options.shuffle.take())
            .and_then(|s| s.tmp_dir)
            .or_else(|| self.options.staging_dir.clone());
        self.options.shuffle = Some(ShuffleOptions {
            memory_bytes,
            tmp_dir,
        });
        self
    }

    /// Where temporary files go: the shuffle's buckets, and a store output's shards
    /// before upload (default: the output's hidden folder; `$TMPDIR` for a store).
    pub fn with_tmp_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        if let Some(shuffle) = &mut self.options.shuffle {
            shuffle.tmp_dir = Some(dir.clone());
        }
        self.options.staging_dir = Some(dir);
        self
    }

    /// Also write the TensorFlow Datasets layout of this dataset name; the output
    /// folder is then the dataset's version folder (`OUT/NAME/1.0.0`).
    pub fn with_tfds(mut self, name: impl Into<String>) -> Self {
        self.options.tfds = Some(name.into());
        self
    }

    /// Count Hive `key=value` segments from this folder or URL (default: each folder
    /// input). Parquet only.
    pub fn with_partition_base(mut self, base: impl Into<PathBuf>) -> Self {
        self.options.partition_base = Some(base.into());
        self.not_for_tables("partition-base")
            .not_for_tfrecord("partition-base")
            .only_for(false, "partition-base")
    }

    /// Hive partition features (default [`Partitioning::Auto`]). Parquet only.
    pub fn with_partitioning(mut self, partitioning: Partitioning) -> Self {
        self.options.partitioning = partitioning;
        self.not_for_tables("partitioning")
            .not_for_tfrecord("partitioning")
            .only_for(false, "partitioning")
    }

    /// Convert worker `index`'s share of `count` (its row groups; for TFRecord inputs,
    /// its whole files) into a part that `finalize` publishes with the others. Not for
    /// images.
    pub fn with_worker(mut self, count: u64, index: u64) -> Self {
        self.options.worker = Some(WorkerShare { count, index });
        self.only_for(false, "num-workers")
    }

    /// `--append`: convert only what the inputs gained or changed since the set the
    /// output holds, publishing a new generation of it. Tables and Parquet files.
    pub fn with_append(mut self, append: bool) -> Self {
        self.options.append = append;
        self
    }

    /// `--retain N`: see [`ConvertOptions::retain`].
    pub fn with_retain(mut self, generations: u32) -> Self {
        self.options.retain = Some(generations);
        self
    }

    /// Reuse the shards an interrupted run finished, and keep this run's if it fails.
    pub fn with_resume(mut self, resume: bool) -> Self {
        self.options.resume = resume;
        self
    }

    /// Which decoder reads Parquet columns (default [`ParquetDecoder::Auto`]). Parquet
    /// only.
    pub fn with_parquet_decoder(mut self, decoder: ParquetDecoder) -> Self {
        self.options.parquet_decoder = decoder;
        self.only_for(false, "parquet-decoder")
            .not_for_tfrecord("parquet-decoder")
    }

    /// Store settings of every request the run makes (default [`store::IoOptions`]'s).
    pub fn with_io(mut self, io: store::IoOptions) -> Self {
        self.options.io = io;
        self
    }

    /// Where image labels come from (default: class folders). Images only.
    pub fn with_labels(mut self, labels: Labels) -> Self {
        if let Some(images) = self.images_mut() {
            images.labels = labels;
        }
        self.only_for(true, "labels")
    }

    /// Image file extensions to read, case-insensitive (default: the common ones).
    /// Images only.
    pub fn with_extensions(mut self, extensions: Vec<String>) -> Self {
        if let Some(images) = self.images_mut() {
            images.extensions = extensions;
        }
        self.only_for(true, "extensions")
    }

    /// Stop at a file that is not a readable image (default), or skip it. Images only.
    pub fn with_on_error(mut self, on_error: OnError) -> Self {
        if let Some(images) = self.images_mut() {
            images.on_error = on_error;
        }
        self.only_for(true, "on-error")
    }

    /// Checks every rule about the options and starts the run's thread pool.
    ///
    /// # Errors
    ///
    /// [`InvalidOption`](crate::error::ErrorKind::InvalidOption) naming the option (no output
    /// folder included; a setter that does not apply to the source), or an I/O error
    /// when the pool's threads cannot start.
    pub fn build(self) -> Result<Converter> {
        let ConverterBuilder {
            options,
            input,
            misapplied,
        } = self;
        if let Some(option) = misapplied {
            let source = match (&input, option) {
                (Input::Images(_), _) => "an image folder; it applies to Parquet inputs only",
                (Input::Iceberg(_), "version") => {
                    "an Iceberg table; name its snapshot with --snapshot-id"
                }
                (Input::Delta(_), "snapshot-id") => {
                    "a Delta table; name its snapshot with --version"
                }
                (_, "version") => "this input; it applies to Delta tables only",
                (_, "snapshot-id") => "this input; it applies to Iceberg tables only",
                (_, "timestamp" | "partition-filter") => {
                    "Parquet inputs or images; it applies to Delta and Iceberg tables only"
                }
                (Input::Delta(_) | Input::Iceberg(_), "partition-base" | "partitioning") => {
                    "a table, whose partition values come from its metadata"
                }
                (_, "input-compression") => {
                    "Parquet inputs or images; it applies to TFRecord inputs only"
                }
                (Input::Tfrecord(_), _) => {
                    "TFRecord inputs, whose payloads are copied as they are; it applies to tables"
                }
                _ => "Parquet inputs; it applies to images only",
            };
            return Err(Error::invalid_option(option, format!("not for {source}")));
        }
        if options.output.as_os_str().is_empty() {
            return Err(Error::invalid_option("output", "no output folder given"));
        }
        options.validate()?;
        if let Input::Images(images) = &input {
            images.validate(&options)?;
        }
        let tfrecord = matches!(input, Input::Tfrecord(_));
        if options.encode.record_type == RecordType::Bytes && !tfrecord {
            return Err(Error::invalid_option(
                "record-type",
                "bytes is for TFRecord inputs; a table's rows become Examples or SequenceExamples",
            ));
        }
        if let Input::Tfrecord(t) = &input {
            if t.record_type == Some(RecordType::Bytes) {
                if options.tfds.is_some() {
                    return Err(Error::invalid_option(
                        "tfds",
                        "TFDS reads tf.train.Example records; with --record-type bytes nothing \
                         says what the payloads are",
                    ));
                }
                if options.encode.split_key.is_some() {
                    return Err(Error::invalid_option(
                        "split-key",
                        "it names a feature, and --record-type bytes does not parse the payloads",
                    ));
                }
            }
        }
        if let Input::Arrow(_) = &input {
            let refused = [
                (
                    options.partition_base.is_some() || options.partitioning != Partitioning::Auto,
                    "partitioning",
                    "an Arrow stream has no folders to take partition values from",
                ),
                (
                    options.resume,
                    "resume",
                    "an Arrow stream cannot be read again from where a run stopped",
                ),
                (
                    options.worker.is_some(),
                    "num-workers",
                    "one process reads an Arrow stream; give each worker its own part of the data",
                ),
                (
                    options.min_shards.is_some(),
                    "min-shards",
                    "it reads the records twice, and an Arrow stream can be read once",
                ),
                (
                    options.append,
                    "append",
                    "an Arrow stream has no files to compare with the set's inputs",
                ),
            ];
            if let Some((_, option, why)) = refused.into_iter().find(|(set, _, _)| *set) {
                return Err(Error::invalid_option(option, format!("not for {why}")));
            }
        }
        if let Input::Iceberg(iceberg) = &input {
            if iceberg.snapshot_id.is_some() && iceberg.timestamp.is_some() {
                return Err(Error::invalid_option(
                    "timestamp",
                    "--snapshot-id and --timestamp both name the snapshot: give one",
                ));
            }
            if options.worker.is_some()
                && iceberg.snapshot_id.is_none()
                && iceberg.timestamp.is_none()
            {
                return Err(Error::invalid_option(
                    "num-workers",
                    "every worker must read the same snapshot: name it with --snapshot-id N (or \
                     --timestamp T)",
                ));
            }
        }
        if let Input::Delta(delta) = &input {
            if delta.version.is_some() && delta.timestamp.is_some() {
                return Err(Error::invalid_option(
                    "timestamp",
                    "--version and --timestamp both name the snapshot: give one",
                ));
            }
            if options.worker.is_some() && delta.version.is_none() && delta.timestamp.is_none() {
                return Err(Error::invalid_option(
                    "num-workers",
                    "every worker must read the same snapshot: name it with --version N (or \
                     --timestamp T)",
                ));
            }
        }
        let pool = crate::progress::thread_pool(options.threads, "convert")?;
        let source: Box<dyn Open> = match input {
            Input::Parquet => Box::new(parquet::ParquetFiles),
            Input::Arrow(stream) => Box::new(stream),
            Input::Delta(delta) => Box::new(delta),
            Input::Iceberg(iceberg) => Box::new(iceberg),
            Input::Images(images) => Box::new(images),
            Input::Tfrecord(tfrecord) => Box::new(tfrecord),
        };
        Ok(Converter {
            options,
            source,
            pool,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    /// A setter that does not apply to the source is a `build()` error
    /// naming it, never silently ignored.
    #[test]
    fn each_converter_refuses_the_setters_of_the_other_source() {
        let refused = |builder: ConverterBuilder| -> &'static str {
            match builder.with_output("out").build().unwrap_err().kind() {
                ErrorKind::InvalidOption { option, .. } => option,
                other => panic!("{other}"),
            }
        };
        let images = || Converter::images("photos");
        let parquet = || Converter::parquet(vec!["in.parquet".into()]);
        assert_eq!(refused(images().with_columns(vec!["x".into()])), "columns");
        assert_eq!(refused(images().with_exclude(vec!["x".into()])), "exclude");
        assert_eq!(refused(images().with_rename(vec![])), "rename");
        assert_eq!(
            refused(images().with_record_type(RecordType::SequenceExample)),
            "record-type"
        );
        assert_eq!(refused(images().with_split_key("id")), "split-key");
        assert_eq!(refused(images().with_partition_base("t")), "partition-base");
        assert_eq!(
            refused(images().with_partitioning(Partitioning::Hive)),
            "partitioning"
        );
        assert_eq!(refused(images().with_worker(2, 0)), "num-workers");
        assert_eq!(
            refused(images().with_parquet_decoder(ParquetDecoder::ArrowRs)),
            "parquet-decoder"
        );
        assert_eq!(refused(parquet().with_labels(Labels::None)), "labels");
        assert_eq!(refused(parquet().with_extensions(vec![])), "extensions");
        assert_eq!(refused(parquet().with_on_error(OnError::Skip)), "on-error");
        // And each one's own setters build.
        assert!(images()
            .with_labels(Labels::None)
            .with_on_error(OnError::Skip)
            .with_output("out")
            .build()
            .is_ok());
        assert!(parquet()
            .with_columns(vec!["x".into()])
            .with_worker(2, 1)
            .with_output("out")
            .build()
            .is_ok());
        assert_eq!(refused(images().with_extensions(vec![])), "extensions");
        let no_output = Converter::images("photos").build().unwrap_err();
        assert!(matches!(
            no_output.kind(),
            ErrorKind::InvalidOption {
                option: "output",
                ..
            }
        ));
    }
}
