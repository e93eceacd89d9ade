//! The store settings of a run, a value handed to its builder and carried by each URL
//! it resolves: two runs in one process can differ.

use std::time::Duration;

/// Requests in flight and how long a request may take, with its retries: the store
/// settings of a run, handed to its builder (`--io-concurrency`, `--io-timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct IoOptions {
    /// `--io-concurrency`: requests in flight at most, across the runs of the process
    /// that share these settings (default [`DEFAULT_IO_CONCURRENCY`]).
    pub concurrency: usize,
    /// `--io-timeout`: the longest a request may take, retries and backoff included
    /// (default [`DEFAULT_IO_TIMEOUT`]). Nothing waits longer.
    pub timeout: Duration,
}

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
}
