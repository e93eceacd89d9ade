//! The feature spec: each feature's name, kind and shape. Shared by the writer (the
//! manifest's `features`) and the readers (`schema`, `verify --deep`, the pipeline), so
//! the two directions cannot drift apart.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::example::proto::{Feature, Features, Kind};
use crate::example::{Record, RecordType};

pub use crate::error::{FeatureKind, SpecMismatch};

impl FeatureKind {
    /// `int64`, `float` or `bytes`.
    pub fn name(self) -> &'static str {
        match self {
            FeatureKind::Int64 => "int64",
            FeatureKind::Float => "float",
            FeatureKind::Bytes => "bytes",
        }
    }

    /// The TensorFlow dtype a parsing spec uses.
    pub fn tf_dtype(self) -> &'static str {
        match self {
            FeatureKind::Int64 => "tf.int64",
            FeatureKind::Float => "tf.float32",
            FeatureKind::Bytes => "tf.string",
        }
    }

    /// The kind of a decoded feature (`None` for a feature with no list set).
    pub fn of(feature: &Feature) -> Option<FeatureKind> {
        match feature.kind.as_ref()? {
            Kind::BytesList(_) => Some(FeatureKind::Bytes),
            Kind::FloatList(_) => Some(FeatureKind::Float),
            Kind::Int64List(_) => Some(FeatureKind::Int64),
        }
    }
}

/// Which part of a `SequenceExample` a feature lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Part {
    /// Per-sequence features (`context`).
    Context,
    /// Per-step features (`feature_lists`).
    FeatureLists,
}

/// One feature of the spec; the manifest's `features` entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FeatureSpec {
    /// The feature name (flattened and renamed column name).
    pub name: String,
    /// The value type.
    pub kind: FeatureKind,
    /// `[]` for a scalar in every record, `[n]` for a list of length n in every record,
    /// `None` (JSON `null`) otherwise. For a `feature_lists` entry, the shape of one step.
    pub shape: Option<Vec<u64>>,
    /// arrow-rs's display of the Arrow type it came from (absent when inferred).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrow_type: Option<String>,
    /// For temporal columns: `day`, `s`, `ms`, `us` or `ns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// For SequenceExamples: `context` or `feature_lists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<Part>,
    /// `true` for a Hive partition key (a `key=value` path segment), which has no
    /// `arrow_type`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<bool>,
}

impl FeatureSpec {
    /// A feature of an Example with no Arrow type, unit or partition noted.
    pub fn new(name: impl Into<String>, kind: FeatureKind, shape: Option<Vec<u64>>) -> FeatureSpec {
        FeatureSpec {
            name: name.into(),
            kind,
            shape,
            arrow_type: None,
            unit: None,
            part: None,
            partition: None,
        }
    }

    /// Checks a feature of a record against this spec: its kind (`None`: no value
    /// list), and its number of values against a fixed shape.
    ///
    /// # Errors
    ///
    /// The [`SpecMismatch`].
    pub fn check_values(&self, kind: Option<FeatureKind>, values: u64) -> Result<(), SpecMismatch> {
        let feature = || self.name.clone();
        let Some(found) = kind else {
            return Err(SpecMismatch::Empty { feature: feature() });
        };
        if found != self.kind {
            return Err(SpecMismatch::Kind {
                feature: feature(),
                found,
                expected: self.kind,
            });
        }
        match &self.shape {
            Some(shape) if shape.iter().product::<u64>() != values => Err(SpecMismatch::Shape {
                feature: feature(),
                values,
                shape: shape.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// Checks a record that lacks this feature: only a variable-length spec allows it.
    ///
    /// # Errors
    ///
    /// [`SpecMismatch::Missing`] for a fixed shape.
    pub fn check_missing(&self) -> Result<(), SpecMismatch> {
        match self.shape {
            Some(_) => Err(SpecMismatch::Missing {
                feature: self.name.clone(),
            }),
            None => Ok(()),
        }
    }
}

/// Counts lengths as values go by, to decide whether a feature has a fixed shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShapeStat {
    /// Records (or steps) in which the feature was present.
    pub present: u64,
    /// Smallest length seen.
    pub min_len: u64,
    /// Largest length seen.
    pub max_len: u64,
}

impl ShapeStat {
    /// Notes one present value of `len` elements.
    #[inline]
    pub fn add(&mut self, len: u64) {
        if self.present == 0 {
            self.min_len = len;
            self.max_len = len;
        } else {
            self.min_len = self.min_len.min(len);
            self.max_len = self.max_len.max(len);
        }
        self.present += 1;
    }

    /// Combines two stats.
    pub fn merge(&mut self, other: &ShapeStat) {
        if other.present == 0 {
            return;
        }
        if self.present == 0 {
            *self = other.clone();
            return;
        }
        self.min_len = self.min_len.min(other.min_len);
        self.max_len = self.max_len.max(other.max_len);
        self.present += other.present;
    }

    /// The shape, given how many values there were in all and whether a length-1 value
    /// is a scalar.
    pub fn shape(&self, expected: u64, scalar: bool) -> Option<Vec<u64>> {
        if expected == 0 || self.present != expected || self.min_len != self.max_len {
            return None;
        }
        if scalar {
            Some(vec![])
        } else {
            Some(vec![self.min_len])
        }
    }
}

/// Infers a spec from decoded records.
#[derive(Debug, Default, Clone)]
pub struct SpecInference {
    records: u64,
    /// (part, name) → (kind, stat over records, stat over steps).
    features: BTreeMap<(Option<Part>, String), (FeatureKind, ShapeStat, ShapeStat)>,
}

impl SpecInference {
    /// Starts with no records.
    pub fn new() -> SpecInference {
        SpecInference::default()
    }

    fn add_features(&mut self, part: Option<Part>, features: &Features) -> Result<()> {
        for (name, feature) in &features.feature {
            let Some(kind) = FeatureKind::of(feature) else {
                continue;
            };
            let entry = self.entry(part, name, kind)?;
            entry.1.add(feature_len(feature));
        }
        Ok(())
    }

    fn entry(
        &mut self,
        part: Option<Part>,
        name: &str,
        kind: FeatureKind,
    ) -> Result<&mut (FeatureKind, ShapeStat, ShapeStat)> {
        let entry = self
            .features
            .entry((part, name.to_owned()))
            .or_insert_with(|| (kind, ShapeStat::default(), ShapeStat::default()));
        if entry.0 != kind {
            return Err(Error::new(ErrorKind::KindConflict {
                feature: name.to_owned(),
                first: entry.0.name(),
                second: kind.name(),
            }));
        }
        Ok(entry)
    }

    /// Adds one record.
    ///
    /// # Errors
    ///
    /// A feature whose kind differs from an earlier record's.
    pub fn add(&mut self, record: &Record) -> Result<()> {
        self.records += 1;
        match record {
            Record::Bytes(_) => {}
            Record::Example(example) => {
                if let Some(features) = &example.features {
                    self.add_features(None, features)?;
                }
            }
            Record::SequenceExample(seq) => {
                if let Some(context) = &seq.context {
                    self.add_features(Some(Part::Context), context)?;
                }
                if let Some(lists) = &seq.feature_lists {
                    for (name, list) in &lists.feature_list {
                        for step in &list.feature {
                            let Some(kind) = FeatureKind::of(step) else {
                                continue;
                            };
                            let entry = self.entry(Some(Part::FeatureLists), name, kind)?;
                            entry.2.add(feature_len(step));
                        }
                        if let Some(entry) = self
                            .features
                            .get_mut(&(Some(Part::FeatureLists), name.clone()))
                        {
                            entry.1.add(list.feature.len() as u64);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Adds `records` records whose Example features had these kinds and lengths (what
    /// [`super::scan::ExampleScan`] counted).
    ///
    /// # Errors
    ///
    /// A feature whose kind differs from one already here.
    pub(crate) fn absorb<'a>(
        &mut self,
        records: u64,
        features: impl Iterator<Item = (&'a str, FeatureKind, &'a ShapeStat)>,
    ) -> Result<()> {
        self.records += records;
        for (name, kind, stat) in features {
            self.entry(None, name, kind)?.1.merge(stat);
        }
        Ok(())
    }

    /// Adds `records` Examples that a manifest describes with `spec`: a fixed shape as
    /// that length in every record, a variable one as lengths that vary (which keeps the
    /// merged feature variable, as it must be).
    ///
    /// # Errors
    ///
    /// A feature whose kind differs from one already here.
    pub(crate) fn absorb_spec(&mut self, records: u64, spec: &[FeatureSpec]) -> Result<()> {
        let stats: Vec<ShapeStat> = spec
            .iter()
            .map(|f| match &f.shape {
                Some(shape) => {
                    let len = shape.iter().product();
                    ShapeStat {
                        present: records,
                        min_len: len,
                        max_len: len,
                    }
                }
                None => ShapeStat {
                    present: records,
                    min_len: 0,
                    max_len: 2,
                },
            })
            .collect();
        let features = spec
            .iter()
            .zip(&stats)
            .map(|(f, stat)| (f.name.as_str(), f.kind, stat));
        self.absorb(records, features)
    }

    /// Combines the inference of two disjoint sets of records.
    ///
    /// # Errors
    ///
    /// A feature with different kinds on the two sides.
    pub fn merge(&mut self, other: SpecInference) -> Result<()> {
        self.records += other.records;
        for ((part, name), (kind, stat, steps)) in other.features {
            let entry = self.entry(part, &name, kind)?;
            entry.1.merge(&stat);
            entry.2.merge(&steps);
        }
        Ok(())
    }

    /// The records seen.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The inferred spec, sorted by part then name. A length of 1 in every record is
    /// taken as a scalar (`[]`): a record cannot tell a scalar from a list of one.
    pub fn finish(&self) -> Vec<FeatureSpec> {
        self.features
            .iter()
            .map(|((part, name), (kind, stat, steps))| {
                let shape = match part {
                    Some(Part::FeatureLists) => steps.shape(steps.present, steps.max_len == 1),
                    _ => stat.shape(self.records, stat.max_len == 1),
                };
                FeatureSpec {
                    name: name.clone(),
                    kind: *kind,
                    shape,
                    arrow_type: None,
                    unit: None,
                    part: *part,
                    partition: None,
                }
            })
            .collect()
    }
}

fn feature_len(feature: &Feature) -> u64 {
    match &feature.kind {
        Some(Kind::BytesList(l)) => l.value.len() as u64,
        Some(Kind::FloatList(l)) => l.value.len() as u64,
        Some(Kind::Int64List(l)) => l.value.len() as u64,
        None => 0,
    }
}

fn python_shape(shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    format!("[{}]", dims.join(", "))
}

fn python_key(name: &str) -> String {
    // A JSON string is a valid Python string literal with the same value.
    serde_json::to_string(name).expect("a string always serializes")
}

/// The spec as a `tf.io.parse_example` feature-spec dict (Examples) or a
/// `(context_features, sequence_features)` tuple for
/// `tf.io.parse_single_sequence_example`, keys sorted.
pub fn to_python(features: &[FeatureSpec], record_type: RecordType) -> String {
    let mut sorted: Vec<&FeatureSpec> = features.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let dict = |part: Option<Part>, sequence: bool| -> String {
        let mut out = String::from("{");
        let mut first = true;
        for f in sorted
            .iter()
            .filter(|f| f.part == part || (part == Some(Part::Context) && f.part.is_none()))
        {
            if !first {
                out.push_str(", ");
            }
            first = false;
            let dtype = f.kind.tf_dtype();
            let spec = match (&f.shape, sequence) {
                (Some(shape), false) => {
                    format!("tf.io.FixedLenFeature({}, {dtype})", python_shape(shape))
                }
                (Some(shape), true) => format!(
                    "tf.io.FixedLenSequenceFeature({}, {dtype}, allow_missing=True)",
                    python_shape(shape)
                ),
                (None, _) => format!("tf.io.VarLenFeature({dtype})"),
            };
            let _ = write!(out, "{}: {spec}", python_key(&f.name));
        }
        out.push('}');
        out
    };
    match record_type {
        RecordType::Example => dict(None, false),
        // Opaque payloads have no features to parse.
        RecordType::Bytes => "{}".to_owned(),
        RecordType::SequenceExample => format!(
            "({}, {})",
            dict(Some(Part::Context), false),
            dict(Some(Part::FeatureLists), true)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::{FeatureKind as K, FeatureSpec, SpecMismatch};

    fn spec(kind: K, shape: Option<Vec<u64>>) -> FeatureSpec {
        FeatureSpec::new("x", kind, shape)
    }

    /// One check, one wording, for verify --deep and the pipeline.
    #[test]
    fn a_feature_is_checked_for_kind_values_and_presence() {
        let fixed = spec(K::Float, Some(vec![2]));
        assert_eq!(fixed.check_values(Some(K::Float), 2), Ok(()));
        let shape = fixed.check_values(Some(K::Float), 3).unwrap_err();
        assert_eq!(
            shape.to_string(),
            "feature \"x\" has 3 values, the schema's shape is [2]"
        );
        let kind = fixed.check_values(Some(K::Int64), 2).unwrap_err();
        assert_eq!(
            kind.to_string(),
            "feature \"x\" is int64, the schema says float"
        );
        assert!(matches!(
            fixed.check_values(None, 0),
            Err(SpecMismatch::Empty { .. })
        ));
        assert!(matches!(
            fixed.check_missing(),
            Err(SpecMismatch::Missing { .. })
        ));
        let scalar = spec(K::Int64, Some(vec![]));
        assert_eq!(scalar.check_values(Some(K::Int64), 1), Ok(()));
        assert!(scalar.check_values(Some(K::Int64), 0).is_err());
        let ragged = spec(K::Bytes, None);
        assert_eq!(ragged.check_values(Some(K::Bytes), 7), Ok(()));
        assert_eq!(ragged.check_missing(), Ok(()));
    }

    use super::*;
    use crate::example::proto::Example;

    fn example(pairs: Vec<(&str, Feature)>) -> Record {
        let mut features = Features::default();
        for (k, v) in pairs {
            features.feature.insert(k.into(), v);
        }
        Record::Example(Example {
            features: Some(features),
        })
    }

    #[test]
    fn fixed_only_when_present_everywhere_with_one_length() {
        let mut inf = SpecInference::new();
        inf.add(&example(vec![
            ("x", Feature::float(vec![1.0, 2.0])),
            ("y", Feature::int64(vec![1])),
            ("z", Feature::bytes(vec![b"a".to_vec()])),
            ("w", Feature::int64(vec![1, 2])),
        ]))
        .unwrap();
        inf.add(&example(vec![
            ("x", Feature::float(vec![3.0, 4.0])),
            ("y", Feature::int64(vec![2])),
            ("w", Feature::int64(vec![1])),
        ]))
        .unwrap();
        let spec = inf.finish();
        let shape = |n: &str| spec.iter().find(|f| f.name == n).unwrap().shape.clone();
        assert_eq!(shape("x"), Some(vec![2]));
        assert_eq!(shape("y"), Some(vec![]));
        assert_eq!(shape("z"), None, "missing from one record");
        assert_eq!(shape("w"), None, "lengths differ");
        assert_eq!(
            to_python(&spec, RecordType::Example),
            "{\"w\": tf.io.VarLenFeature(tf.int64), \"x\": tf.io.FixedLenFeature([2], tf.float32), \
             \"y\": tf.io.FixedLenFeature([], tf.int64), \"z\": tf.io.VarLenFeature(tf.string)}"
        );
    }

    #[test]
    fn kind_conflict_is_an_error() {
        let mut inf = SpecInference::new();
        inf.add(&example(vec![("x", Feature::float(vec![1.0]))]))
            .unwrap();
        let err = inf
            .add(&example(vec![("x", Feature::int64(vec![1]))]))
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("\"x\" is float in one record and int64"),
            "{err}"
        );
    }

    #[test]
    fn spec_json_keys() {
        let spec = FeatureSpec {
            name: "t".into(),
            kind: FeatureKind::Int64,
            shape: None,
            arrow_type: Some("Date32".into()),
            unit: Some("day".into()),
            part: None,
            partition: None,
        };
        assert_eq!(
            serde_json::to_string(&spec).unwrap(),
            r#"{"name":"t","kind":"int64","shape":null,"arrow_type":"Date32","unit":"day"}"#
        );
    }
}
