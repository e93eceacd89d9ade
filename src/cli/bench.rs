//! `tfshard bench PATH...`: reads shards through the full pipeline and reports
//! throughput, per epoch; `--compare` adds the sequential baseline.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::{output, parse_duration, CliError, CliResult, Common, ReadFlags};
use crate::bench::{Bench, BenchBuilder, RunReport};
use crate::pipeline::{Pipeline, DEFAULT_BATCH_SIZE, DEFAULT_SHUFFLE_BUFFER};

/// Arguments of `bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Shards, folders or manifests.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Records per batch.
    #[arg(long, default_value_t = DEFAULT_BATCH_SIZE)]
    pub batch_size: usize,
    /// Shuffle buffer, in records (0: no shuffle).
    #[arg(long, default_value_t = DEFAULT_SHUFFLE_BUFFER)]
    pub shuffle_buffer: usize,
    /// Files read at once [default: automatic].
    #[arg(long)]
    pub cycle_length: Option<usize>,
    /// Worker threads (one produces, all parse), at most --threads [default: --threads
    /// minus one: the consumer's thread parses too when it would wait].
    #[arg(long)]
    pub parallelism: Option<usize>,
    /// Batches in flight ahead of the consumer [default: automatic: two per worker,
    /// doubling whenever the consumer waits, up to eight per worker].
    #[arg(long)]
    pub prefetch: Option<usize>,
    /// Passes over the data; the first is reported apart (cold cache).
    #[arg(long, default_value_t = 2)]
    pub epochs: u64,
    /// Simulate a training step per batch (e.g. 5ms, 0.2s) and report the input-bound fraction.
    #[arg(long, value_name = "DURATION")]
    pub step_time: Option<String>,
    /// Drop each epoch's last short batch.
    #[arg(long)]
    pub drop_remainder: bool,
    /// Also run the sequential baseline and print the speedup.
    #[arg(long)]
    pub compare: bool,
    /// Seed of the file and record shuffles.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Keep batch order reproducible (true) or hand batches out as they are ready (false).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub deterministic: bool,
    /// Cache what the first epoch parsed in memory: later epochs skip reading and
    /// parsing (shuffle and batches still change per epoch).
    #[arg(long, conflicts_with = "cache_file")]
    pub cache: bool,
    /// Cache what the first epoch parsed in this local file, kept for later runs (used
    /// when it holds exactly these shards, spec and record type; else rebuilt).
    #[arg(long, value_name = "PATH")]
    pub cache_file: Option<PathBuf>,
    /// Read uncompressed shards with read(2) into buffers instead of mapping them (for
    /// files that may change while read).
    #[arg(long)]
    pub no_mmap: bool,
    #[command(flatten)]
    pub read: ReadFlags,
    #[command(flatten)]
    pub common: Common,
}

fn print_run(out: &mut impl Write, title: &str, run: &RunReport) -> std::io::Result<()> {
    writeln!(
        out,
        "{title} (parallelism {}, cycle length {}, prefetch {}):",
        run.parallelism, run.cycle_length, run.prefetch
    )?;
    for e in &run.epochs {
        let label = match (e.epoch, e.source) {
            (n, "filling") => format!("epoch {n} (filling)"),
            (n, "cache") => format!("epoch {n} (cached)"),
            (0, _) => "epoch 0 (cold)".to_owned(),
            (n, _) => format!("epoch {n}"),
        };
        write!(
            out,
            "  {label:<15} {:>10} records {:>7.2} s {:>12.0} records/s {:>9.0} batches/s {:>8.1} MB/s  peak RSS {:.0} MiB (anon {:.0} MiB)",
            e.records,
            e.seconds,
            e.records_per_sec,
            e.batches_per_sec,
            e.bytes_per_sec / 1e6,
            e.peak_rss_bytes as f64 / (1 << 20) as f64,
            e.peak_anon_rss_bytes as f64 / (1 << 20) as f64
        )?;
        if let Some(w) = e.input_wait_fraction {
            write!(out, "  input wait {:.1}%", 100.0 * w)?;
        }
        writeln!(out)?;
    }
    write!(
        out,
        "  {:<15} {:>10} records {:>7.2} s {:>12.0} records/s {:>19} {:>8.1} MB/s  {:.2} CPU-s per million records",
        "total",
        run.records,
        run.seconds,
        run.records_per_sec,
        "",
        run.bytes_per_sec / 1e6,
        run.cpu_seconds_per_million_records
    )?;
    if let Some(w) = run.input_wait_fraction {
        write!(out, "  input wait {:.1}%", 100.0 * w)?;
    }
    writeln!(out)?;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    writeln!(
        out,
        "  {:<15} peak {:.1} MiB held by the pipeline's buffers (bound {:.1} MiB)",
        "buffers",
        mib(run.buffers_peak_bytes),
        mib(run.buffers_bound_bytes)
    )?;
    if let Some(c) = &run.cache {
        let r = &c.report;
        let place = r
            .file
            .as_deref()
            .map_or("memory".to_owned(), |f| format!("file {f}"));
        let why = r
            .reason
            .as_deref()
            .map_or(String::new(), |w| format!(" ({w})"));
        write!(
            out,
            "  {:<15} {} in {place}{why}: {} records, {:.1} MiB",
            "cache",
            r.state,
            r.records,
            mib(r.bytes)
        )?;
        if r.parsed_bytes > 0 {
            write!(
                out,
                " ({:.2}x the parsed batches' {:.1} MiB)",
                r.bytes as f64 / r.parsed_bytes as f64,
                mib(r.parsed_bytes)
            )?;
        }
        if let (Some(fill), Some(cached)) = (c.filling_records_per_sec, c.cached_records_per_sec) {
            write!(
                out,
                "; cached epochs {cached:.0} records/s, {:.2}x the filling epoch",
                cached / fill
            )?;
        }
        writeln!(out)?;
    }
    Ok(())
}

impl BenchArgs {
    /// Resolves flags into library options.
    pub fn to_builder(&self) -> Result<BenchBuilder, CliError> {
        if self.batch_size == 0 {
            return Err(CliError::Usage("--batch-size must be at least 1".into()));
        }
        for (flag, v) in [
            ("--cycle-length", self.cycle_length),
            ("--parallelism", self.parallelism),
            ("--prefetch", self.prefetch),
        ] {
            if v == Some(0) {
                return Err(CliError::Usage(format!("{flag} must be at least 1")));
            }
        }
        let threads = self.common.thread_count();
        if let Some(p) = self.parallelism {
            if p > threads {
                return Err(CliError::Usage(format!(
                    "--parallelism {p} exceeds --threads {threads}"
                )));
            }
        }
        let mut builder = Pipeline::builder(self.paths.clone())
            .with_threads(threads)
            .with_epochs(self.epochs)
            .with_shuffled_files(self.shuffle_buffer > 1)
            .with_shuffle(self.shuffle_buffer, self.seed)
            .with_batch(self.batch_size, self.drop_remainder)
            .with_deterministic(self.deterministic)
            .with_mmap(!self.no_mmap)
            .with_io(self.common.io()?);
        if let Some(c) = self.read.compression.resolve() {
            builder = builder.with_compression(c);
        }
        if let Some(c) = self.cycle_length {
            builder = builder.with_interleave(c, 1);
        }
        if let Some(p) = self.parallelism {
            builder = builder.with_parallelism(p);
        }
        if let Some(p) = self.prefetch {
            builder = builder.with_prefetch(p);
        }
        if self.cache {
            builder = builder.with_cache(crate::pipeline::CacheMode::Memory);
        }
        if let Some(path) = &self.cache_file {
            if crate::store::is_url(path) {
                return Err(CliError::Usage(format!(
                    "--cache-file must be a local path, not {}",
                    path.display()
                )));
            }
            builder = builder.with_cache(crate::pipeline::CacheMode::File(path.clone()));
        }
        let mut bench = Bench::builder(builder).with_compare(self.compare);
        if let Some(step) = self.step_time.as_deref().map(parse_duration).transpose()? {
            bench = bench.with_step_time(step);
        }
        Ok(bench)
    }

    /// Runs and reports.
    pub fn run(&self) -> CliResult {
        let report = self.to_builder()?.build()?.run()?;
        if self.common.json {
            output::print_json(&serde_json::to_value(&report).map_err(std::io::Error::other)?)?;
            return Ok(());
        }
        let mut out = output::stdout();
        print_run(&mut out, "pipeline", &report.run)?;
        if let Some(base) = &report.baseline {
            print_run(&mut out, "sequential baseline", base)?;
        }
        if let Some(s) = report.speedup {
            let over = if report.run.epochs.len() > 1 {
                " (warm epochs)"
            } else {
                ""
            };
            writeln!(out, "speedup: {s:.2}x the sequential baseline{over}")?;
        }
        out.flush()?;
        Ok(())
    }
}
