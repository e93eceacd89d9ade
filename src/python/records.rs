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
    access: RecordAccess,
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
        Ok(RecordsCore { access, spec, raw })
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
