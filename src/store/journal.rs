//! The `--resume` journal: `journal.json` in an output's temporary folder, rewritten
//! (temporary name, fsync, rename) each time a shard is complete.
//!
//! It holds what the output depends on: the run's header (the options that change the
//! output, the inputs with sizes and ETags, record type, compression) and every finished
//! shard with its size and CRC32C (in a store, also its object's ETag). A rerun with
//! `--resume` checks the header against its own (an error naming the first difference),
//! checks each finished shard's size and CRC32C on disk (in a store: its size and ETag,
//! without reading it back), and hands the good ones to the shard writer, which then drops as many
//! records from the start of the stream as they hold and writes only the rest. The
//! encoding statistics behind the manifest are recomputed: the rerun reads the inputs
//! again, and writes no byte twice.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::destination::{ClosedShard, ShardStats, SourceRows};
use crate::error::{Error, ErrorKind, Result};

/// The journal's file name, inside the temporary folder.
pub const JOURNAL: &str = "journal.json";

/// One finished shard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalShard {
    /// The temporary file's name.
    pub file: String,
    /// Its `.idx` file's name, with `--index`.
    pub idx: Option<String>,
    /// Its `.stats` file's name (unless `--no-stats`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<String>,
    /// Records in it.
    pub records: u64,
    /// Bytes on disk.
    pub bytes: u64,
    /// CRC32C of the bytes on disk.
    pub crc32c: u32,
    /// In a store: the uploaded object's ETag, which a rerun checks (with the size)
    /// instead of reading the object back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// Where the records' producer can restart (see [`ClosedShard::checkpoint`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<serde_json::Value>,
    /// The inputs whose records it holds (see [`ClosedShard::sources`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceRows>,
}

/// The journal of one output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    /// What the output depends on besides the records (compared on resume).
    pub header: serde_json::Value,
    /// The finished shards, in order.
    pub shards: Vec<JournalShard>,
}

impl Journal {
    /// Reads the journal in `tmp`, if any (an unreadable one counts as none).
    pub fn read(tmp: &Path) -> Option<Journal> {
        let bytes = std::fs::read(tmp.join(JOURNAL)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes it into `tmp`, atomically and durably.
    ///
    /// # Errors
    ///
    /// An I/O error naming the journal.
    pub fn write(&self, tmp: &Path) -> Result<()> {
        let path = tmp.join(JOURNAL);
        let json = serde_json::to_vec(self).map_err(std::io::Error::other);
        json.and_then(|bytes| super::atomic::write_atomic(&path, &bytes, false))
            .map_err(|e| Error::from(e).with_file(&path))
    }

    /// Whether the journal is of an append whose generation the set holds already (this
    /// run's is later): killed after it published (or another run published that
    /// generation since), it has nothing left for this run, which starts afresh.
    pub fn superseded_by(&self, header: &serde_json::Value) -> bool {
        let generation = |h: &serde_json::Value| h["append"]["generation"].as_u64();
        matches!(
            (generation(&self.header), generation(header)),
            (Some(then), Some(now)) if then < now
        )
    }

    /// The first difference between the journal's header and this run's, as
    /// `--resume` reports it: `option "x": the journal has A, this run B`.
    pub fn difference(&self, header: &serde_json::Value) -> Option<String> {
        let (Some(old), Some(new)) = (self.header.as_object(), header.as_object()) else {
            return Some("the journal's header is not an object".into());
        };
        for (key, value) in new {
            let before = old.get(key).unwrap_or(&serde_json::Value::Null);
            if before == value {
                continue;
            }
            if let (Some(a), Some(b)) = (before.as_object(), value.as_object()) {
                for (k, v) in b {
                    let was = a.get(k).unwrap_or(&serde_json::Value::Null);
                    if was != v {
                        return Some(format!(
                            "{key} \"{k}\": the journal has {was}, this run {v}"
                        ));
                    }
                }
            }
            return Some(format!("{key}: the journal has {before}, this run {value}"));
        }
        None
    }

    /// The finished shards whose files in `tmp` still have the journaled size and
    /// CRC32C, up to the first that does not (that one and the rest are written again).
    pub fn verified(&self, tmp: &Path) -> Vec<ClosedShard> {
        let mut good = Vec::new();
        for s in &self.shards {
            let path = tmp.join(&s.file);
            let Ok(bytes) = std::fs::read(&path) else {
                break;
            };
            if bytes.len() as u64 != s.bytes || crc32c::crc32c(&bytes) != s.crc32c {
                break;
            }
            let idx_path = s.idx.as_ref().map(|i| tmp.join(i));
            if idx_path.as_ref().is_some_and(|p| !p.exists()) {
                break;
            }
            let stats = match &s.stats {
                None => None,
                Some(name) => {
                    let path = tmp.join(name);
                    // Synced before it was journaled (else the shard is written again).
                    match std::fs::read(&path).ok() {
                        Some(bytes) => Some(ShardStats {
                            path,
                            bytes: std::sync::Arc::new(bytes),
                        }),
                        None => break,
                    }
                }
            };
            good.push(ClosedShard {
                path,
                idx_path,
                stats,
                records: s.records,
                bytes: s.bytes,
                crc32c: s.crc32c,
                checkpoint: s.checkpoint.clone(),
                sources: s.sources.clone(),
            });
        }
        good
    }
}

/// The journal entry of a closed shard.
pub fn entry(shard: &ClosedShard) -> JournalShard {
    let name = |p: &PathBuf| {
        p.file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    };
    JournalShard {
        file: name(&shard.path),
        idx: shard.idx_path.as_ref().map(name),
        stats: shard.stats.as_ref().map(|s| name(&s.path)),
        records: shard.records,
        bytes: shard.bytes,
        crc32c: shard.crc32c,
        etag: None,
        checkpoint: shard.checkpoint.clone(),
        sources: shard.sources.clone(),
    }
}

/// `--resume` found a journal that does not match this run.
pub fn mismatch(difference: String) -> Error {
    Error::new(ErrorKind::ResumeMismatch { difference })
}
