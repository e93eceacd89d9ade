//! Writing framed records to any `Write`.

use std::io::Write;

use crate::error::Result;
use crate::tfrecord::frame;

/// Writes framed records, exactly as TensorFlow's `TFRecordWriter` does.
pub struct RecordWriter<W> {
    inner: W,
    records: u64,
    bytes: u64,
}

impl<W: Write> RecordWriter<W> {
    /// Wraps a writer.
    pub fn new(inner: W) -> RecordWriter<W> {
        RecordWriter {
            inner,
            records: 0,
            bytes: 0,
        }
    }

    /// Frames and writes one record.
    ///
    /// # Errors
    ///
    /// The underlying writer's I/O error.
    pub fn write_record(&mut self, data: &[u8]) -> Result<()> {
        self.inner
            .write_all(&frame::encode_header(data.len() as u64))?;
        self.inner.write_all(data)?;
        self.inner.write_all(&frame::encode_footer(data))?;
        self.records += 1;
        self.bytes += data.len() as u64 + frame::FRAME_OVERHEAD;
        Ok(())
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Framed (uncompressed) bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Flushes and returns the inner writer.
    ///
    /// # Errors
    ///
    /// The flush's I/O error.
    pub fn into_inner(mut self) -> Result<W> {
        self.inner.flush()?;
        Ok(self.inner)
    }
}
