//! Batch: consecutive (shuffled) raw records grouped `batch_size` at a time, each batch
//! numbered so the parse workers' output can be put back in order. An epoch's last short
//! batch is delivered unless `drop_remainder`.

use std::ops::Range;

use crate::pipeline::cache::CachedRows;
use crate::tfrecord::mapped::SharedBytes;

/// Where a record came from, for error messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Origin {
    /// Index into the pipeline's file list.
    pub file: usize,
    /// Record index within the file.
    pub record: u64,
    /// Byte offset within the file (of the decompressed stream).
    pub offset: u64,
}

/// A record's bytes: a range of shared bytes (a mapped file, or a store's read), or a
/// pooled buffer (compressed files, or when mapping is off).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Payload {
    /// Copied out of a stream; the buffer is reused once parsed.
    Owned(Vec<u8>),
    /// A range of shared bytes (a mapped file, or the body of a store's ranged read):
    /// nothing copied. The batch holds the bytes (one reference a file or read per batch,
    /// not one a record: a reference counted per record was the producer's costliest
    /// step, its count's cache line passed between the cores).
    Mapped {
        /// The bytes' place in the batch's [`RawBatch::maps`] (set when the record is
        /// batched; in the shuffle buffer the record's file names it).
        slot: u32,
        /// The payload within it.
        range: Range<usize>,
    },
}

impl Default for Payload {
    fn default() -> Payload {
        Payload::Owned(Vec::new())
    }
}

/// One record's payload, not yet checked or parsed.
#[derive(Debug, Clone, Default)]
pub struct RawRecord {
    /// The payload.
    pub payload: Payload,
    /// The masked data CRC stored after it.
    pub crc: u32,
    /// Where it came from.
    pub origin: Origin,
}

impl RawRecord {
    /// The payload's bytes; a mapped one's map is among `maps` (its batch's).
    #[inline]
    pub fn bytes<'a>(&'a self, maps: &'a [SharedBytes]) -> &'a [u8] {
        match &self.payload {
            Payload::Owned(v) => v,
            Payload::Mapped { slot, range } => &maps[*slot as usize][range.clone()],
        }
    }

    /// The pooled buffer to reuse, if the payload had one.
    pub fn into_buffer(self) -> Option<Vec<u8>> {
        match self.payload {
            Payload::Owned(v) => Some(v),
            Payload::Mapped { .. } => None,
        }
    }
}

/// Bytes of one record's slot (its payload reference, CRC and origin) in the shuffle
/// buffer or a raw batch; the payload's own buffer is counted apart.
pub const SLOT_BYTES: u64 = std::mem::size_of::<RawRecord>() as u64;

/// A batch of raw records.
#[derive(Debug, Default)]
pub struct RawBatch {
    /// Position in the output order (from 0, across epochs).
    pub seq: u64,
    /// The epoch (from 0).
    pub epoch: u64,
    /// The records (none for a batch of cached rows).
    pub records: Vec<RawRecord>,
    /// The maps its mapped records point into (see [`Payload::Mapped`]).
    pub maps: Vec<SharedBytes>,
    /// A batch of the epoch that fills the cache: it goes into the cache once parsed.
    pub fill: bool,
    /// Only for the cache (the filling epoch's dropped remainder): not delivered.
    pub cache_only: bool,
    /// Rows to gather from the cache instead of records to parse.
    pub cached: Option<CachedRows>,
}

impl RawBatch {
    /// Bytes of the records' slots (not their payloads).
    pub fn slot_bytes(&self) -> u64 {
        self.records.capacity() as u64 * SLOT_BYTES
            + self.cached.as_ref().map_or(0, CachedRows::slot_bytes)
    }
}
