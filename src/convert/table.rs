//! A table of files, each split into units read alone (Parquet row groups; Delta and
//! Iceberg snapshots are such files plus what their format adds; ORC stripes or Lance
//! fragments would be too): the one source the columnar formats share, over
//! [`TableFile`]. The worker share, checkpoints, resume and read-ahead are here, once;
//! each format only opens its files (`convert/parquet.rs`).
//!
//! Work is cut into units numbered in input order (files in the order given, then
//! units); workers decode them and encode every batch into framed records, and the run's
//! thread writes them in unit order ([`super::ordered`]).
//!
//! With `--resume` (one output, no shuffle, no `--min-shards`), the end of each unit is
//! a checkpoint journaled with the shards closed after it: the units done, the records,
//! rows per input and the encoding statistics so far. A rerun starts after the last
//! checkpoint its reused shards hold, instead of reading and encoding those units again.

use crate::convert::ordered::{self, Emit, InOrder};
use crate::convert::route::Router;
use crate::convert::{ConvertOptions, Source, WorkerShare};
use crate::error::{Error, Result};
use crate::example::encode::{EncodePlan, EncodeStats, EncodedBatch};
use crate::manifest::{InputInfo, Manifest, TableInfo};
use crate::progress::Progress;
use crate::source::table::{SideFile, TableFile};

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

/// One unit of one file (a Parquet row group).
#[derive(Debug, Clone)]
struct Unit {
    input: usize,
    unit: usize,
    first_row: u64,
    /// The index among its file's records of its first one (where the file's records
    /// are known before reading).
    first_record: u64,
    /// Its records: its rows, but those a Delta deletion vector drops (with `--append`,
    /// those it reads).
    records: u64,
    /// `--append`: only these of its records, `[start, end)` counted from its first;
    /// `None`: all.
    keep: Option<Vec<[u64; 2]>>,
}

/// What a table's manifest says beside its data files.
pub(crate) struct TableExtra {
    /// The snapshot read.
    pub table: TableInfo,
    /// The log or metadata file that defines the snapshot (listed first; none before a
    /// Delta table's first commit).
    pub log: Option<SideFile>,
    /// Its deletion vector or delete files (listed after the data files).
    pub deletes: Vec<SideFile>,
    /// `--partition-filter`: the partition values kept, as given.
    pub partition_filters: Vec<(String, String)>,
}

/// A table's files, opened and checked, cut into units, ready to be converted.
pub(crate) struct TableSource {
    inputs: Vec<Box<dyn TableFile>>,
    plan: EncodePlan,
    /// Every unit of the run (with `--append`, those it reads), in order: the plan every
    /// worker cuts its share from.
    all: Vec<Unit>,
    /// This run's units (a worker: its share of `all`).
    units: Vec<Unit>,
    worker: Option<WorkerShare>,
    /// A split by position: a worker's share must know the records before it.
    split_by_position: bool,
    /// What the last pass saw (a second pass for `--min-shards` sees the same).
    pass: Option<Pass>,
    /// A worker's units, `[first, end)` in the run's order of every unit.
    range: Option<[u64; 2]>,
    /// The index in the whole run of this run's first record (rows before a worker's
    /// share).
    first_record: u64,
    /// `--resume`: the checkpoint to restart from (its units are skipped).
    restart: Option<Checkpoint>,
    /// A table's snapshot (Delta, Iceberg), where the files are one.
    table: Option<TableExtra>,
    /// Per input, the index among its records of the first one this run reads (not 0
    /// only for the file a worker's share starts inside).
    first_records: Vec<u64>,
}

impl TableSource {
    /// Cuts the opened files into units (a worker: its share).
    ///
    /// # Errors
    ///
    /// A worker of a position split whose share's first record cannot be known before
    /// reading (files whose records are known only once read).
    pub(crate) fn new(
        options: &ConvertOptions,
        inputs: Vec<Box<dyn TableFile>>,
        plan: EncodePlan,
        table: Option<TableExtra>,
    ) -> Result<TableSource> {
        let mut units = Vec::new();
        for (i, input) in inputs.iter().enumerate() {
            let (mut first_row, mut first_record) = (0, 0);
            for (unit, rows) in input.unit_rows().into_iter().enumerate() {
                let records = input.kept_rows(first_row, rows);
                units.push(Unit {
                    input: i,
                    unit,
                    first_row,
                    first_record,
                    records,
                    keep: None,
                });
                first_row += rows;
                first_record += records;
            }
        }
        let mut source = TableSource {
            inputs,
            plan,
            all: units,
            units: Vec::new(),
            worker: options.worker,
            split_by_position: options.splits.is_some() && options.encode.split_key.is_none(),
            pass: None,
            range: None,
            first_record: 0,
            restart: None,
            table,
            first_records: Vec::new(),
        };
        source.cut_share()?;
        Ok(source)
    }

    /// This run's units: all of them, or a worker's share of them.
    ///
    /// # Errors
    ///
    /// See [`TableSource::new`].
    fn cut_share(&mut self) -> Result<()> {
        let (inputs, units) = (&self.inputs, &self.all);
        self.first_records = vec![0; inputs.len()];
        let Some(worker) = self.worker else {
            self.units = units.clone();
            return Ok(());
        };
        // Every worker reads the same footers in the same order: one agreed plan.
        let bytes: Vec<u64> = units
            .iter()
            .map(|u| inputs[u.input].selected_bytes(u.unit, self.plan.roots()))
            .collect();
        // A file whose records are known only once read (Iceberg delete files) goes
        // to one worker whole: a share starting inside it could not count the
        // records before it, which its shards' sources need.
        let exact: Vec<bool> = inputs.iter().map(|i| i.exact_rows()).collect();
        let [first, end] =
            share_whole_inexact_files(units, &bytes, &exact, |sizes| worker.share(sizes));
        // A position split numbers records over the whole run: the records before
        // this share must be known without reading them.
        let before = &units[..first as usize];
        if self.split_by_position && before.iter().any(|u| !inputs[u.input].exact_rows()) {
            return Err(Error::invalid_option(
                "split",
                "the snapshot has delete files, so a worker cannot count the records \
                 before its share: split by a column (--split-key) or convert on one machine",
            ));
        }
        self.range = Some([first, end]);
        self.first_record = before.iter().map(|u| u.records).sum();
        // The share may start inside a file (never one whose records are known only
        // once read): its records before the share.
        if let Some(start) = units.get(first as usize) {
            self.first_records[start.input] = (before.iter())
                .filter(|u| u.input == start.input)
                .map(|u| u.records)
                .sum();
        }
        self.units = units[first as usize..end as usize].to_vec();
        Ok(())
    }
}

impl TableSource {
    /// See [`Source::now_inputs`].
    fn inputs_now(&self) -> Vec<super::append::NowInput> {
        self.inputs
            .iter()
            .enumerate()
            .map(|(i, input)| super::append::NowInput {
                name: input.name().to_owned(),
                bytes: input.bytes(),
                etag: input.etag().map(str::to_owned),
                records: input.exact_rows().then(|| {
                    (self.all.iter())
                        .filter(|u| u.input == i)
                        .map(|u| u.records)
                        .sum()
                }),
                identity: input.identity(),
                delete_files: input.delete_files(),
                growth: None,
            })
            .collect()
    }

    /// See [`Source::select`]: `reads[i]` are sorted, disjoint ranges of input `i`'s
    /// records (a file whose records are known only once read is read whole or not at
    /// all).
    fn select_records(&mut self, reads: &[Vec<[u64; 2]>]) -> Result<()> {
        let inputs = &self.inputs;
        self.all.retain_mut(|u| {
            let ranges = &reads[u.input];
            if ranges.is_empty() {
                return false;
            }
            if !inputs[u.input].exact_rows() {
                return true;
            }
            let [start, end] = [u.first_record, u.first_record + u.records];
            let keep: Vec<[u64; 2]> = (ranges.iter())
                .filter(|r| r[0] < end && start < r[1])
                .map(|r| [r[0].max(start) - start, r[1].min(end) - start])
                .collect();
            let kept: u64 = keep.iter().map(|r| r[1] - r[0]).sum();
            if kept == 0 && u.records > 0 {
                return false;
            }
            if kept < u.records {
                u.records = kept;
                u.keep = Some(keep);
            }
            true
        });
        // Workers share what the append reads.
        self.cut_share()
    }
}

/// The units `[first, end)` of a share that `share` cuts over groups of units: each unit
/// alone, but the units of a file whose records are not `exact` together.
fn share_whole_inexact_files(
    units: &[Unit],
    bytes: &[u64],
    exact: &[bool],
    share: impl FnOnce(&[u64]) -> [u64; 2],
) -> [u64; 2] {
    // Each group's first unit, and its bytes.
    let mut starts: Vec<usize> = Vec::new();
    let mut sizes: Vec<u64> = Vec::new();
    for (i, (unit, &b)) in units.iter().zip(bytes).enumerate() {
        let joins = i > 0 && units[i - 1].input == unit.input && !exact[unit.input];
        if joins {
            *sizes.last_mut().expect("a group before") += b;
        } else {
            starts.push(i);
            sizes.push(b);
        }
    }
    let [first, end] = share(&sizes);
    let unit_of = |group: u64| starts.get(group as usize).map_or(units.len(), |&u| u) as u64;
    [unit_of(first), unit_of(end)]
}

impl Source for TableSource {
    fn total_units(&self) -> u64 {
        self.units.iter().map(|u| u.records).sum()
    }

    fn expected_records(&self) -> Option<u64> {
        Some(self.total_units())
    }

    fn estimated_bytes(&self) -> u64 {
        // Encoded Examples run 1.5-2x their zstd Parquet (the standard table: 1.55x): a
        // guess for the shuffle's buffers and bucket count, erring high.
        self.inputs.iter().map(|i| i.bytes()).sum::<u64>() * 2
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

    fn now_inputs(&self) -> Option<Vec<super::append::NowInput>> {
        Some(self.inputs_now())
    }

    fn select(&mut self, reads: &[Vec<[u64; 2]>], _base: &Manifest) -> Result<()> {
        self.select_records(reads)
    }

    fn manifest(&self, options: &ConvertOptions, _records: u64) -> Manifest {
        let rows = self.pass.as_ref().map(|p| p.rows_per_input.as_slice());
        let side = |f: &SideFile| InputInfo {
            path: f.display.clone(),
            bytes: f.bytes,
            rows: 0,
            etag: f.etag.clone(),
            identity: f.identity.clone(),
        };
        let mut inputs: Vec<InputInfo> = self
            .table
            .iter()
            .filter_map(|d| d.log.as_ref())
            .map(side)
            .collect();
        inputs.extend(self.inputs.iter().enumerate().map(|(i, input)| InputInfo {
            path: input.name().to_owned(),
            bytes: input.bytes(),
            rows: rows.and_then(|r| r.get(i).copied()).unwrap_or(0),
            etag: input.etag().map(str::to_owned),
            identity: input.identity(),
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
            if !t.partition_filters.is_empty() {
                let given: Vec<String> = (t.partition_filters.iter())
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                manifest
                    .options
                    .insert("partition_filter".into(), serde_json::json!(given));
            }
        }
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

impl TableSource {
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
        // The manifest lists the log (if any) before the data files.
        let listed_before = self
            .table
            .as_ref()
            .map_or(0, |t| u32::from(t.log.is_some()));
        let mut writer = PassWriter {
            pass: Pass::new(plan, inputs.len(), self.restart.as_ref()),
            skip,
            first_records: &self.first_records,
            listed_before,
            units,
            router,
            options,
            progress,
        };
        ordered::run(
            options.threads,
            ordered::queued_bytes(options.compression),
            units,
            |unit| inputs[unit.input].decode_bytes(unit.unit),
            |unit, emit: &mut Emit<'_, Encoded>| {
                // With `--append`, only some of the unit's records: each batch's records
                // are counted from the unit's first, and the kept ones encoded.
                // A file whose records are known before reading numbers each batch's
                // first from the unit's (a unit read whole may follow one read in part).
                let exact = inputs[unit.input].exact_rows();
                let mut at = 0u64;
                inputs[unit.input].read_unit(
                    unit.unit,
                    plan.roots(),
                    unit.first_row,
                    &mut |batch, _| {
                        let (first, rows) = (at, batch.num_rows() as u64);
                        at += rows;
                        let Some(keep) = &unit.keep else {
                            let mut encoded = emit.buffer();
                            let mut stats = plan.new_stats();
                            plan.encode_batch(&batch, &mut encoded, &mut stats)?;
                            let record = exact.then_some(unit.first_record + first);
                            return emit.send(encoded, (stats, record));
                        };
                        for r in keep.iter().filter(|r| r[0] < first + rows && first < r[1]) {
                            let [start, end] = [r[0].max(first), r[1].min(first + rows)];
                            let piece =
                                batch.slice((start - first) as usize, (end - start) as usize);
                            let mut encoded = emit.buffer();
                            let mut stats = plan.new_stats();
                            plan.encode_batch(&piece, &mut encoded, &mut stats)?;
                            emit.send(encoded, (stats, Some(unit.first_record + start)))?;
                        }
                        Ok(())
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

/// An encoded batch's statistics, and the index among its file's records of its first
/// one (`None` for a file whose records are known only once read: counted as written).
type Encoded = (EncodeStats, Option<u64>);

/// Writes a pass's batches in unit order, from `pass` (which starts after `skip` units
/// of the plan).
struct PassWriter<'a, 'r> {
    pass: Pass,
    skip: usize,
    /// See [`TableSource::first_records`].
    first_records: &'a [u64],
    /// Inputs the manifest lists before the data files.
    listed_before: u32,
    units: &'a [Unit],
    router: &'a mut Router<'r>,
    options: &'a ConvertOptions,
    progress: &'a dyn Progress,
}

impl InOrder<Encoded> for PassWriter<'_, '_> {
    fn write(&mut self, u: usize, batch: &EncodedBatch, encoded: Encoded) -> Result<()> {
        let (stats, first_record) = encoded;
        let unit = &self.units[u];
        let input = unit.input;
        let record =
            first_record.unwrap_or(self.first_records[input] + self.pass.rows_per_input[input]);
        self.router
            .origin(self.listed_before + input as u32, record);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_never_starts_inside_a_file_known_only_once_read() {
        let unit = |input: usize, unit: usize| Unit {
            input,
            unit,
            first_row: 0,
            first_record: 0,
            records: 10,
            keep: None,
        };
        // Input 0 (inexact): three units; input 1 (exact): two.
        let units = [unit(0, 0), unit(0, 1), unit(0, 2), unit(1, 0), unit(1, 1)];
        let bytes = [1, 2, 3, 4, 5];
        let exact = [false, true];
        let cut = |want: [u64; 2]| {
            share_whole_inexact_files(&units, &bytes, &exact, |sizes| {
                assert_eq!(sizes, [6, 4, 5], "input 0's units are one group");
                want
            })
        };
        assert_eq!(cut([0, 1]), [0, 3]);
        assert_eq!(cut([1, 2]), [3, 4]);
        assert_eq!(cut([1, 3]), [3, 5]);
        assert_eq!(cut([2, 2]), [4, 4]);
        assert_eq!(cut([3, 3]), [5, 5]);
        // Exact files are cut by unit, as before.
        let all_exact = share_whole_inexact_files(&units, &bytes, &[true, true], |sizes| {
            assert_eq!(sizes, bytes);
            [2, 4]
        });
        assert_eq!(all_exact, [2, 4]);
    }
}
