//! Reading an uncompressed record file through a memory map: each record is a range of
//! the map, so nothing is copied until a parser reads it.
//!
//! [`MappedRecords`] walks the headers, checking each length against its CRC and the
//! file's size, exactly as [`RecordReader`](super::RecordReader) does (the same errors,
//! the same messages); the data CRC is left to whoever reads the payload, with the stored
//! value at hand. The map is advised sequential, so the kernel reads ahead in large
//! blocks as the walk moves through the file; pages come from the page cache and stay
//! the kernel's, which may evict them, so the process's own memory does not grow with the
//! file.
//!
//! A file mapped here must not be truncated while it is read: the kernel would stop the
//! process with `SIGBUS`. Shards are written once and renamed into place, so the
//! pipeline maps them; a caller reading files that may still change uses
//! [`RecordReader`](super::RecordReader).

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::{Advice, Mmap};

use crate::error::{Error, FrameProblem, Result};
use crate::tfrecord::frame::{self, FOOTER_LEN, HEADER_LEN};
use crate::tfrecord::reader::{frame_error, truncated_data_detail, truncated_header_detail};

/// How far ahead of the walk to prefetch.
const PREFETCH_AHEAD: usize = 2048;

/// A mapped file, shared by the records that point into it.
pub type SharedMap = Arc<Mmap>;

/// One record of a mapped file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedRecord {
    /// The payload's bytes within the map.
    pub range: Range<usize>,
    /// The masked data CRC stored after the payload (not yet checked).
    pub stored_crc: u32,
    /// The record's index in the file.
    pub index: u64,
    /// The byte offset of its header.
    pub offset: u64,
}

/// Walks the records of a mapped, uncompressed file.
pub struct MappedRecords {
    map: Option<SharedMap>,
    path: PathBuf,
    pos: usize,
    index: u64,
    poisoned: bool,
}

impl MappedRecords {
    /// Maps a file.
    ///
    /// # Errors
    ///
    /// The file cannot be opened or mapped.
    pub fn open(path: &Path) -> Result<MappedRecords> {
        let file = File::open(path).map_err(|e| Error::from(e).with_file(path))?;
        let len = file
            .metadata()
            .map_err(|e| Error::from(e).with_file(path))?
            .len();
        // An empty file cannot be mapped (mmap of 0 bytes is EINVAL); it holds no record.
        let map = if len == 0 {
            None
        } else {
            // SAFETY: the map is only read; a shard truncated by another process while it
            // is mapped would raise SIGBUS (module docs).
            let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::from(e).with_file(path))?;
            // Only a hint: reading works the same without it.
            let _ = map.advise(Advice::Sequential);
            Some(Arc::new(map))
        };
        Ok(MappedRecords {
            map,
            path: path.to_path_buf(),
            pos: 0,
            index: 0,
            poisoned: false,
        })
    }

    /// The map the records point into (`None` for an empty file).
    pub fn map(&self) -> Option<&SharedMap> {
        self.map.as_ref()
    }

    /// The path, for error messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next record, or `None` at the clean end of the file.
    ///
    /// # Errors
    ///
    /// A length CRC mismatch or a truncated header or payload, with file, record index
    /// and offset; after one, the walk ends.
    pub fn next_record(&mut self) -> Result<Option<MappedRecord>> {
        let Some(map) = self.map.as_ref().filter(|_| !self.poisoned) else {
            return Ok(None);
        };
        let data: &[u8] = map;
        let left = data.len() - self.pos;
        if left == 0 {
            return Ok(None);
        }
        let offset = self.pos as u64;
        let fail = |problem, detail| {
            Err(frame_error(
                problem,
                detail,
                Some(&self.path),
                self.index,
                offset,
            ))
        };
        if left < HEADER_LEN {
            self.poisoned = true;
            return fail(FrameProblem::TruncatedLength, truncated_header_detail(left));
        }
        let header: &[u8; HEADER_LEN] = data[self.pos..self.pos + HEADER_LEN]
            .try_into()
            .expect("HEADER_LEN bytes");
        let Ok(len) = frame::decode_header(header) else {
            self.poisoned = true;
            return fail(
                FrameProblem::LengthCrc,
                crate::error::FrameDetail::LengthCrc,
            );
        };
        let framed = len.saturating_add((HEADER_LEN + FOOTER_LEN) as u64);
        if framed > left as u64 {
            self.poisoned = true;
            return fail(
                FrameProblem::TruncatedData,
                truncated_data_detail(len, left as u64),
            );
        }
        let start = self.pos + HEADER_LEN;
        let end = start + len as usize;
        let footer: [u8; FOOTER_LEN] = data[end..end + FOOTER_LEN]
            .try_into()
            .expect("FOOTER_LEN bytes");
        let record = MappedRecord {
            range: start..end,
            stored_crc: u32::from_le_bytes(footer),
            index: self.index,
            offset,
        };
        self.pos = end + FOOTER_LEN;
        self.index += 1;
        // Headers are read one per record, at strides the hardware prefetcher does not
        // carry across pages: ask for the bytes a little ahead.
        if let Some(ahead) = data.get(self.pos + PREFETCH_AHEAD) {
            frame::prefetch(ahead);
        }
        Ok(Some(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tfrecord::reader::tests::stream;
    use crate::tfrecord::RecordReader;

    fn write(name: &str, bytes: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tfshard-mapped-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// The records read, and the error that ended the reading.
    type Outcome = (Vec<Vec<u8>>, Option<String>);

    /// What `MappedRecords` and `RecordReader` (data CRC off) each read.
    fn both(path: &Path, bytes: &[u8]) -> (Outcome, Outcome) {
        let mut mapped = MappedRecords::open(path).unwrap();
        let (mut a, mut a_err) = (Vec::new(), None);
        loop {
            match mapped.next_record() {
                Ok(Some(r)) => {
                    let map = mapped.map().unwrap();
                    assert_eq!(frame::masked_crc32c(&map[r.range.clone()]), r.stored_crc);
                    a.push(map[r.range].to_vec());
                }
                Ok(None) => break,
                Err(e) => {
                    a_err = Some(e.to_string());
                    break;
                }
            }
        }
        let mut reader = RecordReader::new(bytes)
            .with_total_len(bytes.len() as u64)
            .with_path(path)
            .with_check_data_crc(false);
        let (mut b, mut b_err) = (Vec::new(), None);
        loop {
            match reader.read_record() {
                Ok(Some(r)) => b.push(r.to_vec()),
                Ok(None) => break,
                Err(e) => {
                    b_err = Some(e.to_string());
                    break;
                }
            }
        }
        ((a, a_err), (b, b_err))
    }

    #[test]
    fn agrees_with_the_stream_reader_on_every_truncation() {
        let bytes = stream(&[b"", b"first", &[9u8; 300], b"last"]);
        for cut in 0..=bytes.len() {
            let path = write(&format!("cut-{cut}.tfrecord"), &bytes[..cut]);
            let (a, b) = both(&path, &bytes[..cut]);
            assert_eq!(a, b, "cut at {cut}");
            std::fs::remove_file(path).unwrap();
        }
    }

    #[test]
    fn agrees_with_the_stream_reader_on_a_bad_length() {
        let mut bytes = stream(&[b"first", b"second"]);
        bytes[21 + 3] ^= 4;
        let path = write("bad-length.tfrecord", &bytes);
        let (a, b) = both(&path, &bytes);
        assert_eq!(a, b);
        assert!(a.1.unwrap().contains("record 1"));
        // A huge length fails as truncated, with no allocation.
        let mut huge = frame::encode_header(1 << 63).to_vec();
        huge.extend_from_slice(&[0; 40]);
        let path = write("huge.tfrecord", &huge);
        let (a, b) = both(&path, &huge);
        assert_eq!(a, b);
    }
}
