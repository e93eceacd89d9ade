//! Arrow columns → `tf.train.Example` (or `SequenceExample`) record bytes.
//!
//! [`EncodePlan::new`] flattens an Arrow schema (structs become `parent/child`), applies
//! `--columns`, `--exclude` and `--rename`, and maps every selected column to a feature
//! kind, refusing what no `tf.train.Feature` can hold, before a byte is written.
//! [`EncodePlan::encode_batch`] then writes framed records straight from the Arrow
//! buffers: one column-wise pass computes every feature's encoded length per row (and
//! finds every bad value), one row-wise pass writes the bytes into one reusable buffer.
//! No prost struct per row; the output equals prost's (and TensorFlow's deterministic)
//! serialization byte for byte, which the tests check.

use std::collections::{BTreeMap, HashSet};

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    Array, ArrayRef, BinaryArray, FixedSizeBinaryArray, LargeBinaryArray, RecordBatch,
};
use arrow_buffer::{NullBuffer, OffsetBuffer, ScalarBuffer, ToByteSlice};
use arrow_schema::{DataType, Field, Schema, TimeUnit};

use crate::error::{Error, ErrorKind, Result};
use crate::example::schema::{FeatureKind, FeatureSpec, Part, ShapeStat};
use crate::example::wire::{entry_len, put_tag, put_varint, varint_len, wrapped};
use crate::example::RecordType;
use crate::hash::stable_hash;
use crate::tfrecord::frame;

/// Protobuf's hard limit on a message (2 GiB − 1).
pub const MAX_RECORD_BYTES: u64 = i32::MAX as u64;

/// Column selection and record type: what turns a table into features.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EncodeOptions {
    /// `--columns`: keep only these (flattened names; a struct's name keeps its
    /// children). `None` keeps every column.
    pub columns: Option<Vec<String>>,
    /// `--exclude`: drop these, after `columns`.
    pub exclude: Vec<String>,
    /// `--rename old=new`, applied after selection (a struct's name renames the prefix).
    pub rename: Vec<(String, String)>,
    /// Example or SequenceExample.
    pub record_type: RecordType,
    /// `--split-key`: a scalar column (flattened name, selected or not) whose value's
    /// stable hash is computed for every row.
    pub split_key: Option<String>,
}

/// How a leaf's values become feature values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueKind {
    Int,
    Float,
    Bytes,
}

impl ValueKind {
    fn feature_kind(self) -> FeatureKind {
        match self {
            ValueKind::Int => FeatureKind::Int64,
            ValueKind::Float => FeatureKind::Float,
            ValueKind::Bytes => FeatureKind::Bytes,
        }
    }
}

/// One feature: a leaf column of the flattened schema.
#[derive(Debug, Clone)]
struct Leaf {
    /// The flattened column name, as in the input.
    column: String,
    /// The feature name (after `--rename`).
    feature: String,
    /// Child indices from the batch's top-level column down to the leaf (the first is
    /// an index into the *projected* batch).
    path: Vec<usize>,
    data_type: DataType,
    kind: ValueKind,
    /// 0 scalar, 1 list, 2 list of lists (a `feature_lists` entry).
    depth: u8,
    unit: Option<&'static str>,
    /// The field's Arrow metadata ([`PARTITION_METADATA`] marks a Hive partition key).
    field_metadata: std::collections::HashMap<String, String>,
}

/// The Arrow field metadata key that marks a column made from Hive partition values
/// (the source sets it; the encoder records such features as partitions).
pub const PARTITION_METADATA: &str = "tfshard:partition";

fn is_partition(metadata: &std::collections::HashMap<String, String>) -> bool {
    metadata.contains_key(PARTITION_METADATA)
}

/// A validated mapping from an Arrow schema to features.
#[derive(Debug, Clone)]
pub struct EncodePlan {
    /// Sorted by feature name (context features first, then feature lists, for
    /// SequenceExamples): the order protobuf's deterministic serialization writes.
    leaves: Vec<Leaf>,
    record_type: RecordType,
    /// Top-level columns of the input schema the plan reads, ascending.
    roots: Vec<usize>,
    context_leaves: usize,
    split_key: Option<SplitKey>,
}

/// The `--split-key` column's place in the projected batch.
#[derive(Debug, Clone)]
struct SplitKey {
    column: String,
    path: Vec<usize>,
}

/// Per-leaf statistics gathered while encoding, for the manifest's shapes (kept in a
/// `--resume` journal's checkpoints).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct EncodeStats {
    /// Rows seen.
    pub rows: u64,
    /// Per leaf: lengths of present values (per step for feature lists).
    pub shapes: Vec<ShapeStat>,
}

impl EncodeStats {
    /// Adds another batch's statistics.
    pub fn merge(&mut self, other: &EncodeStats) {
        self.rows += other.rows;
        if self.shapes.len() < other.shapes.len() {
            self.shapes.resize(other.shapes.len(), ShapeStat::default());
        }
        for (a, b) in self.shapes.iter_mut().zip(&other.shapes) {
            a.merge(b);
        }
    }
}

/// The records of one batch, framed and back to back.
#[derive(Debug, Default, Clone)]
pub struct EncodedBatch {
    /// Framed records (header, payload, data CRC), concatenated.
    pub data: Vec<u8>,
    /// Framed length of each record.
    pub sizes: Vec<u64>,
    /// With a split key: each row's stable key hash.
    pub keys: Vec<u64>,
}

impl EncodedBatch {
    /// Empties the batch, keeping its buffers.
    pub fn clear(&mut self) {
        self.data.clear();
        self.sizes.clear();
        self.keys.clear();
    }

    /// Starts a record whose payload of `payload` bytes the caller appends to `data`
    /// next: writes its header, returns where the record starts.
    pub(crate) fn begin_record(&mut self, payload: u64) -> usize {
        let start = self.data.len();
        self.data.extend_from_slice(&frame::encode_header(payload));
        start
    }

    /// Ends the record begun at `start`: appends its data CRC and counts its size.
    pub(crate) fn end_record(&mut self, start: usize) {
        let crc = frame::encode_footer(&self.data[start + frame::HEADER_LEN..]);
        self.data.extend_from_slice(&crc);
        self.sizes.push((self.data.len() - start) as u64);
    }

    /// Ends the record begun at `start` with room for its data CRC, which
    /// [`Self::seal`] writes.
    fn end_record_unsealed(&mut self, start: usize) {
        self.data.extend_from_slice(&[0; frame::FOOTER_LEN]);
        self.sizes.push((self.data.len() - start) as u64);
    }

    /// Writes the data CRCs of the records from the `first`-th on, which start at byte
    /// `offset` and were ended with [`Self::end_record_unsealed`]: three at a time, side
    /// by side ([`frame::crc32c_3`]).
    fn seal(&mut self, first: usize, offset: usize) {
        let (data, sizes) = (&mut self.data, &self.sizes[first..]);
        let mut at = offset;
        for group in sizes.chunks(3) {
            // Each record's (start, end).
            let mut spans = [(0, 0); 3];
            for (span, &size) in spans.iter_mut().zip(group) {
                *span = (at, at + size as usize);
                at = span.1;
            }
            // A last group of one or two repeats its last record (once a batch).
            let last = spans[group.len() - 1];
            spans[group.len()..].fill(last);
            let crcs = frame::crc32c_3(
                spans.map(|(start, end)| &data[start + frame::HEADER_LEN..end - frame::FOOTER_LEN]),
            );
            for (&(_, end), crc) in spans.iter().zip(crcs).take(group.len()) {
                data[end - frame::FOOTER_LEN..end].copy_from_slice(&frame::mask(crc).to_le_bytes());
            }
        }
    }

    /// Appends a whole record, framed as every record is.
    pub fn push_record(&mut self, payload: &[u8]) {
        let start = self.begin_record(payload.len() as u64);
        self.data.extend_from_slice(payload);
        self.end_record(start);
    }
}

fn unsupported(field_name: &str, dt: &DataType) -> Error {
    Error::new(ErrorKind::UnsupportedType {
        data_type: dt.to_string(),
    })
    .with_column(field_name)
}

/// The value kind and list depth of a type; `None` for a struct (flattened elsewhere).
fn map_type(
    name: &str,
    dt: &DataType,
    sequence: bool,
) -> Result<(ValueKind, u8, Option<&'static str>)> {
    use DataType::*;
    let scalar = |kind, unit| Ok((kind, 0, unit));
    match dt {
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 | Boolean => {
            scalar(ValueKind::Int, None)
        }
        Float16 | Float32 | Float64 | Decimal32(..) | Decimal64(..) | Decimal128(..)
        | Decimal256(..) => scalar(ValueKind::Float, None),
        Date32 => scalar(ValueKind::Int, Some("day")),
        Date64 => scalar(ValueKind::Int, Some("ms")),
        Timestamp(unit, _) | Time32(unit) | Time64(unit) | Duration(unit) => {
            scalar(ValueKind::Int, Some(unit_name(*unit)))
        }
        Utf8 | LargeUtf8 | Utf8View | Binary | LargeBinary | BinaryView | FixedSizeBinary(_) => {
            scalar(ValueKind::Bytes, None)
        }
        Dictionary(_, value) => map_type(name, value, sequence),
        RunEndEncoded(_, values) => map_type(name, values.data_type(), sequence),
        List(child)
        | LargeList(child)
        | FixedSizeList(child, _)
        | ListView(child)
        | LargeListView(child) => {
            if matches!(child.data_type(), Struct(_)) {
                return Err(unsupported(name, dt));
            }
            let (kind, depth, unit) = map_type(name, child.data_type(), sequence)?;
            match depth {
                0 => Ok((kind, 1, unit)),
                1 if sequence => Ok((kind, 2, unit)),
                1 => Err(Error::new(ErrorKind::NestedList {
                    data_type: dt.to_string(),
                })
                .with_column(name)),
                _ => Err(unsupported(name, dt)),
            }
        }
        _ => Err(unsupported(name, dt)),
    }
}

fn unit_name(unit: TimeUnit) -> &'static str {
    match unit {
        TimeUnit::Second => "s",
        TimeUnit::Millisecond => "ms",
        TimeUnit::Microsecond => "us",
        TimeUnit::Nanosecond => "ns",
    }
}

/// Every leaf of a schema, flattened: (name, top-level index, child path, field).
fn flatten(schema: &Schema) -> Vec<(String, Vec<usize>, Field)> {
    fn walk(
        prefix: &str,
        path: &mut Vec<usize>,
        field: &Field,
        out: &mut Vec<(String, Vec<usize>, Field)>,
    ) {
        let name = if prefix.is_empty() {
            field.name().clone()
        } else {
            format!("{prefix}/{}", field.name())
        };
        if let DataType::Struct(children) = field.data_type() {
            if !children.is_empty() {
                for (i, child) in children.iter().enumerate() {
                    path.push(i);
                    walk(&name, path, child, out);
                    path.pop();
                }
                return;
            }
        }
        out.push((name, path.clone(), field.clone()));
    }
    let mut out = Vec::new();
    for (i, field) in schema.fields().iter().enumerate() {
        walk("", &mut vec![i], field, &mut out);
    }
    out
}

/// Whether `selector` names `column` itself or a struct holding it.
fn selects(selector: &str, column: &str) -> bool {
    column == selector
        || (column.starts_with(selector) && column.as_bytes().get(selector.len()) == Some(&b'/'))
}

impl EncodePlan {
    /// Validates the mapping of every selected column.
    ///
    /// # Errors
    ///
    /// An unknown column name in the selection (listing the available ones), a type
    /// with no mapping (naming the column and type), a list of lists outside
    /// SequenceExample mode, or two columns mapping to one feature name.
    pub fn new(schema: &Schema, options: &EncodeOptions) -> Result<EncodePlan> {
        let all = flatten(schema);
        let names: Vec<String> = all.iter().map(|(n, _, _)| n.clone()).collect();
        let check = |selector: &String| -> Result<()> {
            if names.iter().any(|n| selects(selector, n)) {
                Ok(())
            } else {
                Err(Error::new(ErrorKind::UnknownColumn {
                    name: selector.clone(),
                    available: names.clone(),
                }))
            }
        };
        let mut chosen: Vec<&(String, Vec<usize>, Field)> = match &options.columns {
            Some(columns) => {
                columns.iter().try_for_each(check)?;
                all.iter()
                    .filter(|(n, _, _)| columns.iter().any(|c| selects(c, n)))
                    .collect()
            }
            None => all.iter().collect(),
        };
        options.exclude.iter().try_for_each(check)?;
        chosen.retain(|(n, _, _)| !options.exclude.iter().any(|c| selects(c, n)));
        for (old, _) in &options.rename {
            if !chosen.iter().any(|(n, _, _)| selects(old, n)) {
                check(old)?;
                // It exists but is not selected: still a name the user cannot rename.
                return Err(Error::new(ErrorKind::UnknownColumn {
                    name: old.clone(),
                    available: chosen.iter().map(|(n, _, _)| n.clone()).collect(),
                }));
            }
        }
        let sequence = options.record_type == RecordType::SequenceExample;
        let mut roots: Vec<usize> = chosen.iter().map(|(_, p, _)| p[0]).collect();
        let key = match &options.split_key {
            None => None,
            Some(name) => {
                let Some((_, path, field)) = all.iter().find(|(n, _, _)| n == name) else {
                    return Err(Error::new(ErrorKind::UnknownColumn {
                        name: name.clone(),
                        available: names.clone(),
                    }));
                };
                let (_, depth, _) = map_type(name, field.data_type(), false)?;
                if depth != 0 {
                    return Err(unsupported(name, field.data_type()).with_column(name.clone()));
                }
                roots.push(path[0]);
                Some((name.clone(), path.clone()))
            }
        };
        roots.sort_unstable();
        roots.dedup();
        let split_key = key.map(|(column, mut path)| {
            path[0] = roots
                .binary_search(&path[0])
                .expect("the key's root is in roots");
            SplitKey { column, path }
        });
        let mut leaves = Vec::with_capacity(chosen.len());
        for (name, path, field) in chosen {
            let (kind, depth, unit) = map_type(name, field.data_type(), sequence)?;
            let mut feature = name.clone();
            for (old, new) in &options.rename {
                if selects(old, &feature) {
                    feature = format!("{new}{}", &feature[old.len()..]);
                    break;
                }
            }
            let mut path = path.clone();
            path[0] = roots
                .binary_search(&path[0])
                .expect("every leaf's root is in roots");
            leaves.push(Leaf {
                column: name.clone(),
                feature,
                path,
                data_type: field.data_type().clone(),
                kind,
                depth,
                unit,
                field_metadata: field.metadata().clone().into(),
            });
        }
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for leaf in &leaves {
            if let Some(first) = seen.insert(&leaf.feature, &leaf.column) {
                return Err(Error::new(ErrorKind::DuplicateFeature {
                    first: first.to_owned(),
                    second: leaf.column.clone(),
                    feature: leaf.feature.clone(),
                }));
            }
        }
        // Protobuf's deterministic map order: by key bytes. SequenceExamples keep
        // context (depth ≤ 1) and feature lists (depth 2) apart.
        leaves.sort_by(|a, b| {
            (a.depth == 2, a.feature.as_bytes()).cmp(&(b.depth == 2, b.feature.as_bytes()))
        });
        let context_leaves = leaves.iter().filter(|l| l.depth < 2).count();
        Ok(EncodePlan {
            leaves,
            record_type: options.record_type,
            roots,
            context_leaves,
            split_key,
        })
    }

    /// The top-level columns of the input the plan reads (for a Parquet projection).
    pub fn roots(&self) -> &[usize] {
        &self.roots
    }

    /// The record type.
    pub fn record_type(&self) -> RecordType {
        self.record_type
    }

    /// Fresh statistics for this plan.
    pub fn new_stats(&self) -> EncodeStats {
        EncodeStats {
            rows: 0,
            shapes: vec![ShapeStat::default(); self.leaves.len()],
        }
    }

    /// The feature spec, with shapes from the statistics of every row written.
    pub fn features(&self, stats: &EncodeStats) -> Vec<FeatureSpec> {
        self.leaves
            .iter()
            .enumerate()
            .map(|(i, leaf)| {
                let stat = stats.shapes.get(i).cloned().unwrap_or_default();
                let shape = match leaf.depth {
                    0 => stat.shape(stats.rows, true),
                    1 => stat.shape(stats.rows, false),
                    _ => stat.shape(stat.present, false),
                };
                let part = match (self.record_type, leaf.depth) {
                    (RecordType::Example | RecordType::Bytes, _) => None,
                    (RecordType::SequenceExample, 2) => Some(Part::FeatureLists),
                    (RecordType::SequenceExample, _) => Some(Part::Context),
                };
                let partition = is_partition(&leaf.field_metadata);
                FeatureSpec {
                    name: leaf.feature.clone(),
                    kind: leaf.kind.feature_kind(),
                    shape,
                    arrow_type: (!partition).then(|| leaf.data_type.to_string()),
                    unit: leaf.unit.map(str::to_owned),
                    part,
                    partition: partition.then_some(true),
                }
            })
            .collect()
    }

    /// Appends the framed records of every row of `batch` to `out`.
    ///
    /// `batch` must hold the projected columns ([`EncodePlan::roots`], in order). Errors
    /// carry the column and the row within the batch.
    ///
    /// # Errors
    ///
    /// A value the feature cannot hold (uint64 above `i64::MAX`, a finite float beyond
    /// float32, a null inside a list, a temporal value out of range) or a record over
    /// protobuf's 2 GiB limit.
    pub fn encode_batch(
        &self,
        batch: &RecordBatch,
        out: &mut EncodedBatch,
        stats: &mut EncodeStats,
    ) -> Result<()> {
        let rows = batch.num_rows();
        let columns: Vec<Column> = self
            .leaves
            .iter()
            .map(|leaf| Column::new(leaf, batch).map_err(|e| e.with_column(&leaf.column)))
            .collect::<Result<_>>()?;
        // Pass 1, column by column: each present feature's encoded length, per row.
        let mut context_len = vec![0u64; rows];
        let mut lists_len = vec![0u64; rows];
        let mut feature_lens: Vec<Vec<u64>> = Vec::with_capacity(columns.len());
        for (i, (leaf, column)) in self.leaves.iter().zip(&columns).enumerate() {
            let lens = column
                .body_lengths(rows, &mut stats.shapes[i])
                .map_err(|e| e.with_column(&leaf.column))?;
            let key = leaf.feature.len() as u64;
            let totals = if leaf.depth == 2 {
                &mut lists_len
            } else {
                &mut context_len
            };
            let key_part = wrapped(key);
            for (total, &len) in totals.iter_mut().zip(&lens) {
                if len != ABSENT {
                    // wrapped(entry_len(key, len)), the key's part made once.
                    *total += wrapped(key_part + wrapped(len));
                }
            }
            feature_lens.push(lens);
        }
        stats.rows += rows as u64;
        // Pass 2, row by row: the bytes.
        let sequence = self.record_type == RecordType::SequenceExample;
        let has_context = !sequence || self.context_leaves > 0;
        let has_lists = sequence && self.context_leaves < self.leaves.len();
        // Pass 1 knows every record's size: one exact allocation, no regrowth.
        let framed_total: u64 = (0..rows)
            .map(|row| {
                let mut payload = 0;
                if has_context {
                    payload += wrapped(context_len[row]);
                }
                if has_lists {
                    payload += wrapped(lists_len[row]);
                }
                payload + frame::FRAME_OVERHEAD
            })
            .sum();
        let (first_record, first_byte) = (out.sizes.len(), out.data.len());
        out.data
            .reserve(usize::try_from(framed_total).unwrap_or(usize::MAX));
        out.sizes.reserve(rows);
        // A column whose feature has the same encoded length in every row (fixed shapes,
        // fixed-width values, no nulls) starts each row's entry with the same bytes:
        // made once per batch. For float lists they include the value list's header, so
        // a row is those bytes and its values.
        let heads: Vec<Option<Head>> = self
            .leaves
            .iter()
            .zip(&columns)
            .zip(&feature_lens)
            .map(|((leaf, column), lens)| Head::new(leaf, column, lens))
            .collect();
        for row in 0..rows {
            let mut payload = 0u64;
            if has_context {
                payload += wrapped(context_len[row]);
            }
            if has_lists {
                payload += wrapped(lists_len[row]);
            }
            if payload > MAX_RECORD_BYTES {
                let biggest = (0..self.leaves.len())
                    .max_by_key(|&i| feature_lens[i][row].wrapping_add(1))
                    .unwrap_or(0);
                return Err(Error::new(ErrorKind::RecordTooLarge { bytes: payload })
                    .with_column(&self.leaves[biggest].column)
                    .with_row(row as u64));
            }
            let start = out.begin_record(payload);
            let data_start = out.data.len();
            let buf = &mut out.data;
            let parts = [
                (has_context, 1u64, 0, self.context_leaves, context_len[row]),
                (
                    has_lists,
                    2u64,
                    self.context_leaves,
                    self.leaves.len(),
                    lists_len[row],
                ),
            ];
            for (present, part, lo, hi, total) in parts {
                if !present {
                    continue;
                }
                put_tag(buf, part);
                put_varint(buf, total);
                for i in lo..hi {
                    match &heads[i] {
                        Some(Head::Values(head)) => {
                            buf.extend_from_slice(head);
                            columns[i].write_float_values(buf, row);
                        }
                        Some(Head::Entry(head)) => {
                            buf.extend_from_slice(head);
                            columns[i].write(buf, row);
                        }
                        None => {
                            let len = feature_lens[i][row];
                            if len == ABSENT {
                                continue;
                            }
                            let key = self.leaves[i].feature.as_bytes();
                            put_entry_head(buf, key, len);
                            columns[i].write(buf, row);
                        }
                    }
                }
            }
            debug_assert_eq!(out.data.len() - data_start, payload as usize);
            out.end_record_unsealed(start);
        }
        out.seal(first_record, first_byte);
        if let Some(key) = &self.split_key {
            key_hashes(batch, &key.path, &mut out.keys).map_err(|e| e.with_column(&key.column))?;
        }
        Ok(())
    }
}

/// Appends the stable hash of each row's key: integers (and booleans, temporal values)
/// by their i64 value, floats by their f64 bits, text and binary by their bytes; a null
/// key has a hash of its own.
fn key_hashes(batch: &RecordBatch, path: &[usize], out: &mut Vec<u64>) -> Result<()> {
    let mut array = batch.column(path[0]).clone();
    let mut valid = array.logical_nulls();
    for &child in &path[1..] {
        let child_array = array.as_struct().column(child).clone();
        valid = NullBuffer::union(valid.as_ref(), child_array.logical_nulls().as_ref());
        array = child_array;
    }
    let array = decode_encodings(&array)?;
    let kind = map_type("", array.data_type(), false)?.0;
    let values = normalize_values(&array, kind)?;
    for row in 0..batch.num_rows() {
        let h = if valid.as_ref().is_some_and(|v| v.is_null(row)) {
            stable_hash(0, &[])
        } else {
            match &values {
                Values::Int(v) => stable_hash(1, &v[row].to_le_bytes()),
                Values::Float(v) => stable_hash(2, &f64::from(v[row]).to_bits().to_le_bytes()),
                _ => stable_hash(3, values.bytes(row)),
            }
        };
        out.push(h);
    }
    Ok(())
}

/// Writes a map entry's bytes up to its value: the entry's tag and length, the key,
/// and the value's tag and length (`len`, the encoded `Feature` or `FeatureList`).
#[inline]
fn put_entry_head(buf: &mut Vec<u8>, key: &[u8], len: u64) {
    put_tag(buf, 1);
    put_varint(buf, entry_len(key.len() as u64, len));
    put_tag(buf, 1);
    put_varint(buf, key.len() as u64);
    buf.extend_from_slice(key);
    put_tag(buf, 2);
    put_varint(buf, len);
}

/// The bytes every row of a column starts its entry with, when they are the same.
enum Head {
    /// The entry's head (see [`put_entry_head`]); the row's `Feature` follows.
    Entry(Vec<u8>),
    /// The entry's head and its float list's tags and lengths; the row's values follow.
    Values(Vec<u8>),
}

impl Head {
    /// `None` unless every row is present with one length (`lens` from pass 1).
    fn new(leaf: &Leaf, column: &Column, lens: &[u64]) -> Option<Head> {
        let &len = lens.first()?;
        if len == ABSENT || lens.iter().any(|&l| l != len) {
            return None;
        }
        let mut head = Vec::new();
        put_entry_head(&mut head, leaf.feature.as_bytes(), len);
        match (&column.values, &column.inner) {
            (Values::Float(_), None) => {
                let (a, b) = column.outer.get(0);
                if a == b {
                    return Some(Head::Entry(head));
                }
                let bytes = 4 * (b - a) as u64;
                put_tag(&mut head, 2);
                put_varint(&mut head, wrapped(bytes));
                put_tag(&mut head, 1);
                put_varint(&mut head, bytes);
                Some(Head::Values(head))
            }
            _ => Some(Head::Entry(head)),
        }
    }
}

/// Marks a row whose feature is absent (null).
const ABSENT: u64 = u64::MAX;

/// Row → range of child values.
#[derive(Debug, Clone)]
enum Ranges {
    /// Row i is value i.
    Scalar,
    Small(OffsetBuffer<i32>),
    Large(OffsetBuffer<i64>),
    /// Fixed-size lists: row i is values `offset + i·size .. + size`.
    Fixed {
        size: usize,
        offset: usize,
    },
    /// List views (and anything else): explicit (start, end) pairs.
    Pairs(Vec<(usize, usize)>),
}

impl Ranges {
    #[inline]
    fn get(&self, i: usize) -> (usize, usize) {
        match self {
            Ranges::Scalar => (i, i + 1),
            Ranges::Small(o) => (o[i] as usize, o[i + 1] as usize),
            Ranges::Large(o) => (o[i] as usize, o[i + 1] as usize),
            Ranges::Fixed { size, offset } => (offset + i * size, offset + (i + 1) * size),
            Ranges::Pairs(p) => p[i],
        }
    }
}

/// The normalized values of a leaf in one batch.
enum Values {
    Int(ScalarBuffer<i64>),
    Float(ScalarBuffer<f32>),
    Small(BinaryArray),
    Large(LargeBinaryArray),
    Fixed(FixedSizeBinaryArray),
}

impl Values {
    #[inline]
    fn bytes(&self, i: usize) -> &[u8] {
        match self {
            Values::Small(a) => a.value(i),
            Values::Large(a) => a.value(i),
            Values::Fixed(a) => a.value(i),
            Values::Int(_) | Values::Float(_) => &[],
        }
    }
}

/// One leaf column of one batch, ready to encode.
struct Column {
    /// Row validity (ancestors' nulls included).
    valid: Option<NullBuffer>,
    /// Row → values (depth 1) or row → steps (depth 2); `Scalar` at depth 0.
    outer: Ranges,
    /// Step → values, at depth 2.
    inner: Option<Ranges>,
    values: Values,
}

/// Expands dictionary and run-end encodings into plain arrays.
fn decode_encodings(array: &ArrayRef) -> Result<ArrayRef> {
    match array.data_type() {
        DataType::Dictionary(_, value_type) => {
            let plain = arrow_cast::cast(array, value_type)?;
            decode_encodings(&plain)
        }
        DataType::RunEndEncoded(ends, _) => {
            let logical: Vec<u32> = (0..array.len() as u32).collect();
            let physical = match ends.data_type() {
                DataType::Int16 => array.as_run::<Int16Type>().get_physical_indices(&logical)?,
                DataType::Int32 => array.as_run::<Int32Type>().get_physical_indices(&logical)?,
                _ => array.as_run::<Int64Type>().get_physical_indices(&logical)?,
            };
            let values = match ends.data_type() {
                DataType::Int16 => array.as_run::<Int16Type>().values().clone(),
                DataType::Int32 => array.as_run::<Int32Type>().values().clone(),
                _ => array.as_run::<Int64Type>().values().clone(),
            };
            let indices =
                arrow_array::UInt32Array::from_iter_values(physical.iter().map(|&p| p as u32));
            let taken = arrow_select::take::take(values.as_ref(), &indices, None)?;
            decode_encodings(&taken)
        }
        _ => Ok(array.clone()),
    }
}

/// A list view's (offset, size) pairs as ranges, with its child values.
fn view_ranges<O: arrow_array::OffsetSizeTrait>(
    a: &arrow_array::GenericListViewArray<O>,
) -> (Ranges, ArrayRef) {
    let pairs = a
        .offsets()
        .iter()
        .zip(a.sizes().iter())
        .map(|(o, s)| (o.as_usize(), o.as_usize() + s.as_usize()))
        .collect();
    (Ranges::Pairs(pairs), a.values().clone())
}

/// Splits a list array into (ranges, child values).
fn list_parts(array: &ArrayRef) -> Option<(Ranges, ArrayRef)> {
    Some(match array.data_type() {
        DataType::List(_) => {
            let a = array.as_list::<i32>();
            (Ranges::Small(a.offsets().clone()), a.values().clone())
        }
        DataType::LargeList(_) => {
            let a = array.as_list::<i64>();
            (Ranges::Large(a.offsets().clone()), a.values().clone())
        }
        DataType::FixedSizeList(_, size) => {
            let a = array.as_fixed_size_list();
            let offset = if a.is_empty() {
                0
            } else {
                a.value_offset_at(0)
            };
            (
                Ranges::Fixed {
                    size: *size as usize,
                    offset,
                },
                a.values().clone(),
            )
        }
        DataType::ListView(_) => view_ranges(array.as_list_view::<i32>()),
        DataType::LargeListView(_) => view_ranges(array.as_list_view::<i64>()),
        _ => return None,
    })
}

fn out_of_range(value: String, reason: &'static str, row: usize) -> Error {
    Error::new(ErrorKind::OutOfRange { value, reason }).with_row(row as u64)
}

/// Converts float64 to float32; a finite value that rounds to ±inf is an error.
#[inline]
fn narrow(v: f64) -> Option<f32> {
    let f = v as f32;
    if f.is_infinite() && v.is_finite() {
        None
    } else {
        Some(f)
    }
}

/// The normalized values of a scalar (non-list) array. Errors carry the element index
/// as the row; callers map it to the real row.
fn normalize_values(array: &ArrayRef, kind: ValueKind) -> Result<Values> {
    use DataType::*;
    let array = decode_encodings(array)?;
    let valid = |i: usize| array.is_valid(i);
    macro_rules! widen {
        ($t:ty) => {
            Values::Int(
                array
                    .as_primitive::<$t>()
                    .values()
                    .iter()
                    .map(|&v| v as i64)
                    .collect(),
            )
        };
    }
    macro_rules! same {
        ($t:ty) => {
            Values::Int(array.as_primitive::<$t>().values().clone())
        };
    }
    Ok(match (kind, array.data_type()) {
        (ValueKind::Int, Int8) => widen!(Int8Type),
        (ValueKind::Int, Int16) => widen!(Int16Type),
        (ValueKind::Int, Int32) => widen!(Int32Type),
        (ValueKind::Int, Int64) => same!(Int64Type),
        (ValueKind::Int, UInt8) => widen!(UInt8Type),
        (ValueKind::Int, UInt16) => widen!(UInt16Type),
        (ValueKind::Int, UInt32) => widen!(UInt32Type),
        (ValueKind::Int, UInt64) => {
            let values = array.as_primitive::<UInt64Type>().values();
            if let Some(i) = (0..values.len()).find(|&i| values[i] > i64::MAX as u64 && valid(i)) {
                return Err(out_of_range(values[i].to_string(), "above i64::MAX", i));
            }
            Values::Int(values.iter().map(|&v| v as i64).collect())
        }
        (ValueKind::Int, Boolean) => {
            let b = array.as_boolean();
            Values::Int(b.values().iter().map(i64::from).collect())
        }
        (ValueKind::Int, Date32) => widen!(Date32Type),
        (ValueKind::Int, Date64) => same!(Date64Type),
        (ValueKind::Int, Time32(TimeUnit::Second)) => widen!(Time32SecondType),
        (ValueKind::Int, Time32(_)) => widen!(Time32MillisecondType),
        (ValueKind::Int, Time64(TimeUnit::Microsecond)) => same!(Time64MicrosecondType),
        (ValueKind::Int, Time64(_)) => same!(Time64NanosecondType),
        (ValueKind::Int, Timestamp(TimeUnit::Second, _)) => same!(TimestampSecondType),
        (ValueKind::Int, Timestamp(TimeUnit::Millisecond, _)) => same!(TimestampMillisecondType),
        (ValueKind::Int, Timestamp(TimeUnit::Microsecond, _)) => same!(TimestampMicrosecondType),
        (ValueKind::Int, Timestamp(TimeUnit::Nanosecond, _)) => same!(TimestampNanosecondType),
        (ValueKind::Int, Duration(TimeUnit::Second)) => same!(DurationSecondType),
        (ValueKind::Int, Duration(TimeUnit::Millisecond)) => same!(DurationMillisecondType),
        (ValueKind::Int, Duration(TimeUnit::Microsecond)) => same!(DurationMicrosecondType),
        (ValueKind::Int, Duration(TimeUnit::Nanosecond)) => same!(DurationNanosecondType),
        (ValueKind::Float, Float32) => {
            Values::Float(array.as_primitive::<Float32Type>().values().clone())
        }
        (ValueKind::Float, Float16) => Values::Float(
            array
                .as_primitive::<Float16Type>()
                .values()
                .iter()
                .map(|v| v.to_f32())
                .collect(),
        ),
        (
            ValueKind::Float,
            Float64 | Decimal32(..) | Decimal64(..) | Decimal128(..) | Decimal256(..),
        ) => {
            // Decimals: value / 10^scale in float64 (arrow-cast's own formula), then
            // the same float64 → float32 rule.
            let wide = if matches!(array.data_type(), Float64) {
                array.clone()
            } else {
                arrow_cast::cast(&array, &Float64)?
            };
            let values = wide.as_primitive::<Float64Type>().values();
            let mut out = Vec::with_capacity(values.len());
            for (i, &v) in values.iter().enumerate() {
                match narrow(v) {
                    Some(f) => out.push(f),
                    None if !valid(i) => out.push(0.0),
                    None => return Err(out_of_range(format!("{v:e}"), "beyond float32 range", i)),
                }
            }
            Values::Float(out.into())
        }
        (ValueKind::Bytes, Utf8) => {
            Values::Small(BinaryArray::from(array.as_string::<i32>().clone()))
        }
        (ValueKind::Bytes, LargeUtf8) => {
            Values::Large(LargeBinaryArray::from(array.as_string::<i64>().clone()))
        }
        (ValueKind::Bytes, Binary) => Values::Small(array.as_binary::<i32>().clone()),
        (ValueKind::Bytes, LargeBinary) => Values::Large(array.as_binary::<i64>().clone()),
        (ValueKind::Bytes, FixedSizeBinary(_)) => {
            Values::Fixed(array.as_fixed_size_binary().clone())
        }
        (ValueKind::Bytes, Utf8View | BinaryView) => {
            let large = arrow_cast::cast(&array, &LargeBinary)?;
            Values::Large(large.as_binary::<i64>().clone())
        }
        (_, other) => {
            return Err(Error::new(ErrorKind::UnsupportedType {
                data_type: other.to_string(),
            }))
        }
    })
}

/// The row whose range holds element `element`, for error messages.
fn row_of(ranges: &Ranges, rows: usize, element: usize) -> usize {
    (0..rows)
        .find(|&r| {
            let (a, b) = ranges.get(r);
            (a..b).contains(&element)
        })
        .unwrap_or(0)
}

impl Column {
    fn new(leaf: &Leaf, batch: &RecordBatch) -> Result<Column> {
        let rows = batch.num_rows();
        // Walk down the struct path, gathering the ancestors' nulls.
        let mut array = batch.column(leaf.path[0]).clone();
        let mut valid = array.logical_nulls();
        for &child in &leaf.path[1..] {
            let child_array = array.as_struct().column(child).clone();
            valid = NullBuffer::union(valid.as_ref(), child_array.logical_nulls().as_ref());
            array = child_array;
        }
        let array = decode_encodings(&array)?;
        let (outer, inner, values_array) = match leaf.depth {
            0 => (Ranges::Scalar, None, array),
            1 => {
                let (ranges, values) =
                    list_parts(&array).ok_or_else(|| unsupported(&leaf.column, &leaf.data_type))?;
                (ranges, None, values)
            }
            _ => {
                let (outer, steps) =
                    list_parts(&array).ok_or_else(|| unsupported(&leaf.column, &leaf.data_type))?;
                let steps = decode_encodings(&steps)?;
                // A null step (inner list) is a null inside a list.
                if steps.null_count() > 0 {
                    for row in 0..rows {
                        if valid.as_ref().is_none_or(|v| v.is_valid(row)) {
                            let (a, b) = outer.get(row);
                            if (a..b).any(|s| steps.is_null(s)) {
                                return Err(Error::new(ErrorKind::NullInList).with_row(row as u64));
                            }
                        }
                    }
                }
                let (inner, values) =
                    list_parts(&steps).ok_or_else(|| unsupported(&leaf.column, &leaf.data_type))?;
                (outer, Some(inner), values)
            }
        };
        let values_array = decode_encodings(&values_array)?;
        // Element errors name the row that holds the element.
        let locate = |element: usize| -> usize {
            match (&inner, leaf.depth) {
                (_, 0) => element,
                (None, _) => row_of(&outer, rows, element),
                (Some(inner), _) => {
                    let step = row_of(inner, step_count(&outer, rows), element);
                    row_of(&outer, rows, step)
                }
            }
        };
        let values =
            normalize_values(&values_array, leaf.kind).map_err(|e| match e.location().row {
                Some(element) => {
                    let row = locate(element as usize) as u64;
                    e.replace_row(row)
                }
                None => e,
            })?;
        // A null element inside a present list.
        if leaf.depth > 0 && values_array.null_count() > 0 {
            for row in 0..rows {
                if valid.as_ref().is_some_and(|v| v.is_null(row)) {
                    continue;
                }
                let (a, b) = outer.get(row);
                let mut ranges = vec![];
                match &inner {
                    None => ranges.push((a, b)),
                    Some(inner) => ranges.extend((a..b).map(|s| inner.get(s))),
                }
                if ranges
                    .into_iter()
                    .any(|(x, y)| (x..y).any(|e| values_array.is_null(e)))
                {
                    return Err(Error::new(ErrorKind::NullInList).with_row(row as u64));
                }
            }
        }
        Ok(Column {
            valid,
            outer,
            inner,
            values,
        })
    }

    /// The encoded length of one `Feature` over values `a..b`.
    #[inline]
    fn feature_len(&self, a: usize, b: usize) -> u64 {
        let list = match &self.values {
            Values::Int(v) => {
                let packed: u64 = v[a..b].iter().map(|&x| varint_len(x as u64)).sum();
                if b > a {
                    wrapped(packed)
                } else {
                    0
                }
            }
            Values::Float(_) => {
                if b > a {
                    wrapped(4 * (b - a) as u64)
                } else {
                    0
                }
            }
            _ => (a..b)
                .map(|i| wrapped(self.values.bytes(i).len() as u64))
                .sum(),
        };
        wrapped(list)
    }

    /// [`Self::body_lengths`] of a column with no nulls and one value (or one fixed-size
    /// float list) per row, in one tight loop; `None` for any other column.
    fn dense_lengths(&self, rows: usize, stat: &mut ShapeStat) -> Option<Vec<u64>> {
        let nulls = self.valid.as_ref().is_some_and(|v| v.null_count() > 0);
        if nulls || self.inner.is_some() || rows == 0 {
            return None;
        }
        let (n, first) = match self.outer {
            Ranges::Scalar => (1, 0),
            Ranges::Fixed { size, offset } => (size, offset),
            _ => return None,
        };
        let lens = match &self.values {
            Values::Float(_) => vec![self.feature_len(0, n); rows],
            Values::Int(v) if n == 1 => v[first..first + rows]
                .iter()
                .map(|&x| wrapped(wrapped(varint_len(x as u64))))
                .collect(),
            Values::Small(a) if n == 1 => a.offsets()[first..=first + rows]
                .windows(2)
                .map(|w| wrapped(wrapped((w[1] - w[0]) as u64)))
                .collect(),
            _ => return None,
        };
        for _ in 0..rows {
            stat.add(n as u64);
        }
        Some(lens)
    }

    /// Per row: the encoded length of the map value (a `Feature`, or a `FeatureList` at
    /// depth 2), or [`ABSENT`] for a null.
    fn body_lengths(&self, rows: usize, stat: &mut ShapeStat) -> Result<Vec<u64>> {
        if let Some(lens) = self.dense_lengths(rows, stat) {
            return Ok(lens);
        }
        let mut out = Vec::with_capacity(rows);
        for row in 0..rows {
            if self.valid.as_ref().is_some_and(|v| v.is_null(row)) {
                out.push(ABSENT);
                continue;
            }
            let (a, b) = self.outer.get(row);
            let len = match &self.inner {
                None => {
                    stat.add((b - a) as u64);
                    self.feature_len(a, b)
                }
                Some(inner) => (a..b)
                    .map(|step| {
                        let (x, y) = inner.get(step);
                        stat.add((y - x) as u64);
                        wrapped(self.feature_len(x, y))
                    })
                    .sum(),
            };
            out.push(len);
        }
        Ok(out)
    }

    /// Writes one `Feature` over values `a..b`.
    #[inline]
    fn write_feature(&self, buf: &mut Vec<u8>, a: usize, b: usize) {
        match &self.values {
            Values::Int(v) if b == a + 1 => {
                // One value: its tags and lengths are one byte each.
                let x = v[a] as u64;
                let packed = varint_len(x) as u8;
                buf.extend_from_slice(&[0x1a, packed + 2, 0x0a, packed]);
                put_varint(buf, x);
            }
            Values::Int(v) => {
                let values = &v[a..b];
                let packed: u64 = values.iter().map(|&x| varint_len(x as u64)).sum();
                put_tag(buf, 3);
                if values.is_empty() {
                    buf.push(0);
                    return;
                }
                put_varint(buf, wrapped(packed));
                put_tag(buf, 1);
                put_varint(buf, packed);
                for &x in values {
                    put_varint(buf, x as u64);
                }
            }
            Values::Float(v) => {
                put_tag(buf, 2);
                if b == a {
                    buf.push(0);
                    return;
                }
                let bytes = 4 * (b - a) as u64;
                put_varint(buf, wrapped(bytes));
                put_tag(buf, 1);
                put_varint(buf, bytes);
                // Arrow buffers are little-endian, as protobuf's fixed32 is.
                buf.extend_from_slice(v[a..b].to_byte_slice());
            }
            _ if b == a + 1 => {
                let value = self.values.bytes(a);
                let len = value.len() as u64;
                put_tag(buf, 1);
                put_varint(buf, wrapped(len));
                put_tag(buf, 1);
                put_varint(buf, len);
                buf.extend_from_slice(value);
            }
            _ => {
                put_tag(buf, 1);
                let list: u64 = (a..b)
                    .map(|i| wrapped(self.values.bytes(i).len() as u64))
                    .sum();
                put_varint(buf, list);
                for i in a..b {
                    let value = self.values.bytes(i);
                    put_tag(buf, 1);
                    put_varint(buf, value.len() as u64);
                    buf.extend_from_slice(value);
                }
            }
        }
    }

    /// Writes a row's float values alone (a [`Head::Values`] column: floats at depth 0
    /// or 1, every row present with as many values).
    #[inline]
    fn write_float_values(&self, buf: &mut Vec<u8>, row: usize) {
        if let Values::Float(v) = &self.values {
            let (a, b) = self.outer.get(row);
            // Arrow buffers are little-endian, as protobuf's fixed32 is.
            buf.extend_from_slice(v[a..b].to_byte_slice());
        }
    }

    /// Writes this row's map value (a present row).
    #[inline]
    fn write(&self, buf: &mut Vec<u8>, row: usize) {
        let (a, b) = self.outer.get(row);
        match &self.inner {
            None => self.write_feature(buf, a, b),
            Some(inner) => {
                for step in a..b {
                    let (x, y) = inner.get(step);
                    put_tag(buf, 1);
                    put_varint(buf, self.feature_len(x, y));
                    self.write_feature(buf, x, y);
                }
            }
        }
    }
}

/// The number of steps the outer ranges of `rows` rows cover.
fn step_count(outer: &Ranges, rows: usize) -> usize {
    (0..rows).map(|r| outer.get(r).1).max().unwrap_or(0)
}

/// Checks that two schemas map to the same features (nullability, metadata and
/// dictionary encoding aside); the first differing column, if any.
pub fn schema_difference(a: &Schema, b: &Schema) -> Option<String> {
    fn norm(dt: &DataType) -> String {
        match dt {
            DataType::Dictionary(_, v) => norm(v),
            DataType::RunEndEncoded(_, v) => norm(v.data_type()),
            DataType::List(c)
            | DataType::LargeList(c)
            | DataType::ListView(c)
            | DataType::LargeListView(c) => {
                format!("list<{}>", norm(c.data_type()))
            }
            DataType::FixedSizeList(c, n) => format!("list<{}>[{n}]", norm(c.data_type())),
            DataType::Struct(fields) => {
                let inner: Vec<String> = fields
                    .iter()
                    .map(|f| format!("{}: {}", f.name(), norm(f.data_type())))
                    .collect();
                format!("struct<{}>", inner.join(", "))
            }
            other => other.to_string(),
        }
    }
    let names_a: HashSet<&String> = a.fields().iter().map(|f| f.name()).collect();
    for field in a.fields() {
        match b.field_with_name(field.name()) {
            Err(_) => return Some(format!("column \"{}\" is missing", field.name())),
            Ok(other) if norm(other.data_type()) != norm(field.data_type()) => {
                return Some(format!(
                    "column \"{}\" is {} there but {} here",
                    field.name(),
                    field.data_type(),
                    other.data_type()
                ))
            }
            Ok(_) => {}
        }
    }
    b.fields()
        .iter()
        .find(|f| !names_a.contains(f.name()))
        .map(|f| format!("column \"{}\" is not there", f.name()))
}
