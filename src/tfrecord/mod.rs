//! TFRecord files: framing, reading, writing, compression. Knows nothing of Arrow or
//! of what a record holds.

pub mod compress;
pub(crate) mod deflate;
pub(crate) mod frame;
pub(crate) mod mapped;
pub(crate) mod ranges;
pub mod reader;
pub mod writer;

use std::io::{self, BufReader, Read};
use std::path::Path;

pub use compress::Compression;
pub use frame::append_record;
pub use mapped::MappedRecords;
pub use reader::RecordReader;
pub use writer::RecordWriter;

use crate::error::Result;

/// A boxed byte source, so plain and compressed files share one reader type.
pub type Source = Box<dyn Read + Send>;

/// Computes the plain CRC32C and length of every byte read through it: the whole-file
/// checksum a manifest lists, in the same pass as the record checks.
pub struct HashingReader<R> {
    inner: R,
    crc: u32,
    bytes: u64,
}

impl<R> HashingReader<R> {
    /// Wraps a reader.
    pub fn new(inner: R) -> HashingReader<R> {
        HashingReader {
            inner,
            crc: 0,
            bytes: 0,
        }
    }

    /// The CRC32C of the bytes read so far.
    pub fn crc32c(&self) -> u32 {
        self.crc
    }

    /// The bytes read so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.crc = frame::crc32c_append(self.crc, &buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

/// Wraps a raw byte source (the file's bytes on disk) in the right decompressor.
pub fn decompress<R: Read + Send + 'static>(raw: R, compression: Compression) -> Source {
    match compression {
        Compression::None => Box::new(raw),
        Compression::Gzip => Box::new(compress::GzipReader::new(BufReader::with_capacity(
            reader::BLOCK_BYTES,
            raw,
        ))),
        Compression::Zlib => Box::new(compress::ZlibReader::new(BufReader::with_capacity(
            reader::BLOCK_BYTES,
            raw,
        ))),
    }
}

/// Opens a local TFRecord file for reading; `None` for compression means: by its name,
/// else by its first bytes ([`Compression::detect`]). (Shards in a store are opened by
/// `records::open`, through the store.)
///
/// # Errors
///
/// The file cannot be opened or read.
pub fn open(path: &Path, compression: Option<Compression>) -> Result<RecordReader<Source>> {
    let at = |e: io::Error| crate::error::Error::from(e).with_file(path);
    let mut file = std::fs::File::open(path).map_err(at)?;
    let len = file.metadata().map_err(at)?.len();
    let compression = match compression {
        Some(c) => c,
        None => {
            let head = read_head(&mut file).map_err(at)?;
            io::Seek::rewind(&mut file).map_err(at)?;
            Compression::detect(&file_name(path), &head)
        }
    };
    Ok(reader_of(Box::new(file), len, compression, path))
}

/// The first bytes of a stream: a record header's worth, or all of a shorter one. By
/// these (and the name) [`Compression::detect`] tells how a file is compressed.
pub(crate) fn read_head(r: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(frame::HEADER_LEN);
    Read::take(&mut *r, frame::HEADER_LEN as u64).read_to_end(&mut head)?;
    Ok(head)
}

/// The name `--compression auto` looks at.
pub(crate) fn file_name(path: &Path) -> std::borrow::Cow<'_, str> {
    path.file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default()
}

/// A reader of the file whose bytes on disk `raw` yields (`len` of them).
pub(crate) fn reader_of(
    raw: Source,
    len: u64,
    compression: Compression,
    path: &Path,
) -> RecordReader<Source> {
    let reader = RecordReader::new(decompress(raw, compression)).with_path(path);
    match compression {
        Compression::None => reader.with_total_len(len),
        _ => reader,
    }
}
