//! Statistics of records in TFDV's terms and format (`DatasetFeatureStatisticsList`,
//! the messages of `tensorflow/metadata`'s `statistics.proto`): per feature, presence,
//! values per record, numbers' extremes, mean, deviation, zeros, NaN, quantiles and
//! histograms, bytes' unique count, top values and lengths.
//!
//! [`Partial`] counts records (a shard writer's, or a file's) and merges with others in
//! order, kept as bytes beside each shard; [`FeatureSummary`] is the plain view `tfshard
//! stats --json` prints; [`drift`] and [`tfdv_schema`] find anomalies, [`html`] draws
//! the page. Reading a set's kept statistics, or computing those of files, is
//! [`crate::describe`]'s.

pub mod drift;
pub mod html;
mod partial;
mod parts;
pub mod proto;
pub mod quantiles;
mod scan;
pub mod tfdv_schema;

use prost::Message;
use serde::Serialize;

pub use partial::Partial;
pub use proto::feature_name;

/// The anomalies of `set` against a TFDV schema's constraints, then against a
/// baseline's statistics (a feature found missing by both named once).
pub fn anomalies(
    set: &proto::DatasetFeatureStatistics,
    schema: Option<&tfdv_schema::Schema>,
    baseline: Option<&proto::DatasetFeatureStatistics>,
    thresholds: &drift::Thresholds,
) -> Vec<drift::Anomaly> {
    let mut out = schema.map_or_else(Vec::new, |s| tfdv_schema::check(set, s));
    for a in baseline.map_or_else(Vec::new, |b| drift::compare(set, b, thresholds)) {
        if !out
            .iter()
            .any(|o| o.feature == a.feature && o.kind == a.kind)
        {
            out.push(a);
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::RecordType;
    use proptest::prelude::*;

    /// What users feed the statistics, as `fuzz/fuzz_targets/stats_inputs.rs` feeds it:
    /// errors, never a panic; our own bytes and schemas read back.
    fn untrusted(data: &[u8]) {
        for record_type in [RecordType::Example, RecordType::SequenceExample] {
            let mut p = Partial::new();
            if p.add_payload(data, record_type).is_ok() && p.add_payload(data, record_type).is_ok()
            {
                let bytes = p.to_bytes();
                let back = Partial::from_bytes(&bytes).expect("our own bytes read back");
                assert_eq!(back.to_bytes(), bytes);
            }
        }
        if let Ok(p) = Partial::from_bytes(data) {
            let _ = summarize(&p.to_proto());
        }
        if let Ok(list) = proto::DatasetFeatureStatisticsList::decode(data) {
            if let Some(d) = list.datasets.first() {
                let _ = drift::compare(d, d, &drift::Thresholds::default());
                let _ = html::page("fuzz", d, Some(d));
                let schema = tfdv_schema::parse_text(&tfdv_schema::infer_text(d))
                    .expect("our own schema parses");
                let _ = tfdv_schema::check(d, &schema);
            }
        }
        if let Ok(text) = std::str::from_utf8(data) {
            if let Ok(schema) = tfdv_schema::parse_text(text) {
                let _ = tfdv_schema::check(&proto::DatasetFeatureStatistics::default(), &schema);
            }
        }
    }

    /// Valid inputs of each kind, to damage.
    fn seeds() -> Vec<Vec<u8>> {
        let records = test_records(50);
        let mut p = Partial::new();
        for r in &records {
            p.add_payload(r, RecordType::Example).unwrap();
        }
        let stats = p.to_proto();
        let mut out = records[..3].to_vec();
        out.push(p.to_bytes());
        out.push(to_tfdv_bytes(&stats));
        out.push(tfdv_schema::infer_text(&stats).into_bytes());
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256)
        ))]

        #[test]
        fn untrusted_inputs_never_panic(
            seed in 0usize..6,
            edits in prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 0..6),
            random in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            untrusted(&random);
            let mut data = seeds()[seed].clone();
            for (at, byte, how) in edits {
                if data.is_empty() {
                    break;
                }
                let at = at % data.len();
                match how {
                    0 => data[at] = byte,
                    1 => data.truncate(at),
                    _ => data.insert(at, byte),
                }
            }
            untrusted(&data);
        }
    }
}
