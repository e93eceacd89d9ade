//! The store settings of a run, a value handed to its builder and carried by each URL
//! it resolves: two runs in one process can differ.

use std::time::Duration;

/// The store settings of a run, handed to its builder: requests in flight and how long a
/// request may take, with its retries (`--io-concurrency`, `--io-timeout`), and the
/// switches of uploads, copies and reads that no flag sets (the command line takes their
/// defaults from `TFSHARD_*` environment variables, read in one place).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct IoOptions {
    /// `--io-concurrency`: requests in flight at most, across the runs of the process
    /// that share these settings (default [`DEFAULT_IO_CONCURRENCY`]).
    pub concurrency: usize,
    /// `--io-timeout`: the longest a request may take, retries and backoff included
    /// (default [`DEFAULT_IO_TIMEOUT`]). Nothing waits longer.
    pub timeout: Duration,
    /// Whether S3 uploads stream their parts from the staged files, with a CRC32C per
    /// part, 256 KiB at a time (default); off, each part is buffered and sent by
    /// `object_store` (`TFSHARD_STREAM_PARTS=0`).
    pub stream_parts: bool,
    /// The largest object an S3 copy moves in one request; a larger one is copied as a
    /// multipart upload of ranges (default [`MAX_COPY_BYTES`], S3's limit;
    /// `TFSHARD_MAX_COPY_BYTES` lowers it, for tests).
    pub max_copy_bytes: u64,
    /// Bytes per part of such a multipart copy (default [`COPY_PART_BYTES`];
    /// `TFSHARD_COPY_PART_BYTES`).
    pub copy_part_bytes: u64,
    /// Bytes the column chunks of one Parquet row group being read from a store may hold
    /// fetched or in flight (default [`READ_AHEAD_BYTES`]; `TFSHARD_READ_AHEAD_BYTES`).
    pub read_ahead_bytes: u64,
}

/// The largest object S3's CopyObject copies in one request (5 GiB, S3's limit).
pub const MAX_COPY_BYTES: u64 = 5 << 30;

/// Bytes per part of a multipart copy (S3: 5 MiB to 5 GiB a part, 10,000 parts, so
/// objects up to 5 TB).
pub const COPY_PART_BYTES: u64 = 512 << 20;

/// Bytes the column chunks of one row group being decoded may hold fetched or in flight
/// from a store, together (per worker: a worker decodes one row group at a time; the
/// converter's decode budget bounds the workers together). A row group within it is
/// fetched whole at once, adjacent chunks coalesced (the standard table's 8.5 MB row
/// groups); a larger one streams. Measured against moto on the standard table, S3→disk:
/// whole row groups 2.5–2.9 s, streamed in 8 MiB 3.2–3.5 s, in 4 MiB 3.7–4.2 s (each
/// request costs; fewer, larger ones win), peak memory 77–83, 75–81, 71–76 MiB.
pub const READ_AHEAD_BYTES: u64 = 16 << 20;

/// Default `--io-concurrency`: enough requests in flight to keep a store's bandwidth
/// busy from one machine, few enough not to be throttled.
pub const DEFAULT_IO_CONCURRENCY: usize = 16;
/// Default `--io-timeout`: 5 minutes, as long as a stalled store is worth waiting for.
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(300);

impl Default for IoOptions {
    fn default() -> IoOptions {
        IoOptions {
            concurrency: DEFAULT_IO_CONCURRENCY,
            timeout: DEFAULT_IO_TIMEOUT,
            stream_parts: true,
            max_copy_bytes: MAX_COPY_BYTES,
            copy_part_bytes: COPY_PART_BYTES,
            read_ahead_bytes: READ_AHEAD_BYTES,
        }
    }
}

impl IoOptions {
    /// The defaults.
    pub fn new() -> IoOptions {
        IoOptions::default()
    }

    /// Requests in flight at most (at least 1).
    pub fn with_concurrency(mut self, requests: usize) -> IoOptions {
        self.concurrency = requests.max(1);
        self
    }

    /// The longest a request may take, retries and backoff included.
    pub fn with_timeout(mut self, timeout: Duration) -> IoOptions {
        self.timeout = timeout;
        self
    }

    /// Whether S3 uploads stream their parts from the staged files (see
    /// [`IoOptions::stream_parts`]).
    pub fn with_stream_parts(mut self, on: bool) -> IoOptions {
        self.stream_parts = on;
        self
    }

    /// The largest object copied in one request (at least 1).
    pub fn with_max_copy_bytes(mut self, bytes: u64) -> IoOptions {
        self.max_copy_bytes = bytes.max(1);
        self
    }

    /// Bytes per part of a multipart copy (at least 1; S3 takes 10,000 parts at most, so
    /// a larger object's parts are larger).
    pub fn with_copy_part_bytes(mut self, bytes: u64) -> IoOptions {
        self.copy_part_bytes = bytes.max(1);
        self
    }

    /// Bytes one row group read from a store may hold fetched or in flight (at least 1).
    pub fn with_read_ahead_bytes(mut self, bytes: u64) -> IoOptions {
        self.read_ahead_bytes = bytes.max(1);
        self
    }
}
