//! Statistics of records in TFDV's terms and format (`DatasetFeatureStatisticsList`,
//! the messages of `tensorflow/metadata`'s `statistics.proto`): per feature, presence,
//! values per record, numbers' extremes, mean, deviation, zeros, NaN, quantiles and
//! histograms, bytes' unique count, top values and lengths.
//!
//! [`Partial`] counts records and merges with others in order; [`StatsReader`] computes
//! a set's or any TFRecord files' statistics, one partial per file in parallel;
//! [`FeatureSummary`] is the plain view `tfshard stats --json` prints.

mod partial;
pub mod proto;
pub mod quantiles;

use std::path::PathBuf;

use prost::Message;
use rayon::prelude::*;
use serde::Serialize;

pub use partial::Partial;

use crate::dataset::Dataset;
use crate::error::Result;
use crate::example::RecordType;
use crate::progress::Progress;
use crate::records::{for_each_record, ReadSettings};
use crate::store::IoOptions;
use crate::tfrecord::Compression;

/// Computes statistics of every record of a set or of TFRecord files:
/// `StatsReader::builder(paths)`, options, `build()`, `run()`.
pub struct StatsReader {
    dataset: Dataset,
    compression: Option<Compression>,
    record_type: RecordType,
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
                    let mut index = 0u64;
                    for_each_record(path, self.compression, self.record_type, io, |record| {
                        partial
                            .add(&record)
                            .map_err(|e| e.with_file(path).with_record(index))?;
                        index += 1;
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

/// A feature's name: its path's steps joined by `.` (or its older `name`).
pub fn feature_name(f: &proto::FeatureNameStatistics) -> String {
    match &f.field_id {
        Some(proto::FieldId::Path(p)) => p.step.join("."),
        Some(proto::FieldId::Name(n)) => n.clone(),
        None => String::new(),
    }
}

fn summarize_feature(f: &proto::FeatureNameStatistics) -> FeatureSummary {
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
