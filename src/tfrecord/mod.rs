//! TFRecord files: framing, reading, writing, compression. Knows nothing of Arrow or
//! of what a record holds.

pub mod compress;
pub mod deflate;
pub mod frame;
pub mod mapped;
pub mod ranges;
pub mod reader;
pub mod writer;

use std::io::{self, BufReader, Read};
use std::path::Path;

pub use compress::Compression;
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

/// Resolves `--compression auto` for a file by its name and first bytes.
///
/// # Errors
///
/// The file cannot be opened or read.
pub fn detect_compression(path: &Path) -> Result<Compression> {
    let head = crate::store::paths::head_bytes(path, frame::HEADER_LEN)?;
    let filled = head.len();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    Ok(Compression::detect(&name, &head[..filled]))
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

/// Opens a TFRecord file for reading; `None` for compression means auto-detect.
///
/// # Errors
///
/// The file cannot be opened.
pub fn open(path: &Path, compression: Option<Compression>) -> Result<RecordReader<Source>> {
    let compression = match compression {
        Some(c) => c,
        None => detect_compression(path)?,
    };
    let (file, len) = crate::store::paths::open(path)?;
    let reader = RecordReader::new(decompress(file, compression)).with_path(path);
    Ok(match compression {
        Compression::None => reader.with_total_len(len),
        _ => reader,
    })
}
