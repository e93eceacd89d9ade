//! What Delta Lake and Iceberg tables share: the snapshot a conversion read (the
//! manifest's `table`), the files listed beside the data files, commit times, and the
//! one-line table error.

use crate::error::{Error, ErrorKind, Result};

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
