//! `verify`: proves shards sound. Returns a [`VerifyReport`]; prints nothing.
//!
//! Every record of every shard is frame-checked (length CRC, data CRC, truncation,
//! trailing bytes), shards in parallel, each read once in large blocks: the whole-file
//! CRC32C a manifest lists is computed over the bytes on disk in the same pass. Given a
//! manifest, every listed shard must exist with its listed size, record count and
//! CRC32C, no unlisted shard of its prefix may sit beside it, and the totals must add up.
//! `--deep` also decodes every record and checks it against the manifest's schema (or,
//! without one, that each feature keeps one kind throughout).
//!
//! After a framing error (a bad length) the rest of a file cannot be trusted, so the file
//! ends there; after a data CRC mismatch with a sane length, checking goes on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;

use crate::dataset::is_shard_file_name;
use crate::error::{ErrorKind, FrameProblem, Result};
use crate::example::proto::{Feature, Features, Kind};
use crate::example::schema::{FeatureKind, FeatureSpec, Part, SpecInference, SpecMismatch};
use crate::example::{decode_record, Record, RecordType};
use crate::manifest::{self, Manifest, ShardInfo, MANIFEST_SUFFIX};
use crate::progress::{CancelToken, Progress};
use crate::shard::name::is_own_shard;
use crate::store::IoOptions;
use crate::tfrecord::{self, frame, Compression, HashingReader, RecordReader};

/// What to verify (set through [`VerifierBuilder`]'s setters).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct VerifyOptions {
    /// Shards, folders (their manifests, or every shard file in them) and manifests.
    pub paths: Vec<PathBuf>,
    /// One manifest named explicitly.
    pub manifest: Option<PathBuf>,
    /// Decode every record and check it against the schema.
    pub deep: bool,
    /// `None`: by extension, else by content.
    pub compression: Option<Compression>,
    /// `None`: the manifest's, else Example.
    pub record_type: Option<RecordType>,
    /// Store settings of every request (`--io-concurrency`, `--io-timeout`).
    pub io: IoOptions,
}

/// Which check a [`Problem`] failed; its [`phrase`](ProblemKind::phrase) starts the
/// problem's text (the fixed phrases of `verify --json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ProblemKind {
    /// A record's length does not match its CRC.
    LengthCrc,
    /// A record's data does not match its CRC.
    DataCrc,
    /// The file ends inside a record's length or its CRC.
    TruncatedLength,
    /// The file ends inside a record's data or its CRC.
    TruncatedData,
    /// Bytes after the last record that are not a record.
    TrailingBytes,
    /// Listed in the manifest, not there.
    MissingShard,
    /// There, a shard of the manifest's prefix, not listed.
    UnlistedShard,
    /// A size other than the manifest's.
    SizeMismatch,
    /// A record count other than the manifest's.
    RecordCountMismatch,
    /// A file CRC32C other than the manifest's.
    Crc32cMismatch,
    /// A manifest entry that leaves the manifest's folder (never opened).
    UnsafePath,
    /// A record that does not parse (`--deep`).
    DecodeError,
    /// A record that does not fit the schema, or records of two schemas (`--deep`).
    SchemaMismatch,
    /// The file cannot be opened or read.
    Unreadable,
    /// A shard's `sources` that its manifest's `inputs` cannot hold (an input not
    /// listed, rows past its end, rows two shards both claim), or (`--deep`) an input
    /// that is no longer as the manifest lists it.
    SourceMismatch,
    /// A shard whose name is not of the generation the manifest gives it.
    GenerationMismatch,
    /// The statistics file the manifest names is missing, or not the one it names (its
    /// size or SHA-256 differs).
    StatsMismatch,
}

impl ProblemKind {
    /// The fixed phrase that starts the problem's text.
    pub fn phrase(self) -> &'static str {
        match self {
            ProblemKind::LengthCrc => FrameProblem::LengthCrc.phrase(),
            ProblemKind::DataCrc => FrameProblem::DataCrc.phrase(),
            ProblemKind::TruncatedLength => FrameProblem::TruncatedLength.phrase(),
            ProblemKind::TruncatedData => FrameProblem::TruncatedData.phrase(),
            ProblemKind::TrailingBytes => FrameProblem::TrailingBytes.phrase(),
            ProblemKind::MissingShard => "missing shard",
            ProblemKind::UnlistedShard => "unlisted shard",
            ProblemKind::SizeMismatch => "size mismatch",
            ProblemKind::RecordCountMismatch => "record count mismatch",
            ProblemKind::Crc32cMismatch => "crc32c mismatch",
            ProblemKind::UnsafePath => "unsafe path",
            ProblemKind::DecodeError => "decode error",
            ProblemKind::SchemaMismatch => "schema mismatch",
            ProblemKind::Unreadable => "cannot read",
            ProblemKind::SourceMismatch => "source mismatch",
            ProblemKind::GenerationMismatch => "generation mismatch",
            ProblemKind::StatsMismatch => "stats mismatch",
        }
    }

    /// The kind's stable name, the `kind` key of a `verify --json` problem: the phrase
    /// in snake case (`data_crc_mismatch`, `missing_shard`, `unreadable`).
    pub fn name(self) -> &'static str {
        match self {
            ProblemKind::LengthCrc => "length_crc_mismatch",
            ProblemKind::DataCrc => "data_crc_mismatch",
            ProblemKind::TruncatedLength => "truncated_length",
            ProblemKind::TruncatedData => "truncated_data",
            ProblemKind::TrailingBytes => "trailing_bytes",
            ProblemKind::MissingShard => "missing_shard",
            ProblemKind::UnlistedShard => "unlisted_shard",
            ProblemKind::SizeMismatch => "size_mismatch",
            ProblemKind::RecordCountMismatch => "record_count_mismatch",
            ProblemKind::Crc32cMismatch => "crc32c_mismatch",
            ProblemKind::UnsafePath => "unsafe_path",
            ProblemKind::DecodeError => "decode_error",
            ProblemKind::SchemaMismatch => "schema_mismatch",
            ProblemKind::Unreadable => "unreadable",
            ProblemKind::SourceMismatch => "source_mismatch",
            ProblemKind::GenerationMismatch => "generation_mismatch",
            ProblemKind::StatsMismatch => "stats_mismatch",
        }
    }

    fn of_frame(problem: FrameProblem) -> ProblemKind {
        match problem {
            FrameProblem::LengthCrc => ProblemKind::LengthCrc,
            FrameProblem::DataCrc => ProblemKind::DataCrc,
            FrameProblem::TruncatedLength => ProblemKind::TruncatedLength,
            FrameProblem::TruncatedData => ProblemKind::TruncatedData,
            FrameProblem::TrailingBytes => ProblemKind::TrailingBytes,
        }
    }
}

/// One thing wrong: what (its [`kind`](Problem::kind) and the facts), and where (file,
/// record, byte offset). Its `Display` is the line `verify` prints; the `verify --json`
/// `problems` entries hold its fields, with `kind` its kind's [`name`](ProblemKind::name)
/// and `problem` its text. Problems order by file,
/// record, offset, then text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Problem {
    /// The file (shard or manifest) as named on the command line or in the manifest.
    pub file: String,
    /// The record index within the shard.
    pub record: Option<u64>,
    /// The byte offset (of the decompressed stream for compressed shards).
    pub offset: Option<u64>,
    /// Which check failed.
    pub kind: ProblemKind,
    /// The facts behind it, after the phrase (may be empty).
    pub detail: String,
}

impl Problem {
    /// The problem's text: its phrase, then the facts (`data CRC mismatch: ...`).
    pub fn text(&self) -> String {
        if self.detail.is_empty() {
            self.kind.phrase().to_owned()
        } else {
            format!("{}: {}", self.kind.phrase(), self.detail)
        }
    }
}

impl Ord for Problem {
    fn cmp(&self, other: &Problem) -> std::cmp::Ordering {
        let key = |p: &Problem| (p.file.clone(), p.record, p.offset, p.text());
        key(self).cmp(&key(other))
    }
}

impl PartialOrd for Problem {
    fn partial_cmp(&self, other: &Problem) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Serialize for Problem {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("file", &self.file)?;
        if let Some(record) = self.record {
            map.serialize_entry("record", &record)?;
        }
        if let Some(offset) = self.offset {
            map.serialize_entry("offset", &offset)?;
        }
        map.serialize_entry("kind", self.kind.name())?;
        map.serialize_entry("problem", &self.text())?;
        map.end()
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(r) = self.record {
            write!(f, ": record {r}")?;
        }
        if let Some(o) = self.offset {
            write!(f, ", offset {o}")?;
        }
        write!(f, ": {}", self.text())
    }
}

/// The outcome; the `verify --json` keys.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct VerifyReport {
    /// No problem found.
    pub ok: bool,
    /// Shard files checked.
    pub shards: u64,
    /// Records read.
    pub records: u64,
    /// Bytes on disk read.
    pub bytes: u64,
    /// Wall time.
    pub seconds: f64,
    /// Every problem, by file then offset.
    pub problems: Vec<Problem>,
}

/// One shard to check.
#[derive(Debug, Clone)]
struct Job {
    path: PathBuf,
    /// What the manifest says of it.
    listed: Option<ShardInfo>,
    compression: Option<Compression>,
    record_type: RecordType,
    /// The schema to check against with `--deep`.
    schema: Option<Vec<FeatureSpec>>,
    io: IoOptions,
}

#[derive(Default)]
struct Outcome {
    records: u64,
    bytes: u64,
    problems: Vec<Problem>,
    inference: Option<SpecInference>,
}

fn problem(
    file: &Path,
    record: Option<u64>,
    offset: Option<u64>,
    kind: ProblemKind,
    detail: String,
) -> Problem {
    Problem {
        file: file.display().to_string(),
        record,
        offset,
        kind,
        detail,
    }
}

/// The problem an error reading a shard makes: a frame check's own kind, a decode
/// error, or the file cannot be read.
fn problem_of(file: &Path, e: &crate::error::Error) -> Problem {
    let (kind, detail) = match e.kind() {
        ErrorKind::Frame { problem, detail } => {
            (ProblemKind::of_frame(*problem), detail.to_string())
        }
        ErrorKind::Decode { .. } | ErrorKind::Malformed(_) => {
            let text = e.kind().to_string();
            let phrase = format!("{}: ", ProblemKind::DecodeError.phrase());
            let detail = text.strip_prefix(&phrase).unwrap_or(&text).to_owned();
            (ProblemKind::DecodeError, detail)
        }
        other => (ProblemKind::Unreadable, other.to_string()),
    };
    let loc = e.location();
    problem(file, loc.record, loc.offset, kind, detail)
}

/// A checked verification, ready to run: `Verifier::builder(paths)`, options, `build()`,
/// `run(&progress)`. Shards are checked in parallel on the run's own thread pool.
///
/// ```
/// use tfshard::convert::Converter;
/// use tfshard::verify::Verifier;
/// let out = std::env::temp_dir().join(format!("tfshard-doc-verify-{}", std::process::id()));
/// Converter::parquet(vec!["testdata/small.parquet".into()])
///     .with_output(&out)
///     .build()?
///     .run(&tfshard::progress::NoProgress)?;
/// let report = Verifier::builder(vec![out.clone()])
///     .with_deep(true)
///     .build()?
///     .run(&tfshard::progress::NoProgress)?;
/// assert!(report.ok, "{:?}", report.problems);
/// # std::fs::remove_dir_all(&out).unwrap();
/// # Ok::<(), tfshard::Error>(())
/// ```
#[derive(Debug)]
pub struct Verifier {
    options: VerifyOptions,
    pool: rayon::ThreadPool,
    cancel: CancelToken,
}

/// Builds a [`Verifier`].
#[derive(Debug, Clone)]
pub struct VerifierBuilder {
    options: VerifyOptions,
    threads: usize,
    cancel: CancelToken,
}

impl Verifier {
    /// Shards, folders (their manifests, or every shard file in them) and manifests.
    pub fn builder(paths: Vec<PathBuf>) -> VerifierBuilder {
        VerifierBuilder {
            options: VerifyOptions {
                io: IoOptions::default(),
                paths,
                manifest: None,
                deep: false,
                compression: None,
                record_type: None,
            },
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cancel: CancelToken::new(),
        }
    }

    /// Checks every shard and manifest.
    ///
    /// # Errors
    ///
    /// Only what stops verification itself (a missing path, a folder with no manifest and no
    /// shard, a manifest that is not JSON), or [`ErrorKind::Interrupted`]
    /// once the cancel token is cancelled (no shard is started after that); every problem
    /// with the shards is in the report.
    pub fn run(&self, progress: &dyn Progress) -> Result<VerifyReport> {
        self.pool
            .install(|| verify(&self.options, &self.cancel, progress))
    }
}

impl crate::records::ReadSettings for VerifierBuilder {
    fn with_compression(self, compression: Compression) -> Self {
        VerifierBuilder::with_compression(self, compression)
    }

    fn with_record_type(self, record_type: RecordType) -> Self {
        VerifierBuilder::with_record_type(self, record_type)
    }
}

impl VerifierBuilder {
    /// Checks the shards against this manifest.
    pub fn with_manifest(mut self, manifest: PathBuf) -> Self {
        self.options.manifest = Some(manifest);
        self
    }

    /// Also decode every record and check it against the schema.
    pub fn with_deep(mut self, deep: bool) -> Self {
        self.options.deep = deep;
        self
    }

    /// The shards' compression (default: by extension, else by content).
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.options.compression = Some(compression);
        self
    }

    /// The record type (default: the manifest's, else Example).
    pub fn with_record_type(mut self, record_type: RecordType) -> Self {
        self.options.record_type = Some(record_type);
        self
    }

    /// Threads of the run's pool (default: every core).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }

    /// Store settings of every request (default [`IoOptions`]'s).
    pub fn with_io(mut self, io: IoOptions) -> Self {
        self.options.io = io;
        self
    }

    /// A token that stops the run when cancelled.
    pub fn with_cancel(mut self, cancel: CancelToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// Checks the options and starts the pool.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidOption`]: no path and no manifest, or no thread; an I/O
    /// error when the pool's threads cannot start.
    pub fn build(self) -> Result<Verifier> {
        let invalid =
            |option, reason: &str| Err(crate::error::Error::invalid_option(option, reason));
        if self.options.paths.is_empty() && self.options.manifest.is_none() {
            return invalid("paths", "give a path or a manifest");
        }
        if self.threads == 0 {
            return invalid("threads", "must be at least 1");
        }
        let pool = crate::progress::thread_pool(self.threads, "verify")?;
        Ok(Verifier {
            options: self.options,
            pool,
            cancel: self.cancel,
        })
    }
}

/// Verifies shards and manifests.
///
/// # Errors
///
/// Only what stops verification itself: a path that does not exist, a folder with no
/// manifest and no shard, or a manifest that is not JSON. Everything wrong with the shards is a [`Problem`] in the report.
pub(crate) fn verify(
    options: &VerifyOptions,
    cancel: &CancelToken,
    progress: &dyn Progress,
) -> Result<VerifyReport> {
    let started = Instant::now();
    let mut problems = Vec::new();
    let mut jobs = Vec::new();
    let mut manifests: Vec<PathBuf> = options.manifest.iter().cloned().collect();
    for path in &options.paths {
        if crate::store::paths::is_dir(path, options.io)? {
            let found = crate::manifest::manifests_in(path, options.io)?;
            if found.is_empty() {
                for shard in crate::dataset::unlisted_shards(path, options.io)? {
                    jobs.push(plain_job(shard, options));
                }
            }
            manifests.extend(found);
        } else if manifest::is_manifest_name(&path.to_string_lossy()) {
            manifests.push(path.clone());
        } else {
            let mut job = plain_job(path.clone(), options);
            // A shard listed by a manifest beside it is checked against its entry.
            if let Some(m) = crate::manifest::manifest_listing(path, options.io) {
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                job.listed = m.shards.iter().find(|s| s.file == name).cloned();
                job.record_type = options.record_type.unwrap_or(m.record_type);
                job.schema = Some(m.features.clone());
                job.compression = options.compression.or(m.compression());
            }
            jobs.push(job);
        }
    }
    manifests.sort();
    manifests.dedup();
    for path in &manifests {
        let m = crate::manifest::read_manifest(path, options.io)?;
        // A set's generations that do not add up, a shard listed twice: the manifest's
        // own error, as for one that does not parse. (A plain run's manifest: its counts
        // are problems below.)
        if m.generations.is_some() {
            m.check_generations(path)?;
        }
        plan_manifest(path, &m, options, &mut jobs, &mut problems)?;
    }
    let total_bytes: u64 = jobs
        .iter()
        .filter_map(|j| {
            j.listed
                .as_ref()
                .map(|l| l.bytes)
                .or_else(|| crate::store::paths::len(&j.path, options.io).ok())
        })
        .sum();
    progress.set_total(total_bytes);
    let done = AtomicU64::new(0);
    // Fewer shards than threads: each shard's whole-file checksum is computed beside its
    // record walk, on the cores the shards leave idle.
    let spare_cores = jobs.len() < rayon::current_num_threads();
    let outcomes: Vec<Outcome> = jobs
        .par_iter()
        .map(|job| {
            if cancel.is_cancelled() {
                return Outcome::default();
            }
            let outcome = check_shard(job, options.deep, spare_cores);
            let so_far = done.fetch_add(outcome.bytes, Ordering::Relaxed) + outcome.bytes;
            progress.advance(outcome.bytes, so_far);
            outcome
        })
        .collect();
    cancel.check()?;
    let mut records = 0;
    let mut bytes = 0;
    let mut inference: Option<SpecInference> = None;
    for (job, outcome) in jobs.iter().zip(outcomes) {
        records += outcome.records;
        bytes += outcome.bytes;
        problems.extend(outcome.problems);
        if let Some(part) = outcome.inference {
            match inference.as_mut() {
                None => inference = Some(part),
                Some(all) => {
                    if let Err(e) = all.merge(part) {
                        problems.push(problem(
                            &job.path,
                            None,
                            None,
                            ProblemKind::SchemaMismatch,
                            format!("{}", e.kind()),
                        ));
                    }
                }
            }
        }
    }
    problems.sort();
    Ok(VerifyReport {
        ok: problems.is_empty(),
        shards: jobs.len() as u64,
        records,
        bytes,
        seconds: started.elapsed().as_secs_f64(),
        problems,
    })
}

fn plain_job(path: PathBuf, options: &VerifyOptions) -> Job {
    let record_type = options.record_type.unwrap_or_default();
    Job {
        path,
        listed: None,
        compression: options.compression,
        record_type,
        schema: None,
        io: options.io,
    }
}

/// Turns a manifest into jobs, and finds what is wrong with it without reading shards.
fn plan_manifest(
    path: &Path,
    m: &Manifest,
    options: &VerifyOptions,
    jobs: &mut Vec<Job>,
    problems: &mut Vec<Problem>,
) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let stem = || {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        name.trim_end_matches(MANIFEST_SUFFIX).to_owned()
    };
    // A TFDS set's manifest `{NAME}-{split}` names shards `{NAME}-{split}.tfrecord-…`.
    let prefix = if m.options.contains_key("tfds") {
        format!("{}.tfrecord", stem())
    } else {
        m.options
            .get("prefix")
            .and_then(|p| p.as_str())
            .map(str::to_owned)
            .unwrap_or_else(stem)
    };
    let mut listed = BTreeSet::new();
    // One listing of the folder (one request on a store) answers which shards exist.
    let present: BTreeSet<PathBuf> = crate::store::paths::files_in(dir, options.io)?
        .into_iter()
        .collect();
    for shard in &m.shards {
        if !manifest::is_safe_relative(&shard.file) {
            problems.push(problem(
                path,
                None,
                None,
                ProblemKind::UnsafePath,
                format!("{:?} leaves the manifest's folder; not opened", shard.file),
            ));
            continue;
        }
        listed.insert(shard.file.clone());
        let shard_path = dir.join(&shard.file);
        if !present.contains(&shard_path) {
            problems.push(problem(
                &shard_path,
                None,
                None,
                ProblemKind::MissingShard,
                "listed in the manifest but not on disk".into(),
            ));
            continue;
        }
        jobs.push(Job {
            path: shard_path,
            listed: Some(shard.clone()),
            compression: options.compression.or(m.compression()),
            record_type: options.record_type.unwrap_or(m.record_type),
            schema: Some(m.features.clone()),
            io: options.io,
        });
    }
    // The statistics file it names, whole.
    if let Some(info) = &m.stats {
        let stats_path = dir.join(&info.file);
        let found = if !manifest::is_safe_relative(&info.file) {
            Err("leaves the manifest's folder; not opened".to_owned())
        } else if !present.contains(&stats_path) {
            Err("listed in the manifest but not on disk".to_owned())
        } else {
            match crate::store::paths::read(&stats_path, options.io) {
                Err(e) => Err(e.to_string()),
                Ok(bytes) => {
                    use sha2::Digest;
                    let sha = format!("{:x}", sha2::Sha256::digest(&bytes));
                    if bytes.len() as u64 != info.bytes || sha != info.sha256 {
                        Err(format!(
                            "{} bytes of SHA-256 {sha}, the manifest lists {} bytes of {}",
                            bytes.len(),
                            info.bytes,
                            info.sha256
                        ))
                    } else {
                        Ok(())
                    }
                }
            }
        };
        if let Err(detail) = found {
            problems.push(problem(
                &stats_path,
                None,
                None,
                ProblemKind::StatsMismatch,
                detail,
            ));
        }
    }
    // A shard that a generation's pinned manifest there lists (kept by `--retain`) is
    // listed too.
    for file in &present {
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        if crate::shard::name::pinned_generation(&prefix, &name).is_some() {
            if let Ok(pinned) = manifest::read_manifest(file, options.io) {
                listed.extend(pinned.shards.into_iter().map(|s| s.file));
            }
        }
    }
    for file in &present {
        let name = file
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if is_own_shard(&prefix, &name) && is_shard_file_name(&name) && !listed.contains(&name) {
            problems.push(problem(
                file,
                None,
                None,
                ProblemKind::UnlistedShard,
                "not in the manifest".into(),
            ));
        }
    }
    check_sources(path, m, options, problems);
    let records: u64 = m.shards.iter().map(|s| s.records).sum();
    let bytes: u64 = m.shards.iter().map(|s| s.bytes).sum();
    if records != m.records {
        problems.push(problem(
            path,
            None,
            None,
            ProblemKind::RecordCountMismatch,
            format!(
                "the shards list {records} records, the total says {}",
                m.records
            ),
        ));
    }
    if bytes != m.bytes {
        problems.push(problem(
            path,
            None,
            None,
            ProblemKind::SizeMismatch,
            format!("the shards list {bytes} bytes, the total says {}", m.bytes),
        ));
    }
    Ok(())
}

fn is_listing_etag(etag: &str) -> bool {
    etag.starts_with(manifest::LISTING_ETAG)
}

/// The generation a shard's name gives it: `g` for `…-g{g:05}-{i:05}-of-{n:05}…`, else
/// 0 (no prefix may end like a generation, so the name alone says).
fn named_generation(name: &str) -> u32 {
    let digits = |t: &str| t.len() >= 5 && t.bytes().all(|b| b.is_ascii_digit());
    let Some((head, _)) = name.rsplit_once("-of-") else {
        return 0;
    };
    let Some((head, index)) = head.rsplit_once('-') else {
        return 0;
    };
    match head.rsplit_once('-') {
        Some((_, g)) if digits(index) => match g.strip_prefix('g') {
            Some(g) if digits(g) => g.parse().unwrap_or(0),
            _ => 0,
        },
        _ => 0,
    }
}

/// Checks each shard's generation against its name, and its `sources` against the
/// manifest's `inputs`: each names a listed input, within its rows; without
/// `--shuffle`, a shard's ranges hold at least its records, and without `--split`
/// exactly its records, no two shards claim the same rows of an input, and together
/// they hold every row of every input (the live rows, each exactly once: a lost or
/// doubled range is a problem). With `--deep`, each input that can still be read is as
/// the manifest lists it (size, and ETag where it has one); one that cannot be read
/// (vacuumed, expired, moved) is not a problem.
pub(crate) fn check_sources(
    path: &Path,
    m: &Manifest,
    options: &VerifyOptions,
    problems: &mut Vec<Problem>,
) {
    let mut report = |kind, detail: String| problems.push(problem(path, None, None, kind, detail));
    let inputs: BTreeMap<&str, &manifest::InputInfo> =
        m.inputs.iter().map(|i| (i.path.as_str(), i)).collect();
    let shuffled = m.options.get("shuffle").is_some_and(|v| v == true);
    // A split's shard's ranges span records of other splits: `compact` gives each of two
    // shards cut from one such shard all of its ranges.
    let split = m.options.get("split").is_some_and(|v| !v.is_null());
    // Per input, the rows claimed and by which shard.
    let mut claimed: BTreeMap<&str, Vec<([u64; 2], &str)>> = BTreeMap::new();
    for shard in &m.shards {
        let g = shard.generation.unwrap_or(0);
        let named = named_generation(&shard.file);
        if named != g {
            report(
                ProblemKind::GenerationMismatch,
                format!(
                    "{} is named as generation {named}, the manifest gives it generation {g}",
                    shard.file
                ),
            );
        }
        let mut held = 0u64;
        for source in &shard.sources {
            let [start, end] = source.rows;
            let Some(input) = inputs.get(source.input.as_str()) else {
                report(
                    ProblemKind::SourceMismatch,
                    format!(
                        "{} holds records of {}, which inputs does not list",
                        shard.file, source.input
                    ),
                );
                continue;
            };
            if start > end || end > input.rows {
                report(
                    ProblemKind::SourceMismatch,
                    format!(
                        "{} holds rows [{start}, {end}) of {}, which has {} rows",
                        shard.file, source.input, input.rows
                    ),
                );
                continue;
            }
            held += end - start;
            claimed
                .entry(source.input.as_str())
                .or_default()
                .push(([start, end], shard.file.as_str()));
        }
        let short = held < shard.records;
        // (A split's shard's ranges also span records that went to other splits.)
        let long = !split && held > shard.records;
        if !shuffled && !shard.sources.is_empty() && (short || long) {
            report(
                ProblemKind::SourceMismatch,
                format!(
                    "{} holds {} records, its sources name {held} rows{}",
                    shard.file,
                    shard.records,
                    if long {
                        " (ranges over rows it does not hold, as appends by tfshard before \
                         identities were recorded wrote them: its records are intact; a \
                         conversion with --overwrite writes them anew)"
                    } else {
                        ""
                    }
                ),
            );
        }
    }
    // Every row of every input exactly once, where every shard says what it holds (a set
    // from before tfshard recorded sources names none).
    let every_shard_says = m
        .shards
        .iter()
        .all(|s| s.records == 0 || !s.sources.is_empty());
    // (A worker's part holds its range of the inputs alone.)
    if !shuffled && !split && every_shard_says && m.worker.is_none() {
        // An image folder counts among its rows the images left out while read
        // (`--on-error skip`), which no shard holds: gaps there are allowed, as many as the
        // set lists left out.
        let mut listing_gaps: Vec<String> = Vec::new();
        let mut listing_rows = 0u64;
        for input in &m.inputs {
            let ranges = claimed.entry(input.path.as_str()).or_default();
            ranges.sort_unstable();
            let listing = input.etag.as_deref().is_some_and(is_listing_etag);
            let mut gap = |from: u64, to: u64| {
                let detail = format!("no shard holds rows [{from}, {to}) of {}", input.path);
                if listing {
                    listing_rows += to - from;
                    listing_gaps.push(detail);
                } else {
                    report(ProblemKind::SourceMismatch, detail);
                }
            };
            let mut covered = 0u64;
            for &([start, end], _) in ranges.iter() {
                if start > covered {
                    gap(covered, start);
                }
                covered = covered.max(end);
            }
            if covered < input.rows {
                gap(covered, input.rows);
            }
            for pair in ranges.windows(2) {
                let ([_, end], a) = pair[0];
                let ([start, _], b) = pair[1];
                if start < end {
                    report(
                        ProblemKind::SourceMismatch,
                        format!("{a} and {b} both hold rows from {start} of {}", input.path),
                    );
                }
            }
        }
        let skipped = m.skipped.as_ref().map_or(0, Vec::len) as u64;
        if listing_rows > skipped {
            for detail in listing_gaps {
                report(ProblemKind::SourceMismatch, detail);
            }
        }
    }
    if !options.deep {
        return;
    }
    // (An image folder's inputs are folders, their ETag a digest of a listing: `convert
    // --append` tells whether they changed.)
    let files = (m.inputs.iter()).filter(|i| !i.etag.as_deref().is_some_and(is_listing_etag));
    for input in files {
        let at = Path::new(&input.path);
        let Ok(blob) = crate::store::storage::Blob::head(at, options.io) else {
            continue;
        };
        let now = blob.object();
        let file_etag = input.etag.as_deref();
        // (A listing gives some stores' ETags bare, a HEAD quoted.)
        let bare = |e: Option<&str>| e.map(|e| e.trim_matches('"').to_owned());
        let etag_differs = file_etag.is_some() && bare(now.etag.as_deref()) != bare(file_etag);
        if now.size != input.bytes || etag_differs {
            report(
                ProblemKind::SourceMismatch,
                format!(
                    "input {} is {} bytes{} now, {} bytes{} when converted: the shards \
                     holding its records may be out of date (convert --append brings \
                     the set up to date)",
                    input.path,
                    now.size,
                    now.etag
                        .as_deref()
                        .map(|e| format!(" (ETag {e})"))
                        .unwrap_or_default(),
                    input.bytes,
                    file_etag
                        .map(|e| format!(" (ETag {e})"))
                        .unwrap_or_default(),
                ),
            );
        }
    }
}

/// Bytes per range of [`file_crc32c`]: large sequential reads.
const HASH_RANGE_BYTES: u64 = 8 << 20;

/// The CRC32C of a local file's first `len` bytes, its ranges read and checksummed in
/// parallel, then combined. Also returns the bytes read: fewer than `len` when the file
/// was cut short meanwhile.
fn file_crc32c(path: &Path, len: u64) -> std::io::Result<(u32, u64)> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path)?;
    let ranges: Vec<u64> = (0..len).step_by(HASH_RANGE_BYTES as usize).collect();
    let parts = ranges
        .par_iter()
        .map_init(Vec::new, |buf, &start| {
            let want = HASH_RANGE_BYTES.min(len - start) as usize;
            // One buffer per thread, reused: not a fresh 8 MiB to fault in per range.
            buf.resize(want, 0);
            let mut got = 0;
            while got < want {
                match file.read_at(&mut buf[got..], start + got as u64)? {
                    0 => break,
                    n => got += n,
                }
            }
            Ok((frame::crc32c(&buf[..got]), got as u64))
        })
        .collect::<std::io::Result<Vec<(u32, u64)>>>()?;
    let (mut crc, mut read) = (0, 0);
    for (&start, (part, n)) in ranges.iter().zip(parts) {
        crc = frame::crc32c_combine(crc, part, n);
        read += n;
        if n < HASH_RANGE_BYTES.min(len - start) {
            break;
        }
    }
    Ok((crc, read))
}

/// Reads one shard through, collecting its problems. With `spare_cores`, the whole-file
/// checksum of a local, uncompressed shard is computed in parallel with the walk.
fn check_shard(job: &Job, deep: bool, spare_cores: bool) -> Outcome {
    // A file the local file system reads (ranges on every core); a store's is walked.
    let local = crate::store::paths::local_path(&job.path, job.io)
        .ok()
        .flatten();
    let (true, Some(Compression::None), Some(_), Some(local)) =
        (spare_cores, job.compression, &job.listed, local)
    else {
        return walk_shard(job, deep, false);
    };
    let len = std::fs::metadata(&local).map(|m| m.len()).unwrap_or(0);
    if let (false, Some(listed)) = (deep, &job.listed) {
        // Ranges of the shard walked on every core; at any doubt, the walk below tells
        // what is wrong.
        let ranges = 4 * rayon::current_num_threads();
        let sound = crate::failpoint::hit("verify:opened").is_ok()
            && len == listed.bytes
            && tfrecord::ranges::check_file(&local, len, ranges)
                .ok()
                .flatten()
                .is_some_and(|found| {
                    found.records == listed.records
                        && u32::from_str_radix(&listed.crc32c, 16) == Ok(found.crc32c)
                });
        if sound {
            return Outcome {
                records: listed.records,
                bytes: len,
                ..Outcome::default()
            };
        }
    }
    let (outcome, hashed) =
        rayon::join(|| walk_shard(job, deep, true), || file_crc32c(&local, len));
    let mut outcome = outcome;
    match (hashed, &job.listed) {
        (Ok((crc, read)), Some(listed)) => {
            compare_crc(&job.path, listed, crc, read, outcome.bytes, &mut outcome)
        }
        // The walk read the file; the checksum's reads failed: say so, never skip it.
        (Err(e), _) => outcome.problems.push(problem(
            &job.path,
            None,
            None,
            ProblemKind::Unreadable,
            format!("{}", crate::error::Error::from(e).kind()),
        )),
        (Ok(_), None) => {}
    }
    outcome
}

/// Adds a problem when the file's CRC32C (over all `disk_len` bytes) is not the listed one.
fn compare_crc(
    path: &Path,
    listed: &ShardInfo,
    crc: u32,
    read: u64,
    disk_len: u64,
    out: &mut Outcome,
) {
    let want = u32::from_str_radix(&listed.crc32c, 16).ok();
    if read == disk_len && want != Some(crc) {
        out.problems.push(problem(
            path,
            None,
            None,
            ProblemKind::Crc32cMismatch,
            format!(
                "the file's CRC32C is {crc:08x}, the manifest lists {}",
                listed.crc32c
            ),
        ));
    }
}

/// [`check_shard`]'s walk over the records; the whole-file checksum too unless the caller
/// computes it apart.
fn walk_shard(job: &Job, deep: bool, hashed_apart: bool) -> Outcome {
    let mut out = Outcome::default();
    let path = &job.path;
    let compression = match job.compression {
        Some(c) => c,
        None => match crate::records::detect_compression(path, job.io) {
            Ok(c) => c,
            Err(e) => {
                out.problems.push(problem_of(path, &e));
                return out;
            }
        },
    };
    let (file, disk_len) = match crate::store::paths::open(path, job.io) {
        Ok(f) => f,
        Err(e) => {
            out.problems.push(problem(
                path,
                None,
                None,
                ProblemKind::Unreadable,
                format!("{}", e.kind()),
            ));
            return out;
        }
    };
    if let Err(e) = crate::failpoint::hit("verify:opened") {
        out.problems.push(problem_of(path, &e));
        return out;
    }
    // The hashing reader sits under the decompressor: it sees the bytes on disk.
    let hashing = std::sync::Arc::new(std::sync::Mutex::new(None::<(u32, u64)>));
    let raw: Box<dyn std::io::Read + Send> = if hashed_apart {
        file
    } else {
        Box::new(HashTap {
            inner: HashingReader::new(file),
            done: hashing.clone(),
        })
    };
    let mut reader = RecordReader::new(tfrecord::decompress(raw, compression));
    if compression == Compression::None {
        reader = reader.with_total_len(disk_len);
    }
    let schema = job
        .schema
        .as_ref()
        .map(|s| SchemaCheck::new(s, job.record_type));
    let mut inference = (deep && schema.is_none()).then(SpecInference::new);
    let mut complete = true;
    loop {
        let (index, offset) = (reader.record_index(), reader.offset());
        match reader.read_record() {
            Ok(None) => break,
            Ok(Some(bytes)) => {
                out.records += 1;
                if deep {
                    match decode_record(bytes, job.record_type) {
                        Err(e) => {
                            let e = e.with_record(index).with_offset(offset);
                            out.problems.push(problem_of(path, &e))
                        }
                        Ok(record) => {
                            if let Some(check) = &schema {
                                if let Some(text) = check.check(&record) {
                                    out.problems.push(problem(
                                        path,
                                        Some(index),
                                        Some(offset),
                                        ProblemKind::SchemaMismatch,
                                        text,
                                    ));
                                }
                            }
                            if let Some(inf) = inference.as_mut() {
                                if let Err(e) = inf.add(&record) {
                                    out.problems.push(problem(
                                        path,
                                        Some(index),
                                        Some(offset),
                                        ProblemKind::SchemaMismatch,
                                        format!("{}", e.kind()),
                                    ));
                                    inference = None;
                                }
                            }
                        }
                    }
                }
            }
            Err(e) => {
                out.problems.push(problem_of(path, &e));
                let recoverable = matches!(
                    e.kind(),
                    ErrorKind::Frame {
                        problem: crate::error::FrameProblem::DataCrc,
                        ..
                    }
                ) && compression == Compression::None;
                if recoverable {
                    // Counted: the record is there, only its bytes are wrong.
                    out.records += 1;
                } else {
                    complete = false;
                    break;
                }
            }
        }
    }
    drop(reader);
    out.bytes = disk_len;
    out.inference = inference;
    if let Some(listed) = &job.listed {
        if disk_len != listed.bytes {
            out.problems.push(problem(
                path,
                None,
                None,
                ProblemKind::SizeMismatch,
                format!(
                    "{disk_len} bytes on disk, the manifest lists {}",
                    listed.bytes
                ),
            ));
        }
        if complete && out.records != listed.records {
            out.problems.push(problem(
                path,
                None,
                None,
                ProblemKind::RecordCountMismatch,
                format!(
                    "{} records, the manifest lists {}",
                    out.records, listed.records
                ),
            ));
        }
        let hashed = hashing.lock().ok().and_then(|h| *h);
        if let Some((crc, read)) = hashed {
            compare_crc(path, listed, crc, read, disk_len, &mut out);
        }
    }
    out
}

/// Hands the whole-file CRC back when the decompressor drops the reader.
struct HashTap {
    inner: HashingReader<Box<dyn std::io::Read + Send>>,
    done: std::sync::Arc<std::sync::Mutex<Option<(u32, u64)>>>,
}

impl std::io::Read for HashTap {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf)
    }
}

impl Drop for HashTap {
    fn drop(&mut self) {
        // Finish the pass over whatever the decompressor did not need to read (a
        // stream's padding), so the CRC covers the whole file.
        let mut sink = [0u8; 1 << 16];
        while matches!(std::io::Read::read(&mut self.inner, &mut sink), Ok(n) if n > 0) {}
        if let Ok(mut slot) = self.done.lock() {
            *slot = Some((self.inner.crc32c(), self.inner.bytes()));
        }
    }
}

/// Checks decoded records against a manifest's features.
struct SchemaCheck {
    record_type: RecordType,
    /// (part, name) → spec. Examples use part `None`.
    specs: BTreeMap<(Option<Part>, String), FeatureSpec>,
}

fn feature_len(f: &Feature) -> Option<(FeatureKind, usize)> {
    Some(match f.kind.as_ref()? {
        Kind::BytesList(l) => (FeatureKind::Bytes, l.value.len()),
        Kind::FloatList(l) => (FeatureKind::Float, l.value.len()),
        Kind::Int64List(l) => (FeatureKind::Int64, l.value.len()),
    })
}

impl SchemaCheck {
    fn new(features: &[FeatureSpec], record_type: RecordType) -> SchemaCheck {
        let specs = features
            .iter()
            .map(|f| {
                let part = match (record_type, f.part) {
                    (RecordType::Example, _) => None,
                    (_, Some(Part::FeatureLists)) => Some(Part::FeatureLists),
                    _ => Some(Part::Context),
                };
                ((part, f.name.clone()), f.clone())
            })
            .collect();
        SchemaCheck { record_type, specs }
    }

    /// The first way a part of a record fails the schema (the checks the pipeline's
    /// parser makes too: [`FeatureSpec::check_values`], [`FeatureSpec::check_missing`]).
    fn check_features(
        &self,
        part: Option<Part>,
        features: Option<&Features>,
    ) -> Result<(), SpecMismatch> {
        let empty = Features::default();
        let features = features.unwrap_or(&empty);
        for (name, feature) in &features.feature {
            let Some(spec) = self.specs.get(&(part, name.clone())) else {
                return Err(SpecMismatch::Unknown {
                    feature: name.clone(),
                });
            };
            let (kind, len) = feature_len(feature).unzip();
            spec.check_values(kind, len.unwrap_or(0) as u64)?;
        }
        for ((p, name), spec) in &self.specs {
            if *p == part && !features.feature.contains_key(name) {
                spec.check_missing()?;
            }
        }
        Ok(())
    }

    fn check(&self, record: &Record) -> Option<String> {
        match (record, self.record_type) {
            // Opaque payloads: framing and CRCs are all there is to check.
            (Record::Bytes(_), _) => None,
            (Record::Example(e), _) => self
                .check_features(None, e.features.as_ref())
                .err()
                .map(|m| m.to_string()),
            (Record::SequenceExample(s), _) => {
                if let Err(m) = self.check_features(Some(Part::Context), s.context.as_ref()) {
                    return Some(m.to_string());
                }
                let lists = s.feature_lists.as_ref().map(|l| &l.feature_list);
                for (name, list) in lists.into_iter().flatten() {
                    let Some(spec) = self.specs.get(&(Some(Part::FeatureLists), name.clone()))
                    else {
                        return Some(format!("feature list \"{name}\" is not in the schema"));
                    };
                    for (step, feature) in list.feature.iter().enumerate() {
                        let (kind, len) = feature_len(feature).unzip();
                        if let Err(m) = spec.check_values(kind, len.unwrap_or(0) as u64) {
                            return Some(format!("feature list step {step}: {m}"));
                        }
                    }
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_name_says_its_generation() {
        assert_eq!(named_generation("data-00000-of-00004.tfrecord"), 0);
        assert_eq!(
            named_generation("data-g00012-00003-of-00004.tfrecord.gz"),
            12
        );
        assert_eq!(named_generation("train-g00001-00000-of-00001.tfrecord"), 1);
        assert_eq!(named_generation("my-gpu-00000-of-00001.tfrecord"), 0);
        assert_eq!(named_generation("ds-train.tfrecord-00000-of-00001"), 0);
    }

    /// Problems are typed (kind and place); their text is their `Display`.
    #[test]
    fn problems_are_typed_with_their_place() {
        let dir = crate::test_dir("verify-typed");
        let mut bytes = Vec::new();
        for payload in [&b"first"[..], b"second", b"third"] {
            crate::tfrecord::append_record(&mut bytes, payload);
        }
        // The second record's data: 12 bytes of header after the first's 21.
        bytes[21 + 12] ^= 0x40;
        let shard = dir.join("a.tfrecord");
        std::fs::write(&shard, &bytes).unwrap();
        let report = Verifier::builder(vec![shard.clone()])
            .build()
            .unwrap()
            .run(&crate::progress::NoProgress)
            .unwrap();
        assert!(!report.ok);
        let [p] = report.problems.as_slice() else {
            panic!("{:?}", report.problems)
        };
        assert_eq!(p.kind, ProblemKind::DataCrc);
        assert_eq!((p.record, p.offset), (Some(1), Some(21)));
        assert_eq!(p.file, shard.display().to_string());
        assert!(p.to_string().ends_with(": record 1, offset 21: data CRC mismatch: the 6-byte payload does not match its CRC"), "{p}");
        let json = serde_json::to_value(p).unwrap();
        assert_eq!(json["problem"], p.text());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn file_crc_in_parallel_ranges_equals_one_pass() {
        let path = crate::test_dir("verify-filecrc").join("data");
        let data: Vec<u8> = (0..(2 * HASH_RANGE_BYTES + 12_345))
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        std::fs::write(&path, &data).unwrap();
        let len = data.len() as u64;
        assert_eq!(
            file_crc32c(&path, len).unwrap(),
            (frame::crc32c(&data), len)
        );
        // Cut short after its size was taken: the bytes read say so.
        std::fs::write(&path, &data[..HASH_RANGE_BYTES as usize + 7]).unwrap();
        assert_eq!(file_crc32c(&path, len).unwrap().1, HASH_RANGE_BYTES + 7);
        std::fs::remove_file(&path).unwrap();
    }
}
