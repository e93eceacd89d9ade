//! What a conversion is asked to do: [`ConvertOptions`] (every flag of `convert`,
//! resolved), the rules about them that [`ConvertOptions::validate`] checks before a run
//! touches anything, and the options a manifest records.

use std::path::PathBuf;

use serde_json::json;

use super::Partitioning;
use crate::error::{Error, Result};
use crate::example::encode::EncodeOptions;
use crate::example::RecordType;
use crate::manifest::{self, InputInfo, Manifest, MANIFEST_VERSION};
use crate::progress::CancelToken;
use crate::shard::name::{self, DEFAULT_PREFIX};
use crate::store;
use crate::tfrecord::Compression;

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

/// What to convert and how: what a [`Converter`](super::Converter) follows, set through
/// its builder's setters and read back with
/// [`Converter::options`](super::Converter::options).
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
    /// Count the statistics of every shard and keep them with the set (`--stats`).
    pub stats: bool,
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
            stats: false,
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
    pub(crate) fn manifest_options(&self) -> std::collections::BTreeMap<String, serde_json::Value> {
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
        if self.stats {
            // (Absent when off, as in sets converted before statistics were kept.)
            o.insert("stats".into(), json!(true));
        }
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

impl ConvertOptions {
    /// A manifest for this run's outputs, without shards yet.
    pub(crate) fn new_manifest(
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
            stats: None,
        }
    }
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
            crate::Converter::parquet(vec![])
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
}
