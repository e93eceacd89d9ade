//! Parquet → shards: the one module that wires source, encoder, shard writer and
//! manifest together.
//!
//! Work is cut into units of one row group each, numbered in input order (files in the
//! order given, then row groups). `threads` workers take units in that order, decode
//! them and encode every batch into framed records, and send the batches down a small
//! bounded channel per unit. This thread drains the channels in unit order and writes
//! (and, for gzip/zlib, compresses) the records into shards. So the output is the same
//! at any thread count, memory stays at a few batches per worker whatever the input's
//! size, and the first error in input order is the one reported.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_channel::{bounded, Receiver, Sender};
use rayon::prelude::*;
use serde_json::json;

use crate::error::{Error, ErrorKind, Result};
use crate::example::encode::{
    schema_difference, EncodeOptions, EncodePlan, EncodeStats, EncodedBatch,
};
use crate::example::RecordType;
use crate::manifest::Skipped;
use crate::manifest::{self, InputInfo, Manifest, MANIFEST_VERSION};
use crate::progress::Progress;
use crate::shard::{ClosedShard, OutputDir, Plan, ShardOptions, ShardWriter};
use crate::source::images::{self, ImageData, Labels, OnError};
use crate::source::parquet::{self as source, ParquetInput};
use crate::tfrecord::Compression;

/// Default `--target-shard-size`: 256 MiB, the size TensorFlow's performance guide
/// suggests (100 MB+ per file, ≥ 10× the number of hosts reading).
pub const DEFAULT_TARGET_BYTES: u64 = 256 << 20;
/// Batches buffered per unit between a worker and the writer.
const CHANNEL_BATCHES: usize = 2;

/// What to convert and how.
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// Parquet files and folders, in the order given.
    pub inputs: Vec<PathBuf>,
    /// The output folder.
    pub output: PathBuf,
    /// Shard name prefix.
    pub prefix: String,
    /// Target shard size on disk.
    pub target_bytes: u64,
    /// At most this many records per shard.
    pub max_records: Option<u64>,
    /// At least this many shards.
    pub min_shards: Option<u64>,
    /// Compression of the shards.
    pub compression: Compression,
    /// Replace this prefix's existing output.
    pub overwrite: bool,
    /// Write DALI `.idx` files.
    pub index: bool,
    /// Columns and record type.
    pub encode: EncodeOptions,
    /// Worker threads.
    pub threads: usize,
    /// Set to a signal number to stop the run (its temporaries are removed).
    pub cancel: Arc<AtomicUsize>,
}

impl ConvertOptions {
    /// Defaults for everything but the inputs and the output folder.
    pub fn new(inputs: Vec<PathBuf>, output: PathBuf) -> ConvertOptions {
        ConvertOptions {
            inputs,
            output,
            prefix: "data".into(),
            target_bytes: DEFAULT_TARGET_BYTES,
            max_records: None,
            min_shards: None,
            compression: Compression::None,
            overwrite: false,
            index: false,
            encode: EncodeOptions::default(),
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cancel: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The options that change the output, for the manifest (sizes in bytes).
    fn manifest_options(&self) -> std::collections::BTreeMap<String, serde_json::Value> {
        let mut o = std::collections::BTreeMap::new();
        o.insert("prefix".into(), json!(self.prefix));
        o.insert("target_shard_size".into(), json!(self.target_bytes));
        o.insert("max_records_per_shard".into(), json!(self.max_records));
        o.insert("min_shards".into(), json!(self.min_shards));
        o.insert("compression".into(), json!(self.compression.name()));
        o.insert("record_type".into(), json!(self.encode.record_type.name()));
        o.insert("columns".into(), json!(self.encode.columns));
        o.insert("exclude".into(), json!(self.encode.exclude));
        let rename: Vec<String> = self
            .encode
            .rename
            .iter()
            .map(|(a, b)| format!("{a}={b}"))
            .collect();
        o.insert("rename".into(), json!(rename));
        o.insert("index".into(), json!(self.index));
        o
    }
}

/// What a conversion produced; the `convert --json` keys.
#[derive(Debug, Clone)]
pub struct ConvertSummary {
    /// The output folder.
    pub output: PathBuf,
    /// The manifest written.
    pub manifest: PathBuf,
    /// Records written.
    pub records: u64,
    /// Shards written.
    pub shards: u64,
    /// Bytes on disk of all shards.
    pub bytes: u64,
    /// Wall time.
    pub seconds: f64,
    /// Image files left out (`--on-error skip`).
    pub skipped: u64,
}

/// One row group.
#[derive(Debug, Clone, Copy)]
struct Unit {
    input: usize,
    row_group: usize,
    first_row: u64,
}

type Message = Result<(EncodedBatch, EncodeStats)>;

/// Opens every input and validates the whole plan before anything is written.
fn plan(options: &ConvertOptions) -> Result<(Vec<ParquetInput>, EncodePlan)> {
    let files = source::discover(&options.inputs)?;
    let inputs: Vec<ParquetInput> = files
        .into_par_iter()
        .map(ParquetInput::open)
        .collect::<Result<_>>()?;
    let first = &inputs[0];
    for other in &inputs[1..] {
        if let Some(detail) = schema_difference(first.schema(), other.schema()) {
            return Err(Error::new(ErrorKind::SchemaMismatch {
                other: first.file.display.clone().into(),
                detail,
            })
            .with_file(&other.file.display));
        }
    }
    let plan = EncodePlan::new(first.schema(), &options.encode)
        .map_err(|e| e.with_file(&first.file.display))?;
    Ok((inputs, plan))
}

/// Converts Parquet inputs into shards and a manifest.
///
/// # Errors
///
/// Bad input (named by file, column and row), an unwritable or non-empty output folder,
/// an I/O error, or an interruption. On any error the output folder holds none of this
/// run's files, and an earlier run's output is left as it was.
pub fn convert_parquet(
    options: &ConvertOptions,
    progress: &dyn Progress,
) -> Result<ConvertSummary> {
    let started = Instant::now();
    let (inputs, plan) = plan(options)?;
    let out = OutputDir::prepare(&options.output, &options.prefix, options.overwrite)?;
    let mut units = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let mut first_row = 0;
        for (row_group, rows) in input.row_group_rows().into_iter().enumerate() {
            units.push(Unit {
                input: i,
                row_group,
                first_row,
            });
            first_row += rows;
        }
    }
    progress.set_total(inputs.iter().map(|i| i.rows).sum());
    let mut report: &dyn Progress = progress;
    let (shards, pass) = write_shards(options, &out, |writer| {
        let pass = write_pass(options, &inputs, &plan, &units, writer, report);
        report = &crate::progress::NoProgress;
        pass
    })?;
    let inputs = inputs
        .iter()
        .zip(&pass.rows_per_input)
        .map(|(i, &rows)| InputInfo {
            path: i.file.display.clone(),
            bytes: i.bytes,
            rows,
        })
        .collect();
    let manifest = new_manifest(
        options,
        plan.record_type(),
        inputs,
        plan.features(&pass.stats),
    );
    commit(options, &out, &shards, manifest, started)
}

/// What to do with an image folder.
#[derive(Debug, Clone)]
pub struct ImageOptions {
    /// Where labels come from.
    pub labels: Labels,
    /// File extensions to read (case-insensitive).
    pub extensions: Vec<String>,
    /// Fail on a bad file, or skip it.
    pub on_error: OnError,
}

/// Files read in parallel per step; their bytes are held until written in order.
const IMAGE_CHUNK: usize = 64;

/// Converts an image folder (`options.inputs[0]`) into shards and a manifest.
///
/// # Errors
///
/// As [`convert_parquet`]; a bad image with `OnError::Fail`.
pub fn convert_images(
    options: &ConvertOptions,
    images: &ImageOptions,
    progress: &dyn Progress,
) -> Result<ConvertSummary> {
    let started = Instant::now();
    let dir = options.inputs.first().cloned().unwrap_or_default();
    let mut plan = images::plan(&dir, &images.labels, &images.extensions, images.on_error)?;
    let out = OutputDir::prepare(&options.output, &options.prefix, options.overwrite)?;
    progress.set_total(plan.files.len() as u64);
    let mut report: &dyn Progress = progress;
    let (shards, (skipped, bytes)) = write_shards(options, &out, |writer| {
        let mut skipped = Vec::new();
        let mut bytes_read = 0u64;
        for chunk in plan.files.chunks(IMAGE_CHUNK) {
            // The work is I/O and syscalls: read a chunk in parallel, write it in order.
            let read: Vec<Result<ImageData>> = chunk
                .par_iter()
                .map(|f| images::read_image(&f.path))
                .collect();
            for (file, image) in chunk.iter().zip(read) {
                match image {
                    Ok(image) => {
                        bytes_read += image.bytes.len() as u64;
                        let record = images::encode(file, image);
                        let mut framed = Vec::with_capacity(record.len() + 16);
                        crate::tfrecord::frame::append_record(&mut framed, &record);
                        writer.write(&framed)?;
                    }
                    Err(e) if images.on_error == OnError::Skip => skipped.push(Skipped {
                        path: file.rel.clone(),
                        reason: e.kind().to_string(),
                    }),
                    Err(e) => return Err(e),
                }
            }
            report.advance(chunk.len() as u64, writer.bytes_written());
            check_cancel(options)?;
        }
        report = &crate::progress::NoProgress;
        Ok((skipped, bytes_read))
    })?;
    plan.skipped.extend(skipped);
    plan.skipped
        .sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    let records: u64 = shards.iter().map(|s| s.records).sum();
    let inputs = vec![InputInfo {
        path: dir.display().to_string(),
        bytes,
        rows: records,
    }];
    let labels = images.labels != Labels::None;
    let mut manifest = new_manifest(
        options,
        RecordType::Example,
        inputs,
        images::features(labels, records),
    );
    let labels_option = match &images.labels {
        Labels::DirName => "dirname".to_owned(),
        Labels::None => "none".to_owned(),
        Labels::Csv(p) => p.display().to_string(),
    };
    manifest
        .options
        .insert("labels".into(), json!(labels_option));
    manifest
        .options
        .insert("extensions".into(), json!(images.extensions));
    let on_error = if images.on_error == OnError::Skip {
        "skip"
    } else {
        "fail"
    };
    manifest.options.insert("on_error".into(), json!(on_error));
    manifest.classes = plan.classes.clone();
    manifest.skipped = Some(plan.skipped.clone());
    let summary = commit(options, &out, &shards, manifest, started)?;
    Ok(ConvertSummary {
        skipped: plan.skipped.len() as u64,
        ..summary
    })
}

/// Runs `pass` with the fill rule; when `--min-shards N` wants more shards than that
/// made, runs it again cutting N shards evenly by bytes (only outputs smaller than N ×
/// the target get here, so the second pass is cheap).
fn write_shards<T>(
    options: &ConvertOptions,
    out: &OutputDir,
    mut pass: impl FnMut(&mut ShardWriter) -> Result<T>,
) -> Result<(Vec<ClosedShard>, T)> {
    let shard_options = |plan| ShardOptions {
        tmp_dir: out.tmp_dir().to_path_buf(),
        compression: options.compression,
        target_bytes: options.target_bytes,
        max_records: options.max_records,
        index: options.index,
        plan,
    };
    let mut writer = ShardWriter::new(shard_options(Plan::Fill));
    let mut result = pass(&mut writer)?;
    let total_framed = writer.total_framed();
    let mut shards = writer.finish()?;
    if let Some(n) = options.min_shards {
        if (shards.len() as u64) < n {
            for shard in &shards {
                let _ = std::fs::remove_file(&shard.path);
            }
            let mut writer = ShardWriter::new(shard_options(Plan::Even {
                shards: n,
                total_framed,
            }));
            result = pass(&mut writer)?;
            shards = writer.finish()?;
        }
    }
    Ok((shards, result))
}

fn new_manifest(
    options: &ConvertOptions,
    record_type: RecordType,
    inputs: Vec<InputInfo>,
    features: Vec<crate::example::FeatureSpec>,
) -> Manifest {
    Manifest {
        manifest_version: MANIFEST_VERSION,
        tfshard_version: env!("CARGO_PKG_VERSION").into(),
        created: manifest::now_rfc3339(),
        record_type,
        compression: options.compression.name().into(),
        options: options.manifest_options(),
        inputs,
        features,
        classes: None,
        skipped: None,
        shards: vec![],
        records: 0,
        bytes: 0,
    }
}

/// The commit: renames shards into place and writes the manifest, unless interrupted.
fn commit(
    options: &ConvertOptions,
    out: &OutputDir,
    shards: &[ClosedShard],
    mut manifest: Manifest,
    started: Instant,
) -> Result<ConvertSummary> {
    check_cancel(options)?;
    let manifest_path = out.commit(shards, options.compression, &mut manifest)?;
    Ok(ConvertSummary {
        output: options.output.clone(),
        manifest: manifest_path,
        records: manifest.records,
        shards: manifest.shards.len() as u64,
        bytes: manifest.bytes,
        seconds: started.elapsed().as_secs_f64(),
        skipped: 0,
    })
}

fn check_cancel(options: &ConvertOptions) -> Result<()> {
    match options.cancel.load(Ordering::Relaxed) {
        0 => Ok(()),
        signal => Err(Error::new(ErrorKind::Interrupted {
            signal: signal as i32,
        })),
    }
}

struct Pass {
    stats: EncodeStats,
    rows_per_input: Vec<u64>,
}

/// Decodes and encodes units on `threads` workers; writes their records in unit order.
fn write_pass(
    options: &ConvertOptions,
    inputs: &[ParquetInput],
    plan: &EncodePlan,
    units: &[Unit],
    writer: &mut ShardWriter,
    progress: &dyn Progress,
) -> Result<Pass> {
    let channels: Vec<(Sender<Message>, Receiver<Message>)> =
        units.iter().map(|_| bounded(CHANNEL_BATCHES)).collect();
    let (senders, receivers): (Vec<_>, Vec<_>) = channels.into_iter().unzip();
    let senders: Vec<Mutex<Option<Sender<Message>>>> =
        senders.into_iter().map(|s| Mutex::new(Some(s))).collect();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    // Written batches come back to the workers: reusing their buffers saves a fresh
    // mmap, page faults and zeroing per batch (measured: 12% of the run).
    let (recycle_tx, recycle_rx) = crossbeam_channel::unbounded::<EncodedBatch>();
    let workers = options.threads.max(1).min(units.len().max(1));

    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let u = next.fetch_add(1, Ordering::Relaxed);
                    let Some(unit) = units.get(u) else { break };
                    let Some(tx) = senders[u].lock().ok().and_then(|mut s| s.take()) else {
                        break;
                    };
                    let input = &inputs[unit.input];
                    let result = source::read_row_group(
                        input,
                        unit.row_group,
                        plan.roots(),
                        unit.first_row,
                        |batch, _| {
                            let mut encoded = recycle_rx.try_recv().unwrap_or_default();
                            encoded.clear();
                            let mut stats = plan.new_stats();
                            plan.encode_batch(&batch, &mut encoded, &mut stats)?;
                            tx.send(Ok((encoded, stats)))
                                .map_err(|_| Error::new(ErrorKind::Interrupted { signal: 0 }))
                        },
                    );
                    if let Err(e) = result {
                        let _ = tx.send(Err(e));
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            });
        }
        // The writer: drains the units in order. Dropping `receivers` when it returns
        // unblocks any worker still sending, so the scope can end.
        let result = write_in_order(
            options,
            plan,
            units,
            receivers,
            writer,
            progress,
            &recycle_tx,
        );
        stop.store(true, Ordering::Relaxed);
        // Inputs without a row group have no unit; they still get their row count (0).
        result.map(|mut pass| {
            pass.rows_per_input.resize(inputs.len(), 0);
            pass
        })
    })
}

fn write_in_order(
    options: &ConvertOptions,
    plan: &EncodePlan,
    units: &[Unit],
    receivers: Vec<Receiver<Message>>,
    writer: &mut ShardWriter,
    progress: &dyn Progress,
    recycle: &crossbeam_channel::Sender<EncodedBatch>,
) -> Result<Pass> {
    let input_count = units.iter().map(|u| u.input + 1).max().unwrap_or(0);
    let mut stats = plan.new_stats();
    let mut rows_per_input = vec![0u64; input_count];
    for (unit, rx) in units.iter().zip(receivers) {
        for message in rx {
            let (batch, batch_stats) = message?;
            writer.write_batch(&batch.data, &batch.sizes)?;
            let _ = recycle.send(batch);
            stats.merge(&batch_stats);
            rows_per_input[unit.input] += batch_stats.rows;
            progress.advance(batch_stats.rows, writer.bytes_written());
            check_cancel(options)?;
        }
    }
    Ok(Pass {
        stats,
        rows_per_input,
    })
}
