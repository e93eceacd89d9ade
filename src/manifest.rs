//! The manifest: `{prefix}.manifest.json`, the commit point of a conversion.
//!
//! Built last and written atomically (temporary name, fsync, rename): its presence means
//! every shard it lists is complete. Field names equal the manifest's JSON keys, which
//! scheduled jobs read: keys are only ever added, never renamed.

use std::collections::BTreeMap;
use std::path::{Component, Path};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::example::{FeatureSpec, RecordType};
use crate::tfrecord::Compression;

/// The manifest format version we write.
pub const MANIFEST_VERSION: u32 = 1;
pub use crate::shard::name::MANIFEST_SUFFIX;

/// One input file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputInfo {
    /// The path as given (a folder input's files: the folder as given, joined with the
    /// file's relative path).
    pub path: String,
    /// Size on disk.
    pub bytes: u64,
    /// Rows read from it.
    pub rows: u64,
    /// The object's ETag (or version) for an input read from a store: the run's reads
    /// were pinned to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
}

/// One shard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// File name, relative to the manifest's folder.
    pub file: String,
    /// Records in it.
    pub records: u64,
    /// Size on disk.
    pub bytes: u64,
    /// Plain CRC32C of the file's bytes on disk, 8 lowercase hex digits.
    pub crc32c: String,
}

pub use crate::source::images::Skipped;

/// `{prefix}.manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`MANIFEST_VERSION`].
    pub manifest_version: u32,
    /// The version of tfshard that wrote it.
    pub tfshard_version: String,
    /// When, RFC 3339, UTC.
    pub created: String,
    /// `example` or `sequence_example`.
    pub record_type: RecordType,
    /// `none`, `gzip` or `zlib`.
    pub compression: String,
    /// The options that change the output, resolved (sizes in bytes).
    pub options: BTreeMap<String, serde_json::Value>,
    /// A lakehouse table's snapshot (`convert delta`): format, location, version and
    /// commit time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<TableInfo>,
    /// The inputs, in the order read.
    pub inputs: Vec<InputInfo>,
    /// The feature spec.
    pub features: Vec<FeatureSpec>,
    /// Image classes, in label order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<Vec<String>>,
    /// Image files left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<Vec<Skipped>>,
    /// The shards, in index order.
    pub shards: Vec<ShardInfo>,
    /// Records in all shards.
    pub records: u64,
    /// Bytes on disk of all shards.
    pub bytes: u64,
    /// For a worker's part (`--num-workers`): which worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerInfo>,
    /// For a worker's part: the row groups it covers, `[first, end)` in the run's order
    /// of every row group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_groups: Option<[u64; 2]>,
}

pub use crate::source::table::TableInfo;

/// A part manifest's `worker`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// The worker's index.
    pub index: u64,
    /// Workers in all.
    pub count: u64,
}

impl Manifest {
    /// The compression, parsed.
    pub fn compression(&self) -> Option<Compression> {
        Compression::from_name(&self.compression)
    }

    /// Parses a manifest's bytes (read from `path`, which errors name).
    ///
    /// # Errors
    ///
    /// The bytes are not a manifest.
    pub fn from_json(bytes: &[u8], path: &Path) -> Result<Manifest> {
        serde_json::from_slice(bytes)
            .map_err(|e| Error::new(ErrorKind::ManifestInvalid(e)).with_file(path))
    }

    /// The manifest as written: pretty JSON and a final newline.
    ///
    /// # Errors
    ///
    /// Never in practice (every field serializes); an I/O error otherwise.
    pub fn to_json(&self) -> Result<Vec<u8>> {
        let mut json =
            serde_json::to_vec_pretty(self).map_err(|e| Error::from(std::io::Error::other(e)))?;
        json.push(b'\n');
        Ok(json)
    }

    /// Lists `shards`, and sets the totals from them.
    pub fn set_shards(&mut self, shards: Vec<ShardInfo>) {
        self.records = shards.iter().map(|s| s.records).sum();
        self.bytes = shards.iter().map(|s| s.bytes).sum();
        self.shards = shards;
    }

    /// Whether `file` (a name relative to the manifest's folder) is one of its shards.
    pub fn lists(&self, file: &str) -> bool {
        self.shards.iter().any(|s| s.file == file)
    }
}

/// Whether a manifest's `file` entry stays inside the manifest's folder: relative, no
/// `..`, no root. Untrusted manifests must pass this before a file is opened.
pub fn is_safe_relative(file: &str) -> bool {
    let path = Path::new(file);
    !file.is_empty()
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// Refuses a shard file name that would leave the folder of the manifest at `path`.
///
/// # Errors
///
/// [`ErrorKind::ManifestInvalid`] naming the manifest.
pub fn check_shard_file(file: &str, path: &std::path::Path) -> crate::Result<()> {
    if is_safe_relative(file) {
        return Ok(());
    }
    Err(
        crate::Error::new(crate::ErrorKind::ManifestInvalid(serde::de::Error::custom(
            format!("unsafe path: shard file {file:?} leaves the manifest's folder"),
        )))
        .with_file(path),
    )
}

/// The current time as RFC 3339 in UTC, to the second (`2026-11-29T09:25:19Z`).
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format_rfc3339(secs)
}

fn format_rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_rfc3339(1_795_944_319), "2026-11-29T09:25:19Z");
    }

    #[test]
    fn unsafe_paths() {
        assert!(is_safe_relative("data-00000-of-00001.tfrecord"));
        assert!(is_safe_relative("./a"));
        assert!(!is_safe_relative("../a"));
        assert!(!is_safe_relative("a/../../b"));
        assert!(!is_safe_relative("/etc/passwd"));
        assert!(!is_safe_relative(""));
    }
}
