//! How a caller watches and stops a run: progress leaves the library through a small
//! trait the binary backs with a progress bar (or nothing), as ripgrep's searcher hands
//! results to a sink; a [`CancelToken`] asks a run to stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};

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

/// A run's own thread pool of `threads` threads, named `tfshard-{name}N` (the names
/// show in `top -H`, `perf` and debuggers).
///
/// # Errors
///
/// An I/O error when the threads cannot start.
pub(crate) fn thread_pool(threads: usize, name: &'static str) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(move |i| format!("tfshard-{name}{i}"))
        .build()
        .map_err(|e| Error::from(std::io::Error::other(e)))
}

/// Asks a run to stop: the run checks it between batches, removes its temporaries and
/// returns [`ErrorKind::Interrupted`]. Clones share one flag. (The binary sets it from
/// its SIGINT/SIGTERM handler through [`CancelToken::flag`].)
#[derive(Debug, Default, Clone)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Asks every run holding a clone of this token to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// The flag itself, for a signal handler that may only store to an atomic.
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.0.clone()
    }

    /// `Err(Interrupted)` once cancelled.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Interrupted`] when cancelled.
    pub fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            return Err(Error::new(ErrorKind::Interrupted));
        }
        Ok(())
    }
}
