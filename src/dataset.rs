//! Which shard files a `PATH...` argument names, and what their manifest says.
//!
//! A file names itself. A folder names the shards its manifests list (each checked to
//! stay inside the folder), or without a manifest every non-hidden `*.tfrecord`,
//! `*.tfrecord.gz` and `*.tfrecord.zlib` in it, sorted by name. A manifest file names
//! its shards.

use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::example::RecordType;
use crate::manifest::{self, manifest_listing, manifests_in, read_manifest, Manifest};
use crate::store::IoOptions;

/// A set of shards to read.
#[derive(Debug, Clone, Default)]
pub struct Dataset {
    /// The shard files, in order.
    pub shards: Vec<PathBuf>,
    /// The manifests that listed them, with their paths.
    pub manifests: Vec<(PathBuf, Manifest)>,
    /// The store settings the set was found with, for reading it.
    pub io: IoOptions,
}

/// Whether a file name is one a shard folder scan picks up: ours (`*.tfrecord`,
/// `*.tfrecord.gz`, `*.tfrecord.zlib`) or TFDS's (`*.tfrecord-NNNNN-of-NNNNN`).
pub fn is_shard_file_name(name: &str) -> bool {
    let tfds = name.rsplit_once(".tfrecord-").is_some_and(|(_, rest)| {
        rest.split_once("-of-").is_some_and(|(i, n)| {
            [i, n]
                .iter()
                .all(|d| d.len() >= 5 && d.bytes().all(|b| b.is_ascii_digit()))
        })
    });
    !name.starts_with('.')
        && (tfds
            || name.ends_with(".tfrecord")
            || name.ends_with(".tfrecord.gz")
            || name.ends_with(".tfrecord.zlib"))
}

/// The shard files directly in `dir` (no manifest consulted), sorted by name.
///
/// # Errors
///
/// The folder cannot be listed.
pub fn shard_files_in(dir: &Path, io: IoOptions) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = crate::store::paths::files_in(dir, io)?
        .into_iter()
        .filter(|p| is_shard_file_name(&p.file_name().unwrap_or_default().to_string_lossy()))
        .collect();
    out.sort();
    Ok(out)
}

/// The shard files of a folder that has no manifest: [`shard_files_in`], but a folder with
/// none is an error (reading it would check nothing; files with other names can be named
/// one by one).
///
/// # Errors
///
/// The folder cannot be listed, or holds no shard file ([`ErrorKind::NoShards`]).
pub fn unlisted_shards(dir: &Path, io: IoOptions) -> Result<Vec<PathBuf>> {
    let shards = shard_files_in(dir, io)?;
    if shards.is_empty() {
        return Err(Error::new(ErrorKind::NoShards).with_file(dir));
    }
    Ok(shards)
}

impl Dataset {
    /// Each shard a manifest lists, by its path (its folder joined with the entry's
    /// name, as [`Dataset::shards`] names it), with the manifest's entry.
    pub fn listed(&self) -> std::collections::HashMap<PathBuf, &manifest::ShardInfo> {
        let mut out = std::collections::HashMap::new();
        for (path, m) in &self.manifests {
            let dir = path.parent().unwrap_or(Path::new("."));
            for s in &m.shards {
                out.insert(dir.join(&s.file), s);
            }
        }
        out
    }

    /// Resolves command-line paths; a store's requests run with `io`.
    ///
    /// # Errors
    ///
    /// A path that does not exist, a folder with no manifest and no shard, a manifest
    /// that cannot be read, or a manifest entry that climbs out of its folder.
    pub fn discover(paths: &[PathBuf], io: IoOptions) -> Result<Dataset> {
        let mut set = Dataset {
            io,
            ..Dataset::default()
        };
        for path in paths {
            // A manifest's name names a manifest: read it, nothing listed.
            if manifest::is_manifest_name(&path.to_string_lossy()) {
                set.add_manifest(path)?;
            } else if crate::store::paths::is_dir(path, io)? {
                let manifests = manifests_in(path, io)?;
                if manifests.is_empty() {
                    set.shards.extend(unlisted_shards(path, io)?);
                }
                for m in manifests {
                    set.add_manifest(&m)?;
                }
            } else {
                set.shards.push(path.clone());
            }
        }
        Ok(set)
    }

    /// Keeps only the shards of generations `generations` (`--append`), as their
    /// manifests name them.
    ///
    /// # Errors
    ///
    /// A usage error when a shard is not a manifest's, or none is left.
    pub fn only_generations(&mut self, generations: &[u32]) -> Result<()> {
        let generation_of: std::collections::HashMap<PathBuf, u32> = (self.manifests.iter())
            .flat_map(|(path, m)| {
                let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
                (m.shards.iter()).map(move |s| (dir.join(&s.file), s.generation.unwrap_or(0)))
            })
            .collect();
        let mut kept = Vec::new();
        for shard in &self.shards {
            let Some(g) = generation_of.get(shard) else {
                return Err(Error::invalid_option(
                    "generations",
                    format!(
                        "{} is not listed by a manifest: generations are a manifest's",
                        shard.display()
                    ),
                ));
            };
            if generations.contains(g) {
                kept.push(shard.clone());
            }
        }
        if kept.is_empty() {
            return Err(Error::invalid_option(
                "generations",
                format!("no live shard is of generations {generations:?}"),
            ));
        }
        self.shards = kept;
        Ok(())
    }

    fn add_manifest(&mut self, path: &Path) -> Result<()> {
        let m = read_manifest(path, self.io)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        for shard in &m.shards {
            manifest::check_shard_file(&shard.file, path)?;
            self.shards.push(dir.join(&shard.file));
        }
        self.manifests.push((path.to_path_buf(), m));
        Ok(())
    }

    /// The record type for `--record-type auto`: the manifests' if they agree, else
    /// the manifest listing the first shard, else Example.
    pub fn record_type(&self) -> RecordType {
        if let Some((_, m)) = self.manifests.first() {
            return m.record_type;
        }
        self.shards
            .first()
            .and_then(|s| manifest_listing(s, self.io))
            .map(|m| m.record_type)
            .unwrap_or_default()
    }
}
