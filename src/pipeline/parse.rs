//! Parse: a batch of raw records → one columnar [`Batch`], on a parse worker. Each
//! record's data CRC is checked here (so that work spreads over the workers), then
//! [`Decoder`] appends its features to the batch's columns.

use crate::error::{Error, ErrorKind, Result};
use crate::example::bytes::Home;
use crate::example::columnar::{Batch, Decoder};
use crate::example::FeatureSpec;
use crate::pipeline::batch::{Payload, RawBatch};
use crate::pipeline::cache::{self, CachedRows};
use crate::tfrecord::frame;

/// Cache lines of a record fetched ahead while one is parsed.
const PREFETCH_LINES: usize = 4;

/// How far ahead: the record that many after the one parsed.
const RECORDS_AHEAD: usize = 4;

/// Parses raw batches for one feature spec.
#[derive(Debug, Clone)]
pub struct Parser {
    decoder: Decoder,
}

impl Parser {
    /// A parser for a spec (Example features only).
    ///
    /// # Errors
    ///
    /// A spec with `feature_lists` (SequenceExamples are not read by the pipeline).
    pub fn new(spec: &[FeatureSpec]) -> Result<Parser> {
        Ok(Parser {
            decoder: Decoder::new(spec)?,
        })
    }

    /// Parses a raw batch. Returns the batch and the copied records' payloads, also
    /// after an error: buffers for the producer to reuse.
    ///
    /// # Errors
    ///
    /// A data CRC mismatch, a record that is not an Example, a feature of another kind
    /// than the spec's, or a fixed-shape feature missing or of another length; each
    /// names file, record and offset.
    pub fn parse(
        &self,
        raw: RawBatch,
        files: &[std::path::PathBuf],
    ) -> (Result<Batch>, Vec<Payload>) {
        let mut spare = Vec::new();
        let rows = raw.records.len();
        let epoch = raw.epoch;
        let mut columns = self.decoder.start();
        let mut record_bytes = 0;
        // Shuffled records lie far apart, each a cache miss: fetch the next record's
        // first lines while this one is checked and parsed.
        let mut failed = None;
        for (k, record) in raw.records.iter().enumerate() {
            if let Some(next) = raw.records.get(k + RECORDS_AHEAD) {
                for line in next
                    .bytes(&raw.maps)
                    .iter()
                    .step_by(64)
                    .take(PREFETCH_LINES)
                {
                    frame::prefetch(line);
                }
            }
            let bytes = record.bytes(&raw.maps);
            record_bytes += bytes.len() as u64 + frame::FRAME_OVERHEAD;
            let locate = |e: Error| {
                let e = e
                    .with_record(record.origin.record)
                    .with_offset(record.origin.offset);
                match files.get(record.origin.file) {
                    Some(path) => e.with_file(path),
                    None => e,
                }
            };
            let home = match &record.payload {
                Payload::Mapped { slot, range } => {
                    Home::Mapped(&raw.maps[*slot as usize], range.start)
                }
                Payload::Owned(_) => Home::Owned,
            };
            let parsed = check_crc(bytes, record.crc)
                .and_then(|()| self.decoder.decode(bytes, home, &mut columns))
                .map_err(locate);
            if let Err(e) = parsed {
                failed = Some(e);
                break;
            }
        }
        spare.extend(
            raw.records
                .into_iter()
                .map(|r| r.payload)
                .filter(|p| matches!(p, Payload::Owned(_))),
        );
        if let Some(e) = failed {
            return (Err(e), spare);
        }
        (Ok(columns.finish(epoch, rows, record_bytes)), spare)
    }
}

impl Parser {
    /// A batch of cached rows (see [`crate::pipeline::cache`]).
    pub(crate) fn gather(&self, rows: &CachedRows, epoch: u64) -> Batch {
        let mut columns = self.decoder.start();
        let bytes = cache::gather(self.decoder.spec(), rows, columns.columns_mut());
        columns.finish(epoch, rows.rows.len(), bytes)
    }
}

/// A record's payload against the data CRC stored after it.
fn check_crc(bytes: &[u8], crc: u32) -> Result<()> {
    if frame::masked_crc32c(bytes) != crc {
        return Err(Error::new(ErrorKind::Frame {
            problem: crate::error::FrameProblem::DataCrc,
            detail: crate::error::FrameDetail::DataCrc {
                len: bytes.len() as u64,
            },
        }));
    }
    Ok(())
}
