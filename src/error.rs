//! The crate's one error type.
//!
//! An [`Error`] is a boxed [`ErrorKind`] (what went wrong) plus a [`Location`] (where:
//! file, column, row, record, byte offset). Each layer adds what it knows as the error
//! rises, so the line a user reads names the place first:
//! `a.parquet: column "price", row 1042: 3.5e39 is beyond float32 range`.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where an error happened. Every field is optional; indices count from 0.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file being read or written.
    pub file: Option<PathBuf>,
    /// The column (flattened name, `parent/child`) or feature.
    pub column: Option<String>,
    /// The row within the input file.
    pub row: Option<u64>,
    /// The record within the shard.
    pub record: Option<u64>,
    /// The byte offset from the start of the file (of the decompressed stream for a
    /// compressed shard).
    pub offset: Option<u64>,
}

impl Location {
    fn is_empty(&self) -> bool {
        self.file.is_none()
            && self.column.is_none()
            && self.row.is_none()
            && self.record.is_none()
            && self.offset.is_none()
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some(column) = &self.column {
            parts.push(format!("column \"{column}\""));
        }
        if let Some(row) = self.row {
            parts.push(format!("row {row}"));
        }
        if let Some(record) = self.record {
            parts.push(format!("record {record}"));
        }
        if let Some(offset) = self.offset {
            parts.push(format!("offset {offset}"));
        }
        match &self.file {
            Some(file) if parts.is_empty() => write!(f, "{}", file.display()),
            Some(file) => write!(f, "{}: {}", file.display(), parts.join(", ")),
            None => write!(f, "{}", parts.join(", ")),
        }
    }
}

/// Which check a TFRecord frame failed. `phrase()` is the fixed phrase that starts a
/// `verify` problem (the `problem` key of `verify --json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FrameProblem {
    /// The masked CRC32C of the 8 length bytes does not match.
    LengthCrc,
    /// The masked CRC32C of the payload does not match.
    DataCrc,
    /// The file ends inside a 12-byte record header.
    TruncatedLength,
    /// The file ends inside a record's payload or its data CRC.
    TruncatedData,
    /// Bytes follow the end of the record stream (after a compressed stream's end).
    TrailingBytes,
}

impl FrameProblem {
    /// The fixed phrase naming the problem.
    pub fn phrase(self) -> &'static str {
        match self {
            FrameProblem::LengthCrc => "length CRC mismatch",
            FrameProblem::DataCrc => "data CRC mismatch",
            FrameProblem::TruncatedLength => "truncated length",
            FrameProblem::TruncatedData => "truncated data",
            FrameProblem::TrailingBytes => "trailing bytes",
        }
    }
}

/// What a Parquet footer claims about a column chunk that cannot be true.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChunkProblem {
    /// A negative start offset or size.
    #[error("the column chunk starts at {start} with {length} bytes")]
    Negative {
        /// Where the chunk starts (its dictionary page, else its first data page).
        start: i64,
        /// Its compressed size.
        length: i64,
    },
    /// The chunk reaches outside the file's data (past the footer, or into the magic).
    #[error(
        "the column chunk's bytes {start}..{end} lie outside the file's data (bytes 4..{limit})"
    )]
    OutsideFile {
        /// First byte.
        start: i64,
        /// One past the last byte (saturated).
        end: i64,
        /// Where the footer starts.
        limit: u64,
    },
    /// A negative row count.
    #[error("{rows} rows")]
    NegativeRows {
        /// The count claimed.
        rows: i64,
    },
}

/// How a record's bytes fail to form a protobuf message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireProblem {
    /// A varint that runs past the end of its message.
    #[error("a varint runs past the end")]
    VarintPastEnd,
    /// A varint longer than 10 bytes.
    #[error("a varint longer than 10 bytes")]
    VarintTooLong,
    /// A length-delimited field longer than what is left of its message.
    #[error("a length-delimited field runs past the end")]
    LengthPastEnd,
    /// A fixed-width field longer than what is left of its message.
    #[error("a fixed-width field runs past the end")]
    FixedPastEnd,
    /// Wire type 3, 4, 6 or 7.
    #[error("an unknown wire type")]
    UnknownWireType,
    /// A packed float list whose byte length is not a multiple of 4.
    #[error("a packed float list whose length is not a multiple of 4")]
    PackedFloatLength,
    /// One feature name twice in one record.
    #[error("feature \"{feature}\" appears twice")]
    DuplicateFeature {
        /// The feature name.
        feature: String,
    },
}

/// What is wrong with an image file (or the folder given as one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImageProblem {
    /// The image folder given is a file.
    #[error("not a folder")]
    NotAFolder,
    /// No known image signature.
    #[error("not an image (no JPEG, PNG, GIF, BMP or WebP signature)")]
    NoSignature,
    /// A header the size reader cannot read.
    #[error("{format} header unreadable: {cause}")]
    Header {
        /// `jpeg`, `png`, `gif`, `bmp` or `webp`.
        format: &'static str,
        /// The reader's words.
        cause: String,
    },
    /// A header that gives a zero width or height.
    #[error("{format} header says {width}x{height}")]
    ZeroSize {
        /// The format.
        format: &'static str,
        /// Width in pixels.
        width: usize,
        /// Height in pixels.
        height: usize,
    },
}

/// The facts behind a [`FrameProblem`], for the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameDetail {
    /// The length field does not match its CRC.
    #[error("the record header's length does not match its CRC")]
    LengthCrc,
    /// A payload that does not match its CRC.
    #[error("the {len}-byte payload does not match its CRC")]
    DataCrc {
        /// The payload's length.
        len: u64,
    },
    /// The stream ends inside a record header.
    #[error("the stream ends {available} bytes into a 12-byte record header")]
    TruncatedHeader {
        /// Header bytes present.
        available: u64,
    },
    /// The stream ends inside a record.
    #[error("the header promises a {len}-byte record ({} bytes framed) but only {left} bytes remain", len.saturating_add(16))]
    TruncatedRecord {
        /// The payload length the header gives.
        len: u64,
        /// Bytes left in the stream from the record's start.
        left: u64,
    },
    /// A gzip or zlib stream that ends before its end marker.
    #[error("the {codec} stream ends early")]
    StreamEnds {
        /// `gzip` or `zlib`.
        codec: &'static str,
    },
    /// A gzip or zlib stream the decompressor rejects.
    #[error("the {codec} stream is corrupt: {cause}")]
    StreamCorrupt {
        /// `gzip` or `zlib`.
        codec: &'static str,
        /// The decompressor's words.
        cause: String,
    },
    /// Bytes after the end of a gzip or zlib stream.
    #[error("bytes follow the end of the {codec} stream")]
    AfterStream {
        /// `gzip` or `zlib`.
        codec: &'static str,
    },
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Reading or writing a file failed.
    #[error("{0}")]
    Io(#[source] io::Error),
    /// The Parquet reader rejected the file.
    #[error("{0}")]
    Parquet(#[source] parquet::errors::ParquetError),
    /// Arrow rejected a batch (usually a malformed Parquet file seen through Arrow).
    #[error("{0}")]
    Arrow(#[source] arrow_schema::ArrowError),
    /// A TFRecord frame is corrupt or cut short.
    #[error("{}: {detail}", problem.phrase())]
    Frame {
        /// Which check failed.
        problem: FrameProblem,
        /// The facts behind it.
        detail: FrameDetail,
    },
    /// A record's payload is not a valid protobuf message of the expected type.
    #[error("decode error: not a valid {message}: {source}")]
    Decode {
        /// `tf.train.Example` or `tf.train.SequenceExample`.
        message: &'static str,
        /// prost's description.
        #[source]
        source: prost::DecodeError,
    },
    /// `convert tfrecord`: an input record's payload is not the message the records are
    /// read as (its feature spec is inferred from every payload).
    #[error("payload is not a valid {message}: {source}")]
    PayloadNotRecord {
        /// `tf.train.Example` or `tf.train.SequenceExample`.
        message: &'static str,
        /// prost's description.
        #[source]
        source: prost::DecodeError,
    },
    /// `convert tfrecord --record-type auto` with no manifest saying the type: a payload
    /// with a top-level field 2 (`feature_lists`), which an Example never has. Read as an
    /// Example, its feature lists would be missing from the manifest's spec.
    #[error(
        "payload has feature_lists (field 2): a tf.train.SequenceExample, not a tf.train.Example"
    )]
    SequenceExampleAsExample,
    /// `convert tfrecord`: an input file that is not what the manifest beside it lists
    /// (its size, its CRC32C or its records).
    #[error("differs from the manifest that lists it: {detail}")]
    NotAsListed {
        /// What differs, both values.
        detail: String,
    },
    /// `convert tfrecord --shuffle`: a local input file changed between the pass that
    /// read and checked it and the pass that writes its records out.
    #[error("changed during the run: {detail}")]
    InputChanged {
        /// What changed.
        detail: String,
    },
    /// `convert tfrecord --split-key F`: a record whose feature F holds several values.
    #[error("the split key feature holds {values} values; a split key holds one (or none)")]
    SplitKeyNotScalar {
        /// Values it holds.
        values: u64,
    },
    /// An Arrow type that no `tf.train.Feature` can represent.
    #[error("type {data_type} has no tf.train.Feature mapping")]
    UnsupportedType {
        /// arrow-rs's display of the type.
        data_type: String,
    },
    /// A list of lists outside SequenceExample mode.
    #[error("type {data_type} is a list of lists, which a tf.train.Example cannot hold")]
    NestedList {
        /// arrow-rs's display of the type.
        data_type: String,
    },
    /// A value that the target type cannot hold.
    #[error("{value} is {reason}")]
    OutOfRange {
        /// The value as found.
        value: String,
        /// Why it does not fit, e.g. `above i64::MAX`.
        reason: &'static str,
    },
    /// A null element inside a list (a feature list cannot hold nulls).
    #[error("a null element inside a list cannot be written to a tf.train.Feature")]
    NullInList,
    /// A record above protobuf's 2 GiB message limit.
    #[error("the record would be {bytes} bytes, above protobuf's 2 GiB limit")]
    RecordTooLarge {
        /// The serialized size.
        bytes: u64,
    },
    /// Two inputs whose schemas differ.
    #[error("schema differs from {other}: {detail}")]
    SchemaMismatch {
        /// The file whose schema was taken first.
        other: PathBuf,
        /// Which column differs and how.
        detail: String,
    },
    /// A column named by `--columns`, `--exclude` or `--rename` that does not exist.
    #[error("no column named \"{name}\"; available: {}", available.join(", "))]
    UnknownColumn {
        /// The name as given.
        name: String,
        /// The flattened column names of the input.
        available: Vec<String>,
    },
    /// Two columns mapping to the same feature name.
    #[error("columns \"{first}\" and \"{second}\" both map to feature \"{feature}\"")]
    DuplicateFeature {
        /// The first column.
        first: String,
        /// The second column.
        second: String,
        /// The shared feature name.
        feature: String,
    },
    /// The rows delivered disagree with what the file's metadata says.
    #[error(
        "row count mismatch: {detail} ({expected} promised, {found} found); the file is corrupt"
    )]
    RowCountMismatch {
        /// Rows the metadata promises.
        expected: u64,
        /// Rows found (in the row groups, or decoded).
        found: u64,
        /// Which counts disagree.
        detail: &'static str,
    },
    /// A Parquet footer whose column chunk layout cannot be true of this file (checked
    /// before any page is read, as parquet's C++ reader does). The column is in the
    /// location.
    #[error("corrupt Parquet footer: row group {row_group}: {problem}")]
    ChunkLayout {
        /// The row group (from 0).
        row_group: usize,
        /// What the footer claims that cannot be.
        problem: ChunkProblem,
    },
    /// The Parquet decoder panicked on this file (a corrupt page it does not check);
    /// the panic was contained and the run stopped cleanly.
    #[error(
        "the Parquet reader failed on corrupt data{}: {panic}",
        row_group.map(|g| format!(" in row group {g}")).unwrap_or_default()
    )]
    DecoderPanic {
        /// The row group being read, when it was one.
        row_group: Option<usize>,
        /// The decoder's panic message and the source line it came from.
        panic: String,
    },
    /// Options no run could honour, whatever the data (the binary exits 2 for them).
    #[error("invalid {option}: {reason}")]
    InvalidOption {
        /// The option (as the command line names it, without dashes).
        option: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A Parquet file whose footer is encrypted (Parquet Modular Encryption, magic
    /// `PARE`): reading it needs keys this tool does not take.
    #[error("encrypted Parquet (an encrypted footer) is not supported")]
    EncryptedParquet,
    /// A folder input with no Parquet file in it.
    #[error("no *.parquet file in this folder")]
    NoParquetFiles,
    /// A folder to read shards from that holds no manifest and no shard: reading it
    /// would check (or read) nothing, which a CI job must not mistake for success.
    #[error(
        "no shards in this folder: no *.manifest.json and no *.tfrecord, *.tfrecord.gz or \
         *.tfrecord.zlib file (name other files directly)"
    )]
    NoShards,
    /// `convert tfrecord`: a folder with no TFRecord file in it.
    #[error(
        "no TFRecord files in this folder: no *.tfrecord*, *.tfrec*, *-of-* or part-* file \
         (name other files directly)"
    )]
    NoTfrecordFiles,
    /// The output folder is not empty and `--overwrite` was not given.
    #[error("output folder is not empty")]
    OutputExists,
    /// A manifest that cannot be read as one.
    #[error("not a valid tfshard manifest: {0}")]
    ManifestInvalid(#[source] serde_json::Error),
    /// One feature with two kinds in different records.
    #[error("feature \"{feature}\" is {first} in one record and {second} in another")]
    KindConflict {
        /// The feature name.
        feature: String,
        /// The kind seen first.
        first: &'static str,
        /// The other kind.
        second: &'static str,
    },
    /// A file that is not a readable image.
    #[error("{0}")]
    BadImage(ImageProblem),
    /// An image outside any class folder, with `--labels dirname`.
    #[error("this image is not inside a class folder (with --labels dirname, each first-level folder is a class)")]
    UnlabeledImage,
    /// A labels file that does not match the images.
    #[error("labels file does not match the images: {detail}")]
    LabelsMismatch {
        /// The first mismatch.
        detail: String,
    },
    /// A record's bytes do not form the message they should (the pipeline's parser).
    #[error("decode error: {0}")]
    Malformed(WireProblem),
    /// The pipeline's cache file changed while the run read it (it was checked whole
    /// when the run began).
    #[error("cache file damaged while read: {0}")]
    CacheDamaged(String),
    /// A set's stored statistics (its `.stats.pb` or a shard's partial statistics)
    /// cannot be read.
    #[error("statistics damaged: {0} (convert again, or compute them from the shards: tfshard stats SHARD...)")]
    StatsDamaged(String),
    /// A record that does not fit the feature spec.
    #[error("schema mismatch: {0}")]
    RecordMismatch(SpecMismatch),
    /// A store request failed (the URL is the location): access denied, not found,
    /// unreachable, throttled past the retries, an input changed during the run.
    #[error("{problem}: {detail}")]
    Store {
        /// The cause, as the line's fixed phrase says it.
        problem: StoreProblem,
        /// What the store said, or the hint that helps (never a secret).
        detail: String,
    },
    /// `--resume` found a journal written for other inputs or options.
    #[error("cannot resume: the earlier run differs: {difference} (rerun without --resume, with --overwrite)")]
    ResumeMismatch {
        /// The first difference.
        difference: String,
    },
    /// `finalize` found parts missing or incomplete (no part manifest).
    #[error(
        "{}",
        if missing.is_empty() {
            "a part shard the finalize plan moves is gone; rerun the workers".to_owned()
        } else {
            format!(
                "parts missing or incomplete: worker{} {} of {count}; rerun {} and finalize again",
                if missing.len() == 1 { "" } else { "s" },
                missing.iter().map(u64::to_string).collect::<Vec<_>>().join(", "),
                if missing.len() == 1 { "it" } else { "them" }
            )
        }
    )]
    PartsMissing {
        /// The worker indices whose parts are missing.
        missing: Vec<u64>,
        /// Workers in all.
        count: u64,
    },
    /// Parts that cannot be one set (different options, inputs, schemas, versions).
    #[error("parts disagree: {detail}")]
    PartsDisagree {
        /// What differs.
        detail: String,
    },
    /// `finalize` on a folder with no `--num-workers` parts.
    #[error("no worker parts here (nothing under .PREFIX.tfshard-parts/): run the workers first")]
    NoParts,
    /// Another run holds the output's publishing claim, or published first.
    #[error(
        "another run is publishing to this output (or one was killed while publishing): \
         nothing was published; rerun with --overwrite to replace it"
    )]
    OutputClaimed,
    /// Another writer of the set (an append, `compact`, `finalize`, a run with
    /// `--overwrite`) holds its claim and is alive (it refreshes it).
    #[error(
        "another run is publishing to this output (an append, compact, finalize or \
         --overwrite): nothing was done; run again once it has ended (a claim not refreshed \
         for 60 s, its holder killed, is taken over)"
    )]
    AppendClaimed,
    /// Another `finalize` holds the output's claim and is alive (it refreshes the claim).
    #[error(
        "another finalize is publishing to this output: nothing was done; run finalize again \
         once it has ended (a claim not refreshed for 60 s, its holder killed, is taken over)"
    )]
    FinalizeClaimed,
    /// This run's claim was taken over by another run (this one was silent for longer
    /// than a claim stays fresh): it published nothing.
    #[error(
        "another run took this run's claim over (this run was silent too long and taken for \
         dead): it stopped before writing a manifest (of a split set, the splits written \
         before it are completed by the next run); run again once the other has ended"
    )]
    ClaimLost,
    /// A Delta Lake or Iceberg table that cannot be read as asked: not a table, a
    /// snapshot that does not exist, a corrupt log or metadata file, a reader feature or
    /// format version we cannot honour, a missing data file.
    #[error("{detail}")]
    Table {
        /// What went wrong, one line.
        detail: String,
    },
    /// Hive partition keys that differ between files under `--partitioning hive`.
    #[error("partition keys differ: {detail}")]
    PartitionKeys {
        /// Which files and keys.
        detail: String,
    },
    /// A partition key that is also a column of the files.
    #[error("partition key \"{key}\" is also a column of the files (rename one, or use --partitioning none)")]
    PartitionColumn {
        /// The key.
        key: String,
    },
    /// A feature `--tfds` cannot describe to TensorFlow Datasets.
    #[error("feature \"{feature}\" cannot be a TFDS feature: {reason}")]
    TfdsFeature {
        /// The feature.
        feature: String,
        /// Why.
        reason: String,
    },
    /// An image TFDS's `Image` feature cannot decode (it decodes GIF and WebP as 4-D).
    #[error(
        "TFDS's Image feature cannot decode {format} images (it reads them with a frame dimension)"
    )]
    TfdsImage {
        /// `gif` or `webp`.
        format: &'static str,
    },
    /// The run was stopped through its [`crate::progress::CancelToken`] (the binary's
    /// SIGINT/SIGTERM handler); its temporaries are removed.
    #[error("interrupted")]
    Interrupted,
}

#[derive(Debug)]
struct Inner {
    kind: ErrorKind,
    location: Location,
}

/// The crate's error: an [`ErrorKind`] and the [`Location`] where it happened.
///
/// Boxed so that every `Result` stays one pointer wide in hot loops.
pub struct Error(Box<Inner>);

/// The families of [`ErrorKind`] that callers tell apart (the Python module raises a
/// subclass of `tfshard.Error` for each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorFamily {
    /// The input is not what it claims to be: corrupt framing, Parquet, images or
    /// manifests, a record that does not parse, an input that changed while read.
    CorruptInput,
    /// The data does not fit: a column that cannot be encoded, schemas that differ, a
    /// record that does not match the spec, names that collide.
    SchemaMismatch,
    /// An object store refused or failed a request.
    Store,
    /// The run was cancelled (SIGINT, SIGTERM, a cancel token).
    Interrupted,
    /// Options no run could honour (the command line's usage error, exit 2).
    Usage,
    /// Anything else: I/O, a value out of range, an output in use, missing parts.
    Other,
}

impl ErrorKind {
    /// The kind's stable name, in snake case (`frame`, `schema_mismatch`, `store`,
    /// `interrupted`): the Python module's `tfshard.Error.kind`.
    pub fn name(&self) -> &'static str {
        match self {
            ErrorKind::Io(_) => "io",
            ErrorKind::Parquet(_) => "parquet",
            ErrorKind::Arrow(_) => "arrow",
            ErrorKind::Frame { .. } => "frame",
            ErrorKind::Decode { .. } => "decode",
            ErrorKind::PayloadNotRecord { .. } => "payload_not_record",
            ErrorKind::SequenceExampleAsExample => "sequence_example_as_example",
            ErrorKind::NotAsListed { .. } => "not_as_listed",
            ErrorKind::InputChanged { .. } => "input_changed",
            ErrorKind::SplitKeyNotScalar { .. } => "split_key_not_scalar",
            ErrorKind::UnsupportedType { .. } => "unsupported_type",
            ErrorKind::NestedList { .. } => "nested_list",
            ErrorKind::OutOfRange { .. } => "out_of_range",
            ErrorKind::NullInList => "null_in_list",
            ErrorKind::RecordTooLarge { .. } => "record_too_large",
            ErrorKind::SchemaMismatch { .. } => "schema_mismatch",
            ErrorKind::UnknownColumn { .. } => "unknown_column",
            ErrorKind::DuplicateFeature { .. } => "duplicate_feature",
            ErrorKind::RowCountMismatch { .. } => "row_count_mismatch",
            ErrorKind::ChunkLayout { .. } => "chunk_layout",
            ErrorKind::DecoderPanic { .. } => "decoder_panic",
            ErrorKind::InvalidOption { .. } => "invalid_option",
            ErrorKind::EncryptedParquet => "encrypted_parquet",
            ErrorKind::NoParquetFiles => "no_parquet_files",
            ErrorKind::NoShards => "no_shards",
            ErrorKind::NoTfrecordFiles => "no_tfrecord_files",
            ErrorKind::OutputExists => "output_exists",
            ErrorKind::ManifestInvalid(_) => "manifest_invalid",
            ErrorKind::KindConflict { .. } => "kind_conflict",
            ErrorKind::BadImage(_) => "bad_image",
            ErrorKind::UnlabeledImage => "unlabeled_image",
            ErrorKind::LabelsMismatch { .. } => "labels_mismatch",
            ErrorKind::Malformed(_) => "malformed",
            ErrorKind::CacheDamaged(_) => "cache_damaged",
            ErrorKind::StatsDamaged(_) => "stats_damaged",
            ErrorKind::RecordMismatch(_) => "record_mismatch",
            ErrorKind::Store { .. } => "store",
            ErrorKind::ResumeMismatch { .. } => "resume_mismatch",
            ErrorKind::PartsMissing { .. } => "parts_missing",
            ErrorKind::PartsDisagree { .. } => "parts_disagree",
            ErrorKind::NoParts => "no_parts",
            ErrorKind::OutputClaimed => "output_claimed",
            ErrorKind::FinalizeClaimed => "finalize_claimed",
            ErrorKind::AppendClaimed => "append_claimed",
            ErrorKind::ClaimLost => "claim_lost",
            ErrorKind::Table { .. } => "table",
            ErrorKind::PartitionKeys { .. } => "partition_keys",
            ErrorKind::PartitionColumn { .. } => "partition_column",
            ErrorKind::TfdsFeature { .. } => "tfds_feature",
            ErrorKind::TfdsImage { .. } => "tfds_image",
            ErrorKind::Interrupted => "interrupted",
        }
    }

    /// The kind's family.
    pub fn family(&self) -> ErrorFamily {
        match self {
            ErrorKind::Parquet(_)
            | ErrorKind::Frame { .. }
            | ErrorKind::Decode { .. }
            | ErrorKind::PayloadNotRecord { .. }
            | ErrorKind::SequenceExampleAsExample
            | ErrorKind::NotAsListed { .. }
            | ErrorKind::InputChanged { .. }
            | ErrorKind::RowCountMismatch { .. }
            | ErrorKind::ChunkLayout { .. }
            | ErrorKind::DecoderPanic { .. }
            | ErrorKind::EncryptedParquet
            | ErrorKind::ManifestInvalid(_)
            | ErrorKind::BadImage(_)
            | ErrorKind::Malformed(_)
            | ErrorKind::RecordMismatch(_) => ErrorFamily::CorruptInput,
            ErrorKind::SplitKeyNotScalar { .. }
            | ErrorKind::UnsupportedType { .. }
            | ErrorKind::NestedList { .. }
            | ErrorKind::SchemaMismatch { .. }
            | ErrorKind::UnknownColumn { .. }
            | ErrorKind::DuplicateFeature { .. }
            | ErrorKind::KindConflict { .. }
            | ErrorKind::PartitionKeys { .. }
            | ErrorKind::PartitionColumn { .. }
            | ErrorKind::TfdsFeature { .. }
            | ErrorKind::TfdsImage { .. } => ErrorFamily::SchemaMismatch,
            ErrorKind::InvalidOption { .. } => ErrorFamily::Usage,
            ErrorKind::Store { .. } => ErrorFamily::Store,
            ErrorKind::Interrupted => ErrorFamily::Interrupted,
            _ => ErrorFamily::Other,
        }
    }
}

impl Error {
    /// Creates an error with an empty location.
    pub fn new(kind: ErrorKind) -> Error {
        Error(Box::new(Inner {
            kind,
            location: Location::default(),
        }))
    }

    /// [`ErrorKind::InvalidOption`]: an option no run could honour (exit 2).
    pub fn invalid_option(option: &'static str, reason: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidOption {
            option,
            reason: reason.into(),
        })
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.0.kind
    }

    /// Where it went wrong.
    pub fn location(&self) -> &Location {
        &self.0.location
    }

    /// The same error for a second reader of what failed (a store's request that several
    /// windows of records wait for): its location and message; a store's, I/O's and an
    /// interruption's kind as they are (their family with them), another's as an I/O
    /// error that says it.
    pub(crate) fn again(&self) -> Error {
        let kind = match &self.0.kind {
            ErrorKind::Store { problem, detail } => ErrorKind::Store {
                problem: problem.clone(),
                detail: detail.clone(),
            },
            ErrorKind::Interrupted => ErrorKind::Interrupted,
            ErrorKind::Io(e) => ErrorKind::Io(io::Error::new(e.kind(), e.to_string())),
            other => ErrorKind::Io(io::Error::other(other.to_string())),
        };
        Error(Box::new(Inner {
            kind,
            location: self.0.location.clone(),
        }))
    }

    /// Sets the file, unless a deeper layer already set one.
    pub fn with_file(mut self, file: impl AsRef<Path>) -> Error {
        if self.0.location.file.is_none() {
            self.0.location.file = Some(file.as_ref().to_path_buf());
        }
        self
    }

    /// Sets the file, replacing one already set (a path the storage resolved, named
    /// as the user gave it).
    pub(crate) fn at_file(mut self, file: impl AsRef<Path>) -> Error {
        self.0.location.file = Some(file.as_ref().to_path_buf());
        self
    }

    /// Sets the column, unless already set.
    pub fn with_column(mut self, column: impl Into<String>) -> Error {
        if self.0.location.column.is_none() {
            self.0.location.column = Some(column.into());
        }
        self
    }

    /// Sets the row, unless already set.
    pub fn with_row(mut self, row: u64) -> Error {
        self.0.location.row.get_or_insert(row);
        self
    }

    /// Sets the record index, unless already set.
    pub fn with_record(mut self, record: u64) -> Error {
        self.0.location.record.get_or_insert(record);
        self
    }

    /// Sets the byte offset, unless already set.
    pub fn with_offset(mut self, offset: u64) -> Error {
        self.0.location.offset.get_or_insert(offset);
        self
    }

    /// Adds `row` to the row index already set (a batch-relative row becomes a
    /// file-relative one).
    pub fn shift_row(mut self, base: u64) -> Error {
        if let Some(row) = self.0.location.row.as_mut() {
            *row += base;
        }
        self
    }

    /// Replaces the row index (an element index becomes the row holding it).
    pub fn replace_row(mut self, row: u64) -> Error {
        self.0.location.row = Some(row);
        self
    }

    /// A second line for the user, when one helps.
    pub fn hint(&self) -> Option<String> {
        let column = self.0.location.column.as_deref().unwrap_or("COLUMN");
        match &self.0.kind {
            ErrorKind::UnsupportedType { .. } => Some(format!("hint: skip it with --exclude {column}")),
            ErrorKind::NestedList { .. } => Some(format!(
                "hint: --record-type sequence-example writes it as a feature list, or skip it with --exclude {column}"
            )),
            ErrorKind::BadImage { .. } | ErrorKind::LabelsMismatch { .. } => {
                Some("hint: --on-error skip leaves such files out and lists them in the manifest".into())
            }
            ErrorKind::UnlabeledImage => Some("hint: move it into a class folder, or use --labels none".into()),
            ErrorKind::OutputExists => Some("hint: pass --overwrite to replace this prefix's output".into()),
            ErrorKind::TfdsImage { .. } => Some("hint: convert it to PNG or JPEG, leave it out with --on-error skip, or drop --tfds".into()),
            ErrorKind::TfdsFeature { feature, .. } => Some(format!("hint: rename its column with --rename {feature}=NEW, or skip it with --exclude {feature}")),
            ErrorKind::NullInList => Some(format!("hint: drop the nulls upstream, or skip it with --exclude {column}")),
            ErrorKind::PayloadNotRecord { .. } => Some(
                "hint: --record-type bytes copies payloads without parsing them (--record-type \
                 sequence-example reads SequenceExamples)"
                    .into(),
            ),
            ErrorKind::SequenceExampleAsExample => Some(
                "hint: --record-type sequence-example reads SequenceExamples (--record-type \
                 example reads only their context)"
                    .into(),
            ),
            ErrorKind::EncryptedParquet => {
                Some("hint: decrypt it first; tfshard takes no Parquet encryption keys".into())
            }
            _ => None,
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.location.is_empty() {
            write!(f, "{}", self.0.kind)
        } else {
            write!(f, "{}: {}", self.0.location, self.0.kind)
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.0.kind)
    }
}

impl From<ErrorKind> for Error {
    fn from(kind: ErrorKind) -> Error {
        Error::new(kind)
    }
}

impl From<io::Error> for Error {
    fn from(err: io::Error) -> Error {
        // Our own readers smuggle typed errors through `io::Read`; unwrap them.
        if err.get_ref().is_some_and(|inner| inner.is::<Error>()) {
            let kind = err.kind();
            return match err.into_inner().map(|inner| inner.downcast::<Error>()) {
                Some(Ok(ours)) => *ours,
                Some(Err(other)) => Error::new(ErrorKind::Io(io::Error::new(kind, other))),
                None => Error::new(ErrorKind::Io(io::Error::from(kind))),
            };
        }
        Error::new(ErrorKind::Io(err))
    }
}

impl From<parquet::errors::ParquetError> for Error {
    fn from(err: parquet::errors::ParquetError) -> Error {
        Error::new(ErrorKind::Parquet(err))
    }
}

impl From<arrow_schema::ArrowError> for Error {
    fn from(err: arrow_schema::ArrowError) -> Error {
        Error::new(ErrorKind::Arrow(err))
    }
}

/// A feature's value type, as `tf.train.Feature` stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum FeatureKind {
    /// `int64_list`
    Int64,
    /// `float_list`
    Float,
    /// `bytes_list`
    Bytes,
}

impl fmt::Display for FeatureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a record fails its feature spec: `verify --deep` and the pipeline check records
/// with `FeatureSpec::check_values` and `FeatureSpec::check_missing` and report alike.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecMismatch {
    /// A feature the spec does not name (`verify --deep`; a parser ignores it, as
    /// `tf.io.parse_example` does).
    #[error("feature \"{feature}\" is not in the schema")]
    Unknown {
        /// The feature name.
        feature: String,
    },
    /// A fixed-shape feature absent from the record.
    #[error("feature \"{feature}\" is missing, the schema says every record has it (a VarLenFeature spec allows that)")]
    Missing {
        /// The feature name.
        feature: String,
    },
    /// A feature with no value list at all.
    #[error("feature \"{feature}\" holds no value list")]
    Empty {
        /// The feature name.
        feature: String,
    },
    /// A value list of another kind.
    #[error("feature \"{feature}\" is {found}, the schema says {expected}")]
    Kind {
        /// The feature name.
        feature: String,
        /// The kind in the record.
        found: FeatureKind,
        /// The kind in the spec.
        expected: FeatureKind,
    },
    /// A number of values that does not fit the spec's fixed shape.
    #[error("feature \"{feature}\" has {values} values, the schema's shape is {shape:?}")]
    Shape {
        /// The feature name.
        feature: String,
        /// Values in the record.
        values: u64,
        /// The spec's shape.
        shape: Vec<u64>,
    },
}

/// What went wrong talking to a store, as the one line says it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreProblem {
    /// 401/403.
    AccessDenied,
    /// No such bucket or key.
    NotFound,
    /// The endpoint refused, timed out or could not be resolved.
    Unreachable,
    /// Throttling (429, 503 SlowDown) that outlasted the retries.
    Throttled,
    /// The object's ETag is no longer the one the run started with.
    Changed,
    /// A conditional put found the object already there.
    AlreadyExists,
    /// Anything else the store said.
    Other,
}

impl fmt::Display for StoreProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoreProblem::AccessDenied => "access denied",
            StoreProblem::NotFound => "not found",
            StoreProblem::Unreachable => "cannot reach endpoint",
            StoreProblem::Throttled => "throttled",
            StoreProblem::Changed => "changed during the run",
            StoreProblem::AlreadyExists => "already exists",
            StoreProblem::Other => "store error",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_puts_the_place_first() {
        let err = Error::new(ErrorKind::OutOfRange {
            value: "3.5e39".into(),
            reason: "beyond float32 range",
        })
        .with_row(1042)
        .with_column("price")
        .with_file("a.parquet");
        assert_eq!(
            err.to_string(),
            "a.parquet: column \"price\", row 1042: 3.5e39 is beyond float32 range"
        );
    }

    #[test]
    fn inner_location_wins() {
        let err = Error::new(ErrorKind::NullInList)
            .with_row(3)
            .with_row(9)
            .shift_row(100);
        assert_eq!(err.location().row, Some(103));
    }

    #[test]
    fn io_roundtrip_keeps_our_error() {
        let ours = Error::new(ErrorKind::NullInList).with_record(7);
        let io = io::Error::other(ours);
        let back = Error::from(io);
        assert!(matches!(back.kind(), ErrorKind::NullInList));
        assert_eq!(back.location().record, Some(7));
    }
}
