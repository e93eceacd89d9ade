//! Parquet files → Arrow record batches, in path, row-group, row order.
//!
//! [`discover`] expands the command line's inputs (folders walked recursively for
//! `*.parquet`, by byte order of the relative path, skipping `_`/`.` names).
//! [`ParquetInput::open`] reads a footer and trusts none of it blindly: the footer's row
//! count must equal the sum of its row groups', and [`read_row_group`] checks the rows
//! it delivers against the row group's count. Every column chunk's byte range and page
//! offsets must lie inside the file ([`check_layout`]) before a page is read, and any
//! call into the decoder is contained: a panic on corrupt data becomes
//! [`ErrorKind::DecoderPanic`]. Spark's INT96 timestamps are read as
//! microseconds (Spark's own unit), so every real date fits.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelector,
};
use parquet::arrow::ProjectionMask;
use parquet::basic::Type as PhysicalType;
use parquet::file::serialized_reader::SerializedPageReader;

use crate::error::{ChunkProblem, Error, ErrorKind, Result};
use crate::source::contain::contain;
use crate::source::fixed_list::{self, FixedListReader};
use crate::source::hive::{self, PartitionColumn};
use crate::store::parquet::from_parquet;
use crate::store::storage::Stat;
use crate::store::{self, Blob, ColumnChunks, Object, ParquetBytes, Storage};

/// Rows per Arrow batch at most: large enough to amortize per-batch work (8192 rows of
/// the standard table ≈ 1.4 MB).
pub const BATCH_ROWS: usize = 8192;
/// Bytes of the selected columns per Arrow batch, at most about: rows of large values
/// (images) come in fewer rows per batch, so that every batch in flight (decoded,
/// encoded, queued) stays a few MB whatever the row size (8192 rows of 92 KB
/// images were a 46 MB row group per batch, 670 MiB of peak RSS).
pub const BATCH_BYTES: u64 = 4 << 20;

/// One input file given or found.
#[derive(Debug, Clone)]
pub struct InputFile {
    /// The file as its storage found it (for an object in a store: its URL, size and
    /// the ETag reads are pinned to).
    pub blob: Blob,
    /// The path as the manifest lists it (as given, or folder-as-given + relative path).
    pub display: String,
    /// Its `key=value` segments below the partition base (see [`hive`]).
    pub partitions: Vec<(String, Option<String>)>,
}

impl InputFile {
    /// A file `storage` found, named in the manifest as `display`.
    fn found(
        storage: &Arc<dyn Storage>,
        object: Object,
        display: String,
        partitions: Vec<(String, Option<String>)>,
    ) -> InputFile {
        InputFile::new(Blob::new(storage.clone(), object), display).with_partitions(partitions)
    }

    /// `blob`, named in the manifest as `display`, with no partition values.
    pub fn new(blob: Blob, display: String) -> InputFile {
        InputFile {
            blob,
            display,
            partitions: Vec::new(),
        }
    }

    /// The file at `path` (a local path or a URL; one HEAD in a store), named in the
    /// manifest as `display`.
    ///
    /// # Errors
    ///
    /// Nothing at `path`.
    pub fn at(path: &Path, display: String, io: store::IoOptions) -> Result<InputFile> {
        Ok(InputFile::new(Blob::head(path, io)?, display))
    }

    fn with_partitions(mut self, partitions: Vec<(String, Option<String>)>) -> InputFile {
        self.partitions = partitions;
        self
    }

    /// Its path (a URL in a store).
    pub fn path(&self) -> &Path {
        self.blob.path()
    }
}

/// Whether a path relative to a folder is one a folder walk takes: a `*.parquet` file
/// with no segment starting with `_` or `.`.
fn walk_takes(relative: &str) -> bool {
    relative.ends_with(".parquet")
        && relative
            .split('/')
            .all(|s| !s.is_empty() && !s.starts_with(['_', '.']))
}

/// Refuses a Delta Lake or Iceberg table folder: `names` are paths relative to it,
/// `table` names it. A usage error (exit 2) naming the command that reads the table.
fn refuse_table_formats<'a>(mut names: impl Iterator<Item = &'a str>, table: &str) -> Result<()> {
    let found = names.find_map(|n| {
        if n.starts_with("_delta_log/") || n == "_delta_log" {
            Some(("a Delta Lake", "_delta_log/", "delta"))
        } else if n.starts_with("metadata/")
            && n.ends_with(".metadata.json")
            && n.matches('/').count() == 1
        {
            Some(("an Iceberg", "metadata/*.metadata.json", "iceberg"))
        } else {
            None
        }
    });
    match found {
        Some((format, marker, command)) => Err(Error::invalid_option(
            "input",
            format!(
                "{table} is {format} table ({marker}), or lies inside one: its folder also \
                 holds data files the table removed, so converting the files would duplicate \
                 or resurrect rows; convert one snapshot with `tfshard convert {command} {table}`"
            ),
        )),
        None => Ok(()),
    }
}

/// The marker names of folder `dir` that make it a Delta or Iceberg table: its
/// `_delta_log` folder and the files of its `metadata` folder (`None` where they cannot
/// be looked at for another reason than their absence).
fn table_markers(storage: &dyn Storage, dir: &Path) -> Option<Vec<String>> {
    let mut names = Vec::new();
    match storage.is_dir(&dir.join("_delta_log")) {
        Ok(true) => names.push("_delta_log/".to_owned()),
        Ok(false) => {}
        Err(e) if store::storage::is_not_found(&e) => {}
        Err(_) => return None,
    }
    if let Ok((files, _)) = storage.list_dir(&dir.join("metadata")) {
        names.extend(
            files
                .iter()
                .map(|o| format!("metadata/{}", file_name(&o.path))),
        );
    }
    Some(names)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Refuses folder `dir` when it is a Delta or Iceberg table.
fn refuse_table(storage: &dyn Storage, dir: &Path) -> Result<()> {
    let markers = table_markers(storage, dir).unwrap_or_default();
    refuse_table_formats(
        markers.iter().map(String::as_str),
        &dir.display().to_string(),
    )
}

/// Refuses an input that lies inside a Delta or Iceberg table (a partition folder or a
/// data file of one): the folders above it, up to the root (of the file system or the
/// bucket), are checked for the markers. A folder above that cannot be listed ends the
/// check: a credential may reach only the input's own prefix, and a missing bucket is
/// the input's error to report.
fn refuse_inside_table(storage: &dyn Storage, path: &Path) -> Result<()> {
    let mut at = storage.canonical(path);
    while let Some(dir) = storage.parent(&at) {
        let Some(markers) = table_markers(storage, &dir) else {
            return Ok(());
        };
        refuse_table_formats(
            markers.iter().map(String::as_str),
            &dir.display().to_string(),
        )?;
        at = dir;
    }
    Ok(())
}

/// Expands inputs: files as given (any extension), folders (and store prefixes) walked
/// for `*.parquet`, each file with its Hive segments relative to its partition base (the
/// folder it was found in, or `partition_base`).
///
/// # Errors
///
/// A missing path or object, an unreadable folder, a folder holding no Parquet file, a
/// Delta or Iceberg table folder, a file outside `partition_base`.
pub fn discover(
    inputs: &[PathBuf],
    partition_base: Option<&Path>,
    io: store::IoOptions,
) -> Result<Vec<InputFile>> {
    let base = match partition_base {
        Some(b) => {
            let base = store::storage::resolve(b, io)?;
            refuse_table(&*store::storage_of(b, io)?, &base)?;
            Some(base)
        }
        None => None,
    };
    let mut out = Vec::new();
    for input in inputs {
        let storage = store::storage_of(input, io)?;
        let path = store::storage::resolve(input, io)?;
        let shown = store::storage::shown(input, io)?;
        refuse_inside_table(&*storage, &path)?;
        if let Stat::File(object) = storage.stat(&path).map_err(|e| e.with_file(input))? {
            out.push(InputFile::found(&storage, object, shown, Vec::new()));
            continue;
        }
        refuse_table(&*storage, &path)?;
        let before = out.len();
        for (rel, object) in storage.walk(&path)? {
            if walk_takes(&rel) {
                let display = format!("{shown}/{rel}");
                out.push(InputFile::found(
                    &storage,
                    object,
                    display,
                    hive::segments(&rel),
                ));
            }
        }
        if out.len() == before {
            return Err(Error::new(ErrorKind::NoParquetFiles).with_file(input));
        }
    }
    if let Some(base) = &base {
        for file in &mut out {
            let rel = relative_to_base(file, base).ok_or_else(|| {
                Error::invalid_option(
                    "partition-base",
                    format!(
                        "{} is not inside the partition base {}",
                        file.display,
                        partition_base.unwrap_or(Path::new("")).display()
                    ),
                )
            })?;
            file.partitions = hive::segments(&rel);
        }
    }
    Ok(out)
}

/// A file's path relative to the partition base, when it lies below it.
fn relative_to_base(file: &InputFile, base: &Path) -> Option<String> {
    let rel = file.path().strip_prefix(base).ok()?;
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    Some(parts.join("/"))
}

/// An opened Parquet file: its footer, read once and checked.
#[derive(Debug, Clone)]
pub struct ParquetInput {
    /// The file.
    pub file: InputFile,
    /// Size on disk.
    pub bytes: u64,
    /// Its bytes, as the decoder reads them.
    data: ParquetBytes,
    /// Footer plus the Arrow schema we read it with.
    pub metadata: ArrowReaderMetadata,
    /// Bytes a decoded row of the selected columns took in the last full batch read
    /// (0 before any): later row groups start with batches of the right size.
    row_bytes: Arc<std::sync::atomic::AtomicU64>,
    /// The run's Hive partition columns and this file's index in their values (set by
    /// [`ParquetInput::set_partitions`]; none by default).
    partitions: (Arc<Vec<PartitionColumn>>, usize),
    /// Whether fixed-size lists may go through our own decoder ([`fixed_list`]); off,
    /// arrow-rs reads every column (`--parquet-decoder arrow-rs`).
    fast_lists: bool,
    /// A table's data file (Delta, Iceberg): what its format adds to reading it. Roots
    /// then index the table's schema.
    table: Option<Arc<dyn TableFileRead>>,
}

/// What a table format adds to reading one of its Parquet data files: the table's
/// schema, which columns of the file to read (by field id or physical name), which rows
/// the snapshot keeps, and how a batch of the file becomes the table's rows (partition
/// values, renamed columns). Delta ([`super::delta`]) and Iceberg ([`super::iceberg`])
/// implement it; the Parquet reader knows neither.
pub trait TableFileRead: Send + Sync + std::fmt::Debug {
    /// The table's schema (the snapshot's), which roots index.
    fn table_schema(&self) -> &SchemaRef;

    /// The file's columns to read, given its footer.
    fn projection(&self, file: &ArrowReaderMetadata) -> ProjectionMask;

    /// The file's rows in `[first, first + rows)` that the snapshot keeps (all of them
    /// unless a deletion vector drops some).
    fn kept_rows(&self, _first: u64, rows: u64) -> u64 {
        rows
    }

    /// Whether [`TableFileRead::kept_rows`] is exact before the file is read (false
    /// where delete files are applied while reading).
    fn exact_rows(&self) -> bool {
        true
    }

    /// The delete files that apply to the file (Iceberg), as the manifest's `inputs`
    /// name them.
    fn delete_files(&self) -> Vec<String> {
        Vec::new()
    }

    /// The file as its table records it (see [`super::table::TableFile::identity`]): a
    /// table's data file is immutable and named by the table, whatever the file system
    /// says of it.
    fn identity(&self) -> String;

    /// A batch of the file's projected columns, its first row at row `at` of the file,
    /// as the table's rows.
    ///
    /// # Errors
    ///
    /// A column that cannot become the table's.
    fn adapt(&self, batch: RecordBatch, _at: u64) -> Result<RecordBatch> {
        Ok(batch)
    }

    /// Reads row group `row_group` itself, where the format's own reader must (the
    /// `iceberg` crate applies delete files as it reads), calling `f` with each batch of
    /// the table's rows and the index of its first record in the file; `None` leaves
    /// the reading to the Parquet reader, which then calls
    /// [`TableFileRead::adapt`].
    fn read_row_group(
        &self,
        _input: &ParquetInput,
        _row_group: usize,
        _first_row: u64,
        _f: &mut dyn FnMut(RecordBatch, u64) -> Result<()>,
    ) -> Option<Result<()>> {
        None
    }
}

impl ParquetInput {
    /// Reads and checks the footer.
    ///
    /// # Errors
    ///
    /// Not Parquet, a corrupt footer, an encrypted file, or row counts that disagree.
    pub fn open(file: InputFile) -> Result<ParquetInput> {
        let locate = |e: Error| e.with_file(&file.display);
        let data = ParquetBytes::new(file.blob.clone());
        let bytes = file.blob.size();
        let metadata = contain(|| data.footer())
            .map_err(|panic| locate(decoder_panic(None, panic)))?
            .map_err(locate)?;
        let parquet = metadata.metadata().clone();
        check_layout(&parquet, bytes).map_err(locate)?;
        let footer_rows = parquet.file_metadata().num_rows();
        let group_rows: i64 = parquet.row_groups().iter().map(|g| g.num_rows()).sum();
        if footer_rows != group_rows || footer_rows < 0 {
            return Err(locate(Error::new(ErrorKind::RowCountMismatch {
                expected: footer_rows.max(0) as u64,
                found: group_rows.max(0) as u64,
                detail: "the footer's total row count disagrees with the sum of its row groups'",
            })));
        }
        let metadata = contain(|| with_int96_as_micros(metadata))
            .map_err(|panic| locate(decoder_panic(None, panic)))?
            .map_err(locate)?;
        Ok(ParquetInput {
            file,
            bytes,
            data,
            metadata,
            row_bytes: Default::default(),
            partitions: Default::default(),
            fast_lists: true,
            table: None,
        })
    }

    /// Gives the file its Hive partition values: `columns` are the run's partition
    /// columns, `index` this file's index in their values. They follow the file's own
    /// columns in [`ParquetInput::table_schema`].
    pub fn set_partitions(&mut self, columns: Arc<Vec<PartitionColumn>>, index: usize) {
        self.partitions = (columns, index);
    }

    /// Makes this file a table's data file, read as `read` says; roots index the
    /// table's schema from now on. Tables' arrays are Parquet lists, never fixed-size
    /// (Delta has no fixed-size list): arrow-rs reads every column.
    pub fn set_table(&mut self, read: Arc<dyn TableFileRead>) {
        self.table = Some(read);
        self.fast_lists = false;
    }

    /// Whether [`ParquetInput::kept_rows`] is exact: an Iceberg data file with delete
    /// files knows its records only once read.
    pub fn exact_rows(&self) -> bool {
        self.table.as_ref().is_none_or(|t| t.exact_rows())
    }

    /// The projection of the file's columns that `file_roots` (from
    /// [`ParquetInput::file_roots`]) read: a table's data file's is its format's.
    fn projection(&self, file_roots: &[usize]) -> ProjectionMask {
        match &self.table {
            Some(table) => table.projection(&self.metadata),
            None => {
                ProjectionMask::roots(self.metadata.parquet_schema(), file_roots.iter().copied())
            }
        }
    }

    /// The file's rows in `[first, first + rows)` that the table's snapshot keeps (all
    /// of them for a plain file).
    pub fn kept_rows(&self, first: u64, rows: u64) -> u64 {
        match &self.table {
            Some(table) => table.kept_rows(first, rows),
            None => rows,
        }
    }

    /// The file's own top-level columns that `roots` (indices of
    /// [`ParquetInput::table_schema`]) read, and the partition columns among them.
    fn file_roots(&self, roots: &[usize]) -> (Vec<usize>, Vec<usize>) {
        if self.table.is_some() {
            return (Vec::new(), Vec::new());
        }
        let file_columns = self.schema().fields().len();
        roots.iter().partition(|&&r| r < file_columns)
    }

    /// Turns our own fixed-size-list decoder off (`false`) or on (`true`, the default)
    /// for this file: off, arrow-rs reads every column, so a user who suspects the fast
    /// path can convert without it and compare.
    pub fn set_fast_lists(&mut self, on: bool) {
        self.fast_lists = on;
    }

    /// Compressed bytes of row group `row_group`'s column chunks under `roots` (indices
    /// of [`ParquetInput::table_schema`]; partition columns take no bytes).
    pub fn selected_bytes(&self, row_group: usize, roots: &[usize]) -> u64 {
        let (file_roots, _) = self.file_roots(roots);
        let mask = self.projection(&file_roots);
        self.selected_chunks(row_group, &mask)
            .map(|c| c.compressed_size().max(0) as u64)
            .sum()
    }

    /// The column chunks of row group `row_group` that `mask` selects.
    fn selected_chunks<'a>(
        &'a self,
        row_group: usize,
        mask: &'a ProjectionMask,
    ) -> impl Iterator<Item = &'a parquet::file::metadata::ColumnChunkMetaData> + 'a {
        self.metadata
            .metadata()
            .row_group(row_group)
            .columns()
            .iter()
            .enumerate()
            .filter(|(leaf, _)| mask.leaf_included(*leaf))
            .map(|(_, c)| c)
    }

    /// The file's columns, then the partition columns (a table's data file: the
    /// table's schema).
    pub fn table_schema(&self) -> Schema {
        if let Some(table) = &self.table {
            return table.table_schema().as_ref().clone();
        }
        let mut fields: Vec<arrow_schema::FieldRef> =
            self.schema().fields().iter().cloned().collect();
        fields.extend(self.partitions.0.iter().map(|p| Arc::new(p.field.clone())));
        Schema::new(fields)
    }

    /// The Arrow schema the file is read with.
    pub fn schema(&self) -> &SchemaRef {
        self.metadata.schema()
    }

    /// Bytes a row group's column chunks take, compressed plus uncompressed (from the
    /// footer): about what decoding it holds at once when its pages are large.
    pub fn row_group_decode_bytes(&self, row_group: usize) -> u64 {
        self.metadata
            .metadata()
            .row_group(row_group)
            .columns()
            .iter()
            .map(|c| (c.compressed_size().max(0) + c.uncompressed_size().max(0)) as u64)
            .sum()
    }

    /// Rows in each row group.
    pub fn row_group_rows(&self) -> Vec<u64> {
        self.metadata
            .metadata()
            .row_groups()
            .iter()
            .map(|g| g.num_rows().max(0) as u64)
            .collect()
    }
}

/// A Parquet file is a table's file whose units are its row groups.
impl super::table::TableFile for ParquetInput {
    fn name(&self) -> &str {
        &self.file.display
    }

    fn bytes(&self) -> u64 {
        self.bytes
    }

    fn etag(&self) -> Option<&str> {
        self.file.blob.etag()
    }

    fn identity(&self) -> Option<String> {
        match &self.table {
            Some(table) => Some(table.identity()),
            None => self.file.blob.object().identity.clone(),
        }
    }

    fn delete_files(&self) -> Vec<String> {
        self.table
            .as_ref()
            .map_or_else(Vec::new, |t| t.delete_files())
    }

    fn unit_rows(&self) -> Vec<u64> {
        self.row_group_rows()
    }

    fn kept_rows(&self, first: u64, rows: u64) -> u64 {
        ParquetInput::kept_rows(self, first, rows)
    }

    fn exact_rows(&self) -> bool {
        ParquetInput::exact_rows(self)
    }

    fn selected_bytes(&self, unit: usize, roots: &[usize]) -> u64 {
        ParquetInput::selected_bytes(self, unit, roots)
    }

    fn decode_bytes(&self, unit: usize) -> u64 {
        self.row_group_decode_bytes(unit)
    }

    fn read_unit(
        &self,
        unit: usize,
        roots: &[usize],
        first_row: u64,
        f: &mut dyn FnMut(RecordBatch, u64) -> Result<()>,
    ) -> Result<()> {
        read_row_group(self, unit, roots, first_row, f)
    }
}

fn decoder_panic(row_group: Option<usize>, panic: String) -> Error {
    Error::new(ErrorKind::DecoderPanic { row_group, panic })
}

/// Checks what the footer claims about each column chunk before anything trusts it (as
/// parquet's C++ reader does): its start and size non-negative and its bytes inside the
/// file's data (after the magic, before the footer). arrow-rs asserts on a negative
/// range instead (apache/arrow-rs#6255).
///
/// # Errors
///
/// [`ErrorKind::ChunkLayout`] naming the row group and (in the location) the column.
pub fn check_layout(
    metadata: &parquet::file::metadata::ParquetMetaData,
    file_bytes: u64,
) -> Result<()> {
    // "PAR1" at the start; the footer's length and "PAR1" at the end, after the footer.
    const MAGIC: i64 = 4;
    let limit = file_bytes.saturating_sub(8);
    for (g, group) in metadata.row_groups().iter().enumerate() {
        let error = |problem| {
            Error::new(ErrorKind::ChunkLayout {
                row_group: g,
                problem,
            })
        };
        if group.num_rows() < 0 {
            return Err(error(ChunkProblem::NegativeRows {
                rows: group.num_rows(),
            }));
        }
        for column in group.columns() {
            let fail =
                |problem| Err(error(problem).with_column(column.column_path().parts().join("/")));
            let start = column
                .dictionary_page_offset()
                .unwrap_or(column.data_page_offset());
            let length = column.compressed_size();
            if start < 0 || length < 0 {
                return fail(ChunkProblem::Negative { start, length });
            }
            let end = start.saturating_add(length);
            if start < MAGIC || end as u64 > limit {
                return fail(ChunkProblem::OutsideFile { start, end, limit });
            }
            // Page offsets are not checked: arrow-rs reads a chunk's pages one after
            // another from its start and never seeks to them, and valid writers leave
            // them odd (parquet-testing's column_chunk_key_value_metadata.parquet has
            // data_page_offset 0).
        }
    }
    Ok(())
}

/// Re-reads the schema with INT96 columns as Timestamp(Microsecond): arrow-rs's default
/// (nanoseconds) overflows for dates outside 1677..2262.
fn with_int96_as_micros(metadata: ArrowReaderMetadata) -> Result<ArrowReaderMetadata> {
    let int96: Vec<String> = metadata
        .parquet_schema()
        .columns()
        .iter()
        .filter(|c| c.physical_type() == PhysicalType::INT96)
        .map(|c| c.path().parts().join("/"))
        .collect();
    if int96.is_empty() {
        return Ok(metadata);
    }
    fn fix(field: &Field, prefix: &str, int96: &[String]) -> Field {
        let name = if prefix.is_empty() {
            field.name().clone()
        } else {
            format!("{prefix}/{}", field.name())
        };
        match field.data_type() {
            DataType::Timestamp(TimeUnit::Nanosecond, tz) if int96.contains(&name) => field
                .clone()
                .with_data_type(DataType::Timestamp(TimeUnit::Microsecond, tz.clone())),
            DataType::Struct(children) => {
                let children: Fields = children
                    .iter()
                    .map(|c| Arc::new(fix(c, &name, int96)))
                    .collect();
                field.clone().with_data_type(DataType::Struct(children))
            }
            _ => field.clone(),
        }
    }
    let schema = metadata.schema();
    let fields: Vec<Field> = schema.fields().iter().map(|f| fix(f, "", &int96)).collect();
    let hinted = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    Ok(ArrowReaderMetadata::try_new(
        metadata.metadata().clone(),
        ArrowReaderOptions::new().with_schema(hinted),
    )?)
}

/// Batches of one row group, the decoder reading the file's column chunks through
/// [`ParquetBytes::chunks`].
struct Batches {
    reader: parquet::arrow::arrow_reader::ParquetRecordBatchReader,
    /// The chunks, where they keep a failed read's own error and fetched bytes.
    chunks: Option<ColumnChunks>,
}

impl Batches {
    fn open(
        input: &ParquetInput,
        row_group: usize,
        mask: &ProjectionMask,
        batch_rows: usize,
        selection: Option<RowSelection>,
        reuse: Option<ColumnChunks>,
    ) -> Result<Batches> {
        let panicked = |panic| decoder_panic(Some(row_group), panic);
        // The selected column chunks' bytes, as the footer places them.
        let ranges = input
            .selected_chunks(row_group, mask)
            .map(|c| {
                let (start, len) = c.byte_range();
                start..start.saturating_add(len)
            })
            .collect::<Vec<_>>();
        // Reopened on the same chunks (smaller batches, or arrow-rs alone from where the
        // fast path stopped): the bytes already fetched, if all held.
        let chunks = input.data.chunks(ranges, reuse)?;
        let kept = chunks.kept();
        let reader = contain(|| {
            let builder =
                ParquetRecordBatchReaderBuilder::new_with_metadata(chunks, input.metadata.clone())
                    .with_row_groups(vec![row_group])
                    .with_projection(mask.clone())
                    .with_batch_size(batch_rows);
            match selection {
                Some(rows) => builder.with_row_selection(rows).build(),
                None => builder.build(),
            }
        });
        let store_error = |kept: &Option<ColumnChunks>| kept.as_ref().and_then(|c| c.take_error());
        let reader = reader
            .map_err(panicked)?
            .map_err(|e| store_error(&kept).unwrap_or_else(|| from_parquet(e)))?;
        Ok(Batches {
            reader,
            chunks: kept,
        })
    }

    /// The next batch; the decoder runs contained.
    fn next(&mut self, row_group: usize) -> Result<Option<RecordBatch>> {
        let panicked = |panic| decoder_panic(Some(row_group), panic);
        contain(|| self.reader.next())
            .map_err(panicked)?
            .transpose()
            .map_err(|e| {
                let ours = self.chunks.as_ref().and_then(|c| c.take_error());
                ours.unwrap_or_else(|| Error::from(e))
            })
    }
}

/// Reads one row group's selected columns, calling `f` with each batch and the row
/// index (within the file) of its first row. `roots` index [`ParquetInput::table_schema`]:
/// the file's top-level columns, then its partition columns (appended to every batch).
///
/// # Errors
///
/// A Parquet decoding error, or fewer/more rows than the row group promises; each names
/// the file. `f`'s own error is passed through.
pub fn read_row_group(
    input: &ParquetInput,
    row_group: usize,
    roots: &[usize],
    first_row: u64,
    mut f: impl FnMut(RecordBatch, u64) -> Result<()>,
) -> Result<()> {
    let locate = |e: Error| e.with_file(&input.file.display);
    if let Some(read) = input
        .table
        .as_ref()
        .and_then(|t| t.read_row_group(input, row_group, first_row, &mut f))
    {
        return read;
    }
    let file_columns = input.schema().fields().len();
    let (file_roots, partition_roots) = input.file_roots(roots);
    let mask = input.projection(&file_roots);
    let expected = input.row_group_rows()[row_group];
    // The batch as the table has it: Hive partition columns appended, or a table's
    // data file's rows of the snapshot.
    let as_table = |batch: RecordBatch, at: u64| -> Result<RecordBatch> {
        if let Some(table) = &input.table {
            // A format's fix-up (Delta's kernel evaluator) is a dependency's code on the
            // file's data: contained like the decoder.
            return contain(|| table.adapt(batch, at))
                .map_err(|panic| decoder_panic(Some(row_group), panic))?;
        }
        if partition_roots.is_empty() {
            return Ok(batch);
        }
        let (columns, index) = (&input.partitions.0, input.partitions.1);
        let mut fields: Vec<arrow_schema::FieldRef> =
            batch.schema().fields().iter().cloned().collect();
        let mut arrays = batch.columns().to_vec();
        for &r in &partition_roots {
            let column = &columns[r - file_columns];
            fields.push(Arc::new(column.field.clone()));
            arrays.push(column.array(index, batch.num_rows()));
        }
        Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
    };
    if input.table.is_some()
        && !(0..input.metadata.parquet_schema().num_columns()).any(|l| mask.leaf_included(l))
    {
        // Only partition values (from the table's metadata): no column of the file is
        // read, only its row count, in batches of rows without columns.
        let empty = Arc::new(Schema::empty());
        let mut at = 0u64;
        while at < expected {
            let n = (expected - at).min(BATCH_ROWS as u64);
            let rows = RecordBatchOptions::new().with_row_count(Some(n as usize));
            let batch = RecordBatch::try_new_with_options(empty.clone(), vec![], &rows)?;
            let first = first_row + at;
            let batch = as_table(batch, first).map_err(|e| locate(e.shift_row(first)))?;
            f(batch, first).map_err(|e| locate(e.shift_row(first)))?;
            at += n;
        }
        return Ok(());
    }
    let learned = input.row_bytes.load(std::sync::atomic::Ordering::Relaxed);
    let mut batch_rows = match learned {
        0 => batch_rows(input, row_group, &mask),
        per_row => rows_for(BATCH_BYTES, per_row, 1).clamp(1, BATCH_ROWS),
    };
    let mut delivered = 0u64;
    // Fixed-size list columns are read by our own decoder while it can; arrow-rs reads
    // the other columns, and all of them from the first row it cannot.
    let mut fast = FastColumns::open(input, row_group, &file_roots);
    // An error of arrow-rs's reader while the fast path runs: reported after arrow-rs
    // has read the rest alone (its own first error comes first), never dropped.
    let mut deferred = None;
    // The row group's chunks the last reader fetched, where it kept them.
    let mut fetched: Option<ColumnChunks> = None;
    loop {
        // Resumed with smaller batches, or from where the fast path stopped: skip what
        // was delivered.
        let selection = (delivered > 0).then(|| {
            RowSelection::from(vec![
                RowSelector::skip(delivered as usize),
                RowSelector::select((expected - delivered) as usize),
            ])
        });
        let arrow_mask = fast.as_ref().map_or(&mask, |f| &f.rest);
        let mut batches = Batches::open(
            input,
            row_group,
            arrow_mask,
            batch_rows,
            selection,
            fetched.take(),
        )
        .map_err(locate)?;
        let mut resume = false;
        // Only the decoder runs contained: `f` is our own code, whose panics must show.
        // The decoder cannot say which row of a batch failed: errors name the file only.
        loop {
            let batch = match (batches.next(row_group), &fast) {
                (Ok(Some(batch)), _) => batch,
                (Ok(None), _) => break,
                (Err(e), None) => return Err(locate(e)),
                // arrow-rs alone reports what it would have (it reads the columns in
                // another order, and might fail on another one first).
                (Err(e), Some(_)) => {
                    deferred = Some(locate(e));
                    fast = None;
                    resume = true;
                    break;
                }
            };
            let batch = match &mut fast {
                None => batch,
                Some(columns) => match columns.join(batch) {
                    Some(joined) => joined,
                    None => {
                        fast = None;
                        resume = true;
                        break;
                    }
                },
            };
            let rows = batch.num_rows();
            let bytes = batch.get_array_memory_size() as u64;
            let first = first_row + delivered;
            let batch = as_table(batch, first).map_err(|e| locate(e.shift_row(first)))?;
            // Hand over at most about BATCH_BYTES at a time (slices share the buffers).
            // A Delta file's deleted rows are gone: `kept` may be below `rows`.
            let kept = batch.num_rows();
            let step = rows_for(BATCH_BYTES, bytes, rows).clamp(1, rows.max(1));
            for start in (0..kept).step_by(step) {
                let slice = batch.slice(start, step.min(kept - start));
                let at = first + start as u64;
                f(slice, at).map_err(|e| locate(e.shift_row(at)))?;
            }
            delivered += rows as u64;
            // Measured: read the rest in batches that fit (after a probe, or where the
            // footer's sizes understated the rows).
            let fitting = rows_for(BATCH_BYTES, bytes, rows).clamp(1, BATCH_ROWS);
            if rows == batch_rows {
                let per_row = bytes.div_ceil(rows as u64).max(1);
                input
                    .row_bytes
                    .store(per_row, std::sync::atomic::Ordering::Relaxed);
            }
            let off = fitting > 2 * batch_rows || 2 * fitting < batch_rows;
            if off && rows == batch_rows && delivered < expected {
                batch_rows = fitting;
                resume = true;
                break;
            }
        }
        if !resume {
            break;
        }
        fetched = batches.chunks.as_ref().and_then(ColumnChunks::kept);
    }
    if let Some(e) = deferred {
        return Err(e);
    }
    if delivered != expected {
        return Err(locate(Error::new(ErrorKind::RowCountMismatch {
            expected,
            found: delivered,
            detail: "a row group decoded to a different number of rows than it declares",
        })));
    }
    Ok(())
}

/// The selected columns that [`fixed_list`] reads, joined to arrow-rs's batches of the
/// other selected columns. Only where the file's column chunks read apart cheaply
/// ([`ParquetBytes::column_pages`]): a store's come through one read-ahead, which serves
/// arrow-rs's reader.
struct FastColumns {
    /// Each fast column's place among the selected file columns (in file order, as
    /// arrow-rs orders them), its field, and its reader; in place order.
    readers: Vec<(usize, FieldRef, FixedListReader)>,
    /// The other selected columns, for arrow-rs's reader.
    rest: ProjectionMask,
}

impl FastColumns {
    /// `None` when no selected column is a fixed-size list the fast path reads (or its
    /// file cannot be opened again: arrow-rs's reader then reports why).
    fn open(input: &ParquetInput, row_group: usize, file_roots: &[usize]) -> Option<FastColumns> {
        if !input.fast_lists {
            return None;
        }
        let parquet = input.metadata.parquet_schema();
        // arrow-rs leaves empty groups out of the Arrow schema: its root indices are the
        // Parquet ones only when the counts agree.
        if parquet.root_schema().get_fields().len() != input.schema().fields().len() {
            return None;
        }
        let group = input.metadata.metadata().row_group(row_group);
        let mut roots = file_roots.to_vec();
        roots.sort_unstable();
        roots.dedup();
        let (mut readers, mut rest) = (Vec::new(), Vec::new());
        for (place, &root) in roots.iter().enumerate() {
            let Some(column) = fixed_list::fixed_list(input.schema(), parquet, root) else {
                rest.push(root);
                continue;
            };
            let file = input.data.column_pages()?;
            let rows = usize::try_from(group.num_rows()).ok()?;
            let chunk = group.column(column.leaf);
            let pages = contain(|| SerializedPageReader::new(Arc::new(file), chunk, rows, None))
                .ok()?
                .ok()?;
            let field = input.schema().fields()[root].clone();
            let values = u64::try_from(chunk.num_values()).ok()?;
            let reader = FixedListReader::new(Box::new(pages), column, values, rows as u64);
            readers.push((place, field, reader));
        }
        if readers.is_empty() {
            return None;
        }
        Some(FastColumns {
            readers,
            rest: ProjectionMask::roots(parquet, rest),
        })
    }

    /// `batch` (arrow-rs's rows of the other columns) with the fast columns' same rows
    /// in their places; `None` where the fast path stops.
    fn join(&mut self, batch: RecordBatch) -> Option<RecordBatch> {
        let rows = batch.num_rows();
        let schema = batch.schema();
        let mut fields: Vec<FieldRef> = schema.fields().iter().cloned().collect();
        let mut columns = batch.columns().to_vec();
        for (place, field, reader) in &mut self.readers {
            if *place > columns.len() {
                return None;
            }
            columns.insert(*place, reader.read(rows)?);
            fields.insert(*place, field.clone());
        }
        let schema = Schema::new_with_metadata(fields, schema.metadata().clone());
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        let joined = RecordBatch::try_new_with_options(Arc::new(schema), columns, &options).ok()?;
        #[cfg(test)]
        tests::FAST_ROWS.with(|n| n.set(n.get() + rows as u64));
        Some(joined)
    }
}

/// How many rows like these (`rows` rows taking `bytes` in all) fit in `budget` bytes.
pub(crate) fn rows_for(budget: u64, bytes: u64, rows: usize) -> usize {
    let per_row = bytes.div_ceil(rows.max(1) as u64).max(1);
    usize::try_from(budget / per_row).unwrap_or(usize::MAX)
}

/// Rows of the first batch of a row group whose footer cannot tell how large its rows
/// decode (see [`batch_rows`]); the rest is read in batches sized from it.
const PROBE_ROWS: usize = 64;

/// Rows per batch for a row group: [`BATCH_ROWS`], or as many as hold about
/// [`BATCH_BYTES`] of the selected columns, from the footer's uncompressed sizes (the
/// batch size never changes the output, only memory). A dictionary-encoded byte column
/// decodes to far more than its pages hold (each value once in the dictionary, then
/// indices): there, a small probe batch comes first and measures.
fn batch_rows(input: &ParquetInput, row_group: usize, mask: &ProjectionMask) -> usize {
    use parquet::basic::Encoding;
    let group = input.metadata.metadata().row_group(row_group);
    let rows = group.num_rows().max(1) as u64;
    let selected = || input.selected_chunks(row_group, mask);
    let bytes: u64 = selected()
        .map(|c| c.uncompressed_size().max(0) as u64)
        .sum();
    let rows_per_batch = rows_for(BATCH_BYTES, bytes, rows as usize).clamp(1, BATCH_ROWS);
    let dictionary_bytes = selected().any(|c| {
        matches!(
            c.column_type(),
            PhysicalType::BYTE_ARRAY | PhysicalType::FIXED_LEN_BYTE_ARRAY
        ) && c
            .encodings()
            .any(|e| matches!(e, Encoding::RLE_DICTIONARY | Encoding::PLAIN_DICTIONARY))
    });
    if dictionary_bytes {
        rows_per_batch.min(PROBE_ROWS)
    } else {
        rows_per_batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    thread_local! {
        /// Rows this thread's fast path delivered (see [`FastColumns::join`]).
        pub(super) static FAST_ROWS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// Every row of `input` through [`read_row_group`] (`Err` as text), and the rows the
    /// fast path delivered.
    fn read_all(input: &ParquetInput) -> (std::result::Result<Vec<RecordBatch>, String>, u64) {
        FAST_ROWS.with(|n| n.set(0));
        let roots: Vec<usize> = (0..input.schema().fields().len()).collect();
        let mut batches = Vec::new();
        let mut first_row = 0;
        let result = (0..input.row_group_rows().len()).try_for_each(|g| {
            let r = read_row_group(input, g, &roots, first_row, |batch, _| {
                batches.push(batch);
                Ok(())
            });
            first_row += input.row_group_rows()[g];
            r
        });
        let fast = FAST_ROWS.with(|n| n.get());
        (result.map(|()| batches).map_err(|e| e.to_string()), fast)
    }

    /// The same file through arrow-rs's reader alone, in batches of the size
    /// [`read_row_group`] reads these tables in (on some corrupt files arrow-rs's rows
    /// depend on the batch size).
    fn read_with_arrow(path: &Path) -> std::result::Result<Vec<RecordBatch>, String> {
        contain(|| {
            let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap())
                .map_err(|e| e.to_string())?;
            builder
                .with_batch_size(BATCH_ROWS)
                .build()
                .map_err(|e| e.to_string())?
                .map(|b| b.map_err(|e| e.to_string()))
                .collect()
        })?
    }

    /// Whether the fast path decodes every page of `input`'s first column (PLAIN or
    /// dictionary values; the levels are RLE).
    fn fast_encodings(input: &ParquetInput) -> bool {
        use parquet::basic::Encoding;
        input.metadata.metadata().row_groups().iter().all(|g| {
            g.column(0).encodings().all(|e| {
                matches!(
                    e,
                    Encoding::PLAIN
                        | Encoding::RLE
                        | Encoding::RLE_DICTIONARY
                        | Encoding::PLAIN_DICTIONARY
                )
            })
        })
    }

    /// Both sides' rows as one batch each (batch sizes differ), compared whole: values,
    /// nulls, types and field names.
    fn same_rows(ours: &[RecordBatch], arrow: &[RecordBatch]) -> bool {
        let concat =
            |b: &[RecordBatch]| arrow_select::concat::concat_batches(&b[0].schema(), b).unwrap();
        match (ours.is_empty(), arrow.is_empty()) {
            (true, true) => true,
            (false, false) => concat(ours) == concat(arrow),
            _ => false,
        }
    }

    /// A table of `rows` rows whose `x` is a `FixedSizeList` of `size` values, beside an
    /// `id` column unless `alone`, written with `props`. `nulls` = `(a, b, r)`: from row
    /// `r` on, a null list every `a`-th row and a null element every `b`-th element.
    #[allow(clippy::too_many_arguments)]
    fn fixed_list_table(
        name: &str,
        child: &DataType,
        size: i32,
        rows: usize,
        nulls: Option<(usize, usize, usize)>,
        alone: bool,
        props: parquet::file::properties::WriterProperties,
    ) -> ParquetInput {
        use arrow_array::{ArrayRef, FixedSizeListArray, Int64Array};
        use arrow_buffer::{BooleanBuffer, NullBuffer};
        use parquet::arrow::ArrowWriter;
        let dir = crate::test_dir(&format!("fixed-{name}"));
        let path = dir.join(name);
        let n = rows * size as usize;
        // Values repeat every 97 elements: dictionaries fill, some pages stay PLAIN.
        let values: ArrayRef = match child {
            DataType::Float32 => Arc::new(arrow_array::Float32Array::from_iter_values(
                (0..n).map(|i| (i % 97) as f32 * 0.5 - 7.0),
            )),
            DataType::Float64 => Arc::new(arrow_array::Float64Array::from_iter_values(
                (0..n).map(|i| (i % 97) as f64 * 0.25 - 3.0),
            )),
            DataType::Int32 => Arc::new(arrow_array::Int32Array::from_iter_values(
                (0..n).map(|i| (i % 97) as i32 - 40),
            )),
            _ => Arc::new(Int64Array::from_iter_values(
                (0..n).map(|i| ((i % 97) as i64 - 40) << 33),
            )),
        };
        let (values, lists) = match nulls {
            None => (values, None),
            Some((a, b, from)) => {
                let first = from * size as usize;
                let elements = BooleanBuffer::from_iter((0..n).map(|i| i < first || i % b != 1));
                let data = values
                    .to_data()
                    .into_builder()
                    .nulls(Some(NullBuffer::new(elements)));
                let values = arrow_array::make_array(data.build().unwrap());
                let lists = NullBuffer::new(BooleanBuffer::from_iter(
                    (0..rows).map(|r| r < from || r % a != 2),
                ));
                (values, Some(lists))
            }
        };
        let field = Arc::new(Field::new("element", child.clone(), true));
        let x = FixedSizeListArray::try_new(field, size, values, lists).unwrap();
        let mut columns: Vec<(&str, ArrayRef)> = vec![("x", Arc::new(x))];
        if !alone {
            columns.push(("id", Arc::new(Int64Array::from_iter_values(0..rows as i64))));
        }
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        let mut w = ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), Some(props))
            .unwrap();
        // Several writes: row groups of max_row_group_size rows.
        for start in (0..rows).step_by(1000) {
            w.write(&batch.slice(start, 1000.min(rows - start)))
                .unwrap();
        }
        w.close().unwrap();
        ParquetInput::open(InputFile::at(&path, name.into(), Default::default()).unwrap()).unwrap()
    }

    /// Fixed-size lists decode to what arrow-rs's reader makes of them, on every layout
    /// a writer may choose: V1 and V2 pages, PLAIN and dictionary values, pages that end
    /// inside a list, row groups of several batches; the fast path serves every row of a
    /// table without nulls, and a table with null lists or elements goes to arrow-rs's
    /// reader from the first page holding one.
    #[test]
    fn fixed_size_lists_decode_as_arrow_rs_decodes_them() {
        use parquet::file::properties::{WriterProperties, WriterVersion};
        let (mut cases, mut fast_cases) = (0, 0);
        for child in [
            DataType::Float32,
            DataType::Float64,
            DataType::Int32,
            DataType::Int64,
        ] {
            for size in [1, 3, 8, 32, 100] {
                for (version, dictionary, page_bytes) in [
                    (WriterVersion::PARQUET_1_0, true, 1 << 20),
                    (WriterVersion::PARQUET_1_0, false, 700),
                    (WriterVersion::PARQUET_2_0, true, 300),
                    (WriterVersion::PARQUET_2_0, false, 1 << 20),
                ] {
                    for (nulls, alone) in [
                        (None, false),
                        (None, true),
                        (Some((7, 1000, 0)), false),
                        (Some((5000, 13, 0)), true),
                    ] {
                        let props = WriterProperties::builder()
                            .set_writer_version(version)
                            .set_dictionary_enabled(dictionary)
                            .set_dictionary_page_size_limit(256)
                            .set_data_page_size_limit(page_bytes)
                            .set_write_batch_size(37)
                            .set_max_row_group_row_count(Some(2500))
                            .build();
                        let rows = 6000;
                        let name = format!("{child}-{size}-{version:?}-{dictionary}-{page_bytes}-{nulls:?}-{alone}.parquet");
                        let input =
                            fixed_list_table(&name, &child, size, rows, nulls, alone, props);
                        let (ours, fast) = read_all(&input);
                        let arrow = read_with_arrow(input.file.path());
                        let ours = ours.unwrap_or_else(|e| panic!("{name}: {e}"));
                        assert!(same_rows(&ours, &arrow.unwrap()), "{name}: rows differ");
                        assert_eq!(
                            ours.iter().map(|b| b.num_rows()).sum::<usize>(),
                            rows,
                            "{name}"
                        );
                        match nulls {
                            // arrow-rs's V2 writer falls back from a full dictionary to
                            // DELTA_BINARY_PACKED for integers: arrow-rs reads those.
                            None if fast_encodings(&input) => {
                                assert_eq!(
                                    fast, rows as u64,
                                    "{name}: the fast path read every row"
                                )
                            }
                            None => assert!(fast < rows as u64, "{name}"),
                            Some(_) => assert!(fast < rows as u64, "{name}: nulls go to arrow-rs"),
                        }
                        fast_cases += u64::from(fast == rows as u64);
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 4 * 5 * 4 * 4);
        // Every case without nulls (160) but the integer V2 ones, whose values arrow-rs
        // writes DELTA_BINARY_PACKED (2 types x 5 sizes x 2 layouts x 2 tables).
        assert_eq!(fast_cases, 160 - 40);
    }

    /// The pyarrow-written table the README converts: its `x` (FixedSizeList<f32>[8])
    /// goes through the fast path and reads as arrow-rs reads it.
    #[test]
    fn small_parquet_reads_its_fixed_size_list_fast() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/small.parquet");
        let input = ParquetInput::open(
            InputFile::at(&path.clone(), "small.parquet".into(), Default::default()).unwrap(),
        )
        .unwrap();
        let (ours, fast) = read_all(&input);
        assert_eq!(fast, 2000);
        assert!(same_rows(&ours.unwrap(), &read_with_arrow(&path).unwrap()));
        // Switched off (`--parquet-decoder arrow-rs`), arrow-rs reads it all.
        let mut plain = input.clone();
        plain.set_fast_lists(false);
        let (theirs, fast) = read_all(&plain);
        assert_eq!(fast, 0);
        assert!(same_rows(
            &theirs.unwrap(),
            &read_with_arrow(&path).unwrap()
        ));
    }

    /// Fast columns take their places among arrow-rs's: two lists around other columns,
    /// all of them or some selected, come out as arrow-rs's reader orders them.
    #[test]
    fn fixed_size_lists_keep_their_places_among_the_columns() {
        use arrow_array::{ArrayRef, FixedSizeListArray, Float32Array, Int64Array, StringArray};
        use parquet::arrow::ArrowWriter;
        let rows = 3000;
        let list = |size: i32, scale: f32| -> ArrayRef {
            let values =
                Float32Array::from_iter_values((0..rows * size as usize).map(|i| i as f32 * scale));
            let field = Arc::new(Field::new("item", DataType::Float32, false));
            Arc::new(FixedSizeListArray::try_new(field, size, Arc::new(values), None).unwrap())
        };
        let batch = RecordBatch::try_from_iter(vec![
            (
                "id",
                Arc::new(Int64Array::from_iter_values(0..rows as i64)) as ArrayRef,
            ),
            ("a", list(4, 0.5)),
            (
                "name",
                Arc::new(StringArray::from_iter_values(
                    (0..rows).map(|i| format!("n{i}")),
                )) as ArrayRef,
            ),
            ("b", list(2, -1.0)),
        ])
        .unwrap();
        let dir = crate::test_dir("places");
        let path = dir.join("places.parquet");
        let mut w =
            ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let input = ParquetInput::open(
            InputFile::at(&path, "places.parquet".into(), Default::default()).unwrap(),
        )
        .unwrap();
        for roots in [vec![0, 1, 2, 3], vec![3, 1], vec![1, 2], vec![3]] {
            FAST_ROWS.with(|n| n.set(0));
            let mut ours = Vec::new();
            read_row_group(&input, 0, &roots, 0, |b, _| {
                ours.push(b);
                Ok(())
            })
            .unwrap();
            assert_eq!(FAST_ROWS.with(|n| n.get()), rows as u64, "{roots:?}");
            let mut sorted = roots.clone();
            sorted.sort();
            let expected = batch.project(&sorted).unwrap();
            let ours = arrow_select::concat::concat_batches(&ours[0].schema(), &ours).unwrap();
            assert_eq!(ours.columns(), expected.columns(), "{roots:?}");
            let names = |b: &RecordBatch| -> Vec<String> {
                b.schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect()
            };
            assert_eq!(names(&ours), names(&expected), "{roots:?}");
        }
    }

    /// A null after the first batch: the fast path delivers that batch, then arrow-rs
    /// reads the rest of the row group, skipping the rows delivered (V1 pages by their
    /// levels, V2 pages by their row counts).
    #[test]
    fn a_null_after_the_first_batch_hands_the_rest_over() {
        use parquet::file::properties::{WriterProperties, WriterVersion};
        for version in [WriterVersion::PARQUET_1_0, WriterVersion::PARQUET_2_0] {
            let props = WriterProperties::builder()
                .set_writer_version(version)
                .set_data_page_size_limit(4000)
                .set_max_row_group_row_count(Some(20_000))
                .build();
            let name = format!("late-null-{version:?}.parquet");
            // One null list, at row 9502 (from row 9500 on, rows with r % 9500 == 2).
            let nulls = Some((9500, usize::MAX, 9500));
            let input = fixed_list_table(&name, &DataType::Float32, 4, 12_000, nulls, false, props);
            let (ours, fast) = read_all(&input);
            assert!(
                same_rows(&ours.unwrap(), &read_with_arrow(input.file.path()).unwrap()),
                "{name}"
            );
            assert_eq!(
                fast, BATCH_ROWS as u64,
                "{name}: the first batch fast, the rest arrow-rs's"
            );
        }
    }

    /// Corrupt bytes anywhere in a file of fixed-size lists: read with the fast path, the
    /// file decodes to the same rows as arrow-rs's reader alone makes of it, or fails
    /// where arrow-rs's reader fails too (the fast path never accepts what arrow-rs
    /// would refuse, nor refuses itself: it hands over).
    #[test]
    fn corrupt_fixed_size_lists_decode_or_fail_as_arrow_rs_does() {
        use parquet::file::properties::{WriterProperties, WriterVersion};
        for (version, dictionary) in [
            (WriterVersion::PARQUET_1_0, true),
            (WriterVersion::PARQUET_2_0, false),
        ] {
            let props = WriterProperties::builder()
                .set_writer_version(version)
                .set_dictionary_enabled(dictionary)
                .set_dictionary_page_size_limit(256)
                .set_data_page_size_limit(400)
                .set_compression(parquet::basic::Compression::UNCOMPRESSED)
                .build();
            let name = format!("corrupt-base-{version:?}.parquet");
            let input = fixed_list_table(&name, &DataType::Float32, 3, 10_000, None, false, props);
            let original = std::fs::read(input.file.path()).unwrap();
            let metadata_start = original.len()
                - 8
                - u32::from_le_bytes(
                    original[original.len() - 8..original.len() - 4]
                        .try_into()
                        .unwrap(),
                ) as usize;
            let mut seed = 0x9e37_79b9_7f4a_7c15u64;
            let mut next = || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            let mut compared = 0;
            for i in 0..300 {
                let mut bytes = original.clone();
                // Page bytes only: a corrupt footer fails before any page is read.
                for _ in 0..1 + i % 3 {
                    let at = 4 + (next() as usize) % (metadata_start - 4);
                    bytes[at] ^= 1 << (next() % 8);
                }
                let path = input
                    .file
                    .path()
                    .with_file_name(format!("corrupt-{version:?}-{i}.parquet"));
                std::fs::write(&path, &bytes).unwrap();
                let Ok(input) = ParquetInput::open(
                    InputFile::at(&path.clone(), "c.parquet".into(), Default::default()).unwrap(),
                ) else {
                    continue;
                };
                let (ours, _) = read_all(&input);
                let arrow = read_with_arrow(&path);
                match (&ours, &arrow) {
                    (Ok(ours), Ok(arrow)) => {
                        assert!(same_rows(ours, arrow), "{}: rows differ", path.display())
                    }
                    (Err(_), Err(_)) => {}
                    _ => panic!(
                        "{}: ours {:?}, arrow-rs {:?}",
                        path.display(),
                        ours.as_ref().map(|b| b.len()),
                        arrow.as_ref().map(|b| b.len())
                    ),
                }
                compared += 1;
                std::fs::remove_file(&path).unwrap();
            }
            assert!(compared > 200, "{compared}");
        }
    }

    /// A one-row-group table of `rows` rows: `id` (row number) and `blob`, 64 KiB values
    /// (distinct ones, or only 4 distinct, dictionary-encoded).
    fn blob_table(name: &str, rows: usize, dictionary: bool) -> ParquetInput {
        use arrow_array::{ArrayRef, BinaryArray, Int64Array};
        use parquet::arrow::ArrowWriter;
        use parquet::file::properties::WriterProperties;
        let dir = crate::test_dir(&format!("batches-{name}"));
        let path = dir.join(name);
        let blobs: Vec<Vec<u8>> = (0..rows)
            .map(|i| vec![if dictionary { (i % 4) as u8 } else { i as u8 }; 64 << 10])
            .collect();
        let batch = RecordBatch::try_from_iter(vec![
            (
                "id",
                Arc::new(Int64Array::from_iter_values(0..rows as i64)) as ArrayRef,
            ),
            (
                "blob",
                Arc::new(BinaryArray::from_iter_values(&blobs)) as ArrayRef,
            ),
        ])
        .unwrap();
        let props = WriterProperties::builder()
            .set_dictionary_enabled(dictionary)
            .set_dictionary_page_size_limit(1 << 30)
            .build();
        let mut w = ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), Some(props))
            .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        ParquetInput::open(InputFile::at(&path, name.into(), Default::default()).unwrap()).unwrap()
    }

    /// Large values come in batches of about BATCH_BYTES, whether the
    /// footer's sizes tell (plain) or not (a dictionary holds each value once); every
    /// row arrives once, in order.
    #[test]
    fn batches_are_sized_by_bytes_not_rows() {
        let budget_rows = (BATCH_BYTES / (64 << 10)) as usize;
        for dictionary in [false, true] {
            let input = blob_table(&format!("blobs-{dictionary}.parquet"), 500, dictionary);
            let mut sizes = Vec::new();
            let mut next_id = 0i64;
            read_row_group(&input, 0, &[0, 1], 0, |batch, first_row| {
                assert_eq!(first_row, next_id as u64);
                let ids = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<arrow_array::Int64Array>();
                for id in ids.expect("int64 ids").values() {
                    assert_eq!(*id, next_id);
                    next_id += 1;
                }
                sizes.push(batch.num_rows());
                Ok(())
            })
            .unwrap();
            assert_eq!(next_id, 500, "dictionary {dictionary}");
            assert!(
                sizes.iter().all(|&n| n <= budget_rows + 1),
                "dictionary {dictionary}: batches of {sizes:?} rows, budget {budget_rows}"
            );
            assert!(sizes.len() >= 500 / (budget_rows + 1), "{sizes:?}");
        }
    }

    /// Small rows come in batches of up to BATCH_ROWS: the first row group of a file with
    /// dictionary-encoded strings starts with a probe of PROBE_ROWS, the rest of the file
    /// reads with the size learned.
    #[test]
    fn small_rows_come_in_full_batches() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/small.parquet");
        let input = ParquetInput::open(
            InputFile::at(&path, "small.parquet".into(), Default::default()).unwrap(),
        )
        .unwrap();
        let roots: Vec<usize> = (0..input.schema().fields().len()).collect();
        let mut sizes = Vec::new();
        for group in 0..input.row_group_rows().len() {
            read_row_group(&input, group, &roots, 0, |batch, _| {
                sizes.push(batch.num_rows());
                Ok(())
            })
            .unwrap();
        }
        // small.parquet: two row groups of 1000 rows.
        assert_eq!(sizes, vec![PROBE_ROWS, 1000 - PROBE_ROWS, 1000]);
    }

    fn corrupt(name: &str) -> ParquetInput {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/parquet-corrupt")
            .join(name);
        ParquetInput::open(InputFile::at(&path, name.into(), Default::default()).unwrap()).unwrap()
    }

    /// A page header whose skipped list runs past the end of the file fails
    /// at the end, instead of reading the end once per claimed element.
    #[test]
    fn a_read_at_the_end_of_the_file_is_an_error() {
        let input = corrupt("page-header-skip-loop.parquet");
        let roots: Vec<usize> = (0..input.schema().fields().len()).collect();
        let errors: Vec<String> = (0..input.row_group_rows().len())
            .map(
                |g| match read_row_group(&input, g, &roots, 0, |_, _| Ok(())) {
                    Ok(()) => "ok".into(),
                    Err(e) => e.to_string(),
                },
            )
            .collect();
        assert!(
            errors
                .iter()
                .any(|e| e.contains("a page runs past the end of the file")),
            "{errors:?}"
        );
    }
}
