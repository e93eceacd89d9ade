//! `--append`: what a run converts when the output already holds a published set.
//!
//! The set's manifest names, per shard, the inputs it holds records of and their ranges
//! (`sources`). An append compares the inputs as they are now with the manifest's:
//!
//! - an input not in the manifest is **new**: all its records are read;
//! - one that changed (its size, ETag, the records its table keeps, or its identity: a
//!   local file's times and inode, a table's record of its data file) or is **gone**
//!   affects every shard
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
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::example::FeatureSpec;
use crate::lifecycle::Generation;
use crate::manifest::{InputInfo, Manifest};

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
    /// What identifies it where no ETag does (see [`InputInfo::identity`]).
    pub identity: Option<String>,
    /// The delete files that apply to it (Iceberg), as `inputs` names them.
    pub delete_files: Vec<String>,
    /// An input whose ETag is a digest of a listing (an image folder's images): the
    /// digest of its first k + 1 entries at k. An input whose first `rows` entries are
    /// the manifest's, with its ETag, only **grew**: its entries from `rows` on are
    /// read, and no shard retired.
    pub growth: Option<Arc<Vec<u64>>>,
}

pub(crate) use crate::manifest::listing_etag;

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
/// (`listed`) applying to it, or its identity (compared for equality, never against a
/// clock: a file rewritten in the second its set was published is another file, and
/// one written a moment before the set was is not).
fn differs(now: &NowInput, then: &InputInfo, listed: &HashMap<&str, &InputInfo>) -> bool {
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
    match (&now.identity, &then.identity) {
        (Some(a), Some(b)) => a != b,
        // A table's data file in a set from before tfshard recorded identities: the
        // table names it and never rewrites it (its size, rows and delete files above
        // tell the rest).
        (Some(a), None) if is_table_identity(a) => false,
        // Nothing tells it apart (a set from before identities were recorded): assume
        // changed; reading again is safe, missing a change is not.
        (_, _) => now.etag.is_none(),
    }
}

/// Whether two manifests' entries name the same file as it was (path, size, ETag,
/// identity).
fn same_file(a: Option<&InputInfo>, b: Option<&InputInfo>) -> bool {
    let bare = |e: &Option<String>| e.as_deref().map(|e| e.trim_matches('"').to_owned());
    match (a, b) {
        (Some(a), Some(b)) => {
            a.path == b.path
                && a.bytes == b.bytes
                && bare(&a.etag) == bare(&b.etag)
                && (a.identity == b.identity || a.identity.is_none())
        }
        _ => false,
    }
}

/// Whether an identity is a table's record of its data file (immutable) rather than a
/// file system's.
fn is_table_identity(identity: &str) -> bool {
    identity.starts_with("delta:") || identity.starts_with("iceberg:")
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
            Some(t) if differs(n, t, &then) => {
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

/// Plans the append of the inputs `now` (the source's, described as `described`) as the
/// next generation of `next.base`: sets the shards it retires and the inputs it counts
/// anew, and returns what to read.
///
/// # Errors
///
/// Options that change the records or where they go other than the set's; a table
/// other than the set's, or a snapshot older than the set's.
pub(crate) fn plan_generation(
    next: &mut Generation,
    described: &Manifest,
    now: Vec<NowInput>,
    whole_generations: bool,
) -> Result<Plan> {
    let first = &next.base[0];
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
    // when its records are: [`Generation::manifest`].)
    let known = !described.features.is_empty();
    if let Some(why) = schema_change(&first.features, &described.features).filter(|_| known) {
        next.reconverted = Some(why);
        let plan = Plan::everything(&now, &next.base);
        next.retire_everything();
        next.whole = plan.whole.clone();
        return Ok(plan);
    }
    // The same snapshot: nothing to compare. (The same version of a table deleted and
    // made again is another snapshot: its log or metadata file, which the inputs list
    // first, is another file.)
    let same_snapshot = (first.table.as_ref())
        .zip(described.table.as_ref())
        .is_some_and(|(a, b)| {
            (a.version.is_some() || a.snapshot_id.is_some())
                && a.version == b.version
                && a.snapshot_id == b.snapshot_id
        })
        && same_file(first.inputs.first(), described.inputs.first());
    let plan = if same_snapshot {
        Plan {
            reads: vec![Vec::new(); now.len()],
            retired: vec![BTreeSet::new(); next.base.len()],
            ..Plan::default()
        }
    } else {
        plan(&next.base, &now, whole_generations)
    };
    next.retired = plan.retired.clone();
    next.whole = plan.whole.clone();
    Ok(plan)
}

/// What an append did, for its summary: `plan` of generation `next`.
pub(crate) fn summary(next: &Generation, plan: &Plan) -> AppendSummary {
    let up_to_date = plan.is_empty();
    AppendSummary {
        up_to_date,
        generation: if up_to_date {
            next.number - 1
        } else {
            next.number
        },
        retired: plan.retired.iter().map(|r| r.len() as u64).sum(),
        reconverted: next.reconverted.clone(),
    }
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
            identity: None,
        }
    }

    fn now(path: &str, records: Option<u64>) -> NowInput {
        NowInput {
            name: path.into(),
            bytes: 100,
            etag: Some(format!("e-{path}")),
            records,
            identity: None,
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

    /// Regression: a local file counted as changed when modified in or after the
    /// second its set was published, so a table written a moment before its conversion
    /// was converted again whole by the next append. Without an ETag, an input is told
    /// by its identity, compared for equality: the same identity is the same file,
    /// whatever the clocks say; another (a rewrite within the second, an older mtime
    /// set back, a new inode) is a change; none recorded (an older set) is a change,
    /// but for a table's data file, which its table never rewrites.
    #[test]
    fn without_an_etag_a_file_is_told_by_its_identity_not_a_clock() {
        let mut m = six();
        for (k, i) in m.inputs.iter_mut().enumerate() {
            i.etag = None;
            i.identity = Some(format!("1796083200000000000:{k}:1796083200000000000"));
        }
        let mut inputs = all_now();
        for (k, n) in inputs.iter_mut().enumerate() {
            n.etag = None;
            n.identity = Some(format!("1796083200000000000:{k}:1796083200000000000"));
        }
        assert!(plan(std::slice::from_ref(&m), &inputs, false).is_empty());
        // Rewritten in place with its old mtime set back: its ctime moved.
        inputs[4].identity = Some("1796083200000000000:4:1796083201000000000".into());
        let p = plan(std::slice::from_ref(&m), &inputs, false);
        assert_eq!(names(&p.retired[0]), ["s2"]);
        // An older set recorded none: a local file is read again, a table's is not.
        inputs[4].identity = m.inputs[4].identity.clone();
        m.inputs[1].identity = None;
        let p = plan(std::slice::from_ref(&m), &inputs, false);
        assert_eq!(names(&p.retired[0]), ["s0", "s1"]);
        inputs[1].identity = Some("delta:1796083200000:0:0000000000000000".into());
        assert!(plan(std::slice::from_ref(&m), &inputs, false).is_empty());
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
