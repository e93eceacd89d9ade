//! # tfshard
//!
//! Parquet tables and image folders in, size-targeted TFRecord shards out, and the
//! tools to prove the shards sound and fast to read.
//!
//! The modules follow the data: [`source`] yields Arrow batches in input order;
//! [`example::encode`] turns each batch straight into `tf.train.Example` record bytes;
//! [`shard`] frames them ([`tfrecord`]) into shards of a target size under hidden
//! temporary names; [`manifest`] commits the run. [`convert`] is the one module that
//! wires these together. Going the other way, [`dataset`] finds shards and their
//! manifest, [`tfrecord`] reads frames and [`example::decode`] turns bytes back into
//! messages, as [`records`] does for `inspect` and `schema`.
//!
//! ```
//! use tfshard::example::proto::{Example, Feature, Features};
//! use tfshard::tfrecord::{RecordReader, RecordWriter};
//! use prost::Message;
//!
//! let mut features = Features::default();
//! features.feature.insert("label".into(), Feature::int64(vec![3]));
//! let example = Example { features: Some(features) };
//!
//! let mut file = Vec::new();
//! RecordWriter::new(&mut file).write_record(&example.encode_to_vec())?;
//!
//! let mut reader = RecordReader::new(&file[..]);
//! let bytes = reader.read_record()?.expect("one record");
//! assert_eq!(Example::decode(bytes).unwrap(), example);
//! # Ok::<(), tfshard::Error>(())
//! ```

#![warn(missing_docs)]

pub mod bench;
pub mod convert;
pub mod dataset;
pub mod error;
pub mod example;
pub mod manifest;
pub mod pipeline;
pub mod progress;
pub mod records;
pub mod shard;
pub mod source;
pub mod tfrecord;
pub mod verify;

pub use error::{Error, ErrorKind, Result};
