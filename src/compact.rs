//! `tfshard compact OUT`: the generations that small appends left (each smaller than
//! one shard of the target size) rewritten as one generation of full-size shards, the
//! same records in the same order, published as an append is (the publish protocol):
//! the new shards placed, the generation's pinned manifest and the manifest written, then
//! the shards it replaced deleted.
//!
//! Records are copied frame by frame (decompressed and compressed again where the set
//! is compressed). Each new shard names, as its `sources`, the sources of every shard it
//! took records from: a later append retires it when any of them changes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::error::{Error, ErrorKind, Result};
use crate::lifecycle::Generation;
use crate::manifest::{Manifest, ShardInfo, ShardSource};
use crate::shard::name;
use crate::shard::writer::{Plan as Cut, ShardOptions, ShardWriter};
use crate::store::destination::{Publication, StagePlan, StagedOutput};
use crate::store::IoOptions;
use crate::tfrecord::frame;
use crate::tfrecord::mapped::MappedRecords;
use crate::tfrecord::Compression;

/// What `compact` did (`compact --json`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CompactSummary {
    /// The set's manifest.
    pub manifest: PathBuf,
    /// The generations rewritten (none: nothing to compact).
    pub compacted: Vec<u32>,
    /// The generation written (the set's newest when nothing was compacted).
    pub generation: u32,
    /// Shards replaced.
    pub replaced: u64,
    /// Shards written, their records and bytes.
    pub shards: u64,
    /// Records in the shards written.
    pub records: u64,
    /// Bytes on disk of the shards written.
    pub bytes: u64,
    /// Wall time.
    pub seconds: f64,
}

impl CompactSummary {
    /// The `compact --json` object.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "manifest": self.manifest,
            "compacted": self.compacted,
            "generation": self.generation,
            "replaced": self.replaced,
            "shards": self.shards,
            "records": self.records,
            "bytes": self.bytes,
            "seconds": self.seconds,
        })
    }
}

/// `compact`'s options.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CompactOptions {
    /// The output folder (or URL) holding the set.
    pub output: PathBuf,
    /// The set's prefix.
    pub prefix: String,
    /// The shards' target size (default: the set's `target_shard_size`).
    pub target_bytes: Option<u64>,
    /// `--retain N`: see [`crate::ConvertOptions::retain`].
    pub retain: Option<u32>,
    /// Store settings.
    pub io: IoOptions,
}

impl CompactOptions {
    /// Compacts the `data` set in `output`.
    pub fn new(output: impl Into<PathBuf>) -> CompactOptions {
        CompactOptions {
            output: output.into(),
            prefix: crate::convert::DEFAULT_PREFIX.into(),
            target_bytes: None,
            retain: None,
            io: IoOptions::default(),
        }
    }
}

/// The generations to rewrite: each whose live shards hold less than `target` bytes,
/// when two or more shards are theirs (one alone gains nothing).
fn small_generations(m: &Manifest, target: u64) -> Vec<u32> {
    let mut small = Vec::new();
    for g in m.generations_or_first() {
        let live = m
            .shards
            .iter()
            .filter(|s| s.generation.unwrap_or(0) == g.generation);
        let (count, bytes) = live.fold((0, 0), |(n, b), s| (n + 1, b + s.bytes));
        if count > 0 && bytes < target {
            small.push(g.generation);
        }
    }
    let shards = (m.shards.iter())
        .filter(|s| small.contains(&s.generation.unwrap_or(0)))
        .count();
    if shards < 2 {
        small.clear();
    }
    small
}

/// The sources of a shard holding the set's records `[start, end)` (counted over
/// `old`, in order): of each old shard it takes records from, the rows of those
/// records where its ranges count its records one by one, else all its sources (a
/// split's shard, whose ranges also span records of other splits).
fn sources_of(old: &[&ShardInfo], start: u64, end: u64) -> Vec<ShardSource> {
    let mut out: Vec<ShardSource> = Vec::new();
    let mut add = |src: ShardSource| match out.last_mut() {
        Some(prev) if prev.input == src.input && prev.rows[1] == src.rows[0] => {
            prev.rows[1] = src.rows[1];
        }
        _ => out.push(src),
    };
    let mut at = 0;
    for s in old {
        let (first, last) = (at, at + s.records);
        at = last;
        if first >= end || last <= start {
            continue;
        }
        let held = (s.sources.iter()).fold(0u64, |n, r| {
            n.saturating_add(r.rows[1].saturating_sub(r.rows[0]))
        });
        let exact = held == s.records;
        if !exact {
            s.sources.iter().cloned().for_each(&mut add);
            continue;
        }
        // The shard's records [from, to), mapped through its ranges in order.
        let (from, to) = (start.max(first) - first, end.min(last) - first);
        let mut k = 0;
        for src in &s.sources {
            let len = src.rows[1].saturating_sub(src.rows[0]);
            let (a, b) = (from.max(k), to.min(k + len));
            if a < b {
                let rows = [src.rows[0] + (a - k), src.rows[0] + (b - k)];
                add(ShardSource::new(src.input.clone(), rows));
            }
            k += len;
        }
    }
    out
}

/// The prefixes of the set whose manifest is `m` (a `--split` run's splits are one set,
/// compacted together as one generation), `prefix` among them.
fn set_prefixes(m: &Manifest, prefix: &str) -> Vec<String> {
    let Some(splits) = m.options.get("split").and_then(|s| s.as_object()) else {
        return vec![prefix.to_owned()];
    };
    let tfds = m.options.get("tfds").and_then(|t| t.as_str());
    let mut prefixes: Vec<String> = (splits.keys())
        .map(|split| tfds.map_or_else(|| split.clone(), |name| crate::tfds::prefix(name, split)))
        .collect();
    if !prefixes.iter().any(|p| p == prefix) {
        return vec![prefix.to_owned()];
    }
    prefixes.sort();
    prefixes
}

/// What one set of the generation rewrites: its small generations' shards, in order.
struct Small<'a> {
    old: Vec<&'a ShardInfo>,
    target: u64,
    max_records: Option<u64>,
}

impl<'a> Small<'a> {
    /// The shards of `m` worth rewriting at `target` bytes a shard (none: nothing to gain).
    fn of(m: &'a Manifest, target: Option<u64>) -> (Small<'a>, Vec<u32>) {
        let target = target
            .or_else(|| m.options.get("target_shard_size").and_then(|v| v.as_u64()))
            .unwrap_or(crate::convert::DEFAULT_TARGET_BYTES);
        let max_records = m
            .options
            .get("max_records_per_shard")
            .and_then(|v| v.as_u64());
        let mut generations = small_generations(m, target);
        let mut old: Vec<&ShardInfo> = (m.shards.iter())
            .filter(|s| generations.contains(&s.generation.unwrap_or(0)))
            .collect();
        // As many shards again (records per shard capped): nothing to gain.
        let bytes: u64 = old.iter().map(|s| s.bytes).sum();
        let records: u64 = old.iter().map(|s| s.records).sum();
        let fewest = bytes
            .div_ceil(target.max(1))
            .max(max_records.map_or(1, |n| records.div_ceil(n.max(1))));
        if fewest >= old.len() as u64 {
            old.clear();
            generations.clear();
        }
        let small = Small {
            old,
            target,
            max_records,
        };
        (small, generations)
    }
}

/// Compacts the set (see the module docs): every split of a split set, as one
/// generation (a split with nothing to rewrite gains a generation that writes and
/// retires nothing, so that the splits stay at one generation).
///
/// # Errors
///
/// No set in the output; another run holds it; a shard that cannot be read (named);
/// an I/O or store error. Nothing is published then.
pub fn compact(options: &CompactOptions) -> Result<CompactSummary> {
    let started = Instant::now();
    let destination = crate::store::destination_of(&options.output, options.io)?;
    let manifest_rel = name::manifest_name(&options.prefix);
    let manifest_path = destination.display(&manifest_rel);
    let named = match destination.read(&manifest_rel) {
        Ok(bytes) => Manifest::from_json(&bytes, &manifest_path)?,
        Err(e) if crate::store::storage::is_not_found(&e) => {
            return Err(Error::new(ErrorKind::NoShards).with_file(&manifest_path))
        }
        Err(e) => return Err(e),
    };
    let prefixes = set_prefixes(&named, &options.prefix);
    let Some(mut next) = Generation::open(&destination, &prefixes, true, options.retain)? else {
        return Err(Error::new(ErrorKind::NoShards).with_file(&manifest_path));
    };
    let base = next.base.clone();
    let smalls: Vec<(Small, Vec<u32>)> = (base.iter())
        .map(|m| Small::of(m, options.target_bytes))
        .collect();
    let mine = prefixes
        .iter()
        .position(|p| *p == options.prefix)
        .unwrap_or(0);
    let mut summary = CompactSummary {
        manifest: manifest_path,
        compacted: smalls[mine].1.clone(),
        generation: base[mine].generation(),
        replaced: 0,
        shards: 0,
        records: 0,
        bytes: 0,
        seconds: 0.0,
    };
    if smalls.iter().all(|(small, _)| small.old.is_empty()) {
        summary.compacted.clear();
        summary.seconds = started.elapsed().as_secs_f64();
        return Ok(summary);
    }
    let mut staging = destination.stage(StagePlan {
        outputs: (prefixes.iter())
            .map(|p| StagedOutput {
                dir: String::new(),
                tmp: name::tmp_dir_name(p),
            })
            .collect(),
        hidden: Vec::new(),
        overwrite: false,
        append: true,
        resume: false,
        part: false,
        staging_dir: None,
    })?;
    let generation = next.number;
    // The generation retires the small generations' shards; every input keeps its rows.
    next.retired = (smalls.iter())
        .map(|(small, _)| {
            small
                .old
                .iter()
                .map(|s| s.file.clone())
                .collect::<BTreeSet<_>>()
        })
        .collect();
    let mut publications = Vec::with_capacity(prefixes.len());
    for (i, (prefix, (small, _))) in prefixes.iter().zip(&smalls).enumerate() {
        let m = &base[i];
        let compression = m.compression().unwrap_or_default();
        let closed = if small.old.is_empty() {
            Vec::new()
        } else {
            let mut writer = ShardWriter::new(ShardOptions {
                tmp_dir: staging.folder(i).to_path_buf(),
                compression,
                target_bytes: small.target,
                max_records: small.max_records,
                index: m.options.get("index").and_then(|v| v.as_bool()) == Some(true),
                plan: Cut::Fill,
                events: staging.hook(i),
                expected_records: Some(small.old.iter().map(|s| s.records).sum()),
                deflate: None,
                stats: m.stats.is_some().then_some(m.record_type),
            });
            copy_shards(
                &options.output,
                &small.old,
                compression,
                options.io,
                &mut writer,
            )?;
            writer.finish()?
        };
        let names: Vec<String> = (0..closed.len())
            .map(|k| name::generation_shard_name(prefix, generation, k, closed.len(), compression))
            .collect();
        let mut at = 0;
        let written: Vec<ShardInfo> = (closed.iter().zip(&names))
            .map(|(c, file)| {
                let sources = sources_of(&small.old, at, at + c.records);
                at += c.records;
                let mut info: ShardInfo = serde_json::from_value(serde_json::json!({
                    "file": file, "records": c.records, "bytes": c.bytes,
                    "crc32c": format!("{:08x}", c.crc32c),
                }))
                .expect("a shard entry");
                info.sources = sources;
                info
            })
            .collect();
        let mut described = m.clone();
        described.created = crate::manifest::now_rfc3339();
        let mut new = next.manifest(i, described, written)?;
        let append = next.publication(i, &*destination, prefix, &new, options.retain)?;
        // The set's statistics stay those of its live shards (when it keeps them).
        let partials: std::collections::HashMap<String, std::sync::Arc<Vec<u8>>> = (closed.iter())
            .zip(&names)
            .filter_map(|(c, n)| Some((n.clone(), c.stats.as_ref()?.bytes.clone())))
            .collect();
        let stats = match m.stats {
            Some(_) => crate::lifecycle::set_stats(&*destination, "", prefix, &mut new, &partials)?,
            None => None,
        };
        if i == mine {
            summary.generation = generation;
            summary.replaced = small.old.len() as u64;
            summary.shards = closed.len() as u64;
            summary.records = closed.iter().map(|c| c.records).sum();
            summary.bytes = closed.iter().map(|c| c.bytes).sum();
        }
        publications.push(Publication {
            shards: closed,
            names,
            stats,
            manifest: (name::manifest_name(prefix), new.to_json()?),
            own: name::is_own_shard,
            prefix: prefix.clone(),
            append: Some(append),
        });
    }
    let cancel = crate::progress::CancelToken::new();
    staging.commit(publications, &cancel, &|| next.confirm())?;
    drop(staging);
    drop(next);
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// Copies the records of `old` (the set in `dir`'s shards, in order) to `writer`,
/// checking each shard holds the records its manifest lists.
///
/// # Errors
///
/// A shard that cannot be read, or holds another count of records (named).
fn copy_shards(
    dir: &Path,
    old: &[&ShardInfo],
    compression: Compression,
    io: IoOptions,
    writer: &mut ShardWriter,
) -> Result<()> {
    let mut framed = Vec::new();
    for s in old {
        let path = shard_path(dir, &s.file);
        let local = match compression {
            Compression::None => crate::store::paths::local_path(&path, io)?,
            _ => None,
        };
        let records = match local {
            Some(local) => copy_mapped(&local, &path, writer)?,
            None => {
                let mut reader = crate::records::open(&path, Some(compression), io)?;
                let mut records = 0;
                while let Some(payload) = reader.read_record()? {
                    framed.clear();
                    frame::append_record(&mut framed, payload);
                    writer.write(&framed)?;
                    records += 1;
                }
                records
            }
        };
        if records != s.records {
            return Err(Error::new(ErrorKind::RowCountMismatch {
                expected: s.records,
                found: records,
                detail: "the records the manifest lists for the shard, and those in it",
            })
            .with_file(&path));
        }
    }
    Ok(())
}

/// Copies the records of the plain shard at `local` (named `shown` in errors) to
/// `writer` frame by frame, as they are on disk, each checked first (its length and
/// data CRCs): the bytes are not framed again. Returns the records copied.
fn copy_mapped(local: &Path, shown: &Path, writer: &mut ShardWriter) -> Result<u64> {
    let mut walk = MappedRecords::open(local)?.named(shown);
    let Some(map) = walk.map().cloned() else {
        return Ok(0); // an empty file
    };
    let data: &[u8] = &map;
    let (mut start, mut sizes, mut records) = (0usize, Vec::new(), 0);
    let mut end = 0usize;
    while let Some(r) = walk.next_record()? {
        if frame::masked_crc32c(&data[r.range.clone()]) != r.stored_crc {
            return Err(crate::tfrecord::reader::frame_error(
                crate::error::FrameProblem::DataCrc,
                crate::error::FrameDetail::DataCrc {
                    len: r.range.len() as u64,
                },
                Some(shown),
                r.index,
                r.offset,
            ));
        }
        end = r.range.end + frame::FOOTER_LEN;
        sizes.push((end - r.offset as usize) as u64);
        records += 1;
        // In batches of about 4 MiB.
        if end - start >= 4 << 20 {
            writer.write_batch(&data[start..end], &sizes)?;
            sizes.clear();
            start = end;
        }
    }
    if !sizes.is_empty() {
        writer.write_batch(&data[start..end], &sizes)?;
    }
    Ok(records)
}

/// A shard of the set in `dir` (a folder or a URL).
fn shard_path(dir: &Path, file: &str) -> PathBuf {
    let shown = dir.to_string_lossy();
    if shown.contains("://") {
        PathBuf::from(format!("{}/{file}", shown.trim_end_matches('/')))
    } else {
        dir.join(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(
        file: &str,
        records: u64,
        bytes: u64,
        g: u32,
        sources: &[(&str, [u64; 2])],
    ) -> ShardInfo {
        let mut s: ShardInfo = serde_json::from_value(serde_json::json!({
            "file": file, "records": records, "bytes": bytes, "crc32c": "00000000",
        }))
        .unwrap();
        s.generation = Some(g);
        s.sources = sources
            .iter()
            .map(|(i, r)| ShardSource::new(*i, *r))
            .collect();
        s
    }

    #[test]
    fn a_new_shard_names_the_sources_of_every_shard_it_took_records_from() {
        let a = shard("a", 10, 1, 1, &[("x", [0, 10])]);
        let b = shard("b", 10, 1, 2, &[("x", [10, 20]), ("y", [0, 5])]);
        let c = shard("c", 10, 1, 3, &[("z", [0, 10])]);
        let old = [&a, &b, &c];
        let src = |start, end| -> Vec<(String, [u64; 2])> {
            sources_of(&old, start, end)
                .into_iter()
                .map(|s| (s.input, s.rows))
                .collect()
        };
        assert_eq!(src(0, 10), [("x".into(), [0, 10])]);
        // b's ranges hold 15 rows for its 10 records (a split's shard): all of them.
        assert_eq!(src(5, 15), [("x".into(), [5, 20]), ("y".into(), [0, 5])]);
        assert_eq!(src(20, 30), [("z".into(), [0, 10])]);
        assert_eq!(src(22, 25), [("z".into(), [2, 5])]);
        let d = shard("d", 10, 1, 3, &[("x", [20, 26]), ("y", [5, 9])]);
        let old = [&a, &d];
        let cut: Vec<(String, [u64; 2])> = sources_of(&old, 5, 17)
            .into_iter()
            .map(|s| (s.input, s.rows))
            .collect();
        assert_eq!(
            cut,
            [
                ("x".into(), [5, 10]),
                ("x".into(), [20, 26]),
                ("y".into(), [5, 6])
            ]
        );
    }
}
