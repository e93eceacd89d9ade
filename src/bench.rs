//! `bench`: runs the pipeline (and, with `compare`, the sequential baseline) and
//! measures it. Returns a [`BenchReport`]; prints nothing.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::Result;
use crate::pipeline::{CacheReport, PipelineBuilder, PipelineOptions};

/// What to measure (set through [`BenchBuilder`]'s setters).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BenchOptions {
    /// The pipeline.
    pub pipeline: PipelineOptions,
    /// A simulated training step after each batch.
    pub step_time: Option<Duration>,
    /// Also run the sequential baseline.
    pub compare: bool,
}

/// One epoch's figures.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct EpochReport {
    /// The epoch (0 ran with a cold cache, if the files were not read before).
    pub epoch: u64,
    /// Where its records came from: `files` (read and parsed), `filling` (read and
    /// parsed, and kept in the cache) or `cache`.
    pub source: &'static str,
    /// Records delivered.
    pub records: u64,
    /// Batches delivered.
    pub batches: u64,
    /// Framed bytes of those records.
    pub bytes: u64,
    /// Wall time.
    pub seconds: f64,
    /// Records per second.
    pub records_per_sec: f64,
    /// Batches per second.
    pub batches_per_sec: f64,
    /// Bytes per second.
    pub bytes_per_sec: f64,
    /// The process's peak resident memory so far (`getrusage`'s `ru_maxrss`). Pages of
    /// mapped shards count here although they are page cache the kernel may evict.
    pub peak_rss_bytes: u64,
    /// The peak, so far in this run, of the process's anonymous resident memory (RSS
    /// less mapped files; Linux, sampled every 10 ms and at each epoch's end): what the
    /// pipeline's buffers themselves hold.
    pub peak_anon_rss_bytes: u64,
    /// With a step time: the share of the consumer's time spent waiting for input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_wait_fraction: Option<f64>,
}

/// A whole run's figures; the top level of `bench --json`.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct RunReport {
    /// Records delivered in every epoch.
    pub records: u64,
    /// Framed bytes of those records.
    pub bytes: u64,
    /// Wall time.
    pub seconds: f64,
    /// Records per second.
    pub records_per_sec: f64,
    /// Bytes per second.
    pub bytes_per_sec: f64,
    /// Per epoch.
    pub epochs: Vec<EpochReport>,
    /// With a step time: the share of the consumer's time spent waiting for input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_wait_fraction: Option<f64>,
    /// Process CPU seconds (user + system) per million records.
    pub cpu_seconds_per_million_records: f64,
    /// Parse workers (0 for the sequential baseline).
    pub parallelism: usize,
    /// Files read at once.
    pub cycle_length: usize,
    /// Batches in flight at the end (the automatic depth grows when the consumer waits).
    pub prefetch: usize,
    /// The most bytes the pipeline's own buffers held at once, counted by the pipeline
    /// ([`crate::pipeline::Memory`]); RSS adds what the allocator keeps for reuse.
    pub buffers_peak_bytes: u64,
    /// The bound the options put on `buffers_peak_bytes`.
    pub buffers_bound_bytes: u64,
    /// With a cache: what it did, and the filling and cached epochs' rates apart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheSummary>,
}

/// The cache's part of a run's report.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct CacheSummary {
    /// What the cache did.
    #[serde(flatten)]
    pub report: CacheReport,
    /// Records per second of the epoch that filled it (absent when reused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filling_records_per_sec: Option<f64>,
    /// Records per second of the epochs read from it (absent when none was).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_records_per_sec: Option<f64>,
}

impl RunReport {
    /// Records per second over every epoch but the first (cold), or over the whole run
    /// when it had one epoch.
    pub fn warm_records_per_sec(&self) -> f64 {
        match self.epochs.get(1..) {
            Some(warm) if !warm.is_empty() => per_sec(
                warm.iter().map(|e| e.records).sum(),
                warm.iter().map(|e| e.seconds).sum(),
            ),
            _ => self.records_per_sec,
        }
    }
}

/// The full report.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct BenchReport {
    /// The pipeline's run.
    #[serde(flatten)]
    pub run: RunReport,
    /// The sequential baseline, with `compare`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<RunReport>,
    /// Pipeline records/s over the baseline's, over the warm epochs (all but the first)
    /// when there are two or more: the baseline runs second, on a cache the pipeline's
    /// first epoch warmed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
}

/// (peak RSS bytes, CPU seconds) of this process so far.
fn usage() -> (u64, f64) {
    // SAFETY: getrusage fills the struct it is given; zeroed is a valid start.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage struct.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0, 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    // Linux reports ru_maxrss in KiB.
    (
        ru.ru_maxrss as u64 * 1024,
        secs(ru.ru_utime) + secs(ru.ru_stime),
    )
}

/// How often the bench samples anonymous memory.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);

/// The process's anonymous resident bytes now: `/proc/self/statm`'s resident less shared
/// pages (0 where there is no such file).
fn anon_rss() -> u64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let mut fields = statm.split_ascii_whitespace().skip(1);
    let mut next = || {
        fields
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (resident, shared) = (next(), next());
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(0) as u64;
    resident.saturating_sub(shared) * page
}

fn per_sec(n: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        n as f64 / seconds
    } else {
        0.0
    }
}

fn run(options: &PipelineOptions, step_time: Option<Duration>) -> Result<RunReport> {
    let pipeline = PipelineBuilder::new(options.paths.clone())
        .with_options(options.clone())
        .build()?;
    let cached_from = match pipeline.cache() {
        None => u64::MAX,
        Some(c) if c.state == "reused" => 0,
        Some(_) => 1,
    };
    let source = |epoch: u64| match (epoch >= cached_from, cached_from) {
        (true, _) => "cache",
        (false, u64::MAX) => "files",
        (false, _) => "filling",
    };
    let (_, cpu_start) = usage();
    let started = Instant::now();
    let mut epochs: Vec<EpochReport> = Vec::new();
    let mut epoch_start = started;
    let mut waited = Duration::ZERO;
    let mut epoch_waited = Duration::ZERO;
    let mut current: Option<EpochReport> = None;
    let mut peak_anon = anon_rss();
    let mut sampled = started;
    let finish =
        |mut e: EpochReport, start: Instant, waited: Duration, end: Instant, peak_anon: u64| {
            e.peak_anon_rss_bytes = peak_anon.max(anon_rss());
            e.seconds = (end - start).as_secs_f64();
            e.records_per_sec = per_sec(e.records, e.seconds);
            e.batches_per_sec = per_sec(e.batches, e.seconds);
            e.bytes_per_sec = per_sec(e.bytes, e.seconds);
            e.peak_rss_bytes = usage().0;
            if step_time.is_some() && e.seconds > 0.0 {
                e.input_wait_fraction = Some(waited.as_secs_f64() / e.seconds);
            }
            e
        };
    let mut pipeline = pipeline;
    loop {
        let asked = Instant::now();
        let Some(batch) = pipeline.next() else { break };
        let batch = batch?;
        let got = Instant::now();
        if current.as_ref().is_some_and(|e| e.epoch != batch.epoch) {
            let done = current.take().expect("checked just above");
            epochs.push(finish(done, epoch_start, epoch_waited, asked, peak_anon));
            epoch_start = asked;
            epoch_waited = Duration::ZERO;
        }
        if got - sampled >= SAMPLE_EVERY {
            peak_anon = peak_anon.max(anon_rss());
            sampled = got;
        }
        waited += got - asked;
        epoch_waited += got - asked;
        let e = current.get_or_insert(EpochReport {
            epoch: batch.epoch,
            source: source(batch.epoch),
            records: 0,
            batches: 0,
            bytes: 0,
            seconds: 0.0,
            records_per_sec: 0.0,
            batches_per_sec: 0.0,
            bytes_per_sec: 0.0,
            peak_rss_bytes: 0,
            peak_anon_rss_bytes: 0,
            input_wait_fraction: None,
        });
        e.records += batch.rows as u64;
        e.batches += 1;
        e.bytes += batch.record_bytes;
        if let Some(step) = step_time {
            std::thread::sleep(step);
        }
    }
    let end = Instant::now();
    if let Some(done) = current.take() {
        epochs.push(finish(done, epoch_start, epoch_waited, end, peak_anon));
    }
    let tuned = pipeline.tuned();
    let memory = pipeline.memory();
    let rate = |from: &str| {
        let picked: Vec<&EpochReport> = epochs.iter().filter(|e| e.source == from).collect();
        (!picked.is_empty()).then(|| {
            per_sec(
                picked.iter().map(|e| e.records).sum(),
                picked.iter().map(|e| e.seconds).sum(),
            )
        })
    };
    let cache = pipeline.cache().map(|report| CacheSummary {
        report,
        filling_records_per_sec: rate("filling"),
        cached_records_per_sec: rate("cache"),
    });
    drop(pipeline);
    let seconds = (end - started).as_secs_f64();
    let records: u64 = epochs.iter().map(|e| e.records).sum();
    let bytes: u64 = epochs.iter().map(|e| e.bytes).sum();
    let (_, cpu_end) = usage();
    Ok(RunReport {
        records,
        bytes,
        seconds,
        records_per_sec: per_sec(records, seconds),
        bytes_per_sec: per_sec(bytes, seconds),
        epochs,
        input_wait_fraction: step_time
            .map(|_| waited.as_secs_f64() / seconds.max(f64::MIN_POSITIVE)),
        cpu_seconds_per_million_records: if records > 0 {
            (cpu_end - cpu_start) * 1e6 / records as f64
        } else {
            0.0
        },
        parallelism: tuned.parallelism,
        cycle_length: tuned.cycle_length,
        prefetch: tuned.prefetch,
        buffers_peak_bytes: memory.peak_bytes,
        buffers_bound_bytes: memory.bound_bytes,
        cache,
    })
}

/// A benchmark of the reader, ready to run: `Bench::builder(pipeline)`, options,
/// `build()`, `run()`.
///
/// ```no_run
/// use tfshard::bench::Bench;
/// use tfshard::pipeline::Pipeline;
/// let report = Bench::builder(Pipeline::builder(vec!["out/".into()]).with_epochs(2))
///     .with_compare(true)
///     .build()?
///     .run()?;
/// println!("{:.0} records/s, {:?}x the sequential reader", report.run.records_per_sec, report.speedup);
/// # Ok::<(), tfshard::Error>(())
/// ```
#[derive(Debug)]
pub struct Bench {
    options: BenchOptions,
}

/// Builds a [`Bench`].
#[derive(Debug, Clone)]
pub struct BenchBuilder {
    options: BenchOptions,
}

impl Bench {
    /// Measures the pipeline that `pipeline` builds.
    pub fn builder(pipeline: PipelineBuilder) -> BenchBuilder {
        BenchBuilder {
            options: BenchOptions {
                pipeline: pipeline.options().clone(),
                step_time: None,
                compare: false,
            },
        }
    }

    /// Runs the benchmark.
    ///
    /// # Errors
    ///
    /// Whatever stops the pipeline: a corrupt shard, a record that does not fit the spec.
    pub fn run(&self) -> Result<BenchReport> {
        bench(&self.options)
    }
}

impl BenchBuilder {
    /// A simulated training step after each batch (the report then says how much of
    /// the consumer's time went to waiting for input).
    pub fn with_step_time(mut self, step: Duration) -> Self {
        self.options.step_time = Some(step);
        self
    }

    /// Also run the sequential baseline, and report the speedup over it.
    pub fn with_compare(mut self, compare: bool) -> Self {
        self.options.compare = compare;
        self
    }

    /// Checks the pipeline's options.
    ///
    /// # Errors
    ///
    /// [`InvalidOption`](crate::error::ErrorKind::InvalidOption) naming the option.
    pub fn build(self) -> Result<Bench> {
        self.options.pipeline.validate()?;
        Ok(Bench {
            options: self.options,
        })
    }
}

fn bench(options: &BenchOptions) -> Result<BenchReport> {
    let pipelined = run(&options.pipeline, options.step_time)?;
    let baseline = if options.compare {
        let mut sequential = options.pipeline.clone();
        sequential.sequential = true;
        Some(run(&sequential, options.step_time)?)
    } else {
        None
    };
    let speedup = baseline
        .as_ref()
        .map(RunReport::warm_records_per_sec)
        .filter(|&base| base > 0.0)
        .map(|base| pipelined.warm_records_per_sec() / base);
    Ok(BenchReport {
        run: pipelined,
        baseline,
        speedup,
    })
}
