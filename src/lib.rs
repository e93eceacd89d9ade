//! # tfshard
//!
//! Parquet, Delta and Iceberg tables, Arrow streams, image folders and existing TFRecords
//! in, size-targeted TFRecord shards out, and the tools to prove the shards sound and fast
//! to read.
//!
//! Every job has one shape: `Job::builder(required)` (for conversions, one
//! constructor per source), `with_*` setters, `build()`, which checks every rule about
//! the options so that a run fails only on its data, then `run(..)`. Store settings
//! ([`store::IoOptions`]) are a value handed to each builder.
//!
//! | job | builder | returns |
//! | --- | --- | --- |
//! | convert | [`Converter::parquet`], [`Converter::delta`], [`Converter::iceberg`], [`Converter::arrow`], [`Converter::images`], [`Converter::tfrecord`] | [`ConvertSummary`] |
//! | verify | [`Verifier::builder`] | [`VerifyReport`] (typed [`verify::Problem`]s) |
//! | read | [`Pipeline::builder`] | an iterator of [`Batch`]es |
//! | bench | [`bench::Bench::builder`] | [`bench::BenchReport`] |
//! | finalize | [`finalize::Finalizer::builder`] | [`finalize::FinalizeReport`] |
//! | inspect | [`records::Inspector::builder`] | each decoded record, to a closure |
//! | schema | [`records::SchemaReader::builder`] | [`records::Schema`] |
//!
//! The modules follow the data, each floor importing only the ones below it: `error`
//! (imports nothing of ours); `progress`, `failpoint`, `hash`; [`tfrecord`] (framing,
//! reading, writing, compression: knows no store and no Arrow); [`store`] (URLs,
//! clients, and the one `Destination` every output is staged in,
//! placed and published through, on disk or in an object store); `source` (Arrow
//! batches, image files or TFRecord files in input order; fixed-size lists of numbers
//! through a page decoder of our own, everything else through arrow-rs); [`example`] (the
//! `tf.train.Example` codec, both ways) and `shard` (size targeting, the shuffle's
//! buckets, names); [`manifest`]; then the jobs: [`convert`] (the only module that
//! wires source, codec, shards and destination), [`finalize`], [`tfds`], [`dataset`]
//! and [`records`] (finding and decoding shards), [`pipeline`], [`verify`], [`bench`](mod@bench);
//! last the command line (`cli`, feature `cli`, on by default: the binary's) and, with
//! the `python` feature, the Python module over the library (`src/python/`, built into the
//! wheel by `scripts/build_wheel.sh`, whose `tfshard` command enters the same `cli`).
//! Sizes and durations as users write them are parsed in one place, [`units`].
//!
//! ```
//! use tfshard::{Converter, NoProgress, Pipeline, Verifier};
//!
//! let out = std::env::temp_dir().join(format!("tfshard-doc-{}", std::process::id()));
//! // testdata/small.parquet: 2,000 rows (a float vector x, a label y, a string id, ...).
//! let summary = Converter::parquet(vec!["testdata/small.parquet".into()])
//!     .with_output(&out)
//!     .with_target_shard_bytes(100_000)
//!     .build()?
//!     .run(&NoProgress)?;
//! assert_eq!(summary.records, 2000);
//!
//! let report = Verifier::builder(vec![out.clone()]).with_deep(true).build()?.run(&NoProgress)?;
//! assert!(report.ok);
//!
//! let mut rows = 0;
//! for batch in Pipeline::builder(vec![out.clone()]).with_batch(256, false).build()? {
//!     let batch = batch?;
//!     rows += batch.rows;
//!     assert!(batch.column("y").is_some()); // the label column
//! }
//! assert_eq!(rows, 2000);
//!
//! let schema = tfshard::records::SchemaReader::builder(vec![out.clone()]).build()?.run()?;
//! assert!(schema.features.iter().any(|f| f.name == "x"));
//! # std::fs::remove_dir_all(&out).unwrap();
//! # Ok::<(), tfshard::Error>(())
//! ```

#![warn(missing_docs)]

#[doc(hidden)]
pub mod alloc;
pub mod bench;
/// The command line of the `tfshard` binary (feature `cli`, on by default; the Python
/// module's `tfshard` command enters it too). Not a stable API.
#[cfg(feature = "cli")]
#[doc(hidden)]
#[allow(missing_docs)]
pub mod cli;
pub mod compact;
pub mod convert;
pub mod dataset;
pub mod describe;
pub mod error;
pub mod example;
pub(crate) mod failpoint;
pub mod finalize;
mod hash;
pub(crate) mod lifecycle;
pub mod manifest;
pub mod pipeline;
pub mod progress;
#[cfg(feature = "python")]
mod python;
/// The Python module's allocator: glibc's until its reader starts (see [`alloc`]).
#[cfg(feature = "python")]
#[global_allocator]
static GLOBAL: alloc::Allocator = alloc::Allocator;
pub mod records;
mod scratch;
pub(crate) mod shard;
pub(crate) mod source;
pub mod stats;
pub mod store;
pub mod tfds;
pub mod tfrecord;
pub mod units;
pub mod verify;

pub use convert::{ConvertOptions, ConvertSummary, Converter};
pub use error::{Error, ErrorKind, Location, Result};
pub use example::{FeatureKind, FeatureSpec};
pub use pipeline::{Batch, BytesValues, Column, Pipeline, Values};
pub use progress::{CancelToken, NoProgress, Progress};
pub use tfrecord::{Compression, RecordReader, RecordWriter};
pub use verify::{Verifier, VerifyReport};

/// A fresh, empty folder `target/test-scratch/unit/NAME` for a unit test: under the build
/// folder, like the command-line tests' scratch, so no test run leaves files behind in
/// the system's temporary folder.
#[cfg(test)]
pub(crate) fn test_dir(name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/test-scratch/unit")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the test's folder");
    dir
}
