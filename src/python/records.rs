//! Random access for `tfshard.Records`: [`RecordsCore`], record `i` of a set of shards
//! as a dict of NumPy values (or its bytes), a list of indices as one batch (the arrays
//! `Dataset` batches hold) or as a list of records (what a DataLoader's `collate_fn`
//! takes). See [`crate::pipeline::access`].

use std::path::PathBuf;

use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use super::batches::{open_set, parse_compression, to_numpy, values_to_numpy};
use super::to_py_err;
use crate::example::FeatureSpec;
use crate::pipeline::access::{RecordAccess, DEFAULT_TABLE_BOUND};
use crate::pipeline::schedule::Schedule;
use crate::pipeline::{Batch, Column};
use crate::store::IoOptions;

/// The batches a reader yields in an epoch read in a global order from position
/// `start` (see [`Schedule`]): `Dataset.__len__` and the tests' model.
#[pyfunction]
#[pyo3(signature = (n, start, batch, ranks, rank, workers, worker, drop_remainder, even))]
#[allow(clippy::too_many_arguments)]
pub fn schedule_batches(
    n: u64,
    start: u64,
    batch: u64,
    ranks: u64,
    rank: u64,
    workers: u64,
    worker: u64,
    drop_remainder: bool,
    even: bool,
) -> PyResult<u64> {
    if batch == 0 || ranks == 0 || workers == 0 || rank >= ranks || worker >= workers {
        return Err(PyValueError::new_err(
            "batch, ranks and workers must be positive, rank and worker below them",
        ));
    }
    let schedule = Schedule {
        n,
        start: start.min(n),
        batch,
        ranks,
        rank,
        workers,
        worker,
        drop_remainder,
        even,
    };
    Ok(schedule.batches())
}

/// The records `(start, end)` a rank reads in file order (the buffer shuffle): see
/// [`crate::pipeline::schedule::rank_range`].
#[pyfunction]
#[pyo3(signature = (n, batch, ranks, rank, drop_remainder, even))]
pub fn rank_range(
    n: u64,
    batch: u64,
    ranks: u64,
    rank: u64,
    drop_remainder: bool,
    even: bool,
) -> PyResult<(u64, u64)> {
    if batch == 0 || ranks == 0 || rank >= ranks {
        return Err(PyValueError::new_err(
            "batch and ranks must be positive, rank below ranks",
        ));
    }
    let [start, end] =
        crate::pipeline::schedule::rank_range(n, batch, ranks, rank, drop_remainder, even);
    Ok((start, end))
}

/// The records of a set of uncompressed shards, by index.
#[pyclass(module = "tfshard._tfshard", frozen)]
pub struct RecordsCore {
    access: std::sync::Arc<RecordAccess>,
    spec: Vec<FeatureSpec>,
    raw: bool,
}

#[pymethods]
impl RecordsCore {
    /// Opens the shards of `paths` and their offsets (see `tfshard.Records`); `block`:
    /// to be read in blocks of that many records (0: about 4 MiB of them), keeping one
    /// offset a block where every record's would pass `table_bound`.
    #[new]
    #[pyo3(signature = (
        paths, columns=None, raw=false, compression="auto", generations=None,
        table_bound=None, block=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        paths: Vec<PathBuf>,
        columns: Option<Vec<String>>,
        raw: bool,
        compression: &str,
        generations: Option<Vec<u32>>,
        table_bound: Option<u64>,
        block: Option<u64>,
    ) -> PyResult<RecordsCore> {
        let compression = parse_compression(compression)?;
        let io = IoOptions::default();
        if raw && columns.is_some() {
            return Err(PyValueError::new_err(
                "columns select features to decode; raw=True gives each record's bytes whole",
            ));
        }
        let (dataset, spec) = if raw {
            let mut dataset = py
                .detach(|| crate::dataset::Dataset::discover(&paths, io))
                .map_err(to_py_err)?;
            if let Some(g) = &generations {
                dataset.only_generations(g).map_err(to_py_err)?;
            }
            (dataset, Vec::new())
        } else {
            open_set(py, &paths, columns, compression, generations.as_deref(), io)?
        };
        let bound = table_bound.unwrap_or(DEFAULT_TABLE_BOUND);
        let access = py
            .detach(|| {
                let spec = (!raw).then_some(&spec[..]);
                match block {
                    Some(block) => {
                        RecordAccess::open_blocks(&dataset, spec, compression, bound, block)
                    }
                    None => RecordAccess::open(&dataset, spec, compression, bound),
                }
            })
            .map_err(to_py_err)?;
        Ok(RecordsCore {
            access: std::sync::Arc::new(access),
            spec,
            raw,
        })
    }

    fn __len__(&self) -> usize {
        self.access.len() as usize
    }

    /// The shard files, in index order.
    #[getter]
    fn files(&self) -> Vec<String> {
        (self.access.files().iter())
            .map(|f| f.display().to_string())
            .collect()
    }

    /// Records per shard.
    #[getter]
    fn counts(&self) -> Vec<u64> {
        self.access.counts()
    }

    /// Bytes of the shards' records, framed.
    #[getter]
    fn data_bytes(&self) -> u64 {
        self.access.data_bytes()
    }

    /// Bytes the offset tables hold.
    #[getter]
    fn table_bytes(&self) -> u64 {
        self.access.table_bytes()
    }

    /// Records a block: the one asked for, else about 4 MiB of them.
    #[getter]
    fn block(&self) -> u64 {
        self.access.block()
    }

    /// The features decoded, as `tfshard.schema` gives them.
    #[getter]
    fn spec(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value =
            serde_json::to_value(&self.spec).map_err(|e| PyValueError::new_err(e.to_string()))?;
        super::commands::to_python(py, &value)
    }

    /// Record `i`: a dict of NumPy values, or (raw) its bytes.
    fn get(&self, py: Python<'_>, i: u64) -> PyResult<Py<PyAny>> {
        self.check(&[i])?;
        if self.raw {
            let mut got = py.detach(|| self.access.raw(&[i])).map_err(to_py_err)?;
            return Ok(PyBytes::new(py, &got.pop().unwrap_or_default())
                .into_any()
                .unbind());
        }
        let batch = py.detach(|| self.access.batch(&[i])).map_err(to_py_err)?;
        Ok(record_dict(py, batch)?.into_any().unbind())
    }

    /// Records `indices` as one batch (a dict of arrays, as `Dataset` gives them), or
    /// (raw) a list of bytes.
    fn get_batch(&self, py: Python<'_>, indices: Vec<u64>) -> PyResult<Py<PyAny>> {
        self.check(&indices)?;
        if self.raw {
            return self.raw_list(py, &indices);
        }
        let batch = py
            .detach(|| self.access.batch(&indices))
            .map_err(to_py_err)?;
        Ok(to_numpy(py, batch)?.into_any().unbind())
    }

    /// Records `indices` as a list of records (dicts, or bytes).
    fn get_list(&self, py: Python<'_>, indices: Vec<u64>) -> PyResult<Py<PyAny>> {
        self.check(&indices)?;
        if self.raw {
            return self.raw_list(py, &indices);
        }
        let records = py
            .detach(|| self.access.each(&indices))
            .map_err(to_py_err)?;
        let list = PyList::empty(py);
        for record in records {
            list.append(record_dict(py, record)?)?;
        }
        Ok(list.into_any().unbind())
    }

    /// One epoch of batches in a global order (see `Dataset(shuffle="global")`):
    /// `shuffle` is `"global"` or `"blocks"` (with `block` and `window`); made on
    /// `threads` threads, `depth` groups of batches ahead ([`Groups`]).
    #[pyo3(signature = (
        *, shuffle, block, window, seed, epoch, batch_size, start, ranks, rank,
        workers, worker, drop_remainder, threads, depth, even=true
    ))]
    #[allow(clippy::too_many_arguments)]
    fn ordered(
        &self,
        shuffle: &str,
        block: u64,
        window: u64,
        seed: u64,
        epoch: u64,
        batch_size: u64,
        start: u64,
        ranks: u64,
        rank: u64,
        workers: u64,
        worker: u64,
        drop_remainder: bool,
        threads: usize,
        depth: u64,
        even: bool,
    ) -> PyResult<OrderedBatches> {
        use crate::pipeline::order::{EpochOrder, Shuffle};
        let shuffle = match shuffle {
            "global" => Shuffle::Global,
            "blocks" => Shuffle::Blocks { block, window },
            other => {
                return Err(PyValueError::new_err(format!(
                    "shuffle must be \"global\" or \"blocks\" here, not {other:?}"
                )))
            }
        };
        if batch_size == 0 || ranks == 0 || workers == 0 || rank >= ranks || worker >= workers {
            return Err(PyValueError::new_err(
                "batch_size, ranks and workers must be positive",
            ));
        }
        let n = self.access.len();
        let steps = Schedule {
            n,
            start: start.min(n),
            batch: batch_size,
            ranks,
            rank,
            workers,
            worker,
            drop_remainder,
            even,
        };
        let order = std::sync::Arc::new(EpochOrder::new(n, shuffle, seed, epoch));
        let groups = Groups::new(steps, &order, self.access.by_window());
        // The batches are made on the threads and freed on Python's: mimalloc frees them
        // without glibc's arena lock (see `crate::alloc`).
        crate::alloc::use_mimalloc();
        let shared = std::sync::Arc::new(Shared::default());
        shared.lock().running = threads.max(1);
        let opening = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut handles = Vec::new();
        // A store's windows read a few ahead (fewer, larger requests).
        let read_ahead = (groups.windows > 0 && self.access.in_store() && !self.access.marks())
            .then(|| {
                std::sync::Arc::new(crate::pipeline::ahead::ReadAhead::new(
                    crate::pipeline::ahead::AHEAD_WINDOWS,
                    crate::pipeline::ahead::AHEAD_BYTES,
                ))
            });
        for _ in 0..threads.max(1) {
            let (access, order, shared) = (self.access.clone(), order.clone(), shared.clone());
            let read_ahead = read_ahead.clone();
            let opening = opening.clone();
            // Windows: two at least (a batch across two waits for the second). Groups of
            // GROUP_RECORDS: 8 at least (32k records, a few MB of batches): the consumer's
            // pauses (Python's collector) no longer stop the threads (1.67 of the 2 cores
            // busy in some epochs with 3, 1.96 with 8).
            let ahead = match groups.windows {
                0 => depth.max(8),
                _ => depth.max(2),
            } as usize;
            handles.push(std::thread::spawn(move || {
                let _running = Running(shared.clone());
                access.open_local(&opening);
                while let Some(pieces) = shared.claim(&groups, &order, ahead) {
                    let made = match order.window_of(pieces[0].from) {
                        // A window's records read once, block after block (a store's in a
                        // request a run, with the adjoining runs of the next windows),
                        // decoded in that order, then gathered into their batches.
                        Some(w) if groups.windows > 0 => {
                            // (Window v's records and rows: this reader's positions in it.)
                            let reads_of = |v: u64| {
                                let ranges = |pieces: &[Piece]| -> Vec<[u64; 2]> {
                                    pieces.iter().map(|p| [p.from, p.to]).collect()
                                };
                                let ranges = match v == w {
                                    true => ranges(&pieces),
                                    false => groups
                                        .pieces(v, &order)
                                        .map_or_else(Vec::new, |(pieces, _)| ranges(&pieces)),
                                };
                                match ranges.is_empty() {
                                    true => (Vec::new(), Vec::new()),
                                    false => order.window_reads(v, &ranges),
                                }
                            };
                            match &read_ahead {
                                Some(read_ahead) => read_ahead
                                    .plan(w, |v| {
                                        let (records, rows) = reads_of(v);
                                        let runs = access.window_runs(&records)?;
                                        Ok(((records, rows), runs))
                                    })
                                    .and_then(|((records, rows), planned)| {
                                        access.read_planned(&planned)?;
                                        access.batches(&records, &rows, Some(&planned))
                                    }),
                                None => {
                                    let (records, rows) = reads_of(w);
                                    access.batches(&records, &rows, None)
                                }
                            }
                        }
                        _ => (pieces.iter())
                            .map(|p| access.batch(&order.records(p.from, p.to)))
                            .collect(),
                    };
                    shared.made(&groups, &order, &access, pieces, made);
                }
            }));
        }
        Ok(OrderedBatches {
            shared,
            threads: std::sync::Mutex::new(handles),
            next: std::sync::atomic::AtomicU64::new(0),
        })
    }
}

impl RecordsCore {
    fn check(&self, indices: &[u64]) -> PyResult<()> {
        let n = self.access.len();
        match indices.iter().find(|&&i| i >= n) {
            Some(i) => Err(PyIndexError::new_err(format!(
                "record {i} of a set of {n} records"
            ))),
            None => Ok(()),
        }
    }

    fn raw_list(&self, py: Python<'_>, indices: &[u64]) -> PyResult<Py<PyAny>> {
        let got = py.detach(|| self.access.raw(indices)).map_err(to_py_err)?;
        let list = PyList::empty(py);
        for bytes in got {
            list.append(PyBytes::new(py, &bytes))?;
        }
        Ok(list.into_any().unbind())
    }
}

/// A batch of one record as `{feature: value}`: a fixed shape's array of that shape (a
/// scalar's of shape `()`), a variable length's flat array.
fn record_dict(py: Python<'_>, batch: Batch) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for column in batch.columns {
        let Column {
            name,
            shape,
            values,
            row_splits,
            ..
        } = column;
        let value = match row_splits {
            None => {
                let dims: Vec<usize> = shape
                    .unwrap_or_default()
                    .iter()
                    .map(|&d| d as usize)
                    .collect();
                values_to_numpy(py, values, Some(&dims))?
            }
            Some(_) => values_to_numpy(py, values, None)?,
        };
        out.set_item(name, value)?;
    }
    Ok(out)
}

/// This reader's batches (its steps `0..total`) cut into groups, each made by one
/// thread at once: `GROUP_RECORDS` records' worth of batches; or, with blocks from a
/// store or with marks, the positions of one window (its records read once, as runs),
/// where a batch across two windows comes in two pieces, one from each window's group,
/// joined when both are made.
#[derive(Debug, Clone, Copy)]
struct Groups {
    steps: Schedule,
    total: u64,
    /// Windows of blocks (0: the global shuffle).
    windows: u64,
}

/// Records a group of batches holds under the global shuffle (its batches made by one
/// thread, handed over at once).
const GROUP_RECORDS: u64 = 4096;

/// Positions `[from, to)` of batch `k`: all of it or the part in one window.
#[derive(Debug, Clone, Copy)]
struct Piece {
    k: u64,
    from: u64,
    to: u64,
}

impl Groups {
    /// `by_window`: with blocks, a group a window (a store's shards, or shards with
    /// marks); else groups of `GROUP_RECORDS` (mapped shards are read faster batch by
    /// batch: sorting a window's records costs more than it saves).
    fn new(steps: Schedule, order: &crate::pipeline::order::EpochOrder, by_window: bool) -> Groups {
        let total = steps.batches();
        Groups {
            steps,
            total,
            windows: if by_window { order.windows() } else { 0 },
        }
    }

    fn positions(&self, k: u64) -> [u64; 2] {
        self.steps.positions(k).expect("a step of the reader")
    }

    /// Group `g`'s pieces (none: this reader has no position in window `g`), and the
    /// batch after its last; `None` past the last group.
    fn pieces(
        &self,
        g: u64,
        order: &crate::pipeline::order::EpochOrder,
    ) -> Option<(Vec<Piece>, u64)> {
        if self.windows == 0 {
            let per = (GROUP_RECORDS / self.steps.batch).max(1);
            let k0 = g.checked_mul(per).filter(|&k| k < self.total)?;
            let k1 = (k0 + per).min(self.total);
            let pieces = (k0..k1).map(|k| {
                let [from, to] = self.positions(k);
                Piece { k, from, to }
            });
            return Some((pieces.collect(), k1));
        }
        if g >= self.windows {
            return None;
        }
        let [start, end] = order.window_range(g);
        let k0 = partition_point(0, self.total, |k| self.positions(k)[1] <= start);
        let k1 = partition_point(k0, self.total, |k| self.positions(k)[0] < end);
        let pieces = (k0..k1).map(|k| {
            let [from, to] = self.positions(k);
            Piece {
                k,
                from: from.max(start),
                to: to.min(end),
            }
        });
        Some((pieces.collect(), k1))
    }

    /// The pieces batch `k` comes in.
    fn parts(&self, k: u64, order: &crate::pipeline::order::EpochOrder) -> usize {
        if self.windows == 0 {
            return 1;
        }
        let [from, to] = self.positions(k);
        match (order.window_of(from), order.window_of(to - 1)) {
            (Some(first), Some(last)) => (last - first + 1) as usize,
            _ => 1,
        }
    }
}

/// The first `k` in `[lo, hi)` where `holds` fails (`hi` if none), `holds` true then false.
fn partition_point(mut lo: u64, mut hi: u64, holds: impl Fn(u64) -> bool) -> u64 {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if holds(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// What the reader threads and the consumer share: the batches made ahead, by number;
/// the groups claimed and not yet consumed (their ends); the consumer waits on `ready`,
/// the threads on `room`.
#[derive(Default)]
struct Shared {
    ahead: std::sync::Mutex<Ahead>,
    ready: std::sync::Condvar,
    room: std::sync::Condvar,
}

#[derive(Default)]
struct Ahead {
    ready: std::collections::BTreeMap<u64, crate::error::Result<crate::pipeline::Batch>>,
    /// Pieces of batches not all made: by batch, (first position, piece).
    parts: std::collections::BTreeMap<u64, Vec<(u64, crate::pipeline::Batch)>>,
    /// The next batch the consumer takes.
    taken: u64,
    /// The next group to claim.
    cursor: u64,
    /// The batch after each group claimed whose batches are not all taken, in order.
    claimed: std::collections::VecDeque<u64>,
    /// Threads still making batches.
    running: usize,
    stop: bool,
}

/// Counts a reader thread out when it ends (also by a panic), waking the consumer: a
/// batch it waits for that no thread is left to make is the epoch's end.
struct Running(std::sync::Arc<Shared>);

impl Drop for Running {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.running -= 1;
        self.0.ready.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Ahead> {
        self.ahead.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next group's pieces (never none), once fewer than `ahead` groups are made and
    /// not consumed; `None` at the epoch's end or when stopped.
    fn claim(
        &self,
        groups: &Groups,
        order: &crate::pipeline::order::EpochOrder,
        ahead: usize,
    ) -> Option<Vec<Piece>> {
        let mut state = self.lock();
        loop {
            while !state.stop && state.claimed.len() >= ahead {
                state = self.room.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            if state.stop {
                return None;
            }
            let (pieces, end) = groups.pieces(state.cursor, order)?;
            state.cursor += 1;
            if !pieces.is_empty() {
                // (Groups that end at the same batch, the pieces of one batch across
                // small windows, count once: each waits for the others.)
                if state.claimed.back() != Some(&end) {
                    state.claimed.push_back(end);
                }
                return Some(pieces);
            }
        }
    }

    /// Hands over a group's pieces (or the error that stopped it, as its first batch's):
    /// a batch whose pieces are all made is ready.
    fn made(
        &self,
        groups: &Groups,
        order: &crate::pipeline::order::EpochOrder,
        access: &RecordAccess,
        pieces: Vec<Piece>,
        made: crate::error::Result<Vec<crate::pipeline::Batch>>,
    ) {
        let mut state = self.lock();
        let first = pieces.first().map_or(state.taken, |p| p.k);
        match made {
            Ok(batches) => {
                for (p, batch) in pieces.into_iter().zip(batches) {
                    if state.ready.contains_key(&p.k) {
                        continue; // (an error, from its other piece)
                    }
                    let parts = groups.parts(p.k, order);
                    if parts == 1 {
                        state.ready.insert(p.k, Ok(batch));
                        continue;
                    }
                    let got = state.parts.entry(p.k).or_default();
                    got.push((p.from, batch));
                    if got.len() == parts {
                        let mut got = state.parts.remove(&p.k).unwrap_or_default();
                        got.sort_by_key(|(from, _)| *from);
                        let joined = access.join(got.into_iter().map(|(_, b)| b).collect());
                        state.ready.insert(p.k, joined);
                    }
                }
            }
            Err(e) => {
                state.parts.remove(&first);
                state.ready.insert(first, Err(e));
            }
        }
        if state.ready.contains_key(&state.taken) {
            self.ready.notify_all();
        }
    }

    /// Batch `k`, if made: taken (the group it ends, consumed, makes room).
    fn take(
        &self,
        state: &mut Ahead,
        k: u64,
    ) -> Option<crate::error::Result<crate::pipeline::Batch>> {
        let batch = state.ready.remove(&k)?;
        state.taken = k + 1;
        let mut freed = false;
        while state.claimed.front().is_some_and(|&end| end <= state.taken) {
            state.claimed.pop_front();
            freed = true;
        }
        if freed {
            self.room.notify_all();
        }
        Some(batch)
    }
}

/// One epoch of one reader's batches in a global order ([`Schedule`]), made ahead on
/// threads, at most `depth` groups of them ([`Groups`]) ahead of the consumer.
#[pyclass(module = "tfshard._tfshard", frozen)]
pub struct OrderedBatches {
    shared: std::sync::Arc<Shared>,
    threads: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>,
    next: std::sync::atomic::AtomicU64,
}

#[pymethods]
impl OrderedBatches {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let k = self.next.load(std::sync::atomic::Ordering::SeqCst);
        let got = py.detach(|| {
            let mut state = self.shared.lock();
            loop {
                if let Some(batch) = self.shared.take(&mut state, k) {
                    return Some(batch);
                }
                let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
                if state.running == 0 || threads.iter().all(|t| t.is_finished()) {
                    // Every thread done and batch k not made: the epoch's end, unless a
                    // thread died making it. (Each thread's end wakes this wait: waiting
                    // out the timeout instead cost 50 ms an epoch, 15% of one here.)
                    let died = threads.drain(..).any(|t| t.join().is_err());
                    return died.then(|| {
                        Err(crate::error::Error::from(std::io::Error::other(
                            "a reader thread stopped on a bug: the epoch is incomplete",
                        )))
                    });
                }
                drop(threads);
                state = (self.shared.ready)
                    .wait_timeout(state, std::time::Duration::from_millis(50))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        });
        match got {
            None => Ok(None),
            Some(Err(e)) => {
                self.close(py);
                Err(to_py_err(e))
            }
            Some(Ok(batch)) => {
                self.next.store(k + 1, std::sync::atomic::Ordering::SeqCst);
                Ok(Some(to_numpy(py, batch)?.into_any().unbind()))
            }
        }
    }

    /// Stops the threads (also done when the iterator is dropped).
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.stop());
    }
}

impl OrderedBatches {
    fn stop(&self) {
        self.shared.lock().stop = true;
        self.shared.room.notify_all();
        for t in self
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = t.join();
        }
    }
}

impl Drop for OrderedBatches {
    fn drop(&mut self) {
        self.stop();
    }
}
