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

/// How shards are read: their compression (`None`: by name, else content), record
/// type (`None`: the manifest's, else Example) and store settings.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Reading {
    pub(crate) compression: Option<Compression>,
    pub(crate) record_type: Option<RecordType>,
    pub(crate) io: IoOptions,
}

/// How shards are read, alike on every builder that reads them ([`InspectorBuilder`],
/// [`SchemaReaderBuilder`], [`crate::verify::VerifierBuilder`]): what the command line's
/// `--compression` and `--record-type` (and the Python module's `compression=`,
/// `record_type=`) set, `auto` leaving the default.
pub trait ReadSettings: Sized {
    /// The shards' compression (default: by name, else by content).
    fn with_compression(self, compression: Compression) -> Self;

    /// The record type (default: the manifest's, else Example).
    fn with_record_type(self, record_type: RecordType) -> Self;

    /// Sets what is given; `None` leaves the default.
    fn with_reading(
        self,
        compression: Option<Compression>,
        record_type: Option<RecordType>,
    ) -> Self {
        let b = match compression {
            Some(c) => self.with_compression(c),
            None => self,
        };
        match record_type {
            Some(t) => b.with_record_type(t),
            None => b,
        }
    }
}

/// The setters of how shards are read, alike on every reading builder.
macro_rules! reading_setters {
    () => {
        /// The shards' compression (default: by name, else by content).
        pub fn with_compression(mut self, compression: Compression) -> Self {
            self.reading.compression = Some(compression);
            self
        }

        /// The record type (default: the manifest's, else Example).
        pub fn with_record_type(mut self, record_type: RecordType) -> Self {
            self.reading.record_type = Some(record_type);
            self
        }

        /// Store settings of every request (default [`IoOptions`]'s).
        pub fn with_io(mut self, io: IoOptions) -> Self {
            self.reading.io = io;
            self
        }
    };
}
pub(crate) use reading_setters;

impl Reading {
    /// Finds the shards of `paths`, and the record type they are read as.
    pub(crate) fn discover(&self, paths: &[PathBuf]) -> Result<(Dataset, RecordType)> {
        let dataset = Dataset::discover(paths, self.io)?;
        let record_type = self.record_type.unwrap_or_else(|| dataset.record_type());
        Ok((dataset, record_type))
    }
}

/// `inspect`: every record of a shard, a folder or a manifest's set, decoded, in order:
/// `Inspector::builder(path)`, options, `build()`, `run(f)`.
///
/// ```
/// use tfshard::records::Inspector;
/// let inspector = Inspector::builder("testdata/golden/examples.tfrecord")
///     .with_limit(2)
///     .build()?;
/// let mut seen = 0;
/// inspector.run(|record| {
///     seen += 1;
///     Ok(true) // false stops
/// })?;
/// assert_eq!(seen, 2);
/// # Ok::<(), tfshard::Error>(())
/// ```
#[derive(Debug)]
pub struct Inspector {
    dataset: Dataset,
    reading: Reading,
    record_type: RecordType,
    limit: Option<u64>,
}

/// Builds an [`Inspector`].
#[derive(Debug, Clone)]
pub struct InspectorBuilder {
    path: PathBuf,
    reading: Reading,
    limit: Option<u64>,
}

impl Inspector {
    /// The records of `path`: a shard file or object, a folder, or a manifest.
    pub fn builder(path: impl Into<PathBuf>) -> InspectorBuilder {
        InspectorBuilder {
            path: path.into(),
            reading: Reading::default(),
            limit: None,
        }
    }

    /// The record type the records are decoded as.
    pub fn record_type(&self) -> RecordType {
        self.record_type
    }

    /// Calls `f` with each record in order, until it returns `false` or the limit is
    /// reached; returns how many it was given.
    ///
    /// # Errors
    ///
    /// A framing or decode error naming file, record and offset; or `f`'s error.
    pub fn run(&self, mut f: impl FnMut(Record) -> Result<bool>) -> Result<u64> {
        let limit = self.limit.unwrap_or(u64::MAX);
        let mut given = 0u64;
        for shard in &self.dataset.shards {
            if given >= limit {
                break;
            }
            let (compression, io) = (self.reading.compression, self.reading.io);
            for_each_record(shard, compression, self.record_type, io, |record| {
                given += 1;
                Ok(f(record)? && given < limit)
            })?;
        }
        Ok(given)
    }
}

/// The trait is the inherent setters.
macro_rules! read_settings {
    ($builder:ty) => {
        impl ReadSettings for $builder {
            fn with_compression(self, compression: Compression) -> Self {
                <$builder>::with_compression(self, compression)
            }

            fn with_record_type(self, record_type: RecordType) -> Self {
                <$builder>::with_record_type(self, record_type)
            }
        }
    };
}
read_settings!(InspectorBuilder);
read_settings!(SchemaReaderBuilder);
pub(crate) use read_settings;

impl InspectorBuilder {
    /// At most this many records.
    pub fn with_limit(mut self, records: u64) -> Self {
        self.limit = Some(records);
        self
    }

    reading_setters!();

    /// Finds the shards.
    ///
    /// # Errors
    ///
    /// A path that does not exist, a folder with no manifest and no shard, a manifest
    /// that cannot be read.
    pub fn build(self) -> Result<Inspector> {
        let (dataset, record_type) = self.reading.discover(std::slice::from_ref(&self.path))?;
        Ok(Inspector {
            dataset,
            reading: self.reading,
            record_type,
            limit: self.limit,
        })
    }
}

/// `schema`: the feature spec of a set of shards, from their manifest or inferred from
/// every record: `SchemaReader::builder(paths)`, options, `build()`, `run()`.
///
/// ```
/// use tfshard::records::SchemaReader;
/// let schema = SchemaReader::builder(vec!["testdata/golden/examples.tfrecord".into()])
///     .build()?
///     .run()?;
/// assert!(!schema.features.is_empty());
/// # Ok::<(), tfshard::Error>(())
/// ```
#[derive(Debug)]
pub struct SchemaReader {
    dataset: Dataset,
    reading: Reading,
    record_type: RecordType,
}

/// Builds a [`SchemaReader`].
#[derive(Debug, Clone)]
pub struct SchemaReaderBuilder {
    paths: Vec<PathBuf>,
    reading: Reading,
}

/// What [`SchemaReader::run`] found.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Schema {
    /// The record type.
    pub record_type: RecordType,
    /// The features, by name.
    pub features: Vec<FeatureSpec>,
}

impl SchemaReader {
    /// The spec of these shards, folders or manifests.
    pub fn builder(paths: Vec<PathBuf>) -> SchemaReaderBuilder {
        SchemaReaderBuilder {
            paths,
            reading: Reading::default(),
        }
    }

    /// The manifest's spec when one manifest lists the shards, else the one inferred
    /// from every record (files in parallel).
    ///
    /// # Errors
    ///
    /// A corrupt shard, or a feature with two kinds.
    pub fn run(&self) -> Result<Schema> {
        Ok(Schema {
            record_type: self.record_type,
            features: feature_spec(&self.dataset, self.reading.compression, self.record_type)?,
        })
    }
}

impl SchemaReaderBuilder {
    reading_setters!();

    /// Finds the shards.
    ///
    /// # Errors
    ///
    /// No path; a path that does not exist, a folder with no manifest and no shard, a
    /// manifest that cannot be read.
    pub fn build(self) -> Result<SchemaReader> {
        if self.paths.is_empty() {
            return Err(crate::error::Error::invalid_option("paths", "give a path"));
        }
        let (dataset, record_type) = self.reading.discover(&self.paths)?;
        Ok(SchemaReader {
            dataset,
            reading: self.reading,
            record_type,
        })
    }
}

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
pub(crate) fn for_each_record(
    path: &Path,
    compression: Option<Compression>,
    record_type: RecordType,
    io: IoOptions,
    mut f: impl FnMut(Record) -> Result<bool>,
) -> Result<()> {
    for_each_payload(path, compression, io, |bytes, index, offset| {
        let record = decode_record(bytes, record_type)
            .map_err(|e| e.with_file(path).with_record(index).with_offset(offset))?;
        f(record)
    })
}

/// Calls `f` with each serialized record of `path` (its index and offset too), until it
/// returns `false`.
///
/// # Errors
///
/// A framing error naming file, record and offset; or `f`'s error.
pub(crate) fn for_each_payload(
    path: &Path,
    compression: Option<Compression>,
    io: IoOptions,
    mut f: impl FnMut(&[u8], u64, u64) -> Result<bool>,
) -> Result<()> {
    let mut reader = open(path, compression, io)?;
    loop {
        let (index, offset) = (reader.record_index(), reader.offset());
        let Some(bytes) = reader.read_record()? else {
            return Ok(());
        };
        if !f(bytes, index, offset)? {
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
pub(crate) fn feature_spec(
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
pub(crate) fn infer_spec(
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
