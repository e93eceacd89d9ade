//! Conversion: a source's records → routed into splits (and shuffled) → size-targeted
//! shards → one commit with a manifest per output. The only module that wires source,
//! encoder, shard writer and manifest together.
//!
//! [`Converter`] is the front door: `Converter::parquet(inputs)`,
//! `Converter::delta(table)`, `Converter::images(dir)` or `Converter::tfrecord(inputs)`,
//! then `.output(dir)` and options, then `build()` (which checks every rule about the
//! options, so a run fails only on its data), then `run(&progress)`. Each source lives
//! in one file behind the `Source` trait (`parquet` for Parquet and Delta, `images`,
//! `tfrecord`); `ordered` runs the units of a file source in parallel and writes them
//! in order; `route` holds splits, `--shuffle` and `--min-shards`. A run owns a thread
//! pool of its `threads` and stops when its [`CancelToken`] is cancelled.
//!
//! ```
//! use tfshard::convert::Converter;
//! let out = std::env::temp_dir().join(format!("tfshard-doc-convert-{}", std::process::id()));
//! let summary = Converter::parquet(vec!["testdata/small.parquet".into()])
//!     .with_output(&out)
//!     .with_target_shard_bytes(100_000)
//!     .with_overwrite(true)
//!     .build()?
//!     .run(&tfshard::progress::NoProgress)?;
//! assert_eq!(summary.records, 2000);
//! # std::fs::remove_dir_all(&out).unwrap();
//! # Ok::<(), tfshard::Error>(())
//! ```

pub(crate) mod append;
mod arrow;
pub(crate) mod images;
mod ordered;
pub(crate) mod parquet;
pub(crate) mod route;
pub(crate) mod table;
pub(crate) mod tfrecord;

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::json;

use crate::error::{Error, ErrorKind, Result};
use crate::example::encode::EncodeOptions;
use crate::example::RecordType;
use crate::manifest::{self, InputInfo, Manifest, ShardInfo, ShardSource, MANIFEST_VERSION};
use crate::progress::{CancelToken, Progress};
use crate::shard::{name, OutputDir, SourceRows};
pub use crate::source::hive::Partitioning;
use crate::store;
use crate::store::destination::{ClosedShard, Publication, StagePlan, StagedOutput};
use crate::tfrecord::Compression;

pub use crate::manifest::{rfc3339_ms, TableInfo};
pub use crate::source::delta::{DeltaOptions, DeltaTable};
pub use crate::source::iceberg::{IcebergOptions, IcebergTable};
pub use crate::source::images::{Labels, OnError};
pub use crate::source::parquet::BATCH_ROWS as PARQUET_BATCH_ROWS;
pub use append::AppendSummary;
pub use arrow::ArrowStream;
pub use images::ImageOptions;
pub use tfrecord::TfrecordOptions;

/// Default `--shuffle-memory`: 1 GiB, enough to sort a few GB of records with no bucket
/// file (they stay in memory while they fit half the budget).
pub const DEFAULT_SHUFFLE_MEMORY: u64 = 1 << 30;
/// Default `--target-shard-size`: 256 MiB, the size TensorFlow's performance guide
/// suggests (100 MB+ per file, ≥ 10× the number of hosts reading).
pub const DEFAULT_TARGET_BYTES: u64 = 256 << 20;
/// The smallest `--shuffle-memory`: below it a bucket sort would hold a handful of
/// records.
const MIN_SHUFFLE_MEMORY: u64 = 1 << 20;
/// How far split fractions may sum from 1 (decimal fractions like 0.8/0.1/0.1 do not
/// sum to exactly 1.0 in binary).
const SPLIT_SUM_TOLERANCE: f64 = 1e-9;

/// A shard's sources as the manifest lists them: each input by its name.
fn shard_sources(inputs: &[InputInfo], sources: &[SourceRows]) -> Vec<ShardSource> {
    sources
        .iter()
        .filter_map(|s| {
            // Every source numbers its inputs as its manifest lists them.
            let input = inputs.get(s.input as usize);
            debug_assert!(
                input.is_some(),
                "input {} of {} listed",
                s.input,
                inputs.len()
            );
            input.map(|i| ShardSource::new(i.path.clone(), s.rows))
        })
        .collect()
}

/// A prefix (or split name) must be a plain file name: shards are named
/// `{prefix}-00000-of-00012.tfrecord` inside the output folder, and nothing may land
/// outside it or hidden.
fn check_prefix(option: &'static str, prefix: &str) -> Result<()> {
    if prefix.is_empty() || prefix.contains(['/', '\\', '\0']) || prefix.starts_with('.') {
        return Err(Error::invalid_option(
            option,
            format!("{prefix:?} is not a plain file name prefix"),
        ));
    }
    if name::is_tfds_prefix(prefix) {
        // `{prefix}-00000-of-00003.tfrecord` would end twice in .tfrecord, and the
        // suffix is how TFDS shard prefixes (`--tfds`) are told apart.
        return Err(Error::invalid_option(
            option,
            format!("{prefix:?} ends in .tfrecord, which every shard name gets anyway: drop it"),
        ));
    }
    if name::ends_like_a_generation(prefix) {
        // `{prefix}-00000-of-00001.tfrecord` would read as a later generation's shard of
        // the prefix before the `-g`, which that prefix's --overwrite removes.
        return Err(Error::invalid_option(
            option,
            format!(
                "{prefix:?} ends as a generation's shard names do (-g and 5 digits): \
                 pick another prefix"
            ),
        ));
    }
    Ok(())
}

/// What to convert and how: what a [`Converter`] follows, set through its builder's
/// setters and read back with [`Converter::options`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConvertOptions {
    /// Parquet files and folders, in the order given.
    pub inputs: Vec<PathBuf>,
    /// The output folder.
    pub output: PathBuf,
    /// Shard name prefix.
    pub prefix: String,
    /// Target shard size on disk.
    pub target_bytes: u64,
    /// At most this many records per shard.
    pub max_records: Option<u64>,
    /// At least this many shards.
    pub min_shards: Option<u64>,
    /// Compression of the shards.
    pub compression: Compression,
    /// Replace this prefix's existing output.
    pub overwrite: bool,
    /// Write DALI `.idx` files.
    pub index: bool,
    /// Columns and record type.
    pub encode: EncodeOptions,
    /// Threads of the run's own pool (decode and encode workers, file reads).
    pub threads: usize,
    /// Stops the run (its temporaries are removed) when cancelled.
    pub cancel: CancelToken,
    /// Seed of the shuffle and of position-based splits.
    pub seed: u64,
    /// `--shuffle`: a global, seeded permutation of the records.
    pub shuffle: Option<ShuffleOptions>,
    /// `--split`: (name, fraction) pairs; the names replace the prefix.
    pub splits: Option<Vec<(String, f64)>>,
    /// Also write the TensorFlow Datasets layout of this dataset name ([`crate::tfds`]):
    /// shards named as TFDS names them, in `output`, which is then the dataset's version
    /// folder (`OUT/NAME/1.0.0`; the CLI's `--tfds NAME` makes it so).
    pub tfds: Option<String>,
    /// `--partition-base`: where Hive `key=value` segments are counted from (default:
    /// each folder input).
    pub partition_base: Option<PathBuf>,
    /// `--partitioning`.
    pub partitioning: Partitioning,
    /// `--tmp-dir` for a run whose output is a store URL: where shards are staged
    /// before upload (default `$TMPDIR`).
    pub staging_dir: Option<PathBuf>,
    /// `--num-workers N --worker-index I`: convert worker I's share of the row groups
    /// into a part that `tfshard finalize` publishes with the others.
    pub worker: Option<WorkerShare>,
    /// `--resume`: reuse the shards an interrupted run finished (its journal), and keep
    /// this run's finished shards and journal if it fails or is interrupted.
    pub resume: bool,
    /// `--append`: convert only what the inputs gained (or changed) since the set the
    /// output holds, as a new generation of it.
    pub append: bool,
    /// `--retain N` (with `--append`): the last N generations' pinned manifests, and the
    /// shards they list, are kept when shards are retired.
    pub retain: Option<u32>,
    /// `--parquet-decoder`: which decoder reads Parquet columns. Never changes the
    /// output, so the manifest does not record it.
    pub parquet_decoder: ParquetDecoder,
    /// Store settings of every request the run makes (`--io-concurrency`,
    /// `--io-timeout`).
    pub io: store::IoOptions,
}

/// Which decoder reads Parquet columns (`--parquet-decoder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ParquetDecoder {
    /// Fixed-size lists of f32, f64, i32 or i64 without nulls (embeddings, feature
    /// vectors) through our own page decoder, which checks their levels run by run and
    /// hands anything unexpected back to arrow-rs; every other column through arrow-rs.
    #[default]
    Auto,
    /// Every column through arrow-rs alone: to compare, or to rule the fast path out.
    ArrowRs,
}

/// One worker's share of a run spread over `count` machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerShare {
    /// Workers in all (N).
    pub count: u64,
    /// This worker (0 ≤ I < N).
    pub index: u64,
}

impl WorkerShare {
    /// Whether a row group whose first byte is at `start` of `total` bytes (selected
    /// columns, compressed, counted in input order) is this worker's: `start` in
    /// [I·B/N, (I+1)·B/N). With no bytes at all, worker 0 takes everything.
    pub fn takes(&self, start: u64, total: u64) -> bool {
        if total == 0 {
            return self.index == 0;
        }
        let (s, b, n, i) = (
            u128::from(start),
            u128::from(total),
            u128::from(self.count),
            u128::from(self.index),
        );
        s * n >= i * b && s * n < (i + 1) * b
    }

    /// This worker's units, `[first, end)`, of units of these byte sizes in the run's
    /// order: those whose first byte it [`takes`](Self::takes). An empty share sits
    /// where the next worker's starts.
    pub(crate) fn share(&self, sizes: &[u64]) -> [u64; 2] {
        let total: u64 = sizes.iter().sum();
        let mut start = 0u64;
        let mut taken: Option<[u64; 2]> = None;
        for (i, size) in sizes.iter().enumerate() {
            if self.takes(start, total) {
                let first = taken.map_or(i as u64, |t| t[0]);
                taken = Some([first, i as u64 + 1]);
            }
            start += size;
        }
        taken.unwrap_or_else(|| {
            let cut = (u128::from(total) * u128::from(self.index + 1))
                .div_ceil(u128::from(self.count.max(1)));
            let mut start = 0u128;
            let first = sizes
                .iter()
                .take_while(|&&b| {
                    let before = start;
                    start += u128::from(b);
                    before < cut
                })
                .count() as u64;
            [first, first]
        })
    }

    /// `{I:05}-of-{N:05}`: the part's folder name.
    pub fn part_name(&self) -> String {
        format!("{:05}-of-{:05}", self.index, self.count)
    }
}

/// `--shuffle-memory` and `--tmp-dir`: they bound the shuffle, never change its output.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ShuffleOptions {
    /// Memory for sorting one bucket.
    pub memory_bytes: u64,
    /// Where the bucket files go (default: the output's hidden temporary folder).
    pub tmp_dir: Option<PathBuf>,
}

impl ConvertOptions {
    /// Defaults for everything but the inputs and the output folder.
    pub(crate) fn new(inputs: Vec<PathBuf>, output: PathBuf) -> ConvertOptions {
        ConvertOptions {
            inputs,
            output,
            prefix: DEFAULT_PREFIX.into(),
            target_bytes: DEFAULT_TARGET_BYTES,
            max_records: None,
            min_shards: None,
            compression: Compression::None,
            overwrite: false,
            index: false,
            encode: EncodeOptions::default(),
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cancel: CancelToken::new(),
            seed: 0,
            shuffle: None,
            splits: None,
            tfds: None,
            partition_base: None,
            partitioning: Partitioning::Auto,
            staging_dir: None,
            worker: None,
            resume: false,
            append: false,
            retain: None,
            parquet_decoder: ParquetDecoder::Auto,
            io: store::IoOptions::default(),
        }
    }

    /// The options that change the output, for the manifest (sizes in bytes).
    fn manifest_options(&self) -> std::collections::BTreeMap<String, serde_json::Value> {
        let mut o = std::collections::BTreeMap::new();
        o.insert("prefix".into(), json!(self.prefix));
        o.insert("target_shard_size".into(), json!(self.target_bytes));
        o.insert("max_records_per_shard".into(), json!(self.max_records));
        o.insert("min_shards".into(), json!(self.min_shards));
        o.insert("compression".into(), json!(self.compression.name()));
        o.insert("record_type".into(), json!(self.encode.record_type.name()));
        o.insert("columns".into(), json!(self.encode.columns));
        o.insert("exclude".into(), json!(self.encode.exclude));
        let rename: Vec<String> = self
            .encode
            .rename
            .iter()
            .map(|(a, b)| format!("{a}={b}"))
            .collect();
        o.insert("rename".into(), json!(rename));
        o.insert("index".into(), json!(self.index));
        o.insert("shuffle".into(), json!(self.shuffle.is_some()));
        o.insert("seed".into(), json!(self.seed));
        let split: Option<serde_json::Map<String, serde_json::Value>> = self
            .splits
            .as_ref()
            .map(|s| s.iter().map(|(n, f)| (n.clone(), json!(f))).collect());
        o.insert("split".into(), json!(split));
        o.insert("split_key".into(), json!(self.encode.split_key));
        if let Some(base) = &self.partition_base {
            o.insert("partition_base".into(), json!(base.display().to_string()));
        }
        if let Some(name) = &self.tfds {
            o.insert("tfds".into(), json!(name));
        }
        if self.partitioning != Partitioning::Auto {
            let name = match self.partitioning {
                Partitioning::Hive => "hive",
                _ => "none",
            };
            o.insert("partitioning".into(), json!(name));
        }
        o
    }

    /// Checks every rule about the options that does not depend on the data, before a
    /// run touches a file: the prefix and split names are plain file names (a prefix of
    /// `../x` would write outside the output folder), split fractions are positive and
    /// sum to 1, `index` goes without compression, counts and sizes are at least 1.
    ///
    /// # Errors
    ///
    /// [`InvalidOption`](crate::error::ErrorKind::InvalidOption) naming the option.
    pub(crate) fn validate(&self) -> Result<()> {
        let invalid = |option, reason: String| Err(Error::invalid_option(option, reason));
        if self.inputs.is_empty() {
            return invalid("inputs", "no input given".into());
        }
        check_prefix("prefix", &self.prefix)?;
        if self.retain.is_some() && !self.append {
            return invalid(
                "retain",
                "it keeps generations' pinned manifests: it applies with --append".into(),
            );
        }
        if self.retain == Some(0) {
            return invalid("retain", "keep at least 1 generation".into());
        }
        if self.append {
            let refused = [
                (
                    self.overwrite,
                    "--overwrite replaces the set; --append adds a generation to it: give one",
                ),
                (
                    self.tfds.is_some(),
                    "one TFDS version is one file set; convert a new version with --overwrite",
                ),
                (
                    self.splits.is_some() && self.encode.split_key.is_none(),
                    "a split by position would move records between splits as the inputs \
                     grow: split by a column (--split-key)",
                ),
                (
                    self.min_shards.is_some(),
                    "--min-shards cuts one conversion evenly; a generation is cut by \
                     --target-shard-size",
                ),
            ];
            if let Some((_, why)) = refused.into_iter().find(|(set, _)| *set) {
                return invalid("append", why.into());
            }
        }
        if let Some(name) = &self.tfds {
            crate::tfds::check_name(name).map_err(|why| Error::invalid_option("tfds", why))?;
            if self.compression != Compression::None {
                return invalid(
                    "tfds",
                    "TFDS reads plain TFRecord files; it cannot be used with --compression".into(),
                );
            }
            if self.encode.record_type != RecordType::Example {
                let given = match self.encode.record_type {
                    RecordType::Bytes => "bytes",
                    _ => "sequence-example",
                };
                return invalid(
                    "tfds",
                    format!(
                        "TFDS reads tf.train.Example records; it cannot be used with \
                         --record-type {given}"
                    ),
                );
            }
            if self.prefix != DEFAULT_PREFIX {
                return invalid(
                    "tfds",
                    "TFDS names the shards {NAME}-{split}.tfrecord-…; it cannot be used with --prefix"
                        .into(),
                );
            }
            for (split, _) in self.splits.iter().flatten() {
                crate::tfds::check_split(split)
                    .map_err(|why| Error::invalid_option("split", why))?;
            }
        }
        if self.splits.is_some() && self.tfds.is_none() && self.prefix != DEFAULT_PREFIX {
            return invalid(
                "split",
                "it names the outputs; it cannot be used with --prefix".into(),
            );
        }
        if self.staging_dir.is_some() && self.shuffle.is_none() && !store::is_url(&self.output) {
            return invalid(
                "tmp-dir",
                "it holds --shuffle's temporary files (and, for a URL output, the shards before \
                 upload); it needs --shuffle or an output URL"
                    .into(),
            );
        }
        if self.target_bytes == 0 {
            return invalid("target-shard-size", "must be at least 1 byte".into());
        }
        if self.max_records == Some(0) {
            return invalid("max-records-per-shard", "must be at least 1".into());
        }
        if self.min_shards == Some(0) {
            return invalid("min-shards", "must be at least 1".into());
        }
        if self.threads == 0 {
            return invalid("threads", "must be at least 1".into());
        }
        if self.index && self.compression != Compression::None {
            return invalid(
                "index",
                "it describes byte offsets in uncompressed shards; it cannot be used with compression".into(),
            );
        }
        if let Some(w) = self.worker {
            if w.count == 0 {
                return invalid("num-workers", "must be at least 1".into());
            }
            if w.index >= w.count {
                return invalid(
                    "worker-index",
                    format!("{} is not below --num-workers {}", w.index, w.count),
                );
            }
            if self.shuffle.is_some() {
                return invalid(
                    "num-workers",
                    "--shuffle needs every record in one run: shuffle with the engine, or \
                     convert on one machine"
                        .into(),
                );
            }
            if self.min_shards.is_some() {
                return invalid(
                    "num-workers",
                    "--min-shards needs the global total, which no worker knows: drop it, or \
                     convert on one machine"
                        .into(),
                );
            }
        }
        if let Some(shuffle) = &self.shuffle {
            if shuffle.memory_bytes < MIN_SHUFFLE_MEMORY {
                return invalid("shuffle-memory", "must be at least 1MiB".into());
            }
        }
        match &self.splits {
            None if self.encode.split_key.is_some() => {
                return invalid("split-key", "it needs a split".into());
            }
            None => {}
            Some(splits) => {
                if splits.is_empty() {
                    return invalid("split", "no split named".into());
                }
                for (i, (name, fraction)) in splits.iter().enumerate() {
                    check_prefix("split", name)?;
                    if !(fraction.is_finite() && *fraction > 0.0) {
                        return invalid("split", format!("{name}={fraction}: a fraction above 0"));
                    }
                    if splits[..i].iter().any(|(n, _)| n == name) {
                        return invalid("split", format!("{name:?} is named twice"));
                    }
                }
                let sum: f64 = splits.iter().map(|(_, f)| f).sum();
                if (sum - 1.0).abs() > SPLIT_SUM_TOLERANCE {
                    return invalid("split", format!("the fractions sum to {sum}, not 1"));
                }
            }
        }
        Ok(())
    }

    /// The output prefixes: the split names, or the prefix.
    pub fn prefixes(&self) -> Vec<String> {
        let names = match &self.splits {
            Some(s) => s.iter().map(|(n, _)| n.clone()).collect(),
            None => vec![match &self.tfds {
                Some(_) => crate::tfds::DEFAULT_SPLIT.to_owned(),
                None => self.prefix.clone(),
            }],
        };
        match &self.tfds {
            Some(name) => names.iter().map(|s| crate::tfds::prefix(name, s)).collect(),
            None => names,
        }
    }
}

/// What a conversion produced; the `convert --json` keys.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConvertSummary {
    /// The output folder.
    pub output: PathBuf,
    /// The manifest written (`None` with splits: see `splits`).
    pub manifest: Option<PathBuf>,
    /// Records written.
    pub records: u64,
    /// Shards written.
    pub shards: u64,
    /// Bytes on disk of all shards.
    pub bytes: u64,
    /// Wall time.
    pub seconds: f64,
    /// Image files left out (`--on-error skip`).
    pub skipped: u64,
    /// With `--resume`: the shards (and their bytes) an earlier run had finished, reused
    /// as they were; `None` without `--resume`.
    pub reused: Option<Reused>,
    /// With `--split`: each split's own summary, in the order given.
    pub splits: Vec<SplitSummary>,
    /// `convert delta` and `convert iceberg`: the snapshot read.
    pub table: Option<TableInfo>,
    /// With `--append`: whether it was up to date, the generation, the shards retired.
    pub append: Option<AppendSummary>,
}

impl ConvertSummary {
    /// The summary as `convert --json` prints it (and the Python module returns it):
    /// `output`, `manifest`, `records`, `shards`, `bytes`, `seconds`, `skipped`, and
    /// where they apply `table`, `reused` and `splits`.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        let mut value = json!({
            "output": self.output,
            "manifest": self.manifest,
            "records": self.records,
            "shards": self.shards,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "skipped": self.skipped,
        });
        if let Some(t) = &self.table {
            value["table"] = json!(t);
        }
        if let Some(a) = &self.append {
            value["up_to_date"] = json!(a.up_to_date);
            value["generation"] = json!(a.generation);
            value["retired"] = json!(a.retired);
            if let Some(why) = &a.reconverted {
                value["reconverted"] = json!(why);
            }
        }
        if let Some(r) = self.reused {
            value["reused"] =
                json!({"shards": r.shards, "bytes": r.bytes, "unread_records": r.unread_records});
        }
        if !self.splits.is_empty() {
            let splits: serde_json::Map<String, serde_json::Value> = self
                .splits
                .iter()
                .map(|s| {
                    let v = json!({"manifest": s.manifest, "records": s.records, "shards": s.shards, "bytes": s.bytes});
                    (s.name.clone(), v)
                })
                .collect();
            value["splits"] = serde_json::Value::Object(splits);
        }
        value
    }
}

/// What a `--resume` run reused of the run it continues (`convert --json` `reused`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reused {
    /// Shards reused.
    pub shards: u64,
    /// Their bytes on disk.
    pub bytes: u64,
    /// Of their records, those the rerun did not read again (it restarted its input
    /// from a checkpoint; the rest it read and dropped).
    pub unread_records: u64,
}

/// One split's output; the `convert --json` `splits` values.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SplitSummary {
    /// The split name (its prefix).
    pub name: String,
    /// Its manifest.
    pub manifest: PathBuf,
    /// Records in it.
    pub records: u64,
    /// Its shards.
    pub shards: u64,
    /// Bytes on disk.
    pub bytes: u64,
}

impl ConvertOptions {
    /// A manifest for this run's outputs, without shards yet.
    fn new_manifest(
        &self,
        record_type: RecordType,
        inputs: Vec<InputInfo>,
        features: Vec<crate::example::FeatureSpec>,
    ) -> Manifest {
        Manifest {
            manifest_version: MANIFEST_VERSION,
            tfshard_version: env!("CARGO_PKG_VERSION").into(),
            created: manifest::now_rfc3339(),
            record_type,
            compression: self.compression.name().into(),
            options: self.manifest_options(),
            table: None,
            inputs,
            features,
            classes: None,
            skipped: None,
            shards: vec![],
            records: 0,
            bytes: 0,
            worker: None,
            row_groups: None,
            generations: None,
        }
    }
}

/// The shard prefix when none is given.
pub const DEFAULT_PREFIX: &str = "data";

/// Where records come from. A third source is one new file implementing this.
pub(crate) trait Source: Send {
    /// Progress units in all (rows, files).
    fn total_units(&self) -> u64;
    /// A guess at the framed records' bytes (the shuffle sizes its buffers by it).
    fn estimated_bytes(&self) -> u64;
    /// The records `produce` will give in all, when known before it runs (the shard
    /// writer then guesses which shard is the last: see [`crate::store::destination::LastGuess`]).
    fn expected_records(&self) -> Option<u64> {
        None
    }
    /// Feeds every record to `router`, framed, in input order. Called a second time
    /// when `--min-shards` cuts small outputs evenly; it must feed the same records.
    fn produce(
        &mut self,
        options: &ConvertOptions,
        router: &mut route::Router,
        progress: &dyn Progress,
    ) -> Result<()>;
    /// The manifest of one output holding `records` records, from what `produce` saw.
    fn manifest(&self, options: &ConvertOptions, records: u64) -> Manifest;
    /// For a worker: the row groups it converts, `[first, end)` in the run's order.
    fn worker_range(&self) -> Option<[u64; 2]> {
        None
    }
    /// Inputs left out (images with `--on-error skip`).
    fn skipped(&self) -> u64 {
        0
    }
    /// `--resume`: restarts from a checkpoint a reused shard carries, if this source
    /// made it and it fits; returns the records the source will not produce again (the
    /// router and writer take the rest from there), or 0.
    fn restart_from(&mut self, _checkpoint: &serde_json::Value) -> u64 {
        0
    }
    /// `--append`: the inputs as they are now, to compare with the manifest's; `None`
    /// where this source cannot append.
    fn now_inputs(&self) -> Option<Vec<append::NowInput>> {
        None
    }
    /// `--append`: reads only the records `reads[i]` of input `i` (see
    /// [`append::Plan::reads`]) from now on (a worker: its share of them).
    ///
    /// # Errors
    ///
    /// As cutting a worker's share when the source was opened.
    fn select(&mut self, _reads: &[Vec<[u64; 2]>]) -> Result<()> {
        Ok(())
    }
}

/// How a source is opened: one implementation per kind of input (in its
/// `convert/NAME.rs`), chosen when the builder is built (the builder's `Input` is the
/// registration of the kinds). A new kind of input implements this and [`Source`].
pub(crate) trait Open: Send + Sync + std::fmt::Debug {
    /// Opens the inputs and checks the whole plan before anything is written.
    ///
    /// # Errors
    ///
    /// A missing or unreadable input, a column that cannot be encoded, and the like.
    fn open(&self, options: &ConvertOptions) -> Result<Box<dyn Source + '_>>;

    /// `--resume`: the source opened again at what the journal's `header` says the
    /// interrupted run read, where that differs from `opened` (a table's snapshot,
    /// committed to since, when the run named none); `None` to go on with `opened`.
    ///
    /// # Errors
    ///
    /// Those of opening the source.
    fn reopen_at(
        &self,
        _options: &ConvertOptions,
        _header: &serde_json::Value,
        _opened: &dyn Source,
    ) -> Result<Option<Box<dyn Source + '_>>> {
        Ok(None)
    }
}

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
    /// memory (see [`DEFAULT_SHUFFLE_MEMORY`]; the output does not depend on it).
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

/// Runs a conversion of `source`: prepare the outputs, route every record into shards,
/// then commit every output with its manifest.
fn run(
    options: &ConvertOptions,
    opener: &dyn Open,
    progress: &dyn Progress,
) -> Result<ConvertSummary> {
    let mut source = opener.open(options)?;
    let started = Instant::now();
    crate::failpoint::hit("convert:planned")?;
    let prefixes = options.prefixes();
    if options.tfds.is_some() {
        // Names TFDS cannot nest fail before anything is written.
        crate::tfds::check_features(&source.manifest(options, 0).features)?;
    }
    let destination = store::destination_of(&options.output, options.io)?;
    // A worker's part goes to a hidden folder that finalize reads; the output itself
    // must not hold a published set.
    let hidden: Vec<String> = prefixes
        .iter()
        .flat_map(|p| [name::tmp_dir_name(p), name::parts_dir_name(p)])
        .collect();
    // (An append's workers add a generation to the set there: `finalize` checks that it
    // is still the one they planned against.)
    let worker_into_set = options.worker.is_some() && !options.append;
    if worker_into_set && destination.names("")?.iter().any(|n| !hidden.contains(n)) {
        return Err(Error::new(ErrorKind::OutputExists).with_file(&options.output));
    }
    // `--append` onto a published set: claimed, planned, and only what changed read.
    let mut appending = None;
    if options.append {
        // Workers do not claim the set: their `finalize` does.
        let claim = options.worker.is_none();
        appending = append::Appending::open(&destination, &prefixes, claim)?;
    }
    if let Some(a) = appending.as_mut() {
        let Some(now) = source.now_inputs() else {
            return Err(Error::invalid_option(
                "append",
                "not for this input: it applies to Parquet and TFRecord files, image folders and Delta or \
                 Iceberg tables; convert again with --overwrite",
            ));
        };
        a.plan(&source.manifest(options, 0), now, options.shuffle.is_some())?;
        if a.plan.is_empty() {
            if options.worker.is_none() {
                a.finish_last(&*destination, &prefixes, options.retain)?;
            }
            let manifest = &a.manifests[0];
            return Ok(ConvertSummary {
                output: options.output.clone(),
                manifest: (options.splits.is_none())
                    .then(|| destination.display(&name::manifest_name(&prefixes[0]))),
                records: 0,
                shards: 0,
                bytes: 0,
                seconds: started.elapsed().as_secs_f64(),
                skipped: 0,
                reused: None,
                splits: Vec::new(),
                table: manifest.table.clone(),
                append: Some(a.summary()),
            });
        }
        source.select(&a.plan.reads)?;
    }
    let outputs = prefixes
        .iter()
        .map(|p| StagedOutput {
            dir: match options.worker {
                None => String::new(),
                Some(w) => format!("{}/{}", name::parts_dir_name(p), w.part_name()),
            },
            tmp: name::tmp_dir_name(p),
        })
        .collect();
    let mut staging = destination.stage(StagePlan {
        outputs,
        hidden,
        overwrite: options.overwrite,
        // (A worker's part is staged and published as any worker's.)
        append: appending.is_some() && options.worker.is_none(),
        resume: options.resume,
        part: options.worker.is_some(),
        staging_dir: options.staging_dir.clone(),
    })?;
    let mut outs: Vec<OutputDir> = prefixes
        .iter()
        .enumerate()
        .map(|(i, p)| OutputDir::new(p, staging.folder(i), staging.hook(i)))
        .collect();
    if options.resume {
        // A table's snapshot: the one the interrupted run read, whatever was committed
        // since (unless this run names one).
        // (An append's plan is made against the source as it is now.)
        if let (Some(header), None) = (staging.journal_header(0)?, &appending) {
            if let Some(reopened) = opener.reopen_at(options, &header, &*source)? {
                source = reopened;
            }
        }
        // What the output depends on besides the records: the journal's header.
        let described = source.manifest(options, 0);
        let inputs: Vec<serde_json::Value> = described
            .inputs
            .iter()
            .map(|i| json!({"path": i.path, "bytes": i.bytes, "etag": i.etag}))
            .collect();
        for (i, out) in outs.iter_mut().enumerate() {
            let mut header = json!({
                "table": described.table,
                "prefix": out.prefix(),
                "options": described.options,
                "record_type": described.record_type,
                "compression": described.compression,
                "inputs": inputs,
                "tfshard_version": env!("CARGO_PKG_VERSION"),
            });
            // An append's generation and plan: a rerun resumes only the same one. (A
            // plain run's header is as before, so its journals still match.)
            if let Some(a) = &appending {
                header["append"] = json!({
                    "generation": a.generation,
                    "reads": a.plan.reads,
                    "retired": a.plan.retired,
                });
            }
            let finished = staging.resume(i, header.clone())?;
            // One output: the source restarts after the last checkpoint the reused
            // shards hold, instead of producing their records again.
            let checkpoint = finished.last().and_then(|s| s.checkpoint.clone());
            if let (Some(c), 1) = (checkpoint, prefixes.len()) {
                out.set_skipped_by_producer(source.restart_from(&c));
            }
            out.set_resumed(header, finished);
        }
    }
    let reused = options.resume.then(|| {
        let finished = outs
            .iter()
            .flat_map(|o| o.resume_state().map_or(&[][..], |(_, f)| f));
        let reused = finished.fold(Reused::default(), |r, s| Reused {
            shards: r.shards + 1,
            bytes: r.bytes + s.bytes,
            ..r
        });
        Reused {
            unread_records: outs.iter().map(OutputDir::skipped_by_producer).sum(),
            ..reused
        }
    });
    progress.set_total(source.total_units());
    let mut report: &dyn Progress = progress;
    let expected = source.expected_records();
    let (shards, ()) = route::write_outputs(
        options,
        &outs,
        source.estimated_bytes(),
        expected,
        |router| {
            // A second pass (--min-shards) is not progress.
            let pass = source.produce(options, router, report);
            report = &crate::progress::NoProgress;
            pass
        },
    )?;
    let mut manifests: Vec<Manifest> = shards
        .iter()
        .map(|split| {
            let mut m = source.manifest(options, split.iter().map(|s| s.records).sum());
            if let Some(w) = options.worker {
                m.worker = Some(manifest::WorkerInfo {
                    index: w.index,
                    count: w.count,
                });
                m.row_groups = source.worker_range();
            }
            m
        })
        .collect();
    options.cancel.check()?;
    crate::failpoint::hit("convert:written")?;
    let generation = appending.as_ref().map_or(0, |a| a.generation);
    let publications = outs
        .iter()
        .zip(&shards)
        .zip(&mut manifests)
        .enumerate()
        .map(|(i, ((out, split), manifest))| {
            let names: Vec<String> = (0..split.len())
                .map(|s| {
                    let c = options.compression;
                    name::generation_shard_name(out.prefix(), generation, s, split.len(), c)
                })
                .collect();
            let written = split
                .iter()
                .zip(&names)
                .map(|(s, file)| ShardInfo {
                    file: file.clone(),
                    records: s.records,
                    bytes: s.bytes,
                    crc32c: format!("{:08x}", s.crc32c),
                    sources: shard_sources(&manifest.inputs, &s.sources),
                    generation: None,
                })
                .collect();
            // A worker's part holds its shards alone, and what `finalize` needs to
            // publish them as the generation.
            let part = (appending.as_ref())
                .filter(|_| options.worker.is_some())
                .map(|a| a.part(i, options.retain));
            match &appending {
                Some(a) if part.is_none() => {
                    *manifest = a.manifest(i, manifest.clone(), written)?
                }
                _ => manifest.set_shards(written),
            }
            let bytes = match &part {
                Some(part) => append::part_manifest_json(manifest, part)?,
                None => manifest.to_json()?,
            };
            let append = match appending.as_ref().filter(|_| part.is_none()) {
                Some(a) => {
                    let p = out.prefix();
                    Some(a.publish_set(i, &*destination, p, manifest, options.retain)?)
                }
                None => None,
            };
            Ok(Publication {
                shards: split.clone(),
                names,
                manifest: (name::manifest_name(out.prefix()), bytes),
                own: name::is_own_shard,
                prefix: out.prefix().to_owned(),
                append,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if appending.as_ref().is_some_and(append::Appending::is_lost) {
        return Err(Error::new(ErrorKind::AppendClaimed).with_file(&options.output));
    }
    let paths = staging.commit(publications, &options.cancel)?;
    drop(staging);
    let splits: Vec<SplitSummary> = outs
        .iter()
        .zip(paths)
        .zip(&manifests)
        .map(|((out, manifest_path), manifest)| SplitSummary {
            name: options
                .tfds
                .as_deref()
                .and_then(|name| crate::tfds::split_of(name, out.prefix()))
                .unwrap_or(out.prefix())
                .to_owned(),
            manifest: manifest_path,
            records: manifest.records,
            shards: manifest.shards.len() as u64,
            bytes: manifest.bytes,
        })
        .collect();
    if let (Some(name), None) = (&options.tfds, options.worker) {
        crate::tfds::publish(&*destination, name)?;
    }
    let single = options.splits.is_none();
    // An append's summary counts what it wrote; the sets' totals are in their manifests.
    let written = |f: fn(&ClosedShard) -> u64| shards.iter().flatten().map(f).sum::<u64>();
    let appended = appending.is_some();
    Ok(ConvertSummary {
        output: options.output.clone(),
        manifest: if single {
            splits.first().map(|s| s.manifest.clone())
        } else {
            None
        },
        records: if appended {
            written(|s| s.records)
        } else {
            splits.iter().map(|s| s.records).sum()
        },
        shards: if appended {
            shards.iter().map(|s| s.len() as u64).sum()
        } else {
            splits.iter().map(|s| s.shards).sum()
        },
        bytes: if appended {
            written(|s| s.bytes)
        } else {
            splits.iter().map(|s| s.bytes).sum()
        },
        seconds: started.elapsed().as_secs_f64(),
        skipped: source.skipped(),
        reused,
        splits: if single { Vec::new() } else { splits },
        table: manifests.first().and_then(|m| m.table.clone()),
        append: appending.as_ref().map(append::Appending::summary),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn options() -> ConvertOptions {
        ConvertOptions::new(vec!["in.parquet".into()], "out".into())
    }

    fn invalid(options: &ConvertOptions) -> &'static str {
        match options.validate().unwrap_err().kind() {
            ErrorKind::InvalidOption { option, .. } => option,
            other => panic!("{other}"),
        }
    }

    /// The library checks what only the CLI checked, so a library caller
    /// cannot write outside the output folder or panic on no inputs.
    #[test]
    fn every_rule_about_the_options_is_checked_before_a_run() {
        assert!(options().validate().is_ok());
        let mut o = options();
        o.inputs.clear();
        assert_eq!(invalid(&o), "inputs");
        assert!(
            Converter::parquet(vec![])
                .with_output("out")
                .build()
                .is_err(),
            "no panic"
        );
        for prefix in ["../x", "a/b", ".hidden", "", "a\\b"] {
            let mut o = options();
            o.prefix = prefix.into();
            assert_eq!(invalid(&o), "prefix", "{prefix:?}");
        }
        let mut o = options();
        o.index = true;
        o.compression = Compression::Gzip;
        assert_eq!(invalid(&o), "index");
        let mut o = options();
        o.min_shards = Some(0);
        assert_eq!(invalid(&o), "min-shards");
        let mut o = options();
        o.max_records = Some(0);
        assert_eq!(invalid(&o), "max-records-per-shard");
        let mut o = options();
        o.threads = 0;
        assert_eq!(invalid(&o), "threads");
        let mut o = options();
        o.shuffle = Some(ShuffleOptions {
            memory_bytes: 1000,
            tmp_dir: None,
        });
        assert_eq!(invalid(&o), "shuffle-memory");
        let mut o = options();
        o.encode.split_key = Some("id".into());
        assert_eq!(invalid(&o), "split-key");
        for splits in [
            vec![("train", 0.8), ("test", 0.1)],
            vec![("train", 0.5), ("train", 0.5)],
            vec![("../train", 0.5), ("test", 0.5)],
            vec![("train", 1.5), ("test", -0.5)],
            vec![],
        ] {
            let mut o = options();
            o.splits = Some(splits.iter().map(|(n, f)| (n.to_string(), *f)).collect());
            assert_eq!(invalid(&o), "split", "{splits:?}");
        }
        let mut o = options();
        o.splits = Some(vec![
            ("train".into(), 0.8),
            ("validation".into(), 0.1),
            ("test".into(), 0.1),
        ]);
        assert!(o.validate().is_ok(), "0.8 + 0.1 + 0.1 is 1 within rounding");
    }

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
