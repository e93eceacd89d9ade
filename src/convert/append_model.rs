//! The append planner against a model, in memory: random histories of a source's inputs
//! (added, changed, removed, grown, known only once read) and of the set converted from
//! them (splits by key, shuffled generations, another shard size each run). Each append
//! is planned by [`plan`], its records read as a source reads them and cut into shards
//! with the writer's own range bookkeeping ([`Origin`]), and its manifests made by
//! [`Generation::manifest`]. After every step, against the model:
//!
//! - the live shards hold exactly the snapshot's records (input, row, version), each
//!   once, over every split;
//! - each shard's `sources` hold its records, and `verify`'s coverage check finds
//!   nothing;
//! - without splits or a shuffle, exactly the shards holding records of a changed or gone
//!   input are retired (and an empty set's empty shard, when records come); with them,
//!   at least those, and each other one for a range read again;
//! - a set that gained and lost nothing is up to date.
//!
//! `TFSHARD_MODEL_CASES=N` sets the histories (default 2,000); a failure prints its seed,
//! and `TFSHARD_MODEL_SEED=S` replays that one history.

use std::collections::{BTreeMap, BTreeSet};

use super::append::{listing_etag, plan, NowInput, Plan, ALL};
use crate::hash::{stable_hash, Rng};
use crate::lifecycle::Generation;
use crate::manifest::{InputInfo, Manifest, ShardInfo, ShardSource};
use crate::shard::{Origin, SourceRows};

/// One input of the model's source.
#[derive(Debug, Clone)]
struct Input {
    name: String,
    /// Its records now.
    rows: u64,
    /// Bumped by every change: the records of an older version are not the snapshot's.
    version: u32,
    /// Its records are known before it is read (a Parquet file; not a TFRecord file or
    /// an Iceberg file with deletes).
    exact: bool,
    /// A listing (an image folder): per entry, the version it was written at; it may
    /// grow, its first entries as they were.
    entries: Option<Vec<u32>>,
}

impl Input {
    /// The running digests of a listing's entries.
    fn digests(&self) -> Option<Vec<u64>> {
        let entries = self.entries.as_ref()?;
        let mut d = 0u64;
        Some(
            (entries.iter().enumerate())
                .map(|(k, v)| {
                    let bytes = format!("{}/{d}/{k}/{v}", self.name);
                    d = stable_hash(b'L', bytes.as_bytes());
                    d
                })
                .collect(),
        )
    }

    /// The version record `row` was written at.
    fn version_of(&self, row: u64) -> u32 {
        self.entries
            .as_ref()
            .map_or(self.version, |e| e[row as usize])
    }

    fn etag(&self) -> String {
        match self.digests().and_then(|d| d.last().copied()) {
            Some(d) => listing_etag(d),
            None => format!("{}-v{}", self.name, self.version),
        }
    }

    fn now(&self) -> NowInput {
        let growth = self.digests().map(std::sync::Arc::new);
        NowInput {
            name: self.name.clone(),
            bytes: self.rows * 10,
            etag: Some(self.etag()),
            records: self.exact.then_some(self.rows),
            identity: None,
            delete_files: Vec::new(),
            growth,
        }
    }
}

/// A record: its input, its index there, the input's version it was read at.
type Rec = (String, u64, u32);

/// The model's set: per split, its live shards with the records each holds.
#[derive(Debug, Clone, Default)]
struct Set {
    manifests: Vec<Manifest>,
    held: BTreeMap<String, Vec<Rec>>,
}

#[derive(Debug, Clone, Copy)]
struct Options {
    splits: usize,
    shuffle: bool,
}

fn empty_manifest() -> Manifest {
    serde_json::from_value(serde_json::json!({
        "manifest_version": 1, "tfshard_version": "0", "created": "2026-12-01T00:00:00Z",
        "record_type": "example", "compression": "none", "options": {},
        "inputs": [], "features": [], "shards": [], "records": 0, "bytes": 0
    }))
    .expect("a manifest")
}

/// The split a record goes to (by key: stable as the set grows).
fn split_of(name: &str, row: u64, splits: usize) -> usize {
    let h = stable_hash(b'S', format!("{name}/{row}").as_bytes());
    (h % splits as u64) as usize
}

/// One shard being written: its records and sources.
#[derive(Default)]
struct Open {
    records: Vec<Rec>,
    sources: Vec<SourceRows>,
}

/// A run that reads `reads` of `inputs` (in input order), routes each record to its
/// split and cuts each split's records into shards of `per_shard` (as the shard writer
/// does, noting sources through [`Origin`]). Returns per split the shards (their
/// records and sources, by input index), and per input the records read.
fn convert(
    inputs: &[Input],
    reads: &[Vec<[u64; 2]>],
    per_shard: usize,
    options: Options,
    rng: &mut Rng,
) -> (Vec<Vec<Open>>, Vec<u64>) {
    let mut outs: Vec<Vec<Open>> = (0..options.splits).map(|_| vec![Open::default()]).collect();
    let mut shuffled_sources: Vec<Vec<SourceRows>> = vec![Vec::new(); options.splits];
    let mut read_per_input = vec![0u64; inputs.len()];
    let mut origin: Option<Origin> = None;
    for (i, input) in inputs.iter().enumerate() {
        for &[a, b] in &reads[i] {
            let b = b.min(input.rows);
            if a >= b {
                continue;
            }
            // A source's batches, each telling where it starts (as a table's do).
            let mut at = a;
            while at < b {
                let batch_end = (at + 1 + rng.below(7) as u64).min(b);
                let mut o = Origin::at(origin, i as u32, at);
                for row in at..batch_end {
                    let split = split_of(&input.name, row, options.splits);
                    let rec = (input.name.clone(), row, input.version_of(row));
                    if options.shuffle {
                        o.note(&mut shuffled_sources[split], 1);
                        outs[split].last_mut().expect("open").records.push(rec);
                    } else {
                        let out = &mut outs[split];
                        if out.last().expect("open").records.len() >= per_shard {
                            out.push(Open::default());
                        }
                        let shard = out.last_mut().expect("open");
                        let mut mine = o;
                        mine.note(&mut shard.sources, 1);
                        shard.records.push(rec);
                        o.next += 1;
                    }
                    read_per_input[i] += 1;
                }
                origin = Some(o);
                at = batch_end;
            }
        }
    }
    if options.shuffle {
        // A shuffled generation: its records in any order, every shard naming every
        // range its split got.
        for (split, out) in outs.iter_mut().enumerate() {
            let mut all = std::mem::take(&mut out[0].records);
            rng.shuffle(&mut all);
            let mut shards: Vec<Open> = all
                .chunks(per_shard)
                .map(|c| Open {
                    records: c.to_vec(),
                    sources: shuffled_sources[split].clone(),
                })
                .collect();
            if shards.is_empty() {
                shards.push(Open::default());
            }
            *out = shards;
        }
    }
    (outs, read_per_input)
}

/// What the run describes: the inputs as now, each with the records read of it (a
/// listing: its entries), as a source's manifest lists them.
fn described(inputs: &[Input], read: &[u64], options: Options) -> Manifest {
    let mut m = empty_manifest();
    if options.shuffle {
        m.options.insert("shuffle".into(), serde_json::json!(true));
    }
    if options.splits > 1 {
        m.options.insert("split".into(), serde_json::json!("key"));
    }
    m.inputs = (inputs.iter().zip(read))
        .map(|(i, &r)| {
            serde_json::from_value(serde_json::json!({
                "path": i.name, "bytes": i.rows * 10,
                "rows": if i.entries.is_some() { i.rows } else { r },
                "etag": i.etag(),
            }))
            .expect("an input")
        })
        .collect::<Vec<InputInfo>>();
    m
}

fn shard_infos(
    outs: Vec<Open>,
    inputs: &[Input],
    generation: u32,
    split: usize,
) -> (Vec<ShardInfo>, Vec<Vec<Rec>>) {
    let mut infos = Vec::new();
    let mut held = Vec::new();
    let count = outs.len();
    for (k, o) in outs.into_iter().enumerate() {
        let info: ShardInfo = serde_json::from_value(serde_json::json!({
            "file": crate::shard::name::generation_shard_name(
                &format!("s{split}"), generation, k, count, crate::tfrecord::Compression::None),
            "records": o.records.len(), "bytes": o.records.len() * 10, "crc32c": "00000000",
            "sources": (o.sources.iter())
                .map(|s| ShardSource::new(inputs[s.input as usize].name.clone(), s.rows))
                .collect::<Vec<_>>(),
        }))
        .expect("a shard");
        infos.push(info);
        held.push(o.records);
    }
    (infos, held)
}

/// A first conversion: everything read.
fn first(inputs: &[Input], per_shard: usize, options: Options, rng: &mut Rng) -> Set {
    let reads = vec![vec![ALL]; inputs.len()];
    let (outs, read) = convert(inputs, &reads, per_shard, options, rng);
    let mut set = Set::default();
    for (split, out) in outs.into_iter().enumerate() {
        let (infos, held) = shard_infos(out, inputs, 0, split);
        let mut m = described(inputs, &read, options);
        for (info, h) in infos.iter().zip(held) {
            set.held.insert(info.file.clone(), h);
        }
        m.set_shards(infos);
        set.manifests.push(m);
    }
    set
}

/// One append of `inputs` onto `set`; returns the plan.
fn append(
    set: &mut Set,
    inputs: &[Input],
    generation: u32,
    per_shard: usize,
    options: Options,
    rng: &mut Rng,
) -> Plan {
    let now: Vec<NowInput> = inputs.iter().map(Input::now).collect();
    let planned = plan(&set.manifests, &now, options.shuffle);
    if planned.is_empty() {
        return planned;
    }
    let (outs, read) = convert(inputs, &planned.reads, per_shard, options, rng);
    let appending = Generation::for_test(
        set.manifests.clone(),
        generation,
        planned.retired.clone(),
        planned.whole.clone(),
    );
    let mut manifests = Vec::new();
    for (split, out) in outs.into_iter().enumerate() {
        let (infos, held) = shard_infos(out, inputs, generation, split);
        for (info, h) in infos.iter().zip(held) {
            set.held.insert(info.file.clone(), h);
        }
        let new = described(inputs, &read, options);
        let m = appending
            .manifest(split, new, infos)
            .expect("features agree");
        manifests.push(m);
    }
    for retired in &planned.retired {
        for name in retired {
            set.held.remove(name);
        }
    }
    set.manifests = manifests;
    planned
}

/// The snapshot: every record of every input now, each once.
fn snapshot(inputs: &[Input]) -> Vec<Rec> {
    let mut all: Vec<Rec> = (inputs.iter())
        .flat_map(|i| (0..i.rows).map(move |r| (i.name.clone(), r, i.version_of(r))))
        .collect();
    all.sort();
    all
}

fn check(set: &Set, inputs: &[Input], options: Options, context: &str) {
    let mut live: Vec<Rec> = Vec::new();
    for (split, m) in set.manifests.iter().enumerate() {
        for shard in &m.shards {
            let held = &set.held[&shard.file];
            assert_eq!(
                held.len() as u64,
                shard.records,
                "{context}: {}",
                shard.file
            );
            for rec in held {
                assert_eq!(split_of(&rec.0, rec.1, options.splits), split, "{context}");
                let named = (shard.sources.iter())
                    .any(|s| s.input == rec.0 && s.rows[0] <= rec.1 && rec.1 < s.rows[1]);
                assert!(
                    named,
                    "{context}: {} holds {rec:?}, its sources {:?}",
                    shard.file, shard.sources
                );
            }
            live.extend(held.iter().cloned());
        }
        let mut problems = Vec::new();
        crate::verify::check_sources(
            std::path::Path::new("model"),
            m,
            &crate::verify::VerifyOptions::default(),
            &mut problems,
        );
        let problems: Vec<String> = problems.iter().map(|p| p.text()).collect();
        assert!(
            problems.is_empty(),
            "{context}: verify reports {problems:?}"
        );
    }
    live.sort();
    let want = snapshot(inputs);
    if live != want {
        let (l, w): (BTreeSet<&Rec>, BTreeSet<&Rec>) =
            (live.iter().collect(), want.iter().collect());
        let missing: Vec<_> = w.difference(&l).take(5).collect();
        let extra: Vec<_> = l.difference(&w).take(5).collect();
        let doubled = live.len() - l.len();
        panic!("{context}: the live records are not the snapshot's: missing {missing:?}, stale {extra:?}, {doubled} doubled");
    }
}

/// One history: a source of a few inputs, converted, then changed and appended to a
/// number of times.
fn history(seed: u64) {
    let mut rng = Rng::new(seed);
    let options = Options {
        splits: [1, 1, 2, 3][rng.below(4)],
        shuffle: rng.below(5) == 0,
    };
    let listing = rng.below(4) == 0;
    let mut next_name = 0;
    let mut new_input = |rng: &mut Rng, version: u32| {
        next_name += 1;
        let rows = [0, 1, 2, 5, 13, 40, 97][rng.below(7)] as u64;
        Input {
            name: format!("in{next_name:03}"),
            rows,
            version,
            exact: listing || rng.below(4) != 0,
            entries: listing.then(|| vec![version; rows as usize]),
        }
    };
    let mut inputs: Vec<Input> = (0..1 + rng.below(5))
        .map(|_| new_input(&mut rng, 0))
        .collect();
    let mut per_shard = 1 + rng.below(40);
    let mut set = first(&inputs, per_shard, options, &mut rng);
    check(
        &set,
        &inputs,
        options,
        &format!("seed {seed}, generation 0"),
    );
    let mut generation = 1;
    for step in 0..2 + rng.below(8) {
        let before = set.manifests.clone();
        let mut changed: BTreeSet<String> = BTreeSet::new();
        let mut grown = false;
        let ops = rng.below(4);
        for _ in 0..ops {
            match rng.below(6) {
                0 => inputs.push(new_input(&mut rng, generation)),
                1 if !inputs.is_empty() => {
                    let i = rng.below(inputs.len());
                    changed.insert(inputs.remove(i).name);
                }
                2 | 3 if !inputs.is_empty() => {
                    let i = rng.below(inputs.len());
                    let input = &mut inputs[i];
                    input.version = generation * 10 + step as u32 + 1;
                    match &mut input.entries {
                        Some(entries) if !entries.is_empty() && rng.below(2) == 0 => {
                            // One entry rewritten: the listing changed, unless the entry
                            // came after the set's last one (the listing only grew).
                            let k = rng.below(entries.len());
                            entries[k] = input.version;
                            let known = (before[0].inputs.iter())
                                .find(|i| i.path == input.name)
                                .map_or(0, |i| i.rows);
                            if k as u64 >= known {
                                grown = true;
                                continue;
                            }
                        }
                        Some(entries) => {
                            let more = 1 + rng.below(9);
                            entries.extend(std::iter::repeat_n(input.version, more));
                            input.rows += more as u64;
                            grown = true;
                            continue;
                        }
                        None => input.rows = [0, 1, 3, 20, 64][rng.below(5)],
                    }
                    changed.insert(input.name.clone());
                }
                4 => {
                    // Inputs known only once read (TFRecord files, Iceberg files with
                    // deletes) stay so.
                }
                _ => per_shard = 1 + rng.below(40),
            }
        }
        let context = format!(
            "seed {seed}, step {step} (generation {generation}, {options:?}, changed {changed:?})"
        );
        let planned = append(&mut set, &inputs, generation, per_shard, options, &mut rng);
        let added = inputs
            .iter()
            .any(|i| !before[0].inputs.iter().any(|t| t.path == i.name));
        if changed.is_empty() && !added && !grown {
            assert!(
                planned.is_empty(),
                "{context}: nothing changed, yet {planned:?}"
            );
            continue;
        }
        if planned.is_empty() {
            // (A change that left the records as they were: an input emptied twice.)
            check(&set, &inputs, options, &context);
            continue;
        }
        generation += 1;
        // What was retired: at least every shard holding a changed input's records;
        // without splits or a shuffle, exactly those, and those holding records of an
        // input known only once read that a retired shard held (read again whole), and
        // an empty set's empty shard.
        for (m, retired) in before.iter().zip(&planned.retired) {
            let inexact: BTreeSet<&str> = (inputs.iter())
                .filter(|i| !i.exact)
                .map(|i| i.name.as_str())
                .collect();
            let mut expected: BTreeSet<&str> = BTreeSet::new();
            loop {
                let whole: BTreeSet<&str> = (m.shards.iter())
                    .filter(|s| expected.contains(s.file.as_str()))
                    .flat_map(|s| s.sources.iter().map(|x| x.input.as_str()))
                    .filter(|i| inexact.contains(i))
                    .collect();
                let more: BTreeSet<&str> = (m.shards.iter())
                    .filter(|s| {
                        s.sources
                            .iter()
                            .any(|x| changed.contains(&x.input) || whole.contains(x.input.as_str()))
                    })
                    .map(|s| s.file.as_str())
                    .collect();
                if more.is_subset(&expected) {
                    break;
                }
                expected.extend(more);
            }
            for shard in &m.shards {
                let must = expected.contains(shard.file.as_str());
                if must {
                    assert!(
                        retired.contains(&shard.file),
                        "{context}: {} kept",
                        shard.file
                    );
                }
                if options.splits == 1 && !options.shuffle && !must && shard.records > 0 {
                    assert!(
                        !retired.contains(&shard.file),
                        "{context}: {} retired",
                        shard.file
                    );
                }
            }
        }
        check(&set, &inputs, options, &context);
    }
}

#[test]
fn appends_keep_one_snapshot_in_random_histories() {
    if let Ok(seed) = std::env::var("TFSHARD_MODEL_SEED") {
        history(seed.parse().expect("TFSHARD_MODEL_SEED is a number"));
        return;
    }
    let cases: u64 = std::env::var("TFSHARD_MODEL_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(2000);
    let base: u64 = std::env::var("TFSHARD_MODEL_BASE")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    for case in 0..cases {
        let seed = base + case;
        if let Err(e) = std::panic::catch_unwind(|| history(seed)) {
            let text = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            panic!(
                "history {seed} failed: {text}\nreplay: TFSHARD_MODEL_SEED={seed} cargo test --lib appends_keep_one_snapshot"
            );
        }
    }
}
