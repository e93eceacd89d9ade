//! The write-time global shuffle: a two-pass external sort with bounded memory.
//!
//! Records are ordered by a seeded 64-bit hash of their global input index (a bijection,
//! so there are no ties; ties would go by index). Pass 1 ([`Scatter`]) appends each
//! framed record to the bucket file that owns its hash range. Pass 2 ([`gather`]) takes
//! the buckets in hash order, sorts each one in memory and writes it out; a bucket
//! larger than half the memory budget is first split again by its hash sub-ranges. The
//! order is a function of the hashes alone, so the bytes do not depend on the number of
//! buckets, the memory budget, the temporary folder or the threads.

use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::shard::ShardWriter;

/// Bucket files written at once (each with a small write buffer).
const MAX_BUCKETS: usize = 512;
/// Write buffer per bucket file.
const BUCKET_BUFFER: usize = 32 << 10;
/// How often an oversized bucket is split again before it is sorted regardless.
const MAX_DEPTH: u32 = 6;
/// Sub-buckets per split of an oversized bucket.
const FANOUT: u128 = 16;
/// Records gathered per parallel block, and per window of blocks held at once.
const GATHER_BLOCK: usize = 8192;
const GATHER_WINDOW: usize = 16 * GATHER_BLOCK;
/// Entry header: hash, index, framed length.
const ENTRY_HEADER: usize = 8 + 8 + 4;

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

/// Pass 1: records into bucket files by hash range. While they fit in half the memory
/// budget they stay in memory, and no file is written at all.
pub struct Scatter {
    dir: PathBuf,
    memory: u64,
    estimated_bytes: u64,
    /// Records kept in memory: their bytes, and (hash, index, start, len) of each.
    held: Option<(Vec<u8>, Vec<Entry>)>,
    buckets: Vec<(Bucket, BufWriter<File>)>,
}

/// (hash, global index, start, len) of one framed record in a buffer.
type Entry = (u64, u64, usize, usize);

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

fn put_entry(w: &mut impl Write, hash: u64, index: u64, framed: &[u8]) -> std::io::Result<()> {
    let mut header = [0u8; ENTRY_HEADER];
    header[..8].copy_from_slice(&hash.to_le_bytes());
    header[8..16].copy_from_slice(&index.to_le_bytes());
    header[16..].copy_from_slice(&(framed.len() as u32).to_le_bytes());
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
            held: Some((
                Vec::with_capacity(reserve),
                Vec::with_capacity(reserve / 128),
            )),
            buckets: Vec::new(),
        }
    }

    /// Moves the records held in memory into bucket files.
    fn spill(&mut self) -> Result<()> {
        fs::create_dir_all(&self.dir).map_err(io_at(&self.dir))?;
        let (data, entries) = self.held.take().unwrap_or_default();
        let expected = self.estimated_bytes.max(2 * data.len() as u64);
        let count = (expected / (self.memory / 2).max(1) + 1).clamp(1, MAX_BUCKETS as u64);
        self.buckets = open_buckets(&self.dir, "bucket", 0, 1 << 64, u128::from(count))?;
        for (hash, index, start, len) in entries {
            self.put_on_disk(hash, index, &data[start..start + len])?;
        }
        Ok(())
    }

    fn put_on_disk(&mut self, hash: u64, index: u64, framed: &[u8]) -> Result<()> {
        let n = self.buckets.len();
        let (bucket, w) = &mut self.buckets[bucket_of(hash, 0, 1 << 64, n)];
        put_entry(w, hash, index, framed).map_err(io_at(&bucket.path))
    }

    /// Adds one framed record with its order hash and global index.
    ///
    /// # Errors
    ///
    /// An I/O error naming the bucket file.
    pub fn put(&mut self, hash: u64, index: u64, framed: &[u8]) -> Result<()> {
        let budget = (self.memory / 2) as usize;
        if let Some((data, entries)) = self.held.as_mut() {
            // Each entry also costs its 32-byte index slot.
            if data.len() + framed.len() + 32 * (entries.len() + 1) <= budget {
                entries.push((hash, index, data.len(), framed.len()));
                data.extend_from_slice(framed);
                return Ok(());
            }
            self.spill()?;
        }
        self.put_on_disk(hash, index, framed)
    }

    /// Closes the bucket files (or sorts what stayed in memory).
    ///
    /// # Errors
    ///
    /// An I/O error naming the bucket file.
    pub fn finish(self) -> Result<Scattered> {
        if let Some((data, mut entries)) = self.held {
            entries.sort_unstable_by_key(|&(hash, index, _, _)| (hash, index));
            return Ok(Scattered::Memory { data, entries });
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
#[derive(Debug, Clone)]
pub enum Scattered {
    /// Everything fit in half the budget.
    Memory {
        /// The framed records.
        data: Vec<u8>,
        /// Sorted by (hash, index).
        entries: Vec<Entry>,
    },
    /// Bucket files.
    Disk {
        /// In hash order.
        buckets: Vec<Bucket>,
        /// The memory budget.
        memory: u64,
    },
}

/// Pass 2: every record, in (hash, index) order, into `writer`. Can run more than once
/// (the `--min-shards` second pass).
///
/// # Errors
///
/// An I/O error, or a bucket file that does not hold what pass 1 wrote.
pub fn gather(scattered: &Scattered, writer: &mut ShardWriter) -> Result<()> {
    match scattered {
        Scattered::Memory { data, entries } => {
            // Reading records in hash order is a random walk over the buffer (cache
            // misses): gather runs of them into contiguous blocks on every core, then
            // write the blocks in order.
            use rayon::prelude::*;
            for window in entries.chunks(GATHER_WINDOW) {
                let blocks: Vec<(Vec<u8>, Vec<u64>)> = window
                    .par_chunks(GATHER_BLOCK)
                    .map(|run| {
                        let bytes = run.iter().map(|e| e.3).sum();
                        let mut block = Vec::with_capacity(bytes);
                        let mut sizes = Vec::with_capacity(run.len());
                        for &(_, _, start, len) in run {
                            block.extend_from_slice(&data[start..start + len]);
                            sizes.push(len as u64);
                        }
                        (block, sizes)
                    })
                    .collect();
                for (block, sizes) in blocks {
                    writer.write_batch(&block, &sizes)?;
                }
            }
        }
        Scattered::Disk { buckets, memory } => {
            for bucket in buckets {
                emit(bucket, *memory, writer, 0)?;
            }
        }
    }
    Ok(())
}

/// (hash, index, framed length) from an entry's header.
fn entry_header(header: &[u8; ENTRY_HEADER]) -> (u64, u64, usize) {
    let word = |at: usize| u64::from_le_bytes(std::array::from_fn(|k| header[at + k]));
    let len = u32::from_le_bytes(std::array::from_fn(|k| header[16 + k]));
    (word(0), word(8), len as usize)
}

/// Entries of a bucket file: (hash, index, start, len) of each framed record in `bytes`.
fn entries(bucket: &Bucket, bytes: &[u8]) -> Result<Vec<Entry>> {
    let corrupt = || {
        Error::from(std::io::Error::other("a shuffle bucket file is damaged"))
            .with_file(&bucket.path)
    };
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let header = bytes.get(pos..pos + ENTRY_HEADER).ok_or_else(corrupt)?;
        let (hash, index, len) = entry_header(header.try_into().expect("sliced to ENTRY_HEADER"));
        let start = pos + ENTRY_HEADER;
        if start + len > bytes.len() {
            return Err(corrupt());
        }
        out.push((hash, index, start, len));
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
            let (hash, index, len) = entry_header(&header);
            record.resize(len, 0);
            reader
                .read_exact(&mut record)
                .map_err(io_at(&bucket.path))?;
            let i = bucket_of(hash, bucket.lo, bucket.hi, subs.len());
            let (sub, w) = &mut subs[i];
            put_entry(w, hash, index, &record).map_err(io_at(&sub.path))?;
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
    order.sort_unstable_by_key(|&(hash, index, _, _)| (hash, index));
    for (_, _, start, len) in order {
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
}
