//! How progress leaves the library: a small trait the binary backs with a progress bar
//! (or nothing), as ripgrep's searcher hands results to a sink.

/// Receives progress reports. Called from worker threads.
pub trait Progress: Send + Sync {
    /// The total number of units (rows, records, files), when known.
    fn set_total(&self, _units: u64) {}
    /// `units` more are done; `bytes_written` is the running total written so far.
    fn advance(&self, _units: u64, _bytes_written: u64) {}
}

/// Reports nowhere.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {}
