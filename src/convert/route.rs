//! Routing: where each record goes (its split, then a shard writer, or with
//! `--shuffle` a bucket scatter), and the passes that make each output's shards: the
//! fill rule, and the even cut `--min-shards` asks of small outputs.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use crate::convert::ConvertOptions;
use crate::error::Result;
use crate::example::encode::EncodedBatch;
use crate::hash::{index_hash, SPLIT_SALT};
use crate::shard::scatter::{gather, order_hash, Scatter};
use crate::shard::{ClosedShard, Origin, OutputDir, Plan, ShardOptions, ShardWriter, SourceRows};
use crate::tfrecord::deflate::DeflatePool;
use crate::tfrecord::mapped::KeptMap;
use crate::tfrecord::Compression;

/// Where each record goes: its split (by the key's stable hash, or a seeded hash of its
/// position), and there either a shard writer or, with `--shuffle`, a bucket scatter.
/// Records arrive in input order, so each one's global index is its position here.
pub(crate) struct Router<'a> {
    seed: u64,
    /// Cumulative upper bounds of the split fractions.
    bounds: &'a [f64],
    sinks: Sinks<'a>,
    next_index: u64,
    scattered_bytes: u64,
    /// Where the next record comes from: its input, its index among the input's records
    /// (set by the source before each run of an input's records), and the run it
    /// continues.
    origin: Option<Origin>,
    /// With `--shuffle`, the inputs each split got records of: a shuffled shard may hold
    /// any of them.
    split_sources: Vec<Vec<SourceRows>>,
}

enum Sinks<'a> {
    Direct(&'a mut [ShardWriter]),
    Scatter(&'a mut [Scatter]),
}

/// The split of a row whose (key or position) hash is `h`: a uniform u in [0, 1) from
/// the hash's top 53 bits, against the cumulative fractions.
fn split_of(bounds: &[f64], h: u64) -> usize {
    let u = (h >> 11) as f64 / (1u64 << 53) as f64;
    bounds
        .iter()
        .position(|&b| u < b)
        .unwrap_or(bounds.len() - 1)
}

/// The seeded hash of a row's position, for splits without a key.
fn position_hash(index: u64, seed: u64) -> u64 {
    index_hash(index, seed, SPLIT_SALT)
}

impl<'a> Router<'a> {
    fn new(options: &ConvertOptions, bounds: &'a [f64], sinks: Sinks<'a>) -> Router<'a> {
        Router {
            seed: options.seed,
            bounds,
            sinks,
            next_index: 0,
            scattered_bytes: 0,
            origin: None,
            split_sources: vec![Vec::new(); bounds.len()],
        }
    }

    /// Numbers the records from `index` on: a worker's first record has the index it
    /// has in the whole run, so position-based splits assign it as one machine would.
    pub(crate) fn start_at(&mut self, index: u64) {
        self.next_index = index;
    }

    /// Notes the producer's restart point after the records routed so far (`--resume`),
    /// for the shards closed from now on. Only one output written directly takes it: a
    /// producer restarts only then.
    pub(crate) fn checkpoint(&mut self, checkpoint: impl FnOnce() -> serde_json::Value) {
        if let (Sinks::Direct(writers), 1) = (&mut self.sinks, self.bounds.len()) {
            writers[0].set_checkpoint(checkpoint());
        }
    }

    /// The next record is record `record` of input `input` (its index among the inputs
    /// the manifest lists); those after it follow it in the same input, until the next
    /// call. Each shard records the inputs it holds records of.
    pub(crate) fn origin(&mut self, input: u32, record: u64) {
        self.origin = Some(Origin::at(self.origin, input, record));
    }

    /// The inputs each split got records of (with `--shuffle`; empty otherwise).
    fn into_split_sources(self) -> Vec<Vec<SourceRows>> {
        self.split_sources
    }

    /// The split of the next record (by `key`, else by its position) and its index;
    /// tells its writer, or the split's account with a shuffle, where it came from.
    fn route(&mut self, key: Option<u64>) -> (usize, u64) {
        let index = self.next_index;
        self.next_index += 1;
        let split = if self.bounds.len() == 1 {
            0
        } else {
            split_of(
                self.bounds,
                key.unwrap_or_else(|| position_hash(index, self.seed)),
            )
        };
        if let Some(origin) = self.origin.as_mut() {
            match &mut self.sinks {
                Sinks::Direct(writers) => {
                    writers[split].origin_in_run(*origin);
                    origin.next += 1;
                }
                Sinks::Scatter(_) => origin.note(&mut self.split_sources[split], 1),
            }
        }
        (split, index)
    }

    /// Routes one framed record.
    pub(crate) fn put(&mut self, framed: &[u8], key: Option<u64>) -> Result<()> {
        let (split, index) = self.route(key);
        match &mut self.sinks {
            Sinks::Direct(writers) => writers[split].write(framed),
            Sinks::Scatter(scatters) => {
                self.scattered_bytes += framed.len() as u64;
                scatters[split].put(order_hash(index, self.seed), framed)
            }
        }
    }

    /// Routes the framed record at `range` of a mapped input file: a shuffle keeps only
    /// its location until it gathers it.
    pub(crate) fn put_mapped(
        &mut self,
        map: &Arc<KeptMap>,
        range: Range<usize>,
        key: Option<u64>,
    ) -> Result<()> {
        let (split, index) = self.route(key);
        match &mut self.sinks {
            Sinks::Direct(writers) => writers[split].write(&map.bytes()[range]),
            Sinks::Scatter(scatters) => {
                self.scattered_bytes += range.len() as u64;
                scatters[split].put_mapped(order_hash(index, self.seed), map, range)
            }
        }
    }

    /// Routes a batch of records.
    pub(crate) fn put_batch(&mut self, batch: &EncodedBatch) -> Result<()> {
        if let (Sinks::Direct(writers), 1) = (&mut self.sinks, self.bounds.len()) {
            let count = batch.sizes.len() as u64;
            self.next_index += count;
            if let Some(origin) = self.origin.as_mut() {
                writers[0].origin_in_run(*origin);
                origin.next += count;
            }
            return writers[0].write_batch(&batch.data, &batch.sizes);
        }
        let mut offset = 0usize;
        for (i, &size) in batch.sizes.iter().enumerate() {
            let end = offset + size as usize;
            self.put(&batch.data[offset..end], batch.keys.get(i).copied())?;
            offset = end;
        }
        Ok(())
    }

    /// Bytes written so far (to shards, or to bucket files).
    pub(crate) fn bytes_written(&self) -> u64 {
        match &self.sinks {
            Sinks::Direct(writers) => writers.iter().map(ShardWriter::bytes_written).sum(),
            Sinks::Scatter(_) => self.scattered_bytes,
        }
    }
}

/// Removes the shuffle's bucket folder when the run ends, however it ends.
struct ScratchDir(PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `produce` (which feeds every record to the router, in input order) and returns
/// each output's closed shards. Without `--shuffle` the records go straight to the shard
/// writers. With it, they are scattered into bucket files once, then gathered per split
/// in hash order. Either way [`write_shards`] applies `--min-shards`. `expected_records`
/// is what `produce` will give in all, when the source knows.
pub(crate) fn write_outputs<T>(
    options: &ConvertOptions,
    outs: &[OutputDir],
    estimated_bytes: u64,
    expected_records: Option<u64>,
    mut produce: impl FnMut(&mut Router) -> Result<T>,
) -> Result<(Vec<Vec<ClosedShard>>, T)> {
    let mut bounds = Vec::new();
    let mut total = 0.0;
    for (_, fraction) in options.splits.iter().flatten() {
        total += fraction;
        bounds.push(total);
    }
    if bounds.is_empty() {
        bounds.push(1.0);
    }
    let Some(shuffle) = &options.shuffle else {
        return write_shards(options, outs, expected_records, |writers| {
            produce(&mut Router::new(options, &bounds, Sinks::Direct(writers)))
        });
    };
    // Under --tmp-dir, a locked scratch folder (a killed run's is removed by the next).
    let scratch = match &shuffle.tmp_dir {
        Some(dir) => Some(crate::scratch::Scratch::create(
            dir,
            "tfshard-shuffle",
            &crate::store::attempt_id(),
        )?),
        None => None,
    };
    let root = match &scratch {
        Some(s) => s.path().to_owned(),
        None => outs[0].tmp_dir().join("shuffle"),
    };
    let _guard = ScratchDir(root.clone());
    // The splits' scatters share the budget.
    let memory = shuffle.memory_bytes / outs.len() as u64;
    let mut scatters: Vec<Scatter> = (0..outs.len())
        .map(|s| {
            Scatter::new(
                &root.join(s.to_string()),
                memory,
                estimated_bytes / outs.len() as u64,
            )
        })
        .collect();
    let mut router = Router::new(options, &bounds, Sinks::Scatter(&mut scatters));
    let result = produce(&mut router)?;
    let split_sources = router.into_split_sources();
    let scattered = scatters
        .into_iter()
        .map(Scatter::finish)
        .collect::<Result<Vec<_>>>()?;
    crate::failpoint::hit("shuffle:scattered")?;
    let (mut shards, ()) = write_shards(options, outs, expected_records, |writers| {
        for (writer, scattered) in writers.iter_mut().zip(&scattered) {
            gather(scattered, writer)?;
            options.cancel.check()?;
        }
        Ok(())
    })?;
    // Shuffled, a shard's records come from anywhere in its split: each lists every
    // input of its split (a change to any of them retires the split's shards).
    for (split, sources) in shards.iter_mut().zip(split_sources) {
        for shard in split.iter_mut().filter(|s| s.records > 0) {
            shard.sources = sources.clone();
        }
    }
    Ok((shards, result))
}

fn shard_options(
    options: &ConvertOptions,
    out: &OutputDir,
    plan: Plan,
    deflate: &Option<Arc<DeflatePool>>,
    expected_records: Option<u64>,
) -> ShardOptions {
    ShardOptions {
        deflate: deflate.clone(),
        tmp_dir: out.tmp_dir().to_path_buf(),
        compression: options.compression,
        target_bytes: options.target_bytes,
        max_records: options.max_records,
        index: options.index,
        plan,
        // A --min-shards run may write an output twice; only the last pass is final, so
        // none is told (a store uploads its shards at the commit; nothing is journaled).
        events: match options.min_shards {
            None => out.shard_hook().cloned(),
            Some(_) => None,
        },
        expected_records,
        stats: options.stats.then_some(options.encode.record_type),
    }
}

/// Runs `pass` over one shard writer per output, with the fill rule. When `--min-shards
/// N` wants more shards than that made for an output, runs it again with those outputs
/// cut into N shards evenly by bytes (only outputs smaller than N × the target get
/// there, so the second pass is cheap); the others fill as before, to the same bytes.
fn write_shards<T>(
    options: &ConvertOptions,
    outs: &[OutputDir],
    expected_records: Option<u64>,
    mut pass: impl FnMut(&mut [ShardWriter]) -> Result<T>,
) -> Result<(Vec<Vec<ClosedShard>>, T)> {
    // Known per output only when there is one (a split's share is known at the end).
    let expected_records = expected_records.filter(|_| outs.len() == 1);
    // Every output's writer shares the deflate threads (one thread compresses inline).
    let deflate = match options.compression {
        Compression::Gzip | Compression::Zlib if options.threads > 1 => {
            Some(DeflatePool::new(options.threads)?)
        }
        _ => None,
    };
    let writers = |plans: &[Plan]| -> Vec<ShardWriter> {
        outs.iter()
            .zip(plans)
            .map(|(out, &plan)| {
                let shard_options = shard_options(options, out, plan, &deflate, expected_records);
                match (plan, out.resume_state()) {
                    (Plan::Fill, Some((_, finished))) => ShardWriter::resuming(
                        shard_options,
                        finished.to_vec(),
                        out.skipped_by_producer(),
                    ),
                    _ => ShardWriter::new(shard_options),
                }
            })
            .collect()
    };
    let finish = |writers: Vec<ShardWriter>| -> Result<(Vec<u64>, Vec<Vec<ClosedShard>>)> {
        let totals = writers.iter().map(ShardWriter::total_framed).collect();
        let shards = writers
            .into_iter()
            .map(ShardWriter::finish)
            .collect::<Result<_>>()?;
        Ok((totals, shards))
    };
    let mut fill = writers(&vec![Plan::Fill; outs.len()]);
    let mut result = pass(&mut fill)?;
    let (totals, mut shards) = finish(fill)?;
    let Some(n) = options.min_shards else {
        return Ok((shards, result));
    };
    if shards.iter().all(|s| s.len() as u64 >= n) {
        return Ok((shards, result));
    }
    let plans: Vec<Plan> = shards
        .iter()
        .zip(&totals)
        .map(|(s, &total_framed)| {
            if (s.len() as u64) < n {
                Plan::Even {
                    shards: n,
                    total_framed,
                }
            } else {
                Plan::Fill
            }
        })
        .collect();
    for shard in shards.iter().flatten() {
        let _ = std::fs::remove_file(&shard.path);
    }
    let mut even = writers(&plans);
    result = pass(&mut even)?;
    shards = finish(even)?.1;
    Ok((shards, result))
}
