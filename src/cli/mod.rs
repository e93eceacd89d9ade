//! Command-line types and dispatch. Each command lives in its own file: clap arguments
//! (their doc comments are `--help`), `to_options()` resolving flags into library
//! options, and `run()`: one library call plus the human or `--json` summary.

pub mod bench;
pub mod compact;
pub mod convert;
pub mod finalize;
pub mod inspect;
pub mod output;
pub mod schema;
pub mod stats;
pub mod verify;

use std::io;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::example::RecordType;
use crate::tfrecord::Compression;

/// How a command ended, when not in success.
#[derive(Debug)]
pub enum CliError {
    /// Flags that make no sense together, or a bad value: exit 2.
    Usage(String),
    /// Bad data or a failed run: exit 1 (130/143 when interrupted).
    Data(crate::error::Error),
    /// `verify` found problems and already reported them: exit 1, nothing more to say.
    Failed,
}

impl From<crate::error::Error> for CliError {
    /// The library's option errors are usage (exit 2); every other error is data (1).
    fn from(err: crate::error::Error) -> CliError {
        match err.kind() {
            crate::error::ErrorKind::InvalidOption { .. } => CliError::Usage(err.to_string()),
            _ => CliError::Data(err),
        }
    }
}

impl From<io::Error> for CliError {
    fn from(err: io::Error) -> CliError {
        CliError::Data(err.into())
    }
}

impl CliError {
    /// Prints the error line (and hint) to stderr; returns the exit code.
    pub fn report(self) -> u8 {
        // (Usage messages are ours; data errors quote names and bytes from the input.)
        match self {
            CliError::Usage(msg) => {
                eprintln!("error: {msg}");
                2
            }
            CliError::Failed => 1,
            CliError::Data(err) => {
                if let crate::error::ErrorKind::Interrupted = err.kind() {
                    if resume_requested() {
                        eprintln!(
                            "tfshard: interrupted; finished shards kept: rerun with --resume"
                        );
                    } else {
                        eprintln!("tfshard: interrupted; temporary files removed");
                    }
                    let signal = signal_received().load(std::sync::atomic::Ordering::Relaxed);
                    // (SIGINT's code when the run was cancelled some other way.)
                    return 128 + if signal == 0 { 2 } else { signal as u8 };
                }
                if output::is_broken_pipe(&err) {
                    return 0;
                }
                eprintln!("error: {}", one_line(&err.to_string()));
                if let Some(hint) = err.hint() {
                    eprintln!("{hint}");
                }
                1
            }
        }
    }
}

/// The signal (SIGINT, SIGTERM) that cancelled the run, set by the handlers that
/// `convert` installs; 0 before any.
fn signal_received() -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    static SIGNAL: std::sync::OnceLock<std::sync::Arc<std::sync::atomic::AtomicUsize>> =
        std::sync::OnceLock::new();
    SIGNAL.get_or_init(Default::default).clone()
}

/// Whether the command line asked for `--resume` (for the interrupted message).
fn resume_requested() -> bool {
    std::env::args().any(|a| a == "--resume")
}

/// Result of a command.
pub type CliResult = Result<(), CliError>;

/// Converts Parquet tables and image folders into TFRecord shards, verifies them and
/// measures how fast they read.
#[derive(Parser, Debug)]
#[command(name = "tfshard", version, about, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// A command and its arguments.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Convert Parquet, Delta and Iceberg tables, image folders or existing TFRecords into TFRecord shards.
    #[command(
        subcommand,
        after_help = "Example:\n  tfshard convert parquet testdata/small.parquet -o out/"
    )]
    Convert(Box<convert::ConvertCommand>),
    /// Print records as JSON lines.
    #[command(
        after_help = "Example:\n  tfshard inspect out/data-00000-of-00004.tfrecord --limit 3"
    )]
    Inspect(inspect::InspectArgs),
    /// Check every record's framing and CRCs, and the manifest's counts, sizes and checksums.
    #[command(
        after_help = "Examples:\n  tfshard verify out/\n  tfshard verify out/ --deep --json"
    )]
    Verify(verify::VerifyArgs),
    /// Read shards through the full prefetching pipeline and report throughput.
    #[command(
        after_help = "Examples:\n  tfshard bench out/\n  tfshard bench out/ --compare --step-time 5ms --json"
    )]
    Bench(bench::BenchArgs),
    /// Print the feature spec of shards: from their manifest, or inferred from every record.
    #[command(
        after_help = "Examples:\n  tfshard schema out/\n  tfshard schema out/ --format python"
    )]
    Schema(schema::SchemaArgs),
    /// Statistics of the records (TFDV's): presence, values per record, numbers' range,
    /// mean and quantiles, bytes' unique and top values.
    #[command(
        after_help = "Examples:\n  tfshard stats out/\n  tfshard stats out/ --json\n  tfshard stats data-*.tfrecord --format tfdv -o stats.pb"
    )]
    Stats(stats::StatsArgs),
    /// Publish the parts of `convert --num-workers N` runs as one shard set with one manifest.
    #[command(
        after_help = "Example:\n  for i in 0 1 2; do tfshard convert parquet t/ -o out/ --num-workers 3 --worker-index $i; done\n  tfshard finalize out/"
    )]
    Finalize(finalize::FinalizeArgs),
    /// Rewrite the small generations that appends left as one generation of full-size shards.
    #[command(
        after_help = "Example:\n  tfshard convert delta t/ -o out/ --append   # every hour\n  tfshard compact out/                        # every night"
    )]
    Compact(compact::CompactArgs),
}

/// Flags every command takes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Worker threads [default: every core].
    #[arg(long, value_name = "N", global = true)]
    pub threads: Option<usize>,
    /// Progress bar: on a terminal (auto), always, or never.
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto, global = true)]
    pub progress: ProgressMode,
    /// No progress, and no summary of a run that went well: only errors and what the
    /// command is for (verify's problems, bench's report, inspect's records, --json).
    #[arg(long, short = 'q', global = true)]
    pub quiet: bool,
    /// Print a machine-readable summary on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// Object-store requests in flight at most (s3://, gs://, az:// paths).
    #[arg(long, value_name = "N", default_value_t = 16, global = true)]
    pub io_concurrency: usize,
    /// Longest an object-store request may take, retries included (e.g. 30s, 5m).
    #[arg(long, value_name = "DURATION", default_value = "5m", global = true)]
    pub io_timeout: String,
}

/// `--progress`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A bar when stderr is a terminal.
    Auto,
    /// Always a bar.
    Always,
    /// Never a bar.
    Never,
}

/// Flags of commands that read shards.
#[derive(Args, Debug, Clone)]
pub struct ReadFlags {
    /// Compression of the shards: by extension, else by content (auto).
    #[arg(long, value_enum, default_value_t = ReadCompression::Auto)]
    pub compression: ReadCompression,
    /// Message type of the records: from the manifest that lists the file, else example (auto).
    #[arg(long, value_enum, default_value_t = ReadRecordType::Auto)]
    pub record_type: ReadRecordType,
}

/// `--compression` of readers.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadCompression {
    /// By extension (.gz, .zlib), else by the first bytes.
    Auto,
    /// Plain records.
    None,
    /// GZIP.
    Gzip,
    /// ZLIB.
    Zlib,
}

impl ReadCompression {
    /// `None` means auto-detect.
    pub fn resolve(self) -> Option<Compression> {
        match self {
            ReadCompression::Auto => None,
            ReadCompression::None => Some(Compression::None),
            ReadCompression::Gzip => Some(Compression::Gzip),
            ReadCompression::Zlib => Some(Compression::Zlib),
        }
    }
}

/// `--record-type` of readers.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadRecordType {
    /// From the manifest that lists the file, else example.
    Auto,
    /// tf.train.Example.
    Example,
    /// tf.train.SequenceExample.
    SequenceExample,
}

impl ReadRecordType {
    /// `None` means auto.
    pub fn resolve(self) -> Option<RecordType> {
        match self {
            ReadRecordType::Auto => None,
            ReadRecordType::Example => Some(RecordType::Example),
            ReadRecordType::SequenceExample => Some(RecordType::SequenceExample),
        }
    }
}

/// `--io-timeout` and the like: [`crate::units::parse_duration`], a usage error.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, CliError> {
    crate::units::parse_duration(text).map_err(CliError::Usage)
}

/// `d`, or a usage error naming `flag` when it is zero.
fn positive(d: std::time::Duration, flag: &str) -> Result<std::time::Duration, CliError> {
    if d.is_zero() {
        return Err(CliError::Usage(format!("{flag} must be more than 0")));
    }
    Ok(d)
}

/// The store switches no flag sets, from the environment (the one place that reads
/// them): `TFSHARD_STREAM_PARTS=0` buffers S3 upload parts instead of streaming them;
/// `TFSHARD_MAX_COPY_BYTES`, `TFSHARD_COPY_PART_BYTES` and `TFSHARD_READ_AHEAD_BYTES`
/// (bytes) lower the copy and read-ahead limits, which tests use to reach the large-object
/// paths with small objects. A value that is not a positive number is ignored.
pub fn io_defaults_from_env() -> crate::store::IoOptions {
    let bytes = |var: &str| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&v| v > 0)
    };
    let mut io = crate::store::IoOptions::new()
        .with_stream_parts(std::env::var("TFSHARD_STREAM_PARTS").map_or(true, |v| v != "0"));
    if let Some(b) = bytes("TFSHARD_MAX_COPY_BYTES") {
        io = io.with_max_copy_bytes(b);
    }
    if let Some(b) = bytes("TFSHARD_COPY_PART_BYTES") {
        io = io.with_copy_part_bytes(b);
    }
    if let Some(b) = bytes("TFSHARD_READ_AHEAD_BYTES") {
        io = io.with_read_ahead_bytes(b);
    }
    io
}

impl Common {
    /// `--baseline`'s statistics (a usage error, naming it, when they cannot be read).
    pub(crate) fn baseline(
        &self,
        path: Option<&std::path::Path>,
    ) -> Result<Option<crate::stats::proto::DatasetFeatureStatistics>, CliError> {
        let Some(path) = path else { return Ok(None) };
        crate::describe::baseline(path, self.io()?)
            .map(Some)
            .map_err(|e| {
                CliError::Usage(format!(
                    "--baseline {}: cannot be read: {e}",
                    path.display()
                ))
            })
    }

    /// Checks `--io-concurrency` and `--io-timeout` before the command starts.
    fn setup_io(&self) -> CliResult {
        self.io().map(|_| ())
    }

    /// `--io-concurrency` and `--io-timeout`: the store settings handed to the library.
    pub fn io(&self) -> Result<crate::store::IoOptions, CliError> {
        if self.io_concurrency == 0 {
            return Err(CliError::Usage(
                "--io-concurrency must be at least 1".into(),
            ));
        }
        Ok(io_defaults_from_env()
            .with_concurrency(self.io_concurrency)
            .with_timeout(positive(parse_duration(&self.io_timeout)?, "--io-timeout")?))
    }

    fn setup_threads(&self) -> CliResult {
        self.setup_io()?;
        if let Some(n) = self.threads {
            if n == 0 {
                return Err(CliError::Usage("--threads must be at least 1".into()));
            }
            // Ignore the error: the pool can only be built once per process.
            let _ = rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build_global();
        }
        Ok(())
    }

    /// The resolved thread count.
    pub fn thread_count(&self) -> usize {
        self.threads.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
    }
}

/// The whole command line as a program runs it: `args` (without the program's name)
/// parsed, the command run, its outcome printed and turned into the exit code. The
/// `tfshard` binary's `main` and the Python wheel's `tfshard` command both call this.
pub fn main<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    crate::alloc::tune_glibc();
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    if args.first().is_some_and(|c| c == "bench")
        && std::env::var_os("TFSHARD_SYSTEM_ALLOCATOR").is_none()
    {
        // Before any thread starts; see `Allocator`.
        crate::alloc::use_mimalloc();
    }
    match parse(args) {
        Ok(command) => match run_command(command) {
            Ok(()) => 0,
            Err(err) => err.report(),
        },
        Err(e) => {
            // Help and --version print to stdout and exit 0; a usage error to stderr, 2.
            let _ = e.print();
            u8::try_from(e.exit_code()).unwrap_or(2)
        }
    }
}

/// Parses arguments (without the program's name) as the command line.
///
/// # Errors
///
/// What clap says of them (unknown flag, missing or bad value).
pub fn parse<I, T>(args: I) -> Result<Command, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let argv = std::iter::once(std::ffi::OsString::from("tfshard"))
        .chain(args.into_iter().map(Into::into));
    Cli::try_parse_from(argv).map(|cli| cli.command)
}

/// Runs a parsed command.
pub fn run_command(command: Command) -> CliResult {
    match command {
        Command::Convert(cmd) => {
            cmd.common().setup_io()?;
            cmd.run()
        }
        Command::Inspect(args) => {
            args.common.setup_threads()?;
            args.run()
        }
        Command::Verify(args) => {
            args.common.setup_io()?;
            args.run()
        }
        Command::Bench(args) => {
            args.common.setup_threads()?;
            args.run()
        }
        Command::Finalize(args) => {
            args.common.setup_io()?;
            args.run()
        }
        Command::Compact(args) => {
            args.common.setup_io()?;
            args.run()
        }
        Command::Schema(args) => {
            args.common.setup_threads()?;
            args.run()
        }
        Command::Stats(args) => {
            args.common.setup_threads()?;
            args.run()
        }
    }
}

/// The error line as one line: control characters from the input (a column name with a
/// newline or a vertical tab, say) are escaped, never printed raw.
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod one_line_tests {
    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(super::one_line("a\nb\x0bc é"), "a\\nb\\u{b}c é");
    }
}
