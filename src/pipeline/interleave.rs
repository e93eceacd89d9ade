//! Interleave: `cycle_length` files open at once, `block_length` records from each in
//! turn (`tf.data.Dataset.interleave`'s order); a file that ends gives its place to the
//! next one. Each file is read in large sequential blocks by its own `RecordReader`. The
//! data CRC is left to the parse workers: it is the costly check, and they run in
//! parallel.

use std::collections::VecDeque;
use std::path::PathBuf;

use crate::error::Result;
use crate::pipeline::batch::{Origin, RawRecord};
use crate::tfrecord::{self, Compression, RecordReader, Source};

/// Round-robin reading of several files.
pub struct Interleave {
    files: Vec<PathBuf>,
    compression: Option<Compression>,
    pending: VecDeque<usize>,
    open: Vec<(usize, RecordReader<Source>)>,
    cycle_length: usize,
    block_length: usize,
    current: usize,
    taken: usize,
}

impl Interleave {
    /// Reads `order` (indices into `files`) interleaved.
    pub fn new(
        files: Vec<PathBuf>,
        order: Vec<usize>,
        compression: Option<Compression>,
        cycle_length: usize,
        block_length: usize,
    ) -> Interleave {
        Interleave {
            files,
            compression,
            pending: order.into(),
            open: Vec::new(),
            cycle_length: cycle_length.max(1),
            block_length: block_length.max(1),
            current: 0,
            taken: 0,
        }
    }

    fn fill_cycle(&mut self) -> Result<()> {
        while self.open.len() < self.cycle_length {
            let Some(i) = self.pending.pop_front() else {
                break;
            };
            let reader =
                tfrecord::open(&self.files[i], self.compression)?.with_check_data_crc(false);
            self.open.push((i, reader));
        }
        Ok(())
    }

    /// Moves the next record into `slot` (reusing its buffer); `false` at the end.
    ///
    /// # Errors
    ///
    /// A framing error (length CRC, truncation) naming file, record and offset.
    pub fn next_into(&mut self, slot: &mut RawRecord) -> Result<bool> {
        loop {
            self.fill_cycle()?;
            if self.open.is_empty() {
                return Ok(false);
            }
            if self.current >= self.open.len() {
                self.current = 0;
            }
            let (file, reader) = &mut self.open[self.current];
            let (record, offset) = (reader.record_index(), reader.offset());
            match reader.read_record()? {
                Some(bytes) => {
                    slot.bytes.clear();
                    slot.bytes.extend_from_slice(bytes);
                    slot.crc = reader.stored_data_crc();
                    slot.origin = Origin {
                        file: *file,
                        record,
                        offset,
                    };
                    self.taken += 1;
                    if self.taken >= self.block_length {
                        self.taken = 0;
                        self.current += 1;
                    }
                    return Ok(true);
                }
                None => {
                    // This file is done: the next pending one takes its place.
                    self.open.remove(self.current);
                    self.taken = 0;
                    if let Some(i) = self.pending.pop_front() {
                        let reader = tfrecord::open(&self.files[i], self.compression)?
                            .with_check_data_crc(false);
                        self.open.insert(self.current, (i, reader));
                    }
                }
            }
        }
    }
}
