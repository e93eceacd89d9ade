//! Batch: consecutive (shuffled) raw records grouped `batch_size` at a time, each batch
//! numbered so the parse workers' output can be put back in order. An epoch's last short
//! batch is delivered unless `drop_remainder`.

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

/// One record's payload, not yet checked or parsed.
#[derive(Debug, Clone, Default)]
pub struct RawRecord {
    /// The payload (a pooled buffer, reused once parsed).
    pub bytes: Vec<u8>,
    /// The masked data CRC stored after it.
    pub crc: u32,
    /// Where it came from.
    pub origin: Origin,
}

/// A batch of raw records.
#[derive(Debug, Default)]
pub struct RawBatch {
    /// Position in the output order (from 0, across epochs).
    pub seq: u64,
    /// The epoch (from 0).
    pub epoch: u64,
    /// The records.
    pub records: Vec<RawRecord>,
}
