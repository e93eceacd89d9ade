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
use std::time::SystemTime;

use memmap2::{Advice, Mmap};

use crate::error::{Error, ErrorKind, FrameProblem, Result};
use crate::tfrecord::frame::{self, FOOTER_LEN, HEADER_LEN};
use crate::tfrecord::reader::{frame_error, truncated_data_detail, truncated_header_detail};

/// How far ahead of the walk to prefetch.
const PREFETCH_AHEAD: usize = 2048;

/// Bytes shared by the records that point into them: a mapped file (its map the owner,
/// cloned by reference count), or the body of a store's ranged read.
pub type SharedBytes = bytes::Bytes;

/// A map as the owner of [`SharedBytes`].
struct Owner(Arc<Mmap>);

impl AsRef<[u8]> for Owner {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// A file's size and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            len: meta.len(),
            modified: meta.modified().ok(),
        }
    }
}

/// A walked file's map, kept for reads out of order (the write-time shuffle gathers the
/// records once every input was read), with the size and modification time the file had
/// when it was mapped: [`KeptMap::check_unchanged`] refuses a file written since.
#[derive(Debug)]
pub struct KeptMap {
    map: Arc<Mmap>,
    name: PathBuf,
    path: PathBuf,
    stamp: Stamp,
}

impl KeptMap {
    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// The file as error messages name it.
    pub fn name(&self) -> &Path {
        &self.name
    }

    /// Tells the kernel the walk is over: reads from now on are out of order (the map
    /// was advised sequential for the walk, whose pages the kernel may drop first).
    pub fn walked(&self) {
        // Only a hint: reading works the same without it.
        let _ = self.map.advise(Advice::Normal);
    }

    /// Checks that the file still has the size and modification time it had when it was
    /// mapped: the records read from the map since were checked then.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InputChanged`] naming the file; the error of `stat`.
    pub fn check_unchanged(&self) -> Result<()> {
        let meta =
            std::fs::metadata(&self.path).map_err(|e| Error::from(e).with_file(&self.name))?;
        let now = Stamp::of(&meta);
        if now == self.stamp {
            return Ok(());
        }
        let detail = if now.len == self.stamp.len {
            format!("modified after it was read ({} bytes)", now.len)
        } else {
            format!("{} bytes when read, {} bytes now", self.stamp.len, now.len)
        };
        Err(Error::new(ErrorKind::InputChanged { detail }).with_file(&self.name))
    }
}

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
    map: Option<Arc<Mmap>>,
    /// The map's bytes, as the records' batches hold them.
    shared: Option<SharedBytes>,
    path: PathBuf,
    /// The file as error messages name it (its path unless [`MappedRecords::named`]).
    name: PathBuf,
    stamp: Stamp,
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
        let meta = file
            .metadata()
            .map_err(|e| Error::from(e).with_file(path))?;
        let (len, stamp) = (meta.len(), Stamp::of(&meta));
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
            shared: map.clone().map(|m| SharedBytes::from_owner(Owner(m))),
            map,
            path: path.to_path_buf(),
            name: path.to_path_buf(),
            stamp,
            pos: 0,
            index: 0,
            poisoned: false,
        })
    }

    /// The map the records point into (`None` for an empty file).
    pub fn map(&self) -> Option<&SharedBytes> {
        self.shared.as_ref()
    }

    /// The path mapped.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Names the file in error messages as `name` (the input as the user gave it, say)
    /// instead of by its path.
    pub fn named(mut self, name: &Path) -> MappedRecords {
        self.name = name.to_path_buf();
        self
    }

    /// The map, kept for reads out of order after the walk (`None` for an empty file).
    pub fn keep(&self) -> Option<KeptMap> {
        let map = self.map.clone()?;
        Some(KeptMap {
            map,
            name: self.name.clone(),
            path: self.path.clone(),
            stamp: self.stamp,
        })
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
                Some(&self.name),
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
        let path = crate::test_dir(&format!("mapped-{name}")).join(name);
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
    fn a_kept_map_refuses_a_file_written_since() {
        let mut bytes = Vec::new();
        frame::append_record(&mut bytes, b"first");
        let path = write("kept.tfrecord", &bytes);
        let walk = MappedRecords::open(&path)
            .unwrap()
            .named(Path::new("kept.tfrecord"));
        let kept = walk.keep().unwrap();
        assert_eq!(kept.bytes(), &bytes[..]);
        kept.check_unchanged().unwrap();
        frame::append_record(&mut bytes, b"second");
        std::fs::write(&path, &bytes).unwrap();
        let err = kept.check_unchanged().unwrap_err().to_string();
        assert!(
            err.starts_with("kept.tfrecord: changed during the run:"),
            "{err}"
        );
        assert!(err.contains("21 bytes when read, 43 bytes now"), "{err}");
        // An empty file has no map to keep.
        let empty = write("kept-empty.tfrecord", b"");
        assert!(MappedRecords::open(&empty).unwrap().keep().is_none());
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
