//! The commands of the `tfshard` package over the library's builders: `convert`,
//! `verify`, `schema`, `inspect` and `finalize`. The package's functions hold the real
//! signatures (`tfshard/__init__.py`, typed in the stubs); they hand the options given
//! to these functions as typed keyword values, which are set on the builder as the
//! command line's flags set them (same names, same rules: the builder checks every
//! rule). Results are the library's report types as Python values, with the `--json`
//! keys; nothing is parsed back from text.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::ffi_stream::RecordBatchStreamReader;
use arrow_pyarrow::FromPyArrow;
use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError, PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyMapping, PyString};

use super::to_py_err;
use crate::cli::output::Bar;
use crate::convert::{ArrowStream, Converter, ConverterBuilder, ParquetDecoder};
use crate::error::Result;
use crate::example::{proto, Record, RecordType};
use crate::finalize::Finalizer;
use crate::progress::CancelToken;
use crate::records::{Inspector, ReadSettings, SchemaReader};
use crate::source::hive::Partitioning;
use crate::source::images::{Labels, OnError};
use crate::store::IoOptions;
use crate::tfrecord::Compression;
use crate::verify::Verifier;

/// The keyword options of one call, taken one by one; what is left at the end was not
/// an option of this command.
struct Options<'py> {
    given: Bound<'py, PyDict>,
    command: String,
}

impl<'py> Options<'py> {
    fn new(given: Bound<'py, PyDict>, command: impl Into<String>) -> Options<'py> {
        Options {
            given,
            command: command.into(),
        }
    }

    /// The value of `name`, if given (and not None), removed from what is left.
    fn take(&self, name: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        let value = self.given.get_item(name)?;
        self.given.del_item(name).ok();
        Ok(value.filter(|v| !v.is_none()))
    }

    /// The value of `name` as a `T`, naming the option when it is not one.
    fn get<T: for<'a> FromPyObject<'a, 'py>>(&self, name: &str) -> PyResult<Option<T>> {
        match self.take(name)? {
            None => Ok(None),
            Some(v) => v.extract::<T>().map(Some).map_err(|_| {
                let ty = v
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default();
                PyValueError::new_err(format!("{name}=: not a value of the right type ({ty})"))
            }),
        }
    }

    fn flag(&self, name: &str) -> PyResult<bool> {
        Ok(self.get::<bool>(name)?.unwrap_or(false))
    }

    /// A size: bytes as an int, or a string with a unit (`"256MiB"`).
    fn size(&self, name: &str) -> PyResult<Option<u64>> {
        let Some(v) = self.take(name)? else {
            return Ok(None);
        };
        if let Ok(bytes) = v.extract::<u64>() {
            if bytes == 0 {
                return Err(PyValueError::new_err(format!("{name}=: at least 1 byte")));
            }
            return Ok(Some(bytes));
        }
        let text: String = v.extract().map_err(|_| {
            PyValueError::new_err(format!("{name}=: bytes or a size like \"256MiB\""))
        })?;
        crate::units::parse_size(&text)
            .map(Some)
            .map_err(PyValueError::new_err)
    }

    /// Strings, from a list (or one comma-separated string, as the flag takes them).
    fn names(&self, name: &str) -> PyResult<Option<Vec<String>>> {
        let Some(v) = self.take(name)? else {
            return Ok(None);
        };
        if v.is_instance_of::<PyString>() {
            let text: String = v.extract()?;
            return Ok(Some(text.split(',').map(str::to_owned).collect()));
        }
        v.extract::<Vec<String>>()
            .map(Some)
            .map_err(|_| PyValueError::new_err(format!("{name}=: a list of names")))
    }

    /// `KEY=VALUE` pairs: a mapping (in its order; values as their text, `str()`), or a
    /// list of `"KEY=VALUE"` strings, each split at its first `=` as the flag's value is.
    fn pairs(&self, name: &str) -> PyResult<Option<Vec<(String, String)>>> {
        let Some(v) = self.take(name)? else {
            return Ok(None);
        };
        let bad = || PyValueError::new_err(format!("{name}=: a dict, or a list of \"KEY=VALUE\""));
        if let Ok(mapping) = v.cast::<PyMapping>() {
            return mapping
                .items()?
                .iter()
                .map(|item| {
                    let (k, v): (Bound<'py, PyAny>, Bound<'py, PyAny>) = item.extract()?;
                    Ok((k.str()?.to_string(), v.str()?.to_string()))
                })
                .collect::<PyResult<Vec<_>>>()
                .map(Some);
        }
        let items: Vec<String> = v.extract().map_err(|_| bad())?;
        items
            .iter()
            .map(|item| match item.split_once('=') {
                Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
                _ => Err(PyValueError::new_err(format!(
                    "invalid {name}= {item:?}: use KEY=VALUE"
                ))),
            })
            .collect::<PyResult<Vec<_>>>()
            .map(Some)
    }

    /// `split`: names and fractions, as a mapping or as the flag's `train=0.8,test=0.2`.
    fn splits(&self) -> PyResult<Option<Vec<(String, f64)>>> {
        let Some(v) = self.take("split")? else {
            return Ok(None);
        };
        if let Ok(mapping) = v.cast::<PyMapping>() {
            return mapping
                .items()?
                .iter()
                .map(|item| {
                    let (k, f): (String, f64) = item.extract().map_err(|_| {
                        PyValueError::new_err("split=: names and fractions, {\"train\": 0.8, ...}")
                    })?;
                    Ok((k, f))
                })
                .collect::<PyResult<Vec<_>>>()
                .map(Some);
        }
        let text: String = v
            .extract()
            .map_err(|_| PyValueError::new_err("split=: a dict, or \"train=0.8,test=0.2\""))?;
        text.split(',')
            .map(|part| {
                let (name, fraction) = part.split_once('=').ok_or_else(|| {
                    PyValueError::new_err(format!("invalid split= {part:?}: use NAME=FRACTION"))
                })?;
                let fraction: f64 = fraction.trim().parse().map_err(|_| {
                    PyValueError::new_err(format!("invalid split= fraction in {part:?}: a number"))
                })?;
                Ok((name.trim().to_owned(), fraction))
            })
            .collect::<PyResult<Vec<_>>>()
            .map(Some)
    }

    /// One of `choices` (a string option with fixed values, as the flag's).
    fn choice(&self, name: &str, choices: &[&'static str]) -> PyResult<Option<&'static str>> {
        let Some(given) = self.get::<String>(name)? else {
            return Ok(None);
        };
        let wanted = given.replace('_', "-");
        choices
            .iter()
            .find(|c| **c == wanted)
            .copied()
            .map(Some)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "invalid {name}={given:?}: one of {}",
                    choices.join(", ")
                ))
            })
    }

    /// `io_concurrency` and `io_timeout`: the store settings.
    fn io(&self) -> PyResult<IoOptions> {
        let mut io = crate::cli::io_defaults_from_env();
        if let Some(n) = self.get::<usize>("io_concurrency")? {
            if n == 0 {
                return Err(PyValueError::new_err("io_concurrency= must be at least 1"));
            }
            io = io.with_concurrency(n);
        }
        if let Some(v) = self.take("io_timeout")? {
            let timeout = match v.extract::<f64>() {
                Ok(seconds) => Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string()),
                Err(_) => crate::units::parse_duration(&v.extract::<String>()?),
            }
            .map_err(PyValueError::new_err)?;
            if timeout.is_zero() {
                return Err(PyValueError::new_err("io_timeout= must be more than 0"));
            }
            io = io.with_timeout(timeout);
        }
        Ok(io)
    }

    fn threads(&self) -> PyResult<Option<usize>> {
        match self.get::<usize>("threads")? {
            Some(0) => Err(PyValueError::new_err("threads= must be at least 1")),
            n => Ok(n),
        }
    }

    /// `progress`: True or "always" draws the command line's bar on stderr.
    fn progress(&self) -> PyResult<bool> {
        let Some(v) = self.take("progress")? else {
            return Ok(false);
        };
        if let Ok(b) = v.cast::<PyBool>() {
            return Ok(b.is_true());
        }
        match v.extract::<String>().as_deref() {
            Ok("always") => Ok(true),
            Ok("never") => Ok(false),
            Ok("auto") => Ok(std::io::IsTerminal::is_terminal(&std::io::stderr())),
            _ => Err(PyValueError::new_err(
                "progress=: True, False, \"always\", \"never\" or \"auto\"",
            )),
        }
    }

    /// Refuses what no step took: an option of another command.
    fn finish(self) -> PyResult<()> {
        match self.given.keys().iter().next() {
            None => Ok(()),
            Some(key) => Err(PyValueError::new_err(format!(
                "{key}= is not an option of {}",
                self.command
            ))),
        }
    }
}

/// The read options of `verify`, `schema` and `inspect`: (compression, record type).
fn read_options(o: &Options<'_>) -> PyResult<(Option<Compression>, Option<RecordType>)> {
    let compression = match o.choice("compression", &["auto", "none", "gzip", "zlib"])? {
        None | Some("auto") => None,
        Some(name) => Compression::from_name(name),
    };
    let record_type = match o.choice("record_type", &["auto", "example", "sequence-example"])? {
        Some("example") => Some(RecordType::Example),
        Some("sequence-example") => Some(RecordType::SequenceExample),
        _ => None,
    };
    Ok((compression, record_type))
}

/// Sets the options of `convert FORMAT` on its builder, as the command line's flags do.
fn convert_options(
    mut b: ConverterBuilder,
    format: &str,
    output: PathBuf,
    o: &Options<'_>,
) -> PyResult<ConverterBuilder> {
    if let Some(bytes) = o.size("target_shard_size")? {
        b = b.with_target_shard_bytes(bytes);
    }
    if let Some(n) = o.get::<u64>("max_records_per_shard")? {
        b = b.with_max_records_per_shard(n);
    }
    if let Some(n) = o.get::<u64>("min_shards")? {
        b = b.with_min_shards(n);
    }
    if let Some(prefix) = o.get::<String>("prefix")? {
        b = b.with_prefix(prefix);
    }
    let output = match o.get::<String>("tfds")? {
        Some(name) => {
            let dir = crate::tfds::version_dir(&output, &name);
            b = b.with_tfds(name);
            dir
        }
        None => output,
    };
    b = b.with_output(output);
    if let Some(c) = o.choice("compression", &["none", "gzip", "zlib"])? {
        b = b.with_compression(Compression::from_name(c).unwrap_or_default());
    }
    b = b
        .with_overwrite(o.flag("overwrite")?)
        .with_resume(o.flag("resume")?)
        .with_append(o.flag("append")?)
        .with_index(o.flag("index")?)
        .with_stats(o.flag("stats")?)
        .with_seed(o.get::<u64>("seed")?.unwrap_or(0));
    if let Some(n) = o.get::<u32>("retain")? {
        b = b.with_retain(n);
    }
    let shuffle_memory = o.size("shuffle_memory")?;
    if o.flag("shuffle")? {
        b = b.with_shuffle(shuffle_memory.unwrap_or(crate::convert::DEFAULT_SHUFFLE_MEMORY));
    }
    if let Some(dir) = o.get::<PathBuf>("tmp_dir")? {
        b = b.with_tmp_dir(dir);
    }
    if let Some(splits) = o.splits()? {
        b = b.with_splits(splits);
    }
    if let Some(key) = o.get::<String>("split_key")? {
        b = b.with_split_key(key);
    }
    if let Some(columns) = o.names("columns")? {
        b = b.with_columns(columns);
    }
    if let Some(exclude) = o.names("exclude")? {
        b = b.with_exclude(exclude);
    }
    if let Some(rename) = o.pairs("rename")? {
        if let Some((old, _)) = rename.iter().find(|(o, n)| o.is_empty() || n.is_empty()) {
            return Err(PyValueError::new_err(format!(
                "invalid rename= {old:?}: old=new, both names"
            )));
        }
        b = b.with_rename(rename);
    }
    let record_types: &[&str] = match format {
        "tfrecord" => &["auto", "example", "sequence-example", "bytes"],
        _ => &["example", "sequence-example"],
    };
    match o.choice("record_type", record_types)? {
        Some("example") => b = b.with_record_type(RecordType::Example),
        Some("sequence-example") => b = b.with_record_type(RecordType::SequenceExample),
        Some("bytes") => b = b.with_record_type(RecordType::Bytes),
        _ => {}
    }
    match (o.get::<u64>("num_workers")?, o.get::<u64>("worker_index")?) {
        (Some(count), Some(index)) => b = b.with_worker(count, index),
        (None, None) => {}
        _ => {
            return Err(PyValueError::new_err(
                "num_workers= and worker_index= go together",
            ))
        }
    }
    if let Some(d) = o.choice("parquet_decoder", &["auto", "arrow-rs"])? {
        b = b.with_parquet_decoder(match d {
            "arrow-rs" => ParquetDecoder::ArrowRs,
            _ => ParquetDecoder::Auto,
        });
    }
    if let Some(base) = o.get::<PathBuf>("partition_base")? {
        b = b.with_partition_base(base);
    }
    match o.choice("partitioning", &["auto", "hive", "none"])? {
        Some("hive") => b = b.with_partitioning(Partitioning::Hive),
        Some("none") => b = b.with_partitioning(Partitioning::None),
        _ => {}
    }
    if let Some(v) = o.get::<u64>("version")? {
        b = b.with_version(v);
    }
    if let Some(id) = o.get::<i64>("snapshot_id")? {
        b = b.with_snapshot_id(id);
    }
    if let Some(t) = o.get::<String>("timestamp")? {
        b = b.with_timestamp(t);
    }
    for (key, value) in o.pairs("partition_filter")?.unwrap_or_default() {
        b = b.with_partition_filter(&key, &value);
    }
    if let Some(labels) = o.get::<PathBuf>("labels")? {
        b = b.with_labels(match labels.to_str() {
            Some("dirname") => Labels::DirName,
            Some("none") => Labels::None,
            _ => Labels::Csv(labels),
        });
    }
    if let Some(extensions) = o.names("extensions")? {
        let extensions = extensions
            .iter()
            .map(|e| e.trim_start_matches('.').to_owned())
            .collect();
        b = b.with_extensions(extensions);
    }
    if let Some(on_error) = o.choice("on_error", &["fail", "skip"])? {
        b = b.with_on_error(match on_error {
            "skip" => OnError::Skip,
            _ => OnError::Fail,
        });
    }
    match o.choice("input_compression", &["auto", "none", "gzip", "zlib"])? {
        None | Some("auto") => {}
        Some(name) => {
            b = b.with_input_compression(Compression::from_name(name).unwrap_or_default())
        }
    }
    if let Some(n) = o.threads()? {
        b = b.with_threads(n);
    }
    Ok(b.with_io(o.io()?))
}

/// `tfshard.convert`: `format` is `parquet`, `delta`, `iceberg`, `tfrecord`, `images`
/// (read from `inputs`) or `arrow` (read from `stream`, an object with
/// `__arrow_c_stream__` or a pyarrow reader).
#[pyfunction]
#[pyo3(signature = (format, inputs, output, stream, options))]
pub(crate) fn convert(
    py: Python<'_>,
    format: &str,
    inputs: Vec<PathBuf>,
    output: PathBuf,
    stream: Option<Bound<'_, PyAny>>,
    options: Bound<'_, PyDict>,
) -> PyResult<Py<PyAny>> {
    let o = Options::new(options, format!("convert {format}"));
    // An Arrow stream is taken last, once every option is checked: taking it uses it up.
    let mut pending = None;
    let builder = match (format, stream) {
        ("arrow", Some(obj)) => {
            let name = {
                let ty = obj.get_type();
                format!("{}.{}", ty.module()?, ty.qualname()?)
            };
            let stream = ArrowStream::pending(name);
            pending = Some((stream.clone(), obj));
            Converter::arrow(stream)
        }
        ("parquet", None) => Converter::parquet(inputs),
        ("tfrecord", None) => Converter::tfrecord(inputs),
        ("delta" | "iceberg" | "images", None) => {
            let [one]: [PathBuf; 1] = inputs.try_into().map_err(|_| {
                PyValueError::new_err(format!(
                    "format={format:?} reads one {}",
                    match format {
                        "images" => "folder",
                        _ => "table",
                    }
                ))
            })?;
            match format {
                "delta" => Converter::delta(one),
                "iceberg" => Converter::iceberg(one),
                _ => Converter::images(one),
            }
        }
        _ => return Err(PyValueError::new_err(format!("no such format: {format:?}"))),
    };
    let unit = match format {
        "images" => "files",
        "tfrecord" => "bytes",
        _ => "rows",
    };
    let builder = convert_options(builder, format, output, &o)?;
    let show = o.progress()?;
    o.finish()?;
    let cancel = CancelToken::new();
    let converter = builder
        .with_cancel(cancel.clone())
        .build()
        .map_err(to_py_err)?;
    if let Some((stream, obj)) = pending {
        stream.fill(Box::new(RecordBatchStreamReader::from_pyarrow_bound(&obj)?));
    }
    let summary = interruptible(py, cancel, move || {
        let bar = Bar::shown(show, unit);
        let summary = converter.run(&bar);
        bar.clear();
        summary
    })?;
    to_python(py, &summary.to_json())
}

/// `tfshard.verify`: the report, `ok` false with the problems when something is wrong;
/// with a baseline, the anomalies of the set's statistics against it too.
#[pyfunction]
#[pyo3(signature = (paths, options))]
pub(crate) fn verify(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    options: Bound<'_, PyDict>,
) -> PyResult<Py<PyAny>> {
    let o = Options::new(options, "verify");
    let mut b = Verifier::builder(paths.clone()).with_deep(o.flag("deep")?);
    if let Some(manifest) = o.get::<PathBuf>("manifest")? {
        b = b.with_manifest(manifest);
    }
    let (compression, record_type) = read_options(&o)?;
    b = b.with_reading(compression, record_type);
    if let Some(n) = o.threads()? {
        b = b.with_threads(n);
    }
    let io = o.io()?;
    b = b.with_io(io);
    let show = o.progress()?;
    let baseline = o.get::<PathBuf>("baseline")?;
    let mut thresholds = crate::stats::drift::Thresholds::default();
    if let Some(given) = o.get::<std::collections::BTreeMap<String, f64>>("thresholds")? {
        if baseline.is_none() {
            return Err(PyValueError::new_err("thresholds apply with a baseline"));
        }
        if let Some((f, x)) = given.iter().find(|(_, x)| x.is_nan() || **x < 0.0) {
            return Err(PyValueError::new_err(format!(
                "thresholds: {f:?} is {x}, give a number at least 0"
            )));
        }
        thresholds.per_feature = given;
    }
    let schema = match o.get::<PathBuf>("schema")? {
        Some(path) => {
            let text = std::fs::read_to_string(&path).map_err(|e| {
                PyValueError::new_err(format!("schema {}: cannot be read: {e}", path.display()))
            })?;
            let schema = crate::stats::tfdv_schema::parse_text(&text)
                .map_err(|e| PyValueError::new_err(format!("schema {}: {e}", path.display())))?;
            for (f, t) in crate::stats::tfdv_schema::drift_thresholds(&schema) {
                thresholds.per_feature.entry(f).or_insert(t);
            }
            Some(schema)
        }
        None => None,
    };
    o.finish()?;
    // A baseline that cannot be read is the caller's mistake, found before the shards
    // are read.
    let base = match &baseline {
        Some(path) => Some(
            py.detach(|| crate::describe::baseline(path, io))
                .map_err(|e| {
                    PyValueError::new_err(format!(
                        "baseline {}: cannot be read: {e}",
                        path.display()
                    ))
                })?,
        ),
        None => None,
    };
    let cancel = CancelToken::new();
    let verifier = b.with_cancel(cancel.clone()).build().map_err(to_py_err)?;
    let stats_of = crate::describe::StatsReader::builder(paths)
        .with_io(io)
        .with_reading(compression, record_type);
    let (report, anomalies) = interruptible(py, cancel, move || {
        let bar = Bar::shown(show, "bytes");
        let report = verifier.run(&bar);
        bar.clear();
        let report = report?;
        // (A set with problems is not compared: its statistics would not be its data's.)
        let anomalies = if base.is_none() && schema.is_none() {
            None
        } else if report.ok {
            let reader = stats_of.build()?;
            let none = &mut |_: &std::path::Path| {};
            let stats = crate::describe::statistics(&reader, &crate::progress::NoProgress, none)?;
            Some(crate::stats::anomalies(
                &stats,
                schema.as_ref(),
                base.as_ref(),
                &thresholds,
            ))
        } else {
            Some(Vec::new())
        };
        Ok((report, anomalies))
    })?;
    let mut json = serde_json::to_value(&report).map_err(to_runtime)?;
    if let Some(a) = anomalies {
        json["ok"] = serde_json::Value::Bool(report.ok && a.is_empty());
        json["anomalies"] = serde_json::to_value(&a).map_err(to_runtime)?;
    }
    to_python(py, &json)
}

/// `tfshard.stats`: the statistics (`tfshard stats --json`'s keys), stored or computed;
/// with a baseline, its statistics too under `baseline`.
#[pyfunction]
#[pyo3(signature = (paths, options))]
pub(crate) fn stats(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    options: Bound<'_, PyDict>,
) -> PyResult<Py<PyAny>> {
    let o = Options::new(options, "stats");
    let (compression, record_type) = read_options(&o)?;
    let io = o.io()?;
    let threads = o.threads()?;
    let show = o.progress()?;
    let baseline = o.get::<PathBuf>("baseline")?;
    o.finish()?;
    let b = crate::describe::StatsReader::builder(paths)
        .with_io(io)
        .with_reading(compression, record_type);
    let pool = crate::progress::thread_pool(threads.unwrap_or(0), "stats").map_err(to_py_err)?;
    let cancel = CancelToken::new();
    let json = interruptible(py, cancel, move || {
        pool.install(|| {
            let reader = b.build()?;
            let bar = Bar::shown(show, "bytes");
            let stats = crate::describe::statistics(&reader, &bar, &mut |_| {});
            bar.clear();
            let mut json = crate::stats::to_json(&stats?);
            if let Some(path) = &baseline {
                json["baseline"] = crate::stats::to_json(&crate::describe::baseline(path, io)?);
            }
            Ok(json)
        })
    })?;
    to_python(py, &json)
}

/// `tfshard.schema`: the features (as a list of dicts), or with `format="python"` the
/// `tf.io.parse_example` spec as Python source.
#[pyfunction]
#[pyo3(signature = (paths, options))]
pub(crate) fn schema(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    options: Bound<'_, PyDict>,
) -> PyResult<Py<PyAny>> {
    let o = Options::new(options, "schema");
    let python = o.choice("format", &["json", "python"])? == Some("python");
    let mut b = SchemaReader::builder(paths).with_io(o.io()?);
    let (compression, record_type) = read_options(&o)?;
    b = b.with_reading(compression, record_type);
    let threads = o.threads()?;
    o.progress()?;
    o.finish()?;
    // Inference reads the shards in parallel, on a pool of `threads` (else every core).
    let pool = crate::progress::thread_pool(threads.unwrap_or(0), "schema").map_err(to_py_err)?;
    let schema = py
        .detach(|| pool.install(|| b.build().and_then(|r| r.run())))
        .map_err(to_py_err)?;
    if python {
        let text = crate::example::schema::to_python(&schema.features, schema.record_type);
        return Ok(PyString::new(py, &text).into_any().unbind());
    }
    to_python(
        py,
        &serde_json::to_value(&schema.features).map_err(to_runtime)?,
    )
}

/// `tfshard.compact`: the `compact --json` summary.
#[pyfunction]
#[pyo3(signature = (output, options))]
pub(crate) fn compact(
    py: Python<'_>,
    output: PathBuf,
    options: Bound<'_, PyDict>,
) -> PyResult<Py<PyAny>> {
    let o = Options::new(options, "compact");
    let mut c = crate::compact::CompactOptions::new(output);
    if let Some(prefix) = o.get::<String>("prefix")? {
        c.prefix = prefix;
    }
    c.target_bytes = o.size("target_shard_size")?;
    if let Some(n) = o.get::<u32>("retain")? {
        if n == 0 {
            return Err(PyValueError::new_err(
                "retain must keep at least 1 generation",
            ));
        }
        c.retain = Some(n);
    }
    c.io = o.io()?;
    o.threads()?;
    o.progress()?;
    o.finish()?;
    let summary = py
        .detach(|| crate::compact::compact(&c))
        .map_err(to_py_err)?;
    to_python(py, &summary.to_json())
}

/// `tfshard.finalize`: the `finalize --json` report.
#[pyfunction]
#[pyo3(signature = (output, options))]
pub(crate) fn finalize(
    py: Python<'_>,
    output: PathBuf,
    options: Bound<'_, PyDict>,
) -> PyResult<Py<PyAny>> {
    let o = Options::new(options, "finalize");
    let (prefix, tfds) = (o.get::<String>("prefix")?, o.get::<String>("tfds")?);
    if prefix.is_some() && tfds.is_some() {
        return Err(PyValueError::new_err(
            "prefix= and tfds= both name what to finalize: give one",
        ));
    }
    let output = match &tfds {
        Some(name) => crate::tfds::version_dir(&output, name),
        None => output,
    };
    let mut b = Finalizer::builder(&output)
        .with_overwrite(o.flag("overwrite")?)
        .with_io(o.io()?);
    if let Some(prefix) = prefix {
        b = b.with_prefix(prefix);
    }
    o.threads()?;
    o.progress()?;
    o.finish()?;
    let report = py
        .detach(|| b.build().and_then(|f| f.run()))
        .map_err(to_py_err)?;
    to_python(py, &report.to_json())
}

/// Records `inspect` has read ahead of the caller at most: what the iterator holds.
const INSPECT_AHEAD: usize = 64;

/// `tfshard.inspect`'s iterator: the records, decoded, read on a thread of their own
/// as the caller takes them, at most [`INSPECT_AHEAD`] ahead.
#[pyclass(module = "tfshard._tfshard")]
pub(crate) struct Inspect {
    /// `None` once closed (the reader then finds no one to send to, and stops).
    records: Option<crossbeam_channel::Receiver<Result<Record>>>,
    /// The most records read but not yet taken at any time (a test reads it).
    held: Arc<AtomicUsize>,
    most_held: usize,
}

#[pymethods]
impl Inspect {
    /// Reads `path` (a shard, folder or manifest), at most `limit` records.
    #[new]
    #[pyo3(signature = (path, options))]
    fn new(py: Python<'_>, path: PathBuf, options: Bound<'_, PyDict>) -> PyResult<Inspect> {
        let o = Options::new(options, "inspect");
        let mut b = Inspector::builder(path).with_io(o.io()?);
        if let Some(limit) = o.get::<u64>("limit")? {
            b = b.with_limit(limit);
        }
        let (compression, record_type) = read_options(&o)?;
        b = b.with_reading(compression, record_type);
        o.threads()?;
        o.progress()?;
        o.finish()?;
        // (Finding the shards lists folders and reads manifests: without the GIL.)
        let inspector = py.detach(|| b.build()).map_err(to_py_err)?;
        // The queue, and the record its reader holds while it waits for room.
        let (send, records) = crossbeam_channel::bounded(INSPECT_AHEAD - 1);
        let held = Arc::new(AtomicUsize::new(0));
        let count = held.clone();
        std::thread::Builder::new()
            .name("tfshard-inspect".into())
            .spawn(move || {
                let run = std::panic::AssertUnwindSafe(|| {
                    inspector.run(|record| {
                        count.fetch_add(1, Ordering::Relaxed);
                        // The iterator was closed or dropped: stop reading.
                        Ok(send.send(Ok(record)).is_ok())
                    })
                });
                let outcome = std::panic::catch_unwind(run).unwrap_or_else(|_| {
                    Err(crate::error::Error::from(std::io::Error::other(
                        "the inspect reader panicked (a bug: please report it)",
                    )))
                });
                if let Err(e) = outcome {
                    let _ = send.send(Err(e));
                }
            })
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start a thread: {e}")))?;
        Ok(Inspect {
            records: Some(records),
            held,
            most_held: 0,
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let held = self.held.load(Ordering::Relaxed);
        self.most_held = self.most_held.max(held);
        let Some(records) = self.records.clone() else {
            return Err(PyStopIteration::new_err(()));
        };
        // Waits without the GIL, a tenth of a second at a time, so that a Ctrl-C during a
        // slow read raises KeyboardInterrupt at once.
        let next = loop {
            let waited = py.detach(|| records.recv_timeout(Duration::from_millis(100)));
            match waited {
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => py.check_signals()?,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break None,
                Ok(next) => break Some(next),
            }
        };
        match next {
            None => {
                self.records = None;
                Err(PyStopIteration::new_err(()))
            }
            Some(Err(e)) => {
                self.records = None;
                Err(to_py_err(e))
            }
            Some(Ok(record)) => {
                self.held.fetch_sub(1, Ordering::Relaxed);
                record_to_python(py, &record)
            }
        }
    }

    /// The most records read ahead and not yet taken at any time (at most 64).
    #[getter]
    fn most_held(&self) -> usize {
        self.most_held
    }

    /// Stops reading: the records read ahead are dropped, the iteration ends.
    fn close(&mut self) {
        self.records = None;
    }
}

/// A record as `inspect` gives it: feature name → `{"int64": [...]}`, `{"float":
/// [...]}`, `{"bytes": [...]}` (str where every value is UTF-8, else base64 under
/// `bytes_b64`); a SequenceExample as `{"context": ..., "feature_lists": ...}`.
fn record_to_python(py: Python<'_>, record: &Record) -> PyResult<Py<PyAny>> {
    match record {
        Record::Example(example) => features_to_python(py, example.features.as_ref()),
        Record::SequenceExample(seq) => {
            let out = PyDict::new(py);
            out.set_item("context", features_to_python(py, seq.context.as_ref())?)?;
            let lists = PyDict::new(py);
            for (name, list) in seq.feature_lists.iter().flat_map(|l| &l.feature_list) {
                let steps = list
                    .feature
                    .iter()
                    .map(|f| feature_to_python(py, f))
                    .collect::<PyResult<Vec<_>>>()?;
                lists.set_item(name, PyList::new(py, steps)?)?;
            }
            out.set_item("feature_lists", lists)?;
            Ok(out.into_any().unbind())
        }
        Record::Bytes(bytes) => {
            use base64::Engine;
            let out = PyDict::new(py);
            out.set_item(
                "bytes",
                base64::engine::general_purpose::STANDARD.encode(bytes),
            )?;
            Ok(out.into_any().unbind())
        }
    }
}

fn features_to_python(py: Python<'_>, features: Option<&proto::Features>) -> PyResult<Py<PyAny>> {
    let out = PyDict::new(py);
    for (name, feature) in features.iter().flat_map(|f| &f.feature) {
        out.set_item(name, feature_to_python(py, feature)?)?;
    }
    Ok(out.into_any().unbind())
}

fn feature_to_python(py: Python<'_>, feature: &proto::Feature) -> PyResult<Py<PyAny>> {
    let out = PyDict::new(py);
    match &feature.kind {
        Some(proto::Kind::Int64List(l)) => out.set_item("int64", &l.value)?,
        Some(proto::Kind::FloatList(l)) => {
            let widened: Vec<f64> = l.value.iter().map(|&v| f64::from(v)).collect();
            out.set_item("float", widened)?
        }
        Some(proto::Kind::BytesList(l)) => {
            let text: Option<Vec<&str>> = l
                .value
                .iter()
                .map(|v| std::str::from_utf8(v).ok())
                .collect();
            match text {
                Some(text) => out.set_item("bytes", text)?,
                None => {
                    use base64::Engine;
                    let encoded: Vec<String> = l
                        .value
                        .iter()
                        .map(|v| base64::engine::general_purpose::STANDARD.encode(v))
                        .collect();
                    out.set_item("bytes_b64", encoded)?
                }
            }
        }
        None => {}
    }
    Ok(out.into_any().unbind())
}

/// A report's value (serialized from the library's report type, never from text) as
/// the Python value `json.loads` would give.
pub(crate) fn to_python(py: Python<'_>, value: &serde_json::Value) -> PyResult<Py<PyAny>> {
    use pyo3::IntoPyObjectExt;
    use serde_json::Value;
    Ok(match value {
        Value::Null => py.None(),
        Value::Bool(b) => b.into_py_any(py)?,
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_py_any(py)?,
            (_, Some(i)) => i.into_py_any(py)?,
            _ => n.as_f64().unwrap_or(f64::NAN).into_py_any(py)?,
        },
        Value::String(s) => s.into_py_any(py)?,
        Value::Array(items) => {
            let items = items
                .iter()
                .map(|v| to_python(py, v))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any().unbind()
        }
        Value::Object(map) => {
            let out = PyDict::new(py);
            for (k, v) in map {
                out.set_item(k, to_python(py, v)?)?;
            }
            out.into_any().unbind()
        }
    })
}

fn to_runtime(e: serde_json::Error) -> PyErr {
    PyRuntimeError::new_err(e.to_string())
}

/// Runs `run` on a thread of its own while this one waits without the GIL, turning a
/// KeyboardInterrupt into `cancel` (the run removes its temporaries and ends with
/// `Interrupted`), then raising it.
pub(crate) fn interruptible<T: Send + 'static>(
    py: Python<'_>,
    cancel: CancelToken,
    run: impl FnOnce() -> Result<T> + Send + 'static,
) -> PyResult<T> {
    let (done, finished) = crossbeam_channel::bounded::<()>(1);
    let worker = std::thread::Builder::new()
        .name("tfshard-run".into())
        .spawn(move || {
            let out = run();
            let _ = done.send(());
            out
        })
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start a thread: {e}")))?;
    // A SIGINT is seen here as well as by Python's own handler (which ours calls after
    // it): Python acts on it only when this thread checks, and a signal raised on the
    // run's thread (by the code feeding it a stream) was seen to be lost under load. Only
    // where Python itself would raise KeyboardInterrupt: on the main thread, with
    // Python's default handler (not SIG_IGN, SIG_DFL or a handler of the caller's).
    let sigint = Arc::new(AtomicBool::new(false));
    let hook = super::interrupts_by_default(py)
        .unwrap_or(false)
        .then(|| signal_hook::flag::register(signal_hook::consts::SIGINT, sigint.clone()).ok())
        .flatten();
    let mut interrupted = None;
    loop {
        let over = py.detach(|| {
            !matches!(
                finished.recv_timeout(Duration::from_millis(100)),
                Err(crossbeam_channel::RecvTimeoutError::Timeout)
            )
        });
        if over {
            break;
        }
        if interrupted.is_none() {
            let checked = py.check_signals();
            if checked.is_err() || sigint.load(Ordering::Relaxed) {
                cancel.cancel();
                interrupted = Some(checked.err().unwrap_or_else(|| {
                    PyKeyboardInterrupt::new_err("tfshard: the run was interrupted")
                }));
            }
        }
    }
    if let Some(id) = hook {
        signal_hook::low_level::unregister(id);
    }
    let result = py
        .detach(|| worker.join())
        .map_err(|_| PyRuntimeError::new_err("tfshard panicked (a bug: please report it)"))?;
    if let Some(e) = interrupted {
        return Err(e);
    }
    result.map_err(to_py_err)
}
