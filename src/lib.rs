//! # tfshard
//!
//! Parquet tables and image folders in, size-targeted TFRecord shards out, and the
//! tools to prove the shards sound and fast to read.
//!
//! Three front doors, each a builder that checks its options in `build()` so that a
//! run fails only on its data: [`Converter`] (Parquet or images → shards and a
//! manifest), [`Verifier`] (framing, CRCs, manifest, schema) and [`Pipeline`] (shards →
//! columnar batches through interleave, shuffle, batch, parallel parse and prefetch).
//!
//! The modules follow the data: `source` yields Arrow batches (or image files) in
//! input order (fixed-size lists of numbers without nulls, the embeddings and feature
//! vectors of ML tables, through a decoder of our own that checks their levels where
//! they are encoded; everything else through arrow-rs); [`example`] is the `tf.train.Example` codec, both ways; [`convert`]
//! routes the records into splits and `shard` frames them ([`tfrecord`]) into shards
//! of a target size under hidden temporary names (compressed ones deflated in fixed
//! chunks on every core, [`tfrecord::deflate`]), then commits every output with its
//! [`manifest`]. Going the other way, [`dataset`] finds shards and their manifests,
//! [`tfrecord`] reads frames, and [`pipeline`] and [`records`] decode them.
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
//! # std::fs::remove_dir_all(&out).unwrap();
//! # Ok::<(), tfshard::Error>(())
//! ```

#![warn(missing_docs)]

pub mod bench;
pub mod convert;
pub mod dataset;
pub mod error;
pub mod example;
pub(crate) mod failpoint;
pub mod finalize;
mod hash;
pub mod manifest;
pub mod pipeline;
pub mod progress;
pub mod records;
pub(crate) mod shard;
pub(crate) mod source;
pub mod store;
pub mod tfds;
pub mod tfrecord;
pub mod verify;

pub use convert::{ConvertOptions, ConvertSummary, Converter};
pub use error::{Error, ErrorKind, Location, Result};
pub use example::{FeatureKind, FeatureSpec};
pub use pipeline::{Batch, BytesValues, Column, Pipeline, Values};
pub use progress::{CancelToken, NoProgress, Progress};
pub use tfrecord::{Compression, RecordReader, RecordWriter};
pub use verify::{Verifier, VerifyReport};
