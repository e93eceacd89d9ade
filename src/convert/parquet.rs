//! The Parquet source: files and folders of Parquet → framed `tf.train.Example` (or
//! SequenceExample) records, in input order.
//!
//! Work is cut into units of one row group each, numbered in input order (files in the
//! order given, then row groups). `threads` workers take units in that order, decode
//! them and encode every batch into framed records, and send the batches down a channel
//! per unit, all channels together within a byte budget. The run's thread drains the channels in unit order and
//! writes (and, for gzip/zlib, compresses) the records. So the output is the same at any
//! thread count, memory stays at a few batches per worker whatever the input's size,
//! and the first error in input order is the one reported. With one thread there are no
//! workers: the run's thread decodes, encodes and writes in turn.
//!
//! With `--resume` (one output, no shuffle, no `--min-shards`), the end of each unit is
//! a checkpoint journaled with the shards closed after it: the units done, the records,
//! rows per input and the encoding statistics so far. A rerun starts after the last
//! checkpoint its reused shards hold, instead of reading and encoding those units again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

use crossbeam_channel::{bounded, Receiver, Sender};
use rayon::prelude::*;

use crate::convert::route::Router;
use crate::convert::{ConvertOptions, DeltaOptions, ParquetDecoder, Source, TableInfo};
use crate::error::{Error, ErrorKind, Result};
use crate::example::encode::{schema_difference, EncodePlan, EncodeStats, EncodedBatch};
use crate::manifest::{InputInfo, Manifest};
use crate::progress::Progress;
use crate::source::delta::{DeltaTable, SideFile};
use crate::source::hive;
use crate::source::parquet::{self as source, ParquetInput};

/// Encoded bytes queued for the writer, across every unit, at most about this much
/// (plus one batch for the unit the writer is draining, which must never wait). Bytes,
/// not a batch count: the standard table's batches are ~1.4 MB, an image table's ~4 MiB,
/// and a worker ahead of the writer should get through a whole unit of small batches
/// (with 2 batches per unit it idled: 1.59 of 2 cores busy).
const QUEUED_BYTES: u64 = 16 << 20;

/// [`QUEUED_BYTES`] when the output is compressed: deflate makes the writer the slowest
/// stage, so the workers stay ahead with any queue and a larger one only holds memory
/// (16 MiB made the standard table's gzip run 70 MiB at peak, against 59 plain).
const QUEUED_BYTES_COMPRESSED: u64 = 4 << 20;

/// Bytes the units being decoded may take together (each unit's column chunks,
/// compressed plus uncompressed: a Parquet page is decoded whole, and a writer that puts
/// a row group of 500 images in one 46 MB page makes each decoding unit hold ~92 MB).
/// A unit larger than this decodes alone. The standard table's units take ~22 MB.
const DECODING_BYTES: u64 = 128 << 20;

/// Hands out units in order, each once its decoding fits [`DECODING_BYTES`] beside the
/// units already decoding (or nothing else decodes). In order, so a unit never waits for
/// budget that a later unit holds.
struct Dispatch {
    state: Mutex<Dispatched>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Dispatched {
    next: usize,
    decoding: u64,
    stopped: bool,
}

impl Dispatch {
    fn new() -> Dispatch {
        Dispatch {
            state: Mutex::new(Dispatched::default()),
            changed: Condvar::new(),
        }
    }

    /// The next unit and the bytes it was given; `None` when none is left or the run
    /// stopped.
    fn take(&self, units: usize, cost: impl Fn(usize) -> u64) -> Option<(usize, u64)> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if st.stopped || st.next >= units {
                return None;
            }
            let bytes = cost(st.next);
            if st.decoding == 0 || st.decoding + bytes <= DECODING_BYTES {
                let u = st.next;
                st.next += 1;
                st.decoding += bytes;
                return Some((u, bytes));
            }
            st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn done(&self, bytes: u64) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .decoding -= bytes;
        self.changed.notify_all();
    }

    fn stop(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).stopped = true;
        self.changed.notify_all();
    }
}

/// A hard cap on batches per unit's channel, under the byte budget.
const CHANNEL_BATCHES: usize = 64;

/// The byte budget of the batches queued between the workers and the writer; written
/// batches go back to the workers through it.
struct Budget {
    state: Mutex<Queued>,
    changed: Condvar,
    /// Reusing a written batch's buffers saves a fresh mmap, page faults and zeroing per
    /// batch (measured: 12% of the run).
    recycle: crossbeam_channel::Sender<EncodedBatch>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Queued {
    /// The budget: [`QUEUED_BYTES`] or [`QUEUED_BYTES_COMPRESSED`].
    limit: u64,
    /// Encoded bytes sent and not yet written.
    bytes: u64,
    /// The unit the writer is draining.
    writer_unit: usize,
    /// The writer has stopped: nobody waits any more.
    stopped: bool,
}

impl Queued {
    /// Whether `bytes` more may be queued for `unit`, whose channel is `empty` or not:
    /// within the budget, or the writer's own unit with nothing queued (so the writer
    /// always gets its next batch).
    fn admits(&self, unit: usize, bytes: u64, empty: bool) -> bool {
        self.stopped || self.bytes + bytes <= self.limit || (unit == self.writer_unit && empty)
    }
}

impl Budget {
    fn new(limit: u64, recycle: crossbeam_channel::Sender<EncodedBatch>) -> Budget {
        Budget {
            state: Mutex::new(Queued {
                limit,
                ..Queued::default()
            }),
            changed: Condvar::new(),
            recycle,
        }
    }

    /// A batch was written: its bytes leave the budget, its buffers go back.
    fn written(&self, batch: EncodedBatch) {
        let bytes = batch.data.len() as u64;
        self.update(|q| q.bytes -= bytes);
        let _ = self.recycle.send(batch);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queued> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until `bytes` may be queued for `unit`, then counts them.
    fn acquire(&self, unit: usize, bytes: u64, tx: &Sender<Message>) {
        let mut queued = self.lock();
        while !queued.admits(unit, bytes, tx.is_empty()) {
            queued = self.changed.wait(queued).unwrap_or_else(|p| p.into_inner());
        }
        queued.bytes += bytes;
    }

    fn update(&self, f: impl FnOnce(&mut Queued)) {
        f(&mut self.lock());
        self.changed.notify_all();
    }
}

/// Whether units end in checkpoints: `--resume` with one output written directly (a
/// shuffle, splits or `--min-shards` need every record again).
fn checkpoints(options: &ConvertOptions) -> bool {
    options.resume
        && options.splits.is_none()
        && options.shuffle.is_none()
        && options.min_shards.is_none()
}

/// Where a resumed run restarts: after `units` units, which hold `records` records.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Checkpoint {
    units: usize,
    records: u64,
    rows_per_input: Vec<u64>,
    stats: EncodeStats,
}

/// One row group.
#[derive(Debug, Clone, Copy)]
struct Unit {
    input: usize,
    row_group: usize,
    first_row: u64,
    /// Its records: its rows, but those a Delta deletion vector drops.
    records: u64,
}

/// What a Delta table's manifest says beside its data files.
struct DeltaExtra {
    /// The snapshot asked for.
    asked: DeltaOptions,
    table: TableInfo,
    /// The log file that defines the snapshot (listed first; none before a first commit).
    log: Option<SideFile>,
    /// Its deletion vector files (listed after the data files).
    deletion_vectors: Vec<SideFile>,
}

type Message = Result<(EncodedBatch, EncodeStats)>;

/// Opens every input and validates the whole plan before anything is written.
fn plan(options: &ConvertOptions) -> Result<(Vec<ParquetInput>, EncodePlan)> {
    let files = source::discover(
        &options.inputs,
        options.partition_base.as_deref(),
        options.io,
    )?;
    let segments: Vec<_> = files.iter().map(|f| f.partitions.clone()).collect();
    let names: Vec<String> = files.iter().map(|f| f.display.clone()).collect();
    let mut inputs: Vec<ParquetInput> = files
        .into_par_iter()
        .map(ParquetInput::open)
        .collect::<Result<_>>()?;
    let Some((first, others)) = inputs.split_first() else {
        return Err(Error::new(ErrorKind::NoParquetFiles));
    };
    for other in others {
        if let Some(detail) = schema_difference(first.schema(), other.schema()) {
            return Err(Error::new(ErrorKind::SchemaMismatch {
                other: first.file.display.clone().into(),
                detail,
            })
            .with_file(&other.file.display));
        }
    }
    let columns: Vec<String> = first
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let partitions = hive::columns(options.partitioning, &segments, &names, &columns)
        .map_err(|e| e.with_file(&first.file.display))?;
    let partitions = std::sync::Arc::new(partitions);
    for (i, input) in inputs.iter_mut().enumerate() {
        input.set_partitions(partitions.clone(), i);
        input.set_fast_lists(options.parquet_decoder == ParquetDecoder::Auto);
    }
    let first = &inputs[0];
    let plan = EncodePlan::new(&first.table_schema(), &options.encode)
        .map_err(|e| e.with_file(&first.file.display))?;
    Ok((inputs, plan))
}

/// Parquet inputs, opened and checked, ready to be converted.
pub(crate) struct ParquetSource {
    inputs: Vec<ParquetInput>,
    plan: EncodePlan,
    units: Vec<Unit>,
    /// What the last pass saw (a second pass for `--min-shards` sees the same).
    pass: Option<Pass>,
    /// A worker's row groups, `[first, end)` in the run's order of every row group.
    range: Option<[u64; 2]>,
    /// The index in the whole run of this run's first record (rows before a worker's
    /// share).
    first_record: u64,
    /// `--resume`: the checkpoint to restart from (its units are skipped).
    restart: Option<Checkpoint>,
    /// A Delta table's snapshot.
    delta: Option<DeltaExtra>,
}

impl ParquetSource {
    /// Opens every input and checks the whole plan before anything is written.
    ///
    /// # Errors
    ///
    /// A missing or unreadable input, a corrupt footer, schemas that differ, a column
    /// that cannot be encoded.
    pub(crate) fn open(options: &ConvertOptions) -> Result<ParquetSource> {
        let (inputs, plan) = plan(options)?;
        Self::with_inputs(options, inputs, plan, None)
    }

    /// Plans one snapshot of a Delta table (see [`crate::source::delta`]) and opens its
    /// data files, in the contract's order.
    ///
    /// # Errors
    ///
    /// Those of [`DeltaTable::open`] and [`DeltaTable::plan`], a column that cannot be
    /// encoded, a data file that is not Parquet.
    pub(crate) fn open_delta(
        options: &ConvertOptions,
        delta: &DeltaOptions,
    ) -> Result<ParquetSource> {
        let table = DeltaTable::open(&options.inputs[0], delta, options.io)?;
        let encode = &options.encode;
        table.refuse_variants(|name| {
            let under = |c: &String| c == name || c.starts_with(&format!("{name}/"));
            encode.columns.as_ref().is_none_or(|c| c.iter().any(under))
                && !encode.exclude.iter().any(|e| e == name)
        })?;
        let plan = EncodePlan::new(&table.schema, &options.encode)
            .map_err(|e| e.with_file(&table.location))?;
        let (files, deletion_vectors) = table.plan(plan.roots(), &delta.partition_filters)?;
        let schema = std::sync::Arc::new(table.schema.clone());
        let inputs: Vec<ParquetInput> = files
            .into_par_iter()
            .map(|f| {
                let mut input = ParquetInput::open(f.input)?;
                input.set_delta(&f.read, schema.clone())?;
                Ok(input)
            })
            .collect::<Result<_>>()?;
        let extra = DeltaExtra {
            asked: delta.clone(),
            table: table.info(),
            log: table.log_file.clone(),
            deletion_vectors,
        };
        Self::with_inputs(options, inputs, plan, Some(extra))
    }

    /// Cuts the opened inputs into units (a worker: its share).
    fn with_inputs(
        options: &ConvertOptions,
        inputs: Vec<ParquetInput>,
        plan: EncodePlan,
        delta: Option<DeltaExtra>,
    ) -> Result<ParquetSource> {
        let mut units = Vec::new();
        for (i, input) in inputs.iter().enumerate() {
            let mut first_row = 0;
            for (row_group, rows) in input.row_group_rows().into_iter().enumerate() {
                units.push(Unit {
                    input: i,
                    row_group,
                    first_row,
                    records: input.kept_rows(first_row, rows),
                });
                first_row += rows;
            }
        }
        let mut range = None;
        let mut first_record = 0;
        if let Some(worker) = options.worker {
            // Every worker reads the same footers in the same order: one agreed plan.
            let bytes: Vec<u64> = units
                .iter()
                .map(|u| inputs[u.input].selected_bytes(u.row_group, plan.roots()))
                .collect();
            let total: u64 = bytes.iter().sum();
            let mut start = 0u64;
            let mut mine = Vec::new();
            let mut first = None;
            for (i, (unit, size)) in units.iter().zip(&bytes).enumerate() {
                if worker.takes(start, total) {
                    first.get_or_insert(i as u64);
                    mine.push(*unit);
                }
                start += size;
            }
            // An empty share sits where the next worker's starts.
            let first = first.unwrap_or_else(|| {
                let cut = (u128::from(total) * u128::from(worker.index + 1))
                    .div_ceil(u128::from(worker.count.max(1)));
                let mut start = 0u128;
                bytes
                    .iter()
                    .take_while(|&&b| {
                        let before = start;
                        start += u128::from(b);
                        before < cut
                    })
                    .count() as u64
            });
            range = Some([first, first + mine.len() as u64]);
            first_record = units[..first as usize].iter().map(|u| u.records).sum();
            units = mine;
        }
        Ok(ParquetSource {
            inputs,
            plan,
            units,
            pass: None,
            range,
            first_record,
            restart: None,
            delta,
        })
    }
}

impl Source for ParquetSource {
    fn total_units(&self) -> u64 {
        self.units.iter().map(|u| u.records).sum()
    }

    fn estimated_bytes(&self) -> u64 {
        // Encoded Examples run 1.5-2x their zstd Parquet (the standard table: 1.55x): a
        // guess for the shuffle's buffers and bucket count, erring high.
        self.inputs.iter().map(|i| i.bytes).sum::<u64>() * 2
    }

    fn produce(
        &mut self,
        options: &ConvertOptions,
        router: &mut Router,
        progress: &dyn Progress,
    ) -> Result<()> {
        let skipped = self.restart.as_ref().map_or(0, |c| c.records);
        router.start_at(self.first_record + skipped);
        progress.advance(skipped, 0);
        self.pass = Some(self.write_pass(options, router, progress)?);
        Ok(())
    }

    fn restart_from(&mut self, checkpoint: &serde_json::Value) -> u64 {
        let Ok(c) = serde_json::from_value::<Checkpoint>(checkpoint.clone()) else {
            return 0;
        };
        // Only a checkpoint that fits this run's plan exactly (the journal's header
        // already matched: same inputs and options).
        let Some(done) = self.units.get(..c.units) else {
            return 0;
        };
        let rows: u64 = done.iter().map(|u| u.records).sum();
        let fits = rows == c.records
            && c.stats.rows == c.records
            && c.rows_per_input.iter().sum::<u64>() == c.records
            && c.rows_per_input.len() <= self.inputs.len()
            && c.stats.shapes.len() <= self.plan.new_stats().shapes.len();
        if !fits {
            return 0;
        }
        let records = c.records;
        self.restart = Some(c);
        records
    }

    fn worker_range(&self) -> Option<[u64; 2]> {
        self.range
    }

    fn continue_journal(
        &mut self,
        options: &ConvertOptions,
        header: &serde_json::Value,
    ) -> Result<()> {
        let Some(delta) = &self.delta else {
            return Ok(());
        };
        let journaled = header["table"]["version"].as_u64();
        let named = delta.asked.version.is_some() || delta.asked.timestamp.is_some();
        match journaled {
            Some(v) if !named && Some(v) != delta.table.version => {
                let asked = DeltaOptions {
                    version: Some(v),
                    ..delta.asked.clone()
                };
                *self = ParquetSource::open_delta(options, &asked)?;
                // The manifest names the snapshot as asked (no --version given).
                if let Some(d) = &mut self.delta {
                    d.asked.version = None;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn manifest(&self, options: &ConvertOptions, _records: u64) -> Manifest {
        let rows = self.pass.as_ref().map(|p| p.rows_per_input.as_slice());
        let side = |f: &SideFile| InputInfo {
            path: f.display.clone(),
            bytes: f.bytes,
            rows: 0,
            etag: f.etag.clone(),
        };
        let mut inputs: Vec<InputInfo> = self
            .delta
            .iter()
            .filter_map(|d| d.log.as_ref())
            .map(side)
            .collect();
        inputs.extend(self.inputs.iter().enumerate().map(|(i, input)| InputInfo {
            path: input.file.display.clone(),
            bytes: input.bytes,
            rows: rows.and_then(|r| r.get(i).copied()).unwrap_or(0),
            etag: input.file.object.as_ref().and_then(|o| o.etag.clone()),
        }));
        if let Some(d) = &self.delta {
            inputs.extend(d.deletion_vectors.iter().map(side));
        }
        let stats = self.pass.as_ref().map(|p| &p.stats);
        let features = match stats {
            Some(stats) => self.plan.features(stats),
            None => self.plan.features(&self.plan.new_stats()),
        };
        let mut manifest = options.new_manifest(self.plan.record_type(), inputs, features);
        manifest.table = self.delta.as_ref().map(|d| d.table.clone());
        manifest
    }
}

/// What one pass over the inputs saw.
struct Pass {
    stats: EncodeStats,
    rows_per_input: Vec<u64>,
}

impl Pass {
    /// A pass over `inputs` inputs, from the start or from a checkpoint.
    fn new(plan: &EncodePlan, inputs: usize, from: Option<&Checkpoint>) -> Pass {
        let mut pass = Pass {
            stats: plan.new_stats(),
            rows_per_input: vec![0; inputs],
        };
        if let Some(c) = from {
            pass.stats.merge(&c.stats);
            for (mine, &rows) in pass.rows_per_input.iter_mut().zip(&c.rows_per_input) {
                *mine += rows;
            }
        }
        pass
    }

    /// After unit `units` (counted in the whole plan) is written: with `--resume`, the
    /// checkpoint the shards closed from now on carry.
    fn unit_done(&self, units: usize, writer: &mut Router, options: &ConvertOptions) {
        if !checkpoints(options) {
            return;
        }
        writer.checkpoint(|| {
            let c = Checkpoint {
                units,
                records: self.stats.rows,
                rows_per_input: self.rows_per_input.clone(),
                stats: self.stats.clone(),
            };
            serde_json::to_value(c).expect("a checkpoint serializes")
        });
    }

    /// Writes a unit's encoded batch (in unit order) and counts it.
    fn write(
        &mut self,
        unit: &Unit,
        batch: &EncodedBatch,
        batch_stats: &EncodeStats,
        writer: &mut Router,
        options: &ConvertOptions,
        progress: &dyn Progress,
    ) -> Result<()> {
        writer.put_batch(batch)?;
        self.stats.merge(batch_stats);
        self.rows_per_input[unit.input] += batch_stats.rows;
        progress.advance(batch_stats.rows, writer.bytes_written());
        options.cancel.check()
    }
}

impl ParquetSource {
    /// Decodes and encodes units on `threads` workers; writes their records in unit order.
    /// With one thread, this thread does it all (so `--threads 1` keeps one core busy).
    fn write_pass(
        &self,
        options: &ConvertOptions,
        writer: &mut Router,
        progress: &dyn Progress,
    ) -> Result<Pass> {
        if options.threads <= 1 {
            return self.write_inline(options, writer, progress);
        }
        let skip = self.restart.as_ref().map_or(0, |c| c.units);
        let (inputs, plan, units) = (&self.inputs[..], &self.plan, &self.units[skip..]);
        let channels: Vec<(Sender<Message>, Receiver<Message>)> =
            units.iter().map(|_| bounded(CHANNEL_BATCHES)).collect();
        let (senders, receivers): (Vec<_>, Vec<_>) = channels.into_iter().unzip();
        let senders: Vec<Mutex<Option<Sender<Message>>>> =
            senders.into_iter().map(|s| Mutex::new(Some(s))).collect();
        let dispatch = Dispatch::new();
        let stop = AtomicBool::new(false);
        let (recycle_tx, recycle_rx) = crossbeam_channel::unbounded::<EncodedBatch>();
        let workers = options.threads.max(1).min(units.len().max(1));
        let limit = match options.compression {
            crate::tfrecord::Compression::None => QUEUED_BYTES,
            _ => QUEUED_BYTES_COMPRESSED,
        };
        let budget = Budget::new(limit, recycle_tx);

        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        let cost = |u: usize| {
                            let unit = &units[u];
                            inputs[unit.input].row_group_decode_bytes(unit.row_group)
                        };
                        let Some((u, held)) = dispatch.take(units.len(), cost) else {
                            break;
                        };
                        let unit = &units[u];
                        let Some(tx) = senders[u].lock().ok().and_then(|mut s| s.take()) else {
                            dispatch.done(held);
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
                                budget.acquire(u, encoded.data.len() as u64, &tx);
                                // A closed channel: the writer has stopped (the run failed
                                // or was cancelled); this unit's work is no longer wanted.
                                tx.send(Ok((encoded, stats)))
                                    .map_err(|_| Error::new(ErrorKind::Interrupted))
                            },
                        );
                        dispatch.done(held);
                        if let Err(e) = result {
                            let _ = tx.send(Err(e));
                            stop.store(true, Ordering::Relaxed);
                            dispatch.stop();
                        }
                    }
                });
            }
            // The writer: drains the units in order. Dropping `receivers` when it returns
            // unblocks any worker still sending, so the scope can end.
            let start = Pass::new(plan, inputs.len(), self.restart.as_ref());
            let result = Self::write_in_order(
                options,
                (start, skip),
                units,
                receivers,
                writer,
                progress,
                &budget,
            );
            stop.store(true, Ordering::Relaxed);
            budget.update(|q| q.stopped = true);
            dispatch.stop();
            // Inputs without a row group have no unit; they still get their row count (0).
            result.map(|mut pass| {
                pass.rows_per_input.resize(inputs.len(), 0);
                pass
            })
        })
    }

    /// Writes the units' batches in order, from `pass` (which starts after `skip` units
    /// of the plan).
    fn write_in_order(
        options: &ConvertOptions,
        (mut pass, skip): (Pass, usize),
        units: &[Unit],
        receivers: Vec<Receiver<Message>>,
        writer: &mut Router,
        progress: &dyn Progress,
        budget: &Budget,
    ) -> Result<Pass> {
        for (u, (unit, rx)) in units.iter().zip(receivers).enumerate() {
            budget.update(|q| q.writer_unit = u);
            for message in rx {
                let (batch, batch_stats) = message?;
                pass.write(unit, &batch, &batch_stats, writer, options, progress)?;
                budget.written(batch);
            }
            pass.unit_done(skip + u + 1, writer, options);
        }
        Ok(pass)
    }

    /// [`Self::write_pass`] on this thread alone: each batch is encoded and written in turn.
    fn write_inline(
        &self,
        options: &ConvertOptions,
        writer: &mut Router,
        progress: &dyn Progress,
    ) -> Result<Pass> {
        let skip = self.restart.as_ref().map_or(0, |c| c.units);
        let (inputs, plan, units) = (&self.inputs[..], &self.plan, &self.units[skip..]);
        let mut pass = Pass::new(plan, inputs.len(), self.restart.as_ref());
        let mut encoded = EncodedBatch::default();
        for (u, unit) in units.iter().enumerate() {
            source::read_row_group(
                &inputs[unit.input],
                unit.row_group,
                plan.roots(),
                unit.first_row,
                |batch, _| {
                    encoded.clear();
                    let mut batch_stats = plan.new_stats();
                    plan.encode_batch(&batch, &mut encoded, &mut batch_stats)?;
                    pass.write(unit, &encoded, &batch_stats, writer, options, progress)
                },
            )?;
            pass.unit_done(skip + u + 1, writer, options);
        }
        Ok(pass)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_budget_counts_bytes_and_never_starves_the_writers_unit() {
        let q = Queued {
            limit: QUEUED_BYTES,
            bytes: QUEUED_BYTES - 10,
            writer_unit: 3,
            stopped: false,
        };
        assert!(q.admits(4, 10, false), "within the budget");
        assert!(!q.admits(4, 11, true), "over it, and not the writer's unit");
        assert!(
            !q.admits(3, 11, false),
            "the writer's unit still has a batch queued"
        );
        assert!(
            q.admits(3, 11, true),
            "the writer's unit with nothing queued"
        );
        let stopped = Queued { stopped: true, ..q };
        assert!(
            stopped.admits(4, u64::MAX / 2, false),
            "a stopped run waits for nothing"
        );
    }

    #[test]
    fn units_are_dispatched_in_order_within_the_decoding_budget() {
        let d = std::sync::Arc::new(Dispatch::new());
        let big = DECODING_BYTES * 3 / 4;
        // A unit larger than the whole budget still runs, alone.
        assert_eq!(
            d.take(3, |_| DECODING_BYTES * 2),
            Some((0, DECODING_BYTES * 2))
        );
        d.done(DECODING_BYTES * 2);
        assert_eq!(d.take(3, |_| big), Some((1, big)));
        // Unit 2 does not fit beside unit 1: its taker waits until unit 1 is done.
        let waiter = {
            let d = d.clone();
            std::thread::spawn(move || d.take(3, |_| big))
        };
        assert_eq!(d.state.lock().unwrap().next, 2, "unit 2 not handed out yet");
        d.done(big);
        assert_eq!(waiter.join().unwrap(), Some((2, big)));
        assert_eq!(d.take(3, |_| big), None, "every unit taken");
        d.stop();
        assert_eq!(Dispatch::new().take(0, |_| 0), None);
    }
}
