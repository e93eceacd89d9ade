//! Walking decoded records of shard files: what `inspect` prints and `schema` infers
//! from. (The high-throughput reader is `pipeline`; this is the simple sequential path.)

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::dataset::Dataset;
use crate::error::Result;
use crate::example::schema::{FeatureSpec, SpecInference};
use crate::example::{decode_record, Record, RecordType};
use crate::tfrecord::{self, Compression};

/// Calls `f` with each decoded record of `path`, until `f` returns `false`.
///
/// # Errors
///
/// A framing or decode error naming file, record and offset; or `f`'s error.
pub fn for_each_record(
    path: &Path,
    compression: Option<Compression>,
    record_type: RecordType,
    mut f: impl FnMut(Record) -> Result<bool>,
) -> Result<()> {
    let mut reader = tfrecord::open(path, compression)?;
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
    infer_spec(&dataset.shards, compression, record_type)
}

/// Infers the spec from every record of the given files.
///
/// # Errors
///
/// As [`feature_spec`].
pub fn infer_spec(
    files: &[PathBuf],
    compression: Option<Compression>,
    record_type: RecordType,
) -> Result<Vec<FeatureSpec>> {
    let parts: Vec<SpecInference> = files
        .par_iter()
        .map(|path| {
            let mut inference = SpecInference::new();
            let mut index = 0u64;
            for_each_record(path, compression, record_type, |record| {
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
