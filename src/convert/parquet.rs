//! The Parquet source: files and folders of Parquet → framed `tf.train.Example` (or
//! SequenceExample) records, in input order.
//!
//! Work is cut into units of one row group each, numbered in input order (files in the
//! order given, then row groups); workers decode them and encode every batch into
//! framed records, and the run's thread writes them in unit order ([`super::ordered`]).
//!
//! With `--resume` (one output, no shuffle, no `--min-shards`), the end of each unit is
//! a checkpoint journaled with the shards closed after it: the units done, the records,
//! rows per input and the encoding statistics so far. A rerun starts after the last
//! checkpoint its reused shards hold, instead of reading and encoding those units again.

use rayon::prelude::*;

use crate::convert::ordered::{self, Emit, InOrder};
use crate::convert::route::Router;
use crate::convert::{
    ConvertOptions, DeltaOptions, IcebergOptions, Open, ParquetDecoder, Source, TableInfo,
};
use crate::error::{Error, ErrorKind, Result};
use crate::example::encode::{schema_difference, EncodePlan, EncodeStats, EncodedBatch};
use crate::manifest::{InputInfo, Manifest};
use crate::progress::Progress;
use crate::source::delta::DeltaTable;
use crate::source::hive;
use crate::source::iceberg::{IcebergFileRead, IcebergTable};
use crate::source::parquet::{self as source, ParquetInput};
use crate::source::table::SideFile;
use crate::store;

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

/// The snapshot a Delta or Iceberg table was asked for.
#[derive(Clone)]
enum Asked {
    Delta(DeltaOptions),
    Iceberg(IcebergOptions),
}

/// What a table's manifest says beside its data files.
struct TableExtra {
    /// The snapshot asked for.
    asked: Asked,
    table: TableInfo,
    /// The log or metadata file that defines the snapshot (listed first; none before a
    /// Delta table's first commit).
    log: Option<SideFile>,
    /// Its deletion vector or delete files (listed after the data files).
    deletes: Vec<SideFile>,
}

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
    /// A Delta or Iceberg table's snapshot.
    table: Option<TableExtra>,
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
                let columns = f
                    .read
                    .columns(&input.metadata, schema.clone())
                    .map_err(|e| e.with_file(&input.file.display))?;
                input.set_table(std::sync::Arc::new(columns));
                Ok(input)
            })
            .collect::<Result<_>>()?;
        let extra = TableExtra {
            asked: Asked::Delta(delta.clone()),
            table: table.info(),
            log: table.log_file.clone(),
            deletes: deletion_vectors,
        };
        Self::with_inputs(options, inputs, plan, Some(extra))
    }

    /// Plans one snapshot of an Iceberg table (see [`crate::source::iceberg`]) and opens
    /// its data files' footers, in the contract's order.
    ///
    /// # Errors
    ///
    /// Those of [`IcebergTable::open`] and [`IcebergTable::plan`], a column that cannot
    /// be encoded, a data file that is not Parquet.
    pub(crate) fn open_iceberg(
        options: &ConvertOptions,
        iceberg: &IcebergOptions,
    ) -> Result<ParquetSource> {
        let table = IcebergTable::open(&options.inputs[0], iceberg, options.io)?;
        let plan = EncodePlan::new(&table.schema, &options.encode)
            .map_err(|e| e.with_file(&table.location))?;
        let (files, deletes) = table.plan(plan.roots(), &iceberg.partition_filters)?;
        let schema = std::sync::Arc::new(table.schema.clone());
        let inputs: Vec<ParquetInput> = files
            .into_par_iter()
            .map(|f| {
                let mut input = ParquetInput::open(f.input)?;
                input.set_table(std::sync::Arc::new(IcebergFileRead::new(
                    f.read,
                    schema.clone(),
                )));
                Ok(input)
            })
            .collect::<Result<_>>()?;
        let extra = TableExtra {
            asked: Asked::Iceberg(iceberg.clone()),
            table: table.info(),
            log: Some(table.metadata_file.clone()),
            deletes,
        };
        Self::with_inputs(options, inputs, plan, Some(extra))
    }

    /// Cuts the opened inputs into units (a worker: its share).
    fn with_inputs(
        options: &ConvertOptions,
        inputs: Vec<ParquetInput>,
        plan: EncodePlan,
        table: Option<TableExtra>,
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
            let [first, end] = worker.share(&bytes);
            // A position split numbers records over the whole run: the records before
            // this share must be known without reading them.
            let before = &units[..first as usize];
            if options.splits.is_some()
                && options.encode.split_key.is_none()
                && before.iter().any(|u| !inputs[u.input].exact_rows())
            {
                return Err(Error::invalid_option(
                    "split",
                    "the snapshot has delete files, so a worker cannot count the records \
                     before its share: split by a column (--split-key) or convert on one machine",
                ));
            }
            range = Some([first, end]);
            first_record = units[..first as usize].iter().map(|u| u.records).sum();
            units = units[first as usize..end as usize].to_vec();
        }
        Ok(ParquetSource {
            inputs,
            plan,
            units,
            pass: None,
            range,
            first_record,
            restart: None,
            table,
        })
    }
}

/// Parquet files and folders: the run's inputs.
#[derive(Debug)]
pub(crate) struct ParquetFiles;

impl Open for ParquetFiles {
    fn open(&self, options: &ConvertOptions) -> Result<Box<dyn Source + '_>> {
        Ok(Box::new(ParquetSource::open(options)?))
    }
}

impl Open for DeltaOptions {
    fn open(&self, options: &ConvertOptions) -> Result<Box<dyn Source + '_>> {
        Ok(Box::new(ParquetSource::open_delta(options, self)?))
    }

    /// No version named: the one the interrupted run read, whatever was committed since.
    fn reopen_at(
        &self,
        options: &ConvertOptions,
        header: &serde_json::Value,
        opened: &dyn Source,
    ) -> Result<Option<Box<dyn Source + '_>>> {
        if self.version.is_some() || self.timestamp.is_some() {
            return Ok(None);
        }
        let read = opened.manifest(options, 0).table.and_then(|t| t.version);
        match header["table"]["version"].as_u64() {
            Some(v) if Some(v) != read => {
                let pinned = DeltaOptions {
                    version: Some(v),
                    ..self.clone()
                };
                let source = ParquetSource::open_delta(options, &pinned)?;
                Ok(Some(Box::new(source.unnamed())))
            }
            _ => Ok(None),
        }
    }
}

impl Open for IcebergOptions {
    fn open(&self, options: &ConvertOptions) -> Result<Box<dyn Source + '_>> {
        Ok(Box::new(ParquetSource::open_iceberg(options, self)?))
    }

    /// No snapshot named: the one the interrupted run read, whatever was committed
    /// since, through the metadata file it read (listed first) while that is there: the
    /// inputs then match its journal.
    fn reopen_at(
        &self,
        options: &ConvertOptions,
        header: &serde_json::Value,
        opened: &dyn Source,
    ) -> Result<Option<Box<dyn Source + '_>>> {
        if self.snapshot_id.is_some() || self.timestamp.is_some() {
            return Ok(None);
        }
        let read = opened
            .manifest(options, 0)
            .table
            .and_then(|t| t.snapshot_id);
        match header["table"]["snapshot_id"].as_i64() {
            Some(id) if Some(id) != read => {
                let pinned = IcebergOptions {
                    snapshot_id: Some(id),
                    ..self.clone()
                };
                let mut at = options.clone();
                if let Some(file) = header["inputs"][0]["path"].as_str() {
                    if store::paths::len(std::path::Path::new(file), options.io).is_ok() {
                        at.inputs = vec![file.into()];
                    }
                }
                let source = ParquetSource::open_iceberg(&at, &pinned)?;
                Ok(Some(Box::new(source.unnamed())))
            }
            _ => Ok(None),
        }
    }
}

impl ParquetSource {
    /// The source with its snapshot as asked (none named), whatever it was opened at:
    /// the manifest and the journal's header name it so.
    fn unnamed(mut self) -> ParquetSource {
        if let Some(t) = &mut self.table {
            t.asked = table_asked_unnamed(&t.asked);
        }
        self
    }
}

impl Source for ParquetSource {
    fn total_units(&self) -> u64 {
        self.units.iter().map(|u| u.records).sum()
    }

    fn expected_records(&self) -> Option<u64> {
        Some(self.total_units())
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
        // With Iceberg delete files, units count rows, an upper bound of their records.
        let exact = done.iter().all(|u| self.inputs[u.input].exact_rows());
        let fits = (rows == c.records || !exact && rows >= c.records)
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

    fn manifest(&self, options: &ConvertOptions, _records: u64) -> Manifest {
        let rows = self.pass.as_ref().map(|p| p.rows_per_input.as_slice());
        let side = |f: &SideFile| InputInfo {
            path: f.display.clone(),
            bytes: f.bytes,
            rows: 0,
            etag: f.etag.clone(),
        };
        let mut inputs: Vec<InputInfo> = self
            .table
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
        if let Some(t) = &self.table {
            inputs.extend(t.deletes.iter().map(side));
        }
        let stats = self.pass.as_ref().map(|p| &p.stats);
        let features = match stats {
            Some(stats) => self.plan.features(stats),
            None => self.plan.features(&self.plan.new_stats()),
        };
        let mut manifest = options.new_manifest(self.plan.record_type(), inputs, features);
        if let Some(t) = &self.table {
            manifest.table = Some(t.table.clone());
            // The partitions kept change the output: recorded as given (`KEY=VALUE`).
            let filters = match &t.asked {
                Asked::Delta(d) => &d.partition_filters,
                Asked::Iceberg(i) => &i.partition_filters,
            };
            if !filters.is_empty() {
                let given: Vec<String> = filters.iter().map(|(k, v)| format!("{k}={v}")).collect();
                manifest
                    .options
                    .insert("partition_filter".into(), serde_json::json!(given));
            }
        }
        manifest
    }
}

/// The snapshot asked for, without the id or version a resumed run pinned.
fn table_asked_unnamed(asked: &Asked) -> Asked {
    match asked {
        Asked::Delta(d) => Asked::Delta(DeltaOptions {
            version: None,
            ..d.clone()
        }),
        Asked::Iceberg(i) => Asked::Iceberg(IcebergOptions {
            snapshot_id: None,
            ..i.clone()
        }),
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
    /// Decodes and encodes units on `threads` workers; writes their records in unit
    /// order ([`ordered`]).
    fn write_pass(
        &self,
        options: &ConvertOptions,
        router: &mut Router,
        progress: &dyn Progress,
    ) -> Result<Pass> {
        let skip = self.restart.as_ref().map_or(0, |c| c.units);
        let (inputs, plan, units) = (&self.inputs[..], &self.plan, &self.units[skip..]);
        let mut writer = PassWriter {
            pass: Pass::new(plan, inputs.len(), self.restart.as_ref()),
            skip,
            units,
            router,
            options,
            progress,
        };
        ordered::run(
            options.threads,
            ordered::queued_bytes(options.compression),
            units,
            |unit| inputs[unit.input].row_group_decode_bytes(unit.row_group),
            |unit, emit: &mut Emit<'_, EncodeStats>| {
                source::read_row_group(
                    &inputs[unit.input],
                    unit.row_group,
                    plan.roots(),
                    unit.first_row,
                    |batch, _| {
                        let mut encoded = emit.buffer();
                        let mut stats = plan.new_stats();
                        plan.encode_batch(&batch, &mut encoded, &mut stats)?;
                        emit.send(encoded, stats)
                    },
                )
            },
            &mut writer,
        )?;
        // Inputs without a row group have no unit; they still get their row count (0).
        let mut pass = writer.pass;
        pass.rows_per_input.resize(inputs.len(), 0);
        Ok(pass)
    }
}

/// Writes a pass's batches in unit order, from `pass` (which starts after `skip` units
/// of the plan).
struct PassWriter<'a, 'r> {
    pass: Pass,
    skip: usize,
    units: &'a [Unit],
    router: &'a mut Router<'r>,
    options: &'a ConvertOptions,
    progress: &'a dyn Progress,
}

impl InOrder<EncodeStats> for PassWriter<'_, '_> {
    fn write(&mut self, u: usize, batch: &EncodedBatch, stats: EncodeStats) -> Result<()> {
        let unit = &self.units[u];
        self.pass.write(
            unit,
            batch,
            &stats,
            self.router,
            self.options,
            self.progress,
        )
    }

    fn unit_done(&mut self, u: usize) {
        self.pass
            .unit_done(self.skip + u + 1, self.router, self.options);
    }
}
