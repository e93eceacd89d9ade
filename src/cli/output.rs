//! Everything the binary prints: stdout that ends quietly on a closed pipe, and
//! progress bars (indicatif) behind the library's `Progress` trait.

use std::io::{self, IsTerminal, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{Common, ProgressMode};
use crate::progress::Progress;

/// Whether an error is a write to a closed pipe (`inspect | head`): not a failure.
pub fn is_broken_pipe(err: &crate::error::Error) -> bool {
    matches!(err.kind(), crate::error::ErrorKind::Io(e) if e.kind() == io::ErrorKind::BrokenPipe)
}

/// Buffered, locked stdout.
pub fn stdout() -> io::BufWriter<io::StdoutLock<'static>> {
    io::BufWriter::with_capacity(1 << 16, io::stdout().lock())
}

/// Prints a JSON value as one line on stdout.
pub fn print_json(value: &serde_json::Value) -> io::Result<()> {
    let mut out = stdout();
    serde_json::to_writer(&mut out, value)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// A progress bar on stderr, or nothing.
pub struct Bar {
    bar: Option<ProgressBar>,
}

impl Bar {
    /// A bar counting `unit` (rows, records, files), shown per `--progress`.
    pub fn new(common: &Common, unit: &'static str) -> Bar {
        Bar::shown(
            match common.progress {
                ProgressMode::Never => false,
                ProgressMode::Always => true,
                ProgressMode::Auto => !common.quiet && io::stderr().is_terminal(),
            },
            unit,
        )
    }

    /// A bar counting `unit` when `show`, else nothing.
    pub fn shown(show: bool, unit: &'static str) -> Bar {
        if !show {
            return Bar { bar: None };
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        let template = format!(
            "{{spinner}} [{{elapsed_precise}}] {{bar:30}} {{human_pos}}/{{human_len}} {unit} \
             {{msg}} ({{rate}}, ETA {{eta}})"
        );
        bar.set_style(
            ProgressStyle::with_template(&template)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .with_key(
                    "rate",
                    |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = write!(w, "{}/s", indicatif::HumanCount(state.per_sec() as u64));
                    },
                ),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        Bar { bar: Some(bar) }
    }

    /// Removes the bar from the terminal.
    pub fn clear(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Progress for Bar {
    fn set_total(&self, units: u64) {
        if let Some(bar) = &self.bar {
            bar.set_length(units);
        }
    }

    fn advance(&self, units: u64, bytes_written: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(units);
            if bytes_written > 0 {
                bar.set_message(format!("{} written", indicatif::HumanBytes(bytes_written)));
            }
        }
    }
}

/// Megabytes (10^6 bytes) per second, for summaries.
pub fn mb_per_sec(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / 1e6 / seconds
    } else {
        0.0
    }
}
