//! The write-time global shuffle: a two-pass external sort with bounded memory.
//!
//! Records are ordered by a seeded 64-bit hash of their global input index. The hash is
//! a bijection of the index, so no two records of a run share one and the hash alone
//! orders them. Pass 1 ([`Scatter`]) keeps each record's hash and location while they
//! fit in half the memory budget: the location is in a buffer of copied records or, for
//! a record of a mapped input file ([`Scatter::put_mapped`]), in that file's map, so
//! those bytes are not copied at all (the page cache holds them already). Past half the
//! budget every record goes to the bucket file that owns its hash range. Pass 2
//! ([`gather`]) takes the buckets in hash order, sorts each one in memory and writes it
//! out; a bucket larger than half the memory budget is first split again by its hash
//! sub-ranges. The order is a function of the hashes alone, so the bytes do not depend on
//! the number of buckets, the memory budget, the temporary folder, the threads or which
//! records were mapped.

use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};
use crate::shard::ShardWriter;
use crate::tfrecord::frame::{self, FOOTER_LEN, HEADER_LEN};
use crate::tfrecord::mapped::KeptMap;

/// Bucket files written at once (each with a small write buffer).
const MAX_BUCKETS: usize = 512;
/// Write buffer per bucket file.
const BUCKET_BUFFER: usize = 32 << 10;
/// How often an oversized bucket is split again before it is sorted regardless.
const MAX_DEPTH: u32 = 6;
/// Sub-buckets per split of an oversized bucket.
const FANOUT: u128 = 16;
/// Records gathered per parallel block, at most; blocks per window (two windows of
/// blocks are held at once), at most; bytes per block, on average.
const GATHER_BLOCK: usize = 8192;
const GATHER_WINDOW_BLOCKS: usize = 16;
const GATHER_BLOCK_BYTES: u64 = 4 << 20;
/// Records ahead of the one being gathered whose first bytes are asked for.
const PREFETCH_AHEAD: usize = 16;
/// Entry header in a bucket file: hash, framed length.
const ENTRY_HEADER: usize = 8 + 4;
/// A record's location: its source (0 the buffer, k the k-th map) in the high bits, its
/// offset there in the low ones.
const OFFSET_BITS: u32 = 44;
/// Input maps held at once (each is one of the 65,530 mappings Linux allows a process by
/// default); records of further files are copied.
const MAX_MAPS: usize = 1 << 14;
/// Bytes an entry costs in memory: its hash and location.
const ENTRY_BYTES: usize = std::mem::size_of::<Entry>();

/// The record order: a seeded bijective hash of the global input index.
pub fn order_hash(index: u64, seed: u64) -> u64 {
    crate::hash::index_hash(index, seed, crate::hash::SHUFFLE_SALT)
}

fn io_at(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::from(e).with_file(path)
}

/// A hash range `[lo, hi)` (hi up to 2^64) and the file holding its records.
#[derive(Debug, Clone)]
pub struct Bucket {
    path: PathBuf,
    lo: u128,
    hi: u128,
}

/// (hash, location) of one framed record held in memory.
type Entry = (u64, u64);

/// Records held in memory: copied ones in `data`, the rest in the maps of their files.
#[derive(Debug, Default)]
pub struct Held {
    data: Vec<u8>,
    maps: Vec<Arc<KeptMap>>,
    entries: Vec<Entry>,
    /// Framed bytes of the records, copied or mapped.
    bytes: u64,
    /// Records per gather block, and blocks per window (set when sorted).
    block: usize,
    window: usize,
}

impl Held {
    /// Asks for the first bytes of the record at `loc` ahead of reading it.
    fn prefetch(&self, loc: u64) {
        let source = (loc >> OFFSET_BITS) as usize;
        let offset = (loc & ((1 << OFFSET_BITS) - 1)) as usize;
        let bytes: &[u8] = if source == 0 {
            &self.data
        } else {
            self.maps[source - 1].bytes()
        };
        if let Some(first) = bytes.get(offset) {
            frame::prefetch(first);
        }
    }

    /// The framed record at `loc`, its length read from its header (checked again for a
    /// mapped file, in case it changed under the map).
    fn record(&self, loc: u64) -> Result<&[u8]> {
        let source = (loc >> OFFSET_BITS) as usize;
        let offset = (loc & ((1 << OFFSET_BITS) - 1)) as usize;
        if source == 0 {
            let header = &self.data[offset..offset + HEADER_LEN];
            let len = u64::from_le_bytes(std::array::from_fn(|k| header[k])) as usize;
            return Ok(&self.data[offset..offset + HEADER_LEN + len + FOOTER_LEN]);
        }
        let map = &self.maps[source - 1];
        let bytes = map.bytes();
        let changed = || {
            Error::new(ErrorKind::InputChanged {
                detail: format!("the record at byte {offset} is no longer there"),
            })
            .with_file(map.name())
        };
        let header: &[u8; HEADER_LEN] = bytes
            .get(offset..offset + HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or_else(changed)?;
        let len = frame::decode_header(header).map_err(|()| changed())?;
        let end = len
            .checked_add((HEADER_LEN + FOOTER_LEN) as u64)
            .and_then(|framed| framed.checked_add(offset as u64))
            .filter(|&end| end <= bytes.len() as u64)
            .ok_or_else(changed)?;
        Ok(&bytes[offset..end as usize])
    }
}

/// Pass 1: records into bucket files by hash range. While they fit in half the memory
/// budget they stay in memory (or in their files' maps), and no file is written at all.
pub struct Scatter {
    dir: PathBuf,
    memory: u64,
    estimated_bytes: u64,
    held: Option<Held>,
    buckets: Vec<(Bucket, BufWriter<File>)>,
}

fn open_buckets(
    dir: &Path,
    stem: &str,
    lo: u128,
    hi: u128,
    count: u128,
) -> Result<Vec<(Bucket, BufWriter<File>)>> {
    (0..count)
        .map(|i| {
            let path = dir.join(format!("{stem}-{i:03}.bin"));
            let file = File::create(&path).map_err(io_at(&path))?;
            let bucket = Bucket {
                path,
                lo: lo + (hi - lo) * i / count,
                hi: lo + (hi - lo) * (i + 1) / count,
            };
            Ok((bucket, BufWriter::with_capacity(BUCKET_BUFFER, file)))
        })
        .collect()
}

/// The bucket of `hash` among `count` equal ranges of `[lo, hi)`.
fn bucket_of(hash: u64, lo: u128, hi: u128, count: usize) -> usize {
    (((u128::from(hash) - lo) * count as u128) / (hi - lo)) as usize
}

fn put_entry(w: &mut impl Write, hash: u64, framed: &[u8]) -> std::io::Result<()> {
    let mut header = [0u8; ENTRY_HEADER];
    header[..8].copy_from_slice(&hash.to_le_bytes());
    header[8..].copy_from_slice(&(framed.len() as u32).to_le_bytes());
    w.write_all(&header)?;
    w.write_all(framed)
}

impl Scatter {
    /// A scatter whose bucket files (if it comes to that) go to `dir`, each meant to fit
    /// in half of `memory` for an output of about `estimated_bytes`.
    pub fn new(dir: &Path, memory: u64, estimated_bytes: u64) -> Scatter {
        // Reserved, not touched: pages are only mapped as records arrive, and the buffer
        // never regrows (copying it) when the estimate is right.
        let reserve = estimated_bytes.min(memory / 2) as usize;
        Scatter {
            dir: dir.to_path_buf(),
            memory,
            estimated_bytes,
            held: Some(Held {
                data: Vec::with_capacity(reserve),
                maps: Vec::new(),
                entries: Vec::with_capacity(reserve / 128),
                bytes: 0,
                block: 1,
                window: 1,
            }),
            buckets: Vec::new(),
        }
    }

    /// Moves the records held in memory into bucket files.
    fn spill(&mut self) -> Result<()> {
        fs::create_dir_all(&self.dir).map_err(io_at(&self.dir))?;
        let held = self.held.take().unwrap_or_default();
        // The mapped records are copied out now: the files must be as they were read.
        for map in &held.maps {
            map.check_unchanged()?;
        }
        let expected = self.estimated_bytes.max(2 * held.bytes);
        let count = (expected / (self.memory / 2).max(1) + 1).clamp(1, MAX_BUCKETS as u64);
        self.buckets = open_buckets(&self.dir, "bucket", 0, 1 << 64, u128::from(count))?;
        for &(hash, loc) in &held.entries {
            self.put_on_disk(hash, held.record(loc)?)?;
        }
        Ok(())
    }

    fn put_on_disk(&mut self, hash: u64, framed: &[u8]) -> Result<()> {
        let n = self.buckets.len();
        let (bucket, w) = &mut self.buckets[bucket_of(hash, 0, 1 << 64, n)];
        put_entry(w, hash, framed).map_err(io_at(&bucket.path))
    }

    /// Whether one more entry, and `copied` more bytes, fit in half the budget.
    fn fits(&self, held: &Held, copied: usize) -> bool {
        held.data.len() + copied + ENTRY_BYTES * (held.entries.len() + 1)
            <= (self.memory / 2) as usize
    }

    /// Adds one framed record with its order hash.
    ///
    /// # Errors
    ///
    /// An I/O error naming the bucket file.
    pub fn put(&mut self, hash: u64, framed: &[u8]) -> Result<()> {
        if let Some(held) = &self.held {
            if self.fits(held, framed.len()) && held.data.len() < 1 << OFFSET_BITS {
                let held = self.held.as_mut().expect("checked just above");
                held.entries.push((hash, held.data.len() as u64));
                held.bytes += framed.len() as u64;
                held.data.extend_from_slice(framed);
                return Ok(());
            }
            self.spill()?;
        }
        self.put_on_disk(hash, framed)
    }

    /// Adds the framed record at `range` of a mapped input file with its order hash: in
    /// memory only its location is kept.
    ///
    /// # Errors
    ///
    /// An I/O error naming the bucket file.
    pub fn put_mapped(
        &mut self,
        hash: u64,
        map: &Arc<KeptMap>,
        range: std::ops::Range<usize>,
    ) -> Result<()> {
        let framed = &map.bytes()[range.clone()];
        let Some(held) = &self.held else {
            return self.put_on_disk(hash, framed);
        };
        let last = held.maps.last().filter(|m| Arc::ptr_eq(m, map)).is_some();
        let mappable = range.start < 1 << OFFSET_BITS && (last || held.maps.len() < MAX_MAPS);
        if !mappable {
            return self.put(hash, framed);
        }
        if !self.fits(held, 0) {
            self.spill()?;
            return self.put_on_disk(hash, framed);
        }
        let held = self.held.as_mut().expect("checked just above");
        if !last {
            held.maps.push(map.clone());
        }
        let source = held.maps.len() as u64;
        held.entries
            .push((hash, source << OFFSET_BITS | range.start as u64));
        held.bytes += range.len() as u64;
        Ok(())
    }

    /// Closes the bucket files (or sorts what stayed in memory).
    ///
    /// # Errors
    ///
    /// An I/O error naming the bucket file.
    pub fn finish(self) -> Result<Scattered> {
        if let Some(mut held) = self.held {
            use rayon::slice::ParallelSliceMut;
            held.entries.par_sort_unstable_by_key(|&(hash, _)| hash);
            (held.block, held.window) = gather_blocks(self.memory, held.bytes, held.entries.len());
            return Ok(Scattered::Memory(held));
        }
        let mut buckets = Vec::with_capacity(self.buckets.len());
        for (bucket, mut w) in self.buckets {
            w.flush().map_err(io_at(&bucket.path))?;
            buckets.push(bucket);
        }
        Ok(Scattered::Disk {
            buckets,
            memory: self.memory,
        })
    }
}

/// The records of pass 1: sorted in memory, or in bucket files in hash order.
#[derive(Debug)]
#[non_exhaustive]
pub enum Scattered {
    /// Everything fit in half the budget; the entries are sorted by hash.
    Memory(Held),
    /// Bucket files.
    Disk {
        /// In hash order.
        buckets: Vec<Bucket>,
        /// The memory budget.
        memory: u64,
    },
}

/// Records per gather block and blocks per window, for records of the average size:
/// blocks of [`GATHER_BLOCK_BYTES`] (or 1/128 of the budget, if less) and at most
/// [`GATHER_BLOCK`] records, the two windows held at once within a quarter of the budget
/// (one block each, at least). Mapped records are not in the budget, so the blocks are
/// bounded by bytes: records of 100 KB in blocks of 8,192 would hold 13 GB.
fn gather_blocks(memory: u64, bytes: u64, records: usize) -> (usize, usize) {
    let average = (bytes / (records as u64).max(1)).max(1);
    let block_bytes = GATHER_BLOCK_BYTES.min(memory / 128);
    let block = (block_bytes / average).clamp(1, GATHER_BLOCK as u64);
    let window = (memory / 8 / (block * average)).clamp(1, GATHER_WINDOW_BLOCKS as u64);
    (block as usize, window as usize)
}

/// Records of one window of entries, gathered into contiguous blocks: each block's
/// bytes and record sizes.
#[derive(Default)]
struct Blocks {
    blocks: Vec<(Vec<u8>, Vec<u64>)>,
    used: usize,
}

impl Blocks {
    /// Gathers the records of `window` into blocks, on every core.
    fn fill(&mut self, held: &Held, window: &[Entry]) -> Result<()> {
        use rayon::prelude::*;
        self.used = window.len().div_ceil(held.block);
        if self.blocks.len() < self.used {
            self.blocks.resize_with(self.used, Default::default);
        }
        window
            .par_chunks(held.block)
            .zip(self.blocks[..self.used].par_iter_mut())
            .try_for_each(|(run, (block, sizes))| {
                block.clear();
                sizes.clear();
                for (k, &(_, loc)) in run.iter().enumerate() {
                    // The records are scattered over the inputs: ask for the next
                    // ones' first bytes while this one is copied.
                    if let Some(&(_, ahead)) = run.get(k + PREFETCH_AHEAD) {
                        held.prefetch(ahead);
                    }
                    let record = held.record(loc)?;
                    block.extend_from_slice(record);
                    sizes.push(record.len() as u64);
                }
                Ok(())
            })
    }

    /// Writes the blocks filled last, in order.
    fn write(&self, writer: &mut ShardWriter) -> Result<()> {
        for (block, sizes) in &self.blocks[..self.used] {
            writer.write_batch(block, sizes)?;
        }
        Ok(())
    }
}

/// Pass 2: every record, in hash order, into `writer`. Can run more than once (the
/// `--min-shards` second pass).
///
/// # Errors
///
/// An I/O error; a bucket file that does not hold what pass 1 wrote; a mapped input
/// file that changed since pass 1 read it.
pub fn gather(scattered: &Scattered, writer: &mut ShardWriter) -> Result<()> {
    match scattered {
        Scattered::Memory(held) => {
            for map in &held.maps {
                map.check_unchanged()?;
            }
            // Reading records in hash order is a random walk over the buffer and the
            // maps (cache misses): gather runs of them into contiguous blocks on every
            // core while the blocks of the window before are written. Two sets of
            // blocks serve every window: fresh pages would each be zeroed first.
            let mut windows = held.entries.chunks(held.window * held.block);
            let mut ready = Blocks::default();
            let mut next = Blocks::default();
            if let Some(first) = windows.next() {
                ready.fill(held, first)?;
            }
            for window in windows {
                let (written, filled) =
                    rayon::join(|| ready.write(writer), || next.fill(held, window));
                written?;
                filled?;
                std::mem::swap(&mut ready, &mut next);
            }
            ready.write(writer)?;
        }
        Scattered::Disk { buckets, memory } => {
            for bucket in buckets {
                emit(bucket, *memory, writer, 0)?;
            }
        }
    }
    Ok(())
}

/// (hash, framed length) from an entry's header.
fn entry_header(header: &[u8; ENTRY_HEADER]) -> (u64, usize) {
    let hash = u64::from_le_bytes(std::array::from_fn(|k| header[k]));
    let len = u32::from_le_bytes(std::array::from_fn(|k| header[8 + k]));
    (hash, len as usize)
}

/// Entries of a bucket file: (hash, start, len) of each framed record in `bytes`.
fn entries(bucket: &Bucket, bytes: &[u8]) -> Result<Vec<(u64, usize, usize)>> {
    let corrupt = || {
        Error::from(std::io::Error::other("a shuffle bucket file is damaged"))
            .with_file(&bucket.path)
    };
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let header = bytes.get(pos..pos + ENTRY_HEADER).ok_or_else(corrupt)?;
        let (hash, len) = entry_header(header.try_into().expect("sliced to ENTRY_HEADER"));
        let start = pos + ENTRY_HEADER;
        if start + len > bytes.len() {
            return Err(corrupt());
        }
        out.push((hash, start, len));
        pos = start + len;
    }
    Ok(out)
}

fn emit(bucket: &Bucket, memory: u64, writer: &mut ShardWriter, depth: u32) -> Result<()> {
    let size = fs::metadata(&bucket.path)
        .map_err(io_at(&bucket.path))?
        .len();
    if size > memory / 2 && depth < MAX_DEPTH && bucket.hi - bucket.lo >= FANOUT {
        // Too large to sort in the budget: split its hash range again, streaming.
        let dir = bucket.path.parent().unwrap_or(Path::new("."));
        let stem = format!(
            "{}-{depth}",
            bucket
                .path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        );
        let mut subs = open_buckets(dir, &stem, bucket.lo, bucket.hi, FANOUT)?;
        let mut reader = std::io::BufReader::with_capacity(
            1 << 20,
            File::open(&bucket.path).map_err(io_at(&bucket.path))?,
        );
        let mut header = [0u8; ENTRY_HEADER];
        let mut record = Vec::new();
        loop {
            match reader.read_exact(&mut header) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(io_at(&bucket.path)(e)),
            }
            let (hash, len) = entry_header(&header);
            record.resize(len, 0);
            reader
                .read_exact(&mut record)
                .map_err(io_at(&bucket.path))?;
            let i = bucket_of(hash, bucket.lo, bucket.hi, subs.len());
            let (sub, w) = &mut subs[i];
            put_entry(w, hash, &record).map_err(io_at(&sub.path))?;
        }
        let mut done = Vec::with_capacity(subs.len());
        for (sub, mut w) in subs {
            w.flush().map_err(io_at(&sub.path))?;
            done.push(sub);
        }
        for sub in &done {
            emit(sub, memory, writer, depth + 1)?;
            let _ = fs::remove_file(&sub.path);
        }
        return Ok(());
    }
    let bytes = fs::read(&bucket.path).map_err(io_at(&bucket.path))?;
    let mut order = entries(bucket, &bytes)?;
    order.sort_unstable_by_key(|&(hash, _, _)| hash);
    for (_, start, len) in order {
        writer.write(&bytes[start..start + len])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_hash_is_a_bijection_on_small_ranges() {
        let mut seen: Vec<u64> = (0..10_000).map(|i| order_hash(i, 7)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 10_000);
        assert_ne!(order_hash(1, 7), order_hash(1, 8));
    }

    #[test]
    fn buckets_cover_the_whole_range() {
        assert_eq!(bucket_of(0, 0, 1 << 64, 7), 0);
        assert_eq!(bucket_of(u64::MAX, 0, 1 << 64, 7), 6);
        assert_eq!(bucket_of(u64::MAX, 1 << 63, 1 << 64, 16), 15);
    }
    #[test]
    fn gather_blocks_are_bounded_by_bytes() {
        // Small records: the record cap, 16 blocks a window.
        assert_eq!(gather_blocks(1 << 30, 200 * 100_000, 100_000), (8192, 16));
        // Images of 100 KB: 4 MiB blocks; both windows hold 128 MiB at most.
        assert_eq!(gather_blocks(1 << 30, 100_000 * 1000, 1000), (41, 16));
        // A 1 MiB budget: blocks of 8 KiB, 16 of them (256 KiB for both windows).
        assert_eq!(gather_blocks(1 << 20, 200 * 1000, 1000), (40, 16));
        // Records of 50 MB: one a block, two blocks a window (200 MB in all).
        assert_eq!(gather_blocks(1 << 30, 50_000_000 * 10, 10), (1, 2));
        // Larger than an eighth of the budget: one record at a time.
        assert_eq!(gather_blocks(1 << 30, 10 << 30, 1), (1, 1));
        assert_eq!(gather_blocks(1 << 30, 0, 0), (8192, 16));
    }

    /// `in.tfrecord` in a new folder named after `test`, of the records `payloads`:
    /// the folder, the file's path and bytes, where its second record starts, and the
    /// file kept mapped.
    fn mapped_file(
        test: &str,
        payloads: [&[u8]; 2],
    ) -> (PathBuf, PathBuf, Vec<u8>, usize, Arc<KeptMap>) {
        use crate::tfrecord::mapped::MappedRecords;
        let dir = crate::test_dir(&format!("scatter-{test}"));
        let path = dir.join("in.tfrecord");
        let mut bytes = Vec::new();
        frame::append_record(&mut bytes, payloads[0]);
        let second = bytes.len();
        frame::append_record(&mut bytes, payloads[1]);
        fs::write(&path, &bytes).unwrap();
        let walk = MappedRecords::open(&path).unwrap();
        let map = Arc::new(walk.named(Path::new("in.tfrecord")).keep().unwrap());
        (dir, path, bytes, second, map)
    }

    #[test]
    fn a_spill_refuses_a_mapped_file_written_since() {
        let (dir, path, mut bytes, one, map) = mapped_file("spill", [b"zero", b"one"]);
        // Half of 64 bytes holds two entries; the third spills them.
        let mut scatter = Scatter::new(&dir.join("buckets"), 64, 0);
        scatter.put_mapped(1, &map, 0..one).unwrap();
        scatter.put_mapped(2, &map, one..bytes.len()).unwrap();
        frame::append_record(&mut bytes, b"two");
        fs::write(&path, &bytes).unwrap();
        let err = scatter.put_mapped(3, &map, 0..one).unwrap_err().to_string();
        assert!(
            err.starts_with("in.tfrecord: changed during the run:"),
            "{err}"
        );
    }

    #[test]
    fn held_records_come_back_from_the_buffer_and_the_maps() {
        let (dir, path, bytes, second, map) =
            mapped_file("scatter", [b"mapped zero", b"mapped one"]);
        let mut copied = Vec::new();
        frame::append_record(&mut copied, b"copied");
        let mut scatter = Scatter::new(&dir.join("buckets"), 1 << 30, 0);
        scatter.put_mapped(30, &map, second..bytes.len()).unwrap();
        scatter.put(20, &copied).unwrap();
        scatter.put_mapped(10, &map, 0..second).unwrap();
        let Scattered::Memory(held) = scatter.finish().unwrap() else {
            panic!("spilled");
        };
        assert_eq!(held.maps.len(), 1, "one map per file");
        let got: Vec<&[u8]> = held
            .entries
            .iter()
            .map(|&(_, loc)| held.record(loc).unwrap())
            .collect();
        assert_eq!(got, [&bytes[..second], &copied[..], &bytes[second..]]);
        // A header overwritten in place (the size and time may even look the same) is
        // caught when the record is read, not copied out as garbage.
        use std::io::{Seek, SeekFrom};
        let mut file = fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.seek(SeekFrom::Start(second as u64)).unwrap();
        file.write_all(&[0xff; 4]).unwrap();
        drop(file);
        let err = held.record(held.entries[2].1).unwrap_err().to_string();
        assert!(
            err.starts_with("in.tfrecord: changed during the run: the record at byte 27"),
            "{err}"
        );
    }
}
