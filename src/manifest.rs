//! The manifest: `{prefix}.manifest.json`, the commit point of a conversion.
//!
//! Built last and written atomically (temporary name, fsync, rename): its presence means
//! every shard it lists is complete. Field names equal the manifest's JSON keys, which
//! scheduled jobs read: keys are only ever added, never renamed.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::example::{FeatureSpec, RecordType};
use crate::store::destination::Destination;
use crate::store::IoOptions;
use crate::tfrecord::Compression;

/// The manifest format version a plain run writes.
pub const MANIFEST_VERSION: u32 = 1;
/// The version of a manifest whose set has more than generation 0 (`--append`): it
/// adds `generation` to each shard and `generations`. Readers accept both.
pub const MANIFEST_VERSION_GENERATIONS: u32 = 2;
/// The suffix of a manifest file name.
pub const MANIFEST_SUFFIX: &str = ".manifest.json";

/// One input file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
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
    /// What identifies the input where no ETag does, compared for equality by
    /// `--append` (never against a clock): a local file's `mtime_ns:ino:ctime_ns`; a
    /// Delta or Iceberg data file's record in its table (`delta:…`, `iceberg:…`), which
    /// the file system cannot change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

/// What starts the ETag of a listing input (an image folder: see [`listing_etag`]).
pub(crate) const LISTING_ETAG: &str = "listing-";

/// The ETag of a listing input (an image folder) whose entries' running digest is
/// `digest`: `--append` tells a folder that only grew by it.
pub(crate) fn listing_etag(digest: u64) -> String {
    format!("{LISTING_ETAG}{digest:016x}")
}

/// One shard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ShardInfo {
    /// File name, relative to the manifest's folder.
    pub file: String,
    /// Records in it.
    pub records: u64,
    /// Size on disk.
    pub bytes: u64,
    /// Plain CRC32C of the file's bytes on disk, 8 lowercase hex digits.
    pub crc32c: String,
    /// The inputs it holds records of, in the order its records came from them (none
    /// for an empty shard, or in a manifest written before tfshard recorded them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<ShardSource>,
    /// The generation that wrote it (`manifest_version` 2; absent in a plain run's
    /// manifest, whose shards are all generation 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u32>,
}

/// One generation of a set (`--append`): the manifest's `generations`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GenerationInfo {
    /// Its number: 0 for the first conversion, then one more per append.
    pub generation: u32,
    /// When it was published, RFC 3339, UTC.
    pub created: String,
    /// The table's version (Delta) or snapshot id (Iceberg) it brought the set to; null
    /// for file inputs.
    pub watermark: Option<i64>,
    /// Records it wrote.
    pub records: u64,
    /// Shards it wrote.
    pub shards: u64,
    /// The shards it retired (their records are re-converted into it, or deleted from
    /// the table).
    pub retired: Vec<String>,
}

/// Records of one input that a shard holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ShardSource {
    /// The input, as the manifest's `inputs` names it.
    pub input: String,
    /// `[start, end)`: the range of the input's records (counted in the order its source
    /// yields them: a Parquet file's rows, a Delta file's rows its deletion vector keeps,
    /// a TFRecord file's records) that holds this shard's records of it. A split's or a
    /// shuffled shard's range also holds records that went elsewhere.
    pub rows: [u64; 2],
}

impl ShardSource {
    /// Records `[start, end)` of `input`.
    pub fn new(input: impl Into<String>, rows: [u64; 2]) -> ShardSource {
        ShardSource {
            input: input.into(),
            rows,
        }
    }
}

/// A file left out of an image conversion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Skipped {
    /// Path relative to the input folder.
    pub path: String,
    /// Why.
    pub reason: String,
}

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
    /// The set's generations, oldest first (`manifest_version` 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generations: Option<Vec<GenerationInfo>>,
    /// The statistics of the set's records (`{prefix}.stats.pb`), unless converted with
    /// `--no-stats`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<StatsInfo>,
}

/// The manifest's `stats`: the statistics file, written with the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StatsInfo {
    /// Its name, relative to the manifest's folder.
    pub file: String,
    /// Its size.
    pub bytes: u64,
    /// The SHA-256 of its bytes, 64 lowercase hex digits.
    pub sha256: String,
    /// Bytes of the shards' partial statistics kept beside them (`{shard}.stats`).
    pub partials_bytes: u64,
}

impl StatsInfo {
    /// The entry of a statistics file.
    pub fn new(file: String, bytes: u64, sha256: String, partials_bytes: u64) -> StatsInfo {
        StatsInfo {
            file,
            bytes,
            sha256,
            partials_bytes,
        }
    }
}

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

/// Milliseconds since the epoch as RFC 3339 UTC (`2026-11-30T08:15:02.123Z`).
pub fn rfc3339_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

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

    /// The newest generation of the set (0 for a plain run's).
    pub fn generation(&self) -> u32 {
        (self.generations.iter().flatten())
            .map(|g| g.generation)
            .max()
            .unwrap_or(0)
    }

    /// The set's generations, as recorded, or (a plain run's manifest) its one
    /// generation 0.
    pub fn generations_or_first(&self) -> Vec<GenerationInfo> {
        match &self.generations {
            Some(g) => g.clone(),
            None => vec![GenerationInfo {
                generation: 0,
                created: self.created.clone(),
                watermark: self.watermark(),
                records: self.records,
                shards: self.shards.len() as u64,
                retired: Vec::new(),
            }],
        }
    }

    /// The table snapshot the set holds: a Delta version or an Iceberg snapshot id.
    pub fn watermark(&self) -> Option<i64> {
        let t = self.table.as_ref()?;
        t.version.map(|v| v as i64).or(t.snapshot_id)
    }

    /// The manifest `rel` of the destination `out`, its shards and generations checked
    /// ([`Manifest::check_generations`]): what every writer of a set builds on.
    ///
    /// # Errors
    ///
    /// An I/O or store error reading it; a manifest that does not parse or whose shards
    /// and generations do not add up, naming it.
    pub(crate) fn read_checked(out: &dyn Destination, rel: &str) -> Result<Manifest> {
        let path = out.display(rel);
        let m = Manifest::from_json(&out.read(rel)?, &path)?;
        m.check_generations(&path)?;
        Ok(m)
    }

    /// Checks what a hand edit could break in a set's shard list and generations: a
    /// shard listed twice, a shard of a generation the manifest does not record, a
    /// generation with more live shards than it wrote, totals that do not add up.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::ManifestInvalid`] naming the key and `path`.
    pub fn check_generations(&self, path: &Path) -> Result<()> {
        let invalid = |what: String| {
            Error::new(ErrorKind::ManifestInvalid(serde::de::Error::custom(what))).with_file(path)
        };
        let mut seen = std::collections::HashSet::new();
        for s in &self.shards {
            if !seen.insert(s.file.as_str()) {
                return Err(invalid(format!("shards: {:?} is listed twice", s.file)));
            }
            if let Some(bad) = s.sources.iter().find(|r| r.rows[0] > r.rows[1]) {
                return Err(invalid(format!(
                    "shards: {:?}'s sources hold rows [{}, {}) of {}",
                    s.file, bad.rows[0], bad.rows[1], bad.input
                )));
            }
        }
        let records: u64 = self.shards.iter().map(|s| s.records).sum();
        if records != self.records {
            return Err(invalid(format!(
                "records: {} but its shards hold {records}",
                self.records
            )));
        }
        let Some(generations) = &self.generations else {
            return Ok(());
        };
        for (i, g) in generations.iter().enumerate() {
            if i > 0 && g.generation <= generations[i - 1].generation {
                return Err(invalid(format!(
                    "generations: generation {} follows generation {}",
                    g.generation,
                    generations[i - 1].generation
                )));
            }
            let live = (self.shards.iter())
                .filter(|s| s.generation.unwrap_or(0) == g.generation)
                .count() as u64;
            if live > g.shards {
                return Err(invalid(format!(
                    "generations: generation {} wrote {} shards but {live} are listed",
                    g.generation, g.shards
                )));
            }
        }
        for s in &self.shards {
            let g = s.generation.unwrap_or(0);
            if !generations.iter().any(|r| r.generation == g) {
                return Err(invalid(format!(
                    "shards: {:?} is of generation {g}, which generations does not record",
                    s.file
                )));
            }
        }
        Ok(())
    }
}

/// Reads and parses a manifest (a file or an object, read with the settings `io`).
///
/// # Errors
///
/// The file cannot be read or is not a manifest.
pub fn read_manifest(path: &Path, io: IoOptions) -> Result<Manifest> {
    Manifest::from_json(&crate::store::paths::read(path, io)?, path)
}

/// Whether a file name or path is a manifest's: `{prefix}.manifest.json`, or a
/// generation's pinned `{prefix}.manifest-g{g:05}.json`.
pub fn is_manifest_name(name: &str) -> bool {
    if name.ends_with(MANIFEST_SUFFIX) {
        return true;
    }
    name.strip_suffix(".json")
        .and_then(|n| n.rsplit_once(".manifest-g"))
        .is_some_and(|(head, g)| {
            !head.is_empty() && g.len() >= 5 && g.bytes().all(|b| b.is_ascii_digit())
        })
}

/// The manifests (`*.manifest.json`) in a folder, sorted by name.
///
/// # Errors
///
/// The folder cannot be listed.
pub fn manifests_in(dir: &Path, io: IoOptions) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = crate::store::paths::files_in(dir, io)?
        .into_iter()
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.ends_with(MANIFEST_SUFFIX) && !name.starts_with('.')
        })
        .collect();
    out.sort();
    Ok(out)
}

/// The manifest in `file`'s folder that lists it, if any (for `--record-type auto`).
pub fn manifest_listing(file: &Path, io: IoOptions) -> Option<Manifest> {
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = file.file_name()?.to_string_lossy().into_owned();
    manifests_in(dir, io)
        .ok()?
        .iter()
        .filter_map(|p| read_manifest(p, io).ok())
        .find(|m| m.lists(&name))
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
pub fn check_shard_file(file: &str, path: &std::path::Path) -> crate::error::Result<()> {
    if is_safe_relative(file) {
        return Ok(());
    }
    Err(
        crate::error::Error::new(crate::error::ErrorKind::ManifestInvalid(
            serde::de::Error::custom(format!(
                "unsafe path: shard file {file:?} leaves the manifest's folder"
            )),
        ))
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
    fn manifest_names() {
        assert!(is_manifest_name("out/data.manifest.json"));
        assert!(is_manifest_name("s3://b/out/train.manifest-g00003.json"));
        assert!(!is_manifest_name("data.manifest-g003.json"));
        assert!(!is_manifest_name(".manifest-g00003.json"));
        assert!(!is_manifest_name("data-00000-of-00001.tfrecord"));
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
