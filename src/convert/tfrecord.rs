//! The TFRecord source: existing TFRecord files (any writer's) → the same payloads,
//! framed again, in input order.
//!
//! A unit is one input file ([`crate::source::tfrecord`] finds and orders them).
//! Workers read whole files ([`super::ordered`]): each record's length and data CRCs
//! are checked, its payload parsed (unless `--record-type bytes`) to infer the feature
//! spec as `schema` infers it and, with `--split-key`, to hash the key feature, and
//! the payload is framed again byte for byte into batches the run's thread writes in
//! file order. Compression is detected per file (or set by `--input-compression`).
//! With `--num-workers`, each worker takes whole files by cumulative bytes; splits
//! without a key hash each record's (file, index in file), so a worker assigns the
//! records of its files as one machine would.

use std::io::{Cursor, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use prost::Message as _;
use serde_json::json;

use crate::convert::ordered::{self, Emit, InOrder};
use crate::convert::route::Router;
use crate::convert::{ConvertOptions, Open, Source, WorkerShare};
use crate::error::{Error, ErrorKind, FrameDetail, FrameProblem, Result};
use crate::example::encode::EncodedBatch;
use crate::example::proto::{self, Example, Feature, SequenceExample};
use crate::example::scan::{ExampleScan, Scanned};
use crate::example::schema::SpecInference;
use crate::example::{FeatureSpec, Record, RecordType};
use crate::hash::{file_position_hash, stable_hash};
use crate::manifest::{InputInfo, Manifest};
use crate::progress::Progress;
use crate::source::tfrecord::{self as source, TfrecordInput};
use crate::tfrecord::frame::{self, FOOTER_LEN};
use crate::tfrecord::mapped::{KeptMap, MappedRecords};
use crate::tfrecord::reader::frame_error;
use crate::tfrecord::{Compression, RecordReader};

/// Framed bytes per batch handed to the writer, about.
const BATCH_BYTES: usize = 4 << 20;

/// What to read (set through [`super::ConverterBuilder`]'s `with_input_compression`
/// and `with_record_type`).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct TfrecordOptions {
    /// The inputs' compression (`None`: detected per file).
    pub input_compression: Option<Compression>,
    /// What the payloads are (`None`: the input manifest's type, else Example).
    pub record_type: Option<RecordType>,
}

/// The input files, found and ordered, ready to be converted.
pub(crate) struct TfrecordSource {
    files: Vec<TfrecordInput>,
    record_type: RecordType,
    /// The type is Example for want of any other word (no flag, no manifest): a
    /// SequenceExample payload is refused rather than read as one.
    guessed: bool,
    input_compression: Option<Compression>,
    /// The files this run reads (a worker's share), by index into `files`.
    units: Vec<usize>,
    /// A worker's share, `[first, end)` of the files the run reads.
    range: Option<[u64; 2]>,
    worker: Option<WorkerShare>,
    pass: Option<Pass>,
}

/// The files of `read` (indices into `files`) a run reads: all, or a worker's share;
/// and the share as a range of `read`.
fn share_files(
    files: &[TfrecordInput],
    read: Vec<usize>,
    worker: Option<WorkerShare>,
) -> (Vec<usize>, Option<[u64; 2]>) {
    let Some(worker) = worker else {
        return (read, None);
    };
    let sizes: Vec<u64> = read.iter().map(|&f| files[f].bytes).collect();
    let [first, end] = worker.share(&sizes);
    (
        read[first as usize..end as usize].to_vec(),
        Some([first, end]),
    )
}

/// What a pass saw.
#[derive(Debug, Default)]
struct Pass {
    records_per_input: Vec<u64>,
    spec: SpecInference,
    /// With `--split-key`: whether any record held the key feature.
    key_seen: bool,
    /// Files found as their manifest lists them: its spec, and their records.
    listed: Vec<(Arc<Vec<FeatureSpec>>, u64)>,
    /// The spec, once the pass is done.
    features: Vec<FeatureSpec>,
}

/// One batch's account, from the worker that read it.
struct BatchMeta {
    records: u64,
    /// Bytes of the file (on disk) read for it.
    raw_bytes: u64,
    spec: SpecInference,
    key_seen: bool,
    /// On a file's last batch, when its records were not parsed: the spec of the
    /// manifest listing it, and its records.
    listed: Option<(Arc<Vec<FeatureSpec>>, u64)>,
    /// A batch of a mapped file (`--shuffle`): its records stay in the map, the batch
    /// holds their sizes only, and these are their offsets.
    mapped: Option<(Arc<KeptMap>, Vec<usize>)>,
}

impl TfrecordSource {
    /// Finds the inputs and resolves the record type.
    ///
    /// # Errors
    ///
    /// As [`source::discover`]; `--tfds` with records that are not Examples.
    pub(crate) fn open(
        options: &ConvertOptions,
        tfrecord: &TfrecordOptions,
    ) -> Result<TfrecordSource> {
        let found = source::discover(&options.inputs, options.io)?;
        let named = tfrecord.record_type.or(found.record_type);
        let record_type = named.unwrap_or_default();
        if options.tfds.is_some() && record_type != RecordType::Example {
            return Err(Error::invalid_option(
                "tfds",
                format!(
                    "TFDS reads tf.train.Example records; these are read as {}",
                    record_type.message_name()
                ),
            ));
        }
        let every = (0..found.files.len()).collect();
        let (units, range) = share_files(&found.files, every, options.worker);
        Ok(TfrecordSource {
            files: found.files,
            record_type,
            guessed: named.is_none(),
            input_compression: tfrecord.input_compression,
            units,
            range,
            worker: options.worker,
            pass: None,
        })
    }

    /// Reads file `f` whole, sending its records in batches.
    fn read_file(
        &self,
        options: &ConvertOptions,
        f: usize,
        emit: &mut Emit<'_, BatchMeta>,
    ) -> Result<()> {
        let input = &self.files[f];
        if let Some(listed) = input.listed.bytes.filter(|&b| b != input.bytes) {
            return Err(not_as_listed(format!(
                "{} bytes, the manifest says {listed}",
                input.bytes
            ))
            .with_file(input.name()));
        }
        let (records, crc) = match self.mapped(options, input)? {
            Some((walk, map)) => {
                let crc = input
                    .listed
                    .crc32c
                    .is_some()
                    .then(|| frame::crc32c(map.bytes()));
                (self.read_mapped(options, f, walk, &map, emit)?, crc)
            }
            None => {
                let counted = Arc::new(AtomicU64::new(0));
                let crc = Arc::new(AtomicU32::new(0));
                let mut raw = Counting {
                    inner: input.open()?,
                    count: counted.clone(),
                    crc: input.listed.crc32c.is_some().then(|| crc.clone()),
                };
                let at = |e: std::io::Error| Error::from(e).with_file(input.name());
                let records = match self.input_compression {
                    None => {
                        let head = crate::tfrecord::read_head(&mut raw).map_err(at)?;
                        let c =
                            Compression::detect(&crate::tfrecord::file_name(input.name()), &head);
                        let stream: Box<dyn Read + Send> = Box::new(Cursor::new(head).chain(raw));
                        self.read_stream(options, f, stream, c, &counted, emit)?
                    }
                    Some(c) => self.read_stream(options, f, Box::new(raw), c, &counted, emit)?,
                };
                (records, Some(crc.load(Ordering::Relaxed)))
            }
        };
        let crc = crc.map(|c| format!("{c:08x}"));
        match (&input.listed.crc32c, &input.listed.records) {
            (Some(listed), _) if Some(listed) != crc.as_ref() => Err(not_as_listed(format!(
                "CRC32C {}, the manifest says {listed}",
                crc.unwrap_or_default()
            ))),
            (_, Some(listed)) if *listed != records => Err(not_as_listed(format!(
                "{records} records, the manifest says {listed}"
            ))),
            _ => Ok(()),
        }
        .map_err(|e| e.with_file(input.name()))
    }

    /// With `--shuffle`, a local uncompressed file's map: its records are checked
    /// through it and the shuffle keeps their locations, not copies (the page cache
    /// holds the bytes already). `None` for any other file, read as a stream.
    fn mapped(
        &self,
        options: &ConvertOptions,
        input: &TfrecordInput,
    ) -> Result<Option<(MappedRecords, Arc<KeptMap>)>> {
        let (true, Some(path), None | Some(Compression::None)) = (
            options.shuffle.is_some(),
            input.blob.mappable(),
            self.input_compression,
        ) else {
            return Ok(None);
        };
        // A file that cannot be mapped is read as a stream (which names what is wrong).
        let Ok(walk) = MappedRecords::open(&path) else {
            return Ok(None);
        };
        let walk = walk.named(input.name());
        let Some(map) = walk.keep() else {
            return Ok(None);
        };
        let head = &map.bytes()[..map.bytes().len().min(frame::HEADER_LEN)];
        let compression = self.input_compression.unwrap_or_else(|| {
            Compression::detect(&crate::tfrecord::file_name(input.name()), head)
        });
        Ok((compression == Compression::None).then(|| (walk, Arc::new(map))))
    }

    /// Reads a mapped file: each record checked as [`Self::read_stream`] checks it
    /// (both CRCs, the payload as the record type says) and sent as its location.
    fn read_mapped(
        &self,
        options: &ConvertOptions,
        f: usize,
        mut walk: MappedRecords,
        map: &Arc<KeptMap>,
        emit: &mut Emit<'_, BatchMeta>,
    ) -> Result<u64> {
        let input = &self.files[f];
        let bytes = map.bytes();
        let mut check = RecordCheck::new(self, options, f);
        let (mut batch, mut meta) = (emit.buffer(), BatchMeta::new());
        let (mut starts, mut batch_bytes, mut reported, mut records) = (Vec::new(), 0, 0, 0);
        while let Some(r) = walk.next_record()? {
            let (start, end) = (r.offset as usize, r.range.end + FOOTER_LEN);
            if frame::masked_crc32c(&bytes[r.range.clone()]) != r.stored_crc {
                return Err(frame_error(
                    FrameProblem::DataCrc,
                    FrameDetail::DataCrc {
                        len: r.range.len() as u64,
                    },
                    Some(input.name()),
                    r.index,
                    r.offset,
                ));
            }
            check.record(&bytes[r.range], r.index, r.offset, &mut batch, &mut meta)?;
            starts.push(start);
            batch.sizes.push((end - start) as u64);
            batch_bytes += end - start;
            records += 1;
            if batch_bytes >= BATCH_BYTES {
                check.finish_into(&mut meta)?;
                meta.raw_bytes = (end - reported) as u64;
                reported = end;
                meta.mapped = Some((map.clone(), std::mem::take(&mut starts)));
                emit.send(batch, std::mem::replace(&mut meta, BatchMeta::new()))?;
                batch = emit.buffer();
                batch_bytes = 0;
                options.cancel.check()?;
            }
        }
        map.walked();
        check.finish_into(&mut meta)?;
        meta.raw_bytes = (bytes.len() - reported) as u64;
        meta.listed = check.listed.take().map(|spec| (spec, records));
        meta.mapped = Some((map.clone(), starts));
        emit.send(batch, meta)?;
        Ok(records)
    }

    fn read_stream(
        &self,
        options: &ConvertOptions,
        f: usize,
        stream: Box<dyn Read + Send>,
        compression: Compression,
        counted: &AtomicU64,
        emit: &mut Emit<'_, BatchMeta>,
    ) -> Result<u64> {
        let input = &self.files[f];
        let mut reader = RecordReader::new(crate::tfrecord::decompress(stream, compression))
            .with_path(input.name());
        if compression == Compression::None {
            reader = reader.with_total_len(input.bytes);
        }
        let mut check = RecordCheck::new(self, options, f);
        let mut reported = 0u64;
        let mut batch = emit.buffer();
        let mut meta = BatchMeta::new();
        loop {
            let (index, offset) = (reader.record_index(), reader.offset());
            let Some(framed) = reader.read_framed()? else {
                break;
            };
            let payload = &framed[frame::HEADER_LEN..framed.len() - FOOTER_LEN];
            check.record(payload, index, offset, &mut batch, &mut meta)?;
            // Checked framing is exactly the framing a writer gives this payload.
            batch.data.extend_from_slice(framed);
            batch.sizes.push(framed.len() as u64);
            if batch.data.len() >= BATCH_BYTES {
                check.finish_into(&mut meta)?;
                let now = counted.load(Ordering::Relaxed);
                meta.raw_bytes = now - reported;
                reported = now;
                emit.send(batch, std::mem::replace(&mut meta, BatchMeta::new()))?;
                batch = emit.buffer();
                options.cancel.check()?;
            }
        }
        check.finish_into(&mut meta)?;
        meta.raw_bytes = counted.load(Ordering::Relaxed) - reported;
        meta.listed = check
            .listed
            .take()
            .map(|spec| (spec, reader.record_index()));
        emit.send(batch, meta)?;
        Ok(reader.record_index())
    }
}

/// The checks and accounts of one file's records, read as a stream or through a map:
/// the type guard, the parse (or the Example scan) for the spec, the split key.
struct RecordCheck<'a> {
    name: &'a Path,
    record_type: RecordType,
    guessed: bool,
    /// Each payload parsed (no manifest gives the file's spec), or only scanned.
    parsing: bool,
    scan: bool,
    scanned: ExampleScan,
    key: Option<&'a str>,
    /// Splits without a key: the file's index and the seed, for each record's (file,
    /// position) hash.
    position: Option<(u64, u64)>,
    /// The spec of the manifest listing the file, when that stands for parsing it.
    listed: Option<Arc<Vec<FeatureSpec>>>,
}

impl<'a> RecordCheck<'a> {
    fn new(source: &'a TfrecordSource, options: &'a ConvertOptions, f: usize) -> Self {
        let input = &source.files[f];
        let key = options.encode.split_key.as_deref();
        // Examples without a key to hash are counted from their bytes, or not at all
        // when our manifest lists the file: its spec is what `schema` gives for it, and
        // the file's CRC32C is checked against the manifest at its end.
        let examples = source.record_type == RecordType::Example && key.is_none();
        let listed = input.listed.spec.clone().filter(|_| examples);
        let scan = examples && listed.is_none();
        RecordCheck {
            name: input.name(),
            record_type: source.record_type,
            guessed: source.guessed,
            parsing: source.record_type != RecordType::Bytes && listed.is_none(),
            scan,
            scanned: ExampleScan::new(),
            key,
            position: (options.splits.is_some() && key.is_none())
                .then_some((f as u64, options.seed)),
            listed,
        }
    }

    /// Checks one record's payload and adds it to the batch's account (and its key
    /// hash to the batch).
    fn record(
        &mut self,
        payload: &[u8],
        index: u64,
        offset: u64,
        batch: &mut EncodedBatch,
        meta: &mut BatchMeta,
    ) -> Result<()> {
        let located = |e: Error| {
            e.with_file(self.name)
                .with_record(index)
                .with_offset(offset)
        };
        // (`guessed` is only ever Example.)
        if self.guessed && has_feature_lists(payload) {
            return Err(located(Error::new(ErrorKind::SequenceExampleAsExample)));
        }
        let parsed = self.parsing
            && (!self.scan || self.scanned.add(payload).map_err(located)? == Scanned::Unusual);
        if parsed {
            let record = parse(payload, self.record_type).map_err(located)?;
            meta.spec.add(&record).map_err(located)?;
            if let Some(name) = self.key {
                let (hash, seen) = key_hash(&record, name).map_err(located)?;
                meta.key_seen |= seen;
                batch.keys.push(hash);
            }
        }
        if let Some((file, seed)) = self.position {
            batch.keys.push(file_position_hash(file, index, seed));
        }
        meta.records += 1;
        Ok(())
    }

    /// Adds what the Example scan saw since the last batch to the batch's spec.
    fn finish_into(&mut self, meta: &mut BatchMeta) -> Result<()> {
        std::mem::take(&mut self.scanned)
            .finish_into(&mut meta.spec)
            .map_err(|e| e.with_file(self.name))
    }
}

impl Pass {
    /// The spec: inferred from the records parsed, with the specs of the manifests
    /// that list the files not parsed. Files of one manifest alone: its spec as it is
    /// (with its Arrow types).
    ///
    /// # Errors
    ///
    /// A feature of two kinds in two of them.
    fn features(&self) -> Result<Vec<FeatureSpec>> {
        if let Some((first, _)) = self.listed.first() {
            let one = self.listed.iter().all(|(s, _)| Arc::ptr_eq(s, first));
            if one && self.spec.records() == 0 {
                return Ok(first.to_vec());
            }
        }
        let mut all = self.spec.clone();
        for (spec, records) in &self.listed {
            all.absorb_spec(*records, spec)?;
        }
        Ok(all.finish())
    }
}

impl BatchMeta {
    fn new() -> BatchMeta {
        BatchMeta {
            records: 0,
            raw_bytes: 0,
            spec: SpecInference::new(),
            key_seen: false,
            listed: None,
            mapped: None,
        }
    }
}

/// Counts the bytes read through it (the progress bar's bytes of the file on disk)
/// and, for a file a manifest lists, their CRC32C.
struct Counting {
    inner: Box<dyn Read + Send>,
    count: Arc<AtomicU64>,
    crc: Option<Arc<AtomicU32>>,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        if let Some(crc) = &self.crc {
            let now = frame::crc32c_append(crc.load(Ordering::Relaxed), &buf[..n]);
            crc.store(now, Ordering::Relaxed);
        }
        Ok(n)
    }
}

fn not_as_listed(detail: String) -> Error {
    Error::new(ErrorKind::NotAsListed { detail })
}

/// Whether a payload has a top-level length-delimited field 2: a SequenceExample's
/// `feature_lists` (an Example has field 1 only). Malformed bytes say no: parsing them
/// reports the error.
fn has_feature_lists(payload: &[u8]) -> bool {
    let mut found = false;
    let _ = crate::example::wire::fields(payload, |field, wire, _| {
        found |= field == 2 && wire == 2;
        Ok(())
    });
    found
}

/// Parses a payload as the records are read.
fn parse(payload: &[u8], record_type: RecordType) -> Result<Record> {
    let result = match record_type {
        RecordType::SequenceExample => {
            SequenceExample::decode(payload).map(Record::SequenceExample)
        }
        _ => Example::decode(payload).map(Record::Example),
    };
    result.map_err(|source| {
        Error::new(ErrorKind::PayloadNotRecord {
            message: record_type.message_name(),
            source,
        })
    })
}

/// The split hash of a record's key feature, as `convert parquet --split-key` hashes
/// the column the feature came from: an int64 by its value, a float by the bits of its
/// float64 widening, bytes by themselves, no value as null. And whether it was there.
fn key_hash(record: &Record, name: &str) -> Result<(u64, bool)> {
    let features = match record {
        Record::Example(e) => e.features.as_ref(),
        Record::SequenceExample(s) => s.context.as_ref(),
        Record::Bytes(_) => None,
    };
    let Some(feature) = features.and_then(|f| f.feature.get(name)) else {
        return Ok((stable_hash(0, &[]), false));
    };
    let values = feature_values(feature);
    if values > 1 {
        return Err(Error::new(ErrorKind::SplitKeyNotScalar { values }).with_column(name));
    }
    let hash = match &feature.kind {
        _ if values == 0 => stable_hash(0, &[]),
        Some(proto::Kind::Int64List(l)) => stable_hash(1, &l.value[0].to_le_bytes()),
        Some(proto::Kind::FloatList(l)) => {
            stable_hash(2, &f64::from(l.value[0]).to_bits().to_le_bytes())
        }
        Some(proto::Kind::BytesList(l)) => stable_hash(3, &l.value[0]),
        None => stable_hash(0, &[]),
    };
    Ok((hash, true))
}

fn feature_values(feature: &Feature) -> u64 {
    match &feature.kind {
        Some(proto::Kind::Int64List(l)) => l.value.len() as u64,
        Some(proto::Kind::FloatList(l)) => l.value.len() as u64,
        Some(proto::Kind::BytesList(l)) => l.value.len() as u64,
        None => 0,
    }
}

/// Writes the files' batches in order, keeping the pass's account.
struct PassWriter<'a, 'r> {
    pass: &'a mut Pass,
    units: &'a [usize],
    files: &'a [TfrecordInput],
    router: &'a mut Router<'r>,
    options: &'a ConvertOptions,
    progress: &'a dyn Progress,
}

impl InOrder<BatchMeta> for PassWriter<'_, '_> {
    fn write(&mut self, u: usize, batch: &EncodedBatch, meta: BatchMeta) -> Result<()> {
        let f = self.units[u];
        self.router.origin(f as u32, self.pass.records_per_input[f]);
        match &meta.mapped {
            Some((map, starts)) => {
                for (i, (&start, &size)) in starts.iter().zip(&batch.sizes).enumerate() {
                    let key = batch.keys.get(i).copied();
                    self.router
                        .put_mapped(map, start..start + size as usize, key)?;
                }
            }
            None => self.router.put_batch(batch)?,
        }
        self.pass.records_per_input[f] += meta.records;
        self.pass.key_seen |= meta.key_seen;
        self.pass.listed.extend(meta.listed);
        self.pass
            .spec
            .merge(meta.spec)
            .map_err(|e| e.with_file(self.files[f].name()))?;
        self.progress
            .advance(meta.raw_bytes, self.router.bytes_written());
        self.options.cancel.check()
    }

    fn unit_done(&mut self, _: usize) {}
}

impl Open for TfrecordOptions {
    fn open(&self, options: &ConvertOptions) -> Result<Box<dyn Source + '_>> {
        Ok(Box::new(TfrecordSource::open(options, self)?))
    }
}

impl Source for TfrecordSource {
    fn total_units(&self) -> u64 {
        self.units.iter().map(|&f| self.files[f].bytes).sum()
    }

    fn estimated_bytes(&self) -> u64 {
        // Compressed inputs hold a few times their size in records.
        self.units
            .iter()
            .map(|&f| {
                let file = &self.files[f];
                match self.input_compression {
                    Some(Compression::None) => file.bytes,
                    _ if file.display.ends_with(".tfrecord") => file.bytes,
                    _ => file.bytes * 3,
                }
            })
            .sum()
    }

    fn produce(
        &mut self,
        options: &ConvertOptions,
        router: &mut Router,
        progress: &dyn Progress,
    ) -> Result<()> {
        let mut pass = Pass {
            records_per_input: vec![0; self.files.len()],
            ..Pass::default()
        };
        let mut writer = PassWriter {
            pass: &mut pass,
            units: &self.units,
            files: &self.files,
            router,
            options,
            progress,
        };
        // A file's reader holds its block buffer (and, compressed, the inflater's).
        let held = crate::tfrecord::reader::BLOCK_BYTES as u64 * 2;
        ordered::run(
            options.threads,
            ordered::queued_bytes(options.compression),
            &self.units,
            |_| held,
            |&f, emit: &mut Emit<'_, BatchMeta>| self.read_file(options, f, emit),
            &mut writer,
        )?;
        if let Some(name) = &options.encode.split_key {
            if !pass.key_seen && pass.spec.records() > 0 {
                return Err(Error::new(ErrorKind::UnknownColumn {
                    name: name.clone(),
                    available: pass.spec.finish().into_iter().map(|f| f.name).collect(),
                }));
            }
        }
        pass.features = pass.features()?;
        self.pass = Some(pass);
        Ok(())
    }

    fn manifest(&self, options: &ConvertOptions, _records: u64) -> Manifest {
        let records = self.pass.as_ref().map(|p| p.records_per_input.as_slice());
        let inputs = self
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| InputInfo {
                path: f.display.clone(),
                bytes: f.bytes,
                rows: records.and_then(|r| r.get(i).copied()).unwrap_or(0),
                etag: f.etag(),
                identity: f.blob.object().identity.clone(),
            })
            .collect();
        let features = match (&self.pass, self.record_type) {
            (Some(pass), RecordType::Example | RecordType::SequenceExample) => {
                pass.features.clone()
            }
            _ => Vec::new(),
        };
        let mut m = options.new_manifest(self.record_type, inputs, features);
        // Payloads are copied: no column is selected, dropped or renamed.
        for key in ["columns", "exclude", "rename"] {
            m.options.remove(key);
        }
        m.options
            .insert("record_type".into(), json!(self.record_type.name()));
        let input_compression = self.input_compression.map_or("auto", Compression::name);
        m.options
            .insert("input_compression".into(), json!(input_compression));
        m
    }

    fn worker_range(&self) -> Option<[u64; 2]> {
        self.range
    }

    /// A file's records are known once it is read: an append reads a file whole or not
    /// at all.
    fn now_inputs(&self) -> Option<Vec<super::append::NowInput>> {
        Some(
            (self.files.iter())
                .map(|f| super::append::NowInput {
                    name: f.display.clone(),
                    bytes: f.bytes,
                    etag: f.etag(),
                    records: None,
                    identity: f.blob.object().identity.clone(),
                    delete_files: Vec::new(),
                    growth: None,
                })
                .collect(),
        )
    }

    fn select(&mut self, reads: &[Vec<[u64; 2]>], _base: &Manifest) -> Result<()> {
        let read: Vec<usize> = (0..self.files.len())
            .filter(|&f| !reads[f].is_empty())
            .collect();
        // Workers share the files the append reads.
        (self.units, self.range) = share_files(&self.files, read, self.worker);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::proto::{BytesList, FloatList, Int64List, Kind};

    fn example(name: &str, kind: Kind) -> Record {
        let mut e = Example::default();
        e.features
            .get_or_insert_with(Default::default)
            .feature
            .insert(name.into(), Feature { kind: Some(kind) });
        Record::Example(e)
    }

    /// The key hashes are the ones `convert parquet --split-key` gives the column's
    /// values, so a table and its TFRecords split alike.
    #[test]
    fn a_key_feature_hashes_as_its_column_value_does() {
        let int = example("id", Kind::Int64List(Int64List { value: vec![-7] }));
        assert_eq!(
            key_hash(&int, "id").unwrap(),
            (stable_hash(1, &(-7i64).to_le_bytes()), true)
        );
        let float = example("x", Kind::FloatList(FloatList { value: vec![0.5] }));
        assert_eq!(
            key_hash(&float, "x").unwrap().0,
            stable_hash(2, &0.5f64.to_bits().to_le_bytes())
        );
        let bytes = example(
            "k",
            Kind::BytesList(BytesList {
                value: vec![b"ab".to_vec()],
            }),
        );
        assert_eq!(key_hash(&bytes, "k").unwrap().0, stable_hash(3, b"ab"));
        assert_eq!(
            key_hash(&bytes, "other").unwrap(),
            (stable_hash(0, &[]), false)
        );
        let empty = example("k", Kind::BytesList(BytesList { value: vec![] }));
        assert_eq!(key_hash(&empty, "k").unwrap(), (stable_hash(0, &[]), true));
        let two = example("id", Kind::Int64List(Int64List { value: vec![1, 2] }));
        assert!(key_hash(&two, "id").is_err());
    }
}
