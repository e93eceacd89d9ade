//! Statistics of records as they are counted: one [`Partial`] per file or shard, merged in
//! order into the set's, then made into TFDV's messages by [`Partial::to_proto`].
//!
//! Exact: record and value counts, presence, values per record (min, max, total), zeros,
//! NaN, infinities, min, max, mean and deviation (merged by Chan's formula). From
//! summaries: quantiles (a [`Stream`] with a rank error of 0.3%, 0.5% once merged and
//! queried), and, for features with more than [`EXACT_DISTINCT`] distinct values in one
//! partial, the unique count (HyperLogLog, relative error ~0.4%) and the top values
//! (Misra–Gries, counts within 0.1% of the values counted).

use std::collections::HashMap;

use datasketches::codec::{SketchBytes, SketchSlice};
use datasketches::error::{Error as SketchError, ErrorKind as SketchErrorKind};
use datasketches::frequencies::{ErrorType, FrequentItemValue, FrequentItemsSketch};
use datasketches::hll::{HllSketch, HllType, HllUnion};

use super::proto;
use super::quantiles::{Stream, Summary};
use crate::error::{Error, ErrorKind, Result};
use crate::example::proto::{Example, Feature, Features, Kind, SequenceExample};
use crate::example::schema::FeatureKind;
use crate::example::Record;

/// The rank error of a partial's quantile streams.
pub(super) const STREAM_EPS: f64 = 0.003;
/// Entries a partial's quantile summary is compressed to (adds at most 0.1%, each time a
/// partial is merged into another and once when queried: 0.5% in all).
pub(super) const SUMMARY_SIZE: usize = 1000;
/// Values a partial's quantile stream keeps before it samples (see [`Stream`]): a rank's
/// deviation at most 0.08% of the count (and 0.3% at three-and-a-half deviations), to
/// add to the summaries' 0.5%.
pub(super) const SAMPLE_EXACT: u64 = 1 << 18;
/// Distinct values a partial counts exactly before it keeps sketches instead.
pub const EXACT_DISTINCT: usize = 1 << 14;
/// HyperLogLog's `lg_k`: 2^16 registers, a relative standard error of ~0.4% (2% is
/// five deviations).
const HLL_LG_K: u8 = 16;
/// Misra–Gries' map: 4,096 counters, counts within 3.5/4096 of the total.
const TOP_MAP: usize = 4096;
/// Values longer than this (encoded images, documents) are told apart by a digest, never
/// kept: a partial's memory stays bounded whatever its values' sizes.
pub(super) const LONG_VALUE: usize = 1024;

/// A long value's stand-in among the distinct values: its length and the first 16 bytes
/// of its SHA-256, after two bytes that are not UTF-8 (so it is listed as TFDV lists
/// bytes, `__BYTES_VALUE__`).
fn long_key(v: &[u8]) -> [u8; 26] {
    use sha2::Digest;
    let mut key = [0u8; 26];
    key[..2].copy_from_slice(&[0xff, 0xfe]);
    key[2..10].copy_from_slice(&(v.len() as u64).to_le_bytes());
    key[10..].copy_from_slice(&sha2::Sha256::digest(v)[..16]);
    key
}

/// Top values TFDV lists, and ranks in its rank histogram.
const TOP_VALUES: usize = 20;
const RANK_BUCKETS: usize = 1000;

/// Statistics of the records counted so far.
#[derive(Debug, Default)]
pub struct Partial {
    pub(super) records: u64,
    /// Each feature's, in the order first seen ([`Partial::sorted`] by name).
    pub(super) features: Vec<FeaturePartial>,
    index: HashMap<String, usize>,
    /// Records that are not Examples (or SequenceExamples) at all: not counted.
    pub(super) undecodable: u64,
    /// The scan's scratch ([`super::scan`]): the record's features, its numbers, and
    /// the number of records scanned (marks a feature seen in the current one).
    pub(super) pending: Vec<Pending>,
    pub(super) values: Vec<f64>,
    pub(super) stamp: u64,
}

/// One feature of the record being scanned.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pending {
    /// Its slot, once known.
    pub(super) slot: usize,
    /// Where its name lies in the payload.
    pub(super) name: (usize, usize),
    /// `None`: no list set (a missing value).
    pub(super) kind: Option<FeatureKind>,
    /// Where its list message lies in the payload.
    pub(super) list: (usize, usize),
}

/// One feature's.
#[derive(Debug, Default)]
pub(super) struct FeaturePartial {
    pub(super) name: String,
    pub(super) kind: Option<FeatureKind>,
    pub(super) present: u64,
    pub(super) lengths: Lengths,
    pub(super) numbers: Numbers,
    pub(super) strings: Strings,
    /// The scan's mark: the record that last had it.
    pub(super) seen: u64,
}

/// Values per record where present.
#[derive(Debug)]
pub(super) struct Lengths {
    pub(super) min: u64,
    pub(super) max: u64,
    pub(super) total: u64,
    pub(super) stream: Stream,
}

impl Default for Lengths {
    fn default() -> Lengths {
        Lengths {
            min: u64::MAX,
            max: 0,
            total: 0,
            stream: Stream::sampled(STREAM_EPS, SAMPLE_EXACT),
        }
    }
}

/// Numeric values (int64 as f64, as TFDV counts them; floats as the float32 written).
#[derive(Debug)]
pub(super) struct Numbers {
    /// Values but NaN.
    pub(super) count: u64,
    pub(super) nan: u64,
    pub(super) zeros: u64,
    pub(super) pos_inf: u64,
    pub(super) neg_inf: u64,
    pub(super) min: f64,
    pub(super) max: f64,
    /// The extremes of the finite values (the STANDARD histogram's edges).
    pub(super) finite_min: f64,
    pub(super) finite_max: f64,
    pub(super) mean: f64,
    /// Sum of squared distances from the mean.
    pub(super) m2: f64,
    pub(super) stream: Stream,
}

impl Default for Numbers {
    fn default() -> Numbers {
        Numbers {
            count: 0,
            nan: 0,
            zeros: 0,
            pos_inf: 0,
            neg_inf: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            finite_min: f64::INFINITY,
            finite_max: f64::NEG_INFINITY,
            mean: 0.0,
            m2: 0.0,
            stream: Stream::sampled(STREAM_EPS, SAMPLE_EXACT),
        }
    }
}

/// Bytes values.
#[derive(Debug, Default)]
pub(super) struct Strings {
    pub(super) total_len: u64,
    pub(super) min_len: Option<u64>,
    pub(super) max_len: u64,
    pub(super) invalid_utf8: u64,
    pub(super) distinct: Distinct,
}

/// Distinct values and their counts: exact while few, else sketches.
#[derive(Debug)]
pub(super) enum Distinct {
    Exact(HashMap<Vec<u8>, u64>),
    Sketched {
        hll: Box<HllSketch>,
        top: Box<FrequentItemsSketch<Value>>,
    },
}

/// A bytes value as the top-values sketch keeps (and serializes) it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct Value(pub(super) Vec<u8>);

impl std::borrow::Borrow<[u8]> for Value {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl FrequentItemValue for Value {
    fn serialize_size(item: &Self) -> usize {
        4 + item.0.len()
    }

    fn serialize_value(&self, bytes: &mut SketchBytes) {
        bytes.write_u32_le(self.0.len() as u32);
        bytes.write(&self.0);
    }

    fn deserialize_value(cursor: &mut SketchSlice<'_>) -> std::result::Result<Self, SketchError> {
        let len = cursor.read_u32_le().map_err(|_| {
            SketchError::new(SketchErrorKind::InvalidData, "a value's length cut short")
        })? as usize;
        let rest = cursor.remaining();
        if rest.len() < len {
            return Err(SketchError::new(
                SketchErrorKind::InvalidData,
                "a value cut short",
            ));
        }
        let value = Value(rest[..len].to_vec());
        cursor.advance(len as u64);
        Ok(value)
    }
}

impl Default for Distinct {
    fn default() -> Distinct {
        Distinct::Exact(HashMap::new())
    }
}

impl Distinct {
    fn add(&mut self, value: &[u8], count: u64) {
        match self {
            Distinct::Exact(map) => {
                if let Some(c) = map.get_mut(value) {
                    *c += count;
                    return;
                }
                map.insert(value.to_vec(), count);
                if map.len() > EXACT_DISTINCT {
                    self.sketch();
                }
            }
            Distinct::Sketched { hll, top } => {
                hll.update(value);
                top.update_with_count(Value(value.to_vec()), count);
            }
        }
    }

    /// From exact counts to sketches, the values fed in sorted order (the same
    /// sketches from the same values, whatever the map's order).
    fn sketch(&mut self) {
        let Distinct::Exact(map) = self else { return };
        let mut entries: Vec<(Vec<u8>, u64)> = std::mem::take(map).into_iter().collect();
        entries.sort_unstable();
        let mut hll = HllSketch::new(HLL_LG_K, HllType::Hll8).expect("a valid lg_k");
        let mut top = FrequentItemsSketch::<Value>::new(TOP_MAP).expect("a valid map size");
        for (value, count) in entries {
            hll.update(value.as_slice());
            top.update_with_count(Value(value), count);
        }
        *self = Distinct::Sketched {
            hll: Box::new(hll),
            top: Box::new(top),
        };
    }

    fn merge(&mut self, other: Distinct) {
        match other {
            Distinct::Exact(map) => {
                let mut entries: Vec<(Vec<u8>, u64)> = map.into_iter().collect();
                entries.sort_unstable();
                for (value, count) in entries {
                    self.add(&value, count);
                }
            }
            Distinct::Sketched { hll, top } => {
                self.sketch();
                let Distinct::Sketched {
                    hll: mine,
                    top: my_top,
                } = self
                else {
                    unreachable!("sketched above")
                };
                let mut union = HllUnion::new(HLL_LG_K).expect("a valid lg_k");
                union.update(mine);
                union.update(&hll);
                **mine = union.to_sketch(HllType::Hll8);
                my_top.merge(&top);
            }
        }
    }

    fn unique(&self) -> u64 {
        match self {
            Distinct::Exact(map) => map.len() as u64,
            Distinct::Sketched { hll, .. } => hll.estimate().round() as u64,
        }
    }

    /// Values by count, most first (ties: the greater value first, as TFDV), at most
    /// `n`. Once sketched, only values surely more frequent than the sketch's error
    /// (none where every value is rare: no arbitrary value with an inflated count).
    fn top(&self, n: usize) -> Vec<(Vec<u8>, u64)> {
        let mut all: Vec<(Vec<u8>, u64)> = match self {
            Distinct::Exact(map) => map.iter().map(|(v, c)| (v.clone(), *c)).collect(),
            Distinct::Sketched { top, .. } => top
                .frequent_items(ErrorType::NoFalsePositives)
                .into_iter()
                .map(|row| (row.item().0.clone(), row.estimate()))
                .collect(),
        };
        all.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
        all.truncate(n);
        all
    }
}

impl Numbers {
    /// Counts a run of values held in a slice: where all are finite (the common case)
    /// in one pass without a branch a value, else as [`Numbers::add`] does.
    pub(super) fn add_slice(&mut self, values: &[f64]) {
        let (mut sum, mut lo, mut hi, mut zeros) = (0.0f64, f64::INFINITY, f64::NEG_INFINITY, 0u64);
        let mut finite = true;
        for &v in values {
            sum += v;
            lo = lo.min(v);
            hi = hi.max(v);
            zeros += u64::from(v == 0.0);
            finite &= v.is_finite();
        }
        if !finite || values.is_empty() {
            return self.add(values.iter().copied());
        }
        self.zeros += zeros;
        self.min = self.min.min(lo);
        self.max = self.max.max(hi);
        self.finite_min = self.finite_min.min(lo);
        self.finite_max = self.finite_max.max(hi);
        for &v in values {
            self.stream.push(v);
        }
        let mean = sum / values.len() as f64;
        let m2: f64 = values.iter().map(|v| (v - mean) * (v - mean)).sum();
        self.merge_moments(values.len() as u64, mean, m2);
    }

    /// Counts a run of values: exact sums of the run first, then merged.
    pub(super) fn add(&mut self, values: impl Iterator<Item = f64> + Clone) {
        let (mut n, mut sum) = (0u64, 0.0f64);
        for v in values.clone() {
            if v.is_nan() {
                self.nan += 1;
                continue;
            }
            n += 1;
            sum += v;
            if v == 0.0 {
                self.zeros += 1;
            }
            if v == f64::INFINITY {
                self.pos_inf += 1;
            } else if v == f64::NEG_INFINITY {
                self.neg_inf += 1;
            } else {
                self.finite_min = self.finite_min.min(v);
                self.finite_max = self.finite_max.max(v);
            }
            self.min = self.min.min(v);
            self.max = self.max.max(v);
            self.stream.push(v);
        }
        if n == 0 {
            return;
        }
        let mean = sum / n as f64;
        let m2: f64 = values
            .filter(|v| !v.is_nan())
            .map(|v| (v - mean) * (v - mean))
            .sum();
        self.merge_moments(n, mean, m2);
    }

    /// Chan's combination of (count, mean, M2).
    fn merge_moments(&mut self, n: u64, mean: f64, m2: f64) {
        let total = self.count + n;
        let delta = mean - self.mean;
        let (a, b) = (self.count as f64, n as f64);
        self.mean = if self.count == 0 {
            mean
        } else {
            self.mean + delta * b / total as f64
        };
        self.m2 += m2
            + if self.count == 0 {
                0.0
            } else {
                delta * delta * a * b / total as f64
            };
        self.count = total;
    }

    fn merge(&mut self, other: Numbers) {
        self.nan += other.nan;
        self.zeros += other.zeros;
        self.pos_inf += other.pos_inf;
        self.neg_inf += other.neg_inf;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.finite_min = self.finite_min.min(other.finite_min);
        self.finite_max = self.finite_max.max(other.finite_max);
        if other.count > 0 {
            self.merge_moments(other.count, other.mean, other.m2);
        }
        self.stream
            .push_summary(&other.stream.summary(SUMMARY_SIZE));
    }
}

impl Lengths {
    pub(super) fn add(&mut self, n: u64) {
        self.min = self.min.min(n);
        self.max = self.max.max(n);
        self.total += n;
        self.stream.push(n as f64);
    }

    fn merge(&mut self, other: Lengths) {
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.total += other.total;
        self.stream
            .push_summary(&other.stream.summary(SUMMARY_SIZE));
    }
}

impl Partial {
    /// No records yet.
    pub fn new() -> Partial {
        Partial::default()
    }

    /// Records counted.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Records that were not Examples (or SequenceExamples), left out.
    pub fn undecodable(&self) -> u64 {
        self.undecodable
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.records == 0 && self.undecodable == 0 && self.features.is_empty()
    }

    /// The slot of feature `name`, made when new.
    pub(super) fn slot(&mut self, name: &str) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.features.len();
        self.features.push(FeaturePartial {
            name: name.to_owned(),
            ..FeaturePartial::default()
        });
        self.index.insert(name.to_owned(), i);
        i
    }

    /// The slot of feature `name`, if counted.
    pub(super) fn slot_of(&self, name: &[u8]) -> Option<usize> {
        std::str::from_utf8(name)
            .ok()
            .and_then(|n| self.index.get(n).copied())
    }

    /// The features by name.
    pub(super) fn sorted(&self) -> Vec<&FeaturePartial> {
        let mut all: Vec<&FeaturePartial> = self.features.iter().collect();
        all.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Counts one record: an Example's features, a SequenceExample's context features
    /// (its feature lists by their lengths, as `<name>` with one value per step).
    ///
    /// # Errors
    ///
    /// A feature whose kind differs from the one counted before.
    pub fn add(&mut self, record: &Record) -> Result<()> {
        match record {
            Record::Example(Example { features }) => {
                if let Some(Features { feature }) = features {
                    for (name, f) in feature {
                        self.add_feature(name, f)?;
                    }
                }
            }
            Record::SequenceExample(SequenceExample {
                context,
                feature_lists,
            }) => {
                if let Some(Features { feature }) = context {
                    for (name, f) in feature {
                        self.add_feature(name, f)?;
                    }
                }
                if let Some(lists) = feature_lists {
                    for (name, list) in &lists.feature_list {
                        let slot = self.slot(name);
                        let f = &mut self.features[slot];
                        f.present += 1;
                        f.lengths.add(list.feature.len() as u64);
                    }
                }
            }
            Record::Bytes(_) => {}
        }
        self.records += 1;
        Ok(())
    }

    fn add_feature(&mut self, name: &str, feature: &Feature) -> Result<()> {
        let kind = match &feature.kind {
            None => None,
            Some(Kind::Int64List(_)) => Some(FeatureKind::Int64),
            Some(Kind::FloatList(_)) => Some(FeatureKind::Float),
            Some(Kind::BytesList(_)) => Some(FeatureKind::Bytes),
        };
        let slot = self.slot(name);
        let f = &mut self.features[slot];
        f.check_kind(kind)?;
        match &feature.kind {
            None => {}
            Some(Kind::Int64List(l)) => {
                f.present += 1;
                f.lengths.add(l.value.len() as u64);
                f.numbers.add(l.value.iter().map(|&v| v as f64));
            }
            Some(Kind::FloatList(l)) => {
                f.present += 1;
                f.lengths.add(l.value.len() as u64);
                f.numbers.add(l.value.iter().map(|&v| f64::from(v)));
            }
            Some(Kind::BytesList(l)) => {
                f.present += 1;
                f.lengths.add(l.value.len() as u64);
                for v in &l.value {
                    f.strings.add(v);
                }
            }
        }
        Ok(())
    }

    /// Adds another partial's counts (the records after these).
    ///
    /// # Errors
    ///
    /// A feature whose kind differs between the two.
    pub fn merge(&mut self, other: Partial) -> Result<()> {
        for theirs in other.features {
            let slot = self.slot(&theirs.name);
            let mine = &mut self.features[slot];
            mine.check_kind(theirs.kind)?;
            mine.present += theirs.present;
            mine.lengths.merge(theirs.lengths);
            mine.numbers.merge(theirs.numbers);
            mine.strings.merge(theirs.strings);
        }
        self.records += other.records;
        self.undecodable += other.undecodable;
        Ok(())
    }

    /// TFDV's statistics of the records counted: features by name, each named by a
    /// one-step path.
    pub fn to_proto(&self) -> proto::DatasetFeatureStatistics {
        proto::DatasetFeatureStatistics {
            name: String::new(),
            num_examples: self.records,
            features: self
                .sorted()
                .into_iter()
                .map(|f| f.to_proto(self.records))
                .collect(),
        }
    }
}

impl Strings {
    /// Counts one value.
    #[inline]
    pub(super) fn add(&mut self, v: &[u8]) {
        let len = v.len() as u64;
        self.total_len += len;
        self.min_len = Some(self.min_len.map_or(len, |m| m.min(len)));
        self.max_len = self.max_len.max(len);
        if std::str::from_utf8(v).is_err() {
            self.invalid_utf8 += 1;
        }
        if v.len() > LONG_VALUE {
            self.distinct.add(&long_key(v), 1);
        } else {
            self.distinct.add(v, 1);
        }
    }

    fn merge(&mut self, t: Strings) {
        self.total_len += t.total_len;
        self.min_len = match (self.min_len, t.min_len) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.max_len = self.max_len.max(t.max_len);
        self.invalid_utf8 += t.invalid_utf8;
        self.distinct.merge(t.distinct);
    }
}

/// Buckets of TFDV's histograms.
const BUCKETS: usize = 10;

impl FeaturePartial {
    /// Notes a record's kind of the feature (`None`: no list), an error when it
    /// differs from the kind counted before.
    pub(super) fn check_kind(&mut self, kind: Option<FeatureKind>) -> Result<()> {
        self.check_kind_only(kind)?;
        self.kind = self.kind.or(kind);
        Ok(())
    }

    /// An error when `kind` differs from the kind counted before.
    pub(super) fn check_kind_only(&self, kind: Option<FeatureKind>) -> Result<()> {
        if let (Some(first), Some(this)) = (self.kind, kind) {
            if first != this {
                return Err(Error::new(ErrorKind::KindConflict {
                    feature: self.name.clone(),
                    first: first.name(),
                    second: this.name(),
                }));
            }
        }
        Ok(())
    }

    fn common(&self, records: u64) -> proto::CommonStatistics {
        let mut c = proto::CommonStatistics {
            num_non_missing: self.present,
            num_missing: records.saturating_sub(self.present),
            ..Default::default()
        };
        if self.present > 0 {
            c.min_num_values = self.lengths.min;
            c.max_num_values = self.lengths.max;
            c.tot_num_values = self.lengths.total;
            c.avg_num_values = (self.lengths.total as f64 / self.present as f64) as f32;
            c.num_values_histogram = Some(quantiles_histogram(
                &self.lengths.stream.summary(SUMMARY_SIZE),
                0,
                self.present,
            ));
        }
        c
    }

    fn to_proto(&self, records: u64) -> proto::FeatureNameStatistics {
        let common = Some(self.common(records));
        let (r#type, stats) = match self.kind {
            Some(FeatureKind::Int64) | Some(FeatureKind::Float) => {
                let t = if self.kind == Some(FeatureKind::Int64) {
                    proto::FeatureType::Int
                } else {
                    proto::FeatureType::Float
                };
                (t, proto::Stats::NumStats(self.numbers.to_proto(common)))
            }
            // Bytes, and a feature never seen with a list (as TFDV: STRING).
            _ => (
                proto::FeatureType::String,
                proto::Stats::StringStats(self.strings.to_proto(common, self.lengths.total)),
            ),
        };
        proto::FeatureNameStatistics {
            field_id: Some(proto::FieldId::Path(proto::Path {
                step: vec![self.name.clone()],
            })),
            r#type: r#type as i32,
            stats: Some(stats),
        }
    }
}

impl Numbers {
    fn to_proto(&self, common: Option<proto::CommonStatistics>) -> proto::NumericStatistics {
        let summary = self.stream.summary(SUMMARY_SIZE);
        let mut n = proto::NumericStatistics {
            common_stats: common,
            ..Default::default()
        };
        if self.count > 0 {
            n.mean = self.mean;
            n.std_dev = (self.m2 / self.count as f64).max(0.0).sqrt();
            n.num_zeros = self.zeros;
            n.min = self.min;
            n.max = self.max;
            n.median = summary.quantiles(&[0.5])[0];
        }
        // As TFDV: no histograms without a value, NaN counted.
        if self.count > 0 || self.nan > 0 {
            n.histograms = vec![
                self.standard_histogram(&summary),
                quantiles_histogram(&summary, self.nan, self.count),
            ];
        }
        n
    }

    /// Ten equal-width buckets between the finite extremes (counts from the summary's
    /// ranks), a point bucket each for -inf and +inf.
    fn standard_histogram(&self, summary: &Summary) -> proto::Histogram {
        let mut h = proto::Histogram {
            num_nan: self.nan,
            r#type: proto::HistogramType::Standard as i32,
            ..Default::default()
        };
        if self.count == 0 {
            return h;
        }
        let finite_count = (self.count - self.pos_inf - self.neg_inf) as f64;
        if finite_count == 0.0 {
            // No finite value: one bucket over every value, as TFDV writes it.
            h.buckets
                .push(bucket(f64::INFINITY, f64::NEG_INFINITY, self.count as f64));
            return h;
        }
        if self.neg_inf > 0 {
            h.buckets.push(bucket(
                f64::NEG_INFINITY,
                f64::NEG_INFINITY,
                self.neg_inf as f64,
            ));
        }
        let (lo, hi) = (self.finite_min, self.finite_max);
        if lo == hi {
            h.buckets.push(bucket(lo, hi, finite_count));
        } else {
            let width = (hi - lo) / BUCKETS as f64;
            // Finite values at or below each edge, from the summary's ranks; the last
            // bucket ends at the finite count, so the buckets add up to it.
            // (A sampled summary counts about as many values as there are: scaled.)
            let scale = self.count as f64 / summary.count().max(1) as f64;
            let at_or_below = |x: f64| summary.rank(x) * scale - self.neg_inf as f64;
            let mut below = 0.0;
            for i in 0..BUCKETS {
                let last = i + 1 == BUCKETS;
                let high = if last {
                    hi
                } else {
                    lo + width * (i + 1) as f64
                };
                let upto = if last {
                    finite_count
                } else {
                    at_or_below(high).clamp(below, finite_count)
                };
                h.buckets
                    .push(bucket(lo + width * i as f64, high, upto - below));
                below = upto;
            }
        }
        if self.pos_inf > 0 {
            h.buckets
                .push(bucket(f64::INFINITY, f64::INFINITY, self.pos_inf as f64));
        }
        h
    }
}

impl Strings {
    fn to_proto(
        &self,
        common: Option<proto::CommonStatistics>,
        values: u64,
    ) -> proto::StringStatistics {
        let top = self.distinct.top(RANK_BUCKETS);
        let label = |v: &[u8]| match std::str::from_utf8(v) {
            Ok(s) => s.to_owned(),
            Err(_) => "__BYTES_VALUE__".to_owned(),
        };
        proto::StringStatistics {
            common_stats: common,
            unique: self.distinct.unique(),
            top_values: top
                .iter()
                .take(TOP_VALUES)
                .map(|(v, c)| proto::FreqAndValue {
                    value: label(v),
                    frequency: *c as f64,
                })
                .collect(),
            avg_length: if values == 0 {
                0.0
            } else {
                (self.total_len as f64 / values as f64) as f32
            },
            rank_histogram: (!top.is_empty()).then(|| proto::RankHistogram {
                buckets: top
                    .iter()
                    .enumerate()
                    .map(|(i, (v, c))| proto::RankBucket {
                        low_rank: i as u64,
                        high_rank: i as u64,
                        label: label(v),
                        sample_count: *c as f64,
                    })
                    .collect(),
                name: String::new(),
            }),
            invalid_utf8_count: self.invalid_utf8,
        }
    }
}

fn bucket(low: f64, high: f64, count: f64) -> proto::Bucket {
    proto::Bucket {
        low_value: low,
        high_value: high,
        sample_count: count,
    }
}

/// Ten buckets of equal counts (of `count` values): the deciles as edges.
fn quantiles_histogram(summary: &Summary, nan: u64, count: u64) -> proto::Histogram {
    let ranks: Vec<f64> = (0..=BUCKETS).map(|i| i as f64 / BUCKETS as f64).collect();
    let edges = summary.quantiles(&ranks);
    let each = count as f64 / BUCKETS as f64;
    proto::Histogram {
        num_nan: nan,
        r#type: proto::HistogramType::Quantiles as i32,
        buckets: edges.windows(2).map(|w| bucket(w[0], w[1], each)).collect(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::proto::{BytesList, FloatList, Int64List};

    fn example(features: Vec<(&str, Option<Kind>)>) -> Record {
        Record::Example(Example {
            features: Some(Features {
                feature: features
                    .into_iter()
                    .map(|(n, kind)| (n.to_owned(), Feature { kind }))
                    .collect(),
            }),
        })
    }

    fn ints(v: &[i64]) -> Option<Kind> {
        Some(Kind::Int64List(Int64List { value: v.to_vec() }))
    }

    fn floats(v: &[f32]) -> Option<Kind> {
        Some(Kind::FloatList(FloatList { value: v.to_vec() }))
    }

    fn strings(v: &[&str]) -> Option<Kind> {
        Some(Kind::BytesList(BytesList {
            value: v.iter().map(|s| s.as_bytes().to_vec()).collect(),
        }))
    }

    fn records(n: usize) -> Vec<Record> {
        (0..n)
            .map(|i| {
                let mut f = vec![
                    ("i", ints(&[i as i64 % 7, -(i as i64)])),
                    ("s", strings(&[["a", "b", "c"][i % 3], "z"])),
                ];
                if i % 4 != 0 {
                    f.push(("x", floats(&[i as f32 * 0.5])));
                }
                if i % 10 == 3 {
                    f.push(("x2", floats(&[f32::NAN])));
                }
                example(f)
            })
            .collect()
    }

    /// Counting in parts merged in order gives the counts of counting at once: exact
    /// numbers equal (the mean and deviation to rounding), quantiles within their error.
    #[test]
    fn parts_merged_count_as_one() {
        let all = records(1000);
        let mut one = Partial::new();
        all.iter().for_each(|r| one.add(r).unwrap());
        let mut merged = Partial::new();
        for chunk in all.chunks(137) {
            let mut p = Partial::new();
            chunk.iter().for_each(|r| p.add(r).unwrap());
            merged.merge(p).unwrap();
        }
        let (a, b) = (one.to_proto(), merged.to_proto());
        assert_eq!(a.num_examples, 1000);
        assert_eq!(a.features.len(), b.features.len());
        for (fa, fb) in a.features.iter().zip(&b.features) {
            let (Some(proto::Stats::NumStats(x)), Some(proto::Stats::NumStats(y))) =
                (&fa.stats, &fb.stats)
            else {
                assert_eq!(fa, fb, "strings merge exactly");
                continue;
            };
            assert_eq!(x.common_stats, y.common_stats);
            assert_eq!((x.min, x.max, x.num_zeros), (y.min, y.max, y.num_zeros));
            assert!((x.mean - y.mean).abs() <= 1e-9 * x.mean.abs().max(1.0));
            assert!((x.std_dev - y.std_dev).abs() <= 1e-9 * x.std_dev.max(1.0));
        }
        let x = &a
            .features
            .iter()
            .find(|f| super::super::feature_name(f) == "x")
            .unwrap();
        let Some(proto::Stats::NumStats(x)) = &x.stats else {
            panic!()
        };
        let c = x.common_stats.as_ref().unwrap();
        assert_eq!((c.num_non_missing, c.num_missing), (750, 250));
        let values: Vec<f64> = (0..1000)
            .filter(|i| i % 4 != 0)
            .map(|i| i as f64 * 0.5)
            .collect();
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / values.len() as f64;
        assert!((x.mean - mean).abs() < 1e-9);
        assert!((x.std_dev - var.sqrt()).abs() < 1e-9);
        let x2 = &a
            .features
            .iter()
            .find(|f| super::super::feature_name(f) == "x2")
            .unwrap();
        let Some(proto::Stats::NumStats(x2)) = &x2.stats else {
            panic!()
        };
        assert_eq!(x2.histograms[0].num_nan, 100);
        assert_eq!(x2.histograms[1].num_nan, 100);
    }

    /// Beyond the exact count of distinct values, sketches: the unique count within 2%,
    /// frequent values' counts exact where they stand far above the rest; the same
    /// values in the same order give the same statistics.
    #[test]
    fn many_distinct_values_are_sketched() {
        let n = EXACT_DISTINCT * 4;
        let build = || {
            let mut parts = Vec::new();
            for chunk in (0..n).collect::<Vec<_>>().chunks(n / 3 + 1) {
                let mut p = Partial::new();
                for &i in chunk {
                    let v = if i % 10 == 0 {
                        "frequent".to_owned()
                    } else {
                        format!("v{i}")
                    };
                    p.add(&example(vec![("s", strings(&[&v]))])).unwrap();
                }
                parts.push(p);
            }
            let mut all = Partial::new();
            for p in parts {
                all.merge(p).unwrap();
            }
            all.to_proto()
        };
        let stats = build();
        let Some(proto::Stats::StringStats(s)) = &stats.features[0].stats else {
            panic!()
        };
        let truth = (n - n / 10 + 1) as f64;
        let err = (s.unique as f64 - truth).abs() / truth;
        assert!(err <= 0.02, "unique {} of {truth}: {err}", s.unique);
        assert_eq!(s.top_values[0].value, "frequent");
        let frequent = (n as f64 / 10.0).ceil();
        let slack = 3.5 / TOP_MAP as f64 * n as f64;
        assert!(
            (s.top_values[0].frequency - frequent).abs() <= slack,
            "{:?}",
            s.top_values[0]
        );
        assert_eq!(build(), stats, "deterministic");
        // Rare values are not listed with the sketch's error as their count.
        assert!(
            s.top_values[1..].iter().all(|t| t.frequency >= 2.0),
            "{:?}",
            s.top_values
        );
    }

    /// A `Feature` with no list is missing (as TensorFlow and TFDV read it); an empty
    /// list is present with no values.
    #[test]
    fn a_feature_without_a_list_is_missing() {
        let mut p = Partial::new();
        p.add(&example(vec![("f", None)])).unwrap();
        p.add(&example(vec![("f", ints(&[]))])).unwrap();
        p.add(&example(vec![("f", ints(&[4]))])).unwrap();
        let stats = p.to_proto();
        let Some(proto::Stats::NumStats(n)) = &stats.features[0].stats else {
            panic!()
        };
        let c = n.common_stats.as_ref().unwrap();
        assert_eq!((c.num_non_missing, c.num_missing), (2, 1));
        assert_eq!(
            (c.min_num_values, c.max_num_values, c.tot_num_values),
            (0, 1, 1)
        );
    }

    /// The STANDARD histogram: ten buckets between the exact finite extremes adding up
    /// to the finite values, a point bucket each for -inf and +inf; with no finite value
    /// one bucket over all; with no value at all (NaN aside) no histogram.
    #[test]
    fn standard_histograms_as_tfdv_writes_them() {
        let histogram = |values: &[f32]| {
            let mut p = Partial::new();
            p.add(&example(vec![("f", floats(values))])).unwrap();
            let stats = p.to_proto();
            let Some(proto::Stats::NumStats(n)) = &stats.features[0].stats else {
                panic!()
            };
            n.histograms.first().cloned()
        };
        let mut values: Vec<f32> = (0..1000).map(|i| i as f32).collect();
        values.extend([f32::NEG_INFINITY, f32::INFINITY, f32::INFINITY]);
        let h = histogram(&values).unwrap();
        let edges: Vec<(f64, f64)> = h
            .buckets
            .iter()
            .map(|b| (b.low_value, b.high_value))
            .collect();
        assert_eq!(edges.first(), Some(&(f64::NEG_INFINITY, f64::NEG_INFINITY)));
        assert_eq!(edges[1].0, 0.0);
        assert_eq!(edges[10].1, 999.0);
        assert_eq!(edges.last(), Some(&(f64::INFINITY, f64::INFINITY)));
        let counts: Vec<f64> = h.buckets.iter().map(|b| b.sample_count).collect();
        assert_eq!(counts[0], 1.0);
        assert_eq!(counts[11], 2.0);
        assert_eq!(counts[1..11].iter().sum::<f64>(), 1000.0);
        assert!(
            counts[1..11].iter().all(|c| (c - 100.0).abs() <= 10.0),
            "{counts:?}"
        );

        let h = histogram(&[f32::INFINITY, f32::NEG_INFINITY]).unwrap();
        assert_eq!(h.buckets.len(), 1);
        assert_eq!(
            (
                h.buckets[0].low_value,
                h.buckets[0].high_value,
                h.buckets[0].sample_count
            ),
            (f64::INFINITY, f64::NEG_INFINITY, 2.0)
        );
        assert_eq!(histogram(&[]), None);
        assert_eq!(histogram(&[f32::NAN]).map(|h| h.num_nan), Some(1));
    }

    #[test]
    fn a_feature_of_two_kinds_is_an_error() {
        let mut p = Partial::new();
        p.add(&example(vec![("f", ints(&[1]))])).unwrap();
        let err = p.add(&example(vec![("f", floats(&[1.0]))])).unwrap_err();
        assert!(err.to_string().contains('f'), "{err}");
        let mut q = Partial::new();
        q.add(&example(vec![("f", strings(&["a"]))])).unwrap();
        let mut p2 = Partial::new();
        p2.add(&example(vec![("f", ints(&[1]))])).unwrap();
        assert!(p2.merge(q).is_err());
    }

    /// Long values (encoded images) count as distinct by their digest, listed as
    /// TFDV lists bytes, and are never kept: lengths and the unique count stay exact.
    #[test]
    fn long_values_are_counted_by_their_digest() {
        let mut p = Partial::new();
        let image = |i: u8| vec![i; 5000];
        for i in 0..3u8 {
            for _ in 0..=i {
                let v = String::from_utf8(image(b'a' + i)).unwrap();
                p.add(&example(vec![("img", strings(&[&v]))])).unwrap();
            }
        }
        let f = &p.to_proto().features[0];
        let Some(proto::Stats::StringStats(s)) = &f.stats else {
            panic!("{f:?}")
        };
        assert_eq!(s.unique, 3);
        assert_eq!(s.avg_length, 5000.0);
        assert_eq!(s.top_values[0].value, "__BYTES_VALUE__");
        assert_eq!(s.top_values[0].frequency, 3.0);
        let Distinct::Exact(map) = &p.features[0].strings.distinct else {
            panic!("exact")
        };
        assert!(map.keys().all(|k| k.len() == 26), "values kept whole");
    }
}
