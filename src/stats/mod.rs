//! Statistics of records in TFDV's terms and format (`DatasetFeatureStatisticsList`,
//! the messages of `tensorflow/metadata`'s `statistics.proto`): per feature, presence,
//! values per record, numbers' extremes, mean, deviation, zeros, NaN, quantiles and
//! histograms, bytes' unique count, top values and lengths.
//!
//! [`Partial`] counts records and merges with others in order; [`StatsReader`] computes
//! a set's or any TFRecord files' statistics, one partial per file in parallel;
//! [`FeatureSummary`] is the plain view `tfshard stats --json` prints.

pub mod drift;
pub mod html;
mod partial;
mod parts;
pub mod proto;
pub mod quantiles;
mod scan;
pub mod tfdv_schema;

use std::path::PathBuf;

use prost::Message;
use rayon::prelude::*;
use serde::Serialize;

pub use partial::Partial;

use crate::dataset::Dataset;
use crate::error::Result;
use crate::example::decode_record;
use crate::example::RecordType;
use crate::progress::Progress;
use crate::records::{for_each_payload, ReadSettings};
use crate::store::IoOptions;
use crate::tfrecord::Compression;

/// Computes statistics of every record of a set or of TFRecord files:
/// `StatsReader::builder(paths)`, options, `build()`, `run()`.
pub struct StatsReader {
    dataset: Dataset,
    compression: Option<Compression>,
    record_type: RecordType,
}

/// A baseline's statistics (`verify --baseline`): a set (a folder or manifest: its
/// stored statistics, else computed from its shards), TFRecord files (computed), or a
/// statistics file, ours or TFDV's: a `DatasetFeatureStatisticsList`, binary, alone or as
/// the first record of a TFRecord file.
///
/// # Errors
///
/// The path cannot be read, or holds no statistics.
pub fn baseline(path: &std::path::Path, io: IoOptions) -> Result<proto::DatasetFeatureStatistics> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let is_set = crate::store::paths::is_dir(path, io)?
        || crate::manifest::is_manifest_name(&name)
        || crate::dataset::is_shard_file_name(&name);
    if is_set {
        let reader = StatsReader::builder(vec![path.to_path_buf()])
            .with_io(io)
            .build()?;
        return statistics(&reader, &crate::progress::NoProgress, &mut |_| {});
    }
    let bytes = crate::store::paths::read(path, io)?;
    let damaged = |why: &str| {
        crate::Error::new(crate::error::ErrorKind::StatsDamaged(format!(
            "not a DatasetFeatureStatisticsList: {why}"
        )))
        .with_file(path)
    };
    // Framed as a TFRecord (TFDV's `write_stats_output`): its first record.
    let framed = bytes.len() >= crate::tfrecord::frame::HEADER_LEN
        && crate::tfrecord::frame::decode_header(
            bytes[..crate::tfrecord::frame::HEADER_LEN]
                .try_into()
                .expect("a header's length"),
        )
        .is_ok_and(|len| {
            (len as usize).saturating_add(crate::tfrecord::frame::HEADER_LEN + 4) <= bytes.len()
        });
    let payload = if framed {
        let len = crate::tfrecord::frame::decode_header(
            bytes[..crate::tfrecord::frame::HEADER_LEN]
                .try_into()
                .expect("a header's length"),
        )
        .unwrap_or(0) as usize;
        &bytes[crate::tfrecord::frame::HEADER_LEN..crate::tfrecord::frame::HEADER_LEN + len]
    } else {
        &bytes[..]
    };
    let list = proto::DatasetFeatureStatisticsList::decode(payload)
        .map_err(|e| damaged(&e.to_string()))?;
    list.datasets
        .into_iter()
        .next()
        .ok_or_else(|| damaged("no dataset"))
}

/// The statistics of the reader's paths: those a set's conversion stored when the paths
/// name one set that keeps them (whole), else computed (`progress` counts bytes read).
/// `on_mismatch` hears of a stored file that is not the manifest's (then computed).
///
/// # Errors
///
/// A stored file that cannot be read; a corrupt record; a feature of two kinds.
pub fn statistics(
    reader: &StatsReader,
    progress: &dyn Progress,
    on_mismatch: &mut dyn FnMut(&std::path::Path),
) -> Result<proto::DatasetFeatureStatistics> {
    match reader.stored()? {
        Stored::Found(stats, _) => Ok(stats),
        other => {
            if let Stored::NotTheManifests(path) = other {
                on_mismatch(&path);
            }
            Ok(reader.run(progress)?.to_proto())
        }
    }
}

/// What `tfshard stats --json` prints: `{"records", "features": [...]}`.
pub fn to_json(stats: &proto::DatasetFeatureStatistics) -> serde_json::Value {
    serde_json::json!({
        "records": stats.num_examples,
        "features": summarize(stats),
    })
}

/// Serialized Examples for tests: ints, floats (some NaN), strings (most distinct, a few
/// frequent), a feature present in some.
#[cfg(test)]
pub(crate) fn test_records(n: usize) -> Vec<Vec<u8>> {
    scan::tests_support::records(n)
}

/// What [`StatsReader::stored`] found.
#[derive(Debug)]
pub enum Stored {
    /// The set's statistics, and the file they came from.
    Found(proto::DatasetFeatureStatistics, PathBuf),
    /// None stored (not one set, or converted without `--stats`).
    None,
    /// A file that is not the one the manifest names (its size or SHA-256 differs: a
    /// writer interrupted between the two): compute the statistics instead.
    NotTheManifests(PathBuf),
}

/// Builds a [`StatsReader`].
pub struct StatsReaderBuilder {
    paths: Vec<PathBuf>,
    reading: crate::records::Reading,
}

impl StatsReader {
    /// Statistics of the records of `paths`: shards, folders of shards, or manifests.
    pub fn builder(paths: Vec<PathBuf>) -> StatsReaderBuilder {
        StatsReaderBuilder {
            paths,
            reading: crate::records::Reading::default(),
        }
    }

    /// The files it reads, in order.
    pub fn files(&self) -> &[PathBuf] {
        &self.dataset.shards
    }

    /// The statistics a set's conversion stored (`{prefix}.stats.pb`), when the paths
    /// name exactly one set and its manifest names them.
    ///
    /// # Errors
    ///
    /// The file cannot be read.
    pub fn stored(&self) -> Result<Stored> {
        let [(manifest_path, manifest)] = self.dataset.manifests.as_slice() else {
            return Ok(Stored::None);
        };
        let Some(info) = &manifest.stats else {
            return Ok(Stored::None);
        };
        let dir = manifest_path.parent().unwrap_or(std::path::Path::new("."));
        let path = dir.join(&info.file);
        if path.parent() != Some(dir) {
            return Ok(Stored::None);
        }
        let bytes = crate::store::paths::read(&path, self.dataset.io)?;
        use sha2::Digest;
        let sha = format!("{:x}", sha2::Sha256::digest(&bytes));
        if bytes.len() as u64 != info.bytes || sha != info.sha256 {
            return Ok(Stored::NotTheManifests(path));
        }
        let list = proto::DatasetFeatureStatisticsList::decode(bytes.as_slice()).map_err(|e| {
            crate::Error::new(crate::error::ErrorKind::StatsDamaged(e.to_string())).with_file(&path)
        })?;
        match list.datasets.into_iter().next() {
            Some(stats) => Ok(Stored::Found(stats, path)),
            None => Err(crate::Error::new(crate::error::ErrorKind::StatsDamaged(
                "no dataset".into(),
            ))
            .with_file(&path)),
        }
    }

    /// Reads every record, files in parallel, and merges their statistics in file order
    /// (the same statistics whatever the threads). `progress` counts bytes read.
    ///
    /// # Errors
    ///
    /// A corrupt record (naming file, record and offset), or a feature of two kinds.
    pub fn run(&self, progress: &dyn Progress) -> Result<Partial> {
        let io = self.dataset.io;
        progress.set_total(
            (self.dataset.shards.iter())
                .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
                .sum(),
        );
        // Files a few at a time per thread, merged in file order as each group ends:
        // memory holds a group's partials, not every file's.
        let group = rayon::current_num_threads().max(1) * 2;
        let mut all = Partial::new();
        for files in self.dataset.shards.chunks(group) {
            let parts: Vec<Partial> = files
                .par_iter()
                .map(|path| {
                    let mut partial = Partial::new();
                    let record_type = self.record_type;
                    for_each_payload(path, self.compression, io, |bytes, index, offset| {
                        let at = |e: crate::Error| {
                            e.with_file(path).with_record(index).with_offset(offset)
                        };
                        let before = partial.undecodable();
                        partial.add_payload(bytes, record_type).map_err(at)?;
                        if partial.undecodable() > before {
                            // Not a record of its type: the decoder's error, as `verify`'s.
                            decode_record(bytes, record_type).map_err(at)?;
                        }
                        Ok(true)
                    })?;
                    progress.advance(std::fs::metadata(path).map_or(0, |m| m.len()), 0);
                    Ok(partial)
                })
                .collect::<Result<_>>()?;
            for (part, path) in parts.into_iter().zip(files) {
                all.merge(part).map_err(|e| e.with_file(path))?;
            }
        }
        Ok(all)
    }
}

crate::records::read_settings!(StatsReaderBuilder);

impl StatsReaderBuilder {
    crate::records::reading_setters!();

    /// Finds the files.
    ///
    /// # Errors
    ///
    /// No path; a path that does not exist, a folder with no manifest and no shard, a
    /// manifest that cannot be read.
    pub fn build(self) -> Result<StatsReader> {
        if self.paths.is_empty() {
            return Err(crate::error::Error::invalid_option("paths", "give a path"));
        }
        let (dataset, record_type) = self.reading.discover(&self.paths)?;
        Ok(StatsReader {
            dataset,
            compression: self.reading.compression,
            record_type,
        })
    }
}

/// The statistics as TFDV writes them: a `DatasetFeatureStatisticsList` of one dataset,
/// serialized.
pub fn to_tfdv_bytes(stats: &proto::DatasetFeatureStatistics) -> Vec<u8> {
    proto::DatasetFeatureStatisticsList {
        datasets: vec![stats.clone()],
    }
    .encode_to_vec()
}

/// One feature's statistics, plainly: what `tfshard stats --json` prints.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FeatureSummary {
    /// The feature's name (its path's steps joined by `.`).
    pub name: String,
    /// `INT`, `FLOAT`, `STRING` or `BYTES`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Records holding it (an empty list counts).
    pub present: u64,
    /// Records without it.
    pub missing: u64,
    /// Values per record where present: min, mean, max.
    pub values_per_record: [f64; 3],
    /// Numbers' statistics (INT, FLOAT).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numbers: Option<NumberSummary>,
    /// Bytes' statistics (STRING, BYTES).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strings: Option<StringSummary>,
}

/// A number feature's statistics.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NumberSummary {
    /// Least value (NaN aside).
    pub min: f64,
    /// Mean.
    pub mean: f64,
    /// Population standard deviation.
    pub std_dev: f64,
    /// Median (from the quantile summary).
    pub median: f64,
    /// Greatest value.
    pub max: f64,
    /// Values equal to zero.
    pub zeros: u64,
    /// NaN values.
    pub nan: u64,
    /// The deciles' edges: min, 10%, ..., 90%, max.
    pub deciles: Vec<f64>,
}

/// A bytes feature's statistics.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StringSummary {
    /// Distinct values.
    pub unique: u64,
    /// Mean length in bytes.
    pub avg_length: f64,
    /// The most frequent values with their counts (at most 20).
    pub top_values: Vec<(String, u64)>,
    /// Values that are not UTF-8.
    pub invalid_utf8: u64,
}

/// The plain view of TFDV's statistics (ours, or a file TFDV wrote).
pub fn summarize(stats: &proto::DatasetFeatureStatistics) -> Vec<FeatureSummary> {
    stats.features.iter().map(summarize_feature).collect()
}

/// A feature's counts common to every type (`None` when it has no statistics).
pub(crate) fn common_of(f: &proto::FeatureNameStatistics) -> Option<&proto::CommonStatistics> {
    match &f.stats {
        Some(proto::Stats::NumStats(n)) => n.common_stats.as_ref(),
        Some(proto::Stats::StringStats(s)) => s.common_stats.as_ref(),
        Some(proto::Stats::BytesStats(b)) => b.common_stats.as_ref(),
        Some(proto::Stats::StructStats(s)) => s.common_stats.as_ref(),
        None => None,
    }
}

/// A feature's name: its path's steps joined by `.` (or its older `name`).
pub fn feature_name(f: &proto::FeatureNameStatistics) -> String {
    match &f.field_id {
        Some(proto::FieldId::Path(p)) => p.step.join("."),
        Some(proto::FieldId::Name(n)) => n.clone(),
        None => String::new(),
    }
}

pub(crate) fn summarize_feature(f: &proto::FeatureNameStatistics) -> FeatureSummary {
    let kind = match proto::FeatureType::try_from(f.r#type) {
        Ok(proto::FeatureType::Int) => "INT",
        Ok(proto::FeatureType::Float) => "FLOAT",
        Ok(proto::FeatureType::Bytes) => "BYTES",
        Ok(proto::FeatureType::Struct) => "STRUCT",
        _ => "STRING",
    };
    let common = match &f.stats {
        Some(proto::Stats::NumStats(n)) => n.common_stats.clone(),
        Some(proto::Stats::StringStats(s)) => s.common_stats.clone(),
        Some(proto::Stats::BytesStats(b)) => b.common_stats.clone(),
        Some(proto::Stats::StructStats(s)) => s.common_stats.clone(),
        None => None,
    }
    .unwrap_or_default();
    let numbers = match &f.stats {
        Some(proto::Stats::NumStats(n)) => Some(NumberSummary {
            min: n.min,
            mean: n.mean,
            std_dev: n.std_dev,
            median: n.median,
            max: n.max,
            zeros: n.num_zeros,
            nan: n.histograms.first().map_or(0, |h| h.num_nan),
            deciles: n
                .histograms
                .iter()
                .find(|h| h.r#type == proto::HistogramType::Quantiles as i32)
                .map(|h| {
                    let mut edges: Vec<f64> = h.buckets.iter().map(|b| b.low_value).collect();
                    edges.extend(h.buckets.last().map(|b| b.high_value));
                    edges
                })
                .unwrap_or_default(),
        }),
        _ => None,
    };
    let strings = match &f.stats {
        Some(proto::Stats::StringStats(s)) => Some(StringSummary {
            unique: s.unique,
            avg_length: f64::from(s.avg_length),
            top_values: s
                .top_values
                .iter()
                .map(|t| (t.value.clone(), t.frequency as u64))
                .collect(),
            invalid_utf8: s.invalid_utf8_count,
        }),
        _ => None,
    };
    FeatureSummary {
        name: feature_name(f),
        kind,
        present: common.num_non_missing,
        missing: common.num_missing,
        values_per_record: [
            common.min_num_values as f64,
            f64::from(common.avg_num_values),
            common.max_num_values as f64,
        ],
        numbers,
        strings,
    }
}
