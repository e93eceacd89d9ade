//! What Delta Lake and Iceberg tables share: the snapshot a conversion read (the
//! manifest's `table`), the files listed beside the data files, commit times, and the
//! one-line table error.

use crate::error::{Error, ErrorKind, Result};

/// The snapshot a conversion read: the manifest's `table`. A Delta table's snapshot is
/// its `version`, an Iceberg table's its `snapshot_id`; the key of the other format is
/// left out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[non_exhaustive]
pub struct TableInfo {
    /// `delta` or `iceberg`.
    pub format: String,
    /// The table as given.
    pub location: String,
    /// A Delta snapshot's version (none for a table with no commit yet).
    #[serde(default)]
    pub version: Option<u64>,
    /// An Iceberg snapshot's id (none for a table with no snapshot yet).
    #[serde(default)]
    pub snapshot_id: Option<i64>,
    /// Its commit time, RFC 3339 UTC.
    pub timestamp: Option<String>,
}

impl TableInfo {
    /// A Delta table's snapshot.
    pub(crate) fn delta(location: &str, version: Option<u64>, timestamp_ms: Option<i64>) -> Self {
        TableInfo {
            format: "delta".into(),
            location: location.into(),
            version,
            snapshot_id: None,
            timestamp: timestamp_ms.map(rfc3339_ms),
        }
    }

    /// An Iceberg table's snapshot.
    pub(crate) fn iceberg(
        location: &str,
        snapshot_id: Option<i64>,
        timestamp_ms: Option<i64>,
    ) -> Self {
        TableInfo {
            format: "iceberg".into(),
            location: location.into(),
            version: None,
            snapshot_id,
            timestamp: timestamp_ms.map(rfc3339_ms),
        }
    }

    /// The snapshot in words, for errors and the summary line: `version 4`, `snapshot
    /// 123`, or `before its first commit`.
    pub fn snapshot_words(&self) -> String {
        match (self.version, self.snapshot_id) {
            (Some(v), _) => format!("version {v}"),
            (_, Some(id)) => format!("snapshot {id}"),
            _ if self.format == "iceberg" => "before its first snapshot".into(),
            _ => "before its first commit".into(),
        }
    }
}

impl serde::Serialize for TableInfo {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(4))?;
        map.serialize_entry("format", &self.format)?;
        map.serialize_entry("location", &self.location)?;
        if self.format == "iceberg" {
            map.serialize_entry("snapshot_id", &self.snapshot_id)?;
        } else {
            map.serialize_entry("version", &self.version)?;
        }
        map.serialize_entry("timestamp", &self.timestamp)?;
        map.end()
    }
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
}

/// Milliseconds since the epoch as RFC 3339 UTC (`2026-11-30T08:15:02.123Z`).
pub fn rfc3339_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
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
