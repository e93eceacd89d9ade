//! Walking decoded records of shard files: what `inspect` prints and `schema` infers
//! from. (The high-throughput reader is `pipeline`; this is the simple sequential path.)

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::dataset::Dataset;
use crate::error::Result;
use crate::example::schema::{FeatureSpec, SpecInference};
use crate::example::{decode_record, Record, RecordType};
use crate::store::IoOptions;
use crate::tfrecord::{self, Compression, RecordReader, Source};

/// Resolves `--compression auto` for a shard (a file or an object) by its name and
/// first bytes.
///
/// # Errors
///
/// The file cannot be opened or read.
pub fn detect_compression(path: &Path, io: IoOptions) -> Result<Compression> {
    let head = crate::store::paths::head_bytes(path, tfrecord::frame::HEADER_LEN, io)?;
    Ok(Compression::detect(&tfrecord::file_name(path), &head))
}

/// Opens a shard (a file or an object, read with the settings `io`); `None` for
/// compression means auto-detect.
///
/// # Errors
///
/// The file cannot be opened.
pub fn open(
    path: &Path,
    compression: Option<Compression>,
    io: IoOptions,
) -> Result<RecordReader<Source>> {
    let compression = match compression {
        Some(c) => c,
        None => detect_compression(path, io)?,
    };
    let (file, len) = crate::store::paths::open(path, io)?;
    Ok(tfrecord::reader_of(file, len, compression, path))
}

/// Calls `f` with each decoded record of `path`, until `f` returns `false`.
///
/// # Errors
///
/// A framing or decode error naming file, record and offset; or `f`'s error.
pub fn for_each_record(
    path: &Path,
    compression: Option<Compression>,
    record_type: RecordType,
    io: IoOptions,
    mut f: impl FnMut(Record) -> Result<bool>,
) -> Result<()> {
    let mut reader = open(path, compression, io)?;
    loop {
        let (index, offset) = (reader.record_index(), reader.offset());
        let Some(bytes) = reader.read_record()? else {
            return Ok(());
        };
        let record = decode_record(bytes, record_type)
            .map_err(|e| e.with_file(path).with_record(index).with_offset(offset))?;
        if !f(record)? {
            return Ok(());
        }
    }
}

/// The feature spec: the manifest's when one lists the shards, else inferred from every
/// record of every shard (files in parallel).
///
/// # Errors
///
/// A corrupt shard, or a feature with two kinds.
pub fn feature_spec(
    dataset: &Dataset,
    compression: Option<Compression>,
    record_type: RecordType,
) -> Result<Vec<FeatureSpec>> {
    if let [(_, manifest)] = dataset.manifests.as_slice() {
        return Ok(manifest.features.clone());
    }
    infer_spec(&dataset.shards, compression, record_type, dataset.io)
}

/// Infers the spec from every record of the given files (a store's read with `io`).
///
/// # Errors
///
/// As [`feature_spec`].
pub fn infer_spec(
    files: &[PathBuf],
    compression: Option<Compression>,
    record_type: RecordType,
    io: IoOptions,
) -> Result<Vec<FeatureSpec>> {
    let parts: Vec<SpecInference> = files
        .par_iter()
        .map(|path| {
            let mut inference = SpecInference::new();
            let mut index = 0u64;
            for_each_record(path, compression, record_type, io, |record| {
                inference
                    .add(&record)
                    .map_err(|e| e.with_file(path).with_record(index))?;
                index += 1;
                Ok(true)
            })?;
            Ok(inference)
        })
        .collect::<Result<_>>()?;
    let mut all = SpecInference::new();
    for part in parts {
        all.merge(part)?;
    }
    Ok(all.finish())
}
