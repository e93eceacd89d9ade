//! The reader pipeline: shards → columnar batches, in the shape `tf.data` users know.
//!
//! ```text
//! files ─ interleave ─ shuffle ─ batch ─┬─ parse ─┐
//!   (one producer thread: header walk,  ├─ parse ─┼─ prefetch (bounded by credits,
//!    length CRC; it parses too when     └─ parse ─┘   reordered when deterministic)
//!    it has no credit)                                ─ consumer (parses when it
//!                                                       would wait)
//! ```
//!
//! Uncompressed shards are memory-mapped: the producer walks the headers (the kernel
//! reads ahead in large sequential blocks), and a record is a range of the map until a
//! parse worker reads it; compressed shards (or any, with [`PipelineBuilder::with_mmap`]
//! off) are read in large blocks and each record copied into a pooled buffer. Records are
//! shuffled and batched as these references, then each batch is parsed (and its data
//! CRCs checked) by one of `parallelism` workers straight into columns: the batches are
//! the same as parse → shuffle → batch would give, with the per-record work done once,
//! in bulk, in parallel. (Measured on 2 cores: TensorFlow's per-record pipeline on small
//! records is bound by per-element overhead; parsing batches is what helps.) Long bytes values
//! (images) are not copied at all: the column points at them ([`BytesValues`]).
//!
//! Memory is bounded by the buffers: the shuffle buffer, two raw batches per worker and
//! the prefetch queue, in references (or pooled copies); no file is read whole. Mapped
//! pages belong to the page cache and count in RSS while mapped, not in the process's
//! anonymous memory (`bench` reports both). [`PipelineBuilder::sequential`] is the
//! baseline: one file after another, parse on the consumer's thread, no prefetch, the
//! same shuffle and batch.
//!
//! ```no_run
//! use tfshard::pipeline::Pipeline;
//! let pipeline = Pipeline::builder(vec!["out/".into()])
//!     .with_batch(64, false)
//!     .with_shuffle(10_000, 42)
//!     .with_epochs(2)
//!     .build()?;
//! for batch in pipeline {
//!     let batch = batch?;
//!     let labels = batch.column("y");
//!     # let _ = labels;
//! }
//! # Ok::<(), tfshard::Error>(())
//! ```

pub mod access;
pub mod ahead;
pub(crate) mod batch;
pub(crate) mod cache;
pub(crate) mod chunk;
pub(crate) mod interleave;
pub(crate) mod memory;
pub mod order;
pub(crate) mod parse;
pub mod permute;
pub(crate) mod prefetch;
pub mod schedule;
pub(crate) mod shuffle;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{unbounded, Receiver, Sender};

use crate::dataset::Dataset;
use crate::error::{Error, ErrorKind, Result};
use crate::example::FeatureSpec;
use crate::store::IoOptions;
use crate::tfrecord::Compression;

pub use crate::example::bytes::BytesValues;
pub use crate::example::columnar::{Batch, Column, Values};
pub use cache::{CacheMode, CacheReport};

use batch::{Payload, RawBatch, RawRecord};
use cache::{Cache, CachedEpoch, CachedRows, Chunk, SourceFile};
use interleave::{Interleave, Opening};
use memory::{Held, Pool};
use parse::Parser;
use prefetch::Prefetch;
use shuffle::{Rng, ShuffleBuffer};

/// Default records per batch (the `bench` default, as in most tutorials).
pub const DEFAULT_BATCH_SIZE: usize = 64;
/// Default shuffle buffer, in records (the tutorials' `shuffle(10000)`).
pub const DEFAULT_SHUFFLE_BUFFER: usize = 10_000;
/// Most files read at once by default (`interleave(cycle_length=8)` in the tutorials).
const MAX_AUTO_CYCLE: usize = 8;
/// The automatic prefetch depth grows to at most this many batches per worker.
const MAX_AUTO_PREFETCH_PER_WORKER: usize = 8;

/// Resolved settings of a pipeline (set through [`PipelineBuilder`]'s setters).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PipelineOptions {
    /// Paths as given: shards, folders, manifests.
    pub paths: Vec<PathBuf>,
    /// `None`: by extension, else content.
    pub compression: Option<Compression>,
    /// Map uncompressed files instead of reading them (no copy before parsing; the
    /// files must not be truncated while read, see `tfrecord::mapped`).
    pub mmap: bool,
    /// The feature spec; `None`: the manifest's, else inferred from the records.
    pub spec: Option<Vec<FeatureSpec>>,
    /// Passes over the data.
    pub epochs: u64,
    /// Shuffle the file order each epoch (seeded by `seed` and the epoch).
    pub shuffle_files: bool,
    /// Seed of every random choice.
    pub seed: u64,
    /// Files read at once; `None`: automatic.
    pub cycle_length: Option<usize>,
    /// Records taken from a file before moving to the next.
    pub block_length: usize,
    /// Parse workers; `None`: automatic.
    pub parallelism: Option<usize>,
    /// Keep the order (same seed → same batches) or hand out batches as ready.
    pub deterministic: bool,
    /// Shuffle buffer in records (0 or 1: no shuffle).
    pub shuffle_buffer: usize,
    /// Records per batch.
    pub batch_size: usize,
    /// Drop each epoch's last short batch.
    pub drop_remainder: bool,
    /// Parsed batches queued for the consumer; `None`: automatic.
    pub prefetch: Option<usize>,
    /// All worker threads together.
    pub threads: usize,
    /// The sequential baseline (see the module docs).
    pub sequential: bool,
    /// Cache what the first epoch parsed, in memory or in a file ([`CacheMode`]).
    pub cache: Option<CacheMode>,
    /// Store settings of the reads of URLs (`--io-concurrency`, `--io-timeout`).
    pub io: IoOptions,
    /// Read only these records of the files in order ([`PipelineBuilder::with_record_range`]).
    pub records: Option<RecordRange>,
    /// Batches of the first epoch left out, unparsed ([`PipelineBuilder::with_skip_batches`]).
    pub skip_batches: u64,
    /// A complete cache of an earlier pipeline over the same records, used as it is.
    pub shared_cache: Option<SharedCache>,
}

/// A range `[start, end)` of the records of the files read in order, the files holding
/// `counts` records each (from their manifest): one rank's or one data-loader worker's
/// share of an epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRange {
    /// Records in each file, in file order.
    pub counts: Vec<u64>,
    /// The first record read (over all files, in order).
    pub start: u64,
    /// One past the last record read.
    pub end: u64,
}

impl RecordRange {
    /// Each file's `(records to skip, records to read)`.
    fn limits(&self) -> Vec<(u64, u64)> {
        let mut first = 0u64;
        self.counts
            .iter()
            .map(|&n| {
                let (lo, hi) = (
                    self.start.clamp(first, first + n),
                    self.end.clamp(first, first + n),
                );
                first += n;
                (lo - (first - n), hi - lo)
            })
            .collect()
    }
}

/// A complete cache ([`Pipeline::shared_cache`]) that a later pipeline over the same
/// records and spec reads instead of the shards (the Python module's epochs, each a
/// pipeline of its own).
#[derive(Clone)]
pub struct SharedCache(Arc<Cache>);

impl std::fmt::Debug for SharedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SharedCache").finish_non_exhaustive()
    }
}

impl PipelineOptions {
    /// Checks the rules that do not depend on the data: counts are at least 1, the
    /// parse workers fit the threads.
    pub(crate) fn validate(&self) -> Result<()> {
        let invalid =
            |option, reason: String| Err(crate::error::Error::invalid_option(option, reason));
        if self.batch_size == 0 {
            return invalid("batch-size", "must be at least 1".into());
        }
        if self.threads == 0 {
            return invalid("threads", "must be at least 1".into());
        }
        for (option, value) in [
            ("cycle-length", self.cycle_length),
            ("parallelism", self.parallelism),
            ("prefetch", self.prefetch),
        ] {
            if value == Some(0) {
                return invalid(option, "must be at least 1".into());
            }
        }
        if let Some(r) = &self.records {
            let total: u64 = r.counts.iter().sum();
            if r.start > r.end || r.end > total {
                return invalid(
                    "records",
                    format!(
                        "[{}, {}) is not a range of the {total} records",
                        r.start, r.end
                    ),
                );
            }
        }
        if let Some(p) = self.parallelism.filter(|&p| p > self.threads) {
            return invalid(
                "parallelism",
                format!("{p} exceeds the {} threads", self.threads),
            );
        }
        Ok(())
    }
}

/// Builds a [`Pipeline`].
#[derive(Debug, Clone)]
pub struct PipelineBuilder {
    options: PipelineOptions,
}

impl PipelineBuilder {
    /// Every record of every epoch, deterministic, no shuffle, batches of 64.
    pub(crate) fn new(paths: Vec<PathBuf>) -> PipelineBuilder {
        PipelineBuilder {
            options: PipelineOptions {
                paths,
                compression: None,
                mmap: true,
                spec: None,
                epochs: 1,
                shuffle_files: false,
                seed: 0,
                cycle_length: None,
                block_length: 1,
                parallelism: None,
                deterministic: true,
                shuffle_buffer: 0,
                batch_size: DEFAULT_BATCH_SIZE,
                drop_remainder: false,
                prefetch: None,
                threads: std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1),
                sequential: false,
                cache: None,
                io: IoOptions::default(),
                records: None,
                skip_batches: 0,
                shared_cache: None,
            },
        }
    }

    /// Reads only records `[start, end)` of the files in order, the files holding
    /// `counts` records each (their manifest's counts). With the file shuffle, the
    /// files' parts are shuffled; with a cache file, the range is part of what the file
    /// must hold.
    pub fn with_record_range(mut self, counts: Vec<u64>, start: u64, end: u64) -> Self {
        self.options.records = Some(RecordRange { counts, start, end });
        self
    }

    /// Leaves out the first `batches` batches, read and shuffled as always (so the rest
    /// are the same batches) but not parsed: resuming an epoch where it stopped. A cache
    /// not yet complete is not used then (the epoch would not fill all of it).
    pub fn with_skip_batches(mut self, batches: u64) -> Self {
        self.options.skip_batches = batches;
        self
    }

    /// Reads the records from a complete cache an earlier pipeline over the same records
    /// and spec filled ([`Pipeline::shared_cache`]).
    pub fn with_shared_cache(mut self, cache: SharedCache) -> Self {
        self.options.shared_cache = Some(cache);
        self
    }

    /// Store settings of the reads of URLs (default [`IoOptions`]'s).
    pub fn with_io(mut self, io: IoOptions) -> Self {
        self.options.io = io;
        self
    }

    /// Sets the whole option set.
    pub(crate) fn with_options(mut self, options: PipelineOptions) -> Self {
        self.options = options;
        self
    }

    /// The options so far.
    pub fn options(&self) -> &PipelineOptions {
        &self.options
    }

    /// Uses this feature spec instead of the manifest's or an inferred one.
    pub fn with_spec(mut self, spec: Vec<FeatureSpec>) -> Self {
        self.options.spec = Some(spec);
        self
    }

    /// The compression of the shards (default: auto).
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.options.compression = Some(compression);
        self
    }

    /// Maps uncompressed files (the default) or reads them into buffers.
    pub fn with_mmap(mut self, mmap: bool) -> Self {
        self.options.mmap = mmap;
        self
    }

    /// Passes over the data (`repeat`).
    pub fn with_epochs(mut self, epochs: u64) -> Self {
        self.options.epochs = epochs;
        self
    }

    /// Shuffles the file order every epoch.
    pub fn with_shuffled_files(mut self, shuffle: bool) -> Self {
        self.options.shuffle_files = shuffle;
        self
    }

    /// `interleave(cycle_length, block_length)`.
    pub fn with_interleave(mut self, cycle_length: usize, block_length: usize) -> Self {
        self.options.cycle_length = Some(cycle_length.max(1));
        self.options.block_length = block_length.max(1);
        self
    }

    /// Parse workers.
    pub fn with_parallelism(mut self, workers: usize) -> Self {
        self.options.parallelism = Some(workers.max(1));
        self
    }

    /// Keep the order, or relax it for throughput.
    pub fn with_deterministic(mut self, deterministic: bool) -> Self {
        self.options.deterministic = deterministic;
        self
    }

    /// `shuffle(buffer_size, seed)`.
    pub fn with_shuffle(mut self, buffer_size: usize, seed: u64) -> Self {
        self.options.shuffle_buffer = buffer_size;
        self.options.seed = seed;
        self
    }

    /// `batch(batch_size, drop_remainder)`.
    pub fn with_batch(mut self, batch_size: usize, drop_remainder: bool) -> Self {
        self.options.batch_size = batch_size.max(1);
        self.options.drop_remainder = drop_remainder;
        self
    }

    /// `prefetch(n)` batches.
    pub fn with_prefetch(mut self, batches: usize) -> Self {
        self.options.prefetch = Some(batches.max(1));
        self
    }

    /// Bounds every worker thread.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.options.threads = threads.max(1);
        self
    }

    /// Caches what the first epoch parsed (`ds.map(parse).cache()`): later epochs, and
    /// with a file later runs, skip reading and parsing (see the `cache` module).
    pub fn with_cache(mut self, cache: CacheMode) -> Self {
        self.options.cache = Some(cache);
        self
    }

    /// The sequential baseline.
    pub fn sequential(mut self) -> Self {
        self.options.sequential = true;
        self
    }

    /// Finds the files and the spec, and starts the workers.
    ///
    /// # Errors
    ///
    /// A path that does not exist, a manifest that cannot be read, no shard at all,
    /// options out of range, or (when the spec is inferred) a corrupt shard.
    pub fn build(self) -> Result<Pipeline> {
        let o = self.options;
        o.validate()?;
        let dataset = Dataset::discover(&o.paths, o.io)?;
        let record_type = dataset.record_type();
        if record_type == crate::example::RecordType::Bytes && o.spec.is_none() {
            return Err(Error::invalid_option(
                "paths",
                "the manifest says the records are opaque payloads (record_type bytes): they \
                 have no features to parse",
            ));
        }
        let spec = match o.spec.clone() {
            Some(spec) => spec,
            None => crate::records::feature_spec(&dataset, o.compression, record_type)?,
        };
        let parser = Parser::new(&spec)?;
        let files = dataset.shards.clone();
        for f in &files {
            crate::store::paths::len(f, o.io)?;
        }
        if let Some(r) = &o.records {
            if r.counts.len() != files.len() {
                return Err(Error::invalid_option(
                    "records",
                    format!("{} record counts for {} files", r.counts.len(), files.len()),
                ));
            }
        }
        let range = o.records.as_ref().map(|r| [r.start, r.end]);
        let cache = match (&o.shared_cache, &o.cache) {
            (Some(shared), _) if shared.0.is_ready() => Some(shared.0.clone()),
            (_, Some(mode)) => Some(Arc::new(Cache::open(
                mode,
                &spec,
                record_type,
                &cache_sources(&dataset)?,
                range,
            )?)),
            _ => None,
        };
        // A resumed epoch does not see every record: it cannot fill a cache.
        let cache = cache.filter(|c| o.skip_batches == 0 || c.is_ready());
        let tuned = autotune(&o, files.len());
        let held = Arc::new(Held::default());
        let producer = Producer::new(
            &o,
            files.clone(),
            tuned.cycle_length,
            held.clone(),
            cache.clone(),
        );
        let inner = if o.sequential {
            Inner::Inline {
                producer: Box::new(producer),
                parser,
                held: held.clone(),
            }
        } else {
            start_threads(
                producer,
                parser,
                &tuned,
                o.deterministic,
                files.clone(),
                held.clone(),
            )?
        };
        Ok(Pipeline {
            inner,
            cache,
            spec,
            files,
            tuned,
            shuffle_buffer: o.shuffle_buffer,
            batch_size: o.batch_size.max(1),
            held,
        })
    }
}

/// The automatic settings (`AUTOTUNE`), from the cores, the files and, for the prefetch
/// depth, the observed rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tuned {
    /// Files read at once.
    pub cycle_length: usize,
    /// Worker threads: the producer's (which also parses) and parse workers.
    pub parallelism: usize,
    /// Batches in flight (being parsed or queued for the consumer): the prefetch depth.
    /// Automatic, it starts at two per worker and doubles whenever the consumer finds
    /// nothing ready, up to `max_prefetch`.
    pub prefetch: usize,
    /// The most `prefetch` may grow to (equal to it when set by hand).
    pub max_prefetch: usize,
}

/// One thread produces (and parses when it has no credit); the others parse. The
/// consumer's own thread parses too whenever it would wait, so it counts as one of the
/// `threads`: by default there are `threads - 1` worker threads (at least one), and the
/// pipeline never keeps more threads busy than `threads`. (Measured on 2 cores: one
/// worker plus the helping consumer beats two workers plus the consumer, which
/// oversubscribe the cores.) Two batches per worker keep every worker busy while the
/// consumer takes one; the depth then follows the consumer (see [`Tuned`]).
fn autotune(o: &PipelineOptions, files: usize) -> Tuned {
    if o.sequential {
        return Tuned {
            cycle_length: 1,
            parallelism: 0,
            prefetch: 0,
            max_prefetch: 0,
        };
    }
    let parallelism = o
        .parallelism
        .unwrap_or(o.threads.saturating_sub(1))
        .clamp(1, o.threads.max(1));
    let (prefetch, max_prefetch) = match o.prefetch {
        Some(p) => (p.max(1), p.max(1)),
        None => (2 * parallelism, MAX_AUTO_PREFETCH_PER_WORKER * parallelism),
    };
    Tuned {
        cycle_length: o
            .cycle_length
            .unwrap_or_else(|| files.clamp(1, MAX_AUTO_CYCLE)),
        parallelism,
        prefetch,
        max_prefetch,
    }
}

/// The shards a cache is filled from, as its header names them: the canonical path,
/// the size, and the manifest's CRC32C (else the modification time).
fn cache_sources(dataset: &Dataset) -> Result<Vec<SourceFile>> {
    let listed = dataset.listed();
    dataset
        .shards
        .iter()
        .map(|shard| {
            let blob = crate::store::Blob::head(shard, dataset.io)?;
            let crc32c = listed.get(shard).map(|s| s.crc32c.clone());
            // Without a listed CRC32C, the time it was written, where the storage says.
            let modified_ns = blob
                .object()
                .modified
                .filter(|_| crc32c.is_none())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_nanos());
            let file = blob.storage().canonical(blob.path());
            Ok(SourceFile {
                file: file.display().to_string(),
                bytes: blob.size(),
                crc32c,
                modified_ns,
            })
        })
        .collect()
}

/// Interleave → shuffle → batch, on one thread (or the consumer's, sequentially).
struct Producer {
    files: Vec<PathBuf>,
    compression: Option<Compression>,
    mmap: bool,
    io: IoOptions,
    epochs: u64,
    epoch: u64,
    shuffle_files: bool,
    seed: u64,
    cycle_length: usize,
    block_length: usize,
    interleave: Option<Interleave>,
    shuffle: ShuffleBuffer<RawRecord>,
    batch_size: usize,
    drop_remainder: bool,
    seq: u64,
    draining: bool,
    pool: Pool,
    held: Arc<Held>,
    /// Bytes of the shuffle buffers' slots last counted in `held`.
    shuffle_slot_bytes: usize,
    /// The cache, if any, and whether the first epoch fills it.
    cache: Option<Arc<Cache>>,
    filling: bool,
    /// A cached epoch under way.
    cached: Option<CachedEpoch>,
    /// The shuffle buffer of cached epochs: (chunk, row) pairs.
    row_shuffle: ShuffleBuffer<(u32, u32)>,
    /// Each file's (records skipped, records read), when reading a range.
    limits: Option<Vec<(u64, u64)>>,
    /// Batches still to leave out.
    skip_batches: u64,
}

/// Record buffers the pool keeps for reuse: enough for the shuffle buffer and a few
/// batches, so a steady stream of copied records allocates nothing.
fn pool_room(shuffle_buffer: usize, batch_size: usize) -> usize {
    shuffle_buffer + 4 * batch_size
}

impl Producer {
    fn new(
        o: &PipelineOptions,
        files: Vec<PathBuf>,
        cycle_length: usize,
        held: Arc<Held>,
        cache: Option<Arc<Cache>>,
    ) -> Producer {
        Producer {
            filling: cache.as_ref().is_some_and(|c| !c.is_ready()),
            cache,
            cached: None,
            row_shuffle: ShuffleBuffer::new(o.shuffle_buffer, o.seed),

            files,
            compression: o.compression,
            mmap: o.mmap,
            io: o.io,
            epochs: o.epochs,
            epoch: 0,
            shuffle_files: o.shuffle_files,
            seed: o.seed,
            cycle_length,
            block_length: o.block_length,
            interleave: None,
            shuffle: ShuffleBuffer::new(o.shuffle_buffer, o.seed),
            batch_size: o.batch_size.max(1),
            drop_remainder: o.drop_remainder,
            seq: 0,
            draining: false,
            pool: Pool::new(pool_room(o.shuffle_buffer, o.batch_size.max(1))),
            held,
            shuffle_slot_bytes: 0,
            limits: o.records.as_ref().map(RecordRange::limits),
            skip_batches: o.skip_batches,
        }
    }

    fn start_epoch(&mut self) {
        let mut order: Vec<usize> = (0..self.files.len())
            .filter(|&i| self.limits.as_ref().is_none_or(|l| l[i].1 > 0))
            .collect();
        if self.shuffle_files {
            Rng::for_epoch(self.seed, self.epoch).shuffle(&mut order);
        }
        self.interleave = Some(Interleave::new(
            self.files.clone(),
            order,
            Opening {
                compression: self.compression,
                mmap: self.mmap,
                io: self.io,
            },
            self.cycle_length,
            self.block_length,
            self.held.clone(),
            self.limits.clone(),
        ));
        self.draining = false;
    }

    /// Takes back the payloads a parse worker is done with: buffers into the pool (no
    /// larger than what can be in flight), map references dropped.
    fn recycle(&mut self, spare: &mut Vec<Payload>) {
        for payload in spare.drain(..) {
            if let Payload::Owned(buffer) = payload {
                self.pool.put_back(buffer, &self.held);
            }
        }
    }

    /// Counts the shuffle buffers' slots again (they grow, rarely, as they fill).
    fn count_shuffle_slots(&mut self) {
        let now = self.shuffle.slot_bytes() + self.row_shuffle.slot_bytes();
        self.held.resize(self.shuffle_slot_bytes, now);
        self.shuffle_slot_bytes = now;
    }

    /// Whether this epoch's records come from the cache.
    fn epoch_from_cache(&self) -> bool {
        self.cache.is_some() && (!self.filling || self.epoch >= 1)
    }

    /// Whether the next epoch is to come from the cache, which the first epoch's last
    /// batches (being parsed) have not completed yet.
    fn waits_for_cache(&self) -> bool {
        self.interleave.is_none()
            && self.cached.is_none()
            && self.epoch < self.epochs
            && self.epoch_from_cache()
            && self.cache.as_ref().is_some_and(|c| !c.is_ready())
    }

    /// The next raw batch, or `None` after the last epoch.
    fn next_batch(&mut self) -> Result<Next> {
        loop {
            if self.interleave.is_none() && self.cached.is_none() {
                if self.epoch >= self.epochs {
                    return Ok(Next::End);
                }
                if self.waits_for_cache() {
                    return Ok(Next::WaitForCache);
                }
                if self.epoch_from_cache() {
                    let cache = self.cache.as_ref().expect("checked by epoch_from_cache");
                    self.cached = Some(CachedEpoch::new(cache.chunks()?));
                    self.draining = false;
                } else {
                    self.start_epoch();
                }
            }
            let next = if self.cached.is_some() {
                self.next_cached_batch()?
            } else {
                self.next_read_batch()?
            };
            if let Some(raw) = next {
                self.count_shuffle_slots();
                self.held.add(raw.slot_bytes());
                return Ok(Next::Batch(raw));
            }
        }
    }

    /// The next batch of records read from the shards; `None` when the epoch ended with
    /// nothing more to deliver.
    fn next_read_batch(&mut self) -> Result<Option<RawBatch>> {
        let mut records = Vec::with_capacity(self.batch_size);
        while records.len() < self.batch_size {
            if !self.draining {
                let interleave = self.interleave.as_mut().expect("started");
                if let Some(record) = interleave.next(&mut self.pool)? {
                    records.extend(self.shuffle.push(record));
                    continue;
                }
                self.draining = true;
            }
            match self.shuffle.pop() {
                Some(r) => records.push(r),
                None => break,
            }
        }
        let maps = self
            .interleave
            .as_mut()
            .expect("started")
            .batch_maps(&mut records);
        let epoch = self.epoch;
        let fill = self.filling && epoch == 0;
        let mut cache_only = false;
        if records.len() < self.batch_size {
            // The epoch is over. A filling epoch caches its last short batch even when
            // it is dropped, so that later epochs have every record.
            self.interleave = None;
            self.epoch += 1;
            if fill {
                let batches = self.seq + u64::from(!records.is_empty());
                self.cache.as_ref().expect("filling").expect(batches)?;
            }
            if records.is_empty() || (self.drop_remainder && !fill) {
                for buffer in records.into_iter().filter_map(RawRecord::into_buffer) {
                    self.pool.put_back(buffer, &self.held);
                }
                return Ok(None);
            }
            cache_only = self.drop_remainder;
        }
        if self.skip_batches > 0 && !cache_only {
            self.skip_batches -= 1;
            for buffer in records.into_iter().filter_map(RawRecord::into_buffer) {
                self.pool.put_back(buffer, &self.held);
            }
            return Ok(None);
        }
        let seq = self.seq;
        self.seq += 1;
        Ok(Some(RawBatch {
            seq,
            epoch,
            records,
            maps,
            fill,
            cache_only,
            cached: None,
        }))
    }

    /// The next batch of cached rows; `None` when the epoch ended with nothing more to
    /// deliver.
    fn next_cached_batch(&mut self) -> Result<Option<RawBatch>> {
        let cached = self.cached.as_mut().expect("a cached epoch");
        let mut rows = CachedRows {
            chunks: Vec::new(),
            rows: Vec::with_capacity(self.batch_size),
        };
        cached.start_batch();
        while rows.rows.len() < self.batch_size {
            if !self.draining {
                if let Some(row) = cached.next_row()? {
                    if let Some(out) = self.row_shuffle.push(row) {
                        cached.take(out, &mut rows);
                    }
                    continue;
                }
                self.draining = true;
            }
            match self.row_shuffle.pop() {
                Some(row) => cached.take(row, &mut rows),
                None => break,
            }
        }
        let epoch = self.epoch;
        if rows.rows.len() < self.batch_size {
            self.cached = None;
            self.epoch += 1;
            if rows.rows.is_empty() || self.drop_remainder {
                return Ok(None);
            }
        }
        if self.skip_batches > 0 {
            self.skip_batches -= 1;
            return Ok(None);
        }
        let seq = self.seq;
        self.seq += 1;
        Ok(Some(RawBatch {
            seq,
            epoch,
            records: Vec::new(),
            maps: Vec::new(),
            fill: false,
            cache_only: false,
            cached: Some(rows),
        }))
    }
}

/// What the producer has next.
enum Next {
    Batch(RawBatch),
    /// The next epoch comes from the cache, which the filling epoch's batches still
    /// being parsed have not completed.
    WaitForCache,
    /// Every epoch is done.
    End,
}

/// Parses a raw batch, or gathers a batch of cached rows; a batch of the filling epoch
/// goes into the cache too (a `cache_only` one, the dropped remainder, only there: the
/// consumer gets an empty batch, which it skips).
fn process(
    parser: &Parser,
    mut raw: RawBatch,
    files: &[PathBuf],
    cache: Option<&Cache>,
) -> (Result<Batch>, Vec<Payload>) {
    if let Some(rows) = raw.cached.take() {
        return (Ok(parser.gather(&rows, raw.epoch)), Vec::new());
    }
    let Some(cache) = cache.filter(|_| raw.fill) else {
        return parser.parse(raw, files);
    };
    let (seq, cache_only) = (raw.seq, raw.cache_only);
    let (parsed, spare) = parser.parse(raw, files);
    let parsed = parsed
        .and_then(|batch| {
            let parsed_bytes = batch.payload_bytes();
            cache.fill(seq, Chunk::from_batch(&batch), parsed_bytes)?;
            Ok(if cache_only {
                Batch {
                    epoch: batch.epoch,
                    rows: 0,
                    columns: Vec::new(),
                    record_bytes: 0,
                }
            } else {
                batch
            })
        })
        .inspect_err(|_| cache.abandon());
    (parsed, spare)
}

enum Inner {
    Threaded {
        prefetch: Option<Prefetch>,
        handles: Vec<JoinHandle<()>>,
        shared: Arc<Shared>,
        limit: Arc<AtomicUsize>,
    },
    Inline {
        producer: Box<Producer>,
        parser: Parser,
        held: Arc<Held>,
    },
}

/// What the threads share.
struct Shared {
    stop: AtomicBool,
}

/// A raw batch to parse (or the producer's error) and its place in the order.
type RawItem = (u64, Result<RawBatch>);

/// Parses raw batches; the payloads go back to the producer (to be reused, or dropped
/// on its thread).
#[derive(Clone)]
struct Parse {
    parser: Parser,
    cache: Option<Arc<Cache>>,
    files: Arc<Vec<PathBuf>>,
    spare: Sender<Vec<Payload>>,
    shared: Arc<Shared>,
    held: Arc<Held>,
}

impl Parse {
    /// Parses a raw batch; the parsed batch counts as held until the consumer takes it.
    fn run(&self, (seq, raw): RawItem) -> prefetch::Ready {
        let result = raw.and_then(|raw| {
            let slots = raw.slot_bytes();
            let (parsed, spare) = process(&self.parser, raw, &self.files, self.cache.as_deref());
            if let Ok(batch) = &parsed {
                let bytes = batch.held_bytes();
                self.held.add(bytes);
                self.held.note_batch(bytes);
            }
            self.held.sub(slots);
            if !spare.is_empty() {
                let _ = self.spare.send(spare);
            }
            parsed
        });
        if result.is_err() {
            self.shared.stop.store(true, Ordering::Relaxed);
        }
        (seq, result)
    }
}

/// The producer's thread: it alone walks the files and shuffles (so that state stays in
/// one core's cache), one raw batch per credit; when it has no credit it parses a raw
/// batch itself rather than wait.
fn produce(
    mut producer: Producer,
    credits: Receiver<()>,
    raw_tx: Sender<RawItem>,
    raw_rx: Receiver<RawItem>,
    spare: Receiver<Vec<Payload>>,
    parse: Parse,
    out: Sender<prefetch::Ready>,
) {
    let send_out = |item: prefetch::Ready| {
        let failed = item.1.is_err();
        out.send(item).is_ok() && !failed
    };
    // Credits received while waiting for the cache, not yet used.
    let mut banked = 0usize;
    loop {
        if parse.shared.stop.load(Ordering::Relaxed) {
            return;
        }
        while let Ok(mut payloads) = spare.try_recv() {
            producer.recycle(&mut payloads);
        }
        let have_credit = if banked > 0 {
            banked -= 1;
            true
        } else {
            match credits.try_recv() {
                Ok(()) => true,
                Err(_) => match raw_rx.try_recv() {
                    Ok(raw) => {
                        if !send_out(parse.run(raw)) {
                            return;
                        }
                        continue;
                    }
                    Err(_) => {
                        // Nothing to do but wait for a credit or a batch to parse: poll a
                        // short while first (a consumer that keeps up gives a credit back
                        // every few microseconds, sooner than a parked thread wakes), then
                        // park.
                        match poll(&credits, &raw_rx) {
                            Some(Polled::Credit) => true,
                            Some(Polled::Raw(raw)) => {
                                if !send_out(parse.run(raw)) {
                                    return;
                                }
                                continue;
                            }
                            None => crossbeam_channel::select! {
                                recv(credits) -> c => c.is_ok(),
                                recv(raw_rx) -> raw => {
                                    if let Ok(raw) = raw {
                                        if !send_out(parse.run(raw)) {
                                            return;
                                        }
                                    }
                                    continue;
                                }
                            },
                        }
                    }
                },
            }
        };
        if !have_credit || parse.shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let seq = producer.seq;
        match producer.next_batch() {
            Ok(Next::Batch(raw)) => {
                let _ = raw_tx.send((raw.seq, Ok(raw)));
            }
            Ok(Next::End) => break,
            Ok(Next::WaitForCache) => {
                // The cached epochs start once the filling epoch's last batches are
                // parsed (and in the cache): help parse them meanwhile.
                banked += 1;
                let sealed = producer.cache.as_ref().expect("waits").sealed().clone();
                crossbeam_channel::select! {
                    recv(raw_rx) -> raw => {
                        if let Ok(raw) = raw {
                            if !send_out(parse.run(raw)) {
                                return;
                            }
                        }
                    }
                    recv(sealed) -> _ => {}
                    recv(credits) -> c => {
                        if c.is_err() {
                            return;
                        }
                        banked += 1;
                    }
                }
                if producer.cache.as_ref().is_some_and(|c| c.is_abandoned()) {
                    // The filling failed; its error is on its way to the consumer.
                    return;
                }
            }
            Err(e) => {
                let _ = raw_tx.send((seq, Err(e)));
                break;
            }
        }
    }
    // Done producing: help parse what is left.
    drop(raw_tx);
    for raw in raw_rx.iter() {
        if !send_out(parse.run(raw)) {
            return;
        }
    }
}

/// What [`poll`] found.
enum Polled {
    Credit,
    Raw(RawItem),
}

/// How long the producer polls for a credit or a batch to parse before it parks.
const POLL_FOR: std::time::Duration = std::time::Duration::from_micros(50);

/// Polls both channels for up to [`POLL_FOR`]; `None`: nothing came.
fn poll(credits: &Receiver<()>, raw_rx: &Receiver<RawItem>) -> Option<Polled> {
    let start = std::time::Instant::now();
    loop {
        for _ in 0..32 {
            if credits.try_recv().is_ok() {
                return Some(Polled::Credit);
            }
            if let Ok(raw) = raw_rx.try_recv() {
                return Some(Polled::Raw(raw));
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= POLL_FOR {
            return None;
        }
    }
}

/// Starts `parallelism` threads: the producer's (see [`produce`]) and parse workers.
/// `threads` bounds them all. The consumer's thread, when it finds no batch ready,
/// parses a raw batch itself rather than sleep.
fn start_threads(
    producer: Producer,
    parser: Parser,
    tuned: &Tuned,
    deterministic: bool,
    files: Vec<PathBuf>,
    held: Arc<Held>,
) -> Result<Inner> {
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
    });
    let (out_tx, out_rx) = unbounded();
    let (credit_tx, credit_rx) = unbounded::<()>();
    let (raw_tx, raw_rx) = unbounded::<RawItem>();
    let (spare_tx, spare_rx) = unbounded();
    let parse = Parse {
        cache: producer.cache.clone(),
        parser,
        files: Arc::new(files),
        spare: spare_tx,
        shared: shared.clone(),
        held: held.clone(),
    };
    let helper = (raw_rx.clone(), parse.clone());
    let mut prefetch = Some(
        Prefetch::new(
            out_rx,
            credit_tx,
            deterministic,
            tuned.prefetch,
            tuned.max_prefetch,
            held,
        )
        .with_helper(Box::new(move || {
            let (raw_rx, parse) = &helper;
            raw_rx.try_recv().ok().map(|raw| parse.run(raw))
        })),
    );
    let mut handles = Vec::new();
    let mut start = |name: String, f: Box<dyn FnOnce() + Send>| match spawn(&name, f) {
        Ok(handle) => {
            handles.push(handle);
            Ok(())
        }
        Err(e) => Err(e),
    };
    let mut started = {
        let (out, raw_rx, parse) = (out_tx.clone(), raw_rx.clone(), parse.clone());
        start(
            "tfshard-worker0".into(),
            Box::new(move || produce(producer, credit_rx, raw_tx, raw_rx, spare_rx, parse, out)),
        )
    };
    for n in 1..tuned.parallelism {
        if started.is_err() {
            break;
        }
        let (out, raw_rx, parse) = (out_tx.clone(), raw_rx.clone(), parse.clone());
        started = start(
            format!("tfshard-worker{n}"),
            Box::new(move || {
                for raw in raw_rx.iter() {
                    let item = parse.run(raw);
                    let failed = item.1.is_err();
                    if out.send(item).is_err() || failed {
                        return;
                    }
                }
            }),
        );
    }
    if let Err(e) = started {
        // Out of threads: stop the ones started and say so.
        stop_workers(&shared, &mut prefetch, handles.len());
        for h in handles {
            let _ = h.join();
        }
        return Err(Error::from(e));
    }
    let limit = prefetch.as_ref().map(Prefetch::limit).unwrap_or_default();
    Ok(Inner::Threaded {
        limit,
        prefetch,
        handles,
        shared,
    })
}

/// Tells the workers to stop and closes the consumer end: a credit for every worker
/// wakes the idle ones, which see the stop and leave; busy ones fail to queue their
/// batch once the consumer end is gone.
fn stop_workers(shared: &Shared, prefetch: &mut Option<Prefetch>, workers: usize) {
    shared.stop.store(true, Ordering::Relaxed);
    if let Some(p) = prefetch.take() {
        p.release(workers);
    }
}

/// Starts a named thread (names show in `top -H`, `perf` and debuggers).
fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name.to_owned()).spawn(f)
}

/// A running pipeline: an iterator of parsed batches.
pub struct Pipeline {
    inner: Inner,
    cache: Option<Arc<Cache>>,
    spec: Vec<FeatureSpec>,
    files: Vec<PathBuf>,
    tuned: Tuned,
    shuffle_buffer: usize,
    batch_size: usize,
    held: Arc<Held>,
}

/// What the pipeline's own buffers held ([`Pipeline::memory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Memory {
    /// The most bytes the buffers held at once: record buffers (pool, shuffle buffer,
    /// raw batches in flight, buffers on their way back to the pool), the shuffle
    /// buffer's and raw batches' slots, the readers' block buffers, and parsed batches
    /// not yet taken by the consumer. A batch the consumer holds is the consumer's.
    pub peak_bytes: u64,
    /// What the options allow the buffers to hold, given the largest record and batch
    /// so far; `peak_bytes` never exceeds it, however slow the consumer.
    pub bound_bytes: u64,
    /// The largest record copied into a buffer (0 when every shard was mapped).
    pub largest_record_bytes: u64,
    /// The most bytes one parsed batch held.
    pub largest_batch_bytes: u64,
}

impl Pipeline {
    /// A builder over shards, folders or manifests.
    pub fn builder(paths: Vec<PathBuf>) -> PipelineBuilder {
        PipelineBuilder::new(paths)
    }

    /// The feature spec the batches follow.
    pub fn spec(&self) -> &[FeatureSpec] {
        &self.spec
    }

    /// The shard files read.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// What the buffers hold at most, and the bound the options put on it:
    ///
    /// ```text
    /// record buffers  (pool room + shuffle buffer + (max prefetch + 2) × batch) × largest record
    /// slots           (2 × shuffle buffer + (max prefetch + 1) × batch) × a slot's bytes
    /// readers         cycle length × 2 × max(largest record + 16, 1 MiB), if any file is not mapped
    /// parsed batches  max prefetch × largest batch
    /// ```
    ///
    /// Records in flight are bounded by the prefetch credits (one per batch, given back
    /// when the consumer takes the batch), so nothing here grows with time or with a
    /// slow consumer. (The `bench` RSS figures also count what the allocator keeps
    /// cached for reuse, which depends on the timing.)
    pub fn memory(&self) -> Memory {
        let held = &self.held;
        let (record, batch) = (held.largest_record(), held.largest_batch());
        let (shuffle, size) = (self.shuffle_buffer.max(1) as u64, self.batch_size as u64);
        let t = &self.tuned;
        let prefetch = t.max_prefetch as u64;
        let owned = pool_room(self.shuffle_buffer, self.batch_size) as u64
            + shuffle
            + (prefetch + 2) * size;
        let slots = 2 * shuffle + (prefetch + 1) * size;
        let readers = if held.streamed() {
            let frame = crate::tfrecord::frame::FRAME_OVERHEAD;
            let block = crate::tfrecord::reader::BLOCK_BYTES as u64;
            t.cycle_length as u64 * 2 * (record + frame).max(block)
        } else {
            0
        };
        Memory {
            peak_bytes: held.peak(),
            bound_bytes: owned * record + slots * batch::SLOT_BYTES + readers + prefetch * batch,
            largest_record_bytes: record,
            largest_batch_bytes: batch,
        }
    }

    /// What the cache did (`None` without one): filled, rebuilt (and why) or reused, its
    /// records and bytes.
    pub fn cache(&self) -> Option<CacheReport> {
        self.cache.as_ref().map(|c| c.report())
    }

    /// The cache, once complete, for a later pipeline over the same records
    /// ([`PipelineBuilder::with_shared_cache`]).
    pub fn shared_cache(&self) -> Option<SharedCache> {
        self.cache
            .as_ref()
            .filter(|c| c.is_ready())
            .map(|c| SharedCache(c.clone()))
    }

    /// The settings in use (after automatic tuning; the prefetch depth as it is now).
    pub fn tuned(&self) -> Tuned {
        let mut tuned = self.tuned;
        if let Inner::Threaded { limit, .. } = &self.inner {
            tuned.prefetch = limit.load(Ordering::Relaxed);
        }
        tuned
    }
}

impl Iterator for Pipeline {
    type Item = Result<Batch>;

    /// The next batch. After an error, the iteration ends.
    fn next(&mut self) -> Option<Result<Batch>> {
        match &mut self.inner {
            Inner::Threaded {
                prefetch,
                handles,
                shared,
                ..
            } => {
                let item = prefetch.as_mut()?.next_batch();
                if matches!(item, Some(Err(_)) | None) {
                    stop_workers(shared, prefetch, handles.len());
                }
                item
            }
            Inner::Inline {
                producer,
                parser,
                held,
            } => loop {
                match producer.next_batch() {
                    Ok(Next::Batch(raw)) => {
                        held.sub(raw.slot_bytes());
                        let cache = self.cache.as_deref();
                        let (parsed, mut spare) = process(parser, raw, &self.files, cache);
                        producer.recycle(&mut spare);
                        match parsed {
                            Ok(batch) if batch.rows == 0 => continue,
                            Ok(batch) => return Some(Ok(batch)),
                            Err(e) => {
                                producer.epoch = producer.epochs;
                                producer.interleave = None;
                                producer.cached = None;
                                return Some(Err(e));
                            }
                        }
                    }
                    Ok(Next::End) => return None,
                    Ok(Next::WaitForCache) => {
                        // Sequentially, every batch of the filling epoch was parsed
                        // before the next is asked for: only a failed filling is left.
                        producer.epoch = producer.epochs;
                        producer.interleave = None;
                        return Some(Err(Error::new(ErrorKind::CacheDamaged(
                            "the filling epoch did not complete".into(),
                        ))));
                    }
                    Err(e) => {
                        producer.epoch = producer.epochs;
                        producer.interleave = None;
                        producer.cached = None;
                        return Some(Err(e));
                    }
                }
            },
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        if let Inner::Threaded {
            prefetch,
            handles,
            shared,
            ..
        } = &mut self.inner
        {
            stop_workers(shared, prefetch, handles.len());
            for h in handles.drain(..) {
                let _ = h.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::proto::{Example, Feature, Features};
    use prost::Message;

    /// Three files of `n` records each, `i` numbering the records in file order.
    fn numbered_files(dir: &std::path::Path, n: i64) -> Vec<PathBuf> {
        std::fs::create_dir_all(dir).unwrap();
        (0..3)
            .map(|f| {
                let path = dir.join(format!("{f}.tfrecord"));
                let mut w =
                    crate::tfrecord::RecordWriter::new(std::fs::File::create(&path).unwrap());
                for i in f * n..(f + 1) * n {
                    let mut features = Features::default();
                    features.feature.insert("i".into(), Feature::int64(vec![i]));
                    let example = Example {
                        features: Some(features),
                    };
                    w.write_record(&example.encode_to_vec()).unwrap();
                }
                path
            })
            .collect()
    }

    fn numbers(pipeline: Pipeline) -> Vec<Vec<i64>> {
        pipeline
            .map(|b| match &b.unwrap().column("i").unwrap().values {
                Values::Int64(v) => v.clone(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// A mapped file's map stays while any of its records waits unbatched (as in a
    /// shuffle buffer), each batch holds the maps its records point into, and once every
    /// record is batched the interleave holds none.
    #[test]
    fn batches_hold_the_maps_of_their_records() {
        let dir = crate::test_dir("pipeline-maps");
        let files = numbered_files(&dir, 100);
        let opening = Opening {
            compression: None,
            mmap: true,
            io: IoOptions::default(),
        };
        let held = Arc::new(Held::default());
        let mut interleave =
            Interleave::new(files.clone(), vec![2, 0, 1], opening, 2, 3, held, None);
        let mut pool = Pool::new(0);
        let mut waiting = Vec::new();
        while let Some(record) = interleave.next(&mut pool).unwrap() {
            waiting.push(record);
        }
        // Every file is done, none of its records batched: all three maps are kept.
        assert_eq!(waiting.len(), 300);
        assert_eq!(interleave.live_maps(), 3);
        waiting.reverse();
        let spec = [FeatureSpec::new(
            "i",
            crate::example::FeatureKind::Int64,
            Some(vec![]),
        )];
        let parser = Parser::new(&spec).unwrap();
        let mut read = Vec::new();
        let mut batches = Vec::new();
        for chunk in waiting.chunks(70) {
            let mut records = chunk.to_vec();
            let maps = interleave.batch_maps(&mut records);
            batches.push(RawBatch {
                records,
                maps,
                ..RawBatch::default()
            });
        }
        drop(waiting);
        assert_eq!(interleave.live_maps(), 0, "every record is batched");
        for raw in batches {
            let maps = raw.maps.clone();
            let (batch, _) = parser.parse(raw, &files);
            match &batch.unwrap().column("i").unwrap().values {
                Values::Int64(v) => read.extend(v.iter().copied()),
                other => panic!("{other:?}"),
            }
            // Each batch names a map once, and only maps its records use.
            for (k, m) in maps.iter().enumerate() {
                assert!(!maps[..k].iter().any(|o| crate::example::bytes::same(o, m)));
            }
        }
        read.sort();
        assert_eq!(read, (0..300).collect::<Vec<_>>());
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Record ranges read exactly their records, across file boundaries, and together
    /// every record once; shuffled, a range keeps to its records.
    #[test]
    fn record_ranges_read_their_records() {
        let dir = crate::test_dir("pipeline-ranges");
        let files = numbered_files(&dir, 100);
        let counts = vec![100, 100, 100];
        let mut all = Vec::new();
        for (start, end) in [(0, 95), (95, 210), (210, 210), (210, 300)] {
            let read = numbers(
                Pipeline::builder(files.clone())
                    .with_interleave(1, 1)
                    .with_batch(7, false)
                    .with_record_range(counts.clone(), start, end)
                    .build()
                    .unwrap(),
            );
            let read: Vec<i64> = read.into_iter().flatten().collect();
            assert_eq!(read, (start as i64..end as i64).collect::<Vec<_>>());
            all.extend(read);
            let mut shuffled: Vec<i64> = numbers(
                Pipeline::builder(files.clone())
                    .with_shuffle(50, 3)
                    .with_shuffled_files(true)
                    .with_batch(7, false)
                    .with_record_range(counts.clone(), start, end)
                    .build()
                    .unwrap(),
            )
            .into_iter()
            .flatten()
            .collect();
            shuffled.sort();
            assert_eq!(shuffled, (start as i64..end as i64).collect::<Vec<_>>());
        }
        assert_eq!(all, (0..300).collect::<Vec<_>>());
        let beyond = Pipeline::builder(files.clone())
            .with_record_range(counts, 10, 301)
            .build();
        assert!(beyond.is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Skipping batches leaves the rest of the epoch as it was, with or without threads.
    #[test]
    fn skipped_batches_leave_the_same_remaining_batches() {
        let dir = crate::test_dir("pipeline-skip");
        let files = numbered_files(&dir, 100);
        let build = |skip: u64, sequential: bool| {
            let b = Pipeline::builder(files.clone())
                .with_shuffle(64, 9)
                .with_shuffled_files(true)
                .with_batch(16, false)
                .with_skip_batches(skip);
            numbers(if sequential { b.sequential() } else { b }.build().unwrap())
        };
        for sequential in [false, true] {
            let whole = build(0, sequential);
            assert_eq!(whole.len(), 19);
            for skip in [1, 5, 18, 19, 30] {
                let rest = &whole[whole.len().min(skip as usize)..];
                assert_eq!(build(skip, sequential), rest, "skip {skip}");
            }
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// `threads` bounds every thread the pipeline keeps busy, the consumer's included.
    #[test]
    fn threads_bound_every_worker() {
        let dir = crate::test_dir("pipeline-threads");
        let path = dir.join("a.tfrecord");
        let mut w = crate::tfrecord::RecordWriter::new(std::fs::File::create(&path).unwrap());
        for i in 0..1000 {
            let mut features = Features::default();
            features.feature.insert("i".into(), Feature::int64(vec![i]));
            w.write_record(
                &Example {
                    features: Some(features),
                }
                .encode_to_vec(),
            )
            .unwrap();
        }
        drop(w);
        for threads in [1, 2, 3] {
            let mut pipeline = Pipeline::builder(vec![path.clone()])
                .with_threads(threads)
                .with_batch(10, false)
                .build()
                .unwrap();
            pipeline.next().unwrap().unwrap();
            // With the consumer's thread, which parses when it would wait, the pipeline
            // keeps at most `threads` busy (and has at least one worker).
            let workers = pipeline.tuned().parallelism;
            assert_eq!(workers, (threads - 1).max(1));
            let Inner::Threaded { handles, .. } = &pipeline.inner else {
                panic!("a threaded pipeline");
            };
            let names: Vec<_> = handles.iter().map(|h| h.thread().name()).collect();
            let want: Vec<_> = (0..workers).map(|n| format!("tfshard-worker{n}")).collect();
            assert_eq!(
                names,
                want.iter().map(|n| Some(n.as_str())).collect::<Vec<_>>()
            );
            // Dropping the pipeline joins every one of them (it returns, so they ended).
            drop(pipeline);
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
