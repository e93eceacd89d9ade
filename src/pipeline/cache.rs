//! The cache: `ds.map(parse).cache()` for the pipeline. The first epoch reads and parses
//! the shards as always and keeps what it parsed, one chunk per batch, in memory or in a
//! local file; later epochs (and, with a file, later runs) take the records from there
//! instead, with no reading, CRC checking or parsing. Shuffle and batching still happen
//! every epoch: the cached records pass through their own shuffle buffer, seeded as the
//! record shuffle is, so each epoch's order and batches differ, as with `tf.data`'s
//! `cache().shuffle(...)`.
//!
//! A chunk is a parsed batch laid out flat (values, row splits, bytes as offsets and
//! data), so the memory cache costs about the parsed data's size, and a batch of a later
//! epoch is gathered from chunks by copying each row's values.
//!
//! A cache file is complete or ignored:
//!
//! ```text
//! "TFSCACHE" | version u32 | header length u32 | header (JSON) | crc32c(header) u32
//! chunk*:  payload length u64 | crc32c(payload) u32 | payload
//! end:     u64::MAX | chunks u64 | rows u64 | crc32c(chunks, rows) u32
//! ```
//!
//! The header names the source files (name, size, the manifest's CRC32C when there is
//! one, else the modification time), the parse spec and the record type. It is written
//! under a hidden temporary name beside the final one and renamed when the first epoch
//! is complete. At the next run the whole file is checked (header, every chunk's CRC32C,
//! the end record, nothing after it); any difference, a file cut short or a flipped byte
//! makes the run ignore it and build it again (the report says why).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_channel::{bounded, Receiver, Sender};
use serde::Serialize;

use crate::error::{Error, ErrorKind, Result};
use crate::example::columnar::{Batch, Column, Values};
use crate::example::{FeatureKind, FeatureSpec, RecordType};
use crate::tfrecord::frame::crc32c;

/// Where the cache lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheMode {
    /// In memory, for this run.
    Memory,
    /// In a local file, kept for later runs.
    File(PathBuf),
}

const MAGIC: &[u8; 8] = b"TFSCACHE";
const VERSION: u32 = 1;
/// The payload length that marks the end record.
const END: u64 = u64::MAX;
/// The cache file is read in blocks of this size.
const READ_BUFFER: usize = 1 << 20;

/// A cached batch: its columns laid out flat.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Chunk {
    rows: usize,
    /// Payload bytes of each record (for the throughput figures; a protobuf message
    /// is below 2 GiB).
    record_bytes: Vec<u32>,
    columns: Vec<ChunkColumn>,
}

#[derive(Debug, Clone, PartialEq)]
struct ChunkColumn {
    /// `rows + 1` offsets into the values, for variable-length features.
    row_splits: Option<Vec<u64>>,
    /// For a feature list: `steps + 1` offsets into the values (`row_splits` then
    /// counts steps).
    step_splits: Option<Vec<u64>>,
    values: ChunkValues,
}

#[derive(Debug, Clone, PartialEq)]
enum ChunkValues {
    Int64(Vec<i64>),
    Float(Vec<f32>),
    /// `len + 1` offsets into `data`.
    Bytes {
        offsets: Offsets,
        data: Vec<u8>,
    },
}

/// Offsets into a chunk's bytes: 32-bit unless the chunk holds 4 GiB of them or more.
#[derive(Debug, Clone, PartialEq)]
enum Offsets {
    U32(Vec<u32>),
    U64(Vec<u64>),
}

impl Offsets {
    fn from_u64(offsets: Vec<u64>) -> Offsets {
        if offsets.last().is_some_and(|&end| end > u64::from(u32::MAX)) {
            Offsets::U64(offsets)
        } else {
            Offsets::U32(offsets.into_iter().map(|o| o as u32).collect())
        }
    }

    #[inline]
    fn get(&self, i: usize) -> usize {
        match self {
            Offsets::U32(v) => v[i] as usize,
            Offsets::U64(v) => v[i] as usize,
        }
    }

    fn len(&self) -> usize {
        match self {
            Offsets::U32(v) => v.len(),
            Offsets::U64(v) => v.len(),
        }
    }

    fn held_bytes(&self) -> u64 {
        match self {
            Offsets::U32(v) => 4 * v.capacity() as u64,
            Offsets::U64(v) => 8 * v.capacity() as u64,
        }
    }
}

impl ChunkValues {
    fn len(&self) -> usize {
        match self {
            ChunkValues::Int64(v) => v.len(),
            ChunkValues::Float(v) => v.len(),
            ChunkValues::Bytes { offsets, .. } => offsets.len().saturating_sub(1),
        }
    }

    fn held_bytes(&self) -> u64 {
        match self {
            ChunkValues::Int64(v) => 8 * v.capacity() as u64,
            ChunkValues::Float(v) => 4 * v.capacity() as u64,
            ChunkValues::Bytes { offsets, data } => offsets.held_bytes() + data.capacity() as u64,
        }
    }

    fn kind(&self) -> FeatureKind {
        match self {
            ChunkValues::Int64(_) => FeatureKind::Int64,
            ChunkValues::Float(_) => FeatureKind::Float,
            ChunkValues::Bytes { .. } => FeatureKind::Bytes,
        }
    }
}

impl Chunk {
    /// A parsed batch's columns, copied out (bytes referenced in mapped shards too).
    pub(crate) fn from_batch(batch: &Batch, record_bytes: Vec<u32>) -> Chunk {
        let columns = batch
            .columns
            .iter()
            .map(|c| ChunkColumn {
                row_splits: c.row_splits.clone(),
                step_splits: c.step_splits.clone(),
                values: match &c.values {
                    Values::Int64(v) => ChunkValues::Int64(v.clone()),
                    Values::Float(v) => ChunkValues::Float(v.clone()),
                    Values::Bytes(v) => {
                        let (offsets, data) = v.to_offsets_and_data();
                        ChunkValues::Bytes {
                            offsets: Offsets::from_u64(offsets),
                            data,
                        }
                    }
                },
            })
            .collect();
        Chunk {
            rows: batch.rows,
            record_bytes,
            columns,
        }
    }

    /// Bytes allocated for it.
    pub(crate) fn held_bytes(&self) -> u64 {
        4 * self.record_bytes.capacity() as u64
            + self
                .columns
                .iter()
                .map(|c| {
                    c.values.held_bytes()
                        + 8 * c.row_splits.as_ref().map_or(0, Vec::capacity) as u64
                        + 8 * c.step_splits.as_ref().map_or(0, Vec::capacity) as u64
                })
                .sum::<u64>()
    }

    /// Rows in it.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// The payload of its record in a cache file (little-endian):
    /// `rows u32 | columns u32 | record bytes u32 × rows | per column: kind u8, has row
    /// splits u8, row splits u64 × (rows + 1)?, values u64, then int64 × values, float32 ×
    /// values, or the offsets' width u8 (4 or 8), offsets × (values + 1) and the bytes`.
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.rows as u32).to_le_bytes());
        out.extend_from_slice(&(self.columns.len() as u32).to_le_bytes());
        for v in &self.record_bytes {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for c in &self.columns {
            out.push(c.values.kind() as u8);
            out.push(u8::from(c.row_splits.is_some()) | (u8::from(c.step_splits.is_some()) << 1));
            if let Some(splits) = &c.step_splits {
                out.extend_from_slice(&(splits.len() as u64).to_le_bytes());
                put_u64s(out, splits);
            }
            if let Some(splits) = &c.row_splits {
                put_u64s(out, splits);
            }
            out.extend_from_slice(&(c.values.len() as u64).to_le_bytes());
            match &c.values {
                ChunkValues::Int64(v) => v
                    .iter()
                    .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                ChunkValues::Float(v) => v
                    .iter()
                    .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                ChunkValues::Bytes { offsets, data } => {
                    match offsets {
                        Offsets::U32(v) => {
                            out.push(4);
                            v.iter()
                                .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
                        }
                        Offsets::U64(v) => {
                            out.push(8);
                            put_u64s(out, v);
                        }
                    }
                    out.extend_from_slice(data);
                }
            }
        }
    }

    /// Reads a payload back, checking every length and offset against the spec and the
    /// bytes there are (a cache file is input: nothing in it may make us panic or
    /// allocate for bytes that are not there).
    fn decode(bytes: &[u8], spec: &[FeatureSpec]) -> std::result::Result<Chunk, String> {
        let mut r = Cursor { bytes, pos: 0 };
        let rows = r.u32()? as usize;
        let columns = r.u32()? as usize;
        if columns != spec.len() {
            return Err(format!("{columns} columns, the spec has {}", spec.len()));
        }
        let record_bytes = r
            .take(rows as u64, 4)?
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        let mut out = Vec::with_capacity(columns);
        for f in spec {
            let kind = r.u8()?;
            let flags = r.u8()?;
            let list = f.part == Some(crate::example::Part::FeatureLists);
            let has_splits = f.shape.is_none() || list;
            if kind != f.kind as u8 || flags != u8::from(has_splits) | (u8::from(list) << 1) {
                return Err(format!(
                    "column {:?} is not laid out as the spec says",
                    f.name
                ));
            }
            let step_splits = if list {
                let n = r.u64()?;
                Some(r.u64s(usize::try_from(n).map_err(|_| "too many steps")?)?)
            } else {
                None
            };
            let row_splits = if has_splits {
                Some(r.u64s(rows + 1)?)
            } else {
                None
            };
            let len = r.u64()?;
            let values = match f.kind {
                FeatureKind::Int64 => ChunkValues::Int64(
                    r.take(len, 8)?
                        .chunks_exact(8)
                        .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
                        .collect(),
                ),
                FeatureKind::Float => ChunkValues::Float(
                    r.take(len, 4)?
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                        .collect(),
                ),
                FeatureKind::Bytes => {
                    let count = usize::try_from(len).map_err(|_| "too many values")?;
                    let n = count.checked_add(1).ok_or("too many values")?;
                    let offsets = match r.u8()? {
                        4 => Offsets::U32(
                            r.take(n as u64, 4)?
                                .chunks_exact(4)
                                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
                                .collect(),
                        ),
                        8 => Offsets::U64(r.u64s(n)?),
                        w => return Err(format!("column {:?}: offsets {w} bytes wide", f.name)),
                    };
                    let ordered = (1..n).all(|i| offsets.get(i - 1) <= offsets.get(i));
                    if offsets.get(0) != 0 || !ordered {
                        return Err(format!("column {:?}: offsets out of order", f.name));
                    }
                    let data = r.take(offsets.get(n - 1) as u64, 1)?.to_vec();
                    ChunkValues::Bytes { offsets, data }
                }
            };
            let values_len = values.len() as u64;
            let ordered = |splits: &[u64], last: u64| {
                splits.first() == Some(&0)
                    && splits.windows(2).all(|w| w[0] <= w[1])
                    && splits.last() == Some(&last)
            };
            if let Some(steps) = &step_splits {
                let row_splits = row_splits.as_deref().expect("a list has row splits");
                if !ordered(steps, values_len)
                    || !ordered(row_splits, steps.len().saturating_sub(1) as u64)
                {
                    return Err(format!("column {:?}: step splits out of order", f.name));
                }
                out.push(ChunkColumn {
                    row_splits: Some(row_splits.to_vec()),
                    step_splits,
                    values,
                });
                continue;
            }
            match (&row_splits, &f.shape) {
                (Some(splits), _) => {
                    if splits.first() != Some(&0)
                        || splits.windows(2).any(|w| w[0] > w[1])
                        || splits.last() != Some(&values_len)
                    {
                        return Err(format!("column {:?}: row splits out of order", f.name));
                    }
                }
                (None, Some(shape)) => {
                    let per_row: u64 = shape.iter().product();
                    if per_row.checked_mul(rows as u64) != Some(values_len) {
                        return Err(format!("column {:?}: {values_len} values", f.name));
                    }
                }
                (None, None) => unreachable!("checked against the spec above"),
            }
            out.push(ChunkColumn {
                row_splits,
                step_splits: None,
                values,
            });
        }
        if r.pos != bytes.len() {
            return Err("bytes after the last column".into());
        }
        Ok(Chunk {
            rows,
            record_bytes,
            columns: out,
        })
    }
}

fn put_u64s(out: &mut Vec<u8>, values: &[u64]) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Reads little-endian fields, never past the end.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, count: u64, width: u64) -> std::result::Result<&'a [u8], String> {
        let len = count
            .checked_mul(width)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n <= self.bytes.len() - self.pos)
            .ok_or("cut short")?;
        let out = &self.bytes[self.pos..self.pos + len];
        self.pos += len;
        Ok(out)
    }

    fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1, 1)?[0])
    }

    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(1, 4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(1, 8)?.try_into().expect("8 bytes"),
        ))
    }

    fn u64s(&mut self, count: usize) -> std::result::Result<Vec<u64>, String> {
        Ok(self
            .take(count as u64, 8)?
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect())
    }
}

/// Rows of a batch to gather from cached chunks: the chunks they lie in and, per row,
/// (index into `chunks`, row within that chunk).
#[derive(Debug, Default)]
pub(crate) struct CachedRows {
    pub chunks: Vec<Arc<Chunk>>,
    pub rows: Vec<(u32, u32)>,
}

impl CachedRows {
    /// Bytes of its slots (the chunks themselves are the cache's).
    pub(crate) fn slot_bytes(&self) -> u64 {
        8 * (self.chunks.capacity() + self.rows.capacity()) as u64
    }
}

/// Copies the rows into `columns` (the empty columns of a batch, in spec order);
/// returns the framed bytes of the records they came from. Each column is sized once,
/// then filled.
pub(crate) fn gather(spec: &[FeatureSpec], rows: &CachedRows, columns: &mut [Column]) -> u64 {
    let mut ranges: Vec<std::ops::Range<usize>> = Vec::with_capacity(rows.rows.len());
    for (c, (f, out)) in spec.iter().zip(columns.iter_mut()).enumerate() {
        let per_row = f
            .shape
            .as_ref()
            .map_or(0, |s| s.iter().product::<u64>() as usize);
        ranges.clear();
        ranges.extend(rows.rows.iter().map(|&(chunk, row)| {
            let row = row as usize;
            let column = &rows.chunks[chunk as usize].columns[c];
            match (&column.row_splits, &column.step_splits) {
                (Some(splits), Some(steps)) => {
                    steps[splits[row] as usize] as usize..steps[splits[row + 1] as usize] as usize
                }
                (Some(splits), None) => splits[row] as usize..splits[row + 1] as usize,
                (None, _) => row * per_row..(row + 1) * per_row,
            }
        }));
        let count: usize = ranges.iter().map(|r| r.len()).sum();
        match &mut out.values {
            Values::Int64(o) => {
                o.reserve_exact(count);
                for (&(chunk, _), range) in rows.rows.iter().zip(&ranges) {
                    let ChunkValues::Int64(v) = &rows.chunks[chunk as usize].columns[c].values
                    else {
                        unreachable!("chunks are checked against the spec")
                    };
                    o.extend_from_slice(&v[range.clone()]);
                }
            }
            Values::Float(o) => {
                o.reserve_exact(count);
                for (&(chunk, _), range) in rows.rows.iter().zip(&ranges) {
                    let ChunkValues::Float(v) = &rows.chunks[chunk as usize].columns[c].values
                    else {
                        unreachable!("chunks are checked against the spec")
                    };
                    o.extend_from_slice(&v[range.clone()]);
                }
            }
            Values::Bytes(o) => {
                let mut data = 0;
                for (&(chunk, _), range) in rows.rows.iter().zip(&ranges) {
                    if let ChunkValues::Bytes { offsets, .. } =
                        &rows.chunks[chunk as usize].columns[c].values
                    {
                        data += offsets.get(range.end) - offsets.get(range.start);
                    }
                }
                o.reserve(count, data);
                for (&(chunk, _), range) in rows.rows.iter().zip(&ranges) {
                    let ChunkValues::Bytes { offsets, data } =
                        &rows.chunks[chunk as usize].columns[c].values
                    else {
                        unreachable!("chunks are checked against the spec")
                    };
                    for i in range.clone() {
                        o.push(&data[offsets.get(i)..offsets.get(i + 1)]);
                    }
                }
            }
        }
        if let Some(out_steps) = &mut out.step_splits {
            // Two levels: each row's steps, their ends moved to where its values land.
            let out_rows = out.row_splits.as_mut().expect("a list has row splits");
            let mut base = 0u64;
            for &(chunk, row) in &rows.rows {
                let column = &rows.chunks[chunk as usize].columns[c];
                let (Some(splits), Some(steps)) = (&column.row_splits, &column.step_splits) else {
                    unreachable!("chunks are checked against the spec")
                };
                let (s0, s1) = (
                    splits[row as usize] as usize,
                    splits[row as usize + 1] as usize,
                );
                let first = steps[s0];
                out_steps.extend(steps[s0 + 1..=s1].iter().map(|&end| base + end - first));
                base += steps[s1] - first;
                out_rows.push(out_steps.len() as u64 - 1);
            }
            continue;
        }
        if let Some(splits) = &mut out.row_splits {
            splits.reserve_exact(ranges.len());
            let mut end = 0u64;
            splits.extend(ranges.iter().map(|r| {
                end += r.len() as u64;
                end
            }));
        }
    }
    rows.rows
        .iter()
        .map(|&(chunk, row)| {
            u64::from(rows.chunks[chunk as usize].record_bytes[row as usize])
                + crate::tfrecord::frame::FRAME_OVERHEAD
        })
        .sum()
}

/// What the cache did, for reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CacheReport {
    /// `memory` or `file`.
    pub mode: &'static str,
    /// The cache file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// `filled` (the first epoch filled it), `rebuilt` (a file that could not be used
    /// was filled again; `reason` says why), `reused` (a complete file from an earlier
    /// run: no epoch read the shards), or `filling` (the run ended before the first
    /// epoch did; nothing was kept).
    pub state: &'static str,
    /// Why an existing file was not used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Records in it.
    pub records: u64,
    /// Chunks (batches of the filling epoch) in it.
    pub chunks: u64,
    /// Memory: bytes allocated for the chunks. File: the file's size.
    pub bytes: u64,
    /// Bytes the filling epoch's parsed batches held (values and row splits; 0 when
    /// reused): what `bytes` compares with.
    pub parsed_bytes: u64,
}

/// Where a complete cache's chunks are.
#[derive(Debug, Clone)]
enum Store {
    Memory(Arc<Vec<Arc<Chunk>>>),
    File { path: PathBuf, data_start: u64 },
}

/// The filling epoch's chunks, by batch number, on their way to memory or the file.
enum Fill {
    Memory(Vec<Option<Arc<Chunk>>>),
    File {
        writer: BufWriter<File>,
        temp: PathBuf,
        /// Chunks written so far (the next batch number to write).
        next: u64,
        /// Encoded chunks that came before their turn.
        pending: BTreeMap<u64, Vec<u8>>,
    },
}

enum State {
    Filling(Fill),
    Ready(Store),
    /// The filling epoch failed or was left; nothing is kept.
    Abandoned,
}

struct Inner {
    state: State,
    /// Batches of the filling epoch received.
    received: u64,
    /// Batches the filling epoch has, once the producer knows.
    expected: Option<u64>,
    report: CacheReport,
    sealed: Option<Sender<()>>,
}

/// The pipeline's cache, shared by its threads.
pub(crate) struct Cache {
    spec: Vec<FeatureSpec>,
    inner: Mutex<Inner>,
    sealed: Receiver<()>,
}

/// Identifies what a cache holds; its JSON is the file's header.
#[derive(Serialize)]
struct Header<'a> {
    record_type: RecordType,
    spec: &'a [FeatureSpec],
    sources: &'a [SourceFile],
}

/// A shard the cache was filled from.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SourceFile {
    pub file: String,
    pub bytes: u64,
    /// From the manifest, when one lists the shard.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crc32c: Option<String>,
    /// Nanoseconds since the epoch, when no manifest gives a CRC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_ns: Option<u128>,
}

impl Cache {
    /// A cache for these sources, spec and record type. A file that holds exactly them is
    /// used as it is; otherwise (missing, other sources, damaged) the first epoch fills
    /// a new one under a temporary name.
    ///
    /// # Errors
    ///
    /// The temporary file cannot be created.
    pub(crate) fn open(
        mode: &CacheMode,
        spec: &[FeatureSpec],
        record_type: RecordType,
        sources: &[SourceFile],
    ) -> Result<Cache> {
        let (tx, rx) = bounded(0);
        let mut report = CacheReport {
            mode: "memory",
            file: None,
            state: "filling",
            reason: None,
            records: 0,
            chunks: 0,
            bytes: 0,
            parsed_bytes: 0,
        };
        let state = match mode {
            CacheMode::Memory => State::Filling(Fill::Memory(Vec::new())),
            CacheMode::File(path) => {
                report.mode = "file";
                report.file = Some(path.display().to_string());
                let header = serde_json::to_vec(&Header {
                    record_type,
                    spec,
                    sources,
                })
                .expect("the header serializes");
                match check_file(path, &header, spec) {
                    Ok(Checked {
                        chunks,
                        records,
                        data_start,
                        bytes,
                    }) => {
                        report.state = "reused";
                        report.records = records;
                        report.chunks = chunks;
                        report.bytes = bytes;
                        State::Ready(Store::File {
                            path: path.clone(),
                            data_start,
                        })
                    }
                    Err(reason) => {
                        if let Some(reason) = reason {
                            report.reason = Some(reason);
                        }
                        State::Filling(start_file(path, &header)?)
                    }
                }
            }
        };
        let ready = matches!(state, State::Ready(_));
        Ok(Cache {
            spec: spec.to_vec(),
            inner: Mutex::new(Inner {
                state,
                received: 0,
                expected: None,
                report,
                sealed: (!ready).then_some(tx),
            }),
            sealed: rx,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the cache is complete (no epoch needs the shards any more).
    pub(crate) fn is_ready(&self) -> bool {
        matches!(self.lock().state, State::Ready(_))
    }

    /// Whether the filling failed or was left.
    pub(crate) fn is_abandoned(&self) -> bool {
        matches!(self.lock().state, State::Abandoned)
    }

    /// Closed (disconnected) once the cache is complete or abandoned.
    pub(crate) fn sealed(&self) -> &Receiver<()> {
        &self.sealed
    }

    /// What the cache did so far.
    pub(crate) fn report(&self) -> CacheReport {
        self.lock().report.clone()
    }

    /// Adds batch `seq` of the filling epoch, parsed from records of `parsed_bytes`.
    ///
    /// # Errors
    ///
    /// Writing the cache file failed.
    pub(crate) fn fill(&self, seq: u64, chunk: Chunk, parsed_bytes: u64) -> Result<()> {
        let encoded = match self.lock().state {
            State::Filling(Fill::File { .. }) => {
                let mut out = Vec::with_capacity(chunk.held_bytes() as usize + 64);
                chunk.encode(&mut out);
                Some(out)
            }
            _ => None,
        };
        let mut inner = self.lock();
        let inner = &mut *inner;
        let (rows, held) = (chunk.rows as u64, chunk.held_bytes());
        match &mut inner.state {
            State::Filling(Fill::Memory(slots)) => {
                let i = seq as usize;
                if slots.len() <= i {
                    slots.resize(i + 1, None);
                }
                slots[i] = Some(Arc::new(chunk));
                inner.report.bytes += held;
            }
            State::Filling(Fill::File {
                writer,
                temp,
                next,
                pending,
            }) => {
                pending.insert(seq, encoded.expect("encoded above for a file"));
                while let Some(payload) = pending.remove(next) {
                    let written = write_chunk(writer, &payload);
                    if let Err(e) = written {
                        let temp = temp.clone();
                        inner.state = State::Abandoned;
                        inner.sealed = None;
                        return Err(Error::from(e).with_file(temp));
                    }
                    inner.report.bytes += 12 + payload.len() as u64;
                    *next += 1;
                }
            }
            State::Ready(_) | State::Abandoned => return Ok(()),
        }
        inner.received += 1;
        inner.report.records += rows;
        inner.report.chunks += 1;
        inner.report.parsed_bytes += parsed_bytes;
        self.seal_if_complete(inner)
    }

    /// The producer's word that the filling epoch has `batches` batches (numbered from 0).
    ///
    /// # Errors
    ///
    /// Completing the cache file failed.
    pub(crate) fn expect(&self, batches: u64) -> Result<()> {
        let mut inner = self.lock();
        inner.expected = Some(batches);
        self.seal_if_complete(&mut inner)
    }

    /// Leaves the filling (an error stopped the epoch, or the pipeline was dropped
    /// before the epoch ended): nothing is kept, the temporary file is removed.
    pub(crate) fn abandon(&self) {
        let mut inner = self.lock();
        if !matches!(inner.state, State::Filling(_)) {
            return;
        }
        if let State::Filling(Fill::File { writer, temp, .. }) =
            std::mem::replace(&mut inner.state, State::Abandoned)
        {
            drop(writer);
            let _ = std::fs::remove_file(temp);
        }
        inner.sealed = None;
    }

    fn seal_if_complete(&self, inner: &mut Inner) -> Result<()> {
        if inner.expected != Some(inner.received) || !matches!(inner.state, State::Filling(_)) {
            return Ok(());
        }
        let State::Filling(fill) = std::mem::replace(&mut inner.state, State::Abandoned) else {
            unreachable!("checked just above");
        };
        let store = match fill {
            Fill::Memory(slots) => {
                let chunks: Option<Vec<Arc<Chunk>>> = slots.into_iter().collect();
                Store::Memory(Arc::new(
                    chunks.expect("every batch of the epoch was received"),
                ))
            }
            Fill::File {
                writer, temp, next, ..
            } => {
                let path = inner
                    .report
                    .file
                    .as_ref()
                    .map(PathBuf::from)
                    .expect("a file cache has a path");
                let finished = finish_file(writer, &temp, &path, next, inner.report.records);
                if let Err(e) = finished {
                    let _ = std::fs::remove_file(&temp);
                    inner.sealed = None;
                    return Err(e);
                }
                inner.report.bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
                Store::File {
                    data_start: data_start(&path).unwrap_or(0),
                    path,
                }
            }
        };
        inner.state = State::Ready(store);
        inner.report.state = if inner.report.reason.is_some() {
            "rebuilt"
        } else {
            "filled"
        };
        inner.sealed = None;
        Ok(())
    }

    /// The chunks of a complete cache, in order, for one epoch.
    ///
    /// # Errors
    ///
    /// The cache is not complete, or its file cannot be opened.
    pub(crate) fn chunks(&self) -> Result<ChunkReader> {
        let store = match &self.lock().state {
            State::Ready(store) => store.clone(),
            _ => return Err(damaged("read before the first epoch filled it".into())),
        };
        Ok(match store {
            Store::Memory(chunks) => ChunkReader::Memory { chunks, next: 0 },
            Store::File { path, data_start } => {
                let mut file = File::open(&path).map_err(|e| Error::from(e).with_file(&path))?;
                file.seek(SeekFrom::Start(data_start))
                    .map_err(|e| Error::from(e).with_file(&path))?;
                ChunkReader::File {
                    reader: BufReader::with_capacity(READ_BUFFER, file),
                    path,
                    spec: self.spec.clone(),
                    offset: data_start,
                    payload: Vec::new(),
                }
            }
        })
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        self.abandon();
    }
}

fn damaged(detail: String) -> Error {
    Error::new(ErrorKind::CacheDamaged(detail))
}

/// The chunks of a complete cache, one epoch's pass.
pub(crate) enum ChunkReader {
    Memory {
        chunks: Arc<Vec<Arc<Chunk>>>,
        next: usize,
    },
    File {
        reader: BufReader<File>,
        path: PathBuf,
        spec: Vec<FeatureSpec>,
        offset: u64,
        payload: Vec<u8>,
    },
}

impl ChunkReader {
    /// The next chunk, or `None` after the last.
    ///
    /// # Errors
    ///
    /// The file changed since it was checked: a chunk whose CRC32C or layout is wrong,
    /// or a file cut short (naming the file and the byte offset).
    pub(crate) fn next_chunk(&mut self) -> Result<Option<Arc<Chunk>>> {
        match self {
            ChunkReader::Memory { chunks, next } => {
                let chunk = chunks.get(*next).cloned();
                *next += 1;
                Ok(chunk)
            }
            ChunkReader::File {
                reader,
                path,
                spec,
                offset,
                payload,
            } => {
                let at = *offset;
                let fail = |detail: String| damaged(detail).with_file(&*path).with_offset(at);
                let mut head = [0u8; 12];
                reader
                    .read_exact(&mut head[..8])
                    .map_err(|e| fail(format!("cut short ({e})")))?;
                let len = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
                if len == END {
                    return Ok(None);
                }
                reader
                    .read_exact(&mut head[8..])
                    .map_err(|e| fail(format!("cut short ({e})")))?;
                let crc = u32::from_le_bytes(head[8..].try_into().expect("4 bytes"));
                payload.clear();
                let got = reader
                    .by_ref()
                    .take(len)
                    .read_to_end(payload)
                    .map_err(|e| fail(e.to_string()))?;
                if got as u64 != len {
                    return Err(fail("cut short".into()));
                }
                if crc32c(payload) != crc {
                    return Err(fail("chunk CRC32C mismatch".into()));
                }
                let chunk = Chunk::decode(payload, spec).map_err(fail)?;
                *offset += 12 + len;
                Ok(Some(Arc::new(chunk)))
            }
        }
    }
}

/// A hidden temporary beside `path`, with the header written.
fn start_file(path: &Path, header: &[u8]) -> Result<Fill> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let temp = dir.join(format!(".{name}.tfshard-tmp-{}", std::process::id()));
    let file = File::create(&temp).map_err(|e| Error::from(e).with_file(&temp))?;
    let mut writer = BufWriter::with_capacity(READ_BUFFER, file);
    let written = (|| {
        writer.write_all(MAGIC)?;
        writer.write_all(&VERSION.to_le_bytes())?;
        writer.write_all(&(header.len() as u32).to_le_bytes())?;
        writer.write_all(header)?;
        writer.write_all(&crc32c(header).to_le_bytes())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(Error::from(e).with_file(&temp));
    }
    Ok(Fill::File {
        writer,
        temp,
        next: 0,
        pending: BTreeMap::new(),
    })
}

fn write_chunk(writer: &mut BufWriter<File>, payload: &[u8]) -> std::io::Result<()> {
    writer.write_all(&(payload.len() as u64).to_le_bytes())?;
    writer.write_all(&crc32c(payload).to_le_bytes())?;
    writer.write_all(payload)
}

fn end_record(chunks: u64, rows: u64) -> [u8; 28] {
    let mut out = [0u8; 28];
    out[..8].copy_from_slice(&END.to_le_bytes());
    out[8..16].copy_from_slice(&chunks.to_le_bytes());
    out[16..24].copy_from_slice(&rows.to_le_bytes());
    let crc = crc32c(&out[8..24]);
    out[24..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Writes the end record, syncs and renames the temporary to its final name.
fn finish_file(
    mut writer: BufWriter<File>,
    temp: &Path,
    path: &Path,
    chunks: u64,
    rows: u64,
) -> Result<()> {
    let io = |e: std::io::Error| Error::from(e).with_file(temp);
    writer.write_all(&end_record(chunks, rows)).map_err(io)?;
    let file = writer.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    drop(file);
    std::fs::rename(temp, path).map_err(|e| Error::from(e).with_file(path))
}

/// Where the chunks start: after the header.
fn data_start(path: &Path) -> std::io::Result<u64> {
    let mut head = [0u8; 16];
    File::open(path)?.read_exact(&mut head)?;
    let header_len = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes"));
    Ok(16 + u64::from(header_len) + 4)
}

struct Checked {
    chunks: u64,
    records: u64,
    data_start: u64,
    bytes: u64,
}

/// Checks a whole cache file against the header this run would write. `Err(None)`:
/// there is no file; `Err(Some(reason))`: it cannot be used.
fn check_file(
    path: &Path,
    header: &[u8],
    spec: &[FeatureSpec],
) -> std::result::Result<Checked, Option<String>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(None),
        Err(e) => return Err(Some(format!("cannot be read: {e}"))),
    };
    let bytes = file.metadata().map_or(0, |m| m.len());
    let mut r = BufReader::with_capacity(READ_BUFFER, file);
    let mut head = [0u8; 16];
    r.read_exact(&mut head)
        .map_err(|_| Some("cut short in its header".to_owned()))?;
    if &head[..8] != MAGIC {
        return Err(Some("not a tfshard cache file".into()));
    }
    if u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) != VERSION {
        return Err(Some("written by another version".into()));
    }
    let header_len = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes")) as u64;
    let mut stored = Vec::new();
    r.by_ref()
        .take(header_len + 4)
        .read_to_end(&mut stored)
        .map_err(|e| Some(format!("cannot be read: {e}")))?;
    if stored.len() as u64 != header_len + 4 {
        return Err(Some("cut short in its header".into()));
    }
    let (stored_header, crc) = stored.split_at(header_len as usize);
    if crc32c(stored_header).to_le_bytes() != crc {
        return Err(Some("header CRC32C mismatch".into()));
    }
    if stored_header != header {
        return Err(Some(header_difference(stored_header, header)));
    }
    let data_start = 16 + header_len + 4;
    let mut offset = data_start;
    let (mut chunks, mut records) = (0u64, 0u64);
    let mut payload = Vec::new();
    loop {
        let at = format!("at byte {offset}");
        let mut len = [0u8; 8];
        r.read_exact(&mut len)
            .map_err(|_| Some(format!("cut short {at}")))?;
        let len = u64::from_le_bytes(len);
        if len == END {
            let mut rest = [0u8; 20];
            r.read_exact(&mut rest)
                .map_err(|_| Some(format!("cut short {at}")))?;
            let end = end_record(chunks, records);
            if rest != end[8..] {
                return Err(Some(format!("end record {at} does not match its chunks")));
            }
            if r.read(&mut [0u8; 1]).map_err(|e| Some(e.to_string()))? != 0 {
                return Err(Some("bytes after the end record".into()));
            }
            return Ok(Checked {
                chunks,
                records,
                data_start,
                bytes,
            });
        }
        let mut crc = [0u8; 4];
        r.read_exact(&mut crc)
            .map_err(|_| Some(format!("cut short {at}")))?;
        payload.clear();
        let got = r
            .by_ref()
            .take(len)
            .read_to_end(&mut payload)
            .map_err(|e| Some(e.to_string()))?;
        if got as u64 != len {
            return Err(Some(format!("cut short {at}")));
        }
        if crc32c(&payload).to_le_bytes() != crc {
            return Err(Some(format!("chunk {chunks} {at}: CRC32C mismatch")));
        }
        let chunk =
            Chunk::decode(&payload, spec).map_err(|e| Some(format!("chunk {chunks} {at}: {e}")))?;
        records += chunk.rows as u64;
        chunks += 1;
        offset += 12 + len;
    }
}

/// Names what differs between a stored header and this run's.
fn header_difference(stored: &[u8], wanted: &[u8]) -> String {
    let (Ok(a), Ok(b)) = (
        serde_json::from_slice::<serde_json::Value>(stored),
        serde_json::from_slice::<serde_json::Value>(wanted),
    ) else {
        return "its header is not JSON".into();
    };
    let differs: Vec<&str> = ["sources", "spec", "record_type"]
        .into_iter()
        .filter(|k| a.get(k) != b.get(k))
        .collect();
    match differs.as_slice() {
        [] => "its header differs".into(),
        keys => format!("made from other {}", keys.join(" and ")),
    }
}

/// One epoch's rows from the cache: chunks read in order, each row offered to the
/// shuffle; a chunk stays loaded while any of its rows waits in the shuffle buffer.
pub(crate) struct CachedEpoch {
    reader: ChunkReader,
    /// Loaded chunks, by id from `base` on: the chunk, its rows not yet taken into a
    /// batch, and the batch (stamp) it was last taken into with its index there.
    window: std::collections::VecDeque<Option<Loaded>>,
    base: u64,
    /// The chunk being offered: (id, next row, rows).
    current: Option<(u64, u32, u32)>,
    done: bool,
    stamp: u64,
}

struct Loaded {
    chunk: Arc<Chunk>,
    waiting: u32,
    stamp: u64,
    local: u32,
}

impl CachedEpoch {
    pub(crate) fn new(reader: ChunkReader) -> CachedEpoch {
        CachedEpoch {
            reader,
            window: std::collections::VecDeque::new(),
            base: 0,
            current: None,
            done: false,
            stamp: 0,
        }
    }

    /// The next row, as (chunk id, row), or `None` at the end of the epoch.
    pub(crate) fn next_row(&mut self) -> Result<Option<(u32, u32)>> {
        loop {
            if let Some((id, row, rows)) = &mut self.current {
                if *row < *rows {
                    *row += 1;
                    return Ok(Some((*id as u32, *row - 1)));
                }
                self.current = None;
            }
            if self.done {
                return Ok(None);
            }
            match self.reader.next_chunk()? {
                Some(chunk) if chunk.rows() > 0 => {
                    let id = self.base + self.window.len() as u64;
                    let rows = chunk.rows() as u32;
                    self.window.push_back(Some(Loaded {
                        chunk,
                        waiting: rows,
                        stamp: u64::MAX,
                        local: 0,
                    }));
                    self.current = Some((id, 0, rows));
                }
                Some(_) => {}
                None => self.done = true,
            }
        }
    }

    /// Starts a new batch: chunks are added to it afresh.
    pub(crate) fn start_batch(&mut self) {
        self.stamp += 1;
    }

    /// Takes a row out of the window into the batch being built: the batch gets the
    /// chunk (once) and the row; a chunk none of whose rows wait any more leaves the
    /// window. (Ids are the low 32 bits of the chunk's number in the epoch; the window
    /// never spans 2³² chunks.)
    pub(crate) fn take(&mut self, (id, row): (u32, u32), batch: &mut CachedRows) {
        let at = (id as u64).wrapping_sub(self.base as u32 as u64) as u32 as usize;
        let Some(Some(loaded)) = self.window.get_mut(at) else {
            unreachable!("a row's chunk stays in the window until the row is taken");
        };
        if loaded.stamp != self.stamp {
            loaded.stamp = self.stamp;
            loaded.local = batch.chunks.len() as u32;
            batch.chunks.push(loaded.chunk.clone());
        }
        batch.rows.push((loaded.local, row));
        loaded.waiting -= 1;
        if loaded.waiting == 0 {
            self.window[at] = None;
            while let Some(None) = self.window.front() {
                self.window.pop_front();
                self.base += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::columnar::Decoder;

    fn spec() -> Vec<FeatureSpec> {
        let f = |name: &str, kind, shape: Option<Vec<u64>>| FeatureSpec {
            name: name.into(),
            kind,
            shape,
            arrow_type: None,
            unit: None,
            part: None,
            partition: None,
        };
        vec![
            f("x", FeatureKind::Float, Some(vec![2])),
            f("y", FeatureKind::Int64, Some(vec![])),
            f("tags", FeatureKind::Bytes, None),
        ]
    }

    /// A batch of `rows` rows whose values derive from `base`.
    fn batch(base: i64, rows: usize) -> Batch {
        let spec = spec();
        let mut columns = Decoder::new(&spec).unwrap().start();
        let cols = columns.columns_mut();
        for r in 0..rows as i64 {
            let v = base + r;
            let Values::Float(x) = &mut cols[0].values else {
                panic!()
            };
            x.extend([v as f32, -(v as f32)]);
            let Values::Int64(y) = &mut cols[1].values else {
                panic!()
            };
            y.push(v);
            let Values::Bytes(t) = &mut cols[2].values else {
                panic!()
            };
            for k in 0..(v % 3) {
                t.push(format!("t{v}-{k}").as_bytes());
            }
            let n = t.len() as u64;
            cols[2].row_splits.as_mut().unwrap().push(n);
        }
        columns.finish(0, rows, 0)
    }

    #[test]
    fn a_chunk_round_trips_and_gathers_rows_exactly() {
        let spec = spec();
        let b = batch(10, 5);
        let chunk = Chunk::from_batch(&b, vec![4; 5]);
        let mut bytes = Vec::new();
        chunk.encode(&mut bytes);
        assert_eq!(Chunk::decode(&bytes, &spec).unwrap(), chunk);
        // Every prefix is refused, never a panic.
        for cut in 0..bytes.len() {
            assert!(Chunk::decode(&bytes[..cut], &spec).is_err(), "cut at {cut}");
        }
        // Gathering rows in any order gives the rows of a batch made in that order.
        let chunks = vec![
            Arc::new(chunk),
            Arc::new(Chunk::from_batch(&batch(100, 3), vec![0; 3])),
        ];
        let rows = CachedRows {
            chunks,
            rows: vec![(1, 2), (0, 4), (0, 0), (1, 0)],
        };
        let mut columns = Decoder::new(&spec).unwrap().start();
        let bytes = gather(&spec, &rows, columns.columns_mut());
        let got = columns.finish(0, 4, bytes);
        let mut want = Decoder::new(&spec).unwrap().start();
        for (base, _) in [(102, 0), (14, 0), (10, 0), (100, 0)] {
            let one = batch(base, 1);
            for (w, o) in want.columns_mut().iter_mut().zip(one.columns) {
                match (&mut w.values, o.values) {
                    (Values::Float(a), Values::Float(b)) => a.extend(b),
                    (Values::Int64(a), Values::Int64(b)) => a.extend(b),
                    (Values::Bytes(a), Values::Bytes(b)) => b.iter().for_each(|v| a.push(v)),
                    _ => unreachable!(),
                }
                if let Some(s) = &mut w.row_splits {
                    s.push(w.values.len() as u64);
                }
            }
        }
        assert_eq!(got, want.finish(0, 4, 16 + 20 + 20 + 16));
    }

    #[test]
    fn a_chunk_that_does_not_fit_the_spec_is_refused() {
        let mut bytes = Vec::new();
        Chunk::from_batch(&batch(0, 4), vec![1; 4]).encode(&mut bytes);
        let mut other = spec();
        other[1].kind = FeatureKind::Float;
        assert!(Chunk::decode(&bytes, &other).is_err());
        other = spec();
        other[0].shape = Some(vec![3]);
        assert!(Chunk::decode(&bytes, &other).is_err());
    }
}
