//! Deflate in parallel over fixed-size chunks of the record stream.
//!
//! The stream is cut into chunks of [`CHUNK_BYTES`] uncompressed bytes (and at the sync
//! points the shard writer asks for, which depend only on the data), so the bytes never
//! depend on how many threads compress them:
//! - gzip: each chunk is its own gzip member, as BGZF does, compressed by libdeflate at
//!   level 6 (TensorFlow, Python's `gzip`, Java and Go read concatenated members);
//! - zlib: one stream; each chunk is raw deflate primed with the previous 32 KiB of the
//!   stream and ended by a sync flush, as pigz does, by zlib-rs at level 6 (libdeflate
//!   only compresses whole buffers into final blocks, which cannot be chained).
//!
//! The back-ends were picked by measurement (`examples/deflate_backends.rs`, in
//! docs/performance.md). Chunks go to a [`DeflatePool`] when one is given, else compress on the
//! calling thread; either way they are written in order.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::Arc;

use crossbeam_channel::{bounded, Receiver, Sender};
use flate2::{Compress, FlushCompress};

/// The deflate level we write (zlib's default, as TensorFlow's writer uses).
pub const LEVEL: u32 = 6;

/// Uncompressed bytes per chunk. Fixed: the bytes on disk depend on it. 512 KiB was the
/// fastest size measured for libdeflate at level 6 (the input and its hash tables stay
/// in cache), and costs under 0.1% in size against 4 MiB.
pub const CHUNK_BYTES: usize = 512 << 10;

/// The window deflate may reach back into: a zlib chunk is primed with this much of the
/// stream before it.
const WINDOW_BYTES: usize = 32 << 10;

/// At most this many chunks of one stream in flight per pool thread (their input and
/// output buffers are the encoder's memory: 2 × threads × ~1 MiB).
const IN_FLIGHT_PER_THREAD: usize = 2;

/// A gzip member's header and trailer (10 + 8 bytes).
pub(crate) const GZIP_OVERHEAD: u64 = 18;

/// How chunks are framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// Each chunk a gzip member.
    Gzip,
    /// Chunks of one zlib stream.
    Zlib,
}

/// One thread's compressors, reused from chunk to chunk.
#[derive(Default)]
struct Deflater {
    libdeflate: Option<libdeflater::Compressor>,
}

/// A compressed chunk, and the buffers it came in (returned for reuse).
struct Done {
    input: Vec<u8>,
    output: io::Result<Vec<u8>>,
}

struct Job {
    format: Format,
    /// The 32 KiB before the chunk (zlib), or empty.
    window: Vec<u8>,
    input: Vec<u8>,
    output: Vec<u8>,
    reply: Sender<Done>,
}

impl Deflater {
    fn compress(
        &mut self,
        format: Format,
        window: &[u8],
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        out.clear();
        match format {
            Format::Gzip => {
                let c = self.libdeflate.get_or_insert_with(|| {
                    let level =
                        libdeflater::CompressionLvl::new(LEVEL as i32).expect("6 is a valid level");
                    libdeflater::Compressor::new(level)
                });
                out.resize(c.gzip_compress_bound(input.len()), 0);
                let n = c
                    .gzip_compress(input, out)
                    .map_err(|e| io::Error::other(format!("libdeflate: {e:?}")))?;
                out.truncate(n);
            }
            Format::Zlib => {
                // A fresh compressor per chunk (its ~370 KB of tables are zeroed, 0.4% of
                // the chunk's time): a reset one keeps stale match history that changes
                // the output (seen with zlib-rs 0.6.8 on the standard table), and the
                // bytes must not depend on which chunks a thread compressed before.
                let mut c = Compress::new(flate2::Compression::new(LEVEL), false);
                if !window.is_empty() {
                    c.set_dictionary(window).map_err(io::Error::other)?;
                }
                // Room for the worst case, so one call takes it all: zlib's output does
                // not depend on the room it is given, unless a sync flush runs out of it
                // (then a second call would add another sync marker).
                out.reserve(input.len() + input.len() / 999 + 64);
                c.compress_vec(input, out, FlushCompress::Sync)
                    .map_err(io::Error::other)?;
                if c.total_in() as usize != input.len() || out.len() == out.capacity() {
                    return Err(io::Error::other("zlib-rs: a chunk outgrew its bound"));
                }
            }
        }
        Ok(())
    }
}

/// Threads that compress chunks for any number of streams.
pub struct DeflatePool {
    jobs: Sender<Job>,
    threads: usize,
}

impl DeflatePool {
    /// Starts `threads` compressing threads; they end when the pool is dropped.
    ///
    /// # Errors
    ///
    /// The OS refused a thread.
    pub fn new(threads: usize) -> io::Result<Arc<DeflatePool>> {
        let threads = threads.max(1);
        let (jobs, rx) = bounded::<Job>(threads * IN_FLIGHT_PER_THREAD * 4);
        for i in 0..threads {
            let rx: Receiver<Job> = rx.clone();
            std::thread::Builder::new()
                .name(format!("tfshard-deflate-{i}"))
                .spawn(move || {
                    let mut deflater = Deflater::default();
                    for mut job in rx {
                        let output = deflater
                            .compress(job.format, &job.window, &job.input, &mut job.output)
                            .map(|()| job.output);
                        // The stream gave up waiting (its run failed): nothing to do.
                        let _ = job.reply.send(Done {
                            input: job.input,
                            output,
                        });
                    }
                })?;
        }
        Ok(Arc::new(DeflatePool { jobs, threads }))
    }
}

impl std::fmt::Debug for DeflatePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeflatePool({} threads)", self.threads)
    }
}

/// A deflate stream in chunks: collects bytes, compresses full chunks (on the pool, or
/// here), and writes them in order.
pub(crate) struct Chunks {
    format: Format,
    pool: Option<Arc<DeflatePool>>,
    local: Deflater,
    /// The chunk being filled.
    pending: Vec<u8>,
    /// The last 32 KiB of the stream before `pending` (zlib).
    window: Vec<u8>,
    in_flight: VecDeque<Receiver<Done>>,
    /// Adler-32 of every byte (zlib).
    adler: u32,
    /// Chunks written (a gzip stream without one still needs an empty member).
    chunks: u64,
    spare: Vec<Vec<u8>>,
}

impl Chunks {
    pub(crate) fn new(format: Format, pool: Option<Arc<DeflatePool>>) -> Chunks {
        Chunks {
            format,
            pool,
            local: Deflater::default(),
            pending: Vec::new(),
            window: Vec::new(),
            in_flight: VecDeque::new(),
            adler: 1,
            chunks: 0,
            spare: Vec::new(),
        }
    }

    /// The stream's header (zlib: `78 9c`, level 6 with a 32 KiB window; gzip members
    /// carry their own).
    pub(crate) fn start(&self, out: &mut impl Write) -> io::Result<()> {
        match self.format {
            Format::Gzip => Ok(()),
            Format::Zlib => out.write_all(&[0x78, 0x9c]),
        }
    }

    pub(crate) fn write(&mut self, mut data: &[u8], out: &mut impl Write) -> io::Result<()> {
        while !data.is_empty() {
            if self.pending.capacity() == 0 {
                self.pending = self.spare.pop().unwrap_or_default();
                self.pending.clear();
                self.pending.reserve_exact(CHUNK_BYTES);
            }
            let take = (CHUNK_BYTES - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending.len() == CHUNK_BYTES {
                self.submit(out)?;
            }
        }
        Ok(())
    }

    /// Ends the pending chunk early and writes every chunk: all bytes so far reach `out`.
    pub(crate) fn flush(&mut self, out: &mut impl Write) -> io::Result<()> {
        if !self.pending.is_empty() {
            self.submit(out)?;
        }
        while !self.in_flight.is_empty() {
            self.write_oldest(out)?;
        }
        Ok(())
    }

    /// Flushes, then writes the stream's end.
    pub(crate) fn finish(&mut self, out: &mut impl Write) -> io::Result<()> {
        if self.format == Format::Gzip && self.chunks == 0 && self.pending.is_empty() {
            // An empty stream is still one (empty) member.
            self.submit(out)?;
        }
        self.flush(out)?;
        if self.format == Format::Zlib {
            // A final, empty fixed-Huffman block, then the Adler-32 of all data.
            out.write_all(&[0x03, 0x00])?;
            out.write_all(&self.adler.to_be_bytes())?;
        }
        Ok(())
    }

    fn submit(&mut self, out: &mut impl Write) -> io::Result<()> {
        let input = std::mem::take(&mut self.pending);
        self.chunks += 1;
        let window = match self.format {
            Format::Gzip => Vec::new(),
            Format::Zlib => {
                self.adler = zlib_rs::adler32::adler32(self.adler, &input);
                let window = self.window.clone();
                // The next chunk's window: the last 32 KiB of the stream so far.
                if input.len() >= WINDOW_BYTES {
                    self.window.clear();
                } else {
                    let keep = WINDOW_BYTES - input.len();
                    self.window.drain(..self.window.len().saturating_sub(keep));
                }
                let start = input.len().saturating_sub(WINDOW_BYTES);
                self.window.extend_from_slice(&input[start..]);
                window
            }
        };
        let Some(pool) = self.pool.clone() else {
            let mut output = self.spare.pop().unwrap_or_default();
            self.local
                .compress(self.format, &window, &input, &mut output)?;
            out.write_all(&output)?;
            self.spare.push(output);
            self.spare.push(input);
            return Ok(());
        };
        let limit = pool.threads * IN_FLIGHT_PER_THREAD;
        while self.in_flight.len() >= limit {
            self.write_oldest(out)?;
        }
        let (reply, rx) = bounded(1);
        let job = Job {
            format: self.format,
            window,
            input,
            output: self.spare.pop().unwrap_or_default(),
            reply,
        };
        pool.jobs
            .send(job)
            .map_err(|_| io::Error::other("the deflate threads have stopped"))?;
        self.in_flight.push_back(rx);
        Ok(())
    }

    fn write_oldest(&mut self, out: &mut impl Write) -> io::Result<()> {
        let rx = self
            .in_flight
            .pop_front()
            .expect("called with a chunk in flight");
        let done = rx
            .recv()
            .map_err(|_| io::Error::other("a deflate thread stopped"))?;
        let output = done.output?;
        out.write_all(&output)?;
        // Keep every buffer in circulation: a fresh one is a fresh mapping, and page
        // faults on each chunk (measured: a quarter of a core).
        if self.spare.len() < 2 * (self.in_flight.len() + 2) {
            self.spare.push(output);
            self.spare.push(done.input);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(
        format: Format,
        pool: Option<Arc<DeflatePool>>,
        data: &[u8],
        cuts: &[usize],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        let mut c = Chunks::new(format, pool);
        c.start(&mut out).unwrap();
        let mut at = 0;
        for &cut in cuts.iter().chain([&data.len()]) {
            c.write(&data[at..cut], &mut out).unwrap();
            c.flush(&mut out).unwrap();
            at = cut;
        }
        c.finish(&mut out).unwrap();
        out
    }

    fn data(n: usize) -> Vec<u8> {
        let mut x = 7u32;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                if i % 3 == 0 {
                    x as u8
                } else {
                    (i / 97) as u8
                }
            })
            .collect()
    }

    #[test]
    fn same_bytes_on_any_thread_count_and_a_valid_stream() {
        let data = data(3 * CHUNK_BYTES + 12_345);
        let cuts = [10, 40_000, CHUNK_BYTES + 7, 2 * CHUNK_BYTES];
        for format in [Format::Gzip, Format::Zlib] {
            let inline = stream(format, None, &data, &cuts);
            for threads in [1, 3] {
                let pool = DeflatePool::new(threads).unwrap();
                assert_eq!(
                    stream(format, Some(pool), &data, &cuts),
                    inline,
                    "{format:?}"
                );
            }
            let mut back = Vec::new();
            use std::io::Read;
            match format {
                Format::Gzip => flate2::read::MultiGzDecoder::new(&inline[..])
                    .read_to_end(&mut back)
                    .unwrap(),
                Format::Zlib => flate2::read::ZlibDecoder::new(&inline[..])
                    .read_to_end(&mut back)
                    .unwrap(),
            };
            assert_eq!(back, data, "{format:?}");
            assert!(
                inline.len() as u64 <= super::super::compress::compressed_bound(data.len() as u64)
            );
        }
    }
}
