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
use crate::pipeline::{Batch, Column};
use crate::store::IoOptions;

/// The records of a set of uncompressed shards, by index.
#[pyclass(module = "tfshard._tfshard", frozen)]
pub struct RecordsCore {
    access: std::sync::Arc<RecordAccess>,
    spec: Vec<FeatureSpec>,
    raw: bool,
}

#[pymethods]
impl RecordsCore {
    /// Opens the shards of `paths` and their offsets (see `tfshard.Records`).
    #[new]
    #[pyo3(signature = (paths, columns=None, raw=false, compression="auto", generations=None, table_bound=None))]
    fn new(
        py: Python<'_>,
        paths: Vec<PathBuf>,
        columns: Option<Vec<String>>,
        raw: bool,
        compression: &str,
        generations: Option<Vec<u32>>,
        table_bound: Option<u64>,
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
                RecordAccess::open(&dataset, spec, compression, bound)
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
    /// `shuffle` is `"global"` or `"blocks"` (with `block` and `window`).
    #[pyo3(signature = (
        *, shuffle, block, window, seed, epoch, batch_size, start, ranks, rank,
        workers, worker, drop_remainder, threads, depth
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
        let steps = Steps {
            n,
            start: start.min(n),
            batch: batch_size,
            ranks,
            rank,
            workers,
            worker,
            drop_remainder,
        };
        let order = std::sync::Arc::new(EpochOrder::new(n, shuffle, seed, epoch));
        let shared = std::sync::Arc::new((
            std::sync::Mutex::new(Ahead::default()),
            std::sync::Condvar::new(),
        ));
        let claimed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let depth = depth.max(1);
        let mut handles = Vec::new();
        for _ in 0..threads.max(1) {
            let (access, order, shared, claimed) = (
                self.access.clone(),
                order.clone(),
                shared.clone(),
                claimed.clone(),
            );
            handles.push(std::thread::spawn(move || loop {
                let k = claimed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some([from, to]) = steps.positions(k) else {
                    return;
                };
                {
                    // At most `depth` ahead of the consumer.
                    let (lock, wake) = &*shared;
                    let mut ahead = lock.lock().unwrap_or_else(|e| e.into_inner());
                    while !ahead.stop && k >= ahead.taken + depth {
                        ahead = wake.wait(ahead).unwrap_or_else(|e| e.into_inner());
                    }
                    if ahead.stop {
                        return;
                    }
                }
                let indices = order.records(from, to);
                let batch = access.batch(&indices);
                let (lock, wake) = &*shared;
                let mut ahead = lock.lock().unwrap_or_else(|e| e.into_inner());
                ahead.ready.insert(k, batch);
                wake.notify_all();
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

/// Where one reader (a rank, or a DataLoader worker of one) is in an epoch read in a
/// global order: every rank takes, at each step, its `batch` positions of the next
/// `batch × ranks` (in whole batches: rank r the r-th), from `start` on; a DataLoader
/// worker w of W takes the steps w, w + W, …; the last, short step is shared among the
/// ranks as evenly as records allow (or dropped).
#[derive(Debug, Clone, Copy)]
struct Steps {
    n: u64,
    start: u64,
    batch: u64,
    ranks: u64,
    rank: u64,
    workers: u64,
    worker: u64,
    drop_remainder: bool,
}

impl Steps {
    /// The positions `[from, to)` of this reader's `k`-th batch, if it has one.
    fn positions(&self, k: u64) -> Option<[u64; 2]> {
        let s = self.worker.checked_add(k.checked_mul(self.workers)?)?;
        let span = self.batch * self.ranks;
        let first = self.start.checked_add(s.checked_mul(span)?)?;
        if first >= self.n {
            return None;
        }
        if first + span <= self.n {
            let from = first + self.rank * self.batch;
            return Some([from, from + self.batch]);
        }
        if self.drop_remainder {
            return None;
        }
        let m = self.n - first;
        let from = first + m * self.rank / self.ranks;
        let to = first + m * (self.rank + 1) / self.ranks;
        (from < to).then_some([from, to])
    }
}

/// The batches made ahead, by number, and how far the consumer got.
#[derive(Default)]
struct Ahead {
    ready: std::collections::BTreeMap<u64, crate::error::Result<crate::pipeline::Batch>>,
    taken: u64,
    stop: bool,
}

/// One epoch of one reader's batches in a global order ([`Steps`]), made ahead on
/// `threads` threads, at most `depth` batches ahead of the consumer.
#[pyclass(module = "tfshard._tfshard", frozen)]
pub struct OrderedBatches {
    shared: std::sync::Arc<(std::sync::Mutex<Ahead>, std::sync::Condvar)>,
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
            let (lock, wake) = &*self.shared;
            let mut ahead = lock.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(batch) = ahead.ready.remove(&k) {
                    ahead.taken = k + 1;
                    wake.notify_all();
                    return Some(batch);
                }
                let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
                if threads.iter().all(|t| t.is_finished()) {
                    // Every thread done and batch k not made: the epoch's end, unless a
                    // thread died making it.
                    let died = threads.drain(..).any(|t| t.join().is_err());
                    return died.then(|| {
                        Err(crate::error::Error::from(std::io::Error::other(
                            "a reader thread stopped on a bug: the epoch is incomplete",
                        )))
                    });
                }
                drop(threads);
                ahead = wake
                    .wait_timeout(ahead, std::time::Duration::from_millis(50))
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
        let (lock, wake) = &*self.shared;
        lock.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
        wake.notify_all();
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
