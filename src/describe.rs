//! Describing data: the statistics of a set (those its conversion kept, `--stats`) or of
//! any TFRecord files (computed, files in parallel), and a baseline's, for `tfshard stats`,
//! `verify --baseline` and Python. The counting itself is [`crate::stats`]'s.

use std::path::PathBuf;

use prost::Message;
use rayon::prelude::*;

use crate::dataset::Dataset;
use crate::error::{Error, ErrorKind, Result};
use crate::example::decode_record;
use crate::example::RecordType;
use crate::progress::Progress;
use crate::records::{for_each_payload, ReadSettings};
use crate::stats::{proto, Partial};
use crate::store::IoOptions;
use crate::tfrecord::Compression;

/// Computes statistics of every record of a set or of TFRecord files:
/// `StatsReader::builder(paths)`, options, `build()`, `run()`.
pub struct StatsReader {
    dataset: Dataset,
    compression: Option<Compression>,
    record_type: RecordType,
    /// Only this generation's shards (`--generation`).
    generation: Option<u32>,
}

impl StatsReader {
    /// One generation's statistics from its shards' partials (`{shard}.stats`), merged
    /// in shard order; [`Stored::None`] (computed then) when a shard has none.
    fn generation_partials(&self, manifest_path: &std::path::Path) -> Result<Stored> {
        let mut all = Partial::new();
        for shard in &self.dataset.shards {
            let mut name = shard.clone().into_os_string();
            name.push(".stats");
            let path = PathBuf::from(name);
            let Ok(bytes) = crate::store::paths::read(&path, self.dataset.io) else {
                return Ok(Stored::None);
            };
            let partial = Partial::from_bytes(&bytes).map_err(|e| e.with_file(&path))?;
            all.merge(partial).map_err(|e| e.with_file(&path))?;
        }
        Ok(Stored::Found(all.to_proto(), manifest_path.to_path_buf()))
    }
}

/// A baseline's statistics (`verify --baseline`): a set (a folder or manifest: its
/// stored statistics, else computed from its shards), TFRecord files (computed), or a
/// statistics file, ours or TFDV's: a `DatasetFeatureStatisticsList`, binary, alone or as
/// the first record of a TFRecord file.
///
/// # Errors
///
/// The path cannot be read, or holds no statistics.
pub fn baseline(path: &std::path::Path, io: IoOptions) -> Result<proto::DatasetFeatureStatistics> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let is_set = crate::store::paths::is_dir(path, io)?
        || crate::manifest::is_manifest_name(&name)
        || crate::dataset::is_shard_file_name(&name);
    if is_set {
        let reader = StatsReader::builder(vec![path.to_path_buf()])
            .with_io(io)
            .build()?;
        return statistics(&reader, &crate::progress::NoProgress, &mut |_| {});
    }
    let bytes = crate::store::paths::read(path, io)?;
    let damaged = |why: &str| {
        Error::new(ErrorKind::StatsDamaged(format!(
            "not a DatasetFeatureStatisticsList: {why}"
        )))
        .with_file(path)
    };
    // Framed as a TFRecord (TFDV's `write_stats_output`): its first record.
    let framed = bytes.len() >= crate::tfrecord::frame::HEADER_LEN
        && crate::tfrecord::frame::decode_header(
            bytes[..crate::tfrecord::frame::HEADER_LEN]
                .try_into()
                .expect("a header's length"),
        )
        .is_ok_and(|len| {
            (len as usize).saturating_add(crate::tfrecord::frame::HEADER_LEN + 4) <= bytes.len()
        });
    let payload = if framed {
        let len = crate::tfrecord::frame::decode_header(
            bytes[..crate::tfrecord::frame::HEADER_LEN]
                .try_into()
                .expect("a header's length"),
        )
        .unwrap_or(0) as usize;
        &bytes[crate::tfrecord::frame::HEADER_LEN..crate::tfrecord::frame::HEADER_LEN + len]
    } else {
        &bytes[..]
    };
    let list = proto::DatasetFeatureStatisticsList::decode(payload)
        .map_err(|e| damaged(&e.to_string()))?;
    list.datasets
        .into_iter()
        .next()
        .ok_or_else(|| damaged("no dataset"))
}

/// The statistics of the reader's paths: those a set's conversion stored when the paths
/// name one set that keeps them (whole), else computed (`progress` counts bytes read).
/// `on_mismatch` hears of a stored file that is not the manifest's (then computed).
///
/// # Errors
///
/// A stored file that cannot be read; a corrupt record; a feature of two kinds.
pub fn statistics(
    reader: &StatsReader,
    progress: &dyn Progress,
    on_mismatch: &mut dyn FnMut(&std::path::Path),
) -> Result<proto::DatasetFeatureStatistics> {
    match reader.stored()? {
        Stored::Found(stats, _) => Ok(stats),
        other => {
            if let Stored::NotTheManifests(path) = other {
                on_mismatch(&path);
            }
            Ok(reader.run(progress)?.to_proto())
        }
    }
}

/// What [`StatsReader::stored`] found.
#[derive(Debug)]
pub enum Stored {
    /// The set's statistics, and the file they came from.
    Found(proto::DatasetFeatureStatistics, PathBuf),
    /// None stored (not one set, or converted without `--stats`).
    None,
    /// A file that is not the one the manifest names (its size or SHA-256 differs: a
    /// writer interrupted between the two): compute the statistics instead.
    NotTheManifests(PathBuf),
}

/// Builds a [`StatsReader`].
pub struct StatsReaderBuilder {
    paths: Vec<PathBuf>,
    reading: crate::records::Reading,
    generation: Option<u32>,
}

impl StatsReader {
    /// Statistics of the records of `paths`: shards, folders of shards, or manifests.
    pub fn builder(paths: Vec<PathBuf>) -> StatsReaderBuilder {
        StatsReaderBuilder {
            paths,
            reading: crate::records::Reading::default(),
            generation: None,
        }
    }

    /// The files it reads, in order.
    pub fn files(&self) -> &[PathBuf] {
        &self.dataset.shards
    }

    /// The statistics a set's conversion stored (`{prefix}.stats.pb`), when the paths
    /// name exactly one set and its manifest names them.
    ///
    /// # Errors
    ///
    /// The file cannot be read.
    pub fn stored(&self) -> Result<Stored> {
        let [(manifest_path, manifest)] = self.dataset.manifests.as_slice() else {
            return Ok(Stored::None);
        };
        if self.generation.is_some() {
            return self.generation_partials(manifest_path);
        }
        let Some(info) = &manifest.stats else {
            return Ok(Stored::None);
        };
        let dir = manifest_path.parent().unwrap_or(std::path::Path::new("."));
        let path = dir.join(&info.file);
        if path.parent() != Some(dir) {
            return Ok(Stored::None);
        }
        let bytes = crate::store::paths::read(&path, self.dataset.io)?;
        use sha2::Digest;
        let sha = format!("{:x}", sha2::Sha256::digest(&bytes));
        if bytes.len() as u64 != info.bytes || sha != info.sha256 {
            return Ok(Stored::NotTheManifests(path));
        }
        let list = proto::DatasetFeatureStatisticsList::decode(bytes.as_slice())
            .map_err(|e| Error::new(ErrorKind::StatsDamaged(e.to_string())).with_file(&path))?;
        match list.datasets.into_iter().next() {
            Some(stats) => Ok(Stored::Found(stats, path)),
            None => Err(Error::new(ErrorKind::StatsDamaged("no dataset".into())).with_file(&path)),
        }
    }

    /// Reads every record, files in parallel, and merges their statistics in file order
    /// (the same statistics whatever the threads). `progress` counts bytes read.
    ///
    /// # Errors
    ///
    /// A corrupt record (naming file, record and offset), or a feature of two kinds.
    pub fn run(&self, progress: &dyn Progress) -> Result<Partial> {
        let io = self.dataset.io;
        progress.set_total(
            (self.dataset.shards.iter())
                .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
                .sum(),
        );
        // Files a few at a time per thread, merged in file order as each group ends:
        // memory holds a group's partials, not every file's.
        let group = rayon::current_num_threads().max(1) * 2;
        let mut all = Partial::new();
        for files in self.dataset.shards.chunks(group) {
            let parts: Vec<Partial> = files
                .par_iter()
                .map(|path| {
                    let mut partial = Partial::new();
                    let record_type = self.record_type;
                    for_each_payload(path, self.compression, io, |bytes, index, offset| {
                        let at =
                            |e: Error| e.with_file(path).with_record(index).with_offset(offset);
                        let before = partial.undecodable();
                        partial.add_payload(bytes, record_type).map_err(at)?;
                        if partial.undecodable() > before {
                            // Not a record of its type: the decoder's error, as `verify`'s.
                            decode_record(bytes, record_type).map_err(at)?;
                        }
                        Ok(true)
                    })?;
                    progress.advance(std::fs::metadata(path).map_or(0, |m| m.len()), 0);
                    Ok(partial)
                })
                .collect::<Result<_>>()?;
            for (part, path) in parts.into_iter().zip(files) {
                all.merge(part).map_err(|e| e.with_file(path))?;
            }
        }
        Ok(all)
    }
}

crate::records::read_settings!(StatsReaderBuilder);

impl StatsReaderBuilder {
    crate::records::reading_setters!();

    /// Finds the files.
    ///
    /// # Errors
    ///
    /// No path; a path that does not exist, a folder with no manifest and no shard, a
    /// manifest that cannot be read.
    pub fn build(self) -> Result<StatsReader> {
        if self.paths.is_empty() {
            return Err(Error::invalid_option("paths", "give a path"));
        }
        let (mut dataset, record_type) = self.reading.discover(&self.paths)?;
        if let Some(g) = self.generation {
            dataset.only_generations(&[g])?;
        }
        Ok(StatsReader {
            dataset,
            compression: self.reading.compression,
            record_type,
            generation: self.generation,
        })
    }

    /// Only the shards of generation `g` of the set (`stats --generation`): merged from
    /// their partials when they kept them, else computed from them.
    pub fn with_generation(mut self, g: Option<u32>) -> Self {
        self.generation = g;
        self
    }
}
