//! Records → columns: the `tf.train.Example` decoder the pipeline's parse workers run.
//!
//! A hand-written protobuf walker appends each feature's values straight into its
//! column: dense arrays for fixed shapes, values plus row splits for variable lengths
//! (like `tf.RaggedTensor`), views for bytes. No message struct per record. Each feature
//! is checked against its spec as it goes by ([`FeatureSpec::check_values`], the check
//! `verify --deep` makes). Features a record has but the spec lacks are ignored, as
//! `tf.io.parse_example` does.

use std::collections::HashMap;

use crate::error::{Error, ErrorKind, Result, WireProblem};
use crate::example::bytes::{BytesValues, Home};
use crate::example::wire::{fields, malformed, varint};
use crate::example::{FeatureKind, FeatureSpec, Part};

/// A column's values.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// `int64_list` values.
    Int64(Vec<i64>),
    /// `float_list` values.
    Float(Vec<f32>),
    /// `bytes_list` values: short ones copied back to back, long ones (images)
    /// referenced where they lie (see [`BytesValues`]);
    /// [`to_offsets_and_data`](BytesValues::to_offsets_and_data) gives Arrow's layout.
    Bytes(BytesValues),
}

impl Values {
    fn new(kind: FeatureKind) -> Values {
        match kind {
            FeatureKind::Int64 => Values::Int64(Vec::new()),
            FeatureKind::Float => Values::Float(Vec::new()),
            FeatureKind::Bytes => Values::Bytes(BytesValues::new()),
        }
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        match self {
            Values::Int64(v) => v.len(),
            Values::Float(v) => v.len(),
            Values::Bytes(v) => v.len(),
        }
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn payload_bytes(&self) -> u64 {
        match self {
            Values::Int64(v) => 8 * v.len() as u64,
            Values::Float(v) => 4 * v.len() as u64,
            Values::Bytes(v) => v.copied_len() as u64,
        }
    }

    fn held_bytes(&self) -> u64 {
        match self {
            Values::Int64(v) => 8 * v.capacity() as u64,
            Values::Float(v) => 4 * v.capacity() as u64,
            Values::Bytes(v) => v.held_bytes(),
        }
    }
}

/// One feature of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// The feature name.
    pub name: String,
    /// Fixed shape of one row (`[]` scalar, `[n]`), or `None` for variable length.
    pub shape: Option<Vec<u64>>,
    /// The values of every row, row after row.
    pub values: Values,
    /// For variable-length columns: `rows + 1` offsets into `values`, as
    /// `tf.RaggedTensor.row_splits`. `None` for fixed shapes (dense). For a feature list
    /// (SequenceExamples): `rows + 1` offsets into the steps.
    pub row_splits: Option<Vec<u64>>,
    /// For a feature list: `steps + 1` offsets into `values`, the inner row splits of the
    /// two-level ragged tensor (records → steps → values) that `tf.io.RaggedFeature`
    /// gives. `None` for every other column.
    pub step_splits: Option<Vec<u64>>,
}

/// A batch of parsed records, column by column.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// The epoch it belongs to (from 0).
    pub epoch: u64,
    /// Records in it.
    pub rows: usize,
    /// One column per feature of the spec, in spec order.
    pub columns: Vec<Column>,
    /// Framed bytes of the records it came from.
    pub record_bytes: u64,
}

impl Batch {
    /// The column of a feature.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// Bytes the columns hold of their own: values and row splits (bytes values
    /// referenced in a mapped shard live there, not here).
    pub fn payload_bytes(&self) -> u64 {
        self.columns
            .iter()
            .map(|c| {
                c.values.payload_bytes()
                    + 8 * c.row_splits.as_ref().map_or(0, Vec::len) as u64
                    + 8 * c.step_splits.as_ref().map_or(0, Vec::len) as u64
            })
            .sum()
    }

    /// Bytes allocated for the columns' values and row splits (capacities).
    pub(crate) fn held_bytes(&self) -> u64 {
        self.columns
            .iter()
            .map(|c| {
                c.values.held_bytes()
                    + 8 * c.row_splits.as_ref().map_or(0, Vec::capacity) as u64
                    + 8 * c.step_splits.as_ref().map_or(0, Vec::capacity) as u64
            })
            .sum()
    }
}

/// Decodes records for one feature spec straight into columns.
#[derive(Debug, Clone)]
pub struct Decoder {
    spec: Vec<FeatureSpec>,
    /// Example features, or a SequenceExample's context features, by name.
    index: HashMap<Vec<u8>, usize>,
    /// A SequenceExample's feature lists, by name (`None`: the records are Examples).
    lists: Option<HashMap<Vec<u8>, usize>>,
}

/// The columns of a batch being decoded.
#[derive(Debug)]
pub(crate) struct Columns {
    columns: Vec<Column>,
    seen: Vec<bool>,
    /// What each feature entry of the last record was, in entry order (see [`Entry`]).
    order: Vec<Entry>,
    /// The names of entries not in the spec, as [`Entry::Skipped`] numbers them.
    skipped: Vec<Vec<u8>>,
}

/// Names not in the spec a batch's decoding remembers (see [`Entry::Skipped`]).
const MAX_SKIPPED: usize = 64;

/// What a record's k-th feature entry was: the spec's feature `i` (its column), or the
/// `j`-th name not in the spec (a column not asked for).
#[derive(Debug, Clone, Copy)]
enum Entry {
    Column(usize),
    Skipped(usize),
}

impl Columns {
    /// The columns, in spec order.
    pub(crate) fn columns_mut(&mut self) -> &mut [Column] {
        &mut self.columns
    }

    /// The decoded batch.
    pub(crate) fn finish(self, epoch: u64, rows: usize, record_bytes: u64) -> Batch {
        Batch {
            epoch,
            rows,
            columns: self.columns,
            record_bytes,
        }
    }
}

impl Decoder {
    /// A decoder for a spec: of `tf.train.Example` features, or (when the spec says
    /// which part each feature is in) of a `tf.train.SequenceExample`'s context features
    /// and feature lists.
    ///
    /// # Errors
    ///
    /// None today (the signature leaves room for specs a decoder cannot follow).
    pub fn new(spec: &[FeatureSpec]) -> Result<Decoder> {
        let by_name = |list: bool| -> HashMap<Vec<u8>, usize> {
            spec.iter()
                .enumerate()
                .filter(|(_, f)| (f.part == Some(Part::FeatureLists)) == list)
                .map(|(i, f)| (f.name.as_bytes().to_vec(), i))
                .collect()
        };
        Ok(Decoder {
            spec: spec.to_vec(),
            index: by_name(false),
            lists: spec.iter().any(|f| f.part.is_some()).then(|| by_name(true)),
        })
    }

    /// The spec.
    pub fn spec(&self) -> &[FeatureSpec] {
        &self.spec
    }

    /// Empty columns for a batch.
    pub(crate) fn start(&self) -> Columns {
        let columns: Vec<Column> = self
            .spec
            .iter()
            .map(|f| Column {
                name: f.name.clone(),
                shape: f.shape.clone(),
                values: Values::new(f.kind),
                row_splits: (f.shape.is_none() || f.part == Some(Part::FeatureLists))
                    .then(|| vec![0]),
                step_splits: (f.part == Some(Part::FeatureLists)).then(|| vec![0]),
            })
            .collect();
        Columns {
            seen: vec![false; columns.len()],
            order: Vec::with_capacity(columns.len()),
            skipped: Vec::new(),
            columns,
        }
    }

    /// Appends one record's features to the columns. `home` says where the record's
    /// bytes lie, so that long bytes values can be referenced.
    ///
    /// # Errors
    ///
    /// A record that is not an Example ([`ErrorKind::Malformed`]), or one that does
    /// not fit the spec ([`ErrorKind::RecordMismatch`]).
    pub(crate) fn decode(&self, bytes: &[u8], home: Home<'_>, c: &mut Columns) -> Result<()> {
        c.seen.iter_mut().for_each(|s| *s = false);
        self.parse_record(bytes, home, c)?;
        for (i, column) in c.columns.iter_mut().enumerate() {
            if let Some(steps) = &column.step_splits {
                let steps = steps.len() as u64 - 1;
                column
                    .row_splits
                    .as_mut()
                    .expect("a list has both")
                    .push(steps);
                continue;
            }
            match &mut column.row_splits {
                Some(splits) => splits.push(column.values.len() as u64),
                None if !c.seen[i] => {
                    self.spec[i]
                        .check_missing()
                        .map_err(|m| Error::new(ErrorKind::RecordMismatch(m)))?;
                }
                None => {}
            }
        }
        Ok(())
    }

    fn parse_record(&self, bytes: &[u8], home: Home<'_>, c: &mut Columns) -> Result<()> {
        let Columns {
            columns,
            seen,
            order,
            skipped,
        } = c;
        let mut entry_index = 0;
        fields(bytes, |field, wire, features| {
            if field == 2 && wire == 2 {
                if let Some(lists) = &self.lists {
                    return self.parse_lists(features, lists, bytes, home, columns, seen);
                }
            }
            if field != 1 || wire != 2 {
                return Ok(());
            }
            fields(features, |field, wire, entry| {
                if field != 1 || wire != 2 {
                    return Ok(());
                }
                let (key, value) = map_entry(entry)?;
                // Records of a shard list their features in the same order: the k-th
                // entry is most likely what the k-th entry of the last record was (a
                // column, or a feature not asked for), which one comparison confirms;
                // the hash lookup is the fallback.
                let k = entry_index;
                entry_index += 1;
                let i = match order.get(k) {
                    Some(&Entry::Column(i)) if self.spec[i].name.as_bytes() == key => i,
                    Some(&Entry::Skipped(j)) if skipped[j] == key => return Ok(()),
                    _ => {
                        let entry = match self.index.get(key) {
                            Some(&i) => Entry::Column(i),
                            None => match skipped.iter().position(|s| s == key) {
                                Some(j) => Entry::Skipped(j),
                                // (Names remembered up to a bound: records of ever new
                                // names cost a lookup each, not a growing search.)
                                None if skipped.len() >= MAX_SKIPPED => return Ok(()),
                                None => {
                                    skipped.push(key.to_vec());
                                    Entry::Skipped(skipped.len() - 1)
                                }
                            },
                        };
                        if k < order.len() {
                            order[k] = entry;
                        } else if k == order.len() {
                            order.push(entry);
                        }
                        match entry {
                            Entry::Column(i) => i,
                            Entry::Skipped(_) => return Ok(()),
                        }
                    }
                };
                if std::mem::replace(&mut seen[i], true) {
                    return Err(malformed(WireProblem::DuplicateFeature {
                        feature: columns[i].name.clone(),
                    }));
                }
                let before = columns[i].values.len();
                let kind = append_feature(value, &mut columns[i].values, bytes, home)
                    .map_err(|e| e.with_column(columns[i].name.clone()))?;
                let count = (columns[i].values.len() - before) as u64;
                self.spec[i]
                    .check_values(kind, count)
                    .map_err(|m| Error::new(ErrorKind::RecordMismatch(m)))
            })
        })
    }
}

impl Decoder {
    /// A SequenceExample's `FeatureLists`: each list's steps appended to its column, one
    /// step split per `Feature`, each step checked against the spec's step shape.
    fn parse_lists(
        &self,
        feature_lists: &[u8],
        lists: &HashMap<Vec<u8>, usize>,
        record: &[u8],
        home: Home<'_>,
        columns: &mut [Column],
        seen: &mut [bool],
    ) -> Result<()> {
        fields(feature_lists, |field, wire, entry| {
            if field != 1 || wire != 2 {
                return Ok(());
            }
            let (key, value) = map_entry(entry)?;
            let Some(&i) = lists.get(key) else {
                return Ok(());
            };
            if std::mem::replace(&mut seen[i], true) {
                return Err(malformed(WireProblem::DuplicateFeature {
                    feature: columns[i].name.clone(),
                }));
            }
            let column = &mut columns[i];
            fields(value, |field, wire, feature| {
                if field != 1 || wire != 2 {
                    return Ok(());
                }
                let before = column.values.len();
                let kind = append_feature(feature, &mut column.values, record, home)
                    .map_err(|e| e.with_column(column.name.clone()))?;
                let count = (column.values.len() - before) as u64;
                // A step with no value list is an empty step where steps vary in length
                // (as spec inference counts it).
                if kind.is_some() || self.spec[i].shape.is_some() {
                    self.spec[i]
                        .check_values(kind, count)
                        .map_err(|m| Error::new(ErrorKind::RecordMismatch(m)))?;
                }
                let end = column.values.len() as u64;
                column.step_splits.as_mut().expect("a list").push(end);
                Ok(())
            })
        })
    }
}

/// The key and value of a protobuf map entry (`features`, `feature_list`).
fn map_entry(entry: &[u8]) -> Result<(&[u8], &[u8])> {
    let (mut key, mut value): (&[u8], &[u8]) = (&[], &[]);
    fields(entry, |field, _, payload| {
        match field {
            1 => key = payload,
            2 => value = payload,
            _ => {}
        }
        Ok(())
    })?;
    Ok((key, value))
}

/// Appends the values of one `Feature` message; returns the kind of its value list
/// (`None`: it has none). A list of another kind than `values` is left alone, for the
/// spec check to name. `record` and `home` say where the bytes lie, so long values can
/// be referenced.
fn append_feature(
    feature: &[u8],
    values: &mut Values,
    record: &[u8],
    home: Home<'_>,
) -> Result<Option<FeatureKind>> {
    let mut kind_seen = None;
    fields(feature, |field, wire, list| {
        if wire != 2 {
            return Ok(());
        }
        let kind = match field {
            1 => FeatureKind::Bytes,
            2 => FeatureKind::Float,
            3 => FeatureKind::Int64,
            _ => return Ok(()),
        };
        kind_seen = Some(kind);
        match (kind, &mut *values) {
            (FeatureKind::Int64, Values::Int64(out)) => fields(list, |f, wire, payload| {
                match (f, wire) {
                    (1, 2) => {
                        let mut pos = 0;
                        while pos < payload.len() {
                            out.push(varint(payload, &mut pos)? as i64);
                        }
                    }
                    (1, 0) => out.push(varint(payload, &mut 0)? as i64),
                    _ => {}
                }
                Ok(())
            }),
            (FeatureKind::Float, Values::Float(out)) => fields(list, |f, wire, payload| {
                match (f, wire) {
                    (1, 2) if payload.len() % 4 == 0 => {
                        out.extend(
                            payload
                                .chunks_exact(4)
                                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                        );
                    }
                    (1, 2) => return Err(malformed(WireProblem::PackedFloatLength)),
                    (1, 5) => out.push(f32::from_le_bytes([
                        payload[0], payload[1], payload[2], payload[3],
                    ])),
                    _ => {}
                }
                Ok(())
            }),
            (FeatureKind::Bytes, Values::Bytes(out)) => fields(list, |f, wire, payload| {
                if (f, wire) == (1, 2) {
                    out.push_from(payload, record, home);
                }
                Ok(())
            }),
            _ => Ok(()),
        }
    })?;
    Ok(kind_seen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::proto::{Feature, FeatureList, FeatureLists, Features, SequenceExample};
    use prost::Message;

    /// Context features become columns; a feature list two levels of splits, with a
    /// step that has no value list an empty step.
    #[test]
    fn sequence_examples_decode_into_two_level_columns() {
        let mut context = Features::default();
        context.feature.insert("id".into(), Feature::int64(vec![7]));
        let mut lists = FeatureLists::default();
        lists.feature_list.insert(
            "steps".into(),
            FeatureList {
                feature: vec![
                    Feature::float(vec![1.0, 2.0]),
                    Feature { kind: None },
                    Feature::float(vec![3.0]),
                ],
            },
        );
        let record = SequenceExample {
            context: Some(context),
            feature_lists: Some(lists),
        }
        .encode_to_vec();
        let mut id = FeatureSpec::new("id", FeatureKind::Int64, Some(vec![]));
        id.part = Some(Part::Context);
        let mut steps = FeatureSpec::new("steps", FeatureKind::Float, None);
        steps.part = Some(Part::FeatureLists);
        let decoder = Decoder::new(&[id, steps]).unwrap();
        let mut columns = decoder.start();
        for _ in 0..2 {
            decoder.decode(&record, Home::Owned, &mut columns).unwrap();
        }
        let batch = columns.finish(0, 2, 0);
        assert_eq!(batch.columns[0].values, Values::Int64(vec![7, 7]));
        let s = &batch.columns[1];
        assert_eq!(s.values, Values::Float(vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]));
        assert_eq!(s.row_splits, Some(vec![0, 3, 6]));
        assert_eq!(s.step_splits, Some(vec![0, 2, 2, 3, 5, 5, 6]));
    }

    /// An Example whose features come in the order given (one `Features` message a
    /// feature, which protobuf merges).
    fn in_order(features: &[(&str, Feature)]) -> Vec<u8> {
        use crate::example::proto::Example;
        (features.iter())
            .flat_map(|(name, f)| {
                let mut one = Features::default();
                one.feature.insert((*name).into(), f.clone());
                Example {
                    features: Some(one),
                }
                .encode_to_vec()
            })
            .collect()
    }

    /// Records whose features change their order, among names not asked for (more
    /// than a batch remembers too), decode each to its own values; a feature twice in a
    /// record is still refused.
    #[test]
    fn columns_asked_for_are_found_whatever_the_order_of_the_others() {
        let spec = [
            FeatureSpec::new("x", FeatureKind::Int64, Some(vec![])),
            FeatureSpec::new("y", FeatureKind::Float, Some(vec![])),
        ];
        let decoder = Decoder::new(&spec).unwrap();
        let mut columns = decoder.start();
        let mut want = (Vec::new(), Vec::new());
        for r in 0..200i64 {
            let (x, y) = (
                ("x", Feature::int64(vec![r])),
                ("y", Feature::float(vec![r as f32])),
            );
            let other = |n: i64| (format!("other{n}"), Feature::int64(vec![n]));
            let (a, b) = (other(r % 3), other(1000 + r));
            let record = match r % 4 {
                0 => in_order(&[(a.0.as_str(), a.1.clone()), x, y]),
                1 => in_order(&[x, (a.0.as_str(), a.1.clone()), y]),
                2 => in_order(&[
                    y,
                    (b.0.as_str(), b.1.clone()),
                    x,
                    (a.0.as_str(), a.1.clone()),
                ]),
                _ => in_order(&[
                    (b.0.as_str(), b.1.clone()),
                    (a.0.as_str(), a.1.clone()),
                    y,
                    x,
                ]),
            };
            decoder.decode(&record, Home::Owned, &mut columns).unwrap();
            want.0.push(r);
            want.1.push(r as f32);
        }
        let batch = columns.finish(0, 200, 0);
        assert_eq!(batch.columns[0].values, Values::Int64(want.0));
        assert_eq!(batch.columns[1].values, Values::Float(want.1));

        let mut columns = decoder.start();
        let x = || ("x", Feature::int64(vec![1]));
        let y = ("y", Feature::float(vec![1.0]));
        let good = in_order(&[("z", Feature::int64(vec![2])), x(), y.clone()]);
        decoder.decode(&good, Home::Owned, &mut columns).unwrap();
        let twice = in_order(&[("z", Feature::int64(vec![2])), x(), x(), y]);
        let e = decoder
            .decode(&twice, Home::Owned, &mut columns)
            .unwrap_err();
        assert!(e.to_string().contains("\"x\""), "{e}");
    }
}
