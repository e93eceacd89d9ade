//! Delta Lake tables: one snapshot, planned by `delta_kernel` (the Delta project's own
//! Rust reader), read by our Parquet reader.
//!
//! The kernel replays the log (commits, classic, multi-part and v2 checkpoints with their
//! sidecars), checks the protocol (a reader feature it cannot honour is its error, named),
//! and lists the snapshot's data files with their deletion vectors, partition values and
//! the expression that turns a file's physical columns into the table's logical ones
//! (column mapping, partition values typed by the schema). We keep what our Parquet
//! reading gives a store (ranged reads, read-ahead, ETag pinning, contained decoder
//! panics): each data file is a [`ParquetInput`](super::parquet::ParquetInput), and
//! [`DeltaRead::adapt`] turns its batches into the snapshot's rows: columns matched by
//! field id or physical name (a column added later is null in older files), the kernel's
//! expression evaluated on them, deleted rows dropped.
//!
//! Record order is the contract's: data files in byte order of their path relative to
//! the table root (decoded), rows in file order.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use arrow_array::{Array, BooleanArray, RecordBatch, RecordBatchOptions};
use arrow_schema::{DataType, FieldRef, Schema};
use delta_kernel::engine::arrow_conversion::TryFromKernel;
use delta_kernel::engine::arrow_data::ArrowEngineData;
use delta_kernel::engine::arrow_utils::{fixup_parquet_read, parquet_read_plan, ReorderIndex};
use delta_kernel::expressions::ExpressionRef;
use delta_kernel::scan::state::ScanFile;
use delta_kernel::schema::{ColumnMetadataKey, MetadataValue, StructType};
use delta_kernel::snapshot::{Snapshot, SnapshotRef};
use delta_kernel::{Engine, ExpressionEvaluator};
use delta_kernel_default_engine::executor::tokio::TokioMultiThreadExecutor;
use delta_kernel_default_engine::DefaultEngine;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::ProjectionMask;
use url::Url;

use super::parquet::{InputFile, TableFileRead};
use super::table::{parse_time, table_error, SideFile};
use crate::error::{Error, ErrorKind, Result};
use crate::manifest::{rfc3339_ms, TableInfo};
use crate::store::storage::Stat;
use crate::store::{self, Blob, Object, Storage};

/// Which snapshot to read, and which of its partitions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeltaOptions {
    /// `--version N`: the table as of commit N (default: the latest).
    pub version: Option<u64>,
    /// `--timestamp T` (RFC 3339): the last commit at or before T.
    pub timestamp: Option<String>,
    /// `--partition-filter KEY=VALUE`: keep the data files of these partition values
    /// (all must hold; values as the log writes them).
    pub partition_filters: Vec<(String, String)>,
}

/// A Delta table at one snapshot.
pub struct DeltaTable {
    /// The table as given (errors and the manifest name it so).
    pub location: String,
    /// Where the table's files are, and the table's folder there.
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    /// How the manifest names the table's files ([`store::storage::shown`]).
    shown: String,
    io: store::IoOptions,
    root: Url,
    engine: Arc<dyn Engine>,
    /// None for a table with no commit yet (it reads as no rows).
    snapshot: Option<SnapshotRef>,
    /// The snapshot's commit time, ms since the epoch.
    pub timestamp_ms: Option<i64>,
    /// The log file that defines the snapshot (its commit, else its checkpoint).
    pub log_file: Option<SideFile>,
    /// The table's logical schema, as Arrow.
    pub schema: Schema,
    /// `_delta_log/`'s files, by name (errors look there for the corrupt one).
    listing: BTreeMap<String, delta_kernel::FileMeta>,
}

impl std::fmt::Debug for DeltaTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaTable")
            .field("location", &self.location)
            .field("version", &self.version())
            .finish_non_exhaustive()
    }
}

/// A kernel error, one line, naming the table.
fn kernel<E: std::fmt::Display>(table: &str) -> impl Fn(E) -> Error + '_ {
    move |e| {
        Error::new(ErrorKind::Table {
            detail: one_line(&e),
        })
        .with_file(table)
    }
}

/// An error's message without the backtrace the kernel appends on its lines below.
fn one_line(e: &impl std::fmt::Display) -> String {
    let text = e.to_string();
    text.lines()
        .next()
        .unwrap_or_default()
        .trim_end()
        .to_owned()
}

/// Whether a kernel type holds a variant anywhere.
fn has_variant(t: &delta_kernel::schema::DataType) -> bool {
    use delta_kernel::schema::DataType as T;
    match t {
        T::Variant(_) => true,
        T::Array(a) => has_variant(a.element_type()),
        T::Map(m) => has_variant(m.key_type()) || has_variant(m.value_type()),
        T::Struct(s) => s.fields().any(|f| has_variant(f.data_type())),
        _ => false,
    }
}

/// `_delta_log/{version:020}.json`'s version, for a commit file's name.
fn commit_version(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".json")?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

/// A commit's time from its JSON lines: `commitInfo.inCommitTimestamp`, else
/// `commitInfo.timestamp`.
fn commit_info_time(bytes: &[u8]) -> Option<i64> {
    for line in bytes.split(|&b| b == b'\n') {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(line) else {
            continue;
        };
        if let Some(info) = value.get("commitInfo") {
            return info
                .get("inCommitTimestamp")
                .and_then(serde_json::Value::as_i64)
                .or_else(|| info.get("timestamp").and_then(serde_json::Value::as_i64));
        }
    }
    None
}

/// The first line of a log file that is not a JSON object, 1-based.
fn bad_json_line(bytes: &[u8]) -> Option<usize> {
    bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace))
        .find(|(_, l)| {
            !matches!(
                serde_json::from_slice::<serde_json::Value>(l),
                Ok(serde_json::Value::Object(_))
            )
        })
        .map(|(i, _)| i + 1)
}

impl DeltaTable {
    /// Opens the table's snapshot: `options.version`, the last commit at or before
    /// `options.timestamp`, or the latest.
    ///
    /// # Errors
    ///
    /// Not a Delta table, a version that does not exist, a timestamp before the first
    /// commit, a corrupt log, a reader feature the kernel cannot honour.
    pub fn open(table: &Path, options: &DeltaOptions, io: store::IoOptions) -> Result<DeltaTable> {
        let location = table.display().to_string();
        let location = location.trim_end_matches('/').to_owned();
        let storage = store::storage_of(table, io)?;
        let dir = storage.canonical(&store::storage::resolve(table, io)?);
        let shown = store::storage::shown(table, io)?;
        // The log first (one listing in a store); on failure, why: not there, a file,
        // or a folder without a log.
        let no_log = || table_error(&location, "not a Delta table: no _delta_log/");
        let log = storage.is_dir(&dir.join("_delta_log"));
        if !matches!(log, Ok(true)) {
            return Err(match (storage.stat(&dir), log) {
                (Ok(Stat::File(_)), _) => table_error(&location, "not a Delta table: not a folder"),
                (Ok(Stat::Dir), Err(e)) if !store::storage::is_not_found(&e) => e,
                (Ok(Stat::Dir), _) => no_log(),
                (Err(e), _) => e.at_file(&location),
            });
        }
        let (object_store, root) = storage.object_store(&dir)?;
        let executor = Arc::new(TokioMultiThreadExecutor::new(store::runtime_handle()));
        let engine: Arc<dyn Engine> = Arc::new(
            DefaultEngine::builder(object_store)
                .with_task_executor(executor)
                .build(),
        );
        let log = Log {
            location: &location,
            root: &root,
            engine: engine.as_ref(),
        };
        let listing = log.listing()?;
        let no_commit = !listing
            .keys()
            .any(|n| commit_version(n).is_some() || n.contains(".checkpoint"));
        if no_commit && options.version.is_none() && options.timestamp.is_none() {
            // A table being created: no snapshot yet, which reads as no rows.
            return Ok(DeltaTable {
                location,
                storage,
                dir,
                shown,
                io,
                root,
                engine,
                snapshot: None,
                timestamp_ms: None,
                log_file: None,
                schema: Schema::empty(),
                listing,
            });
        }
        let version = match (&options.version, &options.timestamp) {
            (Some(v), _) => Some(*v),
            (None, Some(t)) => Some(log.version_at(t, &listing)?),
            (None, None) => None,
        };
        let snapshot = log.snapshot(version, &listing)?;
        let version = snapshot.version();
        let (timestamp_ms, log_file) = log.commit(version, &listing, &*storage, &dir, &snapshot)?;
        let schema =
            Schema::try_from_kernel(snapshot.schema().as_ref()).map_err(kernel(&location))?;
        Ok(DeltaTable {
            location,
            storage,
            dir,
            shown,
            io,
            root,
            engine,
            snapshot: Some(snapshot),
            timestamp_ms: Some(timestamp_ms),
            log_file: Some(log_file),
            schema,
            listing,
        })
    }

    /// Refuses a selection that holds variant columns (reader feature `variantType`):
    /// `selected` says whether a top-level column is converted.
    ///
    /// # Errors
    ///
    /// The first selected column that holds variants, named.
    pub fn refuse_variants(&self, selected: impl Fn(&str) -> bool) -> Result<()> {
        let Some(snapshot) = &self.snapshot else {
            return Ok(());
        };
        for field in snapshot.schema().fields() {
            if has_variant(field.data_type()) && selected(field.name()) {
                return Err(table_error(
                    &self.location,
                    format!(
                        "column {:?} holds variants (reader feature 'variantType'), which have \
                         no tf.train.Feature mapping: skip it with --exclude {}",
                        field.name(),
                        field.name()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A kernel error met while planning, explained like one met while opening.
    fn explain(&self, e: delta_kernel::KernelError) -> Error {
        let log = Log {
            location: &self.location,
            root: &self.root,
            engine: self.engine.as_ref(),
        };
        log.explain(e, &self.listing)
    }

    /// The snapshot's version (none for a table with no commit yet).
    pub fn version(&self) -> Option<u64> {
        self.snapshot.as_ref().map(|s| s.version())
    }

    /// The manifest's `table`.
    pub fn info(&self) -> TableInfo {
        TableInfo::delta(&self.location, self.version(), self.timestamp_ms)
    }

    /// The scan of the logical columns `roots`: what its files share, its files in
    /// record order (relative path, the kernel's description), their deletion vectors.
    #[allow(clippy::type_complexity)]
    fn scan(
        &self,
        snapshot: &SnapshotRef,
        roots: &[usize],
        filters: &[(String, String)],
    ) -> Result<(
        Arc<ScanShape>,
        Vec<(String, ScanFile)>,
        HashMap<String, Url>,
    )> {
        let full = snapshot.schema();
        let fields: Vec<_> = roots
            .iter()
            .filter_map(|&r| full.field_at_index(r).cloned())
            .collect();
        let projected = Arc::new(StructType::try_new(fields).map_err(kernel(&self.location))?);
        let scan = snapshot
            .clone()
            .scan_builder()
            .with_schema(projected)
            .build()
            .map_err(kernel(&self.location))?;
        let shape = Arc::new(ScanShape {
            engine: self.engine.clone(),
            physical: scan.physical_schema().clone(),
            logical: scan.logical_schema().clone(),
        });
        let mut files: Vec<ScanFile> = Vec::new();
        let mut dv_paths: HashMap<String, Url> = HashMap::new();
        for metadata in scan
            .scan_metadata(self.engine.as_ref())
            .map_err(|e| self.explain(e))?
        {
            let metadata = metadata.map_err(|e| self.explain(e))?;
            deletion_vector_files(&metadata.scan_files, &self.root, &mut dv_paths)
                .map_err(kernel(&self.location))?;
            files = metadata
                .visit_scan_files(files, |files: &mut Vec<ScanFile>, file| files.push(file))
                .map_err(kernel(&self.location))?;
        }
        // Partition filters name logical columns; the log keys partition values by the
        // physical name.
        let mut wanted: Vec<(String, &str)> = Vec::new();
        for (key, value) in filters {
            let Some(field) = full.field(key) else {
                return Err(Error::invalid_option(
                    "partition-filter",
                    format!("{key:?} is not a column of the table"),
                ));
            };
            let physical =
                match field.get_config_value(&ColumnMetadataKey::ColumnMappingPhysicalName) {
                    Some(MetadataValue::String(p)) => p.clone(),
                    _ => key.clone(),
                };
            if !files.is_empty()
                && !files
                    .iter()
                    .any(|f| f.partition_values.contains_key(&physical))
            {
                return Err(Error::invalid_option(
                    "partition-filter",
                    format!("{key:?} is not a partition column of the table"),
                ));
            }
            wanted.push((physical, value));
        }
        files.retain(|f| {
            wanted
                .iter()
                .all(|(k, v)| f.partition_values.get(k).map(String::as_str) == Some(*v))
        });
        let mut planned: Vec<(String, ScanFile)> = files
            .into_iter()
            .map(|f| (self.relative(&f.path), f))
            .collect();
        planned.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        Ok((shape, planned, dv_paths))
    }

    /// The snapshot's data files that a scan of the logical columns `roots` reads, as
    /// paths relative to the table root, in record order: the plan without a look at
    /// the files themselves.
    ///
    /// # Errors
    ///
    /// A log the kernel cannot replay, a partition filter on a column that is not a
    /// partition column.
    pub fn scan_files(&self, roots: &[usize], filters: &[(String, String)]) -> Result<Vec<String>> {
        let Some(snapshot) = &self.snapshot else {
            return Ok(Vec::new());
        };
        let (_, planned, _) = self.scan(snapshot, roots, filters)?;
        Ok(planned.into_iter().map(|(rel, _)| rel).collect())
    }

    /// Plans the scan of the logical columns `roots` (indices of [`DeltaTable::schema`],
    /// ascending): the snapshot's data files in record order, each with what turns its
    /// batches into the table's rows; then the deletion vector files read.
    ///
    /// # Errors
    ///
    /// A log the kernel cannot replay, a partition filter on a column that is not a
    /// partition column, a data file the log names that the table lacks.
    pub fn plan(
        &self,
        roots: &[usize],
        filters: &[(String, String)],
    ) -> Result<(Vec<DeltaFile>, Vec<SideFile>)> {
        let Some(snapshot) = &self.snapshot else {
            return Ok((Vec::new(), Vec::new()));
        };
        let (shape, planned, dv_paths) = self.scan(snapshot, roots, filters)?;
        let in_table: Vec<String> = planned
            .iter()
            .filter(|(rel, _)| !rel.contains("://"))
            .map(|(rel, _)| rel.clone())
            .collect();
        let objects = self.objects(&in_table)?;
        let mut out = Vec::with_capacity(planned.len());
        let mut side: Vec<SideFile> = Vec::new();
        let mut seen_dv = std::collections::HashSet::new();
        for (rel, file) in planned {
            // The deleted rows' indexes (8 bytes per deleted row, not a flag per row).
            let deleted = file
                .dv_info
                .get_row_indexes(self.engine.as_ref(), &self.root)
                .map_err(|e| {
                    kernel(&self.location)(e).with_file(format!("{}/{rel}", self.location))
                })?
                .map(|mut rows| {
                    rows.sort_unstable();
                    rows.dedup();
                    rows
                });
            let mut dv_file = None;
            if let Some(dv) = dv_paths.get(&file.path) {
                if seen_dv.insert(dv.clone()) {
                    side.push(self.side_file(dv)?);
                }
                dv_file = Some(format!("{}/{}", self.shown, self.relative(dv.as_str())));
            }
            let input = self.input_file(&rel, &objects)?;
            // The log's record of the file: the add action's time, and the rows its
            // deletion vector drops (a new vector, inline or in a file, drops others).
            let dropped = deleted.as_ref().map_or(0, |rows| {
                let bytes: Vec<u8> = rows.iter().flat_map(|r| r.to_le_bytes()).collect();
                crate::hash::stable_hash(b'D', &bytes)
            });
            let identity = format!(
                "delta:{}:{}:{dropped:016x}",
                file.modification_time,
                deleted.as_ref().map_or(0, Vec::len)
            );
            out.push(DeltaFile {
                input,
                read: Arc::new(DeltaRead {
                    shape: shape.clone(),
                    transform: file.transform.clone(),
                    deleted,
                    dv_file,
                    identity,
                    evaluator: OnceLock::new(),
                }),
            });
        }
        Ok((out, side))
    }

    /// A data file's path relative to the table root, decoded (an absolute URI outside
    /// the table stays whole).
    fn relative(&self, path: &str) -> String {
        let decode = |p: &str| {
            percent_encoding::percent_decode_str(p)
                .decode_utf8_lossy()
                .into_owned()
        };
        if path.contains("://") {
            let root = self.root.as_str();
            return match path.strip_prefix(root) {
                Some(rel) => decode(rel),
                None => decode(path),
            };
        }
        decode(path)
    }

    /// The data files `rels` (paths relative to the table) found in one go: one
    /// listing in a store, a stat each on disk.
    ///
    /// # Errors
    ///
    /// The first one missing (or a folder), named as the log names it.
    fn objects(&self, rels: &[String]) -> Result<HashMap<String, Object>> {
        let found = self.storage.find(&self.dir, rels)?;
        rels.iter()
            .zip(found)
            .map(|(rel, object)| Ok((rel.clone(), object.ok_or_else(|| self.missing(rel))?)))
            .collect()
    }

    /// A data file the log names that the table lacks.
    fn missing(&self, rel: &str) -> Error {
        table_error(
            &self.location,
            format!(
                "data file {rel} is named by the log of version {} but is missing from the table",
                self.version().unwrap_or_default()
            ),
        )
    }

    /// The data file `rel` as an input, as [`DeltaTable::objects`] found it (in a
    /// store, its ETag pins every read), or an absolute path outside the table (a
    /// shallow clone's) in the table's own storage, named by itself: a table's log
    /// never makes tfshard read another storage (a store's log naming local files).
    fn input_file(&self, rel: &str, objects: &HashMap<String, Object>) -> Result<InputFile> {
        let object = match objects.get(rel) {
            Some(object) => object.clone(),
            None => {
                let path = store::storage::resolve(Path::new(rel), self.io)?;
                let object = self.storage.head(&path).map_err(|_| self.missing(rel))?;
                let blob = Blob::new(self.storage.clone(), object);
                return Ok(InputFile::new(
                    blob,
                    store::storage::shown(Path::new(rel), self.io)?,
                ));
            }
        };
        let blob = Blob::new(self.storage.clone(), object);
        Ok(InputFile::new(blob, format!("{}/{rel}", self.shown)))
    }

    /// A deletion vector file, for the manifest.
    fn side_file(&self, url: &Url) -> Result<SideFile> {
        let rel = self.relative(url.as_str());
        let display = format!("{}/{rel}", self.shown);
        let object = self
            .storage
            .head(&self.dir.join(&rel))
            .map_err(|e| e.at_file(&display))?;
        Ok(SideFile {
            display,
            bytes: object.size,
            etag: object.etag,
            identity: object.identity,
        })
    }
}

/// The deletion vector files the selected rows of `scan_files` name, by data file path.
fn deletion_vector_files(
    scan_files: &delta_kernel::engine_data::FilteredEngineData,
    root: &Url,
    out: &mut HashMap<String, Url>,
) -> delta_kernel::KernelResult<()> {
    use arrow_array::cast::AsArray;
    let Some(data) = scan_files
        .data()
        .any_ref()
        .downcast_ref::<ArrowEngineData>()
    else {
        return Ok(());
    };
    let batch = data.record_batch();
    let (Some(paths), Some(dvs)) = (
        batch.column_by_name("path"),
        batch.column_by_name("deletionVector"),
    ) else {
        return Ok(());
    };
    let dvs = dvs.as_struct();
    let text = |name: &str, row: usize| -> Option<String> {
        let column = dvs.column_by_name(name)?;
        let column = arrow_cast::cast(column, &arrow_schema::DataType::Utf8).ok()?;
        let column = column.as_string::<i32>();
        column.is_valid(row).then(|| column.value(row).to_owned())
    };
    let number = |name: &str, row: usize| -> Option<i64> {
        let column = dvs.column_by_name(name)?;
        let column = arrow_cast::cast(column, &arrow_schema::DataType::Int64).ok()?;
        let column = column.as_primitive::<arrow_array::types::Int64Type>();
        column.is_valid(row).then(|| column.value(row))
    };
    let paths = arrow_cast::cast(paths, &arrow_schema::DataType::Utf8)
        .map_err(|e| delta_kernel::KernelError::generic(e.to_string()))?;
    let paths = paths.as_string::<i32>();
    let selected = scan_files.selection_vector();
    for row in 0..batch.num_rows() {
        if !selected.get(row).copied().unwrap_or(true) || !dvs.is_valid(row) || paths.is_null(row) {
            continue;
        }
        let (Some(kind), Some(path)) = (text("storageType", row), text("pathOrInlineDv", row))
        else {
            continue;
        };
        let descriptor: delta_kernel::actions::deletion_vector::DeletionVectorDescriptor =
            match serde_json::from_value(serde_json::json!({
                "storageType": kind,
                "pathOrInlineDv": path,
                "offset": number("offset", row),
                "sizeInBytes": number("sizeInBytes", row).unwrap_or(0),
                "cardinality": number("cardinality", row).unwrap_or(0),
            })) {
                Ok(d) => d,
                Err(_) => continue,
            };
        if let Some(url) = descriptor.absolute_path(root)? {
            out.insert(paths.value(row).to_owned(), url);
        }
    }
    Ok(())
}

/// A multi-part checkpoint that lacks a part, described: `{v:020}.checkpoint.{i:010}.{n:010}.parquet`
/// for i in 1..=n must all be there.
fn missing_checkpoint_part<'a>(names: impl Iterator<Item = &'a String>) -> Option<String> {
    let mut parts: BTreeMap<(u64, u64), Vec<u64>> = BTreeMap::new();
    for name in names {
        let fields: Vec<&str> = name.split('.').collect();
        if let [v, "checkpoint", i, n, "parquet"] = fields[..] {
            if let (Ok(v), Ok(i), Ok(n)) = (v.parse(), i.parse(), n.parse()) {
                parts.entry((v, n)).or_default().push(i);
            }
        }
    }
    parts.iter().rev().find_map(|(&(v, n), have)| {
        let missing = (1..=n).find(|i| !have.contains(i))?;
        Some(format!(
            "the checkpoint of version {v} is missing part {missing} of {n} \
             (_delta_log/{v:020}.checkpoint.{missing:010}.{n:010}.parquet)"
        ))
    })
}

/// The log: listing, commit times, snapshots.
struct Log<'a> {
    location: &'a str,
    root: &'a Url,
    engine: &'a dyn Engine,
}

impl Log<'_> {
    fn log_url(&self) -> Result<Url> {
        self.root
            .join("_delta_log/")
            .map_err(|e| table_error(self.location, format!("not a URL: {e}")))
    }

    /// Every file of `_delta_log/`, by name.
    fn listing(&self) -> Result<BTreeMap<String, delta_kernel::FileMeta>> {
        let log = self.log_url()?;
        let from = log
            .join("00000000000000000000")
            .map_err(|e| table_error(self.location, format!("not a URL: {e}")))?;
        let mut out = BTreeMap::new();
        for meta in self
            .engine
            .storage_handler()
            .list_from(&from)
            .map_err(kernel(self.location))?
        {
            let meta = meta.map_err(kernel(self.location))?;
            // Relative to `_delta_log/` (a v2 checkpoint's sidecars are under `_sidecars/`).
            let name = match meta.location.as_str().strip_prefix(log.as_str()) {
                Some(rel) => rel.to_owned(),
                None => meta
                    .location
                    .path_segments()
                    .and_then(|mut s| s.next_back().map(str::to_owned))
                    .unwrap_or_default(),
            };
            out.insert(name, meta);
        }
        Ok(out)
    }

    fn read(&self, url: &Url) -> Result<bytes::Bytes> {
        let mut all = self
            .engine
            .storage_handler()
            .read_files(vec![(url.clone(), None)])
            .map_err(kernel(self.location))?;
        match all.next() {
            Some(bytes) => bytes.map_err(kernel(self.location)),
            None => Ok(bytes::Bytes::new()),
        }
    }

    /// A commit's time: its in-commit timestamp, else its `commitInfo` timestamp, else
    /// the file's modification time.
    fn commit_time(&self, meta: &delta_kernel::FileMeta) -> Result<i64> {
        let bytes = self.read(&meta.location)?;
        Ok(commit_info_time(&bytes).unwrap_or(meta.last_modified))
    }

    /// The last commit at or before `timestamp` (RFC 3339).
    fn version_at(
        &self,
        timestamp: &str,
        listing: &BTreeMap<String, delta_kernel::FileMeta>,
    ) -> Result<u64> {
        let at = parse_time(timestamp)?;
        let commits: Vec<(u64, &delta_kernel::FileMeta)> = listing
            .iter()
            .filter_map(|(name, meta)| commit_version(name).map(|v| (v, meta)))
            .collect();
        let Some(&(first, first_meta)) = commits.first() else {
            return Err(table_error(self.location, "the table has no commits"));
        };
        let first_time = self.commit_time(first_meta)?;
        if at < first_time {
            return Err(table_error(
                self.location,
                format!(
                    "timestamp {timestamp} is before the first commit (version {first} at {})",
                    rfc3339_ms(first_time)
                ),
            ));
        }
        // Commit times rise with versions: the last commit at or before `at`.
        let (mut lo, mut hi) = (0usize, commits.len());
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.commit_time(commits[mid].1)? <= at {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(commits[lo].0)
    }

    /// The snapshot at `version` (default the latest).
    fn snapshot(
        &self,
        version: Option<u64>,
        listing: &BTreeMap<String, delta_kernel::FileMeta>,
    ) -> Result<SnapshotRef> {
        let mut builder = Snapshot::builder_for(self.root.as_str());
        if let Some(v) = version {
            builder = builder.at_version(v);
        }
        match builder.build(self.engine) {
            Ok(s) => Ok(s),
            Err(e) => {
                if let Some(v) = version {
                    let latest = listing.keys().filter_map(|n| commit_version(n)).max();
                    if latest.is_some_and(|l| l < v) {
                        return Err(table_error(
                            self.location,
                            format!(
                                "version {v} does not exist (latest {})",
                                latest.unwrap_or_default()
                            ),
                        ));
                    }
                }
                Err(self.explain(e, listing))
            }
        }
    }

    /// A kernel error, with the log file and line when a commit is not JSON.
    fn explain(
        &self,
        e: delta_kernel::KernelError,
        listing: &BTreeMap<String, delta_kernel::FileMeta>,
    ) -> Error {
        let text = e.to_string().to_ascii_lowercase();
        if text.contains("checkpoint") {
            if let Some(missing) = missing_checkpoint_part(listing.keys()) {
                return table_error(self.location, missing);
            }
        }
        if text.contains("json") {
            for (name, meta) in listing.iter().rev() {
                if commit_version(name).is_none() {
                    continue;
                }
                if let Ok(bytes) = self.read(&meta.location) {
                    if let Some(line) = bad_json_line(&bytes) {
                        return table_error(
                            self.location,
                            format!("corrupt log entry: _delta_log/{name} line {line} is not a JSON action"),
                        );
                    }
                }
            }
        }
        if ["parquet", "footer", "range", "arrow error"]
            .iter()
            .any(|w| text.contains(w))
        {
            if let Some(bad) = self.bad_checkpoint(listing) {
                return table_error(
                    self.location,
                    format!("corrupt checkpoint: {bad} is not a Parquet file"),
                );
            }
        }
        kernel(self.location)(e)
    }

    /// The first checkpoint (or v2 checkpoint sidecar) that is not a Parquet file, from
    /// the newest: both magics and a footer that fits.
    fn bad_checkpoint(&self, listing: &BTreeMap<String, delta_kernel::FileMeta>) -> Option<String> {
        let parquet = |bytes: &[u8]| {
            let n = bytes.len();
            n >= 12
                && &bytes[..4] == b"PAR1"
                && &bytes[n - 4..] == b"PAR1"
                && u32::from_le_bytes(bytes[n - 8..n - 4].try_into().unwrap_or_default()) as usize
                    + 12
                    <= n
        };
        let files: Vec<(String, Url)> = listing
            .iter()
            .rev()
            .filter(|(n, _)| n.contains(".checkpoint") && n.ends_with(".parquet"))
            .map(|(n, m)| (format!("_delta_log/{n}"), m.location.clone()))
            .collect();
        files
            .into_iter()
            .find(|(_, url)| self.read(url).is_ok_and(|b| !parquet(&b)))
            .map(|(name, _)| name)
    }

    /// The snapshot's commit time and the log file that defines it.
    fn commit(
        &self,
        version: u64,
        listing: &BTreeMap<String, delta_kernel::FileMeta>,
        storage: &dyn Storage,
        dir: &Path,
        snapshot: &SnapshotRef,
    ) -> Result<(i64, SideFile)> {
        let commit = format!("{version:020}.json");
        let (name, meta, time) = match listing.get(&commit) {
            Some(meta) => (commit.clone(), meta, self.commit_time(meta)?),
            None => {
                // Only a checkpoint holds this version (older commits cleaned up).
                let prefix = format!("{version:020}.checkpoint");
                let Some((name, meta)) = listing.iter().find(|(n, _)| n.starts_with(&prefix))
                else {
                    return Err(table_error(
                        self.location,
                        format!("no commit or checkpoint of version {version} in _delta_log/"),
                    ));
                };
                let time = snapshot
                    .get_timestamp(self.engine)
                    .unwrap_or(meta.last_modified);
                (name.clone(), meta, time)
            }
        };
        let display = format!("{}/_delta_log/{name}", self.location);
        // (A table deleted and made again holds another file at this version.)
        let object = storage.head(&dir.join("_delta_log").join(&name))?;
        Ok((
            time,
            SideFile {
                display,
                bytes: meta.size,
                etag: object.etag,
                identity: object.identity,
            },
        ))
    }
}

/// What every file of one scan shares: the schemas and the engine whose evaluator turns
/// physical columns into logical ones.
struct ScanShape {
    engine: Arc<dyn Engine>,
    physical: delta_kernel::schema::SchemaRef,
    logical: delta_kernel::schema::SchemaRef,
}

/// One data file of the snapshot.
#[derive(Debug)]
pub struct DeltaFile {
    /// The file to read.
    pub input: InputFile,
    /// What turns its batches into the snapshot's rows.
    pub read: Arc<DeltaRead>,
}

/// Turns one data file's batches into the snapshot's rows.
pub struct DeltaRead {
    shape: Arc<ScanShape>,
    transform: Option<ExpressionRef>,
    /// The rows its deletion vector removes, by position in the file, ascending.
    deleted: Option<Vec<u64>>,
    /// Its deletion vector's file, as the manifest's `inputs` name it (none inline).
    dv_file: Option<String>,
    /// The log's record of it (see [`TableFileRead::identity`]).
    identity: String,
    evaluator: OnceLock<std::result::Result<Arc<dyn ExpressionEvaluator>, String>>,
}

impl std::fmt::Debug for DeltaRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaRead")
            .field("transform", &self.transform.is_some())
            .field("deleted", &self.deleted.as_ref().map(Vec::len))
            .finish_non_exhaustive()
    }
}

/// A data file's footer as Delta reads it. Delta has no fixed-size list: a column that
/// the file's Arrow schema (pyarrow's, kept in the Parquet metadata) holds as a
/// `FixedSizeList`, such as an embedding `deltalake` wrote from a
/// `fixed_size_list<float>`, is read as the table's `array`, a list, as `deltalake`
/// reads it back. Its length still shows: where every row's list has the same length,
/// the spec's shape is `[n]`.
///
/// # Errors
///
/// A schema arrow-rs cannot read the file with (not expected: a list is what Parquet
/// stores).
pub fn read_as_delta(file: ArrowReaderMetadata) -> Result<ArrowReaderMetadata> {
    fn fix(data_type: &DataType) -> Option<DataType> {
        let child = |f: &FieldRef| -> FieldRef {
            match fix(f.data_type()) {
                Some(t) => Arc::new(f.as_ref().clone().with_data_type(t)),
                None => f.clone(),
            }
        };
        match data_type {
            DataType::FixedSizeList(f, _) => Some(DataType::List(child(f))),
            DataType::List(f) => fix(f.data_type()).map(|_| DataType::List(child(f))),
            DataType::LargeList(f) => fix(f.data_type()).map(|_| DataType::LargeList(child(f))),
            DataType::Struct(fields) => fields
                .iter()
                .any(|f| fix(f.data_type()).is_some())
                .then(|| DataType::Struct(fields.iter().map(child).collect())),
            _ => None,
        }
    }
    let schema = file.schema();
    if !schema.fields().iter().any(|f| fix(f.data_type()).is_some()) {
        return Ok(file);
    }
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .map(|f| match fix(f.data_type()) {
            Some(t) => Arc::new(f.as_ref().clone().with_data_type(t)),
            None => f.clone(),
        })
        .collect();
    let hinted = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    Ok(ArrowReaderMetadata::try_new(
        file.metadata().clone(),
        ArrowReaderOptions::new().with_schema(hinted),
    )?)
}

/// A data file's read plan for one scan: the kernel's own (`parquet_read_plan`), which
/// matches the scan's physical columns to the file's by field id or physical name at
/// every level of nesting, and says how to make its batches the scan's physical
/// columns (reordered, missing ones null, cast).
#[derive(Debug)]
pub struct DeltaColumns {
    /// What turns the batches into rows.
    pub read: Arc<DeltaRead>,
    /// The file's leaf columns to read (`None`: all).
    mask: Option<ProjectionMask>,
    reorder: Vec<ReorderIndex>,
    /// The table's logical schema, which the batches take.
    table: arrow_schema::SchemaRef,
}

impl DeltaRead {
    /// The read plan of the file whose footer is `file`, for a table whose logical
    /// schema is `table`.
    ///
    /// # Errors
    ///
    /// A column of the table whose type the file cannot give.
    pub fn columns(
        self: &Arc<Self>,
        file: &ArrowReaderMetadata,
        table: arrow_schema::SchemaRef,
    ) -> Result<DeltaColumns> {
        let (reorder, mask) = parquet_read_plan(&self.shape.physical, file).map_err(|e| {
            Error::new(ErrorKind::Table {
                detail: one_line(&e),
            })
        })?;
        Ok(DeltaColumns {
            read: self.clone(),
            mask,
            reorder,
            table,
        })
    }

    fn evaluator(&self, transform: &ExpressionRef) -> Result<Arc<dyn ExpressionEvaluator>> {
        let made = self.evaluator.get_or_init(|| {
            self.shape
                .engine
                .evaluation_handler()
                .new_expression_evaluator(
                    self.shape.physical.clone(),
                    transform.clone(),
                    delta_kernel::schema::DataType::Struct(Box::new(
                        self.shape.logical.as_ref().clone(),
                    )),
                )
                .map_err(|e| one_line(&e))
        });
        made.clone()
            .map_err(|detail| Error::new(ErrorKind::Table { detail }))
    }
}

/// A Delta data file's read: the kernel's plan of its columns, its deletion vector, its
/// partition values and column mapping from the log.
impl TableFileRead for DeltaColumns {
    fn table_schema(&self) -> &arrow_schema::SchemaRef {
        &self.table
    }

    /// Its deletion vector's file: `--append` finds a new vector by it (an inline one by
    /// the rows it keeps).
    fn delete_files(&self) -> Vec<String> {
        self.read.dv_file.iter().cloned().collect()
    }

    fn identity(&self) -> String {
        self.read.identity.clone()
    }

    fn projection(&self, _file: &ArrowReaderMetadata) -> ProjectionMask {
        self.mask.clone().unwrap_or_else(ProjectionMask::all)
    }

    /// The snapshot's rows of `batch` (the file's `roots` columns, its rows from
    /// `first_row` of the file): physical columns in the scan's order (null where the
    /// file lacks one), turned logical, deleted rows dropped.
    ///
    /// # Errors
    ///
    /// A column whose type cannot become the table's, or the kernel's evaluation failing.
    fn adapt(&self, batch: RecordBatch, first_row: u64) -> Result<RecordBatch> {
        let shape = &self.read.shape;
        let rows = batch.num_rows();
        let delta_error = |e: delta_kernel::KernelError| {
            Error::new(ErrorKind::Table {
                detail: one_line(&e),
            })
        };
        let with_rows = RecordBatchOptions::new().with_row_count(Some(rows));
        let physical = if shape.physical.fields().len() == 0 {
            // Only partition values: rows without columns (which the kernel's fix-up,
            // made for struct arrays, cannot hold).
            ArrowEngineData::new(RecordBatch::try_new_with_options(
                Arc::new(Schema::empty()),
                vec![],
                &with_rows,
            )?)
        } else {
            fixup_parquet_read(batch, &self.reorder, None, None, Some(&shape.physical))
                .map_err(delta_error)?
        };
        let logical = match &self.read.transform {
            // No column mapping and no partition value: the physical columns are the
            // logical ones (their nested fields as the file names them).
            None => RecordBatch::from(physical),
            Some(transform) => {
                let evaluator = self.read.evaluator(transform)?;
                let out = evaluator
                    .evaluate(&physical)
                    .and_then(ArrowEngineData::try_from_engine_data)
                    .map_err(delta_error)?;
                RecordBatch::from(out)
            }
        };
        let Some(deleted) = &self.read.deleted else {
            return Ok(logical);
        };
        let end = first_row + rows as u64;
        let lo = deleted.partition_point(|&d| d < first_row);
        let hi = deleted.partition_point(|&d| d < end);
        if lo == hi {
            return Ok(logical);
        }
        let mut keep = vec![true; rows];
        for &d in &deleted[lo..hi] {
            keep[(d - first_row) as usize] = false;
        }
        let mask = BooleanArray::from(keep);
        Ok(arrow_select::filter::filter_record_batch(&logical, &mask)?)
    }

    /// Rows of the file's rows `[first, first + rows)` that its deletion vector keeps.
    fn kept_rows(&self, first: u64, rows: u64) -> u64 {
        let Some(deleted) = &self.read.deleted else {
            return rows;
        };
        let lo = deleted.partition_point(|&d| d < first);
        let hi = deleted.partition_point(|&d| d < first.saturating_add(rows));
        rows - (hi - lo) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_times_and_bad_lines() {
        let commit = b"{\"commitInfo\":{\"timestamp\":1700000000000,\"operation\":\"WRITE\"}}\n{\"add\":{}}\n";
        assert_eq!(commit_info_time(commit), Some(1_700_000_000_000));
        let ict = b"{\"commitInfo\":{\"timestamp\":5,\"inCommitTimestamp\":7}}\n";
        assert_eq!(commit_info_time(ict), Some(7));
        assert_eq!(commit_info_time(b"{\"add\":{}}\n"), None);
        assert_eq!(bad_json_line(commit), None);
        assert_eq!(bad_json_line(b"{\"a\":1}\n{\"add\":{\"pa\n"), Some(2));
        assert_eq!(bad_json_line(b"{\"a\":1}\n[1]\n"), Some(2));
        assert_eq!(commit_version("00000000000000000012.json"), Some(12));
        assert_eq!(
            commit_version("00000000000000000012.checkpoint.parquet"),
            None
        );
        assert_eq!(commit_version("12.json"), None);
        assert_eq!(rfc3339_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        let names: Vec<String> = [
            "00000000000000000005.checkpoint.0000000001.0000000003.parquet",
            "00000000000000000005.checkpoint.0000000003.0000000003.parquet",
            "00000000000000000005.json",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            missing_checkpoint_part(names.iter()).unwrap(),
            "the checkpoint of version 5 is missing part 2 of 3 \
             (_delta_log/00000000000000000005.checkpoint.0000000002.0000000003.parquet)"
        );
        assert_eq!(missing_checkpoint_part(names[2..].iter()), None);
    }
}
