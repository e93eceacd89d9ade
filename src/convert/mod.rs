//! Conversion: a source's records → routed into splits (and shuffled) → size-targeted
//! shards → one commit with a manifest per output. The only module that wires source,
//! encoder, shard writer and manifest together.
//!
//! [`Converter`] is the front door: `Converter::parquet(inputs)`,
//! `Converter::delta(table)`, `Converter::images(dir)` or `Converter::tfrecord(inputs)`,
//! then `.output(dir)` and options, then `build()` (which checks every rule about the
//! options, so a run fails only on its data), then `run(&progress)`. Each source lives
//! in one file behind the `Source` trait (`parquet` for Parquet and Delta, `images`,
//! `tfrecord`); `ordered` runs the units of a file source in parallel and writes them
//! in order; `route` holds splits, `--shuffle` and `--min-shards`. A run owns a thread
//! pool of its `threads` and stops when its [`CancelToken`](crate::CancelToken) is cancelled.
//!
//! ```
//! use tfshard::convert::Converter;
//! let out = std::env::temp_dir().join(format!("tfshard-doc-convert-{}", std::process::id()));
//! let summary = Converter::parquet(vec!["testdata/small.parquet".into()])
//!     .with_output(&out)
//!     .with_target_shard_bytes(100_000)
//!     .with_overwrite(true)
//!     .build()?
//!     .run(&tfshard::progress::NoProgress)?;
//! assert_eq!(summary.records, 2000);
//! # std::fs::remove_dir_all(&out).unwrap();
//! # Ok::<(), tfshard::Error>(())
//! ```

pub(crate) mod append;
#[cfg(test)]
mod append_model;
mod arrow;
mod builder;
pub(crate) mod images;
mod options;
mod ordered;
pub(crate) mod parquet;
pub(crate) mod route;
pub(crate) mod table;
pub(crate) mod tfrecord;

use std::path::PathBuf;
use std::time::Instant;

use serde_json::json;

use crate::error::{Error, ErrorKind, Result};
use crate::lifecycle::{Generation, SetClaim};
use crate::manifest::{self, InputInfo, Manifest, ShardInfo, ShardSource};
use crate::progress::Progress;
use crate::shard::{name, OutputDir, SourceRows};
pub use crate::source::hive::Partitioning;
use crate::store;
use crate::store::destination::{
    ClosedShard, Destination, Publication, StagePlan, StagedOutput, Staging,
};
use std::sync::Arc;

pub use crate::manifest::{rfc3339_ms, TableInfo};
pub use crate::shard::name::DEFAULT_PREFIX;
pub use crate::source::delta::{DeltaOptions, DeltaTable};
pub use crate::source::iceberg::{IcebergOptions, IcebergTable};
pub use crate::source::images::{Labels, OnError};
pub use crate::source::parquet::BATCH_ROWS as PARQUET_BATCH_ROWS;
pub use append::AppendSummary;
pub use arrow::ArrowStream;
pub use builder::{Converter, ConverterBuilder};
pub use images::ImageOptions;
pub use options::{
    ConvertOptions, ParquetDecoder, ShuffleOptions, WorkerShare, DEFAULT_SHUFFLE_MEMORY,
    DEFAULT_TARGET_BYTES,
};
pub use tfrecord::TfrecordOptions;

/// A shard's sources as the manifest lists them: each input by its name.
fn shard_sources(inputs: &[InputInfo], sources: &[SourceRows]) -> Vec<ShardSource> {
    sources
        .iter()
        .filter_map(|s| {
            // Every source numbers its inputs as its manifest lists them.
            let input = inputs.get(s.input as usize);
            debug_assert!(
                input.is_some(),
                "input {} of {} listed",
                s.input,
                inputs.len()
            );
            input.map(|i| ShardSource::new(i.path.clone(), s.rows))
        })
        .collect()
}

/// What a conversion produced; the `convert --json` keys.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConvertSummary {
    /// The output folder.
    pub output: PathBuf,
    /// The manifest written (`None` with splits: see `splits`).
    pub manifest: Option<PathBuf>,
    /// Records written.
    pub records: u64,
    /// Shards written.
    pub shards: u64,
    /// Bytes on disk of all shards.
    pub bytes: u64,
    /// Wall time.
    pub seconds: f64,
    /// Image files left out (`--on-error skip`).
    pub skipped: u64,
    /// With `--resume`: the shards (and their bytes) an earlier run had finished, reused
    /// as they were; `None` without `--resume`.
    pub reused: Option<Reused>,
    /// With `--split`: each split's own summary, in the order given.
    pub splits: Vec<SplitSummary>,
    /// `convert delta` and `convert iceberg`: the snapshot read.
    pub table: Option<TableInfo>,
    /// With `--append`: whether it was up to date, the generation, the shards retired.
    pub append: Option<AppendSummary>,
}

impl ConvertSummary {
    /// The summary as `convert --json` prints it (and the Python module returns it):
    /// `output`, `manifest`, `records`, `shards`, `bytes`, `seconds`, `skipped`, and
    /// where they apply `table`, `reused` and `splits`.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        let mut value = json!({
            "output": self.output,
            "manifest": self.manifest,
            "records": self.records,
            "shards": self.shards,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "skipped": self.skipped,
        });
        if let Some(t) = &self.table {
            value["table"] = json!(t);
        }
        if let Some(a) = &self.append {
            value["up_to_date"] = json!(a.up_to_date);
            value["generation"] = json!(a.generation);
            value["retired"] = json!(a.retired);
            if let Some(why) = &a.reconverted {
                value["reconverted"] = json!(why);
            }
        }
        if let Some(r) = self.reused {
            value["reused"] =
                json!({"shards": r.shards, "bytes": r.bytes, "unread_records": r.unread_records});
        }
        if !self.splits.is_empty() {
            let splits: serde_json::Map<String, serde_json::Value> = self
                .splits
                .iter()
                .map(|s| {
                    let v = json!({"manifest": s.manifest, "records": s.records, "shards": s.shards, "bytes": s.bytes});
                    (s.name.clone(), v)
                })
                .collect();
            value["splits"] = serde_json::Value::Object(splits);
        }
        value
    }
}

/// What a `--resume` run reused of the run it continues (`convert --json` `reused`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reused {
    /// Shards reused.
    pub shards: u64,
    /// Their bytes on disk.
    pub bytes: u64,
    /// Of their records, those the rerun did not read again (it restarted its input
    /// from a checkpoint; the rest it read and dropped).
    pub unread_records: u64,
}

/// One split's output; the `convert --json` `splits` values.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SplitSummary {
    /// The split name (its prefix).
    pub name: String,
    /// Its manifest.
    pub manifest: PathBuf,
    /// Records in it.
    pub records: u64,
    /// Its shards.
    pub shards: u64,
    /// Bytes on disk.
    pub bytes: u64,
}

/// Where records come from. A third source is one new file implementing this.
pub(crate) trait Source: Send {
    /// Progress units in all (rows, files).
    fn total_units(&self) -> u64;
    /// A guess at the framed records' bytes (the shuffle sizes its buffers by it).
    fn estimated_bytes(&self) -> u64;
    /// The records `produce` will give in all, when known before it runs (the shard
    /// writer then guesses which shard is the last: see [`crate::store::destination::LastGuess`]).
    fn expected_records(&self) -> Option<u64> {
        None
    }
    /// Feeds every record to `router`, framed, in input order. Called a second time
    /// when `--min-shards` cuts small outputs evenly; it must feed the same records.
    fn produce(
        &mut self,
        options: &ConvertOptions,
        router: &mut route::Router,
        progress: &dyn Progress,
    ) -> Result<()>;
    /// The manifest of one output holding `records` records, from what `produce` saw.
    fn manifest(&self, options: &ConvertOptions, records: u64) -> Manifest;
    /// For a worker: the row groups it converts, `[first, end)` in the run's order.
    fn worker_range(&self) -> Option<[u64; 2]> {
        None
    }
    /// Inputs left out (images with `--on-error skip`).
    fn skipped(&self) -> u64 {
        0
    }
    /// `--resume`: restarts from a checkpoint a reused shard carries, if this source
    /// made it and it fits; returns the records the source will not produce again (the
    /// router and writer take the rest from there), or 0.
    fn restart_from(&mut self, _checkpoint: &serde_json::Value) -> u64 {
        0
    }
    /// `--append`: the inputs as they are now, to compare with the manifest's; `None`
    /// where this source cannot append.
    fn now_inputs(&self) -> Option<Vec<append::NowInput>> {
        None
    }
    /// `--append`: reads only the records `reads[i]` of input `i` (see
    /// [`append::Plan::reads`]) from now on (a worker: its share of them), onto the set
    /// `base` (whose `skipped` an image folder carries on for the images not read again).
    ///
    /// # Errors
    ///
    /// As cutting a worker's share when the source was opened.
    fn select(&mut self, _reads: &[Vec<[u64; 2]>], _base: &Manifest) -> Result<()> {
        Ok(())
    }
}

/// How a source is opened: one implementation per kind of input (in its
/// `convert/NAME.rs`), chosen when the builder is built (the builder's `Input` is the
/// registration of the kinds). A new kind of input implements this and [`Source`].
pub(crate) trait Open: Send + Sync + std::fmt::Debug {
    /// Opens the inputs and checks the whole plan before anything is written.
    ///
    /// # Errors
    ///
    /// A missing or unreadable input, a column that cannot be encoded, and the like.
    fn open(&self, options: &ConvertOptions) -> Result<Box<dyn Source + '_>>;

    /// `--resume`: the source opened again at what the journal's `header` says the
    /// interrupted run read, where that differs from `opened` (a table's snapshot,
    /// committed to since, when the run named none); `None` to go on with `opened`.
    ///
    /// # Errors
    ///
    /// Those of opening the source.
    fn reopen_at(
        &self,
        _options: &ConvertOptions,
        _header: &serde_json::Value,
        _opened: &dyn Source,
    ) -> Result<Option<Box<dyn Source + '_>>> {
        Ok(None)
    }
}

/// Runs a conversion of `opener`'s source: plans it (an append: against the set there),
/// writes every record into shards, then publishes every output with its manifest.
fn run(
    options: &ConvertOptions,
    opener: &dyn Open,
    progress: &dyn Progress,
) -> Result<ConvertSummary> {
    let started = Instant::now();
    let mut job = match Job::plan(options, opener)? {
        Planned::UpToDate(summary) => {
            return Ok(ConvertSummary {
                seconds: started.elapsed().as_secs_f64(),
                ..*summary
            })
        }
        Planned::Write(job) => job,
    };
    let written = job.write(progress)?;
    job.publish(written, started)
}

/// A planned conversion: its source, where it writes (the destination and a prefix per
/// output), and what it publishes: an append's next generation of the sets there (its
/// plan beside it), or a plain run's claim on the sets it replaces.
struct Job<'a> {
    options: &'a ConvertOptions,
    opener: &'a dyn Open,
    source: Box<dyn Source + 'a>,
    destination: Arc<dyn Destination>,
    prefixes: Vec<String>,
    next: Option<(Generation, append::Plan)>,
    claim: Option<SetClaim>,
}

/// What [`Job::plan`] found.
enum Planned<'a> {
    /// An append that found nothing new: its summary, nothing written.
    UpToDate(Box<ConvertSummary>),
    /// Shards to write.
    Write(Box<Job<'a>>),
}

/// The shards a job wrote, still staged.
struct Written {
    staging: Box<dyn Staging>,
    outs: Vec<OutputDir>,
    shards: Vec<Vec<ClosedShard>>,
    reused: Option<Reused>,
}

impl<'a> Job<'a> {
    /// Opens the source and plans the run: `--append` onto a published set is claimed,
    /// planned, and only what changed read (its workers claim nothing: their `finalize`
    /// does); `--overwrite` claims the sets it replaces, so that it never publishes
    /// under a live append; a worker's part of a new set needs an output without one.
    ///
    /// # Errors
    ///
    /// The source's; names TFDS cannot nest; another writer holds a claim; an input that
    /// cannot append; the append's own rules ([`append::plan_generation`]).
    fn plan(options: &'a ConvertOptions, opener: &'a dyn Open) -> Result<Planned<'a>> {
        let source = opener.open(options)?;
        crate::failpoint::hit("convert:planned")?;
        let prefixes = options.prefixes();
        if options.tfds.is_some() {
            // Names TFDS cannot nest fail before anything is written.
            crate::tfds::check_features(&source.manifest(options, 0).features)?;
        }
        let destination = store::destination_of(&options.output, options.io)?;
        let lone = options.worker.is_none();
        let mut job = Job {
            options,
            opener,
            source,
            destination,
            prefixes,
            next: None,
            claim: None,
        };
        if !options.append {
            job.claim = (options.overwrite && lone)
                .then(|| SetClaim::take(&job.destination, &job.prefixes))
                .transpose()?;
            if !lone && job.holds_a_set()? {
                return Err(Error::new(ErrorKind::OutputExists).with_file(&options.output));
            }
            return Ok(Planned::Write(Box::new(job)));
        }
        let Some(mut next) =
            Generation::open(&job.destination, &job.prefixes, lone, options.retain)?
        else {
            return Ok(Planned::Write(Box::new(job)));
        };
        let Some(now) = job.source.now_inputs() else {
            return Err(Error::invalid_option(
                "append",
                "not for this input: it applies to Parquet and TFRecord files, image folders and Delta or \
                 Iceberg tables; convert again with --overwrite",
            ));
        };
        let described = job.source.manifest(options, 0);
        let plan = append::plan_generation(&mut next, &described, now, options.shuffle.is_some())?;
        if plan.is_empty() {
            if lone {
                next.finish_last(&*job.destination, options.retain)?;
            }
            let table = next.base[0].table.clone();
            return Ok(Planned::UpToDate(Box::new(ConvertSummary {
                output: options.output.clone(),
                manifest: (options.splits.is_none()).then(|| {
                    job.destination
                        .display(&name::manifest_name(&job.prefixes[0]))
                }),
                records: 0,
                shards: 0,
                bytes: 0,
                seconds: 0.0,
                skipped: 0,
                reused: None,
                splits: Vec::new(),
                table,
                append: Some(append::summary(&next, &plan)),
            })));
        }
        job.source.select(&plan.reads, &next.base[0])?;
        job.next = Some((next, plan));
        Ok(Planned::Write(Box::new(job)))
    }

    /// The names of the run's temporary and parts folders (a worker's part goes to a
    /// hidden folder that finalize reads).
    fn hidden(&self) -> Vec<String> {
        (self.prefixes.iter())
            .flat_map(|p| [name::tmp_dir_name(p), name::parts_dir_name(p)])
            .collect()
    }

    /// Whether the output holds anything but the run's hidden folders: a worker's part
    /// of a new set needs an output without a published set. (An append's workers add a
    /// generation to the set there: `finalize` checks that it is still the one they
    /// planned against.)
    fn holds_a_set(&self) -> Result<bool> {
        let hidden = self.hidden();
        Ok(self
            .destination
            .names("")?
            .iter()
            .any(|n| !hidden.contains(n)))
    }

    /// Stages the outputs, resumes what an earlier run finished (`--resume`), and routes
    /// every record into shards.
    ///
    /// # Errors
    ///
    /// The staging's (an output that is not empty); the resume's; the source's and the
    /// shard writers'.
    fn write(&mut self, progress: &dyn Progress) -> Result<Written> {
        let options = self.options;
        let mut staging = self.destination.stage(StagePlan {
            outputs: (self.prefixes.iter())
                .map(|p| StagedOutput {
                    dir: match options.worker {
                        None => String::new(),
                        Some(w) => format!("{}/{}", name::parts_dir_name(p), w.part_name()),
                    },
                    tmp: name::tmp_dir_name(p),
                })
                .collect(),
            hidden: self.hidden(),
            overwrite: options.overwrite,
            // (A worker's part is staged and published as any worker's.)
            append: self.next.is_some() && options.worker.is_none(),
            resume: options.resume,
            part: options.worker.is_some(),
            staging_dir: options.staging_dir.clone(),
        })?;
        let mut outs: Vec<OutputDir> = (self.prefixes.iter().enumerate())
            .map(|(i, p)| OutputDir::new(p, staging.folder(i), staging.hook(i)))
            .collect();
        let reused = match options.resume {
            true => Some(resume(
                options,
                self.opener,
                &mut self.source,
                &mut *staging,
                &mut outs,
                self.next.as_ref(),
            )?),
            false => None,
        };
        let source = &mut self.source;
        progress.set_total(source.total_units());
        let mut report: &dyn Progress = progress;
        let expected = source.expected_records();
        let (shards, ()) = route::write_outputs(
            options,
            &outs,
            source.estimated_bytes(),
            expected,
            |router| {
                // A second pass (--min-shards) is not progress.
                let pass = source.produce(options, router, report);
                report = &crate::progress::NoProgress;
                pass
            },
        )?;
        options.cancel.check()?;
        crate::failpoint::hit("convert:written")?;
        Ok(Written {
            staging,
            outs,
            shards,
            reused,
        })
    }

    /// Publishes what `written` staged: each output's manifest, the commit (the claims
    /// confirmed right before each manifest), a TFDS dataset's files; returns the summary.
    ///
    /// # Errors
    ///
    /// Those of [`publications`] and of the commit; a TFDS file that cannot be written.
    fn publish(self, written: Written, started: Instant) -> Result<ConvertSummary> {
        let Written {
            mut staging,
            outs,
            shards,
            reused,
        } = written;
        let options = self.options;
        let next = self.next.as_ref();
        let (publications, manifests) = publications(
            options,
            &*self.source,
            &*self.destination,
            &outs,
            &shards,
            next,
        )?;
        let confirm = || match (next, &self.claim) {
            (Some((next, _)), _) => next.confirm(),
            (None, Some(claim)) => claim.confirm(),
            (None, None) => Ok(()),
        };
        let paths = staging.commit(publications, &options.cancel, &confirm)?;
        drop(staging);
        if let (Some(name), None) = (&options.tfds, options.worker) {
            crate::tfds::publish(&*self.destination, name)?;
        }
        Ok(summarize(
            options,
            &outs,
            paths,
            &manifests,
            &shards,
            next,
            reused,
            &*self.source,
            started,
        ))
    }
}

/// `--resume`: the journal's header checked against this run, the shards it finished
/// reused, the source restarted past them where it can. Returns what was reused.
///
/// # Errors
///
/// A journal of another run ([`ErrorKind::ResumeMismatch`]); the source's errors
/// reopening at the journal's snapshot.
fn resume<'o>(
    options: &ConvertOptions,
    opener: &'o dyn Open,
    source: &mut Box<dyn Source + 'o>,
    staging: &mut dyn Staging,
    outs: &mut [OutputDir],
    next: Option<&(Generation, append::Plan)>,
) -> Result<Reused> {
    // A table's snapshot: the one the interrupted run read, whatever was committed since
    // (unless this run names one). (An append's plan is made against the source as it
    // is now.)
    if let (Some(header), None) = (staging.journal_header(0)?, next) {
        if let Some(reopened) = opener.reopen_at(options, &header, &**source)? {
            *source = reopened;
        }
    }
    // What the output depends on besides the records: the journal's header.
    let described = source.manifest(options, 0);
    let inputs: Vec<serde_json::Value> = described
        .inputs
        .iter()
        .map(|i| json!({"path": i.path, "bytes": i.bytes, "etag": i.etag}))
        .collect();
    let single = outs.len() == 1;
    for (i, out) in outs.iter_mut().enumerate() {
        let mut header = json!({
            "table": described.table,
            "prefix": out.prefix(),
            "options": described.options,
            "record_type": described.record_type,
            "compression": described.compression,
            "inputs": inputs,
            "tfshard_version": env!("CARGO_PKG_VERSION"),
        });
        // An append's generation and plan: a rerun resumes only the same one. (A plain
        // run's header is as before, so its journals still match.)
        if let Some((g, plan)) = next {
            header["append"] = json!({
                "generation": g.number,
                "reads": plan.reads,
                "retired": plan.retired,
            });
        }
        let finished = staging.resume(i, header.clone())?;
        // One output: the source restarts after the last checkpoint the reused shards
        // hold, instead of producing their records again.
        let checkpoint = finished.last().and_then(|s| s.checkpoint.clone());
        if let (Some(c), true) = (checkpoint, single) {
            out.set_skipped_by_producer(source.restart_from(&c));
        }
        out.set_resumed(header, finished);
    }
    let finished = (outs.iter()).flat_map(|o| o.resume_state().map_or(&[][..], |(_, f)| f));
    let reused = finished.fold(Reused::default(), |r, s| Reused {
        shards: r.shards + 1,
        bytes: r.bytes + s.bytes,
        ..r
    });
    Ok(Reused {
        unread_records: outs.iter().map(OutputDir::skipped_by_producer).sum(),
        ..reused
    })
}

/// Each output's publication (its shards' final names and its manifest: a worker's
/// part, a plain set, or the next generation of the set there), and its manifest.
///
/// # Errors
///
/// New records the set cannot hold beside its own; a pinned manifest that cannot be
/// read; a manifest that cannot be serialized.
fn publications(
    options: &ConvertOptions,
    source: &dyn Source,
    destination: &dyn Destination,
    outs: &[OutputDir],
    shards: &[Vec<ClosedShard>],
    next: Option<&(Generation, append::Plan)>,
) -> Result<(Vec<Publication>, Vec<Manifest>)> {
    let next = next.map(|(g, _)| g);
    let generation = next.map_or(0, |g| g.number);
    let mut publications = Vec::with_capacity(outs.len());
    let mut manifests = Vec::with_capacity(outs.len());
    for (i, (out, split)) in outs.iter().zip(shards).enumerate() {
        let mut manifest = source.manifest(options, split.iter().map(|s| s.records).sum());
        if let Some(w) = options.worker {
            manifest.worker = Some(manifest::WorkerInfo {
                index: w.index,
                count: w.count,
            });
            manifest.row_groups = source.worker_range();
        }
        let c = options.compression;
        let names: Vec<String> = (0..split.len())
            .map(|s| name::generation_shard_name(out.prefix(), generation, s, split.len(), c))
            .collect();
        let written: Vec<ShardInfo> = (split.iter().zip(&names))
            .map(|(s, file)| ShardInfo {
                file: file.clone(),
                records: s.records,
                bytes: s.bytes,
                crc32c: format!("{:08x}", s.crc32c),
                sources: shard_sources(&manifest.inputs, &s.sources),
                generation: None,
            })
            .collect();
        // The new shards' partial statistics, by their final names.
        let partials: std::collections::HashMap<String, Arc<Vec<u8>>> = (split.iter())
            .zip(&names)
            .filter_map(|(s, n)| Some((n.clone(), s.stats.as_ref()?.bytes.clone())))
            .collect();
        let mut stats = None;
        // A worker's part holds its shards alone, and what `finalize` needs to publish
        // them as the generation (and the set's statistics).
        let (bytes, append) = match (next, options.worker) {
            (Some(g), Some(_)) => {
                manifest.set_shards(written);
                let part = g.part(i, options.retain);
                (
                    crate::lifecycle::part_manifest_json(&manifest, &part)?,
                    None,
                )
            }
            (Some(g), None) => {
                manifest = g.manifest(i, manifest, written)?;
                let p = out.prefix();
                let append = g.publication(i, destination, p, &manifest, options.retain)?;
                if options.stats {
                    stats =
                        crate::lifecycle::set_stats(destination, "", p, &mut manifest, &partials)?;
                }
                (manifest.to_json()?, Some(append))
            }
            (None, w) => {
                manifest.set_shards(written);
                if options.stats && w.is_none() {
                    let p = out.prefix();
                    stats =
                        crate::lifecycle::set_stats(destination, "", p, &mut manifest, &partials)?;
                }
                (manifest.to_json()?, None)
            }
        };
        publications.push(Publication {
            shards: split.clone(),
            names,
            stats,
            manifest: (name::manifest_name(out.prefix()), bytes),
            own: name::is_own_shard,
            prefix: out.prefix().to_owned(),
            append,
        });
        manifests.push(manifest);
    }
    Ok((publications, manifests))
}

/// The run's summary: an append's counts what it wrote (the sets' totals are in their
/// manifests), a plain run's its outputs.
#[allow(clippy::too_many_arguments)]
fn summarize(
    options: &ConvertOptions,
    outs: &[OutputDir],
    paths: Vec<PathBuf>,
    manifests: &[Manifest],
    shards: &[Vec<ClosedShard>],
    next: Option<&(Generation, append::Plan)>,
    reused: Option<Reused>,
    source: &dyn Source,
    started: Instant,
) -> ConvertSummary {
    let splits: Vec<SplitSummary> = (outs.iter().zip(paths).zip(manifests))
        .map(|((out, manifest_path), manifest)| SplitSummary {
            name: (options.tfds.as_deref())
                .and_then(|name| crate::tfds::split_of(name, out.prefix()))
                .unwrap_or(out.prefix())
                .to_owned(),
            manifest: manifest_path,
            records: manifest.records,
            shards: manifest.shards.len() as u64,
            bytes: manifest.bytes,
        })
        .collect();
    let single = options.splits.is_none();
    let written = |f: fn(&ClosedShard) -> u64| shards.iter().flatten().map(f).sum::<u64>();
    let (records, count, bytes) = match next {
        Some(_) => (
            written(|s| s.records),
            shards.iter().map(|s| s.len() as u64).sum(),
            written(|s| s.bytes),
        ),
        None => (
            splits.iter().map(|s| s.records).sum(),
            splits.iter().map(|s| s.shards).sum(),
            splits.iter().map(|s| s.bytes).sum(),
        ),
    };
    ConvertSummary {
        output: options.output.clone(),
        manifest: if single {
            splits.first().map(|s| s.manifest.clone())
        } else {
            None
        },
        records,
        shards: count,
        bytes,
        seconds: started.elapsed().as_secs_f64(),
        skipped: source.skipped(),
        reused,
        splits: if single { Vec::new() } else { splits },
        table: manifests.first().and_then(|m| m.table.clone()),
        append: next.map(|(g, plan)| append::summary(g, plan)),
    }
}
