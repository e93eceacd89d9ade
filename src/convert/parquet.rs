//! Parquet files and folders, Delta Lake and Iceberg snapshots: how each is opened into a
//! table of Parquet files (row groups as units, [`TableSource`]). Delta and Iceberg plan
//! their snapshot's data files and give each one their format's read
//! ([`crate::source::parquet::TableFileRead`]); the table source does the rest.

use rayon::prelude::*;

use crate::convert::table::{TableExtra, TableSource};
use crate::convert::{ConvertOptions, DeltaOptions, IcebergOptions, Open, ParquetDecoder, Source};
use crate::error::{Error, ErrorKind, Result};
use crate::example::encode::{schema_difference, EncodePlan};
use crate::source::delta::{self, DeltaTable};
use crate::source::hive;
use crate::source::iceberg::{IcebergFileRead, IcebergTable};
use crate::source::parquet::{self as source, ParquetInput};
use crate::source::table::TableFile;
use crate::store;

/// The opened files, as the table source takes them.
fn table_files(inputs: Vec<ParquetInput>) -> Vec<Box<dyn TableFile>> {
    inputs
        .into_iter()
        .map(|i| Box::new(i) as Box<dyn TableFile>)
        .collect()
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

/// Opens every Parquet input and checks the whole plan before anything is written.
///
/// # Errors
///
/// A missing or unreadable input, a corrupt footer, schemas that differ, a column that
/// cannot be encoded.
fn open_parquet(options: &ConvertOptions) -> Result<TableSource> {
    let (inputs, plan) = plan(options)?;
    TableSource::new(options, table_files(inputs), plan, None)
}

/// Plans one snapshot of a Delta table (see [`crate::source::delta`]) and opens its
/// data files, in the contract's order.
///
/// # Errors
///
/// Those of [`DeltaTable::open`] and [`DeltaTable::plan`], a column that cannot be
/// encoded, a data file that is not Parquet.
fn open_delta(options: &ConvertOptions, delta: &DeltaOptions) -> Result<TableSource> {
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
            input.metadata = delta::read_as_delta(input.metadata)
                .map_err(|e| e.with_file(&input.file.display))?;
            let columns = f
                .read
                .columns(&input.metadata, schema.clone())
                .map_err(|e| e.with_file(&input.file.display))?;
            input.set_table(std::sync::Arc::new(columns));
            Ok(input)
        })
        .collect::<Result<_>>()?;
    let extra = TableExtra {
        table: table.info(),
        log: table.log_file.clone(),
        deletes: deletion_vectors,
        partition_filters: delta.partition_filters.clone(),
    };
    TableSource::new(options, table_files(inputs), plan, Some(extra))
}

/// Plans one snapshot of an Iceberg table (see [`crate::source::iceberg`]) and opens
/// its data files' footers, in the contract's order.
///
/// # Errors
///
/// Those of [`IcebergTable::open`] and [`IcebergTable::plan`], a column that cannot
/// be encoded, a data file that is not Parquet.
fn open_iceberg(options: &ConvertOptions, iceberg: &IcebergOptions) -> Result<TableSource> {
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
        table: table.info(),
        log: Some(table.metadata_file.clone()),
        deletes,
        partition_filters: iceberg.partition_filters.clone(),
    };
    TableSource::new(options, table_files(inputs), plan, Some(extra))
}

/// Parquet files and folders: the run's inputs.
#[derive(Debug)]
pub(crate) struct ParquetFiles;

impl Open for ParquetFiles {
    fn open(&self, options: &ConvertOptions) -> Result<Box<dyn Source + '_>> {
        Ok(Box::new(open_parquet(options)?))
    }
}

impl Open for DeltaOptions {
    fn open(&self, options: &ConvertOptions) -> Result<Box<dyn Source + '_>> {
        Ok(Box::new(open_delta(options, self)?))
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
                Ok(Some(Box::new(open_delta(options, &pinned)?)))
            }
            _ => Ok(None),
        }
    }
}

impl Open for IcebergOptions {
    fn open(&self, options: &ConvertOptions) -> Result<Box<dyn Source + '_>> {
        Ok(Box::new(open_iceberg(options, self)?))
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
                Ok(Some(Box::new(open_iceberg(&at, &pinned)?)))
            }
            _ => Ok(None),
        }
    }
}
