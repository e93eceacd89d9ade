//! `--append`: what a run converts when the output already holds a published set.
//!
//! The set's manifest names, per shard, the inputs it holds records of and their ranges
//! (`sources`). An append compares the inputs as they are now with the manifest's:
//!
//! - an input not in the manifest is **new**: all its records are read;
//! - one that changed (its size, ETag, the records its table keeps, or, on disk without
//!   an ETag, modified since the set was published) or is **gone** affects every shard
//!   holding its records: those shards are **retired**;
//! - the records a retired shard held of an unchanged input are read again, and any
//!   other shard holding records of those ranges (a split's shards share ranges) is
//!   retired too, until no live shard overlaps what is read again. A file whose records
//!   are known only once read (Iceberg delete files) is read again whole.
//!
//! The new generation then holds, in input order, the re-read records and the new ones:
//! beside the shards that stay, exactly the records of one full conversion of the
//! snapshot, each once.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::SystemTime;

use crate::error::{Error, ErrorKind, Result};
use crate::example::FeatureSpec;
use crate::manifest::{
    GenerationInfo, InputInfo, Manifest, ShardInfo, MANIFEST_VERSION_GENERATIONS,
};
use crate::shard::name;
use crate::store::claim::{Claims, Held};
use crate::store::destination::{AppendSet, Destination};

/// All the records of an input.
pub(crate) const ALL: [u64; 2] = [0, u64::MAX];

/// One input of the source as it is now, as the plan compares it with the manifest's.
#[derive(Debug, Clone)]
pub(crate) struct NowInput {
    /// As the manifest's `inputs` name it.
    pub name: String,
    /// Its size.
    pub bytes: u64,
    /// Its ETag in a store.
    pub etag: Option<String>,
    /// The records it holds, where known before reading (a Delta file's rows its
    /// deletion vector keeps); `None` where known only once read.
    pub records: Option<u64>,
    /// When it was last modified, where its storage says.
    pub modified: Option<SystemTime>,
    /// The delete files that apply to it (Iceberg), as `inputs` names them.
    pub delete_files: Vec<String>,
    /// An input whose ETag is a digest of a listing (an image folder's images): the
    /// digest of its first k + 1 entries at k. An input whose first `rows` entries are
    /// the manifest's, with its ETag, only **grew**: its entries from `rows` on are
    /// read, and no shard retired.
    pub growth: Option<Arc<Vec<u64>>>,
}

/// What starts the ETag of a listing input (see [`listing_etag`]).
pub(crate) const LISTING_ETAG: &str = "listing-";

/// The ETag of a listing input whose entries' running digest is `digest`.
pub(crate) fn listing_etag(digest: u64) -> String {
    format!("{LISTING_ETAG}{digest:016x}")
}

/// Whether `now` holds `then`'s entries first, and more after them (see
/// [`NowInput::growth`]).
fn grew(now: &NowInput, then: &InputInfo) -> bool {
    let Some(growth) = &now.growth else {
        return false;
    };
    let before = then.rows as usize;
    before > 0
        && growth.len() > before
        && then.etag.as_deref() == Some(listing_etag(growth[before - 1]).as_str())
}

/// What an append reads and retires.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Plan {
    /// Per input now (the source's order): the ranges of its records to read, in order
    /// and disjoint ([`ALL`] for all of them); empty for none.
    pub reads: Vec<Vec<[u64; 2]>>,
    /// Per manifest (one per split): the names of the shards retired.
    pub retired: Vec<BTreeSet<String>>,
    /// Whether an input was changed or removed (not only added).
    pub changed: bool,
    /// The inputs read whole (new, changed, or known only once read) or that grew,
    /// by name: the manifest counts their rows anew.
    pub whole: BTreeSet<String>,
}

impl Plan {
    /// Whether the source gained nothing and lost nothing: the set is up to date.
    pub(crate) fn is_empty(&self) -> bool {
        self.reads.iter().all(Vec::is_empty) && self.retired.iter().all(BTreeSet::is_empty)
    }

    /// Every shard retired and every input read: the snapshot converted again.
    pub(crate) fn everything(now: &[NowInput], manifests: &[Manifest]) -> Plan {
        Plan {
            reads: vec![vec![ALL]; now.len()],
            whole: now.iter().map(|n| n.name.clone()).collect(),
            retired: manifests
                .iter()
                .map(|m| m.shards.iter().map(|s| s.file.clone()).collect())
                .collect(),
            changed: true,
        }
    }
}

/// Whether `now` differs from the manifest's `then`: size, ETag, the records a table
/// keeps of it (a new deletion vector), a delete file not among the manifest's inputs
/// (`listed`) applying to it, or, without an ETag, a modification at or after
/// `published` (seconds since the epoch, the manifest's `created`).
fn differs(
    now: &NowInput,
    then: &InputInfo,
    published: Option<u64>,
    listed: &HashMap<&str, &InputInfo>,
) -> bool {
    // (A listing gives some stores' ETags bare, a HEAD quoted.)
    fn bare(e: &Option<String>) -> Option<&str> {
        e.as_deref().map(|e| e.trim_matches('"'))
    }
    if now.bytes != then.bytes || bare(&now.etag) != bare(&then.etag) {
        return true;
    }
    // A delete file the set did not read applies to it now.
    if now
        .delete_files
        .iter()
        .any(|d| !listed.contains_key(d.as_str()))
    {
        return true;
    }
    if now.records.is_some_and(|r| r != then.rows) {
        return true;
    }
    if now.etag.is_none() {
        let modified = now
            .modified
            .and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_secs());
        // Unknown either way: assume changed (reading again is safe; missing a change is
        // not). The manifest's time is to the second: a file written in that second
        // counts as changed.
        return match (modified, published) {
            (Some(m), Some(p)) => m >= p,
            _ => true,
        };
    }
    false
}

fn overlaps(a: [u64; 2], b: [u64; 2]) -> bool {
    a[0] < b[1] && b[0] < a[1]
}

/// Adds `r` to the sorted, disjoint `ranges`, merging what it overlaps or touches.
fn add_range(ranges: &mut Vec<[u64; 2]>, r: [u64; 2]) {
    if r[0] >= r[1] {
        return;
    }
    ranges.push(r);
    ranges.sort_unstable();
    let mut merged: Vec<[u64; 2]> = Vec::with_capacity(ranges.len());
    for &r in ranges.iter() {
        match merged.last_mut() {
            Some(last) if r[0] <= last[1] => last[1] = last[1].max(r[1]),
            _ => merged.push(r),
        }
    }
    *ranges = merged;
}

/// Plans an append of the inputs `now` onto the sets `manifests` (one per split, all of
/// one run). `whole_generations`: records of an input spread over their whole
/// generation (`--shuffle`), so a retired shard retires its generation.
pub(crate) fn plan(manifests: &[Manifest], now: &[NowInput], whole_generations: bool) -> Plan {
    let Some(first) = manifests.first() else {
        return Plan::everything(now, manifests);
    };
    let published = chrono::DateTime::parse_from_rfc3339(&first.created)
        .ok()
        .map(|t| t.timestamp().max(0) as u64);
    let then: HashMap<&str, &InputInfo> =
        first.inputs.iter().map(|i| (i.path.as_str(), i)).collect();
    let index: HashMap<&str, usize> = (now.iter().enumerate())
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    let mut reads: Vec<Vec<[u64; 2]>> = vec![Vec::new(); now.len()];
    // Inputs whose old records are all gone (changed or removed), by manifest name.
    let mut affected: BTreeSet<&str> = BTreeSet::new();
    let mut changed = false;
    let mut grown: BTreeSet<String> = BTreeSet::new();
    for (i, n) in now.iter().enumerate() {
        match then.get(n.name.as_str()) {
            None => reads[i] = vec![ALL],
            Some(t) if grew(n, t) => {
                reads[i] = vec![[t.rows, u64::MAX]];
                grown.insert(n.name.clone());
            }
            Some(t) if differs(n, t, published, &then) => {
                reads[i] = vec![ALL];
                affected.insert(n.name.as_str());
                changed = true;
            }
            Some(_) => {}
        }
    }
    // A data input of the manifest that is gone (its log and side files are listed with
    // no rows and no shard names them).
    let named: BTreeSet<&str> = (manifests.iter())
        .flat_map(|m| &m.shards)
        .flat_map(|s| &s.sources)
        .map(|s| s.input.as_str())
        .collect();
    for gone in named.iter().filter(|n| !index.contains_key(*n)) {
        affected.insert(gone);
        changed = true;
    }
    let mut retired: Vec<BTreeSet<String>> = vec![BTreeSet::new(); manifests.len()];
    let adds = reads.iter().any(|r| !r.is_empty());
    for (m, manifest) in manifests.iter().enumerate() {
        for shard in &manifest.shards {
            let touches = shard
                .sources
                .iter()
                .any(|s| affected.contains(s.input.as_str()));
            // A shard that holds records but names none (a manifest from before tfshard
            // recorded sources) could hold any: every shard goes.
            if shard.records > 0 && shard.sources.is_empty() && (adds || changed) {
                return Plan::everything(now, manifests);
            }
            // An empty set's one empty shard gives way to the records that come.
            let empty_gives_way = shard.records == 0 && adds;
            if touches || empty_gives_way {
                retired[m].insert(shard.file.clone());
            }
        }
    }
    // Until nothing more is retired: what retired shards held of unchanged inputs is read
    // again; a live shard holding any of it is retired too.
    loop {
        if whole_generations {
            let generations: BTreeSet<u32> = (manifests.iter().zip(&retired))
                .flat_map(|(m, r)| m.shards.iter().filter(|s| r.contains(&s.file)))
                .map(|s| s.generation.unwrap_or(0))
                .collect();
            for (m, manifest) in manifests.iter().enumerate() {
                for s in &manifest.shards {
                    if generations.contains(&s.generation.unwrap_or(0)) {
                        retired[m].insert(s.file.clone());
                    }
                }
            }
        }
        for (m, manifest) in manifests.iter().enumerate() {
            for s in manifest
                .shards
                .iter()
                .filter(|s| retired[m].contains(&s.file))
            {
                for source in &s.sources {
                    if let Some(&i) = index.get(source.input.as_str()) {
                        if reads[i] != [ALL] {
                            let whole = now[i].records.is_none();
                            add_range(&mut reads[i], if whole { ALL } else { source.rows });
                        }
                    }
                }
            }
        }
        let mut more = false;
        for (m, manifest) in manifests.iter().enumerate() {
            for s in &manifest.shards {
                if retired[m].contains(&s.file) {
                    continue;
                }
                let hit = s.sources.iter().any(|source| {
                    index
                        .get(source.input.as_str())
                        .is_some_and(|&i| reads[i].iter().any(|&r| overlaps(r, source.rows)))
                });
                if hit {
                    retired[m].insert(s.file.clone());
                    more = true;
                }
            }
        }
        if !more {
            break;
        }
    }
    // (An input that grew counts its entries anew, as one read whole does.)
    let mut whole: BTreeSet<String> = (now.iter().zip(&reads))
        .filter(|(_, r)| **r == [ALL])
        .map(|(n, _)| n.name.clone())
        .collect();
    whole.extend(grown);
    Plan {
        reads,
        retired,
        changed,
        whole,
    }
}

/// What an append run did beside the records it wrote (`convert --json`: `up_to_date`,
/// `generation`, `retired`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AppendSummary {
    /// The inputs gained nothing and lost nothing: nothing was written.
    pub up_to_date: bool,
    /// The generation published (the set's newest when up to date).
    pub generation: u32,
    /// Shards retired (their records re-converted, or deleted from the table).
    pub retired: u64,
    /// Why every generation was retired and the snapshot converted again, if it was (a
    /// schema change the set's spec cannot hold).
    pub reconverted: Option<String>,
}

/// The claim an append holds on each prefix it publishes to, beside the set.
pub(crate) fn claim_name(prefix: &str) -> String {
    format!(".{prefix}.tfshard-append")
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
    /// See [`Plan::whole`].
    pub whole: BTreeSet<String>,
    /// See [`AppendSummary::reconverted`].
    pub reconverted: Option<String>,
    /// `--retain N`.
    pub retain: Option<u32>,
}

/// The key of a worker part's manifest that holds its [`PartAppend`].
pub(crate) const PART_KEY: &str = "append";

/// An append under way: the sets it adds a generation to (one per prefix), claimed
/// while it lives (by the run; a worker's are claimed by `finalize`).
pub(crate) struct Appending {
    pub manifests: Vec<Manifest>,
    /// The generation it writes.
    pub generation: u32,
    pub plan: Plan,
    /// See [`AppendSummary::reconverted`].
    pub reconverted: Option<String>,
    claims: Option<Claims>,
}

impl Appending {
    /// Claims the prefixes' sets in `out` and reads their manifests: `None` where the
    /// output holds no set of them (the append is the first conversion).
    ///
    /// # Errors
    ///
    /// Another run holds a claim ([`ErrorKind::AppendClaimed`]); shards of a prefix but
    /// no manifest (a usage error: convert again with `--overwrite`); a manifest that
    /// cannot be read, or whose generations do not add up.
    pub(crate) fn open(
        out: &Arc<dyn Destination>,
        prefixes: &[String],
        claim: bool,
    ) -> Result<Option<Appending>> {
        let claims = if claim {
            let mut claims = Claims::new(out.clone());
            for p in prefixes {
                if let Err(Held) = claims.claim(&claim_name(p))? {
                    return Err(Error::new(ErrorKind::AppendClaimed).with_file(out.display("")));
                }
            }
            claims.keep_alive();
            Some(claims)
        } else {
            None
        };
        let names = out.names("")?;
        let mut manifests = Vec::new();
        for p in prefixes {
            let manifest = name::manifest_name(p);
            if !names.contains(&manifest) {
                if names.iter().any(|n| name::is_own_shard(p, n)) {
                    return Err(Error::invalid_option(
                        "append",
                        format!(
                            "{} holds shards of {p:?} but no manifest {manifest}: there is no \
                             published set to append to; convert again with --overwrite",
                            out.display("").display()
                        ),
                    ));
                }
                continue;
            }
            let path = out.display(&manifest);
            let m = Manifest::from_json(&out.read(&manifest)?, &path)?;
            m.check_generations(&path)?;
            manifests.push(m);
        }
        if manifests.is_empty() {
            // A first conversion: published as a plain run's, create-only.
            drop(claims);
            return Ok(None);
        }
        if manifests.len() < prefixes.len() {
            return Err(Error::invalid_option(
                "append",
                "the output holds some of the splits' sets but not all: convert again with \
                 --overwrite",
            ));
        }
        let newest = manifests
            .iter()
            .map(Manifest::generation)
            .max()
            .unwrap_or(0);
        let Some(generation) = newest.checked_add(1) else {
            let path = out.display(&name::manifest_name(&prefixes[0]));
            return Err(
                Error::new(ErrorKind::ManifestInvalid(serde::de::Error::custom(
                    format!("generations: no generation can follow generation {newest}"),
                )))
                .with_file(path),
            );
        };
        Ok(Some(Appending {
            manifests,
            generation,
            plan: Plan::default(),
            reconverted: None,
            claims,
        }))
    }

    /// Plans the append of the inputs `now` (the source's, described as `described`).
    ///
    /// # Errors
    ///
    /// A table other than the set's, or a snapshot older than the set's.
    pub(crate) fn plan(
        &mut self,
        described: &Manifest,
        now: Vec<NowInput>,
        whole_generations: bool,
    ) -> Result<()> {
        let first = &self.manifests[0];
        // What changes the records or where they go must be the set's (the shard size may
        // change: it only cuts).
        const CUT: [&str; 3] = ["target_shard_size", "max_records_per_shard", "min_shards"];
        let keys: BTreeSet<&String> = first
            .options
            .keys()
            .chain(described.options.keys())
            .collect();
        for key in keys.into_iter().filter(|k| !CUT.contains(&k.as_str())) {
            let (then, now) = (first.options.get(key), described.options.get(key));
            if then != now {
                let shown = |v: Option<&serde_json::Value>| {
                    v.map_or_else(|| "nothing".to_owned(), |v| v.to_string())
                };
                return Err(Error::invalid_option(
                    "append",
                    format!(
                        "the set was converted with {key} {}, this run has {}: append with \
                         the set's options, or convert again with --overwrite",
                        shown(then),
                        shown(now)
                    ),
                ));
            }
        }
        if let (Some(then), Some(table)) = (&first.table, &described.table) {
            if then.format != table.format {
                return Err(Error::invalid_option(
                    "append",
                    format!(
                        "the set was converted from a {} table, this is a {} table",
                        then.format, table.format
                    ),
                ));
            }
            if let (Some(a), Some(b)) = (then.version, table.version) {
                if b < a {
                    return Err(crate::source::table::table_error(
                        &table.location,
                        format!(
                            "version {b} is older than the set's watermark, version {a}: \
                             append a version at or after it, or convert version {b} again \
                             with --overwrite"
                        ),
                    ));
                }
            }
        }
        // (A source whose features are known only once read, TFRecord files, is checked
        // when its records are: [`Appending::manifest`].)
        let known = !described.features.is_empty();
        if let Some(why) = schema_change(&first.features, &described.features).filter(|_| known) {
            self.reconverted = Some(why);
            self.plan = Plan::everything(&now, &self.manifests);
            return Ok(());
        }
        // The same snapshot: nothing to compare.
        let same_snapshot = (first.table.as_ref())
            .zip(described.table.as_ref())
            .is_some_and(|(a, b)| {
                (a.version.is_some() || a.snapshot_id.is_some())
                    && a.version == b.version
                    && a.snapshot_id == b.snapshot_id
            });
        self.plan = if same_snapshot {
            Plan {
                reads: vec![Vec::new(); now.len()],
                retired: vec![BTreeSet::new(); self.manifests.len()],
                ..Plan::default()
            }
        } else {
            plan(&self.manifests, &now, whole_generations)
        };
        Ok(())
    }

    /// The summary's append part.
    pub(crate) fn summary(&self) -> AppendSummary {
        let up_to_date = self.plan.is_empty();
        AppendSummary {
            up_to_date,
            generation: if up_to_date {
                self.generation - 1
            } else {
                self.generation
            },
            retired: self.plan.retired.iter().map(|r| r.len() as u64).sum(),
            reconverted: self.reconverted.clone(),
        }
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
        let old = &self.manifests[i];
        let retired = &self.plan.retired[i];
        let g = self.generation;
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
        let read_whole = |path: &str| self.plan.whole.contains(path);
        let old_rows: std::collections::HashMap<&str, u64> = old
            .inputs
            .iter()
            .map(|i| (i.path.as_str(), i.rows))
            .collect();
        for input in &mut new.inputs {
            if !read_whole(&input.path) {
                if let Some(&rows) = old_rows.get(input.path.as_str()) {
                    input.rows = rows;
                }
            }
        }
        // Images left out: this run's walk and reads, and what earlier generations'
        // reads left out of the images this run did not read.
        if let (Some(now), Some(then)) = (&mut new.skipped, &old.skipped) {
            let seen: BTreeSet<String> = now.iter().map(|s| s.path.clone()).collect();
            now.extend(then.iter().filter(|s| !seen.contains(&s.path)).cloned());
            now.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
        }
        if kept_any && records == 0 {
            new.features = old.features.clone();
        } else if kept_any {
            new.features = merge_features(&old.features, &new.features).map_err(|detail| {
                Error::new(ErrorKind::SchemaMismatch {
                    other: PathBuf::from(name::manifest_name(&old_prefix(old))),
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
        Ok(new)
    }

    /// Set `i`'s publish beside its staged files: the names that stay until its
    /// manifest is written (the live set's shards, the pinned manifests and the shards
    /// they keep), its pinned manifest, and what goes once it is published (see
    /// [`retire`]). `manifest` is the set's new manifest.
    pub(crate) fn publish_set(
        &self,
        i: usize,
        out: &dyn Destination,
        prefix: &str,
        manifest: &Manifest,
        retain: Option<u32>,
    ) -> Result<AppendSet> {
        let old = &self.manifests[i];
        let mut keep: Vec<String> = old.shards.iter().flat_map(|s| with_idx(&s.file)).collect();
        let (kept, after) = retire(out, prefix, manifest, self.generation, retain)?;
        keep.extend(kept);
        Ok(AppendSet {
            keep,
            pinned: (
                name::pinned_manifest_name(prefix, self.generation),
                manifest.to_json()?,
            ),
            after,
        })
    }

    /// Up to date: deletes what an append killed after publishing left (the shards its
    /// generation retired, the pinned manifests listing them).
    pub(crate) fn finish_last(
        &self,
        out: &dyn Destination,
        prefixes: &[String],
        retain: Option<u32>,
    ) -> Result<()> {
        for (m, prefix) in self.manifests.iter().zip(prefixes) {
            if m.generations.is_none() {
                continue;
            }
            let next = m.generation().saturating_add(1);
            let (_, after) = retire(out, prefix, m, next, retain)?;
            for n in after.iter().filter(|n| name::is_own_shard(prefix, n)) {
                out.delete(n)?;
            }
        }
        Ok(())
    }

    /// Whether another run took the claims over (this one was silent too long): it
    /// must not publish.
    pub(crate) fn is_lost(&self) -> bool {
        self.claims.as_ref().is_some_and(Claims::is_lost)
    }

    /// What a worker records of set `i`'s append in its part (see [`PartAppend`]).
    pub(crate) fn part(&self, i: usize, retain: Option<u32>) -> PartAppend {
        let base = &self.manifests[i];
        PartAppend {
            base_generation: base.generation(),
            base_created: base.created.clone(),
            generation: self.generation,
            retired: self.plan.retired[i].clone(),
            whole: self.plan.whole.clone(),
            reconverted: self.reconverted.clone(),
            retain,
        }
    }

    /// The append the workers' parts recorded (`part`) onto the set `live` (the one
    /// set `finalize` publishes it to; claimed by `finalize`).
    ///
    /// # Errors
    ///
    /// The set is no longer the one the workers planned against (an append or
    /// `finalize` published another generation since): nothing may be published.
    pub(crate) fn of_part(live: Manifest, part: &PartAppend, path: &Path) -> Result<Appending> {
        if live.generation() != part.base_generation || live.created != part.base_created {
            let now = if live.generation() == part.generation && live.created != part.base_created {
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
        Ok(Appending {
            manifests: vec![live],
            generation: part.generation,
            plan: Plan {
                reads: Vec::new(),
                retired: vec![part.retired.clone()],
                changed: !part.retired.is_empty(),
                whole: part.whole.clone(),
            },
            reconverted: part.reconverted.clone(),
            claims: None,
        })
    }
}

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

fn with_idx(file: &str) -> [String; 2] {
    [file.to_owned(), format!("{file}.idx")]
}

/// What of `prefix`'s files in `out` stays beside the set `live` that generation
/// `generation` publishes, and what goes once it is published. A pinned manifest of an
/// earlier generation stays while every shard it lists is live, or, with `retain` N,
/// while it is of the last N generations (the new one included), and keeps the shards it
/// lists; the others go, and so does every shard of the prefix that neither the set nor
/// a pinned manifest that stays lists (the shards retired, a killed append's). Returns
/// (the pinned manifests that stay and the shards they keep, what goes).
fn retire(
    out: &dyn Destination,
    prefix: &str,
    live: &Manifest,
    generation: u32,
    retain: Option<u32>,
) -> Result<(Vec<String>, Vec<String>)> {
    let names = out.names("")?;
    let live_names: BTreeSet<&str> = live.shards.iter().map(|s| s.file.as_str()).collect();
    let mut keep = Vec::new();
    let mut kept_shards: BTreeSet<String> = BTreeSet::new();
    let mut after = Vec::new();
    for n in &names {
        // A later one is a killed append's: written again, or cleared.
        let Some(g) = name::pinned_generation(prefix, n).filter(|&g| g < generation) else {
            continue;
        };
        let listed = out
            .read(n)
            .ok()
            .and_then(|b| Manifest::from_json(&b, &out.display(n)).ok());
        let recent = retain.is_some_and(|r| g.saturating_add(r) > generation);
        match listed {
            Some(m)
                if recent
                    || m.shards
                        .iter()
                        .all(|s| live_names.contains(s.file.as_str())) =>
            {
                keep.push(n.clone());
                kept_shards.extend(m.shards.iter().flat_map(|s| with_idx(&s.file)));
            }
            _ => after.push(n.clone()),
        }
    }
    for n in &names {
        let shard = n.strip_suffix(".idx").unwrap_or(n);
        if name::is_own_shard(prefix, n)
            && name::pinned_generation(prefix, n).is_none()
            && !live_names.contains(shard)
            && !kept_shards.contains(n)
        {
            after.push(n.clone());
        }
    }
    keep.extend(kept_shards);
    Ok((keep, after))
}

/// Why the set's spec `then` cannot hold records of the spec `now` (a column added or
/// removed, a type changed), if so.
fn schema_change(then: &[FeatureSpec], now: &[FeatureSpec]) -> Option<String> {
    for f in now {
        match then.iter().find(|t| t.name == f.name) {
            None => return Some(format!("the schema changed: new column {:?}", f.name)),
            Some(t) if t.kind != f.kind || t.arrow_type != f.arrow_type || t.part != f.part => {
                return Some(format!(
                    "the schema changed: column {:?} was {}, is {}",
                    f.name,
                    t.arrow_type.as_deref().unwrap_or(t.kind.name()),
                    f.arrow_type.as_deref().unwrap_or(f.kind.name()),
                ))
            }
            Some(_) => {}
        }
    }
    then.iter()
        .find(|t| !now.iter().any(|f| f.name == t.name))
        .map(|t| format!("the schema changed: column {:?} is gone", t.name))
}

/// The prefix a manifest records in its options (`data` if none).
fn old_prefix(m: &Manifest) -> String {
    (m.options.get("prefix"))
        .and_then(|p| p.as_str())
        .unwrap_or(crate::convert::DEFAULT_PREFIX)
        .to_owned()
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
    use crate::manifest::{ShardInfo, ShardSource};

    fn input(path: &str, rows: u64) -> InputInfo {
        InputInfo {
            path: path.into(),
            bytes: 100,
            rows,
            etag: Some(format!("e-{path}")),
        }
    }

    fn now(path: &str, records: Option<u64>) -> NowInput {
        NowInput {
            name: path.into(),
            bytes: 100,
            etag: Some(format!("e-{path}")),
            records,
            modified: None,
            delete_files: Vec::new(),
            growth: None,
        }
    }

    fn shard(file: &str, sources: &[(&str, [u64; 2])]) -> ShardInfo {
        ShardInfo {
            file: file.into(),
            records: sources.iter().map(|(_, r)| r[1] - r[0]).sum(),
            bytes: 1,
            crc32c: "00000000".into(),
            sources: sources
                .iter()
                .map(|(i, r)| ShardSource::new(*i, *r))
                .collect(),
            generation: None,
        }
    }

    /// Six files of 100 records in three shards of 200: a, b | c, d | e, f, but cut
    /// mid-file: [a, b0..50) [b50.., c, d0..50) [d50.., e, f].
    fn six() -> Manifest {
        let mut m: Manifest = serde_json::from_value(serde_json::json!({
            "manifest_version": 1, "tfshard_version": "0", "created": "2026-12-01T00:00:00Z",
            "record_type": "example", "compression": "none", "options": {},
            "inputs": [], "features": [], "shards": [], "records": 0, "bytes": 0
        }))
        .unwrap();
        m.inputs = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|p| input(p, 100))
            .collect();
        m.shards = vec![
            shard("s0", &[("a", [0, 100]), ("b", [0, 50])]),
            shard("s1", &[("b", [50, 100]), ("c", [0, 100]), ("d", [0, 50])]),
            shard("s2", &[("d", [50, 100]), ("e", [0, 100]), ("f", [0, 100])]),
        ];
        m
    }

    fn all_now() -> Vec<NowInput> {
        ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|p| now(p, Some(100)))
            .collect()
    }

    fn names(set: &BTreeSet<String>) -> Vec<&str> {
        set.iter().map(String::as_str).collect()
    }

    #[test]
    fn nothing_new_is_up_to_date() {
        let p = plan(&[six()], &all_now(), false);
        assert!(p.is_empty(), "{p:?}");
    }

    #[test]
    fn a_new_file_is_read_and_nothing_retired() {
        let mut inputs = all_now();
        inputs.push(now("g", Some(40)));
        let p = plan(&[six()], &inputs, false);
        assert_eq!(p.reads[6], vec![ALL]);
        assert!(p.reads[..6].iter().all(Vec::is_empty));
        assert!(p.retired[0].is_empty());
        assert!(!p.changed);
    }

    /// A delete in c (its records kept change): c's shard goes, and the records it held
    /// of b and d are read again; the other shards stay.
    #[test]
    fn a_delete_retires_only_the_shards_of_that_file() {
        let mut inputs = all_now();
        inputs[2].records = Some(99);
        let p = plan(&[six()], &inputs, false);
        assert_eq!(names(&p.retired[0]), ["s1"]);
        assert_eq!(p.reads[1], vec![[50, 100]]);
        assert_eq!(p.reads[2], vec![ALL]);
        assert_eq!(p.reads[3], vec![[0, 50]]);
        assert!(p.reads[0].is_empty() && p.reads[4].is_empty() && p.reads[5].is_empty());
        assert!(p.changed);
    }

    /// A removed file (a rewrite: gone, and a new one) retires its shards.
    #[test]
    fn a_removed_file_retires_its_shards() {
        let mut inputs = all_now();
        inputs.remove(0);
        inputs.push(now("a2", Some(99)));
        let p = plan(&[six()], &inputs, false);
        assert_eq!(names(&p.retired[0]), ["s0"]);
        assert_eq!(p.reads[0], vec![[0, 50]], "b's records in s0");
        assert_eq!(p.reads[5], vec![ALL], "the new file");
    }

    /// A file whose records are known only once read is read again whole, which
    /// retires every shard holding any of it.
    #[test]
    fn an_inexact_file_is_read_again_whole() {
        let mut inputs = all_now();
        inputs[0].records = Some(99);
        inputs[1].records = None;
        let p = plan(&[six()], &inputs, false);
        assert_eq!(names(&p.retired[0]), ["s0", "s1"]);
        assert_eq!(p.reads[1], vec![ALL]);
        assert_eq!(p.reads[2], vec![[0, 100]]);
        assert_eq!(p.reads[3], vec![[0, 50]]);
    }

    /// Splits share ranges: a range read again retires the other split's shard over
    /// it, and so on until nothing overlaps.
    #[test]
    fn split_shards_over_a_range_read_again_retire_together() {
        let train = six();
        let mut test = six();
        test.shards = vec![
            shard("t0", &[("a", [0, 100]), ("b", [0, 100]), ("c", [0, 10])]),
            shard("t1", &[("c", [10, 100]), ("d", [0, 100])]),
            shard("t2", &[("e", [0, 100]), ("f", [0, 100])]),
        ];
        let mut inputs = all_now();
        inputs[0].records = Some(98);
        let p = plan(&[train, test], &inputs, false);
        // a retires s0 and t0; t0's b and c ranges retire s1; s1's d range retires t1
        // and s2; s2's e and f retire t2.
        assert_eq!(names(&p.retired[0]), ["s0", "s1", "s2"]);
        assert_eq!(names(&p.retired[1]), ["t0", "t1", "t2"]);
    }

    #[test]
    fn shuffled_generations_retire_whole() {
        let mut inputs = all_now();
        inputs[5].records = Some(1);
        let p = plan(&[six()], &inputs, true);
        assert_eq!(names(&p.retired[0]), ["s0", "s1", "s2"]);
        assert!(p.reads.iter().all(|r| !r.is_empty()));
    }

    #[test]
    fn without_an_etag_a_file_modified_since_the_set_counts_as_changed() {
        let at = |secs: u64| Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs));
        let mut m = six();
        for i in &mut m.inputs {
            i.etag = None;
        }
        let published = 1_796_083_200; // 2026-12-01T00:00:00Z
        let mut inputs = all_now();
        for n in &mut inputs {
            n.etag = None;
            n.modified = at(published - 10);
        }
        assert!(plan(std::slice::from_ref(&m), &inputs, false).is_empty());
        inputs[4].modified = at(published);
        let p = plan(&[m], &inputs, false);
        assert_eq!(names(&p.retired[0]), ["s2"]);
    }

    /// An Iceberg file a new delete file applies to (its records known only once read)
    /// changed; one whose delete files the set read already did not.
    #[test]
    fn a_new_delete_file_changes_the_files_it_applies_to() {
        let mut m = six();
        m.inputs.push(input("del-1", 0));
        let mut inputs = all_now();
        inputs[4].records = None;
        inputs[4].delete_files = vec!["del-1".into()];
        assert!(plan(std::slice::from_ref(&m), &inputs, false).is_empty());
        inputs[5].records = None;
        inputs[5].delete_files = vec!["del-2".into()];
        let p = plan(&[m], &inputs, false);
        assert_eq!(names(&p.retired[0]), ["s2"]);
        assert_eq!(p.reads[5], vec![ALL]);
        assert_eq!(p.reads[4], vec![ALL], "read again whole");
        assert_eq!(p.reads[3], vec![[50, 100]]);
    }

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

    /// A listing input (an image folder) whose first entries are the set's grew: only
    /// its new entries are read, nothing retired; one whose entries changed retires
    /// the shards holding it.
    #[test]
    fn a_listing_that_grew_reads_its_new_entries() {
        // c's 100 entries, then 2 more.
        let digests: Vec<u64> = (0..102).map(|k| k * 10 + 1).collect();
        let mut m = six();
        m.inputs[2].etag = Some(listing_etag(digests[99]));
        let mut now = all_now();
        now[2].bytes = 150;
        now[2].records = Some(102);
        now[2].etag = Some(listing_etag(digests[101]));
        now[2].growth = Some(Arc::new(digests.clone()));
        let p = plan(std::slice::from_ref(&m), &now, false);
        assert_eq!(p.reads[2], [[100, u64::MAX]]);
        assert!(p
            .reads
            .iter()
            .enumerate()
            .all(|(i, r)| i == 2 || r.is_empty()));
        assert!(p.retired[0].is_empty() && !p.changed);
        assert!(p.whole.contains(&now[2].name), "its rows are counted anew");
        // An entry before the set's last changed: the folder changed.
        // (A running digest: every later one differs too.)
        let other: Vec<u64> = (digests.iter().enumerate())
            .map(|(k, &d)| if k < 50 { d } else { d + 1 })
            .collect();
        now[2].growth = Some(Arc::new(other));
        let p = plan(std::slice::from_ref(&m), &now, false);
        assert_eq!(p.reads[2], [ALL]);
        assert!(p.changed && !p.retired[0].is_empty());
    }

    #[test]
    fn ranges_merge() {
        let mut r = Vec::new();
        add_range(&mut r, [10, 20]);
        add_range(&mut r, [0, 5]);
        add_range(&mut r, [20, 30]);
        add_range(&mut r, [3, 4]);
        add_range(&mut r, [7, 7]);
        assert_eq!(r, vec![[0, 5], [10, 30]]);
    }
}
