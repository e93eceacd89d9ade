//! A published set's lifecycle, one module for every writer of a set (`convert
//! --append`, `finalize` of an append's workers, `compact`; a plain `--overwrite` run
//! takes the claim too): how a set moves from one manifest to the next, as tantivy's
//! `SegmentUpdater` alone moves an index from one meta to the next.
//!
//! 1. **The claim** ([`SetClaim`]): `.{prefix}.tfshard-append` beside each prefix's
//!    manifest, held while the writer lives (see [`crate::store::claim`]: taken over
//!    from a dead holder by compare and swap, refreshed without ever writing over
//!    another holder's) and confirmed right before each manifest is written.
//! 2. **The base** ([`Generation::open`]): every prefix's manifest (a `--split` run's
//!    splits are one set), at one generation; splits that a run killed between their
//!    manifests left behind are completed from their pinned manifests first, so no
//!    writer ever plans against one split alone.
//! 3. **The next generation**: which shards it retires (chosen by the caller: an
//!    append's planner, `compact`'s small generations, the workers' recorded plan), its
//!    manifest ([`Generation::manifest`]: the live shards that stay, then the new ones;
//!    the inputs' rows; the generations' log).
//! 4. **Retire and retain** ([`Generation::publication`]): what the publish keeps until
//!    the new manifest is written (the live shards, the pinned manifests kept by
//!    `--retain` and the shards they list) and deletes after; a pinned manifest that
//!    cannot be read is never taken as gone.
//! 5. **Publish**: the generation's pinned manifest `{prefix}.manifest-g{g:05}.json`,
//!    every split's before any split's manifest, then the manifests (the commit point),
//!    then the retired shards go: the store's one publish protocol
//!    ([`crate::store::publish`]) does the moves.
//! 6. **Statistics** ([`set_stats`]): the live set's, merged from the partials of
//!    exactly its live shards (each kept beside its shard as `{shard}.stats`), written
//!    as `{prefix}.stats.pb` right before the manifest that names it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::example::FeatureSpec;
use crate::manifest::{GenerationInfo, Manifest, ShardInfo, MANIFEST_VERSION_GENERATIONS};
use crate::shard::name;
use crate::store::claim::{Claims, Held};
use crate::store::destination::{AppendSet, Destination};
use crate::store::storage::is_not_found;

/// Partials merged at a time while a set's statistics are made (each read from the
/// destination in parallel): memory holds this many shards' partials.
const STATS_GROUP: usize = 64;

/// The statistics of a set whose live shards are `shards` (in `dir` of `out`): merged
/// from their partials in shard order, those of shards this run wrote given in `new`
/// (by file name), the others read from their `{shard}.stats`. Sets `manifest.stats`
/// and returns the `{prefix}.stats.pb` file to write with it; `None` (and no `stats` in
/// the manifest) when a live shard has no partial (a set converted with `--no-stats`,
/// or before statistics were kept: `tfshard stats` computes them from the shards).
///
/// # Errors
///
/// A partial that cannot be read or parsed (naming it); a feature of two kinds.
pub(crate) fn set_stats(
    out: &dyn Destination,
    dir: &str,
    prefix: &str,
    manifest: &mut Manifest,
    new: &std::collections::HashMap<String, Arc<Vec<u8>>>,
) -> Result<Option<(String, Vec<u8>)>> {
    use rayon::prelude::*;
    use sha2::Digest;
    manifest.stats = None;
    let rel = |file: &str| {
        if dir.is_empty() {
            file.to_owned()
        } else {
            format!("{dir}/{file}")
        }
    };
    let mut all = crate::stats::Partial::new();
    let mut partials_bytes = 0u64;
    for group in manifest.shards.chunks(STATS_GROUP) {
        let read: Vec<Option<Arc<Vec<u8>>>> = group
            .par_iter()
            .map(|shard| match new.get(&shard.file) {
                Some(bytes) => Ok(Some(bytes.clone())),
                None => match out.read(&rel(&format!("{}.stats", shard.file))) {
                    Ok(bytes) => Ok(Some(Arc::new(bytes))),
                    Err(e) if is_not_found(&e) => Ok(None),
                    Err(e) => Err(e),
                },
            })
            .collect::<Result<_>>()?;
        for (shard, bytes) in group.iter().zip(read) {
            let Some(bytes) = bytes else {
                return Ok(None);
            };
            let at = || out.display(&rel(&format!("{}.stats", shard.file)));
            let partial =
                crate::stats::Partial::from_bytes(&bytes).map_err(|e| e.with_file(at()))?;
            if partial.records() + partial.undecodable() != shard.records {
                return Err(Error::new(ErrorKind::StatsDamaged(format!(
                    "counts {} records, the shard holds {}",
                    partial.records() + partial.undecodable(),
                    shard.records
                )))
                .with_file(at()));
            }
            partials_bytes += bytes.len() as u64;
            all.merge(partial).map_err(|e| e.with_file(at()))?;
        }
    }
    let bytes = crate::stats::to_tfdv_bytes(&all.to_proto());
    let file = name::stats_name(prefix);
    manifest.stats = Some(crate::manifest::StatsInfo::new(
        file.clone(),
        bytes.len() as u64,
        format!("{:x}", sha2::Sha256::digest(&bytes)),
        partials_bytes,
    ));
    Ok(Some((file, bytes)))
}

/// The claim every writer of a set holds on `prefix` while it publishes to it.
pub(crate) fn claim_name(prefix: &str) -> String {
    format!(".{prefix}.tfshard-append")
}

/// The claims of a writer of the sets of some prefixes (see the module docs), refreshed
/// while it lives, released when dropped.
pub(crate) struct SetClaim(Claims);

impl SetClaim {
    /// Claims `prefixes`' sets in `out`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::AppendClaimed`] where another live run holds one; a store or I/O
    /// error.
    pub(crate) fn take(out: &Arc<dyn Destination>, prefixes: &[String]) -> Result<SetClaim> {
        let mut claims = Claims::new(out.clone());
        let mut held = false;
        for p in prefixes {
            held = claims.claim(&claim_name(p))? == Err(Held);
            if held {
                break;
            }
        }
        if !held {
            claims.keep_alive();
            return Ok(SetClaim(claims));
        }
        Err(Error::new(ErrorKind::AppendClaimed).with_file(out.display("")))
    }

    /// Checks that every claim is still this writer's (see [`Claims::confirm`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::ClaimLost`]; a store or I/O error.
    pub(crate) fn confirm(&self) -> Result<()> {
        self.0.confirm()
    }
}

/// What a worker of an append records in its part's manifest (key [`PART_KEY`]): the
/// generation the workers planned and against which set, so that `finalize` publishes
/// it (and refuses when the set changed since).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PartAppend {
    /// The set's newest generation when the workers planned.
    pub base_generation: u32,
    /// Its manifest's `created`.
    pub base_created: String,
    /// The generation the parts are.
    pub generation: u32,
    /// The set's shards it retires.
    pub retired: BTreeSet<String>,
    /// See [`Generation::whole`].
    pub whole: BTreeSet<String>,
    /// See [`Generation::reconverted`].
    pub reconverted: Option<String>,
    /// `--retain N`.
    pub retain: Option<u32>,
}

/// The key of a worker part's manifest that holds its [`PartAppend`].
pub(crate) const PART_KEY: &str = "append";

/// A worker part's manifest bytes: `manifest` with its append under [`PART_KEY`].
///
/// # Errors
///
/// The manifest cannot be serialized.
pub(crate) fn part_manifest_json(manifest: &Manifest, part: &PartAppend) -> Result<Vec<u8>> {
    let io = |e: serde_json::Error| Error::from(std::io::Error::other(e));
    let mut value = serde_json::to_value(manifest).map_err(io)?;
    value[PART_KEY] = serde_json::to_value(part).map_err(io)?;
    let mut bytes = serde_json::to_vec_pretty(&value).map_err(io)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// The next generation of the sets of some prefixes (one per split, all of one run):
/// the base it builds on, the shards it retires, and the claim held while it is made.
pub(crate) struct Generation {
    /// The live sets, one per prefix, as their manifests were when claimed.
    pub base: Vec<Manifest>,
    /// Their prefixes.
    prefixes: Vec<String>,
    /// Its number.
    pub number: u32,
    /// Per set, the names of the shards it retires.
    pub retired: Vec<BTreeSet<String>>,
    /// The inputs it counts the rows of anew (read whole, or grown); the others keep the
    /// base's counts.
    pub whole: BTreeSet<String>,
    /// Why every generation is retired and the snapshot converted again, if so (a schema
    /// change the set's spec cannot hold).
    pub reconverted: Option<String>,
    claim: Option<SetClaim>,
}

impl Generation {
    /// Claims (with `claim`) the prefixes' sets in `out` and reads their manifests: the
    /// next generation of them, retiring nothing yet; `None` where the output holds no
    /// set of them (a first conversion). Splits found at different generations (a
    /// writer killed between their manifests) are completed first, under the claim,
    /// keeping the generations `retain` keeps.
    ///
    /// # Errors
    ///
    /// Another run holds a claim ([`ErrorKind::AppendClaimed`]); shards of a prefix but
    /// no manifest (a usage error: convert again with `--overwrite`); some splits'
    /// sets but not all; a manifest that cannot be read, or whose generations do not add
    /// up; lagging splits that cannot be completed, or that a writer without the claim
    /// (a worker) finds.
    pub(crate) fn open(
        out: &Arc<dyn Destination>,
        prefixes: &[String],
        claim: bool,
        retain: Option<u32>,
    ) -> Result<Option<Generation>> {
        let claim = claim.then(|| SetClaim::take(out, prefixes)).transpose()?;
        let names = out.names("")?;
        let manifests: Vec<String> = prefixes.iter().map(|p| name::manifest_name(p)).collect();
        // Shards of a prefix without its manifest: no set to append to.
        let orphaned = (prefixes.iter().zip(&manifests)).find(|(p, manifest)| {
            !names.contains(manifest) && names.iter().any(|n| name::is_own_shard(p, n))
        });
        let mut base = Vec::new();
        for manifest in manifests.iter().filter(|m| names.contains(m)) {
            base.push(Manifest::read_checked(&**out, manifest)?);
        }
        if let Some((p, manifest)) = orphaned {
            return Err(Error::invalid_option(
                "append",
                format!(
                    "{} holds shards of {p:?} but no manifest {manifest}: there is no \
                     published set to append to; convert again with --overwrite",
                    out.display("").display()
                ),
            ));
        }
        if base.is_empty() {
            // A first conversion: published as a plain run's, create-only.
            return Ok(None);
        }
        if base.len() < prefixes.len() {
            return Err(Error::invalid_option(
                "append",
                "the output holds some of the splits' sets but not all: convert again with \
                 --overwrite",
            ));
        }
        // (Completing lagging splits brings them to the newest generation.)
        let newest = base.iter().map(Manifest::generation).max().unwrap_or(0);
        let Some(number) = newest.checked_add(1) else {
            let path = out.display(&manifests[0]);
            return Err(
                Error::new(ErrorKind::ManifestInvalid(serde::de::Error::custom(
                    format!("generations: no generation can follow generation {newest}"),
                )))
                .with_file(path),
            );
        };
        complete_lagging(&**out, prefixes, &mut base, claim.is_some(), retain)?;
        Ok(Some(Generation {
            retired: vec![BTreeSet::new(); base.len()],
            base,
            prefixes: prefixes.to_vec(),
            number,
            whole: BTreeSet::new(),
            reconverted: None,
            claim,
        }))
    }

    /// The generation the workers' parts recorded (`part`) onto the set `live` (the one
    /// set `finalize` publishes it to, under `finalize`'s claim).
    ///
    /// # Errors
    ///
    /// The set is no longer the one the workers planned against (an append or
    /// `finalize` published another generation since): nothing may be published.
    pub(crate) fn of_part(
        live: Manifest,
        prefix: &str,
        part: &PartAppend,
        path: &Path,
    ) -> Result<Generation> {
        if live.generation() != part.base_generation || live.created != part.base_created {
            let now = if live.generation() == part.generation {
                "another run published that generation"
            } else {
                "another run published since"
            };
            return Err(Error::new(ErrorKind::PartsDisagree {
                detail: format!(
                    "the workers planned generation {} onto generation {} of the set ({}), \
                     and it is at generation {} now ({now}): run the workers again",
                    part.generation,
                    part.base_generation,
                    part.base_created,
                    live.generation()
                ),
            })
            .with_file(path));
        }
        Ok(Generation {
            base: vec![live],
            prefixes: vec![prefix.to_owned()],
            number: part.generation,
            retired: vec![part.retired.clone()],
            whole: part.whole.clone(),
            reconverted: part.reconverted.clone(),
            claim: None,
        })
    }

    /// A generation of `base` that retires `retired`, claiming nothing (the in-memory
    /// models').
    #[cfg(test)]
    pub(crate) fn for_test(
        base: Vec<Manifest>,
        number: u32,
        retired: Vec<BTreeSet<String>>,
        whole: BTreeSet<String>,
    ) -> Generation {
        Generation {
            prefixes: (0..base.len()).map(|i| format!("s{i}")).collect(),
            base,
            number,
            retired,
            whole,
            reconverted: None,
            claim: None,
        }
    }

    /// Every shard of every set retired.
    pub(crate) fn retire_everything(&mut self) {
        self.retired = (self.base.iter())
            .map(|m| m.shards.iter().map(|s| s.file.clone()).collect())
            .collect();
    }

    /// Set `i`'s new manifest: its live shards that stay, then `written` (the
    /// generation's, named), as the run described them in `new`.
    ///
    /// # Errors
    ///
    /// New records whose features the set cannot hold beside its own (a feature of
    /// another kind: TFRecord files, whose features are known once read).
    pub(crate) fn manifest(
        &self,
        i: usize,
        mut new: Manifest,
        written: Vec<ShardInfo>,
    ) -> Result<Manifest> {
        let old = &self.base[i];
        let retired = &self.retired[i];
        let g = self.number;
        let records: u64 = written.iter().map(|s| s.records).sum();
        let mut shards: Vec<ShardInfo> = (old.shards.iter())
            .filter(|s| !retired.contains(&s.file))
            .map(|s| ShardInfo {
                generation: Some(s.generation.unwrap_or(0)),
                ..s.clone()
            })
            .collect();
        let kept_any = !shards.is_empty();
        let count = written.len() as u64;
        shards.extend(written.into_iter().map(|s| ShardInfo {
            generation: Some(g),
            ..s
        }));
        // An input read only in part (records of retired shards) keeps its count.
        let old_rows: std::collections::HashMap<&str, u64> = (old.inputs.iter())
            .map(|i| (i.path.as_str(), i.rows))
            .collect();
        for input in &mut new.inputs {
            if !self.whole.contains(&input.path) {
                if let Some(&rows) = old_rows.get(input.path.as_str()) {
                    input.rows = rows;
                }
            }
        }
        if kept_any && records == 0 {
            new.features = old.features.clone();
        } else if kept_any {
            new.features = merge_features(&old.features, &new.features).map_err(|detail| {
                Error::new(ErrorKind::SchemaMismatch {
                    other: PathBuf::from(name::manifest_name(&self.prefixes[i])),
                    detail: format!("{detail}: convert again with --overwrite"),
                })
            })?;
        }
        let mut generations = old.generations_or_first();
        generations.push(GenerationInfo {
            generation: g,
            created: new.created.clone(),
            watermark: new.watermark(),
            records,
            shards: count,
            retired: retired.iter().cloned().collect(),
        });
        new.manifest_version = MANIFEST_VERSION_GENERATIONS;
        new.generations = Some(generations);
        new.set_shards(shards);
        // Its statistics are its own ([`set_stats`]), never the base's.
        new.stats = None;
        Ok(new)
    }

    /// Set `i`'s publication beside its staged files: the names that stay until its
    /// manifest is written (the live set's shards, the pinned manifests kept and the
    /// shards they list), its pinned manifest, and what goes once it is published.
    /// `manifest` is the set's new manifest.
    ///
    /// # Errors
    ///
    /// A pinned manifest that cannot be read (see [`kept_and_gone`]); an I/O or store
    /// error.
    pub(crate) fn publication(
        &self,
        i: usize,
        out: &dyn Destination,
        prefix: &str,
        manifest: &Manifest,
        retain: Option<u32>,
    ) -> Result<AppendSet> {
        let old = &self.base[i];
        let mut keep: Vec<String> = old.shards.iter().flat_map(|s| with_idx(&s.file)).collect();
        let (kept, after) = kept_and_gone(out, prefix, manifest, retain)?;
        keep.extend(kept);
        Ok(AppendSet {
            keep,
            pinned: (
                name::pinned_manifest_name(prefix, self.number),
                manifest.to_json()?,
            ),
            after,
        })
    }

    /// Nothing to publish: deletes what a writer killed after publishing left (the
    /// shards its generation retired, the pinned manifests listing them), and what one
    /// killed before publishing left (its shards, its pinned manifest).
    ///
    /// # Errors
    ///
    /// A pinned manifest that cannot be read; an I/O or store error.
    pub(crate) fn finish_last(&self, out: &dyn Destination, retain: Option<u32>) -> Result<()> {
        for (m, prefix) in self.base.iter().zip(&self.prefixes) {
            delete_gone(out, prefix, m, retain)?;
        }
        Ok(())
    }

    /// Checks, right before a manifest is written, that the claim is still this
    /// writer's (nothing to check without one).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::ClaimLost`]; a store or I/O error.
    pub(crate) fn confirm(&self) -> Result<()> {
        self.claim.as_ref().map_or(Ok(()), SetClaim::confirm)
    }

    /// What a worker records of set `i`'s generation in its part (see [`PartAppend`]).
    pub(crate) fn part(&self, i: usize, retain: Option<u32>) -> PartAppend {
        let base = &self.base[i];
        PartAppend {
            base_generation: base.generation(),
            base_created: base.created.clone(),
            generation: self.number,
            retired: self.retired[i].clone(),
            whole: self.whole.clone(),
            reconverted: self.reconverted.clone(),
            retain,
        }
    }
}

/// Splits are one set: where a writer was killed between their manifests, the lagging
/// ones (behind the newest generation) are completed with the pinned manifest of the
/// newest generation, which every split's publish writes before any manifest; then the
/// shards that generation retired go.
///
/// # Errors
///
/// A lagging split without that pinned manifest (nothing can complete it: convert
/// again with `--overwrite`), naming the splits; an I/O or store error.
fn complete_lagging(
    out: &dyn Destination,
    prefixes: &[String],
    base: &mut [Manifest],
    claimed: bool,
    retain: Option<u32>,
) -> Result<()> {
    let newest = base.iter().map(Manifest::generation).max().unwrap_or(0);
    let lagging: Vec<usize> = (0..base.len())
        .filter(|&i| base[i].generation() < newest)
        .collect();
    if lagging.is_empty() {
        return Ok(());
    }
    let mut files = Vec::new();
    for &i in &lagging {
        let p = &prefixes[i];
        files.push((
            name::pinned_manifest_name(p, newest),
            name::manifest_name(p),
        ));
    }
    // Every lagging split's pinned manifest, read before any split is completed.
    let mut completed = Vec::new();
    let mut missing = Vec::new();
    for (&i, (pinned, manifest)) in lagging.iter().zip(&files) {
        if !out.exists(pinned)? {
            missing.push(prefixes[i].as_str());
            continue;
        }
        let m = Manifest::read_checked(out, pinned)?;
        completed.push((i, manifest, m));
    }
    let lagging_names: Vec<&str> = lagging.iter().map(|&i| prefixes[i].as_str()).collect();
    let why = if !missing.is_empty() {
        format!(
            "{} cannot be completed to generation {newest} (no pinned manifest of it): convert \
             again with --overwrite",
            missing.join(", ")
        )
    } else if !claimed {
        // (A worker holds no claim: another writer may be between the manifests now.)
        format!(
            "{} lag behind generation {newest}: run `convert --append` (or `compact`) once, \
             without workers, to complete them, then the workers",
            lagging_names.join(", ")
        )
    } else {
        String::new()
    };
    if !why.is_empty() {
        let path = out.display(&files[0].1);
        return Err(
            Error::new(ErrorKind::ManifestInvalid(serde::de::Error::custom(
                format!(
                    "the splits are at different generations (a run was killed between their \
             manifests, or one is publishing): {why}"
                ),
            )))
            .with_file(path),
        );
    }
    for (i, manifest, mut m) in completed {
        // A set that keeps statistics keeps them for the generation completed (its
        // shards' partials are all in place: they were placed before any manifest).
        if base[i].stats.is_some() {
            let none = std::collections::HashMap::new();
            if let Some((file, bytes)) = set_stats(out, "", &prefixes[i], &mut m, &none)? {
                out.write(&file, bytes, false)?;
            }
        }
        out.write(manifest, m.to_json()?, false)?;
        delete_gone(out, &prefixes[i], &m, retain)?;
        base[i] = m;
    }
    Ok(())
}

/// Deletes what of `prefix`'s files neither the set `live` nor a pinned manifest that
/// stays keeps (see [`kept_and_gone`]): the shards and pinned manifests of the retired
/// generations, and what a killed writer left.
///
/// # Errors
///
/// A pinned manifest that cannot be read; an I/O or store error.
fn delete_gone(
    out: &dyn Destination,
    prefix: &str,
    live: &Manifest,
    retain: Option<u32>,
) -> Result<()> {
    let (_, after) = kept_and_gone(out, prefix, live, retain)?;
    for n in &after {
        out.delete(n)?;
    }
    Ok(())
}

/// A shard and its companions (`.idx`, `.stats`).
fn with_idx(file: &str) -> [String; 3] {
    [
        file.to_owned(),
        format!("{file}.idx"),
        format!("{file}.stats"),
    ]
}

/// What of `prefix`'s files in `out` stays beside the set `live` (the manifest a
/// publish writes, or the live one), and what goes once it is live. A pinned manifest of
/// an earlier generation stays while every shard it lists is live, or, with `retain` N,
/// while it is of the last N generations (`live`'s included), and keeps the shards it
/// lists; the others go, and so do a later one (a killed writer's, whose generation
/// never went live) and every shard of the prefix that neither the set nor a pinned
/// manifest that stays lists (the shards retired, a killed writer's). `live`'s own
/// pinned manifest is neither. Returns (the pinned manifests that stay and the shards
/// they keep, what goes).
///
/// # Errors
///
/// A pinned manifest that cannot be read (a store's transient error is never taken for
/// a manifest that is gone: its generation is not deleted) or parsed, named; an I/O or
/// store error listing the prefix.
fn kept_and_gone(
    out: &dyn Destination,
    prefix: &str,
    live: &Manifest,
    retain: Option<u32>,
) -> Result<(Vec<String>, Vec<String>)> {
    let generation = live.generation();
    let names = out.names("")?;
    // The prefix's own files: its shards, and its pinned manifests with their generation.
    let mut own: Vec<(&String, Option<u32>)> = Vec::new();
    for n in &names {
        if name::is_own_shard(prefix, n) {
            own.push((n, name::pinned_generation(prefix, n)));
        }
    }
    let live_names: BTreeSet<&str> = live.shards.iter().map(|s| s.file.as_str()).collect();
    let mut keep = Vec::new();
    let mut kept_shards: BTreeSet<String> = BTreeSet::new();
    let mut after = Vec::new();
    for &(n, g) in &own {
        let Some(g) = g else {
            continue;
        };
        if g >= generation {
            // A later one is a killed writer's, never live: it goes.
            if g > generation {
                after.push(n.clone());
            }
            continue;
        }
        let bytes = match out.read(n) {
            Ok(bytes) => bytes,
            // Deleted meanwhile: nothing to keep.
            Err(e) if is_not_found(&e) => continue,
            Err(e) => return Err(e),
        };
        let listed = Manifest::from_json(&bytes, &out.display(n))?;
        let recent = retain.is_some_and(|r| g.saturating_add(r) > generation);
        let all_live = (listed.shards.iter()).all(|s| live_names.contains(s.file.as_str()));
        if recent || all_live {
            keep.push(n.clone());
            kept_shards.extend(listed.shards.iter().flat_map(|s| with_idx(&s.file)));
        } else {
            after.push(n.clone());
        }
    }
    for &(n, g) in &own {
        let shard = name::companion_of(n).unwrap_or(n);
        if g.is_none() && !live_names.contains(shard) && !kept_shards.contains(n) {
            after.push(n.clone());
        }
    }
    keep.extend(kept_shards);
    Ok((keep, after))
}

/// The spec of a set holding records of both `then` and `now`: a shape both agree on,
/// else none; a feature only one side has, no shape (absent from the other's records).
/// A feature of two kinds cannot be held: its name and kinds.
fn merge_features(
    then: &[FeatureSpec],
    now: &[FeatureSpec],
) -> std::result::Result<Vec<FeatureSpec>, String> {
    let mut merged = Vec::with_capacity(then.len());
    for t in then {
        let mut f = t.clone();
        match now.iter().find(|n| n.name == t.name) {
            Some(n) if n.kind != t.kind => {
                return Err(format!(
                    "feature {:?} is {} in the new records, {} in the set",
                    t.name,
                    n.kind.name(),
                    t.kind.name()
                ))
            }
            Some(n) if n.shape == t.shape => {}
            _ => f.shape = None,
        }
        merged.push(f);
    }
    for n in now
        .iter()
        .filter(|n| !then.iter().any(|t| t.name == n.name))
    {
        let mut f = n.clone();
        f.shape = None;
        merged.push(f);
    }
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// New records' features join the set's: a shape both agree on, none otherwise or
    /// where one side lacks the feature; another kind cannot be held.
    #[test]
    fn features_merge_or_name_the_conflict() {
        use crate::example::FeatureKind;
        let f = |name: &str, kind, shape: Option<Vec<u64>>| FeatureSpec::new(name, kind, shape);
        let then = vec![
            f("x", FeatureKind::Float, Some(vec![4])),
            f("y", FeatureKind::Int64, Some(vec![])),
            f("old", FeatureKind::Bytes, Some(vec![])),
        ];
        let now = vec![
            f("x", FeatureKind::Float, Some(vec![4])),
            f("y", FeatureKind::Int64, Some(vec![2])),
            f("new", FeatureKind::Bytes, Some(vec![])),
        ];
        let merged = merge_features(&then, &now).unwrap();
        let shapes: Vec<(&str, Option<Vec<u64>>)> = merged
            .iter()
            .map(|f| (f.name.as_str(), f.shape.clone()))
            .collect();
        assert_eq!(
            shapes,
            [
                ("x", Some(vec![4])),
                ("y", None),
                ("old", None),
                ("new", None)
            ]
        );
        let conflict = vec![f("y", FeatureKind::Float, Some(vec![]))];
        let why = merge_features(&then, &conflict).unwrap_err();
        assert!(
            why.contains("\"y\" is float") && why.contains("int64"),
            "{why}"
        );
    }
}
