//! Apache Iceberg tables: one snapshot, planned and read by the `iceberg` crate (the
//! Iceberg project's own Rust implementation).
//!
//! The crate reads the table metadata, picks the snapshot, reads its manifest list and
//! manifests, and plans one task per live data file with the delete files that apply to
//! it (by sequence number). Its Arrow reader then reads each data file as the snapshot
//! has it: columns matched by field id (a renamed column keeps its values, an added one
//! is null in older files, a dropped one is gone), types promoted, identity partition
//! values filled in from the manifest, position and equality deletes applied.
//!
//! We keep what the rest of the pipeline needs: units of one row group (our own footer
//! read gives the row groups, as for Parquet; the crate reads each as a byte range),
//! workers' shares, the contract's record order, and the manifest's inputs. The crate
//! builds on arrow 58; its batches cross into our arrow through the Arrow C data
//! interface ([`bridge_batch`]), without a copy. Its I/O goes through [`TableStorage`]:
//! our own local and object-store reads (ETag-pinned, retried), read-only, and aware
//! that a table may have moved since its metadata was written.
//!
//! Record order is the contract's: data files in byte order of their path relative to
//! the table location, rows in file order, deleted rows skipped.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arrow_array::{RecordBatch, StructArray};
use arrow_schema::Schema;
use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use iceberg::arrow::ArrowReader;
use iceberg::io::{
    FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile as IcebergInput, OutputFile,
    Storage, StorageConfig, StorageFactory,
};
use iceberg::scan::{FileScanTask, FileScanTaskDeleteFile};
use iceberg::spec::{FormatVersion, Literal, PrimitiveLiteral, PrimitiveType, TableMetadata, Type};
use iceberg::table::{StaticTable, Table};
use parquet::arrow::ProjectionMask;

use super::parquet::{rows_for, InputFile, ParquetInput, TableFileRead, BATCH_BYTES};
use super::table::{parse_time, table_error, SideFile};
use crate::error::{Error, Result};
use crate::manifest::{rfc3339_ms, TableInfo};
use crate::store::{self, Blob, IoOptions, Object};

/// The field id arrow-rs's Parquet reader puts in a field's metadata.
const FIELD_ID_KEY: &str = "PARQUET:field_id";

/// Which snapshot to read, and which of its partitions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IcebergOptions {
    /// `--snapshot-id N` (default: the current snapshot).
    pub snapshot_id: Option<i64>,
    /// `--timestamp T` (RFC 3339): the snapshot current at T, by the snapshot log.
    pub timestamp: Option<String>,
    /// `--partition-filter KEY=VALUE`: keep the data files of these partition values (all
    /// must hold). KEY is a partition field's name, or an identity field's column.
    pub partition_filters: Vec<(String, String)>,
}

/// An Iceberg table at one snapshot.
pub struct IcebergTable {
    /// The table as given, without its metadata file (errors and the manifest name it).
    pub location: String,
    /// The metadata file that defines the snapshot (the manifest's first input).
    pub metadata_file: SideFile,
    /// The snapshot's id (none for a table with no snapshot yet: it reads as no rows).
    pub snapshot_id: Option<i64>,
    /// The snapshot's time, ms since the epoch.
    pub timestamp_ms: Option<i64>,
    /// The snapshot's schema, as Arrow (ours).
    pub schema: Schema,
    /// Each top-level column's field id, in schema order.
    field_ids: Vec<i32>,
    table: Table,
    storage: TableStorage,
}

impl std::fmt::Debug for IcebergTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IcebergTable")
            .field("location", &self.location)
            .field("snapshot_id", &self.snapshot_id)
            .finish_non_exhaustive()
    }
}

/// One data file of the snapshot, planned.
#[derive(Debug)]
pub struct IcebergFile {
    /// The file, as our Parquet reader opens it (its footer gives the row groups).
    pub input: InputFile,
    /// How the crate reads it.
    pub read: Arc<IcebergRead>,
}

/// How one data file is read: its scan task (delete files included) and the table's
/// reader, which loads each delete file once for every file it applies to.
pub struct IcebergRead {
    task: FileScanTask,
    reader: ArrowReader,
    storage: TableStorage,
    /// The file's name in errors.
    display: String,
    /// Whether delete files apply: its rows are then an upper bound of its records.
    pub has_deletes: bool,
    /// The delete files that apply, as the manifest's `inputs` name them.
    pub delete_files: Vec<String>,
    /// Its records, as its manifest entry counts them (before deletes).
    pub record_count: Option<u64>,
}

impl std::fmt::Debug for IcebergRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IcebergRead")
            .field("file", &self.display)
            .field("deletes", &self.task.deletes.len())
            .finish_non_exhaustive()
    }
}

/// The version in a metadata file's name: `v12.metadata.json`, `00012-<uuid>.metadata.json`.
fn metadata_version(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".metadata.json")?;
    let stem = stem.strip_suffix(".gz").unwrap_or(stem);
    let digits = match stem.strip_prefix('v') {
        Some(v) => v,
        None => stem.split('-').next()?,
    };
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// An iceberg error in one line: its message, then its sources'.
fn explain(e: &iceberg::Error) -> String {
    let mut text = e.message().to_owned();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text.lines()
        .next()
        .unwrap_or_default()
        .trim_end()
        .to_owned()
}

impl IcebergTable {
    /// Opens the table's snapshot: `options.snapshot_id`, the snapshot current at
    /// `options.timestamp`, or the current one.
    ///
    /// # Errors
    ///
    /// Not an Iceberg table, a metadata file that is not JSON or not table metadata, a
    /// format version we do not read, a snapshot that does not exist, a timestamp before
    /// the first snapshot, a manifest list or manifest that cannot be read.
    pub fn open(table: &Path, options: &IcebergOptions, io: IoOptions) -> Result<IcebergTable> {
        let given = table.display().to_string();
        let given = given.trim_end_matches('/').to_owned();
        let is_metadata_file = given.ends_with(".metadata.json");
        // The table root: the folder above metadata/ when a metadata file is given.
        let location = if is_metadata_file {
            let parent = |s: &str| {
                s.rsplit_once('/')
                    .map_or(String::new(), |(p, _)| p.to_owned())
            };
            parent(&parent(&given))
        } else {
            given.clone()
        };
        let files = store::storage_of(table, io)?;
        let path = store::storage::resolve(table, io)?;
        let root = if is_metadata_file {
            // The folder above metadata/ (or the file's own folder at a bucket's root).
            let folder = files.parent(&path);
            let above = folder.as_ref().and_then(|m| files.parent(m)).or(folder);
            above.unwrap_or_default()
        } else {
            path.clone()
        };
        let shown = store::storage::shown(Path::new(&location), io)?;
        let (found, display) = if is_metadata_file {
            let display = store::storage::shown(table, io)?;
            let found = files.head(&path).map_err(|e| e.at_file(&display))?;
            (found, display)
        } else {
            let found = current_metadata_file(&*files, &root, &location)?;
            let name = found.path.file_name().unwrap_or_default().to_string_lossy();
            let display = format!("{shown}/metadata/{name}");
            (found, display)
        };
        let bytes = files.read_whole(&found).map_err(|e| e.at_file(&display))?;
        let metadata_file = SideFile {
            display,
            bytes: bytes.len() as u64,
            etag: found.etag,
            identity: found.identity,
        };
        let metadata = parse_metadata(&bytes, &metadata_file.display)?;
        let storage = TableStorage::new(
            metadata.location(),
            Where {
                files,
                dir: root,
                shown,
            },
            io,
        );
        let snapshot = pick_snapshot(&metadata, options, &location)?;
        let timestamp_ms = snapshot.map(|id| {
            metadata
                .history()
                .iter()
                .rev()
                .find(|l| l.snapshot_id == id)
                .map(|l| l.timestamp_ms)
                .or_else(|| metadata.snapshot_by_id(id).map(|s| s.timestamp_ms()))
                .unwrap_or_default()
        });
        let iceberg_schema = match snapshot.and_then(|id| metadata.snapshot_by_id(id)) {
            Some(s) => s
                .schema(&metadata)
                .map_err(|e| table_error(&location, explain(&e)))?,
            None => metadata.current_schema().clone(),
        };
        let field_ids = iceberg_schema
            .as_struct()
            .fields()
            .iter()
            .map(|f| f.id)
            .collect();
        let arrow = iceberg::arrow::schema_to_arrow_schema(&iceberg_schema)
            .map_err(|e| table_error(&location, explain(&e)))?;
        let schema = bridge_schema(&arrow).map_err(|e| e.with_file(&location))?;
        let file_io = FileIOBuilder::new(Arc::new(storage.clone())).build();
        let ident = iceberg::TableIdent::from_strs(["tfshard", "table"])
            .map_err(|e| table_error(&location, explain(&e)))?;
        let table = store::block_on(async {
            StaticTable::from_metadata(metadata, ident, file_io)
                .await
                .map(StaticTable::into_table)
        })
        .map_err(|e| table_error(&location, explain(&e)))?;
        Ok(IcebergTable {
            location,
            metadata_file,
            snapshot_id: snapshot,
            timestamp_ms,
            schema,
            field_ids,
            table,
            storage,
        })
    }

    /// The manifest's `table`.
    pub fn info(&self) -> TableInfo {
        TableInfo::iceberg(&self.location, self.snapshot_id, self.timestamp_ms)
    }

    /// Plans the snapshot's scan of the top-level columns `roots` (indices of
    /// [`IcebergTable::schema`]): its data files in the contract's order, those of the
    /// partitions `filters` name, and the delete files they read (for the manifest).
    ///
    /// # Errors
    ///
    /// A manifest list or manifest that cannot be read, a filter key that is no partition
    /// field, a data file that is missing.
    pub fn plan(
        &self,
        roots: &[usize],
        filters: &[(String, String)],
    ) -> Result<(Vec<IcebergFile>, Vec<SideFile>)> {
        let Some(snapshot) = self.snapshot_id else {
            return Ok((Vec::new(), Vec::new()));
        };
        let storage = &self.storage;
        let failed = |e: iceberg::Error| storage.error(e, &self.location);
        let tasks: Vec<FileScanTask> = super::contain::contain(|| {
            store::block_on(async {
                let scan = self
                    .table
                    .scan()
                    .snapshot_id(snapshot)
                    .select_all()
                    .build()?;
                let tasks: Vec<FileScanTask> = scan.plan_files().await?.try_collect().await?;
                Ok::<_, iceberg::Error>(tasks)
            })
        })
        .map_err(|panic| table_error(&self.location, format!("planning the scan failed: {panic}")))?
        .map_err(failed)?;
        let ids: Vec<i32> = roots.iter().map(|&r| self.field_ids[r]).collect();
        // The crate's planner leaves each task's partition spec out, which its reader
        // needs to fill identity partition columns from the manifest: we set it.
        let metadata = self.table.metadata();
        let specs = if metadata.partition_specs_iter().len() > 1 {
            Some(self.spec_ids(snapshot).map_err(failed)?)
        } else {
            None
        };
        let mut planned: BTreeMap<String, FileScanTask> = BTreeMap::new();
        for mut task in tasks {
            task.partition_spec = match &specs {
                None => metadata.partition_specs_iter().next().cloned(),
                Some(by_file) => by_file
                    .get(&task.data_file_path)
                    .and_then(|&id| metadata.partition_spec_by_id(id))
                    .cloned(),
            };
            if !self.keeps(&task, filters)? {
                continue;
            }
            task.project_field_ids.clone_from(&ids);
            let rel = storage.relative(&task.data_file_path);
            planned.insert(rel, task);
        }
        let reader = self
            .table
            .reader_builder()
            .with_data_file_concurrency_limit(1)
            .with_batch_size(super::parquet::BATCH_ROWS)
            .with_row_group_filtering_enabled(false)
            .build();
        // The snapshot's data and delete files below the table, found in one go.
        let mut deletes: BTreeMap<String, &FileScanTaskDeleteFile> = BTreeMap::new();
        for task in planned.values() {
            for d in &task.deletes {
                deletes.insert(storage.relative(&d.file_path), d);
            }
        }
        let below: Vec<String> = planned
            .iter()
            .map(|(rel, task)| (rel, &task.data_file_path))
            .chain(deletes.iter().map(|(rel, d)| (rel, &d.file_path)))
            .filter(|(rel, path)| rel != path)
            .map(|(rel, _)| rel.clone())
            .collect();
        let missing = |rel: &str| {
            let kind = if planned.contains_key(rel) {
                "data"
            } else {
                "delete"
            };
            table_error(
                &self.location,
                format!(
                    "{kind} file {rel} is named by snapshot {snapshot} but is missing from the table"
                ),
            )
        };
        let found = storage.find(&below, missing)?;
        let mut files = Vec::with_capacity(planned.len());
        for (rel, task) in &planned {
            let input = storage.input_file(rel, &task.data_file_path, &found, missing)?;
            let read = IcebergRead {
                task: task.clone(),
                reader: reader.clone(),
                storage: storage.clone(),
                display: input.display.clone(),
                has_deletes: !task.deletes.is_empty(),
                delete_files: (task.deletes.iter())
                    .map(|d| storage.shown(&storage.relative(&d.file_path), &d.file_path))
                    .collect(),
                record_count: task.record_count,
            };
            files.push(IcebergFile {
                input,
                read: Arc::new(read),
            });
        }
        let side = deletes
            .iter()
            .map(|(rel, d)| storage.side_file(rel, &d.file_path, &found, d.file_size_in_bytes))
            .collect();
        Ok((files, side))
    }

    /// The partition spec id of each data file of the snapshot, from its manifests (a
    /// table whose spec evolved has files of several).
    fn spec_ids(&self, snapshot: i64) -> iceberg::Result<HashMap<String, i32>> {
        let Some(snap) = self.table.metadata().snapshot_by_id(snapshot) else {
            return Ok(HashMap::new());
        };
        store::block_on(async {
            let list = self.table.manifest_list_reader(snap).load().await?;
            let mut by_file = HashMap::new();
            for manifest in list.entries() {
                if manifest.content != iceberg::spec::ManifestContentType::Data {
                    continue;
                }
                let entries = manifest.load_manifest(self.table.file_io()).await?;
                for entry in entries.entries() {
                    by_file.insert(entry.file_path().to_owned(), manifest.partition_spec_id);
                }
            }
            Ok(by_file)
        })
    }

    /// Whether a data file's partition values satisfy every `KEY=VALUE` filter.
    fn keeps(&self, task: &FileScanTask, filters: &[(String, String)]) -> Result<bool> {
        if filters.is_empty() {
            return Ok(true);
        }
        let metadata = self.table.metadata();
        let schema = &task.schema;
        let known = || {
            let mut names: Vec<String> = metadata
                .partition_specs_iter()
                .flat_map(|s| s.fields().iter().map(|f| f.name.clone()))
                .collect();
            names.sort();
            names.dedup();
            names
        };
        for (key, value) in filters {
            let named = |f: &iceberg::spec::PartitionField| {
                &f.name == key
                    || (f.transform == iceberg::spec::Transform::Identity
                        && schema.name_by_field_id(f.source_id) == Some(key.as_str()))
            };
            let in_any_spec = metadata
                .partition_specs_iter()
                .any(|s| s.fields().iter().any(named));
            if !in_any_spec {
                let names = known();
                return Err(table_error(
                    &self.location,
                    format!(
                        "--partition-filter {key}: no partition field of the table is named so (it has {})",
                        if names.is_empty() { "none".to_owned() } else { names.join(", ") }
                    ),
                ));
            }
            let (Some(spec), Some(partition)) = (&task.partition_spec, &task.partition) else {
                return Ok(false);
            };
            let Some(at) = spec.fields().iter().position(named) else {
                return Ok(false);
            };
            let field = &spec.fields()[at];
            let value_here = partition.fields().get(at).cloned().flatten();
            let source = schema
                .field_by_id(field.source_id)
                .map(|f| f.field_type.as_ref().clone());
            let result = source.and_then(|t| field.transform.result_type(&t).ok());
            let shown = match (value_here, result) {
                (None, _) => "null".to_owned(),
                (Some(literal), Some(Type::Primitive(p))) => partition_string(&literal, &p)
                    .ok_or_else(|| {
                        table_error(
                            &self.location,
                            format!("--partition-filter {key}: a {p} partition cannot be filtered"),
                        )
                    })?,
                (Some(_), _) => return Ok(false),
            };
            if &shown != value {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A partition value as `--partition-filter` spells it (a date as `2026-11-28`); none
/// for types a filter does not take.
fn partition_string(literal: &Literal, t: &PrimitiveType) -> Option<String> {
    let Literal::Primitive(p) = literal else {
        return None;
    };
    Some(match (t, p) {
        (_, PrimitiveLiteral::String(s)) => s.clone(),
        (_, PrimitiveLiteral::Boolean(b)) => b.to_string(),
        (PrimitiveType::Date, PrimitiveLiteral::Int(days)) => {
            iceberg::spec::Datum::date(*days).to_string()
        }
        (PrimitiveType::Int, PrimitiveLiteral::Int(v)) => v.to_string(),
        (PrimitiveType::Long, PrimitiveLiteral::Long(v)) => v.to_string(),
        _ => return None,
    })
}

/// Parses a metadata file, refusing a format version we do not read by name.
fn parse_metadata(bytes: &[u8], display: &str) -> Result<TableMetadata> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        table_error(
            display,
            format!("the table's metadata file is not JSON: {e}"),
        )
    })?;
    match value
        .get("format-version")
        .and_then(serde_json::Value::as_u64)
    {
        Some(1 | 2) => {}
        Some(v) => {
            return Err(table_error(
                display,
                format!("Iceberg format version {v} is not supported (tfshard reads v1 and v2)"),
            ))
        }
        None => {
            return Err(table_error(
                display,
                "not Iceberg table metadata: no format-version",
            ))
        }
    }
    let metadata: TableMetadata = serde_json::from_value(value)
        .map_err(|e| table_error(display, format!("not Iceberg table metadata: {e}")))?;
    debug_assert!(metadata.format_version() <= FormatVersion::V2);
    Ok(metadata)
}

/// The snapshot `options` name: by id, current at a time, or the current one.
fn pick_snapshot(
    metadata: &TableMetadata,
    options: &IcebergOptions,
    location: &str,
) -> Result<Option<i64>> {
    let current = metadata.current_snapshot().map(|s| s.snapshot_id());
    let latest = || match current {
        Some(id) => format!("current {id}"),
        None => "the table has no snapshot yet".to_owned(),
    };
    if let Some(id) = options.snapshot_id {
        if metadata.snapshot_by_id(id).is_none() {
            return Err(table_error(
                location,
                format!("snapshot {id} does not exist ({})", latest()),
            ));
        }
        return Ok(Some(id));
    }
    let Some(timestamp) = &options.timestamp else {
        return Ok(current);
    };
    let at = parse_time(timestamp)?;
    let log = metadata.history();
    let Some(first) = log.first() else {
        return Err(table_error(location, "the table has no snapshot history"));
    };
    if at < first.timestamp_ms {
        return Err(table_error(
            location,
            format!(
                "timestamp {timestamp} is before the first snapshot ({} at {})",
                first.snapshot_id,
                rfc3339_ms(first.timestamp_ms)
            ),
        ));
    }
    let entry = log.iter().rfind(|l| l.timestamp_ms <= at).unwrap_or(first);
    if metadata.snapshot_by_id(entry.snapshot_id).is_none() {
        return Err(table_error(
            location,
            format!(
                "snapshot {} (current at {timestamp}) has expired from the table",
                entry.snapshot_id
            ),
        ));
    }
    Ok(Some(entry.snapshot_id))
}

/// A table's current metadata file, as its folder's listing found it (its reads pinned
/// to it): `metadata/version-hint.text`'s, else the newest `metadata/*.metadata.json`.
fn current_metadata_file(
    files: &dyn store::Storage,
    root: &Path,
    location: &str,
) -> Result<Object> {
    let name_of = |o: &Object| {
        let name = o.path.file_name().unwrap_or_default();
        name.to_string_lossy().into_owned()
    };
    // A folder that cannot be listed holds no metadata file (why is told below).
    let listed = files
        .list_dir(&root.join("metadata"))
        .map(|(found, _)| found)
        .unwrap_or_default();
    let names: Vec<String> = listed.iter().map(name_of).collect();
    // An unreadable hint is no hint: the newest metadata file.
    let hint = listed
        .iter()
        .find(|o| name_of(o) == "version-hint.text")
        .and_then(|o| files.read_whole(o).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    let current = current_metadata_name(hint.as_deref(), &names)
        .and_then(|name| listed.into_iter().find(|o| name_of(o) == name));
    if let Some(found) = current {
        return Ok(found);
    }
    let not_a_folder = || table_error(location, "not an Iceberg table: not a folder");
    Err(match files.is_dir(root) {
        Ok(true) => table_error(
            location,
            "not an Iceberg table: no metadata/*.metadata.json",
        ),
        Ok(false) => not_a_folder(),
        Err(e) if store::storage::is_not_found(&e) => not_a_folder(),
        Err(e) => e,
    })
}

/// Of the names in `metadata/`: the file `version-hint.text` names (a version N, or a
/// file name) when it is there, else the highest version.
fn current_metadata_name(hint: Option<&str>, names: &[String]) -> Option<String> {
    let metadata: Vec<&String> = names
        .iter()
        .filter(|n| metadata_version(n).is_some())
        .collect();
    if let Some(hint) = hint.map(str::trim).filter(|h| !h.is_empty()) {
        let hinted = metadata.iter().find(|n| {
            n.as_str() == hint
                || hint
                    .parse::<u64>()
                    .is_ok_and(|v| metadata_version(n) == Some(v) && n.starts_with('v'))
        });
        if let Some(n) = hinted {
            return Some((*n).clone());
        }
    }
    metadata
        .into_iter()
        .max_by(|a, b| (metadata_version(a), a.as_str()).cmp(&(metadata_version(b), b.as_str())))
        .cloned()
}

impl IcebergRead {
    /// Reads row group `row_group` (whose bytes in the file are `range`, as the crate
    /// counts them) with its deletes applied, calling `f` with each batch as our arrow.
    ///
    /// # Errors
    ///
    /// A data or delete file that cannot be read or decoded, naming the file; `f`'s own
    /// error is passed through.
    pub fn read_row_group(
        &self,
        range: Range<u64>,
        mut f: impl FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let mut task = self.task.clone();
        task.start = range.start;
        task.length = range.end - range.start;
        task.record_count = None;
        let reader = self.reader.clone();
        let failed = |e: iceberg::Error| self.storage.error(e, &self.display);
        let mut outcome: Result<()> = Ok(());
        // The crate decodes the user's files: its panics are contained, like our reader's.
        super::contain::contain(|| {
            store::block_on(async {
                let tasks = futures_util::stream::iter([Ok(task)]).boxed();
                let mut batches = match reader.read(tasks) {
                    Ok(scan) => scan.stream(),
                    Err(e) => return Err(failed(e)),
                };
                while let Some(batch) = batches.next().await {
                    let batch = bridge_batch(batch.map_err(failed)?)
                        .map_err(|e| e.with_file(&self.display))?;
                    if let Err(e) = f(batch) {
                        outcome = Err(e);
                        break;
                    }
                }
                Ok::<(), Error>(())
            })
        })
        .map_err(|panic| {
            table_error(
                &self.display,
                format!("the iceberg reader panicked: {panic}"),
            )
        })??;
        outcome
    }

    /// The root columns of a file's footer schema (`file` as our reader reads it) that
    /// hold the field ids `ids`: the bytes a worker's share counts.
    pub fn projection(
        &self,
        file: &parquet::arrow::arrow_reader::ArrowReaderMetadata,
    ) -> ProjectionMask {
        let ids = &self.task.project_field_ids;
        let roots: Option<Vec<usize>> = file
            .schema()
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let id: i32 = f.metadata().get(FIELD_ID_KEY)?.parse().ok()?;
                Some((i, id))
            })
            .map(|r| r.map(|(i, id)| ids.contains(&id).then_some(i)))
            .collect::<Option<Vec<Option<usize>>>>()
            .map(|v| v.into_iter().flatten().collect());
        match roots {
            Some(roots) => ProjectionMask::roots(file.parquet_schema(), roots),
            // A file without field ids (a migrated table's): count all of its columns.
            None => ProjectionMask::all(),
        }
    }
}

/// An Iceberg data file's read, for our Parquet reader: the `iceberg` crate reads each
/// row group, deletes applied, columns matched by field id.
#[derive(Debug)]
pub struct IcebergFileRead {
    read: Arc<IcebergRead>,
    /// The snapshot's schema, which the batches take.
    table: arrow_schema::SchemaRef,
}

impl IcebergFileRead {
    /// The read of a data file, for a snapshot whose schema is `table`.
    pub fn new(read: Arc<IcebergRead>, table: arrow_schema::SchemaRef) -> IcebergFileRead {
        IcebergFileRead { read, table }
    }
}

impl TableFileRead for IcebergFileRead {
    fn table_schema(&self) -> &arrow_schema::SchemaRef {
        &self.table
    }

    fn projection(
        &self,
        file: &parquet::arrow::arrow_reader::ArrowReaderMetadata,
    ) -> ProjectionMask {
        self.read.projection(file)
    }

    fn exact_rows(&self) -> bool {
        !self.read.has_deletes
    }

    fn delete_files(&self) -> Vec<String> {
        self.read.delete_files.clone()
    }

    /// The manifest entry's record count and the delete files that apply (a data file is
    /// never rewritten in place: its path is new each time).
    fn identity(&self) -> String {
        let mut deletes = self.read.delete_files.clone();
        deletes.sort();
        let joined = deletes.join("\n");
        format!(
            "iceberg:{}:{}:{:016x}",
            self.read.record_count.map_or(-1, |r| r as i64),
            deletes.len(),
            crate::hash::stable_hash(b'I', joined.as_bytes())
        )
    }

    /// The crate reads the row group's bytes (its row groups counted as the crate counts
    /// them: back to back after the magic), deletes applied. Batches are handed over in
    /// slices of about [`BATCH_BYTES`]; `f` gets the index of each slice's first record
    /// in the file's records (rows after deletes), as the crate cannot say which rows it
    /// dropped.
    fn read_row_group(
        &self,
        input: &ParquetInput,
        row_group: usize,
        first_row: u64,
        f: &mut dyn FnMut(RecordBatch, u64) -> Result<()>,
    ) -> Option<Result<()>> {
        let groups = input.metadata.metadata().row_groups();
        let start = 4 + groups[..row_group]
            .iter()
            .map(|g| g.compressed_size().max(0) as u64)
            .sum::<u64>();
        let length = groups[row_group].compressed_size().max(0) as u64;
        if length == 0 {
            return Some(Ok(()));
        }
        let mut at = first_row;
        Some(self.read.read_row_group(start..start + length, |batch| {
            let rows = batch.num_rows();
            let bytes = batch.get_array_memory_size() as u64;
            let step = rows_for(BATCH_BYTES, bytes, rows).clamp(1, rows.max(1));
            for begin in (0..rows).step_by(step) {
                let slice = batch.slice(begin, step.min(rows - begin));
                let first = at + begin as u64;
                f(slice, first).map_err(|e| e.shift_row(first).with_file(&input.file.display))?;
            }
            at += rows as u64;
            Ok(())
        }))
    }
}

/// Moves a batch of the crate's arrow into ours through the Arrow C data interface: the
/// buffers are shared, nothing is copied.
///
/// # Errors
///
/// An array the C data interface cannot carry.
pub fn bridge_batch(batch: arrow_array_58::RecordBatch) -> Result<RecordBatch> {
    let rows = batch.num_rows();
    let array: arrow_array_58::StructArray = batch.into();
    let (ffi_array, ffi_schema) =
        arrow_array_58::ffi::to_ffi(&arrow_array_58::Array::to_data(&array)).map_err(|e| {
            crate::error::Error::from(arrow_schema::ArrowError::CDataInterface(e.to_string()))
        })?;
    // SAFETY: both crates' FFI_ArrowArray and FFI_ArrowSchema are `#[repr(C)]` copies of
    // the C data interface's ArrowArray and ArrowSchema, the same size and layout; the
    // release callbacks they carry are the exporting (arrow 58) side's, which is what the
    // interface asks for. Ownership moves: the exported structs are forgotten, and ours
    // release them once.
    let (ffi_array, ffi_schema) = unsafe {
        (
            std::mem::transmute::<
                arrow_array_58::ffi::FFI_ArrowArray,
                arrow_array::ffi::FFI_ArrowArray,
            >(ffi_array),
            std::mem::transmute::<
                arrow_array_58::ffi::FFI_ArrowSchema,
                arrow_array::ffi::FFI_ArrowSchema,
            >(ffi_schema),
        )
    };
    // SAFETY: the structs hold a valid export (above), consumed once here.
    let data = unsafe { arrow_array::ffi::from_ffi(ffi_array, &ffi_schema) }?;
    let (fields, columns, _) = StructArray::from(data).into_parts();
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows));
    Ok(RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        columns,
        &options,
    )?)
}

/// The crate's Arrow schema as ours, through the C data interface.
fn bridge_schema(schema: &arrow_schema_58::Schema) -> Result<Schema> {
    let ffi = arrow_schema_58::ffi::FFI_ArrowSchema::try_from(schema).map_err(|e| {
        crate::error::Error::from(arrow_schema::ArrowError::CDataInterface(e.to_string()))
    })?;
    // SAFETY: as in `bridge_batch`: the same C struct on both sides.
    let ffi = unsafe {
        std::mem::transmute::<
            arrow_schema_58::ffi::FFI_ArrowSchema,
            arrow_schema::ffi::FFI_ArrowSchema,
        >(ffi)
    };
    Ok(Schema::try_from(&ffi)?)
}

/// The crate's file I/O: our own local and store reads, read-only. Paths under the
/// location the metadata records are read under where the table is now (a table copied
/// elsewhere still reads); others as written. The first error of ours is kept whole, so
/// that the crate's wrapping of it does not hide which file and why.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct TableStorage {
    #[serde(skip)]
    inner: Option<Arc<StorageInner>>,
}

/// Where a table is now: its files' storage, its folder there, and how the manifest
/// names its files ([`store::storage::shown`]).
#[derive(Debug)]
struct Where {
    files: Arc<dyn store::Storage>,
    dir: PathBuf,
    shown: String,
}

#[derive(Debug)]
struct StorageInner {
    /// The table location its metadata records, normalized (a `file:` URI as a path).
    recorded: String,
    /// Where the table is now.
    table: Where,
    io: IoOptions,
    /// The table's files found so far, by path relative to the table: their sizes and
    /// ETags (store reads pin them).
    found: Mutex<HashMap<String, Object>>,
    failure: Mutex<Option<Error>>,
}

/// A path with a `file:` URI's scheme removed.
fn normalize(path: &str) -> &str {
    if let Some(rest) = path.strip_prefix("file://") {
        return rest;
    }
    path.strip_prefix("file:").unwrap_or(path)
}

/// Where one path of the metadata is read.
struct Target {
    files: Arc<dyn store::Storage>,
    path: PathBuf,
    /// The file as found, when it was (its reads pinned to its ETag).
    found: Option<Object>,
}

impl Target {
    /// The file: as found, else found now.
    async fn object(&self) -> Result<Object> {
        match &self.found {
            Some(object) => Ok(object.clone()),
            None => self.files.head_async(&self.path).await,
        }
    }
}

impl TableStorage {
    fn new(recorded: &str, table: Where, io: IoOptions) -> TableStorage {
        TableStorage {
            inner: Some(Arc::new(StorageInner {
                recorded: normalize(recorded).trim_end_matches('/').to_owned(),
                table,
                io,
                found: Mutex::default(),
                failure: Mutex::default(),
            })),
        }
    }

    fn inner(&self) -> iceberg::Result<&StorageInner> {
        self.inner.as_deref().ok_or_else(|| {
            iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                "tfshard's table storage was not set up",
            )
        })
    }

    /// A path of the metadata relative to the table location (the whole path when it
    /// lies outside).
    fn relative(&self, path: &str) -> String {
        let Some(inner) = self.inner.as_deref() else {
            return path.to_owned();
        };
        let normal = normalize(path);
        match normal
            .strip_prefix(inner.recorded.as_str())
            .and_then(|r| r.strip_prefix('/'))
        {
            Some(rel) => rel.to_owned(),
            None => path.to_owned(),
        }
    }

    /// Where `path` is read.
    fn target(&self, path: &str) -> Result<Target> {
        let inner = self.inner().map_err(|e| table_error(path, explain(&e)))?;
        let rel = self.relative(path);
        if rel != path {
            let found = inner.found.lock().unwrap_or_else(|p| p.into_inner());
            return Ok(Target {
                files: inner.table.files.clone(),
                path: inner.table.dir.join(&rel),
                found: found.get(&rel).cloned(),
            });
        }
        let outside = Path::new(normalize(path));
        let found = inner.found.lock().unwrap_or_else(|p| p.into_inner());
        Ok(Target {
            files: store::storage_of(outside, inner.io)?,
            path: store::storage::resolve(outside, inner.io)?,
            found: found.get(path).cloned(),
        })
    }

    /// How the manifest names `path`: below the table as the table is named, else by
    /// itself.
    fn shown(&self, rel: &str, path: &str) -> String {
        match self.inner.as_deref() {
            Some(inner) if rel != path => format!("{}/{rel}", inner.table.shown),
            Some(inner) => {
                store::storage::shown(Path::new(path), inner.io).unwrap_or_else(|_| path.to_owned())
            }
            None => path.to_owned(),
        }
    }

    /// Keeps our error whole for [`TableStorage::error`] and hands the crate its text.
    fn fail(&self, e: Error) -> iceberg::Error {
        let text = e.to_string();
        if let Some(inner) = self.inner.as_deref() {
            inner
                .failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e);
        }
        iceberg::Error::new(iceberg::ErrorKind::Unexpected, text)
    }

    /// The crate's error as ours: the error of ours it wraps, else its text, naming
    /// `file`.
    fn error(&self, e: iceberg::Error, file: &str) -> Error {
        let kept = self
            .inner
            .as_deref()
            .and_then(|i| i.failure.lock().unwrap_or_else(|p| p.into_inner()).take());
        kept.unwrap_or_else(|| table_error(file, explain(&e)))
    }

    /// The table's files `rels` (paths relative to it), found in one go: one listing in
    /// a store, a stat each on disk. Their ETags then pin the crate's reads. A missing
    /// one is `missing(rel)`.
    fn find(
        &self,
        rels: &[String],
        missing: impl Fn(&str) -> Error,
    ) -> Result<HashMap<String, Object>> {
        let inner = self.inner().map_err(|e| table_error("", explain(&e)))?;
        let (files, dir) = (&inner.table.files, &inner.table.dir);
        let objects = files.find(dir, rels)?;
        let found = rels
            .iter()
            .zip(objects)
            .map(|(rel, o)| Ok((rel.clone(), o.ok_or_else(|| missing(rel))?)))
            .collect::<Result<HashMap<String, Object>>>()?;
        let mut known = inner.found.lock().unwrap_or_else(|p| p.into_inner());
        known.extend(found.iter().map(|(k, v)| (k.clone(), v.clone())));
        Ok(found)
    }

    /// A data file as our Parquet reader opens it: as [`TableStorage::find`] found it,
    /// or (outside the table) found now.
    fn input_file(
        &self,
        rel: &str,
        path: &str,
        found: &HashMap<String, Object>,
        missing: impl Fn(&str) -> Error,
    ) -> Result<InputFile> {
        let target = self.target(path)?;
        let object = match found.get(rel) {
            Some(object) => object.clone(),
            None => {
                // Outside the table: found now, and its reads pinned to what was found.
                let object = target.files.head(&target.path).map_err(|_| missing(rel))?;
                if let Some(inner) = self.inner.as_deref() {
                    let mut known = inner.found.lock().unwrap_or_else(|p| p.into_inner());
                    known.insert(rel.to_owned(), object.clone());
                }
                object
            }
        };
        let blob = Blob::new(target.files, object);
        Ok(InputFile::new(blob, self.shown(rel, path)))
    }

    /// A delete file, for the manifest.
    fn side_file(
        &self,
        rel: &str,
        path: &str,
        found: &HashMap<String, Object>,
        bytes: u64,
    ) -> SideFile {
        SideFile {
            display: self.shown(rel, path),
            bytes,
            etag: found.get(rel).and_then(|o| o.etag.clone()),
            identity: found.get(rel).and_then(|o| o.identity.clone()),
        }
    }

    async fn size(&self, path: &str) -> Result<u64> {
        Ok(self.target(path)?.object().await?.size)
    }

    async fn read_all(&self, path: &str) -> Result<Bytes> {
        let target = self.target(path)?;
        match &target.found {
            Some(object) if object.size == 0 => Ok(Bytes::new()),
            Some(object) => {
                let whole = 0..object.size;
                target.files.read_range_async(object, whole).await
            }
            None => target.files.read_async(&target.path).await,
        }
    }

    fn read_only(&self) -> iceberg::Error {
        iceberg::Error::new(
            iceberg::ErrorKind::FeatureUnsupported,
            "tfshard reads Iceberg tables, it never writes them",
        )
    }
}

/// Ranged reads of one file, pinned to it as found.
struct RangeRead {
    files: Arc<dyn store::Storage>,
    object: Object,
    storage: TableStorage,
}

#[async_trait::async_trait]
impl FileRead for RangeRead {
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        let bytes = self.files.read_range_async(&self.object, range).await;
        bytes.map_err(|e| self.storage.fail(e))
    }
}

#[async_trait::async_trait]
#[typetag::serde(name = "tfshard")]
impl Storage for TableStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        Ok(self.size(path).await.is_ok())
    }

    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        let size = self.size(path).await.map_err(|e| self.fail(e))?;
        Ok(FileMetadata { size })
    }

    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        self.read_all(path).await.map_err(|e| self.fail(e))
    }

    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        let target = self.target(path).map_err(|e| self.fail(e))?;
        let object = target.object().await.map_err(|e| self.fail(e))?;
        Ok(Box::new(RangeRead {
            files: target.files,
            object,
            storage: self.clone(),
        }))
    }

    async fn write(&self, _path: &str, _bs: Bytes) -> iceberg::Result<()> {
        Err(self.read_only())
    }

    async fn writer(&self, _path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        Err(self.read_only())
    }

    async fn delete(&self, _path: &str) -> iceberg::Result<()> {
        Err(self.read_only())
    }

    async fn delete_prefix(&self, _path: &str) -> iceberg::Result<()> {
        Err(self.read_only())
    }

    async fn delete_stream(
        &self,
        _paths: futures_util::stream::BoxStream<'static, String>,
    ) -> iceberg::Result<()> {
        Err(self.read_only())
    }

    fn new_input(&self, path: &str) -> iceberg::Result<IcebergInput> {
        Ok(IcebergInput::new(Arc::new(self.clone()), path.to_owned()))
    }

    fn new_output(&self, _path: &str) -> iceberg::Result<OutputFile> {
        Err(self.read_only())
    }
}

#[typetag::serde(name = "tfshard")]
impl StorageFactory for TableStorage {
    fn build(&self, _config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(self.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_file_names_and_the_current_one() {
        assert_eq!(metadata_version("v12.metadata.json"), Some(12));
        assert_eq!(metadata_version("v3.gz.metadata.json"), Some(3));
        assert_eq!(
            metadata_version("00012-6c1d0e4a-1f7b-4b5e-9a55-0d1b2c3d4e5f.metadata.json"),
            Some(12)
        );
        assert_eq!(metadata_version("snap-1-1-abc.avro"), None);
        assert_eq!(metadata_version("version-hint.text"), None);
        let names: Vec<String> = [
            "v1.metadata.json",
            "v2.metadata.json",
            "v10.metadata.json",
            "x.avro",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            current_metadata_name(None, &names).as_deref(),
            Some("v10.metadata.json")
        );
        assert_eq!(
            current_metadata_name(Some("2\n"), &names).as_deref(),
            Some("v2.metadata.json")
        );
        // A hint naming no file: the newest.
        assert_eq!(
            current_metadata_name(Some("7"), &names).as_deref(),
            Some("v10.metadata.json")
        );
        assert_eq!(current_metadata_name(None, &["x.avro".into()]), None);
    }

    #[test]
    fn paths_under_the_recorded_location_read_where_the_table_is() {
        let storage = TableStorage::new(
            "file:///tmp/writer/warehouse/events/",
            Where {
                files: Arc::new(store::storage::LocalFiles),
                dir: PathBuf::from("/data/events"),
                shown: "tables/events".into(),
            },
            IoOptions::new(),
        );
        assert_eq!(
            storage.relative("file:///tmp/writer/warehouse/events/data/a.parquet"),
            "data/a.parquet"
        );
        assert_eq!(
            storage.relative("/tmp/writer/warehouse/events/metadata/m.avro"),
            "metadata/m.avro"
        );
        assert_eq!(
            storage.relative("/tmp/writer/warehouse/eventsX/a"),
            "/tmp/writer/warehouse/eventsX/a"
        );
        let path = "file:/tmp/writer/warehouse/events/data/a.parquet";
        let target = storage.target(path).unwrap();
        assert_eq!(target.path, PathBuf::from("/data/events/data/a.parquet"));
        assert_eq!(
            storage.shown(&storage.relative(path), path),
            "tables/events/data/a.parquet"
        );
        let outside = "file:/elsewhere/b.parquet";
        let target = storage.target(outside).unwrap();
        assert_eq!(target.path, PathBuf::from("/elsewhere/b.parquet"));
        assert_eq!(
            storage.shown(outside, outside),
            outside,
            "as the metadata names it"
        );
    }

    #[test]
    fn batches_cross_the_c_data_interface_without_a_copy() {
        use arrow_array_58::{Int64Array, ListArray, StringArray};
        let ids = Arc::new(Int64Array::from(vec![Some(1), None, Some(3)]));
        let names = Arc::new(StringArray::from(vec!["a", "bb", "ccc"]));
        let lists = Arc::new(ListArray::from_iter_primitive::<
            arrow_array_58::types::Float32Type,
            _,
            _,
        >(vec![
            Some(vec![Some(1.0), Some(2.0)]),
            None,
            Some(vec![]),
        ]));
        let values_ptr = ids.values().as_ptr();
        let batch = arrow_array_58::RecordBatch::try_from_iter([
            ("id", ids as arrow_array_58::ArrayRef),
            ("name", names as _),
            ("emb", lists as _),
        ])
        .unwrap();
        let ours = bridge_batch(batch).unwrap();
        assert_eq!(ours.num_rows(), 3);
        assert!(
            matches!(ours.schema().field(2).data_type(),
                arrow_schema::DataType::List(f) if f.data_type() == &arrow_schema::DataType::Float32),
            "{}",
            ours.schema()
        );
        let id = ours
            .column(0)
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap();
        assert_eq!(id.iter().collect::<Vec<_>>(), vec![Some(1), None, Some(3)]);
        assert_eq!(
            id.values().as_ptr(),
            values_ptr,
            "the buffer is shared, not copied"
        );
        let name = ours
            .column(1)
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .unwrap();
        assert_eq!(name.value(2), "ccc");
    }
}
