//! Comparing a set's statistics with a baseline's, as TFDV's drift comparators do
//! (`tensorflow/data-validation`'s `anomalies/metrics.cc` and `feature_util.cc`):
//!
//! - a feature of the baseline missing from the set (`SCHEMA_MISSING_COLUMN`), or new in
//!   it (`SCHEMA_NEW_COLUMN`); of another type (`UNEXPECTED_DATA_TYPE`);
//! - present in a fraction of the records below the baseline's by more than the threshold
//!   (`FEATURE_TYPE_LOW_FRACTION_PRESENT`);
//! - values per record outside the baseline's where the baseline's are one fixed number
//!   (`FEATURE_TYPE_LOW_NUMBER_VALUES`, `FEATURE_TYPE_HIGH_NUMBER_VALUES`);
//! - bytes: the L-infinity distance of the two sides' top-value frequencies, each side's
//!   rank histogram normalized by its own total (`COMPARATOR_L_INFTY_HIGH`);
//! - numbers: the Jensen–Shannon divergence (base 2) of the two quantile histograms,
//!   aligned on the union of their bucket edges with each bucket's count spread evenly
//!   over its width, point buckets matched by value, infinities and NaN as buckets of
//!   their own that never overlap (`COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH`).
//!
//! An anomaly is a measure strictly above its threshold (0.1 unless given per feature).
//! Domains (a new maximum, a value never seen) are not compared with a baseline: a
//! resample of the same data has them.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::proto;
use super::proto::{common_of, feature_name, Stats};

/// The threshold of every comparator unless one is given for the feature.
pub const DEFAULT_THRESHOLD: f64 = 0.1;

/// One anomaly: the `anomalies` entries of `verify --json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Anomaly {
    /// The feature's name.
    pub feature: String,
    /// TFDV's name of the anomaly type (`COMPARATOR_L_INFTY_HIGH`, ...).
    pub kind: &'static str,
    /// What was measured, where a number was.
    pub measured: Option<f64>,
    /// The threshold it passed, where one applies.
    pub threshold: Option<f64>,
    /// One line that says what differs.
    pub description: String,
}

impl std::fmt::Display for Anomaly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "anomaly: {}: {}: {}",
            self.feature, self.kind, self.description
        )
    }
}

/// Thresholds per feature, the default for the others.
#[derive(Debug, Clone, Default)]
pub struct Thresholds {
    /// `--threshold FEATURE=X`.
    pub per_feature: BTreeMap<String, f64>,
}

impl Thresholds {
    fn of(&self, feature: &str) -> f64 {
        self.per_feature
            .get(feature)
            .copied()
            .unwrap_or(DEFAULT_THRESHOLD)
    }
}

fn type_name(f: &proto::FeatureNameStatistics) -> &'static str {
    match proto::FeatureType::try_from(f.r#type) {
        Ok(proto::FeatureType::Int) => "INT",
        Ok(proto::FeatureType::Float) => "FLOAT",
        Ok(proto::FeatureType::String) => "STRING",
        Ok(proto::FeatureType::Bytes) => "BYTES",
        Ok(proto::FeatureType::Struct) => "STRUCT",
        Err(_) => "UNKNOWN",
    }
}

/// Whether two types are one for the comparison (TFDV's schema knows BYTES for both).
fn same_type(a: &proto::FeatureNameStatistics, b: &proto::FeatureNameStatistics) -> bool {
    let bytes = |t: &str| t == "STRING" || t == "BYTES";
    let (x, y) = (type_name(a), type_name(b));
    x == y || (bytes(x) && bytes(y))
}

/// Compares `set` (TFDV's treatment) with `baseline` (its control).
pub fn compare(
    set: &proto::DatasetFeatureStatistics,
    baseline: &proto::DatasetFeatureStatistics,
    thresholds: &Thresholds,
) -> Vec<Anomaly> {
    let by_name =
        |d: &proto::DatasetFeatureStatistics| -> BTreeMap<String, proto::FeatureNameStatistics> {
            d.features
                .iter()
                .map(|f| (feature_name(f), f.clone()))
                .collect()
        };
    let (ours, theirs) = (by_name(set), by_name(baseline));
    let names: BTreeSet<&String> = ours.keys().chain(theirs.keys()).collect();
    let mut out = Vec::new();
    for name in names {
        let anomaly = |kind, measured, threshold, description: String| Anomaly {
            feature: name.clone(),
            kind,
            measured,
            threshold,
            description,
        };
        let (a, b) = match (ours.get(name), theirs.get(name)) {
            (Some(a), Some(b)) => (a, b),
            (None, _) => {
                out.push(anomaly(
                    "SCHEMA_MISSING_COLUMN",
                    None,
                    None,
                    "the baseline has it, the set does not".into(),
                ));
                continue;
            }
            (_, None) => {
                out.push(anomaly(
                    "SCHEMA_NEW_COLUMN",
                    None,
                    None,
                    "the set has it, the baseline does not".into(),
                ));
                continue;
            }
        };
        if !same_type(a, b) {
            out.push(anomaly(
                "UNEXPECTED_DATA_TYPE",
                None,
                None,
                format!(
                    "expected data of type {} but got {}",
                    type_name(b),
                    type_name(a)
                ),
            ));
            continue;
        }
        let threshold = thresholds.of(name);
        let (ca, cb) = (common_of(a), common_of(b));
        let fraction = |c: Option<&proto::CommonStatistics>, records: u64| {
            c.map_or(0.0, |c| c.num_non_missing as f64 / records.max(1) as f64)
        };
        let (fa, fb) = (
            fraction(ca, set.num_examples),
            fraction(cb, baseline.num_examples),
        );
        if fb - fa > threshold {
            out.push(anomaly(
                "FEATURE_TYPE_LOW_FRACTION_PRESENT",
                Some(fb - fa),
                Some(threshold),
                format!(
                    "present in {:.4} of the records, the baseline's {:.4}: {:.4} fewer, above the threshold {threshold}",
                    fa, fb, fb - fa
                ),
            ));
        }
        if let (Some(ca), Some(cb)) = (ca, cb) {
            let fixed = cb.num_non_missing > 0 && cb.min_num_values == cb.max_num_values;
            if fixed && ca.num_non_missing > 0 {
                if ca.min_num_values < cb.min_num_values {
                    out.push(anomaly(
                        "FEATURE_TYPE_LOW_NUMBER_VALUES",
                        Some(ca.min_num_values as f64),
                        None,
                        format!(
                            "some records have {} values, the baseline's always {}",
                            ca.min_num_values, cb.min_num_values
                        ),
                    ));
                }
                if ca.max_num_values > cb.max_num_values {
                    out.push(anomaly(
                        "FEATURE_TYPE_HIGH_NUMBER_VALUES",
                        Some(ca.max_num_values as f64),
                        None,
                        format!(
                            "some records have {} values, the baseline's always {}",
                            ca.max_num_values, cb.max_num_values
                        ),
                    ));
                }
            }
        }
        match (&a.stats, &b.stats) {
            (Some(Stats::StringStats(x)), Some(Stats::StringStats(y))) => {
                let (d, value) = l_infinity(x.rank_histogram.as_ref(), y.rank_histogram.as_ref());
                if d > threshold {
                    out.push(anomaly(
                        "COMPARATOR_L_INFTY_HIGH",
                        Some(d),
                        Some(threshold),
                        format!(
                            "the L-infinity distance between the set and the baseline is {d:.6}, above the threshold {threshold}; the value with the largest difference is {value:?}"
                        ),
                    ));
                }
            }
            (Some(Stats::NumStats(x)), Some(Stats::NumStats(y))) => {
                let quantiles = |n: &proto::NumericStatistics| {
                    n.histograms
                        .iter()
                        .find(|h| h.r#type == proto::HistogramType::Quantiles as i32)
                        .cloned()
                };
                if let (Some(hx), Some(hy)) = (quantiles(x), quantiles(y)) {
                    if let Some(d) = jensen_shannon(&hx, &hy) {
                        if d > threshold {
                            out.push(anomaly(
                                "COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH",
                                Some(d),
                                Some(threshold),
                                format!(
                                    "the approximate Jensen-Shannon divergence between the set and the baseline is {d:.6}, above the threshold {threshold}"
                                ),
                            ));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// TFDV's `LInftyDistance`: each side's rank histogram normalized by its own total; the
/// largest difference, and the value where it is (ties: the greatest value).
pub fn l_infinity(
    a: Option<&proto::RankHistogram>,
    b: Option<&proto::RankHistogram>,
) -> (f64, String) {
    let map = |h: Option<&proto::RankHistogram>| -> BTreeMap<String, f64> {
        let mut m: BTreeMap<String, f64> = BTreeMap::new();
        for bucket in h.map_or(&[][..], |h| &h.buckets[..]) {
            *m.entry(bucket.label.clone()).or_default() += bucket.sample_count;
        }
        let total: f64 = m.values().sum();
        if total > 0.0 {
            m.values_mut().for_each(|v| *v /= total);
        }
        m
    };
    let (x, y) = (map(a), map(b));
    let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
    let mut best = (0.0f64, String::new());
    for k in keys {
        let d = (x.get(k).copied().unwrap_or(0.0) - y.get(k).copied().unwrap_or(0.0)).abs();
        if d >= best.0 {
            best = (d, k.clone());
        }
    }
    best
}

/// TFDV's `JensenShannonDivergence` of two numeric histograms (see the module docs);
/// `None` when a side holds nothing.
pub fn jensen_shannon(a: &proto::Histogram, b: &proto::Histogram) -> Option<f64> {
    struct Side {
        finite: Vec<(f64, f64, f64)>,
        points: BTreeMap<u64, f64>,
        infinite: f64,
        nan: f64,
    }
    let split = |h: &proto::Histogram| {
        let mut s = Side {
            finite: Vec::new(),
            points: BTreeMap::new(),
            infinite: 0.0,
            nan: h.num_nan as f64,
        };
        for bucket in &h.buckets {
            let (lo, hi, c) = (bucket.low_value, bucket.high_value, bucket.sample_count);
            if !lo.is_finite() || !hi.is_finite() {
                s.infinite += c;
            } else if lo == hi {
                *s.points.entry(ordered(lo)).or_default() += c;
            } else {
                s.finite.push((lo, hi, c));
            }
        }
        s
    };
    let (x, y) = (split(a), split(b));
    // The union of the finite buckets' edges; each side's counts spread evenly.
    let mut edges: Vec<f64> = x
        .finite
        .iter()
        .chain(&y.finite)
        .flat_map(|&(lo, hi, _)| [lo, hi])
        .collect();
    edges.sort_by(f64::total_cmp);
    edges.dedup();
    let rebucket = |s: &Side| -> Vec<f64> {
        edges
            .windows(2)
            .map(|w| {
                let (lo, hi) = (w[0], w[1]);
                s.finite
                    .iter()
                    .map(|&(blo, bhi, c)| {
                        let overlap = (hi.min(bhi) - lo.max(blo)).max(0.0);
                        c * overlap / (bhi - blo)
                    })
                    .sum()
            })
            .collect()
    };
    let (mut p, mut q) = (rebucket(&x), rebucket(&y));
    let points: BTreeSet<u64> = x.points.keys().chain(y.points.keys()).copied().collect();
    for v in points {
        p.push(x.points.get(&v).copied().unwrap_or(0.0));
        q.push(y.points.get(&v).copied().unwrap_or(0.0));
    }
    // Infinities and NaN never overlap between the sides.
    if x.infinite != 0.0 {
        p.push(x.infinite);
        q.push(0.0);
    }
    if y.infinite != 0.0 {
        p.push(0.0);
        q.push(y.infinite);
    }
    if x.nan > 0.0 || y.nan > 0.0 {
        p.extend([0.0, x.nan]);
        q.extend([y.nan, 0.0]);
    }
    let (sp, sq): (f64, f64) = (p.iter().sum(), q.iter().sum());
    if sp <= 0.0 || sq <= 0.0 {
        return None;
    }
    let kl = |p: &[f64], m: &[f64]| -> f64 {
        p.iter()
            .zip(m)
            .filter(|(&p, &m)| p > 0.0 && m > 0.0)
            .map(|(&p, &m)| p * (p / m).log2())
            .sum()
    };
    let p: Vec<f64> = p.iter().map(|v| v / sp).collect();
    let q: Vec<f64> = q.iter().map(|v| v / sq).collect();
    let m: Vec<f64> = p.iter().zip(&q).map(|(a, b)| (a + b) / 2.0).collect();
    Some((0.5 * (kl(&p, &m) + kl(&q, &m))).min(1.0))
}

/// A float's bits, ordered as the float (for a map keyed by exact value).
fn ordered(v: f64) -> u64 {
    let v = if v == 0.0 { 0.0 } else { v };
    let bits = v.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(buckets: &[(f64, f64, f64)], nan: u64) -> proto::Histogram {
        proto::Histogram {
            num_nan: nan,
            r#type: proto::HistogramType::Quantiles as i32,
            buckets: buckets
                .iter()
                .map(|&(low_value, high_value, sample_count)| proto::Bucket {
                    low_value,
                    high_value,
                    sample_count,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn ranks(values: &[(&str, f64)]) -> proto::RankHistogram {
        proto::RankHistogram {
            buckets: values
                .iter()
                .enumerate()
                .map(|(i, &(label, sample_count))| proto::RankBucket {
                    low_rank: i as u64,
                    high_rank: i as u64,
                    label: label.into(),
                    sample_count,
                })
                .collect(),
            name: String::new(),
        }
    }

    /// Worked by hand: the same histogram is 0 apart; disjoint ones 1; half the mass
    /// moved from one bucket to a new one, as TFDV's formula gives.
    #[test]
    fn jensen_shannon_as_tfdv_computes_it() {
        let a = hist(&[(0.0, 1.0, 10.0), (1.0, 2.0, 10.0)], 0);
        assert_eq!(jensen_shannon(&a, &a), Some(0.0));
        let far = hist(&[(1000.0, 2000.0, 20.0)], 0);
        assert_eq!(jensen_shannon(&a, &far), Some(1.0));
        // p = (1/2, 1/2, 0), q = (1/2, 0, 1/2): m = (1/2, 1/4, 1/4);
        // KL(p||m) = 1/2 log2(2) = 1/2 = KL(q||m): JSD = 1/2.
        let b = hist(&[(0.0, 1.0, 10.0), (2.0, 3.0, 10.0)], 0);
        let d = jensen_shannon(&a, &b).unwrap();
        assert!((d - 0.5).abs() < 1e-12, "{d}");
        // A bucket split in two by the other side's edge: counts spread evenly.
        let c = hist(&[(0.0, 0.5, 5.0), (0.5, 2.0, 15.0)], 0);
        assert!(jensen_shannon(&a, &c).unwrap() < 1e-12);
        // NaN never overlaps: all NaN against none is 1.
        let nan = hist(&[], 20);
        assert_eq!(jensen_shannon(&a, &nan), Some(1.0));
        assert_eq!(jensen_shannon(&hist(&[], 0), &a), None);
    }

    #[test]
    fn l_infinity_as_tfdv_computes_it() {
        let a = ranks(&[("x", 50.0), ("y", 50.0)]);
        let b = ranks(&[("x", 30.0), ("y", 60.0), ("z", 10.0)]);
        let (d, value) = l_infinity(Some(&a), Some(&b));
        // x: 0.5 - 0.3 = 0.2; y: 0.5 - 0.6 = 0.1; z: 0.1.
        assert!((d - 0.2).abs() < 1e-12, "{d}");
        assert_eq!(value, "x");
        assert_eq!(l_infinity(None, None), (0.0, String::new()));
    }
}
