//! TFDV's `Schema` (tensorflow-metadata's `schema.proto`) in its text format: read for
//! `verify --schema` (parsed by prost-reflect against the message's descriptor, which
//! build.rs compiles from the vendored `.proto` files, then decoded into the fields
//! checked here), and inferred from statistics for `schema --format tfdv`.
//!
//! Checked against a schema: a feature of the schema missing (where its presence asks
//! for one) or one the schema lacks, its type, its presence (`min_fraction`,
//! `min_count`), its values per record (`value_count`), an integer's or a float's domain
//! (`int_domain`, `float_domain` with `disallow_nan`), a bytes feature's string domain
//! (inline, or the schema's named by `domain`), with TFDV's anomaly names; the schema's
//! drift comparators' thresholds when a baseline is compared too.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use miette::Diagnostic;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage};

use super::drift::Anomaly;
use super::proto::{self, Stats};
use super::proto::{common_of, feature_name};

/// The fields of `tensorflow.metadata.v0.Schema` checked here (the others are skipped).
#[derive(Clone, PartialEq, Message)]
pub struct Schema {
    /// The features.
    #[prost(message, repeated, tag = "1")]
    pub feature: Vec<Feature>,
    /// String domains that features name by `domain`.
    #[prost(message, repeated, tag = "4")]
    pub string_domain: Vec<StringDomain>,
}

/// A feature's constraints.
#[derive(Clone, PartialEq, Message)]
pub struct Feature {
    /// Its name.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// Values per record.
    #[prost(message, optional, tag = "5")]
    pub value_count: Option<ValueCount>,
    /// `BYTES` 1, `INT` 2, `FLOAT` 3, `STRUCT` 4.
    #[prost(int32, optional, tag = "6")]
    pub r#type: Option<i32>,
    /// The schema's string domain it takes its values from.
    #[prost(string, optional, tag = "7")]
    pub domain: Option<String>,
    /// Integers' range.
    #[prost(message, optional, tag = "9")]
    pub int_domain: Option<IntDomain>,
    /// Floats' range.
    #[prost(message, optional, tag = "10")]
    pub float_domain: Option<FloatDomain>,
    /// Its own string domain.
    #[prost(message, optional, tag = "11")]
    pub string_domain: Option<StringDomain>,
    /// Where it must be present.
    #[prost(message, optional, tag = "14")]
    pub presence: Option<FeaturePresence>,
    /// Training/serving skew thresholds (not checked: one set at a time).
    #[prost(message, optional, tag = "18")]
    pub skew_comparator: Option<FeatureComparator>,
    /// Drift thresholds.
    #[prost(message, optional, tag = "21")]
    pub drift_comparator: Option<FeatureComparator>,
}

/// `presence`.
#[derive(Clone, PartialEq, Message)]
pub struct FeaturePresence {
    /// Least fraction of records holding it.
    #[prost(double, optional, tag = "1")]
    pub min_fraction: Option<f64>,
    /// Least number of records holding it.
    #[prost(int64, optional, tag = "2")]
    pub min_count: Option<i64>,
}

/// `value_count`.
#[derive(Clone, PartialEq, Message)]
pub struct ValueCount {
    /// Least values in a record holding it.
    #[prost(int64, optional, tag = "1")]
    pub min: Option<i64>,
    /// Most values.
    #[prost(int64, optional, tag = "2")]
    pub max: Option<i64>,
}

/// `int_domain`.
#[derive(Clone, PartialEq, Message)]
pub struct IntDomain {
    /// Least value.
    #[prost(int64, optional, tag = "3")]
    pub min: Option<i64>,
    /// Greatest value.
    #[prost(int64, optional, tag = "4")]
    pub max: Option<i64>,
}

/// `float_domain`.
#[derive(Clone, PartialEq, Message)]
pub struct FloatDomain {
    /// Least value.
    #[prost(float, optional, tag = "3")]
    pub min: Option<f32>,
    /// Greatest value.
    #[prost(float, optional, tag = "4")]
    pub max: Option<f32>,
    /// NaN is an anomaly.
    #[prost(bool, optional, tag = "5")]
    pub disallow_nan: Option<bool>,
}

/// `string_domain`.
#[derive(Clone, PartialEq, Message)]
pub struct StringDomain {
    /// Its name (a schema-level domain's).
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// The values.
    #[prost(string, repeated, tag = "2")]
    pub value: Vec<String>,
}

/// `drift_comparator`, `skew_comparator`.
#[derive(Clone, PartialEq, Message)]
pub struct FeatureComparator {
    /// L-infinity's threshold.
    #[prost(message, optional, tag = "1")]
    pub infinity_norm: Option<Threshold>,
    /// Jensen–Shannon's threshold.
    #[prost(message, optional, tag = "2")]
    pub jensen_shannon_divergence: Option<Threshold>,
}

/// A comparator's threshold.
#[derive(Clone, PartialEq, Message)]
pub struct Threshold {
    /// The threshold.
    #[prost(double, optional, tag = "1")]
    pub threshold: Option<f64>,
}

const SCHEMA: &str = "tensorflow.metadata.v0.Schema";

/// Parses a schema in text format (as `tfdv.write_schema_text` writes it).
///
/// # Errors
///
/// The text is not a `Schema`: the parser's message, with its line and column.
pub fn parse_text(text: &str) -> Result<Schema, String> {
    let pool =
        DescriptorPool::decode(&include_bytes!(concat!(env!("OUT_DIR"), "/tfmd_schema.bin"))[..])
            .map_err(|e| format!("the schema's descriptor: {e}"))?;
    let desc = pool
        .get_message_by_name(SCHEMA)
        .ok_or_else(|| format!("no {SCHEMA} in the descriptor"))?;
    let message = DynamicMessage::parse_text_format(desc, text).map_err(|e| {
        let at = e
            .labels()
            .and_then(|mut l| l.next())
            .map(|l| {
                let before = &text[..l.offset().min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!(" at line {line}, column {column}")
            })
            .unwrap_or_default();
        format!("not a TFDV Schema in text format{at}: {e}")
    })?;
    Schema::decode(message.encode_to_vec().as_slice()).map_err(|e| e.to_string())
}

fn type_of(f: &proto::FeatureNameStatistics) -> i32 {
    match proto::FeatureType::try_from(f.r#type) {
        Ok(proto::FeatureType::Int) => 2,
        Ok(proto::FeatureType::Float) => 3,
        Ok(proto::FeatureType::Struct) => 4,
        _ => 1,
    }
}

fn type_name(t: i32) -> &'static str {
    match t {
        1 => "BYTES",
        2 => "INT",
        3 => "FLOAT",
        4 => "STRUCT",
        _ => "TYPE_UNKNOWN",
    }
}

/// The anomalies of `stats` against `schema`.
pub fn check(stats: &proto::DatasetFeatureStatistics, schema: &Schema) -> Vec<Anomaly> {
    let ours: BTreeMap<String, &proto::FeatureNameStatistics> = stats
        .features
        .iter()
        .map(|f| (feature_name(f), f))
        .collect();
    let domains: BTreeMap<&str, &StringDomain> = schema
        .string_domain
        .iter()
        .filter_map(|d| Some((d.name.as_deref()?, d)))
        .collect();
    let mut out = Vec::new();
    let records = stats.num_examples;
    let mut named = BTreeSet::new();
    for sf in &schema.feature {
        let name = sf.name.clone().unwrap_or_default();
        named.insert(name.clone());
        let anomaly =
            |kind, measured: Option<f64>, threshold: Option<f64>, description: String| Anomaly {
                feature: name.clone(),
                kind,
                measured,
                threshold,
                description,
            };
        let presence = sf.presence.clone().unwrap_or_default();
        let Some(f) = ours.get(&name) else {
            if presence.min_count.unwrap_or(0) > 0 || presence.min_fraction.unwrap_or(0.0) > 0.0 {
                out.push(anomaly(
                    "SCHEMA_MISSING_COLUMN",
                    None,
                    None,
                    "the schema has it, the set does not".into(),
                ));
            }
            continue;
        };
        if let Some(t) = sf.r#type {
            if t != 0 && t != type_of(f) {
                out.push(anomaly(
                    "UNEXPECTED_DATA_TYPE",
                    None,
                    None,
                    format!(
                        "expected data of type {} but got {}",
                        type_name(t),
                        type_name(type_of(f))
                    ),
                ));
                continue;
            }
        }
        let c = common_of(f).cloned().unwrap_or_default();
        let fraction = c.num_non_missing as f64 / records.max(1) as f64;
        if let Some(min) = presence.min_fraction {
            if fraction < min {
                out.push(anomaly(
                    "FEATURE_TYPE_LOW_FRACTION_PRESENT",
                    Some(fraction),
                    Some(min),
                    format!("present in {fraction:.4} of the records, the schema's minimum {min}"),
                ));
            }
        }
        if let Some(min) = presence.min_count {
            if (c.num_non_missing as i64) < min {
                out.push(anomaly(
                    "FEATURE_TYPE_LOW_NUMBER_PRESENT",
                    Some(c.num_non_missing as f64),
                    Some(min as f64),
                    format!(
                        "present in {} records, the schema's minimum {min}",
                        c.num_non_missing
                    ),
                ));
            }
        }
        if let (Some(vc), true) = (&sf.value_count, c.num_non_missing > 0) {
            if vc.min.is_some_and(|m| (c.min_num_values as i64) < m) {
                out.push(anomaly(
                    "FEATURE_TYPE_LOW_NUMBER_VALUES",
                    Some(c.min_num_values as f64),
                    vc.min.map(|m| m as f64),
                    format!(
                        "some records have {} values, the schema's minimum {}",
                        c.min_num_values,
                        vc.min.unwrap_or(0)
                    ),
                ));
            }
            if vc.max.is_some_and(|m| (c.max_num_values as i64) > m) {
                out.push(anomaly(
                    "FEATURE_TYPE_HIGH_NUMBER_VALUES",
                    Some(c.max_num_values as f64),
                    vc.max.map(|m| m as f64),
                    format!(
                        "some records have {} values, the schema's maximum {}",
                        c.max_num_values,
                        vc.max.unwrap_or(0)
                    ),
                ));
            }
        }
        match &f.stats {
            Some(Stats::NumStats(n)) if c.tot_num_values > 0 => {
                if let Some(d) = &sf.int_domain {
                    if d.min.is_some_and(|m| n.min < m as f64) {
                        out.push(anomaly(
                            "INT_TYPE_SMALL_INT",
                            Some(n.min),
                            d.min.map(|m| m as f64),
                            format!("unexpectedly small value: {}", n.min),
                        ));
                    }
                    if d.max.is_some_and(|m| n.max > m as f64) {
                        out.push(anomaly(
                            "INT_TYPE_BIG_INT",
                            Some(n.max),
                            d.max.map(|m| m as f64),
                            format!("unexpectedly large value: {}", n.max),
                        ));
                    }
                }
                if let Some(d) = &sf.float_domain {
                    if d.min.is_some_and(|m| n.min < f64::from(m)) {
                        out.push(anomaly(
                            "FLOAT_TYPE_SMALL_FLOAT",
                            Some(n.min),
                            d.min.map(f64::from),
                            format!("unexpectedly low value: {}", n.min),
                        ));
                    }
                    if d.max.is_some_and(|m| n.max > f64::from(m)) {
                        out.push(anomaly(
                            "FLOAT_TYPE_BIG_FLOAT",
                            Some(n.max),
                            d.max.map(f64::from),
                            format!("unexpectedly high value: {}", n.max),
                        ));
                    }
                    let nan = n.histograms.first().map_or(0, |h| h.num_nan);
                    if d.disallow_nan == Some(true) && nan > 0 {
                        out.push(anomaly(
                            "FLOAT_TYPE_HAS_NAN",
                            Some(nan as f64),
                            None,
                            "float feature has NaN values".into(),
                        ));
                    }
                }
            }
            Some(Stats::StringStats(s)) => {
                let domain = sf
                    .string_domain
                    .as_ref()
                    .or_else(|| sf.domain.as_deref().and_then(|d| domains.get(d).copied()));
                if let Some(domain) = domain {
                    let allowed: BTreeSet<&str> = domain.value.iter().map(String::as_str).collect();
                    let seen = s
                        .rank_histogram
                        .as_ref()
                        .map_or(&[][..], |r| &r.buckets[..]);
                    let total: f64 = seen.iter().map(|b| b.sample_count).sum();
                    let missing: Vec<String> = seen
                        .iter()
                        .filter(|b| !allowed.contains(b.label.as_str()))
                        .map(|b| {
                            let pct = 100.0 * b.sample_count / total.max(1.0);
                            if pct < 1.0 {
                                format!("{:?} (<1%)", b.label)
                            } else {
                                format!("{:?} (~{}%)", b.label, pct.floor())
                            }
                        })
                        .collect();
                    if !missing.is_empty() {
                        out.push(anomaly(
                            "ENUM_TYPE_UNEXPECTED_STRING_VALUES",
                            Some(missing.len() as f64),
                            None,
                            format!(
                                "values missing from the schema's domain: {}",
                                missing.join(", ")
                            ),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    for name in ours.keys().filter(|n| !named.contains(*n)) {
        out.push(Anomaly {
            feature: name.clone(),
            kind: "SCHEMA_NEW_COLUMN",
            measured: None,
            threshold: None,
            description: "the set has it, the schema does not".into(),
        });
    }
    out
}

/// The drift thresholds a schema gives, per feature (the larger of its comparators').
pub fn drift_thresholds(schema: &Schema) -> BTreeMap<String, f64> {
    schema
        .feature
        .iter()
        .filter_map(|f| {
            let c = f.drift_comparator.as_ref()?;
            let t = [&c.infinity_norm, &c.jensen_shannon_divergence]
                .into_iter()
                .filter_map(|t| t.as_ref()?.threshold)
                .fold(None, |a: Option<f64>, t| Some(a.map_or(t, |a| a.max(t))))?;
            Some((f.name.clone()?, t))
        })
        .collect()
}

/// Largest string domain inferred (TFDV's `max_string_domain_size`).
const MAX_STRING_DOMAIN: u64 = 100;

fn quoted(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {
                let _ = write!(out, "\\{:03o}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A schema inferred from statistics, in text format (TFDV's `infer_schema`, in its
/// ways): each feature's type; presence (`min_fraction: 1.0` where every record has it,
/// else `min_count: 1`); values per record (`min` and `max` where every record holding
/// it has the same number, else `min`); a bytes feature with at most 100 distinct values,
/// every one of them known, gets a string domain of them.
pub fn infer_text(stats: &proto::DatasetFeatureStatistics) -> String {
    let mut out = String::new();
    let mut domains = String::new();
    let records = stats.num_examples;
    for f in &stats.features {
        let name = feature_name(f);
        let c = common_of(f).cloned().unwrap_or_default();
        let _ = writeln!(out, "feature {{\n  name: {}", quoted(&name));
        let t = type_of(f);
        if c.num_non_missing > 0 {
            let _ = writeln!(out, "  type: {}", type_name(t));
        }
        if c.num_non_missing == records && records > 0 {
            out.push_str("  presence {\n    min_fraction: 1.0\n    min_count: 1\n  }\n");
        } else if c.num_non_missing > 0 {
            out.push_str("  presence {\n    min_count: 1\n  }\n");
        }
        if c.num_non_missing > 0 {
            if c.min_num_values == c.max_num_values {
                let _ = writeln!(
                    out,
                    "  value_count {{\n    min: {}\n    max: {}\n  }}",
                    c.min_num_values, c.max_num_values
                );
            } else {
                let _ = writeln!(out, "  value_count {{\n    min: {}\n  }}", c.min_num_values);
            }
        }
        if let Some(Stats::StringStats(s)) = &f.stats {
            let known = s
                .rank_histogram
                .as_ref()
                .map_or(0, |r| r.buckets.len() as u64);
            if s.unique > 0 && s.unique <= MAX_STRING_DOMAIN && known == s.unique {
                let mut values: Vec<&str> = s
                    .rank_histogram
                    .as_ref()
                    .map(|r| r.buckets.iter().map(|b| b.label.as_str()).collect())
                    .unwrap_or_default();
                if !values.contains(&"__BYTES_VALUE__") {
                    values.sort_unstable();
                    let _ = writeln!(out, "  domain: {}", quoted(&name));
                    let _ = writeln!(domains, "string_domain {{\n  name: {}", quoted(&name));
                    for v in values {
                        let _ = writeln!(domains, "  value: {}", quoted(v));
                    }
                    domains.push_str("}\n");
                }
            }
        }
        out.push_str("}\n");
    }
    out.push_str(&domains);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A schema inferred from statistics reads back, and the statistics pass it; a
    /// schema with tighter bounds names each feature that breaks one.
    #[test]
    fn an_inferred_schema_reads_back_and_holds() {
        let mut p = crate::stats::Partial::new();
        for r in crate::stats::test_records(300) {
            p.add_payload(&r, crate::example::RecordType::Example)
                .unwrap();
        }
        let stats = p.to_proto();
        let text = infer_text(&stats);
        let schema = parse_text(&text).unwrap();
        assert_eq!(schema.feature.len(), stats.features.len());
        assert_eq!(check(&stats, &schema), vec![]);
        let tight = parse_text(
            r#"
            # a comment
            feature { name: "i" type: INT int_domain { min: 0 max: 5 } presence { min_fraction: 1.0 } }
            feature { name: "sometimes" type: BYTES presence { min_fraction: 0.9 } }
            feature { name: "x" type: INT }
            feature { name: "gone" presence { min_count: 1 } }
            feature { name: "s" type: BYTES domain: "few" }
            string_domain { name: "few" value: "frequent" }
            "#,
        )
        .unwrap();
        let kinds: Vec<(String, &str)> = check(&stats, &tight)
            .into_iter()
            .map(|a| (a.feature, a.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("i".to_owned(), "INT_TYPE_SMALL_INT"),
                ("i".to_owned(), "INT_TYPE_BIG_INT"),
                ("sometimes".to_owned(), "FEATURE_TYPE_LOW_FRACTION_PRESENT"),
                ("x".to_owned(), "UNEXPECTED_DATA_TYPE"),
                ("gone".to_owned(), "SCHEMA_MISSING_COLUMN"),
                ("s".to_owned(), "ENUM_TYPE_UNEXPECTED_STRING_VALUES"),
            ]
        );
        let err = parse_text("feature { name: \"a\" nonsense: 1 }").unwrap_err();
        assert!(err.contains("line 1"), "{err}");
    }
}
