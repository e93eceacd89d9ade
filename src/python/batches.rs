//! The reader pipeline for `tfshard.Dataset`: [`Shards`] (the files, their record
//! counts and the spec, found once) and [`Batches`] (one epoch of one share of the
//! records, as NumPy arrays or a pyarrow RecordBatch).
//!
//! NumPy arrays take over the pipeline's column vectors without a copy; bytes values
//! become `bytes` objects (an object array), as NumPy has no other home for them.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arrow_array::{
    Array, ArrayRef, BinaryArray, FixedSizeListArray, Float32Array, Int64Array, ListArray,
    RecordBatch,
};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_pyarrow::ToPyArrow;
use arrow_schema::{Field, Schema};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use super::to_py_err;
use crate::dataset::Dataset;
use crate::example::FeatureSpec;
use crate::pipeline::{Batch, CacheMode, Column, Pipeline, SharedCache, Values};
use crate::store::IoOptions;
use crate::tfrecord::Compression;

/// A set of shards to read: the files in order, their records, the spec (restricted to
/// the columns asked for).
#[pyclass(module = "tfshard._tfshard", frozen)]
pub struct Shards {
    paths: Vec<PathBuf>,
    files: Vec<PathBuf>,
    spec: Vec<FeatureSpec>,
    /// Each file's records: the manifest's, else counted once when first needed.
    counts: Mutex<Option<Vec<u64>>>,
    listed: Vec<Option<u64>>,
    compression: Option<Compression>,
    io: IoOptions,
    threads: usize,
    /// The cache the last complete epoch filled, with the range of records it holds.
    cache: Mutex<Option<([u64; 2], SharedCache)>>,
}

pub(crate) fn parse_compression(text: &str) -> PyResult<Option<Compression>> {
    match (text, Compression::from_name(text)) {
        ("auto", _) => Ok(None),
        (_, Some(c)) => Ok(Some(c)),
        (other, None) => Err(PyValueError::new_err(format!(
            "compression must be auto, none, gzip or zlib, not {other:?}"
        ))),
    }
}

#[pymethods]
impl Shards {
    /// Finds the shards of `paths` (files, folders, manifests, URLs) and their spec.
    #[new]
    #[pyo3(signature = (paths, columns=None, compression="auto", threads=None, generations=None))]
    fn new(
        py: Python<'_>,
        paths: Vec<PathBuf>,
        columns: Option<Vec<String>>,
        compression: &str,
        threads: Option<usize>,
        generations: Option<Vec<u32>>,
    ) -> PyResult<Shards> {
        let compression = parse_compression(compression)?;
        if threads == Some(0) {
            return Err(PyValueError::new_err("threads must be at least 1"));
        }
        let threads = threads.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
        let io = IoOptions::default();
        let (dataset, spec) =
            open_set(py, &paths, columns, compression, generations.as_deref(), io)?;
        let entries = dataset.listed();
        let listed: Vec<Option<u64>> = dataset
            .shards
            .iter()
            .map(|f| entries.get(f).map(|s| s.records))
            .collect();
        // Some generations: the pipeline reads those files, not the folders given.
        let paths = match generations {
            Some(_) => dataset.shards.clone(),
            None => paths,
        };
        Ok(Shards {
            paths,
            files: dataset.shards,
            spec,
            counts: Mutex::new(None),
            listed,
            compression,
            io,
            threads,
            cache: Mutex::new(None),
        })
    }

    /// The shard files, in reading order.
    #[getter]
    fn files(&self) -> Vec<String> {
        self.files.iter().map(|f| f.display().to_string()).collect()
    }

    /// The feature spec the batches follow, as `tfshard.schema` returns it.
    #[getter]
    fn spec(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value =
            serde_json::to_value(&self.spec).map_err(|e| PyValueError::new_err(e.to_string()))?;
        super::commands::to_python(py, &value)
    }

    /// Records in each file (the manifest's counts; files no manifest lists are counted
    /// once, by reading their framing).
    fn counts(&self, py: Python<'_>) -> PyResult<Vec<u64>> {
        py.detach(|| self.counted()).map_err(to_py_err)
    }

    /// One epoch of records `[start, end)` (default: all) as batches.
    #[pyo3(signature = (
        batch_size, *, shuffle_buffer, seed, drop_remainder, start=None, end=None,
        skip_batches=0, cache=None, cycle_length=None, format="numpy"
    ))]
    #[allow(clippy::too_many_arguments)]
    fn batches(
        slf: Py<Shards>,
        py: Python<'_>,
        batch_size: usize,
        shuffle_buffer: usize,
        seed: u64,
        drop_remainder: bool,
        start: Option<u64>,
        end: Option<u64>,
        skip_batches: u64,
        cache: Option<String>,
        cycle_length: Option<usize>,
        format: &str,
    ) -> PyResult<Batches> {
        let arrow = match format {
            "numpy" => false,
            "arrow" => true,
            other => {
                return Err(PyValueError::new_err(format!(
                    "format must be \"numpy\" or \"arrow\", not {other:?}"
                )))
            }
        };
        if batch_size == 0 {
            return Err(PyValueError::new_err("batch_size must be at least 1"));
        }
        if cycle_length == Some(0) {
            return Err(PyValueError::new_err("cycle_length must be at least 1"));
        }
        let shards = slf.get();
        let mut builder = Pipeline::builder(shards.paths.clone())
            .with_spec(shards.spec.clone())
            .with_threads(shards.threads)
            .with_shuffled_files(shuffle_buffer > 1)
            .with_shuffle(shuffle_buffer, seed)
            .with_batch(batch_size, drop_remainder)
            .with_skip_batches(skip_batches)
            .with_io(shards.io);
        if let Some(c) = shards.compression {
            builder = builder.with_compression(c);
        }
        if let Some(c) = cycle_length {
            builder = builder.with_interleave(c, 1);
        }
        let range = match (start, end) {
            (None, None) => None,
            (start, end) => {
                let counts = py.detach(|| shards.counted()).map_err(to_py_err)?;
                let total: u64 = counts.iter().sum();
                let (start, end) = (start.unwrap_or(0), end.unwrap_or(total));
                builder = builder.with_record_range(counts, start, end);
                Some([start, end])
            }
        };
        let key = range.unwrap_or([0, u64::MAX]);
        match cache.as_deref() {
            None => {}
            Some(mode) => {
                let shared = shards
                    .cache
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                if let Some((_, c)) = shared.filter(|(r, _)| *r == key) {
                    builder = builder.with_shared_cache(c);
                }
                builder = builder.with_cache(match mode {
                    "memory" => CacheMode::Memory,
                    path => CacheMode::File(PathBuf::from(path)),
                });
            }
        }
        // The reader's batches are made on its workers and freed on Python's thread:
        // mimalloc frees them without glibc's arena lock (see `crate::alloc`).
        crate::alloc::use_mimalloc();
        let pipeline = py.detach(|| builder.build()).map_err(to_py_err)?;
        Ok(Batches {
            pipeline: Mutex::new(Some(pipeline)),
            arrow,
            shards: slf.clone_ref(py),
            key,
        })
    }
}

/// The shards of `paths` (only those of `generations`, if given) and the spec of
/// their records, restricted to `columns`.
pub(crate) fn open_set(
    py: Python<'_>,
    paths: &[PathBuf],
    columns: Option<Vec<String>>,
    compression: Option<Compression>,
    generations: Option<&[u32]>,
    io: IoOptions,
) -> PyResult<(Dataset, Vec<FeatureSpec>)> {
    let (dataset, spec) = py
        .detach(|| -> crate::error::Result<_> {
            let mut dataset = Dataset::discover(paths, io)?;
            if let Some(generations) = generations {
                dataset.only_generations(generations)?;
            }
            let record_type = dataset.record_type();
            let spec = crate::records::feature_spec(&dataset, compression, record_type)?;
            Ok((dataset, spec))
        })
        .map_err(to_py_err)?;
    let spec = match columns {
        None => spec,
        Some(columns) => {
            let names: Vec<&str> = spec.iter().map(|f| f.name.as_str()).collect();
            if let Some(missing) = columns.iter().find(|c| !names.contains(&c.as_str())) {
                return Err(PyValueError::new_err(format!(
                    "no feature {missing:?} in the shards (they have: {})",
                    names.join(", ")
                )));
            }
            spec.into_iter()
                .filter(|f| columns.contains(&f.name))
                .collect()
        }
    };
    Ok((dataset, spec))
}

impl Shards {
    fn counted(&self) -> crate::error::Result<Vec<u64>> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = counts.as_ref() {
            return Ok(c.clone());
        }
        let mut out = Vec::with_capacity(self.files.len());
        for (file, listed) in self.files.iter().zip(&self.listed) {
            out.push(match listed {
                Some(n) => *n,
                None => {
                    let mut reader = crate::records::open(file, self.compression, self.io)?
                        .with_check_data_crc(false);
                    let mut n = 0;
                    while reader.read_record()?.is_some() {
                        n += 1;
                    }
                    n
                }
            });
        }
        *counts = Some(out.clone());
        Ok(out)
    }
}

/// One epoch's batches: an iterator of dicts of NumPy arrays, or of pyarrow
/// RecordBatches.
#[pyclass(module = "tfshard._tfshard", frozen)]
pub struct Batches {
    pipeline: Mutex<Option<Pipeline>>,
    arrow: bool,
    shards: Py<Shards>,
    key: [u64; 2],
}

#[pymethods]
impl Batches {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let pipeline = &self.pipeline;
        let next = py.detach(|| {
            let mut guard = pipeline.lock().unwrap_or_else(|e| e.into_inner());
            let p = guard.as_mut()?;
            let next = p.next();
            if next.is_none() {
                // The epoch is complete: its cache (if any) serves the next epochs.
                let done = guard.take();
                return Some(Err(done.and_then(|p| p.shared_cache())));
            }
            next.map(Ok)
        });
        match next {
            None => Ok(None),
            Some(Err(cache)) => {
                if let Some(c) = cache {
                    *self
                        .shards
                        .get()
                        .cache
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = Some((self.key, c));
                }
                Ok(None)
            }
            Some(Ok(Err(e))) => {
                self.close(py);
                Err(to_py_err(e))
            }
            Some(Ok(Ok(batch))) => {
                if self.arrow {
                    let batch = to_record_batch(batch)?;
                    Ok(Some(batch.to_pyarrow(py)?.unbind()))
                } else {
                    Ok(Some(to_numpy(py, batch)?.into_any().unbind()))
                }
            }
        }
    }

    /// Stops the workers and frees the buffers (also done when the iterator is dropped).
    fn close(&self, py: Python<'_>) {
        let pipeline = &self.pipeline;
        py.detach(|| drop(pipeline.lock().unwrap_or_else(|e| e.into_inner()).take()));
    }
}

/// A row-splits vector as int64 (TensorFlow's type for them).
fn splits_i64(splits: Vec<u64>) -> Vec<i64> {
    splits.into_iter().map(|s| s as i64).collect()
}

/// A column's values as a NumPy array: flat, or of shape `dims` (C order, a view of
/// the same memory: reshaped by NumPy's C API, not a Python call).
pub(crate) fn values_to_numpy<'py>(
    py: Python<'py>,
    values: Values,
    dims: Option<&[usize]>,
) -> PyResult<Bound<'py, PyAny>> {
    fn shaped<'py, T: numpy::Element>(
        flat: Bound<'py, PyArray1<T>>,
        dims: Option<&[usize]>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(match dims {
            None => flat.into_any(),
            Some(dims) => flat.reshape(dims)?.into_any(),
        })
    }
    match values {
        Values::Int64(v) => shaped(PyArray1::from_vec(py, v), dims),
        Values::Float(v) => shaped(PyArray1::from_vec(py, v), dims),
        Values::Bytes(b) => {
            let objects: Vec<Py<PyAny>> = b
                .iter()
                .map(|s| PyBytes::new(py, s).into_any().unbind())
                .collect();
            shaped(PyArray1::from_vec(py, objects), dims)
        }
    }
}

/// A batch as `{feature: array}`: fixed shapes `[rows, *shape]`, variable lengths
/// `(values, row_splits)`, feature lists `(values, row_splits, step_splits)`.
pub(crate) fn to_numpy(py: Python<'_>, batch: Batch) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    let rows = batch.rows;
    for column in batch.columns {
        let Column {
            name,
            shape,
            values,
            row_splits,
            step_splits,
        } = column;
        let value = match (row_splits, step_splits) {
            (None, _) => {
                let mut dims = vec![rows];
                dims.extend(shape.unwrap_or_default().iter().map(|&d| d as usize));
                values_to_numpy(py, values, Some(&dims))?
            }
            (Some(rows_), None) => PyTuple::new(
                py,
                [
                    values_to_numpy(py, values, None)?,
                    PyArray1::from_vec(py, splits_i64(rows_)).into_any(),
                ],
            )?
            .into_any(),
            (Some(rows_), Some(steps)) => PyTuple::new(
                py,
                [
                    values_to_numpy(py, values, None)?,
                    PyArray1::from_vec(py, splits_i64(rows_)).into_any(),
                    PyArray1::from_vec(py, splits_i64(steps)).into_any(),
                ],
            )?
            .into_any(),
        };
        out.set_item(name, value)?;
    }
    Ok(out)
}

/// Offsets as Arrow's 32-bit ones.
fn offsets_i32(splits: &[u64], what: &str) -> PyResult<OffsetBuffer<i32>> {
    let v: Vec<i32> = splits
        .iter()
        .map(|&s| i32::try_from(s))
        .collect::<Result<_, _>>()
        .map_err(|_| {
            PyValueError::new_err(format!(
                "a batch's {what} exceed 2^31 values: use a smaller batch_size"
            ))
        })?;
    Ok(OffsetBuffer::new(ScalarBuffer::from(v)))
}

/// A batch as an Arrow RecordBatch: fixed shapes as (nested) fixed-size lists, variable
/// lengths as lists, feature lists as lists of lists; numbers without a copy.
fn to_record_batch(batch: Batch) -> PyResult<RecordBatch> {
    let rows = batch.rows;
    let mut fields = Vec::with_capacity(batch.columns.len());
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(batch.columns.len());
    for column in batch.columns {
        let mut array: ArrayRef = match column.values {
            Values::Int64(v) => Arc::new(Int64Array::new(ScalarBuffer::from(v), None)),
            Values::Float(v) => Arc::new(Float32Array::new(ScalarBuffer::from(v), None)),
            Values::Bytes(b) => {
                let (offsets, data) = b.to_offsets_and_data();
                Arc::new(BinaryArray::new(
                    offsets_i32(&offsets, "bytes")?,
                    Buffer::from_vec(data),
                    None,
                ))
            }
        };
        let list = |array: ArrayRef, splits: &[u64]| -> PyResult<ArrayRef> {
            let field = Arc::new(Field::new_list_field(array.data_type().clone(), false));
            Ok(Arc::new(ListArray::new(
                field,
                offsets_i32(splits, "values")?,
                array,
                None,
            )))
        };
        match (&column.row_splits, &column.step_splits) {
            (None, _) => {
                for &d in column.shape.as_deref().unwrap_or_default().iter().rev() {
                    let field = Arc::new(Field::new_list_field(array.data_type().clone(), false));
                    array = Arc::new(
                        FixedSizeListArray::try_new(field, d as i32, array, None)
                            .map_err(|e| PyValueError::new_err(e.to_string()))?,
                    );
                }
            }
            (Some(r), None) => array = list(array, r)?,
            (Some(r), Some(steps)) => array = list(list(array, steps)?, r)?,
        }
        fields.push(Field::new(&column.name, array.data_type().clone(), false));
        arrays.push(array);
    }
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), arrays, &options)
        .map_err(|e| PyValueError::new_err(e.to_string()))
}
