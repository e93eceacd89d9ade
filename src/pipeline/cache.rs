//! The cache: `ds.map(parse).cache()` for the pipeline. The first epoch reads and parses
//! the shards as always and keeps what it parsed, one chunk per batch, in memory or in a
//! local file; later epochs (and, with a file, later runs) take the records from there
//! instead, with no reading, CRC checking or parsing. Shuffle and batching still happen
//! every epoch: the cached records pass through their own shuffle buffer, seeded as the
//! record shuffle is, so each epoch's order and batches differ, as with `tf.data`'s
//! `cache().shuffle(...)`.
//!
//! A chunk is a parsed batch laid out flat (values, row splits, bytes as offsets and
//! data), so the memory cache costs about the parsed data's size, and a batch of a later
//! epoch is gathered from chunks by copying each row's values.
//!
//! A cache file is complete or ignored:
//!
//! ```text
//! "TFSCACHE" | version u32 | header length u32 | header (JSON) | crc32c(header) u32
//! chunk*:  payload length u64 | crc32c(payload) u32 | payload
//! end:     u64::MAX | chunks u64 | rows u64 | crc32c(chunks, rows) u32
//! ```
//!
//! The header names the source files (name, size, the manifest's CRC32C when there is
//! one, else the modification time), the parse spec and the record type. It is written
//! under a hidden temporary name beside the final one and renamed when the first epoch
//! is complete. At the next run the whole file is checked (header, every chunk's CRC32C,
//! the end record, nothing after it); any difference, a file cut short or a flipped byte
//! makes the run ignore it and build it again (the report says why).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_channel::{bounded, Receiver, Sender};
use serde::Serialize;

use crate::error::{Error, ErrorKind, Result};
use crate::example::{FeatureSpec, RecordType};
pub(crate) use crate::pipeline::chunk::{gather, CachedRows, Chunk};
use crate::store::atomic::AtomicFile;
use crate::tfrecord::frame::crc32c;

/// Where the cache lives.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CacheMode {
    /// In memory, for this run.
    Memory,
    /// In a local file, kept for later runs.
    File(PathBuf),
}

const MAGIC: &[u8; 8] = b"TFSCACHE";
const VERSION: u32 = 2;
/// The payload length that marks the end record.
const END: u64 = u64::MAX;
/// The cache file is read in blocks of this size.
const READ_BUFFER: usize = 1 << 20;

/// What the cache did, for reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct CacheReport {
    /// `memory` or `file`.
    pub mode: &'static str,
    /// The cache file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// `filled` (the first epoch filled it), `rebuilt` (a file that could not be used
    /// was filled again; `reason` says why), `reused` (a complete file from an earlier
    /// run: no epoch read the shards), or `filling` (the run ended before the first
    /// epoch did; nothing was kept).
    pub state: &'static str,
    /// Why an existing file was not used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Records in it.
    pub records: u64,
    /// Chunks (batches of the filling epoch) in it.
    pub chunks: u64,
    /// Memory: bytes allocated for the chunks. File: the file's size.
    pub bytes: u64,
    /// Bytes the filling epoch's parsed batches held (values and row splits; 0 when
    /// reused): what `bytes` compares with.
    pub parsed_bytes: u64,
}

/// Where a complete cache's chunks are.
#[derive(Debug, Clone)]
enum Store {
    Memory(Arc<Vec<Arc<Chunk>>>),
    /// The file as checked or written (read through this handle, so a file renamed onto
    /// the path meanwhile is not read by mistake).
    File {
        path: PathBuf,
        file: Arc<File>,
        data_start: u64,
    },
}

/// The filling epoch's chunks, by batch number, on their way to memory or the file.
enum Fill {
    Memory(Vec<Option<Arc<Chunk>>>),
    File {
        writer: BufWriter<AtomicFile>,
        temp: PathBuf,
        /// Chunks written so far (the next batch number to write).
        next: u64,
        /// Encoded chunks that came before their turn.
        pending: BTreeMap<u64, Vec<u8>>,
    },
}

enum State {
    Filling(Fill),
    Ready(Store),
    /// The filling epoch failed or was left; nothing is kept.
    Abandoned,
}

struct Inner {
    state: State,
    /// Batches of the filling epoch received.
    received: u64,
    /// Batches the filling epoch has, once the producer knows.
    expected: Option<u64>,
    report: CacheReport,
    sealed: Option<Sender<()>>,
}

/// The pipeline's cache, shared by its threads.
pub(crate) struct Cache {
    spec: Vec<FeatureSpec>,
    inner: Mutex<Inner>,
    sealed: Receiver<()>,
}

/// Identifies what a cache holds; its JSON is the file's header.
#[derive(Serialize)]
struct Header<'a> {
    /// The chunks' words are stored as they lie in memory.
    endian: &'static str,
    record_type: RecordType,
    spec: &'a [FeatureSpec],
    sources: &'a [SourceFile],
    /// The records read, when only a range of them (a rank's or a worker's share).
    #[serde(skip_serializing_if = "Option::is_none")]
    records: Option<[u64; 2]>,
}

/// A shard the cache was filled from.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SourceFile {
    pub file: String,
    pub bytes: u64,
    /// From the manifest, when one lists the shard.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crc32c: Option<String>,
    /// Nanoseconds since the epoch, when no manifest gives a CRC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_ns: Option<u128>,
}

impl Cache {
    /// A cache for these sources, spec and record type. A file that holds exactly them is
    /// used as it is; otherwise (missing, other sources, damaged) the first epoch fills
    /// a new one under a temporary name.
    ///
    /// # Errors
    ///
    /// The temporary file cannot be created.
    pub(crate) fn open(
        mode: &CacheMode,
        spec: &[FeatureSpec],
        record_type: RecordType,
        sources: &[SourceFile],
        records: Option<[u64; 2]>,
    ) -> Result<Cache> {
        let (tx, rx) = bounded(0);
        let mut report = CacheReport {
            mode: "memory",
            file: None,
            state: "filling",
            reason: None,
            records: 0,
            chunks: 0,
            bytes: 0,
            parsed_bytes: 0,
        };
        let state = match mode {
            CacheMode::Memory => State::Filling(Fill::Memory(Vec::new())),
            CacheMode::File(path) => {
                report.mode = "file";
                report.file = Some(path.display().to_string());
                let header = serde_json::to_vec(&Header {
                    endian: if cfg!(target_endian = "little") {
                        "little"
                    } else {
                        "big"
                    },
                    record_type,
                    spec,
                    sources,
                    records,
                })
                .expect("the header serializes");
                match check_file(path, &header, spec) {
                    Ok(Checked {
                        chunks,
                        records,
                        data_start,
                        bytes,
                        file,
                    }) => {
                        report.state = "reused";
                        report.records = records;
                        report.chunks = chunks;
                        report.bytes = bytes;
                        State::Ready(Store::File {
                            path: path.clone(),
                            file: Arc::new(file),
                            data_start,
                        })
                    }
                    Err(reason) => {
                        if let Some(reason) = reason {
                            report.reason = Some(reason);
                        }
                        State::Filling(start_file(path, &header)?)
                    }
                }
            }
        };
        let ready = matches!(state, State::Ready(_));
        Ok(Cache {
            spec: spec.to_vec(),
            inner: Mutex::new(Inner {
                state,
                received: 0,
                expected: None,
                report,
                sealed: (!ready).then_some(tx),
            }),
            sealed: rx,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the cache is complete (no epoch needs the shards any more).
    pub(crate) fn is_ready(&self) -> bool {
        matches!(self.lock().state, State::Ready(_))
    }

    /// Whether the filling failed or was left.
    pub(crate) fn is_abandoned(&self) -> bool {
        matches!(self.lock().state, State::Abandoned)
    }

    /// Closed (disconnected) once the cache is complete or abandoned.
    pub(crate) fn sealed(&self) -> &Receiver<()> {
        &self.sealed
    }

    /// What the cache did so far.
    pub(crate) fn report(&self) -> CacheReport {
        self.lock().report.clone()
    }

    /// Adds batch `seq` of the filling epoch, parsed from records of `parsed_bytes`.
    ///
    /// # Errors
    ///
    /// Writing the cache file failed.
    pub(crate) fn fill(&self, seq: u64, chunk: Chunk, parsed_bytes: u64) -> Result<()> {
        // Encoded outside the lock (a guard in the `match` would hold it throughout).
        let to_file = matches!(self.lock().state, State::Filling(Fill::File { .. }));
        let encoded = to_file.then(|| {
            let mut out = Vec::with_capacity(chunk.held_bytes() as usize + 1024);
            chunk.encode(&mut out);
            out
        });
        let mut inner = self.lock();
        let inner = &mut *inner;
        let (rows, held) = (chunk.rows() as u64, chunk.held_bytes());
        match &mut inner.state {
            State::Filling(Fill::Memory(slots)) => {
                let i = seq as usize;
                if slots.len() <= i {
                    slots.resize(i + 1, None);
                }
                slots[i] = Some(Arc::new(chunk));
                inner.report.bytes += held;
            }
            State::Filling(Fill::File {
                writer,
                temp,
                next,
                pending,
            }) => {
                pending.insert(seq, encoded.expect("encoded above for a file"));
                while let Some(payload) = pending.remove(next) {
                    let written = write_chunk(writer, &payload);
                    if let Err(e) = written {
                        let temp = temp.clone();
                        leave(inner);
                        return Err(Error::from(e).with_file(temp));
                    }
                    inner.report.bytes += 12 + payload.len() as u64;
                    *next += 1;
                }
            }
            State::Ready(_) | State::Abandoned => return Ok(()),
        }
        inner.received += 1;
        inner.report.records += rows;
        inner.report.chunks += 1;
        inner.report.parsed_bytes += parsed_bytes;
        self.seal_if_complete(inner)
    }

    /// The producer's word that the filling epoch has `batches` batches (numbered from 0).
    ///
    /// # Errors
    ///
    /// Completing the cache file failed.
    pub(crate) fn expect(&self, batches: u64) -> Result<()> {
        let mut inner = self.lock();
        inner.expected = Some(batches);
        self.seal_if_complete(&mut inner)
    }

    /// Leaves the filling (an error stopped the epoch, or the pipeline was dropped
    /// before the epoch ended): nothing is kept, the temporary file is removed.
    pub(crate) fn abandon(&self) {
        leave(&mut self.lock());
    }

    fn seal_if_complete(&self, inner: &mut Inner) -> Result<()> {
        if inner.expected != Some(inner.received) || !matches!(inner.state, State::Filling(_)) {
            return Ok(());
        }
        let State::Filling(fill) = std::mem::replace(&mut inner.state, State::Abandoned) else {
            unreachable!("checked just above");
        };
        let store = match fill {
            Fill::Memory(slots) => {
                let chunks: Option<Vec<Arc<Chunk>>> = slots.into_iter().collect();
                Store::Memory(Arc::new(
                    chunks.expect("every batch of the epoch was received"),
                ))
            }
            Fill::File {
                writer, temp, next, ..
            } => {
                let path = inner
                    .report
                    .file
                    .as_ref()
                    .map(PathBuf::from)
                    .expect("a file cache has a path");
                let file = match finish_file(writer, &temp, &path, next, inner.report.records) {
                    Ok(file) => file,
                    Err(e) => {
                        inner.sealed = None;
                        return Err(e);
                    }
                };
                inner.report.bytes = file.metadata().map_or(0, |m| m.len());
                Store::File {
                    data_start: data_start(&file).unwrap_or(0),
                    file: Arc::new(file),
                    path,
                }
            }
        };
        inner.state = State::Ready(store);
        inner.report.state = if inner.report.reason.is_some() {
            "rebuilt"
        } else {
            "filled"
        };
        inner.sealed = None;
        Ok(())
    }

    /// The chunks of a complete cache, in order, for one epoch.
    ///
    /// # Errors
    ///
    /// The cache is not complete, or its file cannot be opened.
    pub(crate) fn chunks(&self) -> Result<ChunkReader> {
        let store = match &self.lock().state {
            State::Ready(store) => store.clone(),
            _ => return Err(damaged("read before the first epoch filled it".into())),
        };
        Ok(match store {
            Store::Memory(chunks) => ChunkReader::Memory { chunks, next: 0 },
            Store::File {
                path,
                file,
                data_start,
            } => {
                // (A clone shares the offset: epochs read one after another.)
                let mut file = file
                    .try_clone()
                    .map_err(|e| Error::from(e).with_file(&path))?;
                file.seek(SeekFrom::Start(data_start))
                    .map_err(|e| Error::from(e).with_file(&path))?;
                ChunkReader::File {
                    reader: BufReader::with_capacity(READ_BUFFER, file),
                    path,
                    spec: self.spec.clone(),
                    offset: data_start,
                    payload: Vec::new(),
                }
            }
        })
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        self.abandon();
    }
}

/// Leaves a filling cache: nothing is kept, the temporary file is removed, waiters
/// wake.
fn leave(inner: &mut Inner) {
    if !matches!(inner.state, State::Filling(_)) {
        return;
    }
    // (The writer goes with it, and its temporary with the writer.)
    inner.state = State::Abandoned;
    inner.sealed = None;
}

fn damaged(detail: String) -> Error {
    Error::new(ErrorKind::CacheDamaged(detail))
}

/// The chunks of a complete cache, one epoch's pass.
pub(crate) enum ChunkReader {
    Memory {
        chunks: Arc<Vec<Arc<Chunk>>>,
        next: usize,
    },
    File {
        reader: BufReader<File>,
        path: PathBuf,
        spec: Vec<FeatureSpec>,
        offset: u64,
        payload: Vec<u8>,
    },
}

impl ChunkReader {
    /// The next chunk, or `None` after the last.
    ///
    /// # Errors
    ///
    /// The file changed since it was checked: a chunk whose CRC32C or layout is wrong,
    /// or a file cut short (naming the file and the byte offset).
    pub(crate) fn next_chunk(&mut self) -> Result<Option<Arc<Chunk>>> {
        match self {
            ChunkReader::Memory { chunks, next } => {
                let chunk = chunks.get(*next).cloned();
                *next += 1;
                Ok(chunk)
            }
            ChunkReader::File {
                reader,
                path,
                spec,
                offset,
                payload,
            } => {
                let at = *offset;
                let fail = |detail: String| damaged(detail).with_file(&*path).with_offset(at);
                let mut head = [0u8; 12];
                reader
                    .read_exact(&mut head[..8])
                    .map_err(|e| fail(format!("cut short ({e})")))?;
                let len = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
                if len == END {
                    return Ok(None);
                }
                reader
                    .read_exact(&mut head[8..])
                    .map_err(|e| fail(format!("cut short ({e})")))?;
                let crc = u32::from_le_bytes(head[8..].try_into().expect("4 bytes"));
                payload.clear();
                let got = reader
                    .by_ref()
                    .take(len)
                    .read_to_end(payload)
                    .map_err(|e| fail(e.to_string()))?;
                if got as u64 != len {
                    return Err(fail("cut short".into()));
                }
                if crc32c(payload) != crc {
                    return Err(fail("chunk CRC32C mismatch".into()));
                }
                let chunk = Chunk::decode(payload, spec).map_err(fail)?;
                *offset += 12 + len;
                Ok(Some(Arc::new(chunk)))
            }
        }
    }
}

/// A hidden temporary beside `path`, with the header written.
fn start_file(path: &Path, header: &[u8]) -> Result<Fill> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file = AtomicFile::create(&dir.join(path.file_name().unwrap_or_default()))
        .map_err(|e| Error::from(e).with_file(path))?;
    let temp = file.temp().to_path_buf();
    let mut writer = BufWriter::with_capacity(READ_BUFFER, file);
    let written = (|| {
        writer.write_all(MAGIC)?;
        writer.write_all(&VERSION.to_le_bytes())?;
        writer.write_all(&(header.len() as u32).to_le_bytes())?;
        writer.write_all(header)?;
        writer.write_all(&crc32c(header).to_le_bytes())
    })();
    if let Err(e) = written {
        return Err(Error::from(e).with_file(&temp));
    }
    Ok(Fill::File {
        writer,
        temp,
        next: 0,
        pending: BTreeMap::new(),
    })
}

fn write_chunk(writer: &mut BufWriter<AtomicFile>, payload: &[u8]) -> std::io::Result<()> {
    writer.write_all(&(payload.len() as u64).to_le_bytes())?;
    writer.write_all(&crc32c(payload).to_le_bytes())?;
    writer.write_all(payload)
}

fn end_record(chunks: u64, rows: u64) -> [u8; 28] {
    let mut out = [0u8; 28];
    out[..8].copy_from_slice(&END.to_le_bytes());
    out[8..16].copy_from_slice(&chunks.to_le_bytes());
    out[16..24].copy_from_slice(&rows.to_le_bytes());
    let crc = crc32c(&out[8..24]);
    out[24..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Writes the end record and puts the file in place ([`AtomicFile::commit`]); returns
/// it, open for reading.
fn finish_file(
    mut writer: BufWriter<AtomicFile>,
    temp: &Path,
    path: &Path,
    chunks: u64,
    rows: u64,
) -> Result<File> {
    let io = |e: std::io::Error| Error::from(e).with_file(temp);
    writer.write_all(&end_record(chunks, rows)).map_err(io)?;
    let file = writer.into_inner().map_err(|e| io(e.into_error()))?;
    file.commit().map_err(|e| Error::from(e).with_file(path))
}

/// Where the chunks start: after the header.
fn data_start(file: &File) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut head = [0u8; 16];
    file.read_exact_at(&mut head, 0)?;
    let header_len = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes"));
    Ok(16 + u64::from(header_len) + 4)
}

struct Checked {
    chunks: u64,
    records: u64,
    data_start: u64,
    bytes: u64,
    file: File,
}

/// Checks a whole cache file against the header this run would write. `Err(None)`:
/// there is no file; `Err(Some(reason))`: it cannot be used.
fn check_file(
    path: &Path,
    header: &[u8],
    spec: &[FeatureSpec],
) -> std::result::Result<Checked, Option<String>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(None),
        Err(e) => return Err(Some(format!("cannot be read: {e}"))),
    };
    let bytes = file.metadata().map_or(0, |m| m.len());
    let mut r = BufReader::with_capacity(READ_BUFFER, file);
    let mut head = [0u8; 16];
    r.read_exact(&mut head)
        .map_err(|_| Some("cut short in its header".to_owned()))?;
    if &head[..8] != MAGIC {
        return Err(Some("not a tfshard cache file".into()));
    }
    if u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) != VERSION {
        return Err(Some("written by another version".into()));
    }
    let header_len = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes")) as u64;
    let mut stored = Vec::new();
    r.by_ref()
        .take(header_len + 4)
        .read_to_end(&mut stored)
        .map_err(|e| Some(format!("cannot be read: {e}")))?;
    if stored.len() as u64 != header_len + 4 {
        return Err(Some("cut short in its header".into()));
    }
    let (stored_header, crc) = stored.split_at(header_len as usize);
    if crc32c(stored_header).to_le_bytes() != crc {
        return Err(Some("header CRC32C mismatch".into()));
    }
    if stored_header != header {
        return Err(Some(header_difference(stored_header, header)));
    }
    let data_start = 16 + header_len + 4;
    let mut offset = data_start;
    let (mut chunks, mut records) = (0u64, 0u64);
    let mut payload = Vec::new();
    loop {
        let at = format!("at byte {offset}");
        let mut len = [0u8; 8];
        r.read_exact(&mut len)
            .map_err(|_| Some(format!("cut short {at}")))?;
        let len = u64::from_le_bytes(len);
        if len == END {
            let mut rest = [0u8; 20];
            r.read_exact(&mut rest)
                .map_err(|_| Some(format!("cut short {at}")))?;
            let end = end_record(chunks, records);
            if rest != end[8..] {
                return Err(Some(format!("end record {at} does not match its chunks")));
            }
            if r.read(&mut [0u8; 1]).map_err(|e| Some(e.to_string()))? != 0 {
                return Err(Some("bytes after the end record".into()));
            }
            return Ok(Checked {
                chunks,
                records,
                data_start,
                bytes,
                file: r.into_inner(),
            });
        }
        let mut crc = [0u8; 4];
        r.read_exact(&mut crc)
            .map_err(|_| Some(format!("cut short {at}")))?;
        payload.clear();
        let got = r
            .by_ref()
            .take(len)
            .read_to_end(&mut payload)
            .map_err(|e| Some(e.to_string()))?;
        if got as u64 != len {
            return Err(Some(format!("cut short {at}")));
        }
        if crc32c(&payload).to_le_bytes() != crc {
            return Err(Some(format!("chunk {chunks} {at}: CRC32C mismatch")));
        }
        let chunk =
            Chunk::decode(&payload, spec).map_err(|e| Some(format!("chunk {chunks} {at}: {e}")))?;
        records += chunk.rows() as u64;
        chunks += 1;
        offset += 12 + len;
    }
}

/// Names what differs between a stored header and this run's.
fn header_difference(stored: &[u8], wanted: &[u8]) -> String {
    let (Ok(a), Ok(b)) = (
        serde_json::from_slice::<serde_json::Value>(stored),
        serde_json::from_slice::<serde_json::Value>(wanted),
    ) else {
        return "its header is not JSON".into();
    };
    let differs: Vec<&str> = ["sources", "spec", "record_type"]
        .into_iter()
        .filter(|k| a.get(k) != b.get(k))
        .collect();
    match differs.as_slice() {
        [] => "its header differs".into(),
        keys => format!("made from other {}", keys.join(" and ")),
    }
}

/// One epoch's rows from the cache: chunks read in order, each row offered to the
/// shuffle; a chunk stays loaded while any of its rows waits in the shuffle buffer.
pub(crate) struct CachedEpoch {
    reader: ChunkReader,
    /// Loaded chunks, by id from `base` on: the chunk, its rows not yet taken into a
    /// batch, and the batch (stamp) it was last taken into with its index there.
    window: std::collections::VecDeque<Option<Loaded>>,
    base: u64,
    /// The chunk being offered: (id, next row, rows).
    current: Option<(u64, u32, u32)>,
    done: bool,
    stamp: u64,
}

struct Loaded {
    chunk: Arc<Chunk>,
    waiting: u32,
    stamp: u64,
    local: u32,
}

impl CachedEpoch {
    pub(crate) fn new(reader: ChunkReader) -> CachedEpoch {
        CachedEpoch {
            reader,
            window: std::collections::VecDeque::new(),
            base: 0,
            current: None,
            done: false,
            stamp: 0,
        }
    }

    /// The next row, as (chunk id, row), or `None` at the end of the epoch.
    pub(crate) fn next_row(&mut self) -> Result<Option<(u32, u32)>> {
        loop {
            if let Some((id, row, rows)) = &mut self.current {
                if *row < *rows {
                    *row += 1;
                    return Ok(Some((*id as u32, *row - 1)));
                }
                self.current = None;
            }
            if self.done {
                return Ok(None);
            }
            match self.reader.next_chunk()? {
                Some(chunk) if chunk.rows() > 0 => {
                    let id = self.base + self.window.len() as u64;
                    let rows = chunk.rows() as u32;
                    self.window.push_back(Some(Loaded {
                        chunk,
                        waiting: rows,
                        stamp: u64::MAX,
                        local: 0,
                    }));
                    self.current = Some((id, 0, rows));
                }
                Some(_) => {}
                None => self.done = true,
            }
        }
    }

    /// Starts a new batch: chunks are added to it afresh.
    pub(crate) fn start_batch(&mut self) {
        self.stamp += 1;
    }

    /// Takes a row out of the window into the batch being built: the batch gets the
    /// chunk (once) and the row; a chunk none of whose rows wait any more leaves the
    /// window. (Ids are the low 32 bits of the chunk's number in the epoch; the window
    /// never spans 2³² chunks.)
    pub(crate) fn take(&mut self, (id, row): (u32, u32), batch: &mut CachedRows) {
        let at = (id as u64).wrapping_sub(self.base as u32 as u64) as u32 as usize;
        let Some(Some(loaded)) = self.window.get_mut(at) else {
            unreachable!("a row's chunk stays in the window until the row is taken");
        };
        if loaded.stamp != self.stamp {
            loaded.stamp = self.stamp;
            loaded.local = batch.chunks.len() as u32;
            batch.chunks.push(loaded.chunk.clone());
        }
        batch.rows.push((loaded.local, row));
        loaded.waiting -= 1;
        if loaded.waiting == 0 {
            self.window[at] = None;
            while let Some(None) = self.window.front() {
                self.window.pop_front();
                self.base += 1;
            }
        }
    }
}
