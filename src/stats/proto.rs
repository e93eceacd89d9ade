//! TFDV's statistics messages (`tensorflow_metadata/proto/v0/statistics.proto` and
//! `path.proto`, tensorflow/metadata at 383edcf4, Apache-2.0), as prost messages written
//! by hand, so no `protoc` is needed: the fields tfshard writes and reads, with their
//! tags. Fields left out (cross-feature, natural-language, weighted and custom
//! statistics) are skipped when a file from TFDV is read, as protobuf skips any unknown
//! field.

/// `message DatasetFeatureStatisticsList { repeated DatasetFeatureStatistics datasets = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct DatasetFeatureStatisticsList {
    /// The datasets: tfshard writes one, the live set.
    #[prost(message, repeated, tag = "1")]
    pub datasets: Vec<DatasetFeatureStatistics>,
}

/// `message DatasetFeatureStatistics`
#[derive(Clone, PartialEq, prost::Message)]
pub struct DatasetFeatureStatistics {
    /// `string name = 1` (TFDV leaves it empty unless it slices).
    #[prost(string, tag = "1")]
    pub name: String,
    /// `uint64 num_examples = 2`
    #[prost(uint64, tag = "2")]
    pub num_examples: u64,
    /// `repeated FeatureNameStatistics features = 3`
    #[prost(message, repeated, tag = "3")]
    pub features: Vec<FeatureNameStatistics>,
}

/// `message Path { repeated string step = 1; }`
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Message)]
pub struct Path {
    /// The steps: tfshard names a feature by one step, its whole name.
    #[prost(string, repeated, tag = "1")]
    pub step: Vec<String>,
}

/// `FeatureNameStatistics.Type`
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum FeatureType {
    /// `INT = 0`
    Int = 0,
    /// `FLOAT = 1`
    Float = 1,
    /// `STRING = 2`
    String = 2,
    /// `BYTES = 3`
    Bytes = 3,
    /// `STRUCT = 4`
    Struct = 4,
}

/// `message FeatureNameStatistics`
#[derive(Clone, PartialEq, prost::Message)]
pub struct FeatureNameStatistics {
    /// `oneof field_id { string name = 1; Path path = 8; }`
    #[prost(oneof = "FieldId", tags = "1, 8")]
    pub field_id: Option<FieldId>,
    /// `Type type = 2`
    #[prost(enumeration = "FeatureType", tag = "2")]
    pub r#type: i32,
    /// `oneof stats { NumericStatistics num_stats = 3; StringStatistics string_stats = 4;
    /// BytesStatistics bytes_stats = 5; StructStatistics struct_stats = 7; }`
    #[prost(oneof = "Stats", tags = "3, 4, 5, 7")]
    pub stats: Option<Stats>,
}

/// The oneof `field_id` of [`FeatureNameStatistics`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum FieldId {
    /// `string name = 1` (older writers)
    #[prost(string, tag = "1")]
    Name(String),
    /// `Path path = 8`
    #[prost(message, tag = "8")]
    Path(Path),
}

/// The oneof `stats` of [`FeatureNameStatistics`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Stats {
    /// `NumericStatistics num_stats = 3`
    #[prost(message, tag = "3")]
    NumStats(NumericStatistics),
    /// `StringStatistics string_stats = 4`
    #[prost(message, tag = "4")]
    StringStats(StringStatistics),
    /// `BytesStatistics bytes_stats = 5`
    #[prost(message, tag = "5")]
    BytesStats(BytesStatistics),
    /// `StructStatistics struct_stats = 7`
    #[prost(message, tag = "7")]
    StructStats(StructStatistics),
}

/// `message CommonStatistics`
#[derive(Clone, PartialEq, prost::Message)]
pub struct CommonStatistics {
    /// `uint64 num_non_missing = 1`: records holding the feature (an empty list too).
    #[prost(uint64, tag = "1")]
    pub num_non_missing: u64,
    /// `uint64 num_missing = 2`
    #[prost(uint64, tag = "2")]
    pub num_missing: u64,
    /// `uint64 min_num_values = 3`
    #[prost(uint64, tag = "3")]
    pub min_num_values: u64,
    /// `uint64 max_num_values = 4`
    #[prost(uint64, tag = "4")]
    pub max_num_values: u64,
    /// `float avg_num_values = 5`
    #[prost(float, tag = "5")]
    pub avg_num_values: f32,
    /// `Histogram num_values_histogram = 6` (QUANTILES)
    #[prost(message, optional, tag = "6")]
    pub num_values_histogram: Option<Histogram>,
    /// `uint64 tot_num_values = 8`
    #[prost(uint64, tag = "8")]
    pub tot_num_values: u64,
    /// `Histogram feature_list_length_histogram = 9` (SequenceExamples' feature lists)
    #[prost(message, optional, tag = "9")]
    pub feature_list_length_histogram: Option<Histogram>,
}

/// `message NumericStatistics`
#[derive(Clone, PartialEq, prost::Message)]
pub struct NumericStatistics {
    /// `CommonStatistics common_stats = 1`
    #[prost(message, optional, tag = "1")]
    pub common_stats: Option<CommonStatistics>,
    /// `double mean = 2`
    #[prost(double, tag = "2")]
    pub mean: f64,
    /// `double std_dev = 3` (population)
    #[prost(double, tag = "3")]
    pub std_dev: f64,
    /// `uint64 num_zeros = 4`
    #[prost(uint64, tag = "4")]
    pub num_zeros: u64,
    /// `double min = 5`
    #[prost(double, tag = "5")]
    pub min: f64,
    /// `double median = 6`
    #[prost(double, tag = "6")]
    pub median: f64,
    /// `double max = 7`
    #[prost(double, tag = "7")]
    pub max: f64,
    /// `repeated Histogram histograms = 8`: STANDARD (10 equi-width buckets), then
    /// QUANTILES (10 buckets).
    #[prost(message, repeated, tag = "8")]
    pub histograms: Vec<Histogram>,
}

/// `message StringStatistics.FreqAndValue { string value = 2; double frequency = 3; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct FreqAndValue {
    /// `string value = 2`
    #[prost(string, tag = "2")]
    pub value: String,
    /// `double frequency = 3`: the value's occurrences.
    #[prost(double, tag = "3")]
    pub frequency: f64,
}

/// `message StringStatistics`
#[derive(Clone, PartialEq, prost::Message)]
pub struct StringStatistics {
    /// `CommonStatistics common_stats = 1`
    #[prost(message, optional, tag = "1")]
    pub common_stats: Option<CommonStatistics>,
    /// `uint64 unique = 2`
    #[prost(uint64, tag = "2")]
    pub unique: u64,
    /// `repeated FreqAndValue top_values = 3`
    #[prost(message, repeated, tag = "3")]
    pub top_values: Vec<FreqAndValue>,
    /// `float avg_length = 4` (bytes)
    #[prost(float, tag = "4")]
    pub avg_length: f32,
    /// `RankHistogram rank_histogram = 5`
    #[prost(message, optional, tag = "5")]
    pub rank_histogram: Option<RankHistogram>,
    /// `uint64 invalid_utf8_count = 8`
    #[prost(uint64, tag = "8")]
    pub invalid_utf8_count: u64,
}

/// `message BytesStatistics`
#[derive(Clone, PartialEq, prost::Message)]
pub struct BytesStatistics {
    /// `CommonStatistics common_stats = 1`
    #[prost(message, optional, tag = "1")]
    pub common_stats: Option<CommonStatistics>,
    /// `uint64 unique = 2`
    #[prost(uint64, tag = "2")]
    pub unique: u64,
    /// `float avg_num_bytes = 3`
    #[prost(float, tag = "3")]
    pub avg_num_bytes: f32,
    /// `float min_num_bytes = 4`
    #[prost(float, tag = "4")]
    pub min_num_bytes: f32,
    /// `float max_num_bytes = 5`
    #[prost(float, tag = "5")]
    pub max_num_bytes: f32,
    /// `int64 max_num_bytes_int = 6`
    #[prost(int64, tag = "6")]
    pub max_num_bytes_int: i64,
}

/// `message StructStatistics { CommonStatistics common_stats = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct StructStatistics {
    /// `CommonStatistics common_stats = 1`
    #[prost(message, optional, tag = "1")]
    pub common_stats: Option<CommonStatistics>,
}

/// `Histogram.HistogramType`
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum HistogramType {
    /// `STANDARD = 0`: equi-width buckets.
    Standard = 0,
    /// `QUANTILES = 1`: buckets of equal counts.
    Quantiles = 1,
}

/// `message Histogram.Bucket`: `(low, high]`, the first bucket `[low, high]`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Bucket {
    /// `double low_value = 1`
    #[prost(double, tag = "1")]
    pub low_value: f64,
    /// `double high_value = 2`
    #[prost(double, tag = "2")]
    pub high_value: f64,
    /// `double sample_count = 4`
    #[prost(double, tag = "4")]
    pub sample_count: f64,
}

/// `message Histogram`
#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    /// `uint64 num_nan = 1`
    #[prost(uint64, tag = "1")]
    pub num_nan: u64,
    /// `uint64 num_undefined = 2`
    #[prost(uint64, tag = "2")]
    pub num_undefined: u64,
    /// `repeated Bucket buckets = 3`
    #[prost(message, repeated, tag = "3")]
    pub buckets: Vec<Bucket>,
    /// `HistogramType type = 4`
    #[prost(enumeration = "HistogramType", tag = "4")]
    pub r#type: i32,
    /// `string name = 5`
    #[prost(string, tag = "5")]
    pub name: String,
}

/// `message RankHistogram.Bucket`
#[derive(Clone, PartialEq, prost::Message)]
pub struct RankBucket {
    /// `uint64 low_rank = 1`
    #[prost(uint64, tag = "1")]
    pub low_rank: u64,
    /// `uint64 high_rank = 2`
    #[prost(uint64, tag = "2")]
    pub high_rank: u64,
    /// `string label = 4`
    #[prost(string, tag = "4")]
    pub label: String,
    /// `double sample_count = 5`
    #[prost(double, tag = "5")]
    pub sample_count: f64,
}

/// `message RankHistogram { repeated Bucket buckets = 1; string name = 2; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct RankHistogram {
    /// `repeated Bucket buckets = 1`
    #[prost(message, repeated, tag = "1")]
    pub buckets: Vec<RankBucket>,
    /// `string name = 2`
    #[prost(string, tag = "2")]
    pub name: String,
}

/// A feature's counts common to every type (`None` when it has no statistics).
pub(crate) fn common_of(f: &FeatureNameStatistics) -> Option<&CommonStatistics> {
    match &f.stats {
        Some(Stats::NumStats(n)) => n.common_stats.as_ref(),
        Some(Stats::StringStats(s)) => s.common_stats.as_ref(),
        Some(Stats::BytesStats(b)) => b.common_stats.as_ref(),
        Some(Stats::StructStats(s)) => s.common_stats.as_ref(),
        None => None,
    }
}

/// A feature's name: its path's steps joined by `.` (or its older `name`).
pub fn feature_name(f: &FeatureNameStatistics) -> String {
    match &f.field_id {
        Some(FieldId::Path(p)) => p.step.join("."),
        Some(FieldId::Name(n)) => n.clone(),
        None => String::new(),
    }
}
