//! Records → shard files of a target size, under hidden temporary names.
//!
//! [`ShardWriter`] takes framed records in order and decides where each shard ends:
//! - plain: a shard closes when the next record would take it past the target, so every
//!   shard but the last is within one record of it and none exceeds it (unless one
//!   record alone does);
//! - gzip/zlib: deflate decides the size on disk, so the writer keeps an upper bound
//!   (bytes on disk at the last sync point + the worst case for what came since); when
//!   the bound would pass the target it ends the chunk being compressed early and waits
//!   for every chunk in flight to learn the exact size, and closes only if the record
//!   still may not fit. Sync points depend only on the data (never on which chunks the
//!   deflate threads have finished), so the bytes stay deterministic;
//! - `--min-shards N`: shard k ends at the first record boundary at or past k·T/N of the
//!   total framed bytes T (known from a first pass).
//!
//! Each file's CRC32C is computed as its bytes are written.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::example::RecordType;
use crate::stats::Partial;
use crate::tfrecord::compress::{compressed_bound, Encoder};
use crate::tfrecord::deflate::DeflatePool;
use crate::tfrecord::{frame, Compression};

/// Buffer between the encoder and the file: large sequential writes.
const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// How shards are cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Plan {
    /// Fill each shard to the target (and `max_records`).
    Fill,
    /// Exactly `shards` shards, cut by cumulative framed bytes out of `total_framed`.
    Even {
        /// The number of shards.
        shards: u64,
        /// Framed, uncompressed bytes of every record.
        total_framed: u64,
    },
}

/// Where and how to write shards.
#[derive(Debug, Clone)]
pub struct ShardOptions {
    /// The folder temporaries go to.
    pub tmp_dir: PathBuf,
    /// Compression of the stream.
    pub compression: Compression,
    /// Target size on disk.
    pub target_bytes: u64,
    /// At most this many records per shard.
    pub max_records: Option<u64>,
    /// Write DALI `.idx` files.
    pub index: bool,
    /// How to cut.
    pub plan: Plan,
    /// Told about each shard as it is written (only when every closed shard is final).
    /// Its shards are staged copies: they are not synced to disk.
    pub events: Option<ShardHook>,
    /// The records the producer will give in all, when it knows: the writer then keeps
    /// a guess, for `events`, whether the open shard is the last ([`LastGuess`]).
    pub expected_records: Option<u64>,
    /// Threads that deflate gzip and zlib chunks (else this thread does); the bytes are
    /// the same either way.
    pub deflate: Option<std::sync::Arc<DeflatePool>>,
    /// Count each shard's statistics, reading its records as this type (`None`:
    /// `--no-stats`), kept beside it as `{shard}.stats`.
    pub stats: Option<RecordType>,
}

pub use crate::store::destination::{
    ClosedShard, LastGuess, Origin, ShardEvents, ShardHook, ShardStats, SourceRows,
};

/// A shard file that reports the bytes that reached it.
struct Reported {
    file: File,
    written: u64,
    /// Bytes whose writeback was started.
    writeback: u64,
    report: Option<Box<dyn FnMut(u64) + Send>>,
}

/// Bytes between requests to start writing a shard back to disk.
const WRITEBACK_BYTES: u64 = 8 << 20;

impl Write for Reported {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if let Some(report) = &mut self.report {
            report(self.written);
        }
        // (Not for a staged copy of a store's shard, which is never synced.)
        if self.report.is_none() && self.written - self.writeback >= WRITEBACK_BYTES {
            // Start writing back what is complete (without waiting), so the fsync
            // before the rename finds little left to do.
            #[cfg(target_os = "linux")]
            {
                use std::os::fd::AsRawFd;
                // SAFETY: a valid descriptor and range; the call only schedules I/O.
                unsafe {
                    libc::sync_file_range(
                        self.file.as_raw_fd(),
                        self.writeback as i64,
                        (self.written - self.writeback) as i64,
                        libc::SYNC_FILE_RANGE_WRITE,
                    )
                };
            }
            self.writeback = self.written;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Counts and checksums the bytes that reach the file.
struct Sink {
    file: BufWriter<Reported>,
    bytes: u64,
    crc: u32,
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.crc = frame::crc32c_append(self.crc, &buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

struct OpenShard {
    path: PathBuf,
    encoder: Encoder<Sink>,
    idx: Option<(PathBuf, BufWriter<File>)>,
    records: u64,
    /// Framed (uncompressed) bytes written.
    framed: u64,
    /// Bytes on disk at the last sync flush (compressed streams).
    flushed_disk: u64,
    /// Framed bytes written since that flush.
    since_flush: u64,
    /// Whether it looks like the last shard.
    last: LastGuess,
    /// The inputs its records came from.
    sources: Vec<SourceRows>,
    /// Its statistics so far (unless `--no-stats`).
    partial: Option<Partial>,
}

/// Writes framed records into shards.
pub struct ShardWriter {
    options: ShardOptions,
    current: Option<OpenShard>,
    closed: Vec<ClosedShard>,
    /// Framed bytes of every record so far (for [`Plan::Even`]).
    cumulative: u64,
    /// Records so far (those skipped included).
    records_seen: u64,
    bytes_on_disk: u64,
    /// fsyncs of closed shards, running in the background.
    syncs: Vec<std::thread::JoinHandle<Result<()>>>,
    /// Records at the start of the stream that resumed shards already hold: dropped.
    skip: u64,
    /// The producer's latest restart point (`--resume`), attached to each shard closed
    /// after it.
    checkpoint: Option<serde_json::Value>,
    /// Where the next record comes from (see [`ShardWriter::origin`]).
    origin: Option<Origin>,
}

fn io_at(path: &Path) -> impl Fn(io::Error) -> Error + '_ {
    move |e| Error::from(e).with_file(path)
}

fn io_at_record(path: &Path, record: u64) -> impl Fn(Error) -> Error + '_ {
    move |e| e.with_file(path).with_record(record)
}

/// Counts a framed record's payload into a shard's statistics.
fn count(partial: &mut Partial, framed: &[u8], record_type: RecordType) -> Result<()> {
    let payload = &framed[frame::HEADER_LEN..framed.len() - frame::FOOTER_LEN];
    partial.add_payload(payload, record_type)
}

impl ShardWriter {
    /// A writer that has written nothing yet.
    pub fn new(options: ShardOptions) -> ShardWriter {
        ShardWriter {
            options,
            current: None,
            closed: Vec::new(),
            cumulative: 0,
            records_seen: 0,
            bytes_on_disk: 0,
            syncs: Vec::new(),
            skip: 0,
            checkpoint: None,
            origin: None,
        }
    }

    /// A writer that continues after `finished` shards of an earlier run (`--resume`):
    /// the first records it is given, as many as those shards hold (but the `skipped`
    /// that its producer skipped itself), are dropped, and the next shard starts where
    /// they ended, so the output is the same.
    pub fn resuming(
        options: ShardOptions,
        finished: Vec<ClosedShard>,
        skipped: u64,
    ) -> ShardWriter {
        let mut w = ShardWriter::new(options);
        let held: u64 = finished.iter().map(|s| s.records).sum();
        w.skip = held.saturating_sub(skipped);
        w.checkpoint = finished.last().and_then(|s| s.checkpoint.clone());
        w.bytes_on_disk = finished.iter().map(|s| s.bytes).sum();
        w.closed = finished;
        w
    }

    /// Bytes on disk of the shards closed so far, plus what reached the open one.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_on_disk
            + self
                .current
                .as_ref()
                .map_or(0, |s| s.encoder.get_ref().bytes)
    }

    fn open(&mut self) -> Result<()> {
        let index = self.closed.len();
        let path = self.options.tmp_dir.join(format!(
            "{index:05}.tfrecord{}",
            self.options.compression.suffix()
        ));
        let file = File::create(&path).map_err(io_at(&path))?;
        let last = LastGuess::default();
        let report = self
            .options
            .events
            .as_ref()
            .map(|e| e.0.opened(&path, last.clone()));
        let file = Reported {
            file,
            written: 0,
            writeback: 0,
            report,
        };
        let sink = Sink {
            file: BufWriter::with_capacity(WRITE_BUFFER_BYTES, file),
            bytes: 0,
            crc: 0,
        };
        let idx = if self.options.index {
            let idx_path = path.with_extension("tfrecord.idx");
            let f = File::create(&idx_path).map_err(io_at(&idx_path))?;
            Some((idx_path, BufWriter::new(f)))
        } else {
            None
        };
        self.current = Some(OpenShard {
            path,
            encoder: Encoder::with_pool(
                sink,
                self.options.compression,
                self.options.deflate.clone(),
            ),
            idx,
            records: 0,
            framed: 0,
            flushed_disk: 0,
            since_flush: 0,
            last,
            sources: Vec::new(),
            partial: self.options.stats.map(|_| Partial::new()),
        });
        self.guess_last();
        Ok(())
    }

    /// Updates the open shard's [`LastGuess`]: with the records still to come at the
    /// average framed size so far, it would end below 90% of the target (and within
    /// `--max-records-per-shard`), so no other shard follows. With compression, the
    /// framed size stands for the compressed one (erring towards "not last").
    fn guess_last(&self) {
        let (Some(expected), Some(shard)) = (self.options.expected_records, &self.current) else {
            return;
        };
        if self.options.plan != Plan::Fill || self.options.events.is_none() {
            return;
        }
        let last = self.records_seen > 0 && {
            let left = expected.saturating_sub(self.records_seen);
            let per_record = self.cumulative as f64 / self.records_seen as f64;
            let at_end = shard.framed as f64 + left as f64 * per_record;
            at_end <= 0.9 * self.options.target_bytes as f64
                && self
                    .options
                    .max_records
                    .is_none_or(|max| shard.records + left <= max)
        };
        shard.last.set(last);
    }

    fn close(&mut self) -> Result<()> {
        if self.current.is_none() {
            self.open()?;
        }
        let shard = self.current.take().expect("opened just above");
        let path = shard.path.clone();
        let at = io_at(&path);
        let sink = shard.encoder.finish().map_err(&at)?;
        let Sink { file, bytes, crc } = sink;
        let file = file.into_inner().map_err(|e| at(e.into_error()))?.file;
        // Durable before the rename that publishes it; the flush to disk overlaps with
        // writing the next shard, and finish() waits for every one. (A file a hook
        // takes is the hook's to keep: a store has it once uploaded; a resumable run's
        // journal syncs it before it records it.)
        if self.options.events.is_none() {
            let sync_path = path.clone();
            self.syncs.push(std::thread::spawn(move || {
                file.sync_all()
                    .map_err(|e| Error::from(e).with_file(sync_path))
            }));
        }
        let idx_path = match shard.idx {
            Some((idx_path, mut w)) => {
                w.flush().map_err(io_at(&idx_path))?;
                w.get_ref().sync_all().map_err(io_at(&idx_path))?;
                Some(idx_path)
            }
            None => None,
        };
        let stats = match shard.partial {
            Some(partial) => {
                let bytes = partial.to_bytes();
                let stats_path = path.with_extension(format!(
                    "{}.stats",
                    path.extension().unwrap_or_default().to_string_lossy()
                ));
                std::fs::write(&stats_path, &bytes).map_err(io_at(&stats_path))?;
                Some(ShardStats {
                    path: stats_path,
                    bytes: std::sync::Arc::new(bytes),
                })
            }
            None => None,
        };
        self.bytes_on_disk += bytes;
        self.closed.push(ClosedShard {
            path: shard.path,
            idx_path,
            stats,
            records: shard.records,
            bytes,
            crc32c: crc,
            checkpoint: self.checkpoint.clone(),
            sources: shard.sources,
        });
        if let Some(events) = &self.options.events {
            events
                .0
                .closed(self.closed.last().expect("pushed just above"))?;
        }
        Ok(())
    }

    /// Whether the open shard must close before a record of `framed` bytes.
    fn must_close_before(&mut self, framed: u64) -> Result<bool> {
        let target = self.options.target_bytes;
        let Some(shard) = self.current.as_mut() else {
            return Ok(false);
        };
        if shard.records == 0 {
            return Ok(false);
        }
        if self
            .options
            .max_records
            .is_some_and(|max| shard.records >= max)
        {
            return Ok(true);
        }
        if let Plan::Even { .. } = self.options.plan {
            return Ok(false);
        }
        if self.options.compression == Compression::None {
            return Ok(shard.framed + framed > target);
        }
        if shard.flushed_disk + compressed_bound(shard.since_flush + framed) <= target {
            return Ok(false);
        }
        // The bound says it might not fit: learn the exact size so far.
        shard.encoder.flush().map_err(io_at(&shard.path))?;
        shard.flushed_disk = shard.encoder.get_ref().bytes;
        shard.since_flush = 0;
        Ok(shard.flushed_disk + compressed_bound(framed) > target)
    }

    /// Writes one framed record.
    ///
    /// # Errors
    ///
    /// An I/O error naming the temporary file.
    pub fn write(&mut self, framed: &[u8]) -> Result<()> {
        let len = framed.len() as u64;
        if self.skip > 0 {
            // Already in a shard a resumed run reuses.
            self.skip -= 1;
            self.cumulative += len;
            self.records_seen += 1;
            self.advance_origin(1);
            return Ok(());
        }
        if self.must_close_before(len)? {
            self.close()?;
        }
        if self.current.is_none() {
            self.open()?;
        }
        let shard = self.current.as_mut().expect("opened just above");
        if let Some((idx_path, idx)) = shard.idx.as_mut() {
            writeln!(idx, "{} {}", shard.framed, len).map_err(io_at(idx_path))?;
        }
        shard
            .encoder
            .write_all(framed)
            .map_err(io_at(&shard.path))?;
        if let (Some(partial), Some(record_type)) = (shard.partial.as_mut(), self.options.stats) {
            count(partial, framed, record_type)
                .map_err(io_at_record(&shard.path, shard.records))?;
        }
        if let Some(origin) = self.origin.as_mut() {
            origin.note(&mut shard.sources, 1);
        }
        shard.records += 1;
        shard.framed += len;
        shard.since_flush += len;
        self.cumulative += len;
        self.records_seen += 1;
        self.guess_last();
        if let Plan::Even {
            shards,
            total_framed,
        } = self.options.plan
        {
            // Shard k (1-based) ends at the first boundary at or past k·T/N.
            while (self.closed.len() as u64) + 1 < shards
                && u128::from(self.cumulative) * u128::from(shards)
                    >= u128::from(self.closed.len() as u64 + 1) * u128::from(total_framed)
            {
                self.close()?;
            }
        }
        Ok(())
    }

    /// Writes consecutive framed records (`sizes` gives each one's length). Runs of
    /// records that fit the open plain shard go out in one write, without the
    /// per-record copy through the buffer.
    ///
    /// # Errors
    ///
    /// An I/O error naming the temporary file.
    pub fn write_batch(&mut self, data: &[u8], sizes: &[u64]) -> Result<()> {
        let mut offset = 0usize;
        let mut i = 0;
        while self.skip > 0 && i < sizes.len() {
            self.skip -= 1;
            self.cumulative += sizes[i];
            self.records_seen += 1;
            self.advance_origin(1);
            offset += sizes[i] as usize;
            i += 1;
        }
        while i < sizes.len() {
            let fast = self.options.compression == Compression::None
                && !self.options.index
                && self.options.plan == Plan::Fill
                && self.current.as_ref().is_some_and(|s| s.records > 0);
            if fast {
                let shard = self.current.as_mut().expect("checked just above");
                let room = self.options.target_bytes.saturating_sub(shard.framed);
                let max_records = self
                    .options
                    .max_records
                    .map_or(u64::MAX, |m| m - shard.records.min(m));
                let (mut n, mut bytes) = (0usize, 0u64);
                while i + n < sizes.len()
                    && (n as u64) < max_records
                    && bytes + sizes[i + n] <= room
                {
                    bytes += sizes[i + n];
                    n += 1;
                }
                if n > 0 {
                    let end = offset + bytes as usize;
                    shard
                        .encoder
                        .write_all(&data[offset..end])
                        .map_err(io_at(&shard.path))?;
                    if let (Some(partial), Some(record_type)) =
                        (shard.partial.as_mut(), self.options.stats)
                    {
                        let mut at = offset;
                        for (k, &size) in sizes[i..i + n].iter().enumerate() {
                            let record = &data[at..at + size as usize];
                            count(partial, record, record_type)
                                .map_err(io_at_record(&shard.path, shard.records + k as u64))?;
                            at += size as usize;
                        }
                    }
                    if let Some(origin) = self.origin.as_mut() {
                        origin.note(&mut shard.sources, n as u64);
                    }
                    shard.records += n as u64;
                    shard.framed += bytes;
                    shard.since_flush += bytes;
                    self.cumulative += bytes;
                    self.records_seen += n as u64;
                    self.guess_last();
                    offset = end;
                    i += n;
                    continue;
                }
            }
            let end = offset + sizes[i] as usize;
            self.write(&data[offset..end])?;
            offset = end;
            i += 1;
        }
        Ok(())
    }

    /// Closes the last shard (or writes the empty ones a table of zero rows gets).
    ///
    /// # Errors
    ///
    /// An I/O error.
    pub fn finish(mut self) -> Result<Vec<ClosedShard>> {
        let wanted = match self.options.plan {
            Plan::Even { shards, .. } => shards as usize,
            Plan::Fill => 1,
        };
        if self.current.is_some() {
            self.close()?;
        }
        while self.closed.len() < wanted {
            self.close()?;
        }
        for sync in self.syncs.drain(..) {
            sync.join()
                .map_err(|_| Error::from(io::Error::other("an fsync thread panicked")))??;
        }
        Ok(std::mem::take(&mut self.closed))
    }

    /// The next record is record `record` of input `input` (an index among the run's
    /// inputs); the ones after it follow it in that input, until the next call. Each
    /// shard lists the inputs its records came from ([`ClosedShard::sources`]); records
    /// that do not follow the last ones given start a range of their own (the tests';
    /// a run's records come through [`ShardWriter::origin_in_run`]).
    #[cfg(test)]
    pub fn origin(&mut self, input: u32, record: u64) {
        self.origin = Some(Origin::at(self.origin, input, record));
    }

    /// The next record comes from `origin`, in a run its producer tracks (a split's
    /// writer is given only some of the records the run reads one after another).
    pub fn origin_in_run(&mut self, origin: Origin) {
        self.origin = Some(origin);
    }

    /// `count` records given were dropped (a resumed run's): the origin moves past them.
    fn advance_origin(&mut self, count: u64) {
        if let Some(origin) = self.origin.as_mut() {
            origin.next += count;
        }
    }

    /// Notes the producer's restart point after the records given so far (`--resume`:
    /// journaled with every shard closed from now on).
    pub fn set_checkpoint(&mut self, checkpoint: serde_json::Value) {
        self.checkpoint = Some(checkpoint);
    }

    /// Framed bytes of every record written.
    pub fn total_framed(&self) -> u64 {
        self.cumulative
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: usize, seed: u32) -> Vec<u8> {
        // Pseudo-random bytes, so deflate cannot shrink them much.
        let mut x = 0x9e37_79b9u32 ^ seed.wrapping_mul(0x0100_0193);
        let payload: Vec<u8> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x >> 8) as u8
            })
            .collect();
        let mut out = Vec::new();
        frame::append_record(&mut out, &payload);
        out
    }

    fn run(
        dir: &str,
        options: impl FnOnce(PathBuf) -> ShardOptions,
        records: &[Vec<u8>],
    ) -> Vec<ClosedShard> {
        let tmp = crate::test_dir(&format!("writer-{dir}"));
        let mut w = ShardWriter::new(options(tmp.clone()));
        for r in records {
            w.write(r).unwrap();
        }
        let shards = w.finish().unwrap();
        for s in &shards {
            let bytes = std::fs::read(&s.path).unwrap();
            assert_eq!(bytes.len() as u64, s.bytes);
            assert_eq!(frame::crc32c(&bytes), s.crc32c);
        }
        shards
    }

    fn opts(tmp: PathBuf, compression: Compression, target: u64, plan: Plan) -> ShardOptions {
        ShardOptions {
            tmp_dir: tmp,
            compression,
            target_bytes: target,
            max_records: None,
            index: false,
            plan,
            events: None,
            expected_records: None,
            deflate: None,
            stats: None,
        }
    }

    /// With statistics on, each shard keeps a partial of exactly its records (beside
    /// it, and in memory), whether the records came one by one or in batches cut
    /// across shards; merged in shard order they count every record.
    #[test]
    fn each_shard_keeps_the_statistics_of_its_records() {
        use crate::stats::Partial;
        let tmp = crate::test_dir("writer-stats");
        let payloads = crate::stats::test_records(500);
        let framed: Vec<Vec<u8>> = payloads
            .iter()
            .map(|p| {
                let mut r = frame::encode_header(p.len() as u64).to_vec();
                r.extend_from_slice(p);
                r.extend_from_slice(&frame::encode_footer(p));
                r
            })
            .collect();
        let mut o = opts(tmp.clone(), Compression::None, 5_000, Plan::Fill);
        o.stats = Some(RecordType::Example);
        let mut w = ShardWriter::new(o);
        for chunk in framed[..300].chunks(37) {
            let sizes: Vec<u64> = chunk.iter().map(|r| r.len() as u64).collect();
            w.write_batch(&chunk.concat(), &sizes).unwrap();
        }
        for r in &framed[300..] {
            w.write(r).unwrap();
        }
        let shards = w.finish().unwrap();
        assert!(shards.len() > 3, "{}", shards.len());
        let mut merged = Partial::new();
        for s in &shards {
            let stats = s.stats.as_ref().unwrap();
            assert_eq!(std::fs::read(&stats.path).unwrap(), *stats.bytes);
            let p = Partial::from_bytes(&stats.bytes).unwrap();
            assert_eq!(p.records(), s.records);
            merged.merge(p).unwrap();
        }
        let mut all = Partial::new();
        for p in &payloads {
            all.add_payload(p, RecordType::Example).unwrap();
        }
        let (a, b) = (merged.to_proto(), all.to_proto());
        assert_eq!(a.num_examples, 500);
        assert_eq!(a.features.len(), b.features.len());
        for (x, y) in a.features.iter().zip(&b.features) {
            assert_eq!(x.field_id, y.field_id);
            let common = |f: &crate::stats::proto::FeatureNameStatistics| match &f.stats {
                Some(crate::stats::proto::Stats::NumStats(n)) => n
                    .common_stats
                    .clone()
                    .map(|c| (c.num_non_missing, c.tot_num_values)),
                Some(crate::stats::proto::Stats::StringStats(s)) => s
                    .common_stats
                    .clone()
                    .map(|c| (c.num_non_missing, c.tot_num_values)),
                _ => None,
            };
            assert_eq!(common(x), common(y));
        }
    }

    /// Each shard names the records it holds, across batches, record by record writes,
    /// shard boundaries inside a batch and a change of input; a resumed writer's dropped
    /// records move the origin past them.
    #[test]
    fn each_shard_names_the_input_records_it_holds() {
        let tmp = crate::test_dir("writer-sources");
        let r = record(84, 1); // 100 bytes framed
        let batch: Vec<u8> = r.repeat(10);
        let sizes = vec![100u64; 10];
        let sources = |shards: &[ClosedShard]| -> Vec<Vec<(u32, [u64; 2])>> {
            (shards.iter())
                .map(|s| s.sources.iter().map(|x| (x.input, x.rows)).collect())
                .collect()
        };
        let mut w = ShardWriter::new(opts(tmp.clone(), Compression::None, 400, Plan::Fill));
        w.origin(3, 10);
        w.write_batch(&batch, &sizes).unwrap();
        w.origin(4, 0);
        w.write(&r).unwrap();
        w.write(&r).unwrap();
        w.origin(5, 7);
        w.write_batch(&batch[..300], &sizes[..3]).unwrap();
        let shards = w.finish().unwrap();
        assert_eq!(
            sources(&shards),
            vec![
                vec![(3, [10, 14])],
                vec![(3, [14, 18])],
                vec![(3, [18, 20]), (4, [0, 2])],
                vec![(5, [7, 10])],
            ]
        );
        // Resumed after the first two shards: the next shard is the same.
        let first_two = shards[..2].to_vec();
        let mut w = ShardWriter::resuming(
            opts(tmp.clone(), Compression::None, 400, Plan::Fill),
            first_two,
            0,
        );
        w.origin(3, 10);
        w.write_batch(&batch, &sizes).unwrap();
        w.origin(4, 0);
        w.write(&r).unwrap();
        w.write(&r).unwrap();
        let resumed = w.finish().unwrap();
        assert_eq!(sources(&resumed)[2], vec![(3, [18, 20]), (4, [0, 2])]);
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// Regression: an append reads a file's first and last records again (live shards
    /// hold those between) into one shard, whose sources named one range over the gap;
    /// `verify` then reported the set, and later appends retired more than they needed.
    /// Records that do not follow the last ones given are a range of their own; records
    /// a producer reads in one run but gives this writer only some of (a split's) join.
    #[test]
    fn records_on_both_sides_of_a_gap_are_two_ranges() {
        let tmp = crate::test_dir("writer-gap");
        let r = record(84, 1);
        let mut w = ShardWriter::new(opts(tmp.clone(), Compression::None, 10_000, Plan::Fill));
        w.origin(2, 0);
        w.write_batch(&r.repeat(3), &[100; 3]).unwrap();
        w.origin(2, 90);
        w.write_batch(&r.repeat(2), &[100; 2]).unwrap();
        // The same run again: one range.
        w.origin(2, 92);
        w.write(&r).unwrap();
        // A split's records: 10, 12 and 15 of one run that started at 10 are one range.
        w.origin_in_run(Origin {
            input: 3,
            next: 10,
            run_start: 10,
        });
        w.write(&r).unwrap();
        w.origin_in_run(Origin {
            input: 3,
            next: 12,
            run_start: 10,
        });
        w.write(&r).unwrap();
        w.origin_in_run(Origin {
            input: 3,
            next: 15,
            run_start: 10,
        });
        w.write(&r).unwrap();
        // ... but not across a run that started after the range ended.
        w.origin_in_run(Origin {
            input: 3,
            next: 30,
            run_start: 20,
        });
        w.write(&r).unwrap();
        let shards = w.finish().unwrap();
        let got: Vec<(u32, [u64; 2])> = shards[0]
            .sources
            .iter()
            .map(|x| (x.input, x.rows))
            .collect();
        assert_eq!(
            got,
            [(2, [0, 3]), (2, [90, 93]), (3, [10, 16]), (3, [30, 31])]
        );
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn plain_fills_to_within_one_record() {
        let records: Vec<Vec<u8>> = (0..100)
            .map(|i| record(50 + (i % 7) * 10, i as u32))
            .collect();
        let target = 1000;
        let shards = run(
            "plain",
            |t| opts(t, Compression::None, target, Plan::Fill),
            &records,
        );
        let mut next = 0;
        for (k, s) in shards.iter().enumerate() {
            assert!(s.bytes <= target);
            next += s.records as usize;
            if k + 1 < shards.len() {
                assert!(
                    target - s.bytes < records[next].len() as u64,
                    "shard {k} closed early"
                );
            }
        }
        assert_eq!(next, 100);
    }

    /// Keeps each shard's [`LastGuess`], as a store's staging gets it.
    struct Guesses(std::sync::Mutex<Vec<LastGuess>>);

    impl ShardEvents for Guesses {
        fn opened(&self, _: &Path, last: LastGuess) -> Box<dyn FnMut(u64) + Send> {
            self.0.lock().unwrap().push(last);
            Box::new(|_| {})
        }

        fn closed(&self, _: &ClosedShard) -> Result<()> {
            Ok(())
        }
    }

    /// Told how many records come, the writer guesses the last shard the last, and no
    /// other; the guess waits for a record to measure (the first shard opens with none),
    /// and keeps within `--max-records-per-shard`. Untold, it guesses nothing.
    #[test]
    fn the_last_shard_and_no_other_is_guessed_the_last() {
        // 60 records of 116 framed bytes, 8 to a 1000-byte shard: 8 shards, 4 in the last.
        let records: Vec<Vec<u8>> = (0..60).map(|i| record(100, i)).collect();
        let last_of = |n: usize| (0..n).map(|k| k + 1 == n).collect::<Vec<bool>>();
        let cases = [
            (Some(60), None, last_of(8)),
            // More records said than come: the last looks too full (erring to "not last").
            (Some(70), None, vec![false; 8]),
            // 3 a shard at most: 20 shards, and only the last has room for what is left.
            (Some(60), Some(3), last_of(20)),
            (None, None, vec![false; 8]),
        ];
        for (expected, max_records, guessed) in cases {
            let events = std::sync::Arc::new(Guesses(Default::default()));
            let hook = ShardHook(events.clone());
            let shards = run(
                "guess",
                |t| ShardOptions {
                    events: Some(hook.clone()),
                    expected_records: expected,
                    max_records,
                    ..opts(t, Compression::None, 1000, Plan::Fill)
                },
                &records,
            );
            let got: Vec<bool> = events
                .0
                .lock()
                .unwrap()
                .iter()
                .map(LastGuess::get)
                .collect();
            assert_eq!(shards.len(), got.len());
            assert_eq!(
                got, guessed,
                "{expected:?} records, {max_records:?} a shard"
            );
        }
    }

    #[test]
    fn one_huge_record_gets_its_own_shard() {
        let records = vec![record(10, 1), record(5000, 2), record(10, 3)];
        let shards = run(
            "huge",
            |t| opts(t, Compression::None, 1000, Plan::Fill),
            &records,
        );
        let counts: Vec<u64> = shards.iter().map(|s| s.records).collect();
        assert_eq!(counts, [1, 1, 1]);
    }

    #[test]
    fn compressed_shards_stay_under_and_fill_95_percent() {
        let records: Vec<Vec<u8>> = (0..3000).map(|i| record(100, i)).collect();
        for c in [Compression::Gzip, Compression::Zlib] {
            let target = 20_000;
            let shards = run("gz", |t| opts(t, c, target, Plan::Fill), &records);
            assert!(shards.len() > 2);
            for (k, s) in shards.iter().enumerate() {
                assert!(s.bytes <= target, "{c:?} shard {k}: {}", s.bytes);
                if k + 1 < shards.len() {
                    assert!(s.bytes * 100 >= target * 95, "{c:?} shard {k}: {}", s.bytes);
                }
            }
        }
    }

    #[test]
    fn compressed_shards_of_many_chunks_are_the_same_bytes_with_deflate_threads() {
        // Half-compressible records, 3.6 MB in all: shards of several deflate chunks, each
        // ended early near its target.
        let records: Vec<Vec<u8>> = (0..6000)
            .map(|i| {
                let mut r = record(300, i % 7);
                r.extend_from_slice(&record(300, i)[12..]);
                r
            })
            .collect();
        for c in [Compression::Gzip, Compression::Zlib] {
            let target = 1_500_000;
            let inline = run("chunks-1", |t| opts(t, c, target, Plan::Fill), &records);
            let bytes = |shards: &[ClosedShard]| -> Vec<Vec<u8>> {
                shards
                    .iter()
                    .map(|s| std::fs::read(&s.path).unwrap())
                    .collect()
            };
            let one = bytes(&inline);
            assert!(one.len() >= 2, "{c:?}: {} shards", one.len());
            for (k, s) in inline.iter().enumerate() {
                assert!(s.bytes <= target, "{c:?} shard {k}: {}", s.bytes);
                if k + 1 < inline.len() {
                    assert!(s.bytes * 100 >= target * 95, "{c:?} shard {k}: {}", s.bytes);
                }
            }
            let pool = DeflatePool::new(3).unwrap();
            let pooled = run(
                "chunks-3",
                |t| ShardOptions {
                    deflate: Some(pool),
                    ..opts(t, c, target, Plan::Fill)
                },
                &records,
            );
            assert!(
                bytes(&pooled) == one,
                "{c:?}: other bytes on 3 deflate threads"
            );
        }
    }

    #[test]
    fn even_plan_makes_n_shards() {
        let records: Vec<Vec<u8>> = (0..10).map(|i| record(84, i)).collect();
        let total: u64 = records.iter().map(|r| r.len() as u64).sum();
        let shards = run(
            "even",
            |t| {
                opts(
                    t,
                    Compression::None,
                    1 << 30,
                    Plan::Even {
                        shards: 4,
                        total_framed: total,
                    },
                )
            },
            &records,
        );
        let counts: Vec<u64> = shards.iter().map(|s| s.records).collect();
        // Boundaries at 2.5, 5, 7.5 records: ends after records 3, 5, 8.
        assert_eq!(counts, [3, 2, 3, 2]);
        let empty = run(
            "even0",
            |t| {
                opts(
                    t,
                    Compression::Gzip,
                    100,
                    Plan::Even {
                        shards: 3,
                        total_framed: 0,
                    },
                )
            },
            &[],
        );
        assert_eq!(empty.len(), 3);
    }

    #[test]
    fn max_records() {
        let records: Vec<Vec<u8>> = (0..10).map(|i| record(10, i)).collect();
        let shards = run(
            "max",
            |t| ShardOptions {
                max_records: Some(4),
                ..opts(t, Compression::None, 1 << 30, Plan::Fill)
            },
            &records,
        );
        let counts: Vec<u64> = shards.iter().map(|s| s.records).collect();
        assert_eq!(counts, [4, 4, 2]);
    }
}
