//! Records by index (`tfshard.Records`, and the global shuffle): record `i` of a set of
//! uncompressed shards, read at its offset.
//!
//! Each shard's record offsets come from its DALI `.idx` file when one is beside it
//! (`convert --index`), otherwise from one walk of its frames; the table holds 4 bytes a
//! record (8 for a shard over 4 GiB), its size is [`RecordAccess::table_bytes`], and a
//! walk that would make it larger than the bound given is refused, saying what to do
//! instead; a reader in blocks ([`RecordAccess::open_blocks`]) keeps one offset a block
//! there (16 bytes), and reads a run of records from the offset before it, its frames
//! walked. Local shards are memory-mapped and a record is a range of the map; a store's
//! are read with ranged requests pinned to the ETag found, the records of one call that
//! lie near each other in one request ([`COALESCE_GAP`]). Every record read is checked:
//! its length against its CRC, its payload against its CRC; a bad one is an error naming
//! file, record and offset.

use std::path::{Path, PathBuf};

use crate::dataset::Dataset;
use crate::error::{Error, FrameDetail, FrameProblem, Result};
use crate::example::columnar::Batch;
use crate::example::FeatureSpec;
use crate::pipeline::ahead::{Pending, Planned};
use crate::pipeline::batch::{Origin, Payload, RawBatch, RawRecord};
use crate::pipeline::chunk::{CachedRows, Chunk};
use crate::pipeline::parse::Parser;
use crate::store::storage::Blob;
use crate::store::IoOptions;
use crate::tfrecord::frame::{self, FOOTER_LEN, FRAME_OVERHEAD, HEADER_LEN};
use crate::tfrecord::mapped::{MappedRecords, SharedBytes};
use crate::tfrecord::reader::frame_error;
use crate::tfrecord::Compression;

/// Records of one call closer than this in a store's shard are read in one request (up
/// to [`READS_IN_FLIGHT`] requests at once).
pub const COALESCE_GAP: u64 = 256 << 10;

/// Records [`RecordAccess::batches`] decodes into one array before gathering rows.
const DECODED_ROWS: usize = 8192;

/// Ranged requests one call makes at once.
pub const READS_IN_FLIGHT: usize = 4;

/// The default bound of an offset table built by walking frames: 1 GiB (268M records).
pub const DEFAULT_TABLE_BOUND: u64 = 1 << 30;

/// One shard's record offsets: each record's header, then the shard's length; or, for a
/// set too large for a table of every record's ([`Offsets::Marks`]), some of them.
#[derive(Debug, Clone)]
enum Offsets {
    Narrow(Vec<u32>),
    Wide(Vec<u64>),
    /// (record, offset) of the shard's first record, of each record whose index in the
    /// set is a multiple of the reader's block, and (records, length) at the end: a run
    /// of records is read from the mark before it to the mark after it, its frames walked.
    Marks(Vec<(u64, u64)>),
}

impl Offsets {
    fn of(offsets: Vec<u64>) -> Offsets {
        match offsets.last() {
            Some(&end) if end <= u64::from(u32::MAX) => {
                Offsets::Narrow(offsets.into_iter().map(|o| o as u32).collect())
            }
            _ => Offsets::Wide(offsets),
        }
    }

    /// Asks the CPU for record `k`'s offset (a hint; none with marks).
    #[inline]
    fn prefetch(&self, k: usize) {
        match self {
            Offsets::Narrow(v) => v.get(k).map(frame::prefetch),
            Offsets::Wide(v) => v.get(k).map(frame::prefetch),
            Offsets::Marks(_) => None,
        };
    }

    /// Record `k`'s offset (of a table of every record's).
    fn get(&self, k: usize) -> u64 {
        match self {
            Offsets::Narrow(v) => u64::from(v[k]),
            Offsets::Wide(v) => v[k],
            Offsets::Marks(_) => unreachable!("marks are walked from, not indexed"),
        }
    }

    /// Records (entries but the end).
    fn records(&self) -> u64 {
        let n = match self {
            Offsets::Narrow(v) => v.len(),
            Offsets::Wide(v) => v.len(),
            Offsets::Marks(m) => return m.last().map_or(0, |&(records, _)| records),
        };
        n.saturating_sub(1) as u64
    }

    fn bytes(&self) -> u64 {
        match self {
            Offsets::Narrow(v) => v.len() as u64 * 4,
            Offsets::Wide(v) => v.len() as u64 * 8,
            Offsets::Marks(m) => m.len() as u64 * MARK_BYTES,
        }
    }
}

/// Bytes of one mark of a table of marks.
const MARK_BYTES: u64 = 16;

/// How a shard's bytes are reached.
#[derive(Debug)]
enum Bytes {
    /// A local file, mapped (`None`: empty).
    Mapped(Option<SharedBytes>),
    /// An object in a store.
    Remote(Blob),
}

/// One record's place.
#[derive(Debug, Clone, Copy)]
struct RecordAt {
    file: usize,
    record: u64,
    offset: u64,
    /// Header, payload and footer.
    framed: u64,
}

/// One shard, opened: its bytes and its records' offsets.
#[derive(Debug)]
struct Opened {
    bytes: Bytes,
    offsets: Offsets,
}

/// The records of a set of shards, by index.
#[derive(Debug)]
pub struct RecordAccess {
    files: Vec<PathBuf>,
    /// `starts[f]`: the index of shard f's first record; then the total.
    starts: Vec<u64>,
    /// Each shard once opened (on first use where a manifest gave its count).
    shards: Vec<std::sync::OnceLock<Opened>>,
    /// Held while shard f is opened: a thread that needs it meanwhile waits for it
    /// rather than walking it too (from a store, reading it twice).
    opening: Vec<std::sync::Mutex<()>>,
    /// Bytes of each shard, where known before opening it (a manifest's).
    sizes: Vec<Option<u64>>,
    /// Bytes the opened shards' tables hold.
    table: std::sync::atomic::AtomicU64,
    bound: u64,
    compression: Option<Compression>,
    io: IoOptions,
    parser: Option<Parser>,
    /// Whether the shards are in a store (read with ranged requests, not mapped).
    in_store: bool,
    /// Records a block: those of about 4 MiB, or the reader's.
    block: u64,
    /// Whether shards walked from now on keep marks, one a block (the set's table of
    /// every record would pass the bound), not every record's offset.
    marks: bool,
    /// Shards walked for their offsets by [`RecordAccess::walked`] (each once).
    walks: std::sync::atomic::AtomicU64,
}

impl RecordAccess {
    /// Opens the shards of `dataset`; `spec` is what [`RecordAccess::batch`] decodes
    /// (`None`: raw records only). A shard its manifest lists (with its record count) is
    /// opened when a record of it is first read: opening a set from its manifest reads
    /// nothing more. Another is opened now, to count its records. A walk of frames stops
    /// when the tables would pass `bound` bytes.
    ///
    /// # Errors
    ///
    /// A compressed shard (its records have no offsets); a table over the bound; a
    /// shard that cannot be read or whose framing is broken (named, with the record and
    /// offset).
    pub fn open(
        dataset: &Dataset,
        spec: Option<&[FeatureSpec]>,
        compression: Option<Compression>,
        bound: u64,
    ) -> Result<RecordAccess> {
        RecordAccess::open_as(dataset, spec, compression, bound, None)
    }

    /// Opens the shards of `dataset` to be read in blocks of `block` consecutive
    /// records (0: the records of about 4 MiB), as [`RecordAccess::open`] does; but
    /// where a table of every record's offset would pass `bound`, the shards walked keep
    /// one offset a block (their marks) and a run of records is read from the mark before
    /// it, its frames walked ([`RecordAccess::marks`]).
    ///
    /// # Errors
    ///
    /// As [`RecordAccess::open`]; marks over the bound too.
    pub fn open_blocks(
        dataset: &Dataset,
        spec: Option<&[FeatureSpec]>,
        compression: Option<Compression>,
        bound: u64,
        block: u64,
    ) -> Result<RecordAccess> {
        RecordAccess::open_as(dataset, spec, compression, bound, Some(block))
    }

    fn open_as(
        dataset: &Dataset,
        spec: Option<&[FeatureSpec]>,
        compression: Option<Compression>,
        bound: u64,
        blocks: Option<u64>,
    ) -> Result<RecordAccess> {
        let listed = dataset.listed();
        let mut access = RecordAccess {
            files: dataset.shards.clone(),
            starts: vec![0],
            shards: (0..dataset.shards.len())
                .map(|_| std::sync::OnceLock::new())
                .collect(),
            opening: (0..dataset.shards.len())
                .map(|_| std::sync::Mutex::new(()))
                .collect(),
            sizes: (dataset.shards.iter())
                .map(|f| listed.get(f).map(|s| s.bytes))
                .collect(),
            table: std::sync::atomic::AtomicU64::new(0),
            bound,
            compression,
            io: dataset.io,
            parser: spec.map(Parser::new).transpose()?,
            in_store: match dataset.shards.first() {
                Some(first) => crate::store::paths::local_path(first, dataset.io)?.is_none(),
                None => false,
            },
            block: 1,
            marks: false,
            walks: std::sync::atomic::AtomicU64::new(0),
        };
        // What the manifests say of their shards: compressed ones cannot be read by index,
        // and a set without `.idx` files needs a walk's table.
        let mut walked = 0u64;
        for (path, m) in &dataset.manifests {
            let compressed = compression.or(m.compression()).unwrap_or(Compression::None);
            if compressed != Compression::None {
                return Err(not_by_index(path, compressed));
            }
            if m.options.get("index") != Some(&serde_json::Value::Bool(true)) {
                walked += (m.records + m.shards.len() as u64) * 4;
            }
        }
        // Over the bound, blocks keep marks; nothing else can.
        let mut marks = walked > bound;
        if marks && blocks.is_none() {
            return Err(over_bound(bound, Some(walked), &dataset.manifests[0].0));
        }
        for (f, file) in dataset.shards.iter().enumerate() {
            let records = match listed.get(file) {
                Some(entry) => entry.records,
                None if marks => access.count(f)?,
                None => match access.walked(f)? {
                    Some(opened) => opened.offsets.records(),
                    None if blocks.is_some() => {
                        // Every shard keeps marks: the tables made so far are dropped
                        // (each walked again for its marks when first read).
                        marks = true;
                        for g in 0..f {
                            if let Some(opened) = access.shards[g].take() {
                                access.sizes[g] = Some(size_of(&opened.bytes));
                            }
                        }
                        *access.table.get_mut() = 0;
                        access.count(f)?
                    }
                    None => return Err(access.over(f)),
                },
            };
            let last = access.starts[access.starts.len() - 1];
            access.starts.push(last + records);
        }
        let n = access.len();
        access.block = match blocks {
            Some(block) if block > 0 => block,
            _ => default_block(n, access.data_bytes()),
        };
        if marks {
            // A mark a block and each shard's first and end, beside the tables made.
            let more = (n / access.block + 2 * access.files.len() as u64) * MARK_BYTES;
            let total = access.table_bytes().saturating_add(more);
            if total > bound {
                return Err(Error::invalid_option(
                    "records",
                    format!(
                        "even one offset a block of {} records would take {total} bytes, over \
                         the offset tables' bound of {bound}: write the shards with --index, \
                         raise the bound (table_bound) or the block (block_size)",
                        access.block
                    ),
                ));
            }
            access.marks = true;
        }
        Ok(access)
    }

    /// Shard `f`'s bytes: its compression checked, mapped (or found in its store).
    fn reach(&self, f: usize) -> Result<Bytes> {
        let (file, io) = (&self.files[f], self.io);
        let compressed = match self.compression {
            Some(c) => c,
            None => crate::records::detect_compression(file, io)?,
        };
        if compressed != Compression::None {
            return Err(not_by_index(file, compressed));
        }
        let blob = Blob::head(file, io)?;
        Ok(match blob.mappable() {
            Some(local) => Bytes::Mapped(MappedRecords::open(&local)?.map().cloned()),
            None => Bytes::Remote(blob),
        })
    }

    /// Opens the local shards not yet opened, each by one of the threads that call this
    /// with the same `cursor` (from 0): an epoch's first batches need most shards at once,
    /// and two threads that both needed one walked it twice (the first epoch of the
    /// standard shards read 15% faster opened so). Errors are left for the reads that
    /// need the shard (which name them). A store's shards open as they are read (their
    /// walks are reads of the store), and so do sets over 4 GiB (the first
    /// batch would wait for every shard's walk).
    pub fn open_local(&self, cursor: &std::sync::atomic::AtomicUsize) {
        if self.in_store || self.data_bytes() > OPEN_AHEAD_BYTES {
            return;
        }
        loop {
            let f = cursor.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if f >= self.files.len() {
                return;
            }
            // (One opened already is found as it is.)
            let _ = self.walked(f);
        }
    }

    /// Shard `f`, opened on first use: its bytes reached, its offsets read from its
    /// `.idx` file or a walk (keeping marks where the set needs them).
    fn opened(&self, f: usize) -> Result<&Opened> {
        self.walked(f)?.ok_or_else(|| self.over(f))
    }

    /// The error of shard `f`'s table passing the bound.
    fn over(&self, f: usize) -> Error {
        over_bound(self.bound, None, &self.files[f])
    }

    /// Shard `f` as [`RecordAccess::opened`] opens it; `None` where its table of every
    /// record would pass what is left of the bound.
    fn walked(&self, f: usize) -> Result<Option<&Opened>> {
        if let Some(opened) = self.shards[f].get() {
            return Ok(Some(opened));
        }
        let _one = self.opening[f].lock().unwrap_or_else(|e| e.into_inner());
        if let Some(opened) = self.shards[f].get() {
            return Ok(Some(opened));
        }
        let (file, io) = (&self.files[f], self.io);
        let bytes = self.reach(f)?;
        let offsets = match idx_offsets(file, io, size_of(&bytes))? {
            Some(offsets) => offsets,
            None => {
                let keep = if self.marks {
                    Keep::Marks {
                        first: self.starts[f],
                        stride: self.block,
                    }
                } else {
                    let used = self.table.load(std::sync::atomic::Ordering::SeqCst);
                    Keep::Every {
                        bound: self.bound.saturating_sub(used),
                    }
                };
                self.walks
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                match walk_offsets(file, &bytes, io, keep)? {
                    Some(offsets) => offsets,
                    None => return Ok(None),
                }
            }
        };
        // A count the manifest gave must be the shard's.
        let (listed, found) = (
            self.starts.get(f + 1).map(|e| e - self.starts[f]),
            offsets.records(),
        );
        if let Some(listed) = listed.filter(|&l| l != found) {
            return Err(Error::invalid_option(
                "records",
                format!(
                    "{} holds {found} records, its manifest says {listed}",
                    file.display()
                ),
            ));
        }
        let opened = Opened { bytes, offsets };
        let table = opened.offsets.bytes();
        // (Set once: the shard's opening lock is held.)
        if self.shards[f].set(opened).is_ok() {
            self.table
                .fetch_add(table, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(self.shards[f].get())
    }

    /// Shard `f`'s records, counted by a walk that keeps nothing (it keeps its marks
    /// when first read); its length noted.
    fn count(&mut self, f: usize) -> Result<u64> {
        let bytes = self.reach(f)?;
        let file = &self.files[f];
        let walked = walk_offsets(file, &bytes, self.io, Keep::Count)?;
        self.sizes[f] = Some(size_of(&bytes));
        Ok(walked.map_or(0, |w| w.records()))
    }

    /// Records in all.
    pub fn len(&self) -> u64 {
        self.starts[self.starts.len() - 1]
    }

    /// Whether there is no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a window of blocks is best read at once ([`RecordAccess::batches`]), not
    /// batch by batch: the shards are in a store (a request a run of records), or keep
    /// marks (a run's frames walked once).
    pub fn by_window(&self) -> bool {
        self.in_store || self.marks
    }

    /// Records a block: the reader's, else those of about 4 MiB of the shards.
    pub fn block(&self) -> u64 {
        self.block
    }

    /// Whether the shards are in a store (read with ranged requests).
    pub fn in_store(&self) -> bool {
        self.in_store
    }

    /// Whether the shards walked keep marks (one offset a block), not every record's.
    pub fn marks(&self) -> bool {
        self.marks
    }

    /// Bytes the offset tables of the shards opened so far hold.
    pub fn table_bytes(&self) -> u64 {
        self.table.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Bytes of the shards (their records, framed): the manifest's sizes, else the
    /// opened shards'.
    pub fn data_bytes(&self) -> u64 {
        (self.sizes.iter().zip(&self.shards))
            .map(|(size, shard)| match (size, shard.get()) {
                (Some(size), _) => *size,
                (None, Some(opened)) => size_of(&opened.bytes),
                (None, None) => 0,
            })
            .sum()
    }

    /// The shard files, in order.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Records per shard.
    pub fn counts(&self) -> Vec<u64> {
        self.starts.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// Where records `indices` are (each `< len()`), with the shard each is in: a run
    /// of records in one shard finds its shard once.
    fn places(&self, indices: &[u64]) -> Result<(Vec<RecordAt>, Vec<&Opened>)> {
        let mut places = Vec::with_capacity(indices.len());
        let mut opened = Vec::with_capacity(indices.len());
        let mut current: Option<(usize, std::ops::Range<u64>, &Opened)> = None;
        // Each record's shard first, its offsets asked of memory (random entries of the
        // table: they overlap), then read.
        for &i in indices {
            let (file, first, shard) = match &current {
                Some((file, range, shard)) if range.contains(&i) => (*file, range.start, *shard),
                _ => {
                    let file = self.starts.partition_point(|&s| s <= i) - 1;
                    let shard = self.opened(file)?;
                    current = Some((file, self.starts[file]..self.starts[file + 1], shard));
                    (file, self.starts[file], shard)
                }
            };
            let record = i - first;
            shard.offsets.prefetch(record as usize);
            places.push(RecordAt {
                file,
                record,
                offset: 0,
                framed: 0,
            });
            opened.push(shard);
        }
        for (p, shard) in places.iter_mut().zip(&opened) {
            // (A shard's with marks is found when its run is walked.)
            if !matches!(shard.offsets, Offsets::Marks(_)) {
                let k = p.record as usize;
                p.offset = shard.offsets.get(k);
                p.framed = shard.offsets.get(k + 1) - p.offset;
            }
        }
        Ok((places, opened))
    }

    /// The payloads of records `indices` (each `< len()`), checked, in the order given.
    ///
    /// # Errors
    ///
    /// An index out of range; a record whose framing or CRCs are wrong (file, record,
    /// offset); a store error.
    pub fn raw(&self, indices: &[u64]) -> Result<Vec<Vec<u8>>> {
        let fetched = self.fetch(indices, &[])?;
        (fetched.records.iter().zip(&fetched.places))
            .map(|(r, at)| {
                let bytes = r.bytes(&fetched.maps);
                if frame::masked_crc32c(bytes) != r.crc {
                    let len = bytes.len() as u64;
                    return Err(self.fail(at, FrameProblem::DataCrc, FrameDetail::DataCrc { len }));
                }
                Ok(bytes.to_vec())
            })
            .collect()
    }

    /// Records `indices` decoded into one batch, in the order given.
    ///
    /// # Errors
    ///
    /// As [`RecordAccess::raw`]; a record that does not fit the spec; no spec given.
    pub fn batch(&self, indices: &[u64]) -> Result<Batch> {
        let fetched = self.fetch(indices, &[])?;
        self.parse(fetched.records, fetched.maps)
    }

    /// Records `records` (each read once, best in runs of consecutive records: a window
    /// of blocks' records) decoded into one batch in that order, then the batches of
    /// `rows`, each a list of its rows there; a store's runs read by the requests of
    /// `planned` that hold them ([`crate::pipeline::ahead::ReadAhead::plan`]; else by requests of their own).
    ///
    /// # Errors
    ///
    /// As [`RecordAccess::batch`].
    pub fn batches(
        &self,
        records: &[u64],
        rows: &[Vec<u32>],
        planned: Option<&Planned>,
    ) -> Result<Vec<Batch>> {
        let Some(parser) = &self.parser else {
            return Err(Error::invalid_option("records", "opened for raw records"));
        };
        let fetched = self.fetch(records, planned.map_or(&[], Planned::reads))?;
        // Decoded `DECODED_ROWS` at a time: arrays that the allocator reuses, not fresh
        // pages for a window's.
        let mut raw = fetched.records.into_iter();
        let mut chunks: Vec<std::sync::Arc<Chunk>> = Vec::new();
        loop {
            let some: Vec<RawRecord> = raw.by_ref().take(DECODED_ROWS).collect();
            if some.is_empty() {
                break;
            }
            let batch = self.parse(some, fetched.maps.clone())?;
            chunks.push(std::sync::Arc::new(Chunk::from_batch(&batch)));
        }
        let per = DECODED_ROWS as u32;
        Ok((rows.iter())
            .map(|rows| {
                let rows = CachedRows {
                    chunks: chunks.clone(),
                    rows: rows.iter().map(|&r| (r / per, r % per)).collect(),
                };
                parser.gather(&rows, 0)
            })
            .collect())
    }

    /// Batches joined into one, their rows in the order given.
    ///
    /// # Errors
    ///
    /// Opened for raw records (no parser to lay the batch out).
    pub fn join(&self, batches: Vec<Batch>) -> Result<Batch> {
        let Some(parser) = &self.parser else {
            return Err(Error::invalid_option("records", "opened for raw records"));
        };
        let mut rows = CachedRows::default();
        for (c, batch) in batches.iter().enumerate() {
            rows.chunks
                .push(std::sync::Arc::new(Chunk::from_batch(batch)));
            rows.rows
                .extend((0..batch.rows as u32).map(|r| (c as u32, r)));
        }
        Ok(parser.gather(&rows, 0))
    }

    /// Records `indices` decoded each into its own batch of one, in the order given
    /// (read as [`RecordAccess::batch`] reads them).
    ///
    /// # Errors
    ///
    /// As [`RecordAccess::batch`].
    pub fn each(&self, indices: &[u64]) -> Result<Vec<Batch>> {
        let fetched = self.fetch(indices, &[])?;
        let maps = fetched.maps;
        (fetched.records.into_iter())
            .map(|r| self.parse(vec![r], maps.clone()))
            .collect()
    }

    fn parse(&self, records: Vec<RawRecord>, maps: Vec<SharedBytes>) -> Result<Batch> {
        let Some(parser) = &self.parser else {
            return Err(Error::invalid_option("records", "opened for raw records"));
        };
        let raw = RawBatch {
            records,
            maps,
            ..RawBatch::default()
        };
        // (The parser checks each payload against its CRC, naming file, record, offset.)
        parser.parse(raw, &self.files).0
    }

    /// Records `indices`, their framing checked (the payloads' CRCs are the caller's to
    /// check): a local shard's as ranges of its map (nothing copied), a store's read with
    /// one request per run of near records.
    fn fetch(&self, indices: &[u64], planned: &[std::sync::Arc<Pending>]) -> Result<Fetched> {
        let n = self.len();
        if let Some(&bad) = indices.iter().find(|&&i| i >= n) {
            return Err(Error::invalid_option(
                "index",
                format!("record {bad} of a set of {n} records"),
            ));
        }
        let (mut places, opened) = self.places(indices)?;
        let marked = |k: usize| matches!(opened[k].offsets, Offsets::Marks(_));
        // A local record's framing (its first line and its footer's) asked of memory
        // `FRAMES_AHEAD` records before it is checked: random reads overlap. Its
        // payload's lines are the parser's to ask for, while it parses the records
        // before (asked here, they would wait in line behind each other).
        let framing = |k: usize| {
            let (Some(p), Some(shard)) = (places.get(k), opened.get(k)) else {
                return;
            };
            if let (Bytes::Mapped(Some(map)), false) = (&shard.bytes, marked(k)) {
                let end = (p.offset + p.framed) as usize;
                for at in [p.offset as usize, end.saturating_sub(1)] {
                    if let Some(byte) = map.get(at) {
                        frame::prefetch(byte);
                    }
                }
            }
        };
        (0..FRAMES_AHEAD).for_each(framing);
        let mut fetched = Fetched {
            records: Vec::with_capacity(places.len()),
            maps: Vec::new(),
            places: Vec::new(),
        };
        let mut slots = Slots(vec![None; self.files.len()]);
        let (mut remote, mut walks): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
        for (k, (p, shard)) in places.iter().zip(&opened).enumerate() {
            framing(k + FRAMES_AHEAD);
            let record = match &shard.bytes {
                _ if marked(k) => {
                    walks.push(k);
                    RawRecord::default()
                }
                Bytes::Mapped(map) => {
                    let data: &[u8] = map.as_deref().map_or(&[][..], |m| m);
                    let end = (p.offset + p.framed) as usize;
                    let framed = data.get(p.offset as usize..end).unwrap_or(&[]);
                    let (range, crc) = self.frame(framed, p)?;
                    let slot = slots.of(p.file, map, &mut fetched.maps);
                    let start = p.offset as usize + range.start;
                    Payload::Mapped {
                        slot,
                        range: start..start + range.len(),
                    }
                    .with_crc(crc, p)
                }
                Bytes::Remote(_) => {
                    remote.push(k);
                    RawRecord::default()
                }
            };
            fetched.records.push(record);
        }
        self.read_runs(&places, remote, &mut fetched, planned)?;
        let got = self.read_walked(&places, &opened, walks, &mut slots, &mut fetched.maps)?;
        for (k, record, p) in got {
            fetched.records[k] = record;
            places[k] = p;
        }
        fetched.places = places;
        Ok(fetched)
    }

    /// The runs of near records among `remote` (positions in `places`, of a store's
    /// shards with a table of every record), sorted by place: each run's positions in
    /// `remote` and its shard's bytes.
    fn runs(
        places: &[RecordAt],
        remote: &mut [usize],
    ) -> Vec<(std::ops::Range<usize>, usize, std::ops::Range<u64>)> {
        remote.sort_unstable_by_key(|&k| (places[k].file, places[k].offset));
        let mut runs = Vec::new();
        let mut at = 0;
        while at < remote.len() {
            let first = places[remote[at]];
            let mut end = first.offset + first.framed;
            let mut last = at + 1;
            while let Some(&k) = remote.get(last) {
                let p = places[k];
                if p.file != first.file || p.offset > end + COALESCE_GAP {
                    break;
                }
                end = end.max(p.offset + p.framed);
                last += 1;
            }
            runs.push((at..last, first.file, first.offset..end));
            at = last;
        }
        runs
    }

    /// The runs (shard, bytes) that reading `records` (a window's) from a store makes:
    /// what [`crate::pipeline::ahead::ReadAhead::plan`] plans. None for local shards or shards with marks.
    ///
    /// # Errors
    ///
    /// A shard that cannot be opened.
    pub fn window_runs(&self, records: &[u64]) -> Result<Vec<(usize, std::ops::Range<u64>)>> {
        if !self.in_store || self.marks {
            return Ok(Vec::new());
        }
        let (places, opened) = self.places(records)?;
        // (What `fetch` reads by runs: a store's shards with a table of every record; a
        // set may hold local shards too, mapped.)
        let mut remote: Vec<usize> = (0..places.len())
            .filter(|&k| {
                let shard = opened[k];
                matches!(shard.bytes, Bytes::Remote(_))
                    && !matches!(shard.offsets, Offsets::Marks(_))
            })
            .collect();
        let runs = RecordAccess::runs(&places, &mut remote);
        Ok(runs
            .into_iter()
            .map(|(_, file, range)| (file, range))
            .collect())
    }

    /// Makes the requests of `planned` that are its own, up to [`READS_IN_FLIGHT`] at
    /// once, each filled for the windows that wait for it.
    ///
    /// # Errors
    ///
    /// The first error of a request (the others it made are filled with it too).
    pub fn read_planned(&self, planned: &Planned) -> Result<()> {
        let own = planned.own();
        let mut reads = Vec::with_capacity(own.len());
        for p in own {
            let Bytes::Remote(blob) = &self.opened(p.file())?.bytes else {
                unreachable!("planned reads are a store's");
            };
            reads.push((blob, p.range()));
        }
        match Blob::read_ranges(&reads, READS_IN_FLIGHT) {
            Ok(got) => {
                for (p, bytes) in own.iter().zip(got) {
                    p.fill(Ok(bytes));
                }
                Ok(())
            }
            Err(e) => {
                for p in own {
                    p.fill(Err(e.again()));
                }
                Err(e)
            }
        }
    }

    /// The records `remote` (positions in `places`, of a store's shards with a table of
    /// every record) into `fetched`: runs of near records, each read by a request of
    /// `planned` that holds it, else by one of its own (up to [`READS_IN_FLIGHT`] at
    /// once); each record a range of the bytes read (nothing copied).
    fn read_runs(
        &self,
        places: &[RecordAt],
        mut remote: Vec<usize>,
        fetched: &mut Fetched,
        planned: &[std::sync::Arc<Pending>],
    ) -> Result<()> {
        let runs = RecordAccess::runs(places, &mut remote);
        let mut got: Vec<Option<SharedBytes>> = Vec::with_capacity(runs.len());
        let mut reads = Vec::new();
        for (_, file, range) in &runs {
            match planned.iter().find_map(|p| p.bytes(*file, range)) {
                Some(Ok(bytes)) => got.push(Some(bytes)),
                Some(Err(e)) => return Err(e.with_file(&self.files[*file])),
                None => {
                    let Bytes::Remote(blob) = &self.opened(*file)?.bytes else {
                        unreachable!("remote records are a store's");
                    };
                    reads.push((blob, range.clone()));
                    got.push(None);
                }
            }
        }
        let mut read = Blob::read_ranges(&reads, READS_IN_FLIGHT)?.into_iter();
        for ((run, _, range), data) in runs.into_iter().zip(got) {
            let Some(data) = data.or_else(|| read.next()) else {
                unreachable!("a run read");
            };
            let slot = fetched.maps.len() as u32;
            for &k in &remote[run] {
                let p = places[k];
                let from = (p.offset - range.start) as usize;
                // (A store that answered short: the frame check names what is missing.)
                let framed = data.get(from..from + p.framed as usize).unwrap_or(&[]);
                let (within, crc) = self.frame(framed, &p)?;
                let range = from + within.start..from + within.end;
                fetched.records[k] = Payload::Mapped { slot, range }.with_crc(crc, &p);
            }
            fetched.maps.push(data);
        }
        Ok(())
    }

    /// The records `walks` (positions in `places`, of shards with marks): each run read
    /// from the mark at or before its first record to the mark after its last (runs
    /// that meet, as one), its frames walked; a store's up to [`READS_IN_FLIGHT`] at
    /// once. Their places are found on the way.
    fn read_walked(
        &self,
        places: &[RecordAt],
        opened: &[&Opened],
        mut walks: Vec<usize>,
        slots: &mut Slots,
        maps: &mut Vec<SharedBytes>,
    ) -> Result<Vec<Read>> {
        walks.sort_by_key(|&k| (places[k].file, places[k].record));
        let mut spans: Vec<Span> = Vec::new();
        for (w, &k) in walks.iter().enumerate() {
            let p = places[k];
            let Offsets::Marks(marks) = &opened[k].offsets else {
                unreachable!("walked records are of shards with marks");
            };
            let before = marks.partition_point(|&(r, _)| r <= p.record) - 1;
            match spans.last_mut() {
                Some(span) if span.file == p.file && before <= span.marks.end => {
                    span.records.end = w + 1;
                    span.marks.end = span.marks.end.max(before + 1);
                }
                _ => spans.push(Span {
                    file: p.file,
                    marks: before..before + 1,
                    records: w..w + 1,
                }),
            }
        }
        let span_slots: Vec<u32> = (spans.iter())
            .map(|span| match &opened[walks[span.records.start]].bytes {
                Bytes::Mapped(map) => slots.of(span.file, map, maps),
                Bytes::Remote(_) => 0,
            })
            .collect();
        let walk = |s: usize| -> Result<Vec<Read>> {
            let span = &spans[s];
            let shard = opened[walks[span.records.start]];
            let Offsets::Marks(marks) = &shard.offsets else {
                unreachable!("walked records are of shards with marks");
            };
            let ((first, from), (_, to)) = (marks[span.marks.start], marks[span.marks.end]);
            let remote;
            let data: &[u8] = match &shard.bytes {
                Bytes::Mapped(map) => {
                    let map: &[u8] = map.as_deref().map_or(&[][..], |m| m);
                    map.get(from as usize..to as usize).unwrap_or(&[])
                }
                Bytes::Remote(blob) => {
                    remote = blob.read_range(from..to)?;
                    &remote[..]
                }
            };
            let wanted: Vec<(usize, u64)> = (walks[span.records.clone()].iter())
                .map(|&k| (k, places[k].record))
                .collect();
            let mut got = Vec::with_capacity(wanted.len());
            self.walk(
                data,
                span.file,
                (first, from),
                &wanted,
                |k, p, range, crc| {
                    let payload = match &shard.bytes {
                        Bytes::Mapped(_) => Payload::Mapped {
                            slot: span_slots[s],
                            range: p.offset as usize + range.start..p.offset as usize + range.end,
                        },
                        Bytes::Remote(_) => {
                            let start = (p.offset - from) as usize;
                            Payload::Owned(data[start + range.start..start + range.end].to_vec())
                        }
                    };
                    got.push((k, payload.with_crc(crc, &p), p));
                },
            )?;
            Ok(got)
        };
        let limit = if self.in_store { READS_IN_FLIGHT } else { 1 };
        in_flight(spans.len(), limit, walk)
    }

    /// Walks the frames of `data` (the bytes of shard `file` from record `first` at
    /// `offset` on) to the records `wanted` (their positions in the call and records of
    /// the shard, in record order), handing each to `found` with its place, its payload's
    /// range within its framed bytes and its stored CRC.
    fn walk(
        &self,
        data: &[u8],
        file: usize,
        (first, offset): (u64, u64),
        wanted: &[(usize, u64)],
        mut found: impl FnMut(usize, RecordAt, std::ops::Range<usize>, u32),
    ) -> Result<()> {
        let (mut at, mut record, mut w) = (0usize, first, 0);
        while w < wanted.len() {
            let mut p = RecordAt {
                file,
                record,
                offset: offset + at as u64,
                framed: 0,
            };
            let rest = &data[at.min(data.len())..];
            let len = match rest.get(..HEADER_LEN) {
                Some(header) => {
                    let header: &[u8; HEADER_LEN] = header.try_into().expect("a header's length");
                    frame::decode_header(header).unwrap_or(u64::MAX)
                }
                None => 0,
            };
            let framed = len.saturating_add(FRAME_OVERHEAD);
            p.framed = framed;
            // (A frame the bytes do not hold: the check names what is wrong.)
            let bytes = usize::try_from(framed)
                .ok()
                .and_then(|f| rest.get(..f))
                .unwrap_or(rest);
            let (range, crc) = self.frame(bytes, &p)?;
            while wanted.get(w).is_some_and(|&(_, r)| r == record) {
                found(wanted[w].0, p, range.clone(), crc);
                w += 1;
            }
            at += bytes.len();
            record += 1;
        }
        Ok(())
    }

    fn fail(&self, p: &RecordAt, problem: FrameProblem, detail: FrameDetail) -> Error {
        let path = Some(self.files[p.file].as_path());
        frame_error(problem, detail, path, p.record, p.offset)
    }

    /// The payload's range within record `p`'s framed bytes, and its stored CRC; the
    /// length checked against its CRC and the bytes there.
    fn frame(&self, framed: &[u8], p: &RecordAt) -> Result<(std::ops::Range<usize>, u32)> {
        let Some(header) = framed.get(..HEADER_LEN) else {
            let available = framed.len() as u64;
            return Err(self.fail(
                p,
                FrameProblem::TruncatedLength,
                FrameDetail::TruncatedHeader { available },
            ));
        };
        let header: &[u8; HEADER_LEN] = header.try_into().expect("a header's length");
        let Ok(len) = frame::decode_header(header) else {
            return Err(self.fail(p, FrameProblem::LengthCrc, FrameDetail::LengthCrc));
        };
        let want = len.saturating_add((HEADER_LEN + FOOTER_LEN) as u64);
        if want != framed.len() as u64 {
            let left = framed.len() as u64;
            return Err(self.fail(
                p,
                FrameProblem::TruncatedData,
                FrameDetail::TruncatedRecord { len, left },
            ));
        }
        let end = framed.len() - FOOTER_LEN;
        let stored = u32::from_le_bytes(framed[end..].try_into().expect("a footer's length"));
        Ok((HEADER_LEN..end, stored))
    }
}

/// Bytes of local shards [`RecordAccess::open_local`] opens before reading (about a
/// second's walk of their frames on two cores).
const OPEN_AHEAD_BYTES: u64 = 4 << 30;

/// Records ahead whose framing is asked of memory while one's is checked.
const FRAMES_AHEAD: usize = 16;

/// A record read: its position in the call, its payload and CRC, and its place.
type Read = (usize, RawRecord, RecordAt);

/// The slot of each shard's map among a call's maps (`None`: not yet among them).
struct Slots(Vec<Option<u32>>);

impl Slots {
    /// Shard `file`'s slot among `maps`, its map (`map`) added there the first time.
    fn of(&mut self, file: usize, map: &Option<SharedBytes>, maps: &mut Vec<SharedBytes>) -> u32 {
        match (self.0[file], map) {
            (Some(slot), _) => slot,
            (None, Some(map)) => {
                maps.push(map.clone());
                let slot = (maps.len() - 1) as u32;
                self.0[file] = Some(slot);
                slot
            }
            (None, None) => 0,
        }
    }
}

/// A run of records of one shard with marks, read from mark `marks.start` to mark
/// `marks.end`: the records `records` of the call's walked ones (sorted by record).
struct Span {
    file: usize,
    marks: std::ops::Range<usize>,
    records: std::ops::Range<usize>,
}

/// `work(i)` for every `i < n`, up to `limit` at once (this thread one of them), the
/// results together in no particular order.
///
/// # Errors
///
/// The first error of a `work`.
fn in_flight<T: Send>(
    n: usize,
    limit: usize,
    work: impl Fn(usize) -> Result<Vec<T>> + Sync,
) -> Result<Vec<T>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let run = || -> Result<Vec<T>> {
        let mut got = Vec::new();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if i >= n {
                return Ok(got);
            }
            got.extend(work(i)?);
        }
    };
    let helpers = n.min(limit.max(1)).saturating_sub(1);
    if helpers == 0 {
        return run();
    }
    let done: Vec<Result<Vec<T>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..helpers).map(|_| s.spawn(run)).collect();
        let mut done = vec![run()];
        done.extend(handles.into_iter().map(|h| {
            h.join().unwrap_or_else(|_| {
                Err(Error::from(std::io::Error::other(
                    "a reading thread stopped on a bug",
                )))
            })
        }));
        done
    });
    let mut all = Vec::new();
    for got in done {
        all.extend(got?);
    }
    Ok(all)
}

/// Records fetched for one call: each one's payload (a range of one of `maps`, or its
/// bytes) and stored CRC, and where each came from.
struct Fetched {
    records: Vec<RawRecord>,
    maps: Vec<SharedBytes>,
    places: Vec<RecordAt>,
}

impl Payload {
    fn with_crc(self, crc: u32, p: &RecordAt) -> RawRecord {
        RawRecord {
            payload: self,
            crc,
            origin: Origin {
                file: p.file,
                record: p.record,
                offset: p.offset,
            },
        }
    }
}

/// A compressed shard's (or its manifest's) error.
fn not_by_index(file: &Path, compressed: Compression) -> Error {
    Error::invalid_option(
        "records",
        format!(
            "{} is {}-compressed: its records cannot be read by index (convert with \
             --compression none, or read it in order)",
            file.display(),
            compressed.name()
        ),
    )
}

/// The error of an offset table that would pass its bound (`bytes` where known).
fn over_bound(bound: u64, bytes: Option<u64>, at: &Path) -> Error {
    let bytes = match bytes {
        Some(bytes) => format!("{bytes} bytes"),
        None => format!("more than {bound} bytes"),
    };
    Error::invalid_option(
        "records",
        format!(
            "the offset table would take {bytes}, over its bound of {bound} ({}): write the \
             shards with --index (their .idx files give the offsets), raise the bound \
             (table_bound), or read with Dataset(shuffle=\"blocks\") (one offset a block) or \
             shuffle=\"buffer\" (in order, no table)",
            at.display()
        ),
    )
}

/// The records of about 4 MiB of a set of `n` records in `bytes` bytes (one at least).
fn default_block(n: u64, bytes: u64) -> u64 {
    let per = u128::from(n) * (4 << 20) / u128::from(bytes.max(1));
    u64::try_from(per).unwrap_or(u64::MAX).max(1)
}

fn size_of(bytes: &Bytes) -> u64 {
    match bytes {
        Bytes::Mapped(map) => map.as_ref().map_or(0, |m| m.len() as u64),
        Bytes::Remote(blob) => blob.size(),
    }
}

/// The offsets a DALI index beside `file` gives (`{file}.idx`: "offset size" a line),
/// checked to run through the file; `None` when there is none.
fn idx_offsets(file: &Path, io: IoOptions, size: u64) -> Result<Option<Offsets>> {
    let mut idx = file.as_os_str().to_owned();
    idx.push(".idx");
    let idx = PathBuf::from(idx);
    let text = match crate::store::paths::read(&idx, io) {
        Ok(text) => text,
        Err(e) if crate::store::storage::is_not_found(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let bad = |line: usize, why: &str| {
        Error::invalid_option("records", format!("{} line {line}: {why}", idx.display()))
    };
    let mut offsets = Vec::new();
    let mut next = 0u64;
    // Its lines (the last one's newline optional), read as bytes: a shard's index has a
    // line a record (the text's parsers cost as much as a walk of the frames).
    let text = text.strip_suffix(b"\n").unwrap_or(&text);
    let lines = text.split(|&b| b == b'\n').filter(|_| !text.is_empty());
    for (n, line) in lines.enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some((offset, framed)) = offset_and_size(line) else {
            return Err(bad(n + 1, "not `offset size`"));
        };
        if offset != next {
            return Err(bad(n + 1, "offsets that do not run through the shard"));
        }
        offsets.push(offset);
        next = offset.saturating_add(framed);
    }
    if next != size {
        return Err(bad(
            offsets.len(),
            "records that end before or after the shard",
        ));
    }
    offsets.push(size);
    Ok(Some(Offsets::of(offsets)))
}

/// The two numbers an index line starts with (`offset size`: decimal, blank-separated;
/// what follows them is not read); `None` for anything else.
fn offset_and_size(line: &[u8]) -> Option<(u64, u64)> {
    let mut at = 0;
    let mut number = || -> Option<u64> {
        while line.get(at).is_some_and(u8::is_ascii_whitespace) {
            at += 1;
        }
        let start = at;
        let mut value = 0u64;
        while let Some(digit) = line.get(at).filter(|b| b.is_ascii_digit()) {
            value = value
                .checked_mul(10)?
                .checked_add(u64::from(digit - b'0'))?;
            at += 1;
        }
        // A number ends at a blank or at the line's end.
        (at > start && line.get(at).is_none_or(u8::is_ascii_whitespace)).then_some(value)
    };
    Some((number()?, number()?))
}

/// What a walk of a shard's frames keeps.
#[derive(Debug, Clone, Copy)]
enum Keep {
    /// Every record's offset, while the table stays within `bound` bytes.
    Every { bound: u64 },
    /// Marks: the shard's first record is the set's record `first`; a mark at each
    /// record of the set whose index is a multiple of `stride`.
    Marks { first: u64, stride: u64 },
    /// Nothing but the count (and the end).
    Count,
}

/// The offsets of `file`'s records that `keep` asks for, from one walk of its frames
/// (its lengths checked, not its payloads); `None` where every record's would pass the
/// bound.
fn walk_offsets(file: &Path, bytes: &Bytes, io: IoOptions, keep: Keep) -> Result<Option<Offsets>> {
    let mut offsets: Vec<u64> = Vec::new();
    let mut marks: Vec<(u64, u64)> = Vec::new();
    let mut records = 0u64;
    // Whether the table stays within its bound.
    let mut push = |offset: u64| -> bool {
        match keep {
            Keep::Every { bound } => {
                offsets.push(offset);
                if offsets.len() as u64 * 4 > bound {
                    return false;
                }
            }
            Keep::Marks { first, stride } => {
                if records == 0 || (first + records).is_multiple_of(stride.max(1)) {
                    marks.push((records, offset));
                }
            }
            Keep::Count => {}
        }
        records += 1;
        true
    };
    match bytes {
        Bytes::Mapped(_) => {
            let mut walk = MappedRecords::open(file)?;
            while let Some(record) = walk.next_record()? {
                if !push(record.offset) {
                    return Ok(None);
                }
            }
        }
        Bytes::Remote(_) => {
            let mut reader =
                crate::records::open(file, Some(Compression::None), io)?.with_check_data_crc(false);
            loop {
                let offset = reader.offset();
                if reader.read_framed()?.is_none() {
                    break;
                }
                if !push(offset) {
                    return Ok(None);
                }
            }
        }
    }
    let size = size_of(bytes);
    Ok(Some(match keep {
        Keep::Every { .. } => {
            offsets.push(size);
            Offsets::of(offsets)
        }
        Keep::Marks { .. } | Keep::Count => {
            marks.push((records, size));
            Offsets::Marks(marks)
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(dir: &Path, name: &str, payloads: &[&[u8]]) -> PathBuf {
        let mut bytes = Vec::new();
        for p in payloads {
            frame::append_record(&mut bytes, p);
        }
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn open(files: Vec<PathBuf>, bound: u64) -> Result<RecordAccess> {
        let set = Dataset::discover(&files, IoOptions::default())?;
        RecordAccess::open(&set, None, None, bound)
    }

    #[test]
    fn records_by_index_across_shards() {
        let dir = crate::test_dir("access-index");
        let a = shard(&dir, "a.tfrecord", &[b"zero", b"one"]);
        let b = shard(&dir, "b.tfrecord", &[]);
        let c = shard(&dir, "c.tfrecord", &[b"two", b"three", b"four"]);
        let access = open(vec![a, b, c], DEFAULT_TABLE_BOUND).unwrap();
        assert_eq!(access.len(), 5);
        assert_eq!(access.counts(), [2, 0, 3]);
        let got = access.raw(&[4, 0, 2, 2]).unwrap();
        assert_eq!(got, [&b"four"[..], b"zero", b"two", b"two"]);
        assert_eq!(access.table_bytes(), (3 + 1 + 4) * 4);
        assert!(access.raw(&[5]).is_err(), "out of range");
    }

    /// A manifest's shards open when first read; threads that open the local ones
    /// with one cursor walk each once, and open all of them; threads that read the same
    /// shards at once walk each once.
    #[test]
    fn threads_opening_a_set_walk_each_shard_once() {
        let out = crate::test_dir("access-open-local");
        let small = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/small.parquet");
        crate::convert::Converter::parquet(vec![small])
            .with_output(&out)
            .with_target_shard_bytes(40_000)
            .with_overwrite(true)
            .build()
            .unwrap()
            .run(&crate::progress::NoProgress)
            .unwrap();
        let set = Dataset::discover(&[out], IoOptions::default()).unwrap();
        let shards = set.shards.len();
        assert!(shards >= 4, "{shards} shards");
        let access = RecordAccess::open(&set, None, None, DEFAULT_TABLE_BOUND).unwrap();
        assert_eq!(access.table_bytes(), 0, "opened when first read");
        let cursor = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| access.open_local(&cursor));
            }
        });
        let walks = |a: &RecordAccess| a.walks.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(walks(&access), shards as u64);
        assert_eq!(access.table_bytes(), (2000 + shards as u64) * 4);
        access.open_local(&std::sync::atomic::AtomicUsize::new(0));
        access.raw(&[0, 1999]).unwrap();
        assert_eq!(walks(&access), shards as u64, "nothing walked again");
        // Threads that need the same shards at once, as they read: each walked once too.
        let access = RecordAccess::open(&set, None, None, DEFAULT_TABLE_BOUND).unwrap();
        let every: Vec<u64> = (0..2000).collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| access.raw(&every).unwrap());
            }
        });
        assert_eq!(walks(&access), shards as u64);
    }

    #[test]
    fn a_dali_index_gives_the_offsets() {
        let dir = crate::test_dir("access-idx");
        let a = shard(&dir, "a.tfrecord", &[b"zero", b"one"]);
        std::fs::write(dir.join("a.tfrecord.idx"), "0 20\n20 19\n").unwrap();
        let access = open(vec![a.clone()], 0).unwrap();
        assert_eq!(access.raw(&[1]).unwrap(), [b"one"]);
        // One that does not run through the shard is refused.
        std::fs::write(dir.join("a.tfrecord.idx"), "0 20\n21 18\n").unwrap();
        let e = open(vec![a.clone()], 0).unwrap_err();
        assert!(e.to_string().contains("a.tfrecord.idx line 2"), "{e}");
        // Blanks around the numbers, a field after them, CRLF and no last newline read;
        // anything else on a line is named.
        std::fs::write(dir.join("a.tfrecord.idx"), " 0\t20 x\r\n20 19").unwrap();
        assert_eq!(
            open(vec![a.clone()], 0).unwrap().raw(&[1]).unwrap(),
            [b"one"]
        );
        for (text, line) in [
            ("0 20\n\n20 19\n", 2),
            ("0 20\n20\n", 2),
            ("0x 20\n20 19\n", 1),
            ("0 20\n20 -19\n", 2),
            ("0 20\n20 99999999999999999999\n", 2),
            // (No line: the records end before the shard.)
            ("", 0),
        ] {
            std::fs::write(dir.join("a.tfrecord.idx"), text).unwrap();
            let e = open(vec![a.clone()], 0).unwrap_err().to_string();
            assert!(
                e.contains(&format!("a.tfrecord.idx line {line}")),
                "{text:?}: {e}"
            );
        }
        // An empty shard's index is empty.
        let empty = shard(&dir, "e.tfrecord", &[]);
        std::fs::write(dir.join("e.tfrecord.idx"), "").unwrap();
        std::fs::write(dir.join("a.tfrecord.idx"), "0 20\n20 19\n").unwrap();
        assert_eq!(open(vec![empty, a], 0).unwrap().counts(), [0, 2]);
    }

    #[test]
    fn a_walk_over_the_bound_says_what_to_do() {
        let dir = crate::test_dir("access-bound");
        let a = shard(&dir, "a.tfrecord", &[b"zero", b"one", b"two"]);
        let e = open(vec![a], 8).unwrap_err().to_string();
        assert!(e.contains("--index") && e.contains("table_bound"), "{e}");
    }

    /// `n` records whose payloads name their shard and index.
    fn numbered(dir: &Path, name: &str, n: usize) -> (PathBuf, Vec<Vec<u8>>) {
        let payloads: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("{name} {i} {}", "x".repeat(i % 37)).into_bytes())
            .collect();
        let refs: Vec<&[u8]> = payloads.iter().map(|p| &p[..]).collect();
        (shard(dir, name, &refs), payloads)
    }

    #[test]
    fn blocks_over_the_bound_keep_marks_and_read_the_same_records() {
        let dir = crate::test_dir("access-marks");
        let (a, mut all) = numbered(&dir, "a.tfrecord", 10);
        let (b, more) = numbered(&dir, "b.tfrecord", 200);
        all.extend(more);
        let set = Dataset::discover(&[a.clone(), b.clone()], IoOptions::default()).unwrap();
        // Every record's offsets take (11 + 201) × 4 bytes: over 500, a's fit.
        let e = RecordAccess::open(&set, None, None, 500)
            .unwrap_err()
            .to_string();
        assert!(e.contains("shuffle=\"blocks\""), "{e}");
        let access = RecordAccess::open_blocks(&set, None, None, 500, 50).unwrap();
        assert!(access.marks() && access.by_window());
        assert_eq!((access.len(), access.block()), (210, 50));
        // In any order, runs and single records, across the two shards and their marks.
        let mut order: Vec<u64> = (0..210).collect();
        order.reverse();
        order.extend([60, 61, 62, 100, 149, 150, 9, 10, 209, 10]);
        let got = access.raw(&order).unwrap();
        let want: Vec<Vec<u8>> = order.iter().map(|&i| all[i as usize].clone()).collect();
        assert_eq!(got, want);
        // a's marks at its first record and its end; b's at its records 40, 90, 140, 190
        // (the set's 50, 100, 150, 200), its first and its end. (a's table of every record
        // fitted the bound; it was dropped when b's did not.)
        assert_eq!(access.table_bytes(), (2 + 6) * MARK_BYTES);
        // A bound that marks do not fit either says so.
        let e = RecordAccess::open_blocks(&set, None, None, 100, 50).unwrap_err();
        assert!(e.to_string().contains("one offset a block"), "{e}");
    }

    #[test]
    fn a_walk_stops_at_a_broken_frame_and_names_it() {
        use std::io::{Seek, Write};
        let dir = crate::test_dir("access-marks-corrupt");
        let (a, payloads) = numbered(&dir, "a.tfrecord", 100);
        let offset = |i: usize| -> usize { payloads[..i].iter().map(|p| p.len() + 16).sum() };
        // Bytes changed in place (the shard stays mapped, its length unchanged).
        let flip = |at: usize| {
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&a)
                .unwrap();
            let mut byte = [0u8];
            file.seek(std::io::SeekFrom::Start(at as u64)).unwrap();
            std::io::Read::read_exact(&mut file, &mut byte).unwrap();
            file.seek(std::io::SeekFrom::Start(at as u64)).unwrap();
            file.write_all(&[byte[0] ^ 1]).unwrap();
        };
        flip(offset(30) + 12); // record 30's payload
        let set = Dataset::discover(std::slice::from_ref(&a), IoOptions::default()).unwrap();
        let access = RecordAccess::open_blocks(&set, None, None, 200, 25).unwrap();
        assert!(access.marks());
        // Records walked past are framed, not read: record 31 is whole.
        assert_eq!(access.raw(&[31]).unwrap(), [payloads[31].clone()]);
        let e = access.raw(&[30]).unwrap_err().to_string();
        assert!(
            e.contains("record 30") && e.contains(&format!("offset {}", offset(30))),
            "{e}"
        );
        // Record 70's block starts at 50: its walk cannot pass record 60's broken length.
        flip(offset(60) + 9);
        let e = access.raw(&[70]).unwrap_err().to_string();
        assert!(
            e.contains("record 60") && e.contains(&format!("offset {}", offset(60))),
            "{e}"
        );
        assert_eq!(
            access.raw(&[59, 50]).unwrap(),
            [payloads[59].clone(), payloads[50].clone()]
        );
        // Opened again, the walk for the marks finds it.
        let e = RecordAccess::open_blocks(&set, None, None, 200, 25).unwrap_err();
        assert!(e.to_string().contains("record 60"), "{e}");
    }

    /// Shards with flipped, zeroed or cut bytes: opened with marks and with the whole
    /// table, both refuse the same shards, and reading every record gives the same
    /// records or the same error; never a panic.
    #[test]
    fn damaged_shards_read_the_same_with_marks() {
        let dir = crate::test_dir("access-damaged");
        let (a, _) = numbered(&dir, "clean.tfrecord", 40);
        let clean = std::fs::read(&a).unwrap();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            state = crate::hash::mix64(state.wrapping_add(1));
            (state % n as u64) as usize
        };
        let mut marked_reads = 0;
        for round in 0..200 {
            let mut bytes = clean.clone();
            for _ in 0..1 + next(3) {
                let at = next(bytes.len());
                match next(3) {
                    0 => bytes[at] ^= 1 << next(8),
                    1 => bytes[at] = 0,
                    _ => bytes.truncate(at),
                }
            }
            let path = dir.join(format!("damaged-{round}.tfrecord"));
            std::fs::write(&path, &bytes).unwrap();
            let set = Dataset::discover(std::slice::from_ref(&path), IoOptions::default()).unwrap();
            let whole = RecordAccess::open(&set, None, None, DEFAULT_TABLE_BOUND);
            // Under the whole table (its walk stops past 4n - 1 bytes); marks of blocks of 7
            // fit from n = 17.
            let n = whole.as_ref().map_or(40, |w| w.len());
            let marked = RecordAccess::open_blocks(&set, None, None, (4 * n).saturating_sub(1), 7);
            match (&whole, &marked) {
                (Err(w), Err(m)) => assert_eq!(w.to_string(), m.to_string(), "round {round}"),
                (Ok(_), Err(m)) => assert!(n < 17, "round {round}: {m}"),
                (Ok(whole), Ok(marked)) => {
                    assert!(marked.marks(), "round {round}");
                    let order: Vec<u64> = (0..n).rev().collect();
                    let (w, m) = (whole.raw(&order), marked.raw(&order));
                    assert_eq!(w.is_ok(), m.is_ok(), "round {round}");
                    match (w, m) {
                        (Ok(w), Ok(m)) => assert_eq!(w, m, "round {round}"),
                        (w, m) => assert_eq!(
                            w.unwrap_err().to_string(),
                            m.unwrap_err().to_string(),
                            "round {round}"
                        ),
                    }
                    marked_reads += 1;
                }
                (Err(w), Ok(_)) => panic!("round {round}: only the whole table refused: {w}"),
            }
            std::fs::remove_file(&path).unwrap();
        }
        assert!(marked_reads > 50, "{marked_reads} shards read with marks");
    }

    #[test]
    fn a_corrupt_record_is_named() {
        let dir = crate::test_dir("access-corrupt");
        let a = shard(&dir, "a.tfrecord", &[b"zero", b"one"]);
        let mut bytes = std::fs::read(&a).unwrap();
        bytes[20 + 12] ^= 1;
        std::fs::write(&a, bytes).unwrap();
        let access = open(vec![a], DEFAULT_TABLE_BOUND).unwrap();
        assert_eq!(access.raw(&[0]).unwrap(), [b"zero"]);
        let e = access.raw(&[1]).unwrap_err().to_string();
        assert!(
            e.contains("a.tfrecord") && e.contains("record 1") && e.contains("offset 20"),
            "{e}"
        );
    }
}
