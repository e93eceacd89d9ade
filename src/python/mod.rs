//! The Python module `tfshard._tfshard` (feature `python`), wrapped by the package in
//! `src/python/tfshard/`.
//!
//! Commands run as the command line runs them: the package turns keyword options into
//! the long flags they name, [`run`] parses them with the CLI's own parser (so defaults
//! and rules are the same) and runs the command with `--json`, keeping what it would
//! print, on a thread of its own while the caller's thread waits without the GIL and
//! turns a KeyboardInterrupt into the run's cancellation. [`Shards`] and [`Batches`]
//! are the reader pipeline behind `tfshard.Dataset`.

mod batches;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::ffi_stream::RecordBatchStreamReader;
use arrow_pyarrow::FromPyArrow;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyKeyboardInterrupt, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::cli::{self, CliError};
use crate::convert::ArrowStream;
use crate::progress::CancelToken;

create_exception!(
    _tfshard,
    Error,
    PyException,
    "Bad data: the command line's one-line message (exit code 1), with where it happened as \
     attributes: `file`, `column`, `row`, `record`, `offset` (None when not known), and `hint`."
);

/// A library error as `tfshard.Error` (data) or `ValueError` (options).
pub(crate) fn to_py_err(err: crate::Error) -> PyErr {
    cli_err(err.into())
}

/// A command's failure as the exception the package documents.
fn cli_err(err: CliError) -> PyErr {
    match err {
        CliError::Usage(msg) => PyValueError::new_err(msg),
        CliError::Failed => Error::new_err("the command failed"),
        CliError::Data(err) => {
            let message = cli::one_line(&err.to_string());
            let py_err = Error::new_err(message.clone());
            Python::attach(|py| {
                let value = py_err.value(py);
                let loc = err.location();
                let set = |name: &str, v: Option<Py<PyAny>>| {
                    let _ = value.setattr(name, v);
                };
                set(
                    "message",
                    Some(message.into_pyobject(py).ok()?.into_any().unbind()),
                );
                set(
                    "hint",
                    err.hint()
                        .and_then(|h| h.into_pyobject(py).ok())
                        .map(|h| h.into_any().unbind()),
                );
                set(
                    "file",
                    loc.file
                        .as_ref()
                        .and_then(|f| f.display().to_string().into_pyobject(py).ok())
                        .map(|f| f.into_any().unbind()),
                );
                set(
                    "column",
                    loc.column
                        .as_ref()
                        .and_then(|c| c.into_pyobject(py).ok())
                        .map(|c| c.into_any().unbind()),
                );
                for (name, v) in [
                    ("row", loc.row),
                    ("record", loc.record),
                    ("offset", loc.offset),
                ] {
                    set(
                        name,
                        v.and_then(|v| v.into_pyobject(py).ok())
                            .map(|v| v.into_any().unbind()),
                    );
                }
                Some(())
            });
            py_err
        }
    }
}

/// The Python name of an object's type (`pyarrow.lib.Table`), naming an Arrow stream.
fn type_name(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    let ty = obj.get_type();
    Ok(format!("{}.{}", ty.module()?, ty.qualname()?))
}

/// Runs one command line (`argv` without the program's name; the package adds `--json`
/// and `--quiet`) and returns what it printed. `stream`: an object with
/// `__arrow_c_stream__` (or a pyarrow reader) whose batches `convert parquet` converts
/// instead of its inputs.
#[pyfunction]
#[pyo3(signature = (argv, stream=None))]
fn run(py: Python<'_>, argv: Vec<String>, stream: Option<Bound<'_, PyAny>>) -> PyResult<String> {
    let command = cli::parse(&argv).map_err(|e| {
        let text = e.render().to_string();
        let first = text.lines().next().unwrap_or_default();
        PyValueError::new_err(first.trim_start_matches("error: ").to_owned())
    })?;
    let stream = match stream {
        Some(obj) => {
            let name = type_name(&obj)?;
            let reader = RecordBatchStreamReader::from_pyarrow_bound(&obj)?;
            Some(ArrowStream::new(Box::new(reader), name))
        }
        None => None,
    };
    let cancel = CancelToken::new();
    let embedded = cli::convert::Embedded {
        cancel: cancel.clone(),
        stream,
    };
    let (done, finished) = crossbeam_channel::bounded::<()>(1);
    let worker = std::thread::Builder::new()
        .name("tfshard-run".into())
        .spawn(move || {
            let out = cli::output::capture(|| cli::run_command(command, Some(embedded)));
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
    let hook = interrupts_by_default(py)
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
                // The run removes its temporaries and ends with Interrupted.
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
    let (result, printed) = py
        .detach(|| worker.join())
        .map_err(|_| PyRuntimeError::new_err("tfshard panicked (a bug: please report it)"))?;
    if let Some(e) = interrupted {
        return Err(e);
    }
    match result {
        Ok(()) | Err(CliError::Failed) => Ok(String::from_utf8_lossy(&printed).into_owned()),
        Err(e) => Err(cli_err(e)),
    }
}

/// Whether a SIGINT now raises KeyboardInterrupt in this thread: it is Python's main
/// thread, and SIGINT's handler is Python's default one.
fn interrupts_by_default(py: Python<'_>) -> PyResult<bool> {
    let threading = py.import("threading")?;
    let main = threading.call_method0("main_thread")?;
    if !threading.call_method0("current_thread")?.is(&main) {
        return Ok(false);
    }
    let signal = py.import("signal")?;
    let handler = signal.call_method1("getsignal", (signal.getattr("SIGINT")?,))?;
    Ok(handler.is(&signal.getattr("default_int_handler")?))
}

/// The native half of the `tfshard` package.
#[pymodule(name = "_tfshard")]
fn tfshard_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("Error", m.py().get_type::<Error>())?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_class::<batches::Shards>()?;
    m.add_class::<batches::Batches>()?;
    Ok(())
}
