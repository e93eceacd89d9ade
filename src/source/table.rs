//! Tables of files: [`TableFile`], one file of a table split into units read alone (the
//! shape every columnar source gives the converter), and what Delta Lake and Iceberg
//! tables share: the files listed beside the data files, commit times, and the one-line
//! table error.

use arrow_array::RecordBatch;

use crate::error::{Error, ErrorKind, Result};

/// One file of a table, split into units that are read alone (Parquet row groups; ORC
/// stripes or Lance fragments would be too), its rows as the table has them (a Delta or
/// Iceberg data file: deleted rows dropped, columns by field id, partition values added).
/// The converter's worker share, checkpoints, resume and read-ahead run over these,
/// whatever the format.
pub trait TableFile: Send + Sync {
    /// The file as the manifest's `inputs` name it.
    fn name(&self) -> &str;
    /// Its size.
    fn bytes(&self) -> u64;
    /// Its ETag in a store (its reads are pinned to it).
    fn etag(&self) -> Option<&str>;
    /// What identifies it where no ETag does (`--append` compares it with the manifest's
    /// for equality): a local file's `mtime_ns:ino:ctime_ns`, a table's data file's
    /// record in its table.
    fn identity(&self) -> Option<String> {
        None
    }
    /// The delete files that apply to it (Iceberg), as the manifest's `inputs` name
    /// them: `--append` finds a new one among them.
    fn delete_files(&self) -> Vec<String> {
        Vec::new()
    }
    /// The rows of each unit, in order.
    fn unit_rows(&self) -> Vec<u64>;
    /// The rows of `[first, first + rows)` the table keeps (a deletion vector drops
    /// some).
    fn kept_rows(&self, first: u64, rows: u64) -> u64;
    /// Whether [`TableFile::kept_rows`] is exact before the file is read (false where
    /// deletes are applied only while reading).
    fn exact_rows(&self) -> bool;
    /// Bytes of unit `unit` that the columns `roots` take (what a worker's share is
    /// counted in).
    fn selected_bytes(&self, unit: usize, roots: &[usize]) -> u64;
    /// About what decoding unit `unit` holds at once (the read-ahead's budget counts it).
    fn decode_bytes(&self, unit: usize) -> u64;
    /// Reads unit `unit`'s columns `roots` (indices of the table's schema), calling `f`
    /// with each batch and the row index (within the file) of its first row.
    ///
    /// # Errors
    ///
    /// A decoding error naming the file; `f`'s own error, passed through.
    fn read_unit(
        &self,
        unit: usize,
        roots: &[usize],
        first_row: u64,
        f: &mut dyn FnMut(RecordBatch, u64) -> Result<()>,
    ) -> Result<()>;
}

/// A file the manifest's `inputs` list beside the data files: the log or metadata file
/// that defines the snapshot, a deletion vector or delete file.
#[derive(Debug, Clone)]
pub struct SideFile {
    /// As the manifest names it.
    pub display: String,
    /// Its size.
    pub bytes: u64,
    /// Its ETag in a store.
    pub etag: Option<String>,
    /// What identifies it where no ETag does (see [`TableFile::identity`]).
    pub identity: Option<String>,
}

/// `--timestamp T` in milliseconds since the epoch.
///
/// # Errors
///
/// A usage error when T is not RFC 3339.
pub(crate) fn parse_time(timestamp: &str) -> Result<i64> {
    Ok(chrono::DateTime::parse_from_rfc3339(timestamp)
        .map_err(|e| {
            Error::invalid_option(
                "timestamp",
                format!("{timestamp:?} is not an RFC 3339 time (2026-11-30T08:00:00Z): {e}"),
            )
        })?
        .timestamp_millis())
}

/// A table that cannot be read as asked, named.
pub(crate) fn table_error(table: &str, detail: impl Into<String>) -> Error {
    Error::new(ErrorKind::Table {
        detail: detail.into(),
    })
    .with_file(table)
}
