//! `tfshard finalize OUT`: publishes the parts that `--num-workers N` runs left under
//! `OUT/.{prefix}.tfshard-parts/` as one `{prefix}-{i:05}-of-{total:05}` set with one
//! manifest, on disk or on a store.
//!
//! 1. Every part of every prefix is read (its part manifest: the part is complete) and
//!    checked against part 0: the tool version, options, record type, compression,
//!    inputs (paths, sizes, ETags) and feature kinds and types must agree. A missing or
//!    incomplete part is an error naming the worker indices; nothing is published.
//! 0. The output is claimed, per prefix (`.{prefix}.tfshard-parts/finalizing`, a
//!    conditional put), and the claim refreshed while the run lives: a second `finalize`
//!    meanwhile fails, or reports the set already published when it finds it; a claim
//!    not refreshed for [`CLAIM_STALE_AFTER`] (its holder was killed) is taken over.
//! 2. A plan is recorded (`.{prefix}.tfshard-parts/finalize.json`: the moves and the
//!    manifest), so that a rerun after a failure midway completes the same set.
//! 3. The set is published by the one publish protocol: with
//!    `--overwrite` the old manifest goes; the prefix's other shards go; the part shards
//!    are renamed (copied, on a store) to their final names, in worker order (shard data
//!    is never read: the manifest comes from the part manifests); the manifests are
//!    written last (every prefix's, after every prefix's shards: all splits are one
//!    commit).
//! 4. Every multipart upload still recorded under the parts or pending there (workers
//!    killed or duplicated) is aborted; the parts folders, claims included, are deleted.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::example::FeatureSpec;
use crate::lifecycle::{Generation, PartAppend, SetClaim, PART_KEY};
use crate::manifest::{self, InputInfo, Manifest, ShardInfo};
use crate::shard::name;
pub use crate::store::claim::CLAIM_STALE_AFTER;
use crate::store::claim::{Claims, Held};
use crate::store::storage::is_not_found;
use crate::store::{self, destination::Destination, publish};
use crate::tfrecord::Compression;

/// What `finalize` published for one prefix.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct FinalizedSet {
    /// The prefix (or split name).
    pub prefix: String,
    /// The manifest written.
    pub manifest: PathBuf,
    /// Records in the set.
    pub records: u64,
    /// Shards in the set.
    pub shards: u64,
    /// Bytes on disk.
    pub bytes: u64,
    /// Workers whose parts it joins (0 when another `finalize` had published the set).
    pub workers: u64,
    /// Another `finalize` had published this set; this run found it and did nothing.
    pub already_published: bool,
    /// The parts were a generation of an append (`convert --append` workers): the
    /// generation published and the shards it retired.
    pub appended: Option<(u32, u64)>,
}

/// The claim object of `finalize` on `prefix`, in its parts folder.
fn claim_file(prefix: &str) -> String {
    format!("{}/finalizing", name::parts_dir_name(prefix))
}

/// The plan of one prefix, recorded before anything moves.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Plan {
    /// Part shard (relative to the output) → final name.
    moves: Vec<(String, String)>,
    manifest: Manifest,
    /// The parts are a generation of an append onto the set there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    append: Option<PartAppend>,
}

/// The append `part` onto `prefix`'s live set in `out`, checked to be the set the
/// workers planned against.
fn live_append(out: &dyn Destination, prefix: &str, part: &PartAppend) -> Result<Generation> {
    let rel = name::manifest_name(prefix);
    let path = out.display(&rel);
    let live = match out.read(&rel) {
        Ok(bytes) => Manifest::from_json(&bytes, &path)?,
        Err(e) if is_not_found(&e) => {
            return Err(Error::new(ErrorKind::PartsDisagree {
                detail: format!(
                    "the workers appended generation {} to a set that is gone: run the \
                     workers again",
                    part.generation
                ),
            })
            .with_file(path))
        }
        Err(e) => return Err(e),
    };
    live.check_generations(&path)?;
    Generation::of_part(live, prefix, part, &path)
}

/// Whether `prefix`'s set is published by a `finalize`: its manifest is there and is the
/// recorded plan's (the whole manifest: a set converted in the second the plan was made
/// has the same `created`, and was taken for the plan's, its parts then deleted
/// unpublished), or no plan and no part is left.
fn is_published(out: &dyn Destination, prefix: &str) -> bool {
    let rel = name::manifest_name(prefix);
    let Ok(Ok(manifest)) = out
        .read(&rel)
        .map(|b| Manifest::from_json(&b, &out.display(&rel)))
    else {
        return false;
    };
    let parts_dir = name::parts_dir_name(prefix);
    match out.read(&format!("{parts_dir}/finalize.json")) {
        Ok(bytes) => serde_json::from_slice::<Plan>(&bytes).is_ok_and(|plan| {
            let mut planned = plan.manifest;
            planned.worker = None;
            planned == manifest
        }),
        Err(e) if is_not_found(&e) => out
            .names(&parts_dir)
            .unwrap_or_default()
            .iter()
            .all(|n| n == "finalizing"),
        Err(_) => false,
    }
}

/// The set another `finalize` published for `prefix`, from its manifest.
fn published_set(out: &dyn Destination, prefix: &str) -> Result<FinalizedSet> {
    let rel = name::manifest_name(prefix);
    let manifest = Manifest::from_json(&out.read(&rel)?, &out.display(&rel))?;
    Ok(FinalizedSet {
        prefix: prefix.to_owned(),
        manifest: out.display(&rel),
        records: manifest.records,
        shards: manifest.shards.len() as u64,
        bytes: manifest.bytes,
        workers: 0,
        already_published: true,
        appended: None,
    })
}

/// The sets other `finalize`s published for `prefixes`.
fn published_sets(out: &dyn Destination, prefixes: &[String]) -> Result<Vec<FinalizedSet>> {
    prefixes.iter().map(|p| published_set(out, p)).collect()
}

/// The option only a manifest of TFRecord inputs holds: its features were inferred
/// from its records, so workers' parts may each have seen a different set.
const INFERRED_MARK: &str = "input_compression";

/// The features of parts whose specs were inferred from their own records: every
/// feature any part saw, sorted as inference sorts them; a fixed shape only where
/// every part holding records saw it in every record with that shape.
fn merge_inferred(holding: &[&Manifest]) -> std::result::Result<Vec<FeatureSpec>, String> {
    let mut merged: Vec<FeatureSpec> = Vec::new();
    for m in holding {
        for f in &m.features {
            match merged
                .iter_mut()
                .find(|g| g.name == f.name && g.part == f.part)
            {
                Some(g) if g.kind != f.kind => {
                    return Err(format!(
                        "feature {:?} is {} in one part and {} in another",
                        f.name,
                        g.kind.name(),
                        f.kind.name()
                    ))
                }
                Some(g) if g.shape != f.shape => g.shape = None,
                Some(_) => {}
                None => merged.push(f.clone()),
            }
        }
    }
    for g in &mut merged {
        let everywhere = holding.iter().all(|m| {
            m.features
                .iter()
                .any(|f| f.name == g.name && f.part == g.part)
        });
        if !everywhere {
            g.shape = None;
        }
    }
    merged.sort_by(|a, b| (a.part, &a.name).cmp(&(b.part, &b.name)));
    Ok(merged)
}

/// Reads and checks every part of `prefix`; returns its plan (recorded, or new).
fn plan_prefix(out: &dyn Destination, prefix: &str) -> Result<(Plan, u64)> {
    let parts_dir = name::parts_dir_name(prefix);
    let plan_file = format!("{parts_dir}/finalize.json");
    if out.exists(&plan_file)? {
        // A finalize that stopped midway: complete the plan it recorded.
        let bytes = out.read(&plan_file)?;
        let plan: Plan = serde_json::from_slice(&bytes).map_err(|e| {
            Error::new(ErrorKind::ManifestInvalid(e)).with_file(out.display(&plan_file))
        })?;
        let workers = plan.manifest.worker.map(|w| w.count).unwrap_or(0);
        // Untrusted like any file in the output: nothing may move outside it.
        let safe = plan
            .moves
            .iter()
            .all(|(from, to)| manifest::is_safe_relative(from) && manifest::is_safe_relative(to));
        if !safe {
            return Err(Error::new(ErrorKind::PartsDisagree {
                detail: "the recorded finalize plan names a file outside the output".into(),
            })
            .with_file(out.display(&plan_file)));
        }
        return Ok((plan, workers));
    }
    let mut count = None;
    for n in out.names(&parts_dir)? {
        let Some((_, of)) = n.split_once("-of-") else {
            continue;
        };
        let Ok(of) = of.parse::<u64>() else { continue };
        match count {
            None => count = Some(of),
            Some(c) if c != of => {
                return Err(Error::new(ErrorKind::PartsDisagree {
                    detail: format!("parts of {c} and of {of} workers are both present"),
                })
                .with_file(out.display(&parts_dir)))
            }
            _ => {}
        }
    }
    let count = count
        .filter(|&c| c > 0)
        .ok_or_else(|| Error::new(ErrorKind::NoParts).with_file(out.display(&parts_dir)))?;
    let manifest_name = name::manifest_name(prefix);
    let mut parts: Vec<Manifest> = Vec::new();
    let mut appends: Vec<Option<PartAppend>> = Vec::new();
    let mut missing = Vec::new();
    for i in 0..count {
        let rel = format!("{parts_dir}/{i:05}-of-{count:05}/{manifest_name}");
        match out.read(&rel) {
            Ok(bytes) => {
                let invalid =
                    |e| Error::new(ErrorKind::ManifestInvalid(e)).with_file(out.display(&rel));
                let m: Manifest = serde_json::from_slice(&bytes).map_err(invalid)?;
                let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(invalid)?;
                let part = match value.get(PART_KEY) {
                    Some(v) => Some(serde_json::from_value(v.clone()).map_err(invalid)?),
                    None => None,
                };
                parts.push(m);
                appends.push(part);
            }
            Err(e) if is_not_found(&e) => missing.push(i),
            Err(e) => return Err(e),
        }
    }
    if !missing.is_empty() {
        return Err(Error::new(ErrorKind::PartsMissing { missing, count })
            .with_file(out.display(&parts_dir)));
    }
    let first = &parts[0];
    let inferred = first.options.contains_key(INFERRED_MARK);
    for (i, m) in parts.iter().enumerate() {
        let disagree = |what: &str| {
            Err(Error::new(ErrorKind::PartsDisagree {
                detail: format!("worker {i}'s {what} differ from worker 0's"),
            })
            .with_file(out.display(&parts_dir)))
        };
        if m.worker.map(|w| (w.index, w.count)) != Some((i as u64, count)) {
            return disagree("worker index and count");
        }
        if appends[i] != appends[0] {
            return disagree("appends (the set and generation they planned against)");
        }
        if m.tfshard_version != first.tfshard_version {
            return disagree("tfshard version");
        }
        if m.table != first.table {
            let name = |t: &Option<crate::manifest::TableInfo>| match t {
                Some(t) => match &t.timestamp {
                    Some(at) => format!("{} {} ({at})", t.location, t.snapshot_words()),
                    None => format!("{} {}", t.location, t.snapshot_words()),
                },
                None => "no table".to_owned(),
            };
            return Err(Error::new(ErrorKind::PartsDisagree {
                detail: format!(
                    "worker {i} read {}, worker 0 read {}: run every worker with the same snapshot (--version, --snapshot-id or --timestamp)",
                    name(&m.table),
                    name(&first.table)
                ),
            })
            .with_file(out.display(&parts_dir)));
        }
        if m.options != first.options
            || m.record_type != first.record_type
            || m.compression != first.compression
        {
            return disagree("options");
        }
        let key = |v: &[InputInfo]| -> Vec<(String, u64, Option<String>)> {
            v.iter()
                .map(|x| (x.path.clone(), x.bytes, x.etag.clone()))
                .collect()
        };
        if key(&m.inputs) != key(&first.inputs) {
            return disagree("inputs (paths, sizes or ETags)");
        }
        let kinds = |v: &[FeatureSpec]| -> Vec<FeatureSpec> {
            v.iter()
                .map(|f| FeatureSpec {
                    shape: None,
                    ..f.clone()
                })
                .collect()
        };
        // (TFRecord inputs: each part's spec is inferred from its own records, which
        // may hold features others do not; they are merged below.)
        if kinds(&m.features) != kinds(&first.features) && !inferred {
            return disagree("feature kinds and types");
        }
    }
    // One manifest from the parts: rows summed per input, shapes merged over the parts
    // that hold records, shards in worker order.
    let mut merged = first.clone();
    for (k, input) in merged.inputs.iter_mut().enumerate() {
        input.rows = parts.iter().map(|m| m.inputs[k].rows).sum();
    }
    let holding: Vec<&Manifest> = parts.iter().filter(|m| m.records > 0).collect();
    if inferred {
        merged.features = merge_inferred(&holding).map_err(|detail| {
            Error::new(ErrorKind::PartsDisagree { detail }).with_file(out.display(&parts_dir))
        })?;
    }
    for (k, feature) in merged.features.iter_mut().enumerate().filter(|_| !inferred) {
        let mut shapes = holding.iter().map(|m| &m.features[k].shape);
        feature.shape = match shapes.next() {
            None => None,
            Some(s) => {
                if shapes.all(|o| o == s) {
                    s.clone()
                } else {
                    None
                }
            }
        };
    }
    let compression = Compression::from_name(&first.compression).unwrap_or(Compression::None);
    let mut sources: Vec<(String, &ShardInfo)> = Vec::new();
    for (i, m) in parts.iter().enumerate() {
        for s in m.shards.iter().filter(|s| s.records > 0) {
            sources.push((format!("{parts_dir}/{i:05}-of-{count:05}/{}", s.file), s));
        }
    }
    if sources.is_empty() {
        // Every part empty: the one empty shard of the zero-row rule, from worker 0.
        let empty = parts[0]
            .shards
            .first()
            .ok_or_else(|| Error::new(ErrorKind::NoParts).with_file(out.display(&parts_dir)))?;
        sources.push((
            format!("{parts_dir}/00000-of-{count:05}/{}", empty.file),
            empty,
        ));
    }
    let total = sources.len();
    let part = appends.swap_remove(0);
    let generation = part.as_ref().map_or(0, |p| p.generation);
    let mut moves = Vec::with_capacity(total);
    let mut written = Vec::with_capacity(total);
    // The workers' partial statistics move with their shards (unless `--no-stats`).
    let stats = first.options.get("stats") == Some(&serde_json::Value::Bool(true));
    for (i, (from, info)) in sources.into_iter().enumerate() {
        let file = name::generation_shard_name(prefix, generation, i, total, compression);
        written.push(ShardInfo {
            file: file.clone(),
            ..info.clone()
        });
        if stats {
            moves.push((format!("{from}.stats"), format!("{file}.stats")));
        }
        moves.push((from, file));
    }
    merged.created = manifest::now_rfc3339();
    merged.row_groups = None;
    merged.worker = Some(manifest::WorkerInfo { index: 0, count });
    // An append's generation joins the live set's shards that stay.
    match &part {
        Some(part) => merged = live_append(out, prefix, part)?.manifest(0, merged, written)?,
        None => merged.set_shards(written),
    }
    Ok((
        Plan {
            moves,
            manifest: merged,
            append: part,
        },
        count,
    ))
}

/// What `finalize` published: one set per prefix.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct FinalizeReport {
    /// The output folder or URL.
    pub output: PathBuf,
    /// The sets, by prefix.
    pub sets: Vec<FinalizedSet>,
    /// Wall time.
    pub seconds: f64,
}

impl FinalizeReport {
    /// The report as `finalize --json` prints it (and the Python module returns it):
    /// `output`, `manifest` (null for several sets), `records`, `shards`, `bytes`,
    /// `seconds`, `workers`; `already_published` when another `finalize` had published
    /// every set, `generation` and `retired` when the parts were an append's, and
    /// `splits` for several.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        let sets = &self.sets;
        let single = sets.len() == 1;
        let mut value = json!({
            "output": self.output,
            "manifest": if single { json!(sets[0].manifest) } else { json!(null) },
            "records": sets.iter().map(|s| s.records).sum::<u64>(),
            "shards": sets.iter().map(|s| s.shards).sum::<u64>(),
            "bytes": sets.iter().map(|s| s.bytes).sum::<u64>(),
            "seconds": self.seconds,
            "workers": sets.first().map_or(0, |s| s.workers),
        });
        if sets.iter().all(|s| s.already_published) {
            value["already_published"] = json!(true);
        }
        // An append's workers' generation: which, and the shards it retired.
        if let Some((generation, _)) = sets.iter().find_map(|s| s.appended) {
            value["generation"] = json!(generation);
            value["retired"] = json!(sets
                .iter()
                .filter_map(|s| s.appended)
                .map(|a| a.1)
                .sum::<u64>());
        }
        if !single {
            value["splits"] = sets
                .iter()
                .map(|s| {
                    (
                        s.prefix.clone(),
                        json!({"manifest": s.manifest, "records": s.records, "shards": s.shards, "bytes": s.bytes}),
                    )
                })
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        value
    }
}

/// A checked `finalize`, ready to run: `Finalizer::builder(output)`, options, `build()`,
/// `run()`.
///
/// ```no_run
/// use tfshard::finalize::Finalizer;
/// // After `convert ... --num-workers 4 --worker-index I` ran for I = 0..4:
/// let report = Finalizer::builder("s3://bucket/out").build()?.run()?;
/// println!("{} records", report.sets.iter().map(|s| s.records).sum::<u64>());
/// # Ok::<(), tfshard::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Finalizer {
    output: PathBuf,
    prefix: Option<String>,
    overwrite: bool,
    io: store::IoOptions,
}

/// Builds a [`Finalizer`].
#[derive(Debug, Clone)]
pub struct FinalizerBuilder {
    finalizer: Finalizer,
}

impl Finalizer {
    /// Publishes the parts in `output` (a folder or a store URL).
    pub fn builder(output: impl Into<PathBuf>) -> FinalizerBuilder {
        FinalizerBuilder {
            finalizer: Finalizer {
                output: output.into(),
                prefix: None,
                overwrite: false,
                io: store::IoOptions::default(),
            },
        }
    }

    /// Publishes (see the module docs).
    ///
    /// # Errors
    ///
    /// No parts; a missing or incomplete part (naming the worker indices); parts that
    /// disagree; an existing set without overwrite; an I/O or store error. Nothing is
    /// published unless every prefix's parts are complete.
    pub fn run(&self) -> Result<FinalizeReport> {
        let f = self;
        let (sets, seconds) = finalize(&f.output, f.prefix.as_deref(), f.overwrite, f.io)?;
        Ok(FinalizeReport {
            output: f.output.clone(),
            sets,
            seconds,
        })
    }
}

impl FinalizerBuilder {
    /// Only this prefix's parts (default: every prefix that has parts, all splits of
    /// a `--split` run together).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.finalizer.prefix = Some(prefix.into());
        self
    }

    /// Replace a set already published under the prefix.
    pub fn with_overwrite(mut self, overwrite: bool) -> Self {
        self.finalizer.overwrite = overwrite;
        self
    }

    /// Store settings of every request (default [`store::IoOptions`]'s).
    pub fn with_io(mut self, io: store::IoOptions) -> Self {
        self.finalizer.io = io;
        self
    }

    /// Checks the options.
    ///
    /// # Errors
    ///
    /// [`InvalidOption`](crate::error::ErrorKind::InvalidOption): no output, or an unsupported
    /// URL scheme.
    pub fn build(self) -> Result<Finalizer> {
        let f = self.finalizer;
        if f.output.as_os_str().is_empty() {
            return Err(Error::invalid_option("output", "no output folder given"));
        }
        store::storage::resolve(&f.output, f.io)?;
        Ok(f)
    }
}

/// Publishes the parts in `output` (every prefix that has parts, or `prefix` alone).
///
/// # Errors
///
/// No parts; a missing or incomplete part (naming the worker indices); parts that
/// disagree; an existing set without `overwrite`; an I/O or store error. Nothing is
/// published unless every prefix's parts are complete.
fn finalize(
    output: &Path,
    prefix: Option<&str>,
    overwrite: bool,
    io: store::IoOptions,
) -> Result<(Vec<FinalizedSet>, f64)> {
    let started = Instant::now();
    let destination = store::destination_of(output, io)?;
    let out = &*destination;
    let prefixes: Vec<String> = match prefix {
        Some(p) => vec![p.to_owned()],
        None => {
            let mut found: Vec<String> = out
                .names("")?
                .into_iter()
                .filter_map(|n| {
                    n.strip_prefix('.')
                        .and_then(|r| r.strip_suffix(".tfshard-parts"))
                        .map(str::to_owned)
                })
                .collect();
            found.sort();
            found
        }
    };
    if prefixes.is_empty() {
        // Another finalize may have published the set and removed its parts.
        let published = match prefix {
            Some(p) => vec![p.to_owned()],
            None => out
                .names("")?
                .into_iter()
                .filter_map(|n| n.strip_suffix(name::MANIFEST_SUFFIX).map(str::to_owned))
                .collect(),
        };
        if !published.is_empty() && published.iter().all(|p| is_published(out, p)) {
            return Ok((
                published_sets(out, &published)?,
                started.elapsed().as_secs_f64(),
            ));
        }
        return Err(Error::new(ErrorKind::NoParts).with_file(output));
    }
    // 0. Claimed, every prefix, before anything is read for the plan.
    let mut claims = Claims::new(destination.clone());
    let mut refused = Vec::new();
    for p in &prefixes {
        if let Err(Held) = claims.claim(&claim_file(p))? {
            refused.push(p);
        }
    }
    if !refused.is_empty() {
        // A live holder, or one that published the set (its claim went with the parts).
        if refused.len() == prefixes.len() && refused.iter().all(|p| is_published(out, p)) {
            return Ok((
                published_sets(out, &prefixes)?,
                started.elapsed().as_secs_f64(),
            ));
        }
        return Err(Error::new(ErrorKind::FinalizeClaimed).with_file(output));
    }
    claims.keep_alive();
    // An append's workers' generation is published as an append is, and any set as a
    // writer of the set: no append may publish to it meanwhile.
    let set_claim = SetClaim::take(&destination, &prefixes)?;
    // 1-2. Every prefix planned (and checked) before anything moves.
    let mut plans = Vec::with_capacity(prefixes.len());
    let mut published = Vec::new();
    for p in &prefixes {
        let (plan, workers) = match plan_prefix(out, p) {
            Ok(planned) => planned,
            // Published (its parts removed) between our listing and our claim.
            Err(e) if matches!(e.kind(), ErrorKind::NoParts) && is_published(out, p) => {
                published.push(published_set(out, p)?);
                continue;
            }
            Err(e) => return Err(e),
        };
        let plan_file = format!("{}/finalize.json", name::parts_dir_name(p));
        // Another set under the name (a rerun's plan may be an --overwrite run's); an
        // append's parts add a generation to it.
        if plan.append.is_some() && overwrite {
            return Err(Error::invalid_option(
                "overwrite",
                "the parts are a generation to append to the set there (their workers ran \
                 with --append): finalize without --overwrite",
            ));
        }
        let set_there = out.exists(&name::manifest_name(p))?;
        if !overwrite && plan.append.is_none() && set_there && !is_published(out, p) {
            return Err(Error::new(ErrorKind::OutputExists).with_file(output));
        }
        if !out.exists(&plan_file)? {
            let json = serde_json::to_vec_pretty(&plan)
                .map_err(|e| Error::from(std::io::Error::other(e)))?;
            out.write(&plan_file, json, false)?;
        }
        plans.push((p.clone(), plan, workers));
    }
    if plans.is_empty() {
        claims.stop_refreshing();
        for p in &prefixes {
            out.delete_tree(&name::parts_dir_name(p))?;
        }
        claims.forget();
        return Ok((published, started.elapsed().as_secs_f64()));
    }
    if !published.is_empty() {
        return Err(Error::new(ErrorKind::FinalizeClaimed).with_file(output));
    }
    crate::failpoint::hit("finalize:planned")?;
    // 3-5. Published by the one protocol: the old sets go (with --overwrite), the part
    // shards move into place, the manifests are written last. A killed finalize's
    // multipart copies to final names (recorded under the parts) go first; a set whose
    // manifest a killed finalize already wrote is published.
    let mut sets = Vec::with_capacity(plans.len());
    let mut to_publish = Vec::with_capacity(plans.len());
    for (p, plan, workers) in &plans {
        let parts_dir = name::parts_dir_name(p);
        out.abort_uploads(&parts_dir)?;
        let mut manifest = plan.manifest.clone();
        manifest.worker = None;
        sets.push(FinalizedSet {
            prefix: p.clone(),
            manifest: out.display(&name::manifest_name(p)),
            records: manifest.records,
            shards: manifest.shards.len() as u64,
            bytes: manifest.bytes,
            workers: *workers,
            already_published: false,
            appended: plan
                .append
                .as_ref()
                .map(|a| (a.generation, a.retired.len() as u64)),
        });
        if is_published(out, p) {
            continue;
        }
        let append = match &plan.append {
            Some(part) => {
                let next = live_append(out, p, part)?;
                Some(next.publication(0, out, p, &manifest, part.retain)?)
            }
            None => None,
        };
        // The set's statistics, from its shards' partials: the moved ones read where
        // the workers left them (or, moved by a killed finalize, where they are now).
        let mut partials = std::collections::HashMap::new();
        for (from, to) in &plan.moves {
            if let Some(shard) = to.strip_suffix(".stats") {
                match out.read(from) {
                    Ok(bytes) => {
                        partials.insert(shard.to_owned(), std::sync::Arc::new(bytes));
                    }
                    Err(e) if crate::store::storage::is_not_found(&e) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let stats = crate::lifecycle::set_stats(out, "", p, &mut manifest, &partials)?;
        to_publish.push(publish::Set {
            dir: String::new(),
            prefix: p.clone(),
            own: name::is_own_shard,
            moves: plan.moves.clone(),
            stats,
            manifest: (name::manifest_name(p), manifest.to_json()?),
            records: format!("{parts_dir}/uploads"),
            append,
        });
    }
    let appends = to_publish.iter().any(|set| set.append.is_some());
    // Right before each manifest: both claims still this finalize's.
    let confirm = || match claims.confirm() {
        Err(e) if matches!(e.kind(), ErrorKind::ClaimLost) => {
            Err(Error::new(ErrorKind::FinalizeClaimed).with_file(output))
        }
        other => other.and_then(|()| set_claim.confirm()),
    };
    publish::publish(
        &publish::Direct(out),
        &to_publish,
        publish::Mode::of(overwrite, appends),
        &crate::progress::CancelToken::new(),
        &confirm,
    )?;
    crate::failpoint::hit("finalize:published")?;
    for (p, _, _) in &plans {
        out.abort_uploads(&name::parts_dir_name(p))?;
    }
    claims.stop_refreshing();
    for (p, _, _) in &plans {
        out.delete_tree(&name::parts_dir_name(p))?;
    }
    claims.forget();
    // 6. A TFDS dataset's files, from every manifest of it (the workers' manifests say
    // which dataset).
    let mut datasets: Vec<&str> = plans
        .iter()
        .filter_map(|(_, plan, _)| plan.manifest.options.get("tfds")?.as_str())
        .collect();
    datasets.dedup();
    for name in datasets {
        crate::tfds::publish(out, name)?;
    }
    Ok((sets, started.elapsed().as_secs_f64()))
}
