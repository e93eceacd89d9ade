//! A Parquet file in a store: the footer through parquet's async interface (our own
//! `AsyncFileReader`, one ranged request at the end of the object), then each row
//! group's selected column chunks, read ahead within a byte budget: fetched whole when
//! they fit, else streamed to parquet's decoder in pieces, the next fetched while it
//! decodes ([`RemoteChunks`]). Every request is pinned to the ETag the listing saw.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::future::{BoxFuture, FutureExt};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use super::{get_range, Blob, Listed};
use crate::error::{Error, ErrorKind};

/// Bytes per request when a column chunk is fetched in pieces (at least; less than
/// twice as many).
const PIECE_BYTES: u64 = 8 << 20;
/// The footer is read with one request for the last 64 KiB (most footers fit).
const FOOTER_HINT: usize = 64 << 10;

/// One Parquet object.
#[derive(Debug, Clone)]
pub(crate) struct RemoteParquet {
    object: Listed,
}

impl RemoteParquet {
    pub(crate) fn new(object: Listed) -> RemoteParquet {
        RemoteParquet { object }
    }
}

fn external(e: Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

/// The requests a range is fetched in: even pieces of one to two [`PIECE_BYTES`] (a
/// range just above one piece is one request, not a piece and a sliver), or one.
fn pieces_of(range: Range<u64>) -> Vec<Range<u64>> {
    let len = range.end.saturating_sub(range.start);
    let step = len.div_ceil((len / PIECE_BYTES).max(1)).max(1);
    (range.start..range.end)
        .step_by(step as usize)
        .map(|start| start..(start + step).min(range.end))
        .collect()
}

impl RemoteParquet {
    async fn fetch(&self, range: Range<u64>) -> parquet::errors::Result<Bytes> {
        self.fetch_bytes(range).await.map_err(external)
    }

    /// Bytes `range` of the object, pinned to its ETag; a range of two [`PIECE_BYTES`]
    /// or more as parallel pieces, each copied into one anonymous map as it arrives.
    async fn fetch_bytes(&self, range: Range<u64>) -> crate::error::Result<Bytes> {
        let len = range.end.saturating_sub(range.start);
        if range.end > self.object.size {
            return Err(Error::from(ParquetError::EOF(format!(
                "a read of bytes {}..{} runs past the end of the object ({} bytes)",
                range.start, range.end, self.object.size
            ))));
        }
        let etag = self.object.etag.as_deref();
        let pieces = pieces_of(range.clone());
        if pieces.len() <= 1 {
            return get_range(&self.object.url, range, etag).await;
        }
        // A large chunk: pieces in parallel (the permits bound them).
        let mut whole = memmap2::MmapMut::map_anon(len as usize)
            .map_err(|e| Error::from(e).with_file(self.object.url.to_path()))?;
        let mut pieces: futures_util::stream::FuturesUnordered<_> = pieces
            .into_iter()
            .map(|piece| {
                let start = piece.start;
                let (at, want) = ((start - range.start) as usize, (piece.end - start) as usize);
                get_range(&self.object.url, piece, etag).map(move |r| r.map(|b| (at, want, b)))
            })
            .collect();
        while let Some(piece) = futures_util::StreamExt::next(&mut pieces).await {
            let (at, want, bytes) = piece?;
            if bytes.len() != want {
                return Err(Error::from(std::io::Error::other(format!(
                    "the store sent {} of the {want} bytes asked",
                    bytes.len()
                )))
                .with_file(self.object.url.to_path()));
            }
            whole[at..at + want].copy_from_slice(&bytes);
        }
        let whole = whole
            .make_read_only()
            .map_err(|e| Error::from(e).with_file(self.object.url.to_path()))?;
        Ok(Bytes::from_owner(whole))
    }
}

impl AsyncFileReader for RemoteParquet {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move { self.fetch(range).await }.boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            let this = &*self;
            futures_util::future::try_join_all(ranges.into_iter().map(|r| this.fetch(r))).await
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let mut reader = ParquetMetaDataReader::new().with_prefetch_hint(Some(FOOTER_HINT));
            if let Some(options) = options {
                reader = reader
                    .with_column_index_policy(options.column_index_policy())
                    .with_offset_index_policy(options.offset_index_policy())
                    .with_metadata_options(Some(options.metadata_options().clone()));
            }
            let size = self.object.size;
            let metadata = reader.load_and_finish(&mut *self, size).await?;
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}

/// Pieces of a streamed column chunk fetched or in flight at once: the one being
/// decoded and the next, fetched while it decodes.
const PIECES_AHEAD: usize = 2;
/// The smallest piece a chunk streams in (or its even share of the budget, if smaller:
/// so a row group holds at most twice the budget): requests cost (stores advise 8–16 MB
/// ranges), so a chunk with a small share of the budget still fetches a MiB at a time.
const MIN_PIECE_BYTES: u64 = 1 << 20;

/// Fetches a byte range of the object (a ranged GET in production, bytes in memory in
/// the unit tests).
pub(crate) type Fetch =
    Arc<dyn Fn(Range<u64>) -> BoxFuture<'static, crate::error::Result<Bytes>> + Send + Sync>;

/// The selected column chunks of one row group of a Parquet object, as parquet's
/// decoder reads them: page headers and pages, front to back within each chunk. Chunks
/// that fit the budget together are fetched whole, at once, adjacent ones in one request
/// ([`start_coalesced`]), and kept until the chunks go. Otherwise each chunk
/// streams in pieces sized from its share of the budget, the next piece fetched while
/// the decoder works on the one before, and a piece dropped once read past. So memory
/// is bounded by bytes, whatever the row group's size, and the network runs ahead of
/// the decoder. A page larger than its chunk's pieces is fetched whole when read, as
/// the local reader reads it.
pub(crate) struct RemoteChunks(Arc<Chunks>);

struct Chunks {
    size: u64,
    fetch: Fetch,
    streams: std::sync::Mutex<Vec<Stream>>,
    held: Arc<Held>,
    /// The first failed read's error: the decoder passes errors on as text, and the
    /// run reports this one (a store problem keeps its kind).
    failed: std::sync::Mutex<Option<Error>>,
}

/// Bytes fetched or in flight, and the most at once (for the tests' bound).
#[derive(Debug, Default)]
pub(crate) struct Held {
    now: std::sync::atomic::AtomicU64,
    peak: std::sync::atomic::AtomicU64,
}

impl Held {
    fn add(&self, n: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let now = self.now.fetch_add(n, Relaxed) + n;
        self.peak.fetch_max(now, Relaxed);
    }

    fn sub(&self, n: u64) {
        self.now.fetch_sub(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// The most bytes held at once so far.
    #[cfg(test)]
    pub(crate) fn peak(&self) -> u64 {
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// One column chunk's bytes `range`, streamed.
struct Stream {
    range: Range<u64>,
    piece: u64,
    /// Pieces fetched or in flight at once.
    ahead: usize,
    /// Fetched or in flight, contiguous and in order, ending at `next`.
    pieces: std::collections::VecDeque<Piece>,
    /// The first byte not yet asked for.
    next: u64,
    /// Pieces stay until the chunks go, not dropped once read past: the whole row group
    /// fits the budget, and a reader reopened on it reads it again from memory.
    keep: bool,
}

struct Piece {
    range: Range<u64>,
    data: PieceData,
    held: Arc<Held>,
    /// The bytes this piece counts in `held` (none for a slice of a coalesced fetch:
    /// the fetch counts its whole range until its last slice goes).
    counted: u64,
}

enum PieceData {
    Fetching(tokio::task::JoinHandle<crate::error::Result<Bytes>>),
    Ready(Bytes),
    /// Its fetch failed (the error went to the read that waited for it).
    Failed,
}

impl Drop for Piece {
    fn drop(&mut self) {
        if let PieceData::Fetching(handle) = &self.data {
            handle.abort();
        }
        self.held.sub(self.counted);
    }
}

impl Piece {
    fn start(range: Range<u64>, fetch: &Fetch, held: &Arc<Held>) -> Piece {
        held.add(range.end - range.start);
        Piece {
            data: PieceData::Fetching(super::spawn(fetch(range.clone()))),
            counted: range.end - range.start,
            range,
            held: held.clone(),
        }
    }

    /// The piece's bytes, waiting for them if they are still in flight.
    fn bytes(&mut self) -> crate::error::Result<&Bytes> {
        if matches!(self.data, PieceData::Fetching(_)) {
            let PieceData::Fetching(handle) = std::mem::replace(&mut self.data, PieceData::Failed)
            else {
                unreachable!("matched just above")
            };
            let bytes =
                super::block_on(handle).map_err(|e| Error::from(std::io::Error::other(e)))??;
            if bytes.len() as u64 != self.range.end - self.range.start {
                return Err(Error::from(std::io::Error::other(format!(
                    "bytes {}..{}: the store sent {} bytes",
                    self.range.start,
                    self.range.end,
                    bytes.len()
                ))));
            }
            self.data = PieceData::Ready(bytes);
        }
        match &self.data {
            PieceData::Ready(bytes) => Ok(bytes),
            _ => Err(Error::from(std::io::Error::other(format!(
                "bytes {}..{}: an earlier read of them failed",
                self.range.start, self.range.end
            )))),
        }
    }
}

/// Column chunks at most this far apart are fetched in one request when their row group
/// is fetched whole (`object_store`'s `get_ranges` coalesces within 1 MiB too): a row
/// group's chunks are usually adjacent, and each request costs more than a small gap's
/// bytes (stores bill each GET and answer each after a first-byte delay; moto reads the
/// whole object for every ranged GET).
const COALESCE_GAP: u64 = 1 << 20;

/// Bytes of one request that joins chunks at most: two pieces. A row group of one chunk
/// just within a piece and the small chunks beside it (the standard table's) then comes
/// in one request, not two.
const COALESCE_BYTES: u64 = 2 * PIECE_BYTES;

/// Starts the fetches of a row group fetched whole (each stream one piece): chunks within
/// [`COALESCE_GAP`] of each other in one request whose bytes their pieces share, the
/// gaps taken from `spare`, what the budget leaves. A request stays within
/// [`COALESCE_BYTES`].
fn start_coalesced(streams: &mut [Stream], mut spare: u64, fetch: &Fetch, held: &Arc<Held>) {
    let mut order: Vec<usize> = (0..streams.len())
        .filter(|&i| !streams[i].range.is_empty())
        .collect();
    order.sort_by_key(|&i| streams[i].range.start);
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut end = 0;
    for i in order {
        let range = &streams[i].range;
        match groups.last_mut() {
            Some(group)
                if range.start >= end
                    && range.start - end <= COALESCE_GAP.min(spare)
                    && range.end - streams[group[0]].range.start <= COALESCE_BYTES =>
            {
                spare -= range.start - end;
                group.push(i);
            }
            _ => groups.push(vec![i]),
        }
        end = range.end;
    }
    for group in groups.into_iter().filter(|g| g.len() > 1) {
        let last = group[group.len() - 1];
        let whole = streams[group[0]].range.start..streams[last].range.end;
        let shared = coalesced_fetch(whole.clone(), fetch, held);
        for i in group {
            let stream = &mut streams[i];
            let range = stream.range.clone();
            let (from, at) = (shared.clone(), whole.start);
            let slice = (range.start - at) as usize..(range.end - at) as usize;
            let task =
                super::spawn(
                    async move { Ok(from.await.map_err(FailedFetch::take)?.slice(slice)) },
                );
            stream.pieces.push_back(Piece {
                range: range.clone(),
                data: PieceData::Fetching(task),
                held: held.clone(),
                counted: 0,
            });
            stream.next = range.end;
        }
    }
}

/// One request whose bytes several pieces share.
type SharedFetch =
    futures_util::future::Shared<BoxFuture<'static, std::result::Result<Bytes, FailedFetch>>>;

/// A shared fetch that failed: its error goes to the first piece read (the run reports
/// the first failed read's error, its kind kept), its text to the others.
#[derive(Clone)]
struct FailedFetch {
    first: Arc<std::sync::Mutex<Option<Error>>>,
    text: String,
}

impl FailedFetch {
    fn take(self) -> Error {
        let first = self.first.lock().unwrap_or_else(|p| p.into_inner()).take();
        first.unwrap_or_else(|| Error::from(std::io::Error::other(self.text)))
    }
}

/// Counts `bytes` in `held` while it lives.
struct Counted {
    held: Arc<Held>,
    bytes: u64,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.held.sub(self.bytes);
    }
}

/// Fetched bytes, counted in `held` until their last slice goes.
struct CountedBytes {
    bytes: Bytes,
    _counted: Counted,
}

impl AsRef<[u8]> for CountedBytes {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Aborts a task when dropped: every piece of a shared fetch went before it ended.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Fetches `range` once for the pieces that share it, counted in `held` from now until
/// the last of them lets go of its bytes.
fn coalesced_fetch(range: Range<u64>, fetch: &Fetch, held: &Arc<Held>) -> SharedFetch {
    let len = range.end - range.start;
    held.add(len);
    let counted = Counted {
        held: held.clone(),
        bytes: len,
    };
    let mut task = AbortOnDrop(super::spawn(fetch(range.clone())));
    async move {
        let fetched = match (&mut task.0).await {
            Ok(Ok(bytes)) if bytes.len() as u64 == len => Ok(bytes),
            Ok(Ok(bytes)) => Err(Error::from(std::io::Error::other(format!(
                "bytes {}..{}: the store sent {} bytes",
                range.start,
                range.end,
                bytes.len()
            )))),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(Error::from(std::io::Error::other(e))),
        };
        match fetched {
            Ok(bytes) => Ok(Bytes::from_owner(CountedBytes {
                bytes,
                _counted: counted,
            })),
            Err(e) => Err(FailedFetch {
                text: e.to_string(),
                first: Arc::new(std::sync::Mutex::new(Some(e))),
            }),
        }
    }
    .boxed()
    .shared()
}

impl Stream {
    /// Keeps [`PIECES_AHEAD`] pieces fetched or in flight.
    fn top_up(&mut self, fetch: &Fetch, held: &Arc<Held>) {
        while self.pieces.len() < self.ahead && self.next < self.range.end {
            let end = (self.next + self.piece).min(self.range.end);
            self.pieces
                .push_back(Piece::start(self.next..end, fetch, held));
            self.next = end;
        }
    }

    /// Bytes `range` (inside the chunk); with `consume`, the pieces before its end go.
    fn read(
        &mut self,
        range: Range<u64>,
        consume: bool,
        fetch: &Fetch,
        held: &Arc<Held>,
    ) -> crate::error::Result<Bytes> {
        let covered = self.pieces.front().map_or(self.next, |p| p.range.start);
        if range.start < covered {
            // Behind the stream (the decoder does not read back): one request.
            return super::block_on(fetch(range));
        }
        if range.start > self.next {
            // A skip (pages a row selection passes over): the stream restarts there.
            self.pieces.clear();
            self.next = range.start;
        }
        self.pieces.retain(|p| p.range.end > range.start);
        self.top_up(fetch, held);
        if range.end > self.next {
            // A page larger than the pieces ahead: the rest of it in one fetch.
            self.pieces
                .push_back(Piece::start(self.next..range.end, fetch, held));
            self.next = range.end;
        }
        let mut parts = Vec::new();
        for piece in self.pieces.iter_mut() {
            if piece.range.start >= range.end {
                break;
            }
            let from = range.start.max(piece.range.start);
            let to = range.end.min(piece.range.end);
            let start = piece.range.start;
            let bytes = piece.bytes()?;
            parts.push(bytes.slice((from - start) as usize..(to - start) as usize));
        }
        let out = match parts.len() {
            1 => parts.pop().expect("one part"),
            _ => {
                let mut whole = BytesMut::with_capacity((range.end - range.start) as usize);
                for p in &parts {
                    whole.extend_from_slice(p);
                }
                whole.freeze()
            }
        };
        if consume && !self.keep {
            self.pieces.retain(|p| p.range.end > range.end);
            self.top_up(fetch, held);
        }
        Ok(out)
    }
}

impl RemoteChunks {
    /// The column chunks `ranges` (byte ranges of the object) of one row group, their
    /// first pieces fetched at once.
    pub(crate) fn new(
        size: u64,
        ranges: Vec<Range<u64>>,
        budget: u64,
        ahead: usize,
        fetch: Fetch,
    ) -> RemoteChunks {
        let held = Arc::new(Held::default());
        let total: u64 = ranges.iter().map(|r| r.end - r.start).sum::<u64>().max(1);
        let chunks = ranges.len();
        let mut streams = ranges
            .into_iter()
            .map(|range| {
                let len = range.end - range.start;
                let (piece, ahead) = if total <= budget {
                    // The whole row group fits: every chunk in one piece, fetched now.
                    (len.max(1), 1)
                } else {
                    // A chunk's share of the budget, split among its pieces ahead.
                    let share = (budget as u128 * len as u128 / total as u128) as u64;
                    let smallest = MIN_PIECE_BYTES
                        .min(budget / (ahead * chunks.max(1)) as u64)
                        .max(1);
                    ((share / ahead as u64).max(smallest), ahead)
                };
                Stream {
                    next: range.start,
                    range,
                    piece,
                    ahead,
                    pieces: Default::default(),
                    keep: total <= budget,
                }
            })
            .collect::<Vec<_>>();
        if total <= budget {
            start_coalesced(&mut streams, budget - total, &fetch, &held);
        }
        for stream in &mut streams {
            stream.top_up(&fetch, &held);
        }
        RemoteChunks(Arc::new(Chunks {
            size,
            fetch,
            streams: std::sync::Mutex::new(streams),
            held,
            failed: Default::default(),
        }))
    }

    /// The error of the first read that failed, once.
    pub(crate) fn take_error(&self) -> Option<Error> {
        self.0
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// Another handle to the same chunks.
    pub(crate) fn handle(&self) -> RemoteChunks {
        RemoteChunks(self.0.clone())
    }

    /// For an object in a store, every request pinned to its listed ETag, within
    /// the read-ahead budget of its settings ([`IoOptions::read_ahead_bytes`](super::IoOptions::read_ahead_bytes)).
    pub(crate) fn for_object(object: &Listed, ranges: Vec<Range<u64>>) -> RemoteChunks {
        let reader = RemoteParquet::new(object.clone());
        let fetch: Fetch = Arc::new(move |range| {
            let reader = reader.clone();
            async move { reader.fetch_bytes(range).await }.boxed()
        });
        let budget = object.url.io().read_ahead_bytes;
        RemoteChunks::new(object.size, ranges, budget, PIECES_AHEAD, fetch)
    }

    /// Whether these are the column chunks `ranges` and every byte of them is held or
    /// in flight (the row group fit the budget; no fetch failed), so that another reader
    /// of the same chunks can be handed them without a request.
    pub(crate) fn holds_whole(&self, ranges: &[Range<u64>]) -> bool {
        let streams = self.0.streams.lock().unwrap_or_else(|p| p.into_inner());
        streams.len() == ranges.len()
            && streams.iter().zip(ranges).all(|(s, r)| {
                s.range == *r
                    && s.keep
                    && (r.is_empty()
                        || s.pieces
                            .front()
                            .is_some_and(|p| p.range == *r && !matches!(p.data, PieceData::Failed)))
            })
    }

    /// Bytes held so far.
    #[cfg(test)]
    pub(crate) fn held(&self) -> &Held {
        &self.0.held
    }
}

impl Chunks {
    fn read(&self, range: Range<u64>, consume: bool) -> crate::error::Result<Bytes> {
        self.read_streams(range, consume).map_err(|e| {
            let text = e.to_string();
            let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            failed.get_or_insert(e);
            Error::from(std::io::Error::other(text))
        })
    }

    fn read_streams(&self, range: Range<u64>, consume: bool) -> crate::error::Result<Bytes> {
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        match streams
            .iter_mut()
            .find(|s| s.range.start <= range.start && range.end <= s.range.end)
        {
            Some(stream) => stream.read(range, consume, &self.fetch, &self.held),
            // Outside the selected chunks (nothing the decoder reads): one request.
            None => super::block_on((self.fetch)(range)),
        }
    }

    /// The end of the chunk holding byte `at`, if one does.
    fn chunk_end(&self, at: u64) -> Option<u64> {
        let streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        streams
            .iter()
            .find(|s| s.range.start <= at && at < s.range.end)
            .map(|s| s.range.end)
    }
}

impl parquet::file::reader::Length for RemoteChunks {
    fn len(&self) -> u64 {
        self.0.size
    }
}

impl parquet::file::reader::ChunkReader for RemoteChunks {
    type T = ChunkRead;

    fn get_read(&self, start: u64) -> parquet::errors::Result<ChunkRead> {
        let end = self.0.chunk_end(start).unwrap_or(self.0.size);
        Ok(ChunkRead {
            chunks: self.0.clone(),
            at: start,
            end,
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let size = self.0.size;
        let end = start
            .checked_add(length as u64)
            .filter(|&e| e <= size)
            .ok_or_else(|| {
                ParquetError::EOF(format!(
                    "a read of {length} bytes at {start} runs past the end of the object ({size} bytes)"
                ))
            })?;
        self.0.read(start..end, true).map_err(external)
    }
}

/// A page header's bytes, read through its chunk's stream (the decoder reads a header
/// a few bytes at a time). Its end is an error, as the local reader's is: a corrupt
/// header must not read the end again and again.
pub(crate) struct ChunkRead {
    chunks: Arc<Chunks>,
    at: u64,
    end: u64,
}

impl std::io::Read for ChunkRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.at >= self.end {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "a page runs past the end of its column chunk",
            ));
        }
        // At most a small read: the header is followed by its page, read with get_bytes.
        let n = (buf.len() as u64).min(self.end - self.at).min(4096);
        let bytes = self
            .chunks
            .read(self.at..self.at + n, false)
            .map_err(std::io::Error::other)?;
        buf[..bytes.len()].copy_from_slice(&bytes);
        self.at += bytes.len() as u64;
        Ok(bytes.len())
    }
}

/// One Parquet file's bytes, read through the storage that found it: the footer, then
/// each row group's column chunks. On disk, the decoder reads the file itself (a read
/// at its end an error, see `ParquetFile`); in a store, the footer comes in one ranged
/// request and the chunks through `RemoteChunks`' read-ahead, every request pinned to
/// the ETag the listing saw. Readers of Parquet ask this, never where the bytes are.
#[derive(Debug, Clone)]
pub struct ParquetBytes {
    blob: Blob,
    /// In a store: the object, as the async reader and the read-ahead take it.
    listed: Option<Listed>,
}

impl ParquetBytes {
    /// The bytes of `blob`.
    pub fn new(blob: Blob) -> ParquetBytes {
        let listed = blob.storage().listed(blob.object());
        ParquetBytes { blob, listed }
    }

    /// The file as found.
    pub fn blob(&self) -> &Blob {
        &self.blob
    }

    /// The footer, parsed (the decoder's panics are the caller's to contain). A file
    /// that ends in `PARE` is an encrypted file, reported as such.
    ///
    /// # Errors
    ///
    /// The file cannot be read; not Parquet; a corrupt or encrypted footer. A local
    /// file's errors name no file: the caller names it as its manifest does.
    pub fn footer(&self) -> Result<ArrowReaderMetadata, Error> {
        let options = ArrowReaderOptions::new();
        let loaded = match &self.listed {
            Some(object) => {
                let mut reader = RemoteParquet::new(object.clone());
                super::block_on(ArrowReaderMetadata::load_async(&mut reader, options))
            }
            None => {
                let file = ParquetFile::open(self.blob.path())?;
                ArrowReaderMetadata::load(&file, options)
            }
        };
        loaded.map_err(|e| {
            let size = self.blob.size();
            let encrypted = size >= 4
                && self
                    .blob
                    .read_range(size - 4..size)
                    .is_ok_and(|m| &m[..] == b"PARE");
            if encrypted {
                return Error::new(ErrorKind::EncryptedParquet);
            }
            from_parquet(e)
        })
    }

    /// A reader of the column chunks `ranges` (byte ranges of the file) of one row
    /// group. `reuse`, a reader of the same chunks that still holds all their bytes, is
    /// handed back instead of fetching them again.
    ///
    /// # Errors
    ///
    /// The file cannot be opened.
    pub fn chunks(
        &self,
        ranges: Vec<Range<u64>>,
        reuse: Option<ColumnChunks>,
    ) -> Result<ColumnChunks, Error> {
        Ok(ColumnChunks(match (&self.listed, reuse) {
            (Some(_), Some(ColumnChunks(Chunked::Object(chunks))))
                if chunks.holds_whole(&ranges) =>
            {
                Chunked::Object(chunks)
            }
            (Some(object), _) => Chunked::Object(RemoteChunks::for_object(object, ranges)),
            (None, _) => Chunked::File(ParquetFile::open(self.blob.path())?),
        }))
    }

    /// A reader of any column chunk apart from the others, where that costs no more
    /// than reading it with them (a file on disk); `None` where a row group's chunks
    /// are best fetched together (a store).
    pub fn column_pages(&self) -> Option<ColumnChunks> {
        match self.listed {
            Some(_) => None,
            None => ParquetFile::open(self.blob.path())
                .ok()
                .map(|f| ColumnChunks(Chunked::File(f))),
        }
    }
}

/// A Parquet error, or our own error it carries (a failed ranged read).
pub(crate) fn from_parquet(e: ParquetError) -> Error {
    match e {
        ParquetError::External(inner) => match inner.downcast::<Error>() {
            Ok(ours) => *ours,
            Err(other) => Error::from(ParquetError::External(other)),
        },
        other => Error::from(other),
    }
}

/// Column chunks of one Parquet file, as the decoder reads them ([`ParquetBytes::chunks`]).
pub struct ColumnChunks(Chunked);

enum Chunked {
    File(ParquetFile),
    Object(RemoteChunks),
}

impl ColumnChunks {
    /// The error of the first read that failed, once: the store's own error, which
    /// the decoder only saw as text.
    pub fn take_error(&self) -> Option<Error> {
        match &self.0 {
            Chunked::File(_) => None,
            Chunked::Object(chunks) => chunks.take_error(),
        }
    }

    /// Another handle to these chunks, where it is worth keeping: they hold fetched
    /// bytes the next reader of the same row group can use, and their reads' errors.
    pub fn kept(&self) -> Option<ColumnChunks> {
        match &self.0 {
            Chunked::File(_) => None,
            Chunked::Object(chunks) => Some(ColumnChunks(Chunked::Object(chunks.handle()))),
        }
    }
}

impl parquet::file::reader::Length for ColumnChunks {
    fn len(&self) -> u64 {
        match &self.0 {
            Chunked::File(file) => file.len(),
            Chunked::Object(chunks) => chunks.len(),
        }
    }
}

impl parquet::file::reader::ChunkReader for ColumnChunks {
    type T = PageRead;

    fn get_read(&self, start: u64) -> parquet::errors::Result<PageRead> {
        Ok(match &self.0 {
            Chunked::File(file) => PageRead(PageSource::File(file.get_read(start)?)),
            Chunked::Object(chunks) => PageRead(PageSource::Object(chunks.get_read(start)?)),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        match &self.0 {
            Chunked::File(file) => file.get_bytes(start, length),
            Chunked::Object(chunks) => chunks.get_bytes(start, length),
        }
    }
}

/// A page header's bytes, from either reader.
pub struct PageRead(PageSource);

enum PageSource {
    File(BufReader<EndIsError>),
    Object(ChunkRead),
}

impl Read for PageRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match &mut self.0 {
            PageSource::File(r) => r.read(buf),
            PageSource::Object(r) => r.read(buf),
        }
    }
}

/// A Parquet file as the decoder reads it, where a read at the end of the file is an
/// error rather than an empty read. arrow-rs's page-header parser skips fields it does
/// not know by reading them; a corrupt header that claims a list of 10^8 elements made
/// it read the end of the file 10^8 times, a minute of CPU for a 33 KB file (found by
/// the `parquet_convert` fuzz target). A valid file is never read at its end: the
/// footer follows every page.
struct ParquetFile {
    file: File,
    len: u64,
}

impl ParquetFile {
    /// The file at `path`; an error names no file (the caller names it as its
    /// manifest does).
    fn open(path: &Path) -> Result<ParquetFile, Error> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Ok(ParquetFile { file, len })
    }
}

impl parquet::file::reader::Length for ParquetFile {
    fn len(&self) -> u64 {
        self.len
    }
}

impl parquet::file::reader::ChunkReader for ParquetFile {
    type T = BufReader<EndIsError>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        let mut file = self.file.try_clone()?;
        file.seek(SeekFrom::Start(start))?;
        Ok(BufReader::new(EndIsError(file)))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.file.get_bytes(start, length)
    }
}

/// A file whose end is an error (see [`ParquetFile`]).
pub(crate) struct EndIsError(File);

impl Read for EndIsError {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.0.read(buf)? {
            0 if !buf.is_empty() => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "a page runs past the end of the file",
            )),
            n => Ok(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::file::reader::ChunkReader;

    /// A local file's reader gives every byte, then an error where the file ends
    /// (not an empty read, which a corrupt page header would repeat).
    #[test]
    fn a_local_file_ends_in_an_error() {
        let dir = crate::test_dir("parquet-end");
        let path = dir.join("f.bin");
        std::fs::write(&path, b"0123456789").unwrap();
        let file = ParquetFile::open(&path).unwrap();
        let mut all = Vec::new();
        let err = file.get_read(3).unwrap().read_to_end(&mut all).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
        assert_eq!(all, b"3456789", "every byte before the end");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn in_memory(data: Bytes) -> Fetch {
        Arc::new(move |range: Range<u64>| {
            let data = data.clone();
            async move { Ok(data.slice(range.start as usize..range.end as usize)) }.boxed()
        })
    }

    /// A table of one row group: `id` int64 and `blob`, 4 KiB of noise a row, 2,000 rows
    /// (8 MB in pages of about 1 MiB).
    fn blob_file() -> Bytes {
        use arrow_array::{ArrayRef, BinaryArray, Int64Array, RecordBatch};
        let mut seed = 7u64;
        let blobs: Vec<Vec<u8>> = (0..2000)
            .map(|_| {
                (0..4096)
                    .map(|_| {
                        seed = seed
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        (seed >> 56) as u8
                    })
                    .collect()
            })
            .collect();
        let batch = RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(Int64Array::from_iter_values(0..2000)) as ArrayRef,
            ),
            (
                "blob",
                Arc::new(BinaryArray::from_iter_values(blobs.iter())) as ArrayRef,
            ),
        ])
        .unwrap();
        parquet_of(&batch)
    }

    /// `batch` as a Parquet file of one row group.
    fn parquet_of(batch: &arrow_array::RecordBatch) -> Bytes {
        let mut out = Vec::new();
        let mut writer =
            parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), None).unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
        Bytes::from(out)
    }

    /// The footer of `data`, and the byte ranges of its first row group's column chunks.
    fn first_row_group(data: &Bytes) -> (ParquetMetaData, Vec<Range<u64>>) {
        let metadata = ParquetMetaDataReader::new().parse_and_finish(data).unwrap();
        let ranges = metadata
            .row_group(0)
            .columns()
            .iter()
            .map(|c| {
                let (start, len) = c.byte_range();
                start..start + len
            })
            .collect();
        (metadata, ranges)
    }

    #[test]
    fn a_row_group_decodes_the_same_streamed_within_the_budget() {
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        let data = blob_file();
        let direct = ParquetRecordBatchReaderBuilder::try_new(data.clone())
            .unwrap()
            .build()
            .unwrap()
            .collect::<std::result::Result<Vec<_>, _>>()
            .unwrap();
        let (_, ranges) = first_row_group(&data);
        let compressed: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        assert!(compressed > 7 << 20, "{compressed}");
        let read = |budget: u64| {
            let chunks = RemoteChunks::new(
                data.len() as u64,
                ranges.clone(),
                budget,
                PIECES_AHEAD,
                in_memory(data.clone()),
            );
            let held = chunks.0.held.clone();
            let batches = ParquetRecordBatchReaderBuilder::try_new(chunks)
                .unwrap()
                .build()
                .unwrap()
                .collect::<std::result::Result<Vec<_>, _>>()
                .unwrap();
            (batches, held)
        };
        // Within the budget: the whole row group at once.
        let (whole, held) = read(compressed);
        assert_eq!(whole, direct);
        assert_eq!(held.peak(), compressed);
        // Above it: streamed.
        let budget = 2 << 20;
        let (streamed, held) = read(budget);
        assert_eq!(streamed, direct);
        // At most twice the budget (small chunks' pieces have a floor), plus one page
        // larger than its chunk's pieces (pages are ~1 MiB here), never the row group.
        let bound = 2 * budget + (1 << 20);
        assert!(
            held.peak() <= bound,
            "held {} bytes, bound {bound}",
            held.peak()
        );
        assert!(
            held.peak() < compressed / 2,
            "held {} of {compressed}",
            held.peak()
        );
        assert_eq!(
            held.now.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "all released"
        );
    }

    /// A fetch from `data` that counts its requests.
    fn counting(data: Bytes) -> (Fetch, Arc<std::sync::atomic::AtomicUsize>) {
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = count.clone();
        let inner = in_memory(data);
        let fetch: Fetch = Arc::new(move |range: Range<u64>| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            inner(range)
        });
        (fetch, count)
    }

    /// A range is one request up to twice a piece; above, even pieces of one to two.
    #[test]
    fn ranges_are_fetched_in_even_pieces_of_one_to_two_piece_sizes() {
        const P: u64 = PIECE_BYTES;
        let sizes = |r: Range<u64>| -> Vec<u64> {
            let pieces = pieces_of(r.clone());
            assert_eq!(pieces.first().map(|p| p.start), Some(r.start));
            assert_eq!(pieces.last().map(|p| p.end), Some(r.end));
            assert!(pieces.windows(2).all(|w| w[0].end == w[1].start));
            pieces.iter().map(|p| p.end - p.start).collect()
        };
        assert_eq!(sizes(4..5), [1]);
        assert_eq!(sizes(4..P + 4), [P]);
        // The standard table's 8.5 MB row group: one request, not 8 MiB and a sliver.
        assert_eq!(sizes(4..8_514_989), [8_514_985]);
        assert_eq!(sizes(0..2 * P - 1), [2 * P - 1]);
        assert_eq!(sizes(0..2 * P), [P, P]);
        assert_eq!(sizes(7..3 * P + 7 + 2), [P + 1, P + 1, P]);
        assert!(sizes(0..100 * P + 12_345)
            .iter()
            .all(|&n| (P..2 * P).contains(&n)));
    }

    #[test]
    fn adjacent_chunks_of_a_row_group_that_fits_come_in_one_request_and_serve_a_reopened_reader() {
        use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        let batch = RecordBatch::try_from_iter([
            (
                "a",
                Arc::new(Int64Array::from_iter_values(0..5000)) as ArrayRef,
            ),
            (
                "b",
                Arc::new(Int64Array::from_iter_values((0..5000).map(|i| i * 7))) as ArrayRef,
            ),
            (
                "c",
                Arc::new(StringArray::from_iter_values(
                    (0..5000).map(|i| format!("row {i}")),
                )) as ArrayRef,
            ),
        ])
        .unwrap();
        let data = parquet_of(&batch);
        let (metadata, ranges) = first_row_group(&data);
        let total: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        let (fetch, requests) = counting(data.clone());
        let chunks = RemoteChunks::new(
            data.len() as u64,
            ranges.clone(),
            1 << 20,
            PIECES_AHEAD,
            fetch,
        );
        let footer = parquet::arrow::arrow_reader::ArrowReaderMetadata::try_new(
            Arc::new(metadata.clone()),
            ArrowReaderOptions::new(),
        )
        .unwrap();
        let read = |chunks: RemoteChunks| {
            ParquetRecordBatchReaderBuilder::new_with_metadata(chunks, footer.clone())
                .with_batch_size(1000)
                .build()
                .unwrap()
                .collect::<std::result::Result<Vec<_>, _>>()
                .unwrap()
        };
        let first = read(chunks.handle());
        assert_eq!(
            arrow_select::concat::concat_batches(&batch.schema(), &first).unwrap(),
            batch
        );
        assert_eq!(
            requests.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "one request"
        );
        assert_eq!(chunks.held().peak(), total);
        // Read again (a reader reopened on the row group): from the bytes held.
        assert!(chunks.holds_whole(&ranges));
        assert!(!chunks.holds_whole(&ranges[1..]));
        assert_eq!(read(chunks.handle()), first);
        assert_eq!(
            requests.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "no new request"
        );
        drop(chunks);
        // Above the budget the chunks stream, one request per piece, and are not kept.
        let (fetch, requests) = counting(data.clone());
        let streamed = RemoteChunks::new(
            data.len() as u64,
            ranges.clone(),
            total / 2,
            PIECES_AHEAD,
            fetch,
        );
        assert_eq!(read(streamed.handle()), first);
        assert!(requests.load(std::sync::atomic::Ordering::SeqCst) >= ranges.len());
        assert!(!streamed.holds_whole(&ranges));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Reads front to back in steps of any size (pages larger than the pieces among
        /// them), with skips and header-style reads, return the bytes asked; what is held
        /// stays within the pieces ahead plus the largest read.
        #[test]
        fn reads_return_the_bytes_asked_within_the_pieces_ahead(
            steps in proptest::collection::vec((1u64..600_000, 0u64..3, proptest::bool::ANY), 1..40),
        ) {
            let size = 4u64 << 20;
            let data = Bytes::from((0..size).map(|i| (i * 31 % 251) as u8).collect::<Vec<u8>>());
            let chunk = 1000..size - 1000;
            let budget = 1 << 20;
            let chunks = RemoteChunks::new(size, std::iter::once(chunk.clone()).collect(), budget, PIECES_AHEAD, in_memory(data.clone()));
            let mut at = chunk.start;
            let mut largest = 0;
            for (len, skip, header) in steps {
                at += skip * 100_000;
                let len = len.min(chunk.end.saturating_sub(at));
                if len == 0 {
                    break;
                }
                largest = largest.max(len);
                if header {
                    let mut read = chunks.get_read(at).unwrap();
                    let mut buf = vec![0u8; len.min(64) as usize];
                    std::io::Read::read_exact(&mut read, &mut buf).unwrap();
                    proptest::prop_assert_eq!(&buf[..], &data[at as usize..at as usize + buf.len()]);
                }
                let got = chunks.get_bytes(at, len as usize).unwrap();
                proptest::prop_assert_eq!(&got[..], &data[at as usize..(at + len) as usize]);
                at += len;
            }
            let bound = PIECES_AHEAD as u64 * (budget / PIECES_AHEAD as u64) + largest;
            proptest::prop_assert!(chunks.held().peak() <= bound, "held {} > {}", chunks.held().peak(), bound);
        }
    }

    #[test]
    fn a_wide_row_group_streams_within_twice_the_budget() {
        // 100 chunks of 400 KiB (40 MiB) against a 4 MiB budget: the 1 MiB floor of a
        // piece would hold 200 MiB; an even share holds the budget.
        let (n, len, budget) = (100u64, 400u64 << 10, 4u64 << 20);
        let data = Bytes::from((0..n * len).map(|i| (i % 253) as u8).collect::<Vec<u8>>());
        let ranges: Vec<Range<u64>> = (0..n).map(|c| c * len..(c + 1) * len).collect();
        let chunks = RemoteChunks::new(
            n * len,
            ranges.clone(),
            budget,
            PIECES_AHEAD,
            in_memory(data.clone()),
        );
        // Pages of 64 KiB, the columns read in turn as a decoder reads them.
        for at in (0..len).step_by(64 << 10) {
            for r in &ranges {
                let start = r.start + at;
                let got = chunks
                    .get_bytes(start, (64 << 10).min(len - at) as usize)
                    .unwrap();
                assert_eq!(got, data.slice(start as usize..start as usize + got.len()));
            }
        }
        assert!(
            chunks.held().peak() <= 2 * budget,
            "held {}",
            chunks.held().peak()
        );
    }

    #[test]
    fn a_header_read_at_the_end_of_its_chunk_is_an_error() {
        let data = Bytes::from(vec![1u8; 10_000]);
        let chunks = RemoteChunks::new(
            10_000,
            std::iter::once(100..5_000).collect(),
            1 << 20,
            PIECES_AHEAD,
            in_memory(data),
        );
        let mut read = chunks.get_read(4_990).unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(std::io::Read::read(&mut read, &mut buf).unwrap(), 10);
        assert!(std::io::Read::read(&mut read, &mut buf).is_err());
        assert!(chunks.get_bytes(9_990, 20).is_err());
    }
}
