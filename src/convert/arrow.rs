//! The Arrow stream source: record batches from any producer (the Python module hands
//! over pyarrow Tables and readers, polars DataFrames, DuckDB relations through the Arrow
//! C stream interface) → framed records with the Parquet mapping, in stream order.
//!
//! The stream is read once, on the run's thread, and cut into slices of at most
//! [`PARQUET_BATCH_ROWS`] rows; a group of slices (two per thread) is encoded in parallel
//! and written in order before the next group is read, so memory holds one group. A
//! stream cannot be read twice or from the middle: `--min-shards` (two passes),
//! `--resume` and `--num-workers` are refused when the converter is built.

use std::sync::{Arc, Mutex};

use arrow_array::{RecordBatch, RecordBatchReader};
use rayon::prelude::*;

use crate::convert::route::Router;
use crate::convert::{ConvertOptions, Open, Source, PARQUET_BATCH_ROWS};
use crate::error::{Error, ErrorKind, Result};
use crate::example::encode::{EncodePlan, EncodeStats, EncodedBatch};
use crate::manifest::{InputInfo, Manifest};
use crate::progress::Progress;

/// Record batches to convert, read once ([`crate::convert::Converter::arrow`]).
#[derive(Clone)]
pub struct ArrowStream {
    reader: Arc<Mutex<Option<Box<dyn RecordBatchReader + Send>>>>,
    name: String,
}

impl std::fmt::Debug for ArrowStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrowStream")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ArrowStream {
    /// A stream named `name` in errors and in the manifest's inputs (say, the Python
    /// type it came from: `pyarrow.lib.Table`).
    pub fn new(reader: Box<dyn RecordBatchReader + Send>, name: impl Into<String>) -> Self {
        ArrowStream {
            reader: Arc::new(Mutex::new(Some(reader))),
            name: name.into(),
        }
    }

    /// A stream named `name` whose batches come later, through [`ArrowStream::fill`]
    /// (the Python module checks a conversion's options before it takes the stream,
    /// which a failed check would have used up).
    pub fn pending(name: impl Into<String>) -> Self {
        ArrowStream {
            reader: Arc::new(Mutex::new(None)),
            name: name.into(),
        }
    }

    /// Gives a [`ArrowStream::pending`] stream (and every clone of it) its batches.
    pub fn fill(&self, reader: Box<dyn RecordBatchReader + Send>) {
        *self.reader.lock().unwrap_or_else(|e| e.into_inner()) = Some(reader);
    }

    /// The name errors and the manifest give the stream.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn take(&self) -> Result<Box<dyn RecordBatchReader + Send>> {
        self.reader
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| {
                Error::invalid_option(
                    "source",
                    "this Arrow stream was already read; a stream is read once",
                )
            })
    }
}

/// Encodes one slice (the plan's columns of it) into framed records; errors name the
/// stream and the row in it.
fn encode(
    plan: &EncodePlan,
    name: &str,
    slice: &RecordBatch,
    first_row: u64,
) -> Result<(EncodedBatch, EncodeStats)> {
    let mut out = EncodedBatch::default();
    let mut stats = plan.new_stats();
    let projected = slice
        .project(plan.roots())
        .map_err(|e| Error::new(ErrorKind::Arrow(e)))?;
    plan.encode_batch(&projected, &mut out, &mut stats)
        .map_err(|e| e.shift_row(first_row).with_file(name))?;
    Ok((out, stats))
}

/// A guess at the records' bytes, which only sizes `--shuffle`'s bucket files once the
/// records outgrow its memory (a stream's length is unknown): large, so that buckets
/// stay small enough to sort in memory.
const UNKNOWN_BYTES: u64 = 1 << 40;

/// An Arrow stream, its encode plan checked before anything is written.
pub(crate) struct ArrowSource {
    reader: Option<Box<dyn RecordBatchReader + Send>>,
    name: String,
    plan: EncodePlan,
    stats: Option<EncodeStats>,
}

impl ArrowSource {
    /// Takes the stream and plans its encoding from its schema.
    ///
    /// # Errors
    ///
    /// A stream already read, or a column that cannot be encoded.
    pub(crate) fn open(options: &ConvertOptions, stream: &ArrowStream) -> Result<ArrowSource> {
        let reader = stream.take()?;
        let plan = EncodePlan::new(&reader.schema(), &options.encode)
            .map_err(|e| e.with_file(&stream.name))?;
        Ok(ArrowSource {
            reader: Some(reader),
            name: stream.name.clone(),
            plan,
            stats: None,
        })
    }
}

impl Open for ArrowStream {
    fn open(&self, options: &ConvertOptions) -> Result<Box<dyn Source + '_>> {
        Ok(Box::new(ArrowSource::open(options, self)?))
    }
}

impl Source for ArrowSource {
    fn total_units(&self) -> u64 {
        0
    }

    fn estimated_bytes(&self) -> u64 {
        UNKNOWN_BYTES
    }

    fn produce(
        &mut self,
        options: &ConvertOptions,
        router: &mut Router,
        progress: &dyn Progress,
    ) -> Result<()> {
        let mut reader = self.reader.take().ok_or_else(|| {
            Error::invalid_option("min-shards", "an Arrow stream can be read only once")
        })?;
        // One input, the stream.
        router.origin(0, 0);
        let schema = reader.schema();
        let group = 2 * options.threads.max(1);
        let mut stats = self.plan.new_stats();
        let mut rows = 0u64;
        // Slices not yet encoded (views of the batches read: a large batch is read whole,
        // then encoded a group at a time).
        let mut slices: std::collections::VecDeque<(RecordBatch, u64)> = Default::default();
        let mut done = false;
        while !done || !slices.is_empty() {
            // Read (on this thread: the stream is not shared) until a group is full.
            while !done && slices.len() < group {
                let Some(batch) = reader.next() else {
                    done = true;
                    break;
                };
                let batch = batch.map_err(|e| {
                    Error::new(ErrorKind::Arrow(e))
                        .with_file(&self.name)
                        .with_row(rows)
                })?;
                if batch.schema().fields() != schema.fields() {
                    return Err(Error::new(ErrorKind::SchemaMismatch {
                        other: "the stream's first schema".into(),
                        detail: "a batch's schema differs from the stream's".into(),
                    })
                    .with_file(&self.name)
                    .with_row(rows));
                }
                let mut at = 0;
                while at < batch.num_rows() {
                    let n = (batch.num_rows() - at).min(PARQUET_BATCH_ROWS);
                    slices.push_back((batch.slice(at, n), rows));
                    rows += n as u64;
                    at += n;
                }
            }
            let take: Vec<(RecordBatch, u64)> = slices.drain(..group.min(slices.len())).collect();
            let (plan, name) = (&self.plan, self.name.as_str());
            let encoded: Vec<Result<(EncodedBatch, EncodeStats)>> = take
                .par_iter()
                .map(|(slice, first)| encode(plan, name, slice, *first))
                .collect();
            for result in encoded {
                let (batch, batch_stats) = result?;
                router.put_batch(&batch)?;
                stats.merge(&batch_stats);
                progress.advance(batch_stats.rows, router.bytes_written());
                options.cancel.check()?;
            }
        }
        self.stats = Some(stats);
        Ok(())
    }

    fn manifest(&self, options: &ConvertOptions, _records: u64) -> Manifest {
        let stats = self.stats.clone().unwrap_or_else(|| self.plan.new_stats());
        let input = InputInfo {
            path: self.name.clone(),
            bytes: 0,
            rows: stats.rows,
            etag: None,
            identity: None,
        };
        options.new_manifest(
            self.plan.record_type(),
            vec![input],
            self.plan.features(&stats),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::Converter;
    use crate::progress::NoProgress;
    use arrow_array::{Int64Array, RecordBatchIterator, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    fn stream(rows: &[(i64, &str)], per_batch: usize) -> ArrowStream {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("s", DataType::Utf8, false),
        ]));
        let batches: Vec<_> = rows
            .chunks(per_batch)
            .map(|c| {
                RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(Int64Array::from_iter_values(c.iter().map(|r| r.0))),
                        Arc::new(StringArray::from_iter_values(c.iter().map(|r| r.1))),
                    ],
                )
            })
            .collect();
        ArrowStream::new(
            Box::new(RecordBatchIterator::new(batches, schema)),
            "test stream",
        )
    }

    /// A stream converts in stream order, whatever its batches, into the records the
    /// same rows in one batch give; it is read once, and what needs a second read is
    /// refused before anything is written.
    #[test]
    fn a_stream_converts_in_order_once() {
        let base = crate::test_dir("arrow-stream");
        let rows: Vec<(i64, String)> = (0..20_000).map(|i| (i, format!("r{i}"))).collect();
        let rows: Vec<(i64, &str)> = rows.iter().map(|(i, s)| (*i, s.as_str())).collect();
        let mut shards = Vec::new();
        for (name, per_batch) in [("one", rows.len()), ("many", 777)] {
            let out = base.join(name);
            let summary = Converter::arrow(stream(&rows, per_batch))
                .with_output(&out)
                .with_target_shard_bytes(50_000)
                .build()
                .unwrap()
                .run(&NoProgress)
                .unwrap();
            assert_eq!(summary.records, 20_000);
            let mut files: Vec<_> = std::fs::read_dir(&out)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "tfrecord"))
                .collect();
            files.sort();
            shards.push(
                files
                    .iter()
                    .map(|f| std::fs::read(f).unwrap())
                    .collect::<Vec<_>>(),
            );
        }
        assert_eq!(shards[0], shards[1]);
        let once = stream(&rows, 100);
        let converter = Converter::arrow(once.clone())
            .with_output(base.join("again"))
            .build()
            .unwrap();
        converter.run(&NoProgress).unwrap();
        let again = Converter::arrow(once)
            .with_output(base.join("again2"))
            .build()
            .unwrap()
            .run(&NoProgress);
        assert!(again.unwrap_err().to_string().contains("already read"));
        for (builder, option) in [
            (
                Converter::arrow(stream(&rows, 100)).with_min_shards(4),
                "min-shards",
            ),
            (
                Converter::arrow(stream(&rows, 100)).with_resume(true),
                "resume",
            ),
            (
                Converter::arrow(stream(&rows, 100)).with_worker(2, 0),
                "num-workers",
            ),
        ] {
            let err = builder.with_output(base.join("x")).build().unwrap_err();
            assert!(err.to_string().contains(option), "{err}");
        }
        std::fs::remove_dir_all(base).unwrap();
    }
}
