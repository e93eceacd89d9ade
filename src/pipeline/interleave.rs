//! Interleave: `cycle_length` files open at once, `block_length` records from each in
//! turn (`tf.data.Dataset.interleave`'s order); a file that ends gives its place to the
//! next one. An uncompressed file is memory-mapped ([`MappedRecords`]): its records are
//! ranges of the map, read ahead by the kernel in large sequential blocks and never
//! copied before parsing. A compressed file (or any file, with mapping off) is read in
//! large sequential blocks by its own `RecordReader`, each record copied into a pooled
//! buffer. The data CRC is left to the parse workers: it is the costly check, and they
//! run in parallel.

use crate::store::IoOptions;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::Result;
use crate::pipeline::batch::{Origin, Payload, RawRecord};
use crate::pipeline::memory::{Held, Pool};
use crate::tfrecord::mapped::SharedBytes;
use crate::tfrecord::{Compression, MappedRecords, RecordReader, Source};

/// An open file of the cycle.
enum Open {
    /// With the number of records it has handed out.
    Mapped(MappedRecords, u64),
    Stream(RecordReader<Source>),
}

/// A mapped file whose records may not all be batched yet: records waiting in the
/// shuffle buffer name their file, not its map, so the map is kept here until the last
/// of them is in a batch (which then holds it).
struct Live {
    map: SharedBytes,
    /// Records of it batched (or let go) so far.
    batched: u64,
    /// Records of it handed out, once the file is done.
    handed_out: Option<u64>,
}

/// How the files of an interleave are opened.
#[derive(Debug, Clone, Copy)]
pub struct Opening {
    /// `None`: by name, else by content.
    pub compression: Option<Compression>,
    /// Map uncompressed local files instead of reading them.
    pub mmap: bool,
    /// Store settings of the reads of URLs.
    pub io: IoOptions,
}

/// Round-robin reading of several files.
pub struct Interleave {
    files: Vec<PathBuf>,
    opening: Opening,
    pending: VecDeque<usize>,
    /// The open files: index, reader, records left to read.
    open: Vec<(usize, Open, u64)>,
    cycle_length: usize,
    block_length: usize,
    current: usize,
    taken: usize,
    /// Each file's (records to skip, records to read), when reading a range.
    limits: Option<Vec<(u64, u64)>>,
    /// Counts the readers' block buffers and the copied records.
    held: Arc<Held>,
    /// The maps of files with records not yet batched, by file.
    live: HashMap<usize, Live>,
}

impl Open {
    /// Bytes of the reader's own buffer (a map is the page cache's, not ours).
    fn buffer_bytes(&self) -> usize {
        match self {
            Open::Mapped(..) => 0,
            Open::Stream(reader) => reader.buffer_capacity(),
        }
    }
}

impl Interleave {
    /// Reads `order` (indices into `files`) interleaved; maps uncompressed files when
    /// `opening.mmap` is on.
    pub fn new(
        files: Vec<PathBuf>,
        order: Vec<usize>,
        opening: Opening,
        cycle_length: usize,
        block_length: usize,
        held: Arc<Held>,
        limits: Option<Vec<(u64, u64)>>,
    ) -> Interleave {
        Interleave {
            files,
            opening,
            pending: order.into(),
            open: Vec::new(),
            cycle_length: cycle_length.max(1),
            block_length: block_length.max(1),
            current: 0,
            taken: 0,
            held,
            limits,
            live: HashMap::new(),
        }
    }

    /// Opens file `i`, past the records its range skips; with the records left to read.
    fn open_file(&self, i: usize) -> Result<(Open, u64)> {
        let mut open = self.open_whole(i)?;
        let (skip, take) = self.limits.as_ref().map_or((0, u64::MAX), |l| l[i]);
        let before = open.buffer_bytes();
        for _ in 0..skip {
            let more = match &mut open {
                Open::Mapped(records, _) => records.next_record()?.is_some(),
                Open::Stream(reader) => reader.read_record()?.is_some(),
            };
            if !more {
                break;
            }
        }
        // (A stream's buffer grows to its largest record, skipped ones too.)
        self.held.resize(before, open.buffer_bytes());
        Ok((open, take))
    }

    fn open_whole(&self, i: usize) -> Result<Open> {
        let path = &self.files[i];
        let Opening {
            compression,
            mmap,
            io,
        } = self.opening;
        let compression = match compression {
            Some(c) => c,
            None => crate::records::detect_compression(path, io)?,
        };
        let local = crate::store::paths::local_path(path, io)?;
        Ok(
            if let (true, Compression::None, Some(local)) = (mmap, compression, local) {
                Open::Mapped(MappedRecords::open(&local)?.named(path), 0)
            } else {
                self.held.note_stream();
                Open::Stream(
                    crate::records::open(path, Some(compression), io)?.with_check_data_crc(false),
                )
            },
        )
    }

    fn fill_cycle(&mut self) -> Result<()> {
        while self.open.len() < self.cycle_length {
            let Some(i) = self.pending.pop_front() else {
                break;
            };
            let (file, take) = self.open_file(i)?;
            self.note_open(i, &file);
            self.open.push((i, file, take));
        }
        Ok(())
    }

    /// The next record, or `None` at the end; a copied record takes its buffer from
    /// `pool` when there is one.
    ///
    /// # Errors
    ///
    /// A framing error (length CRC, truncation) naming file, record and offset.
    pub fn next(&mut self, pool: &mut Pool) -> Result<Option<RawRecord>> {
        loop {
            self.fill_cycle()?;
            if self.open.is_empty() {
                return Ok(None);
            }
            if self.current >= self.open.len() {
                self.current = 0;
            }
            let (file, open, left) = &mut self.open[self.current];
            let record = match open {
                _ if *left == 0 => None,
                Open::Mapped(records, handed_out) => records.next_record()?.map(|r| {
                    *handed_out += 1;
                    RawRecord {
                        payload: Payload::Mapped {
                            slot: 0,
                            range: r.range,
                        },
                        crc: r.stored_crc,
                        origin: Origin {
                            file: *file,
                            record: r.index,
                            offset: r.offset,
                        },
                    }
                }),
                Open::Stream(reader) => {
                    let (record, offset) = (reader.record_index(), reader.offset());
                    let before = reader.buffer_capacity();
                    let read = reader
                        .read_record()
                        .map(|r| r.map(|bytes| pool.copy(bytes, &self.held)));
                    self.held.resize(before, reader.buffer_capacity());
                    read?.map(|buffer| RawRecord {
                        payload: Payload::Owned(buffer),
                        crc: reader.stored_data_crc(),
                        origin: Origin {
                            file: *file,
                            record,
                            offset,
                        },
                    })
                }
            };
            match record {
                Some(record) => {
                    *left -= 1;
                    self.taken += 1;
                    if self.taken >= self.block_length {
                        self.taken = 0;
                        self.current += 1;
                    }
                    return Ok(Some(record));
                }
                None => {
                    // This file is done: the next pending one takes its place.
                    let (i, done, _) = self.open.remove(self.current);
                    self.held.sub(done.buffer_bytes() as u64);
                    if let Open::Mapped(_, handed_out) = done {
                        self.note_done(i, handed_out);
                    }
                    self.taken = 0;
                    if let Some(i) = self.pending.pop_front() {
                        let (file, take) = self.open_file(i)?;
                        self.note_open(i, &file);
                        self.open.insert(self.current, (i, file, take));
                    }
                }
            }
        }
    }
}

impl Interleave {
    /// Keeps a mapped file's map for its records (an empty file has none).
    fn note_open(&mut self, i: usize, file: &Open) {
        if let Open::Mapped(records, _) = file {
            if let Some(map) = records.map() {
                let live = Live {
                    map: map.clone(),
                    batched: 0,
                    handed_out: None,
                };
                self.live.insert(i, live);
            }
        }
    }

    /// A mapped file is done: its map goes once its last record is batched.
    fn note_done(&mut self, i: usize, handed_out: u64) {
        if let Some(live) = self.live.get_mut(&i) {
            live.handed_out = Some(handed_out);
            if live.batched == handed_out {
                self.live.remove(&i);
            }
        }
    }

    /// How many files' maps are kept for records not yet batched.
    #[cfg(test)]
    pub fn live_maps(&self) -> usize {
        self.live.len()
    }

    /// The maps of a batch's mapped records, each record's slot set to its map's place
    /// among them. Records let go unbatched pass through here too, so that their files'
    /// maps are released.
    pub fn batch_maps(&mut self, records: &mut [RawRecord]) -> Vec<SharedBytes> {
        // (file, records) of the batch, in the order first seen: a few files, the last
        // one the likeliest.
        let mut files: Vec<(usize, u64)> = Vec::new();
        for record in records.iter_mut() {
            let Payload::Mapped { slot, .. } = &mut record.payload else {
                continue;
            };
            let file = record.origin.file;
            let found = match files.last() {
                Some(&(f, _)) if f == file => Some(files.len() - 1),
                _ => files.iter().position(|&(f, _)| f == file),
            };
            let k = found.unwrap_or_else(|| {
                files.push((file, 0));
                files.len() - 1
            });
            files[k].1 += 1;
            *slot = k as u32;
        }
        let mut maps = Vec::with_capacity(files.len());
        for (file, n) in files {
            let live = self
                .live
                .get_mut(&file)
                .expect("a mapped record's file is live until its records are batched");
            maps.push(live.map.clone());
            live.batched += n;
            if live.handed_out == Some(live.batched) {
                self.live.remove(&file);
            }
        }
        maps
    }
}

impl Drop for Interleave {
    fn drop(&mut self) {
        for (_, open, _) in &self.open {
            self.held.sub(open.buffer_bytes() as u64);
        }
    }
}
