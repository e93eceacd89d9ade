//! The Python module `tfshard._tfshard` (feature `python`), wrapped by the package in
//! `src/python/tfshard/`.
//!
//! The commands (`commands`) call the library's builders with the options the package's
//! functions were given, run on a thread of their own while the caller's thread waits
//! without the GIL and turns a KeyboardInterrupt into the run's cancellation, and return
//! the library's reports as Python values. [`batches::Shards`] and [`batches::Batches`]
//! are the reader pipeline behind `tfshard.Dataset`. [`main`] is the wheel's `tfshard`
//! command: the command line itself, in this module's copy of the library.

mod batches;
mod commands;
mod records;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;

use crate::cli;
use crate::error::ErrorFamily;

create_exception!(
    _tfshard,
    Error,
    PyException,
    "Bad data (the command line's exit code 1): its one-line message, its `kind` (the \
     library's error kind in snake case, e.g. `frame`, `schema_mismatch`, `store`), where it \
     happened as `file`, `column`, `row`, `record`, `offset` (None when not known), and `hint`."
);
create_exception!(
    _tfshard,
    CorruptInputError,
    Error,
    "The input is not what it claims to be: corrupt framing, Parquet, images or manifests, a \
     record that does not parse, an input that changed while read."
);
create_exception!(
    _tfshard,
    SchemaMismatchError,
    Error,
    "The data does not fit: a column that cannot be encoded, schemas that differ, a record \
     that does not match the spec, names that collide."
);
create_exception!(
    _tfshard,
    StoreError,
    Error,
    "An object store refused or failed a request (access denied, not found, unreachable, \
     throttled past the timeout)."
);
create_exception!(
    _tfshard,
    Interrupted,
    Error,
    "The run was cancelled by other means than a KeyboardInterrupt (which is raised as \
     such): its temporaries were removed."
);

/// A library error as the exception the package documents: `ValueError` with the
/// command line's message for options no run could honour, else `tfshard.Error` (the
/// subclass of its family) with its kind and location.
pub(crate) fn to_py_err(err: crate::error::Error) -> PyErr {
    let message = cli::one_line(&err.to_string());
    let family = err.kind().family();
    if family == ErrorFamily::Usage {
        return PyValueError::new_err(message);
    }
    let py_err = match family {
        ErrorFamily::CorruptInput => CorruptInputError::new_err(message.clone()),
        ErrorFamily::SchemaMismatch => SchemaMismatchError::new_err(message.clone()),
        ErrorFamily::Store => StoreError::new_err(message.clone()),
        ErrorFamily::Interrupted => Interrupted::new_err(message.clone()),
        _ => Error::new_err(message.clone()),
    };
    Python::attach(|py| {
        let value = py_err.value(py);
        let loc = err.location();
        let _ = value.setattr("message", message);
        let _ = value.setattr("kind", err.kind().name());
        let _ = value.setattr("hint", err.hint());
        let _ = value.setattr("file", loc.file.as_ref().map(|f| f.display().to_string()));
        let _ = value.setattr("column", loc.column.clone());
        for (name, v) in [
            ("row", loc.row),
            ("record", loc.record),
            ("offset", loc.offset),
        ] {
            let _ = value.setattr(name, v);
        }
    });
    py_err
}

/// The `tfshard` command of the wheel (`tfshard._cli`): runs the command line on `argv`
/// (without the program's name) as the binary runs it, printing to this process's
/// stdout and stderr, without the GIL; returns the exit code.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<std::ffi::OsString>) -> i32 {
    let code = py.detach(|| cli::main(argv));
    // Rust's stdout is flushed when a Rust program's main returns; Python's is not it.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    i32::from(code)
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
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("CorruptInputError", py.get_type::<CorruptInputError>())?;
    m.add("SchemaMismatchError", py.get_type::<SchemaMismatchError>())?;
    m.add("StoreError", py.get_type::<StoreError>())?;
    m.add("Interrupted", py.get_type::<Interrupted>())?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(commands::convert, m)?)?;
    m.add_function(wrap_pyfunction!(commands::verify, m)?)?;
    m.add_function(wrap_pyfunction!(commands::stats, m)?)?;
    m.add_function(wrap_pyfunction!(commands::schema, m)?)?;
    m.add_function(wrap_pyfunction!(commands::finalize, m)?)?;
    m.add_function(wrap_pyfunction!(commands::compact, m)?)?;
    m.add_class::<commands::Inspect>()?;
    m.add_class::<batches::Shards>()?;
    m.add_class::<batches::Batches>()?;
    m.add_function(wrap_pyfunction!(records::schedule_batches, m)?)?;
    m.add_function(wrap_pyfunction!(records::rank_range, m)?)?;
    m.add_class::<records::RecordsCore>()?;
    m.add_class::<records::OrderedBatches>()?;
    Ok(())
}
