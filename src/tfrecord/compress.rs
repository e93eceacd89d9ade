//! GZIP and ZLIB record streams, as TensorFlow's `compression_type` reads them.
//!
//! The whole record stream is compressed. Readers read every member of a multi-member
//! gzip file (as TensorFlow does; flate2's `GzDecoder` alone stops after the first) and
//! check that the stream really ended: a stream cut short is truncated data, and bytes
//! after its end are trailing bytes. Writers compress fixed-size chunks at level 6
//! (gzip: one member per chunk, mtime 0; zlib: one stream), each format through one
//! pinned back-end, so output is deterministic (see `tfrecord::deflate`).

use std::io::{self, BufRead, Read, Write};

use flate2::bufread::GzDecoder;
use std::sync::Arc;

use flate2::{Decompress, FlushDecompress, Status};

use super::deflate::{Chunks, DeflatePool, Format, CHUNK_BYTES, GZIP_OVERHEAD};

use crate::error::{Error, ErrorKind, FrameDetail, FrameProblem};
use crate::tfrecord::frame;

pub use super::deflate::LEVEL;

/// How a record stream is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Compression {
    /// Plain framed records.
    #[default]
    None,
    /// One or more gzip members (RFC 1952).
    Gzip,
    /// One zlib stream (RFC 1950).
    Zlib,
}

impl Compression {
    /// The name used on the command line and in the manifest.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Zlib => "zlib",
        }
    }

    /// Parses a name as [`Compression::name`] prints it.
    pub fn from_name(name: &str) -> Option<Compression> {
        match name {
            "none" => Some(Compression::None),
            "gzip" => Some(Compression::Gzip),
            "zlib" => Some(Compression::Zlib),
            _ => None,
        }
    }

    /// The suffix added after `.tfrecord`: `""`, `".gz"` or `".zlib"`.
    pub fn suffix(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip => ".gz",
            Compression::Zlib => ".zlib",
        }
    }

    /// `--compression auto`: by extension (`.gz`, `.zlib`); without one, a first record
    /// header whose length CRC checks means none, else the gzip or zlib magic bytes.
    /// `head` is the file's first bytes (12 or fewer when the file is shorter).
    pub fn detect(file_name: &str, head: &[u8]) -> Compression {
        if file_name.ends_with(".gz") {
            return Compression::Gzip;
        }
        if file_name.ends_with(".zlib") {
            return Compression::Zlib;
        }
        if let Ok(header) = <&[u8; frame::HEADER_LEN]>::try_from(head) {
            if frame::decode_header(header).is_ok() {
                return Compression::None;
            }
        }
        if head.starts_with(&[0x1f, 0x8b]) {
            return Compression::Gzip;
        }
        // RFC 1950: CM = 8 (deflate), CINFO <= 7, and CMF·256 + FLG divisible by 31.
        if head.len() >= 2
            && head[0] & 0x0f == 8
            && head[0] >> 4 <= 7
            && (u16::from(head[0]) << 8 | u16::from(head[1])) % 31 == 0
        {
            return Compression::Zlib;
        }
        Compression::None
    }
}

fn stream_error(problem: FrameProblem, detail: FrameDetail) -> io::Error {
    io::Error::other(Error::new(ErrorKind::Frame { problem, detail }))
}

fn classify(codec: &'static str, err: io::Error) -> io::Error {
    if err.kind() == io::ErrorKind::UnexpectedEof {
        stream_error(
            FrameProblem::TruncatedData,
            FrameDetail::StreamEnds { codec },
        )
    } else {
        stream_error(
            FrameProblem::DataCrc,
            FrameDetail::StreamCorrupt {
                codec,
                cause: err.to_string(),
            },
        )
    }
}

/// Reads every member of a gzip file, and fails on bytes after the last one.
pub struct GzipReader<R: BufRead> {
    state: GzipState<R>,
}

enum GzipState<R: BufRead> {
    /// Before the first member (an input of zero bytes is an empty stream).
    Start(R),
    /// Inside a member (boxed: the decoder's state is large).
    Member(Box<GzDecoder<R>>),
    /// After the end, or after an error.
    Done,
}

impl<R: BufRead> GzipReader<R> {
    /// Reads a gzip stream.
    pub fn new(inner: R) -> GzipReader<R> {
        GzipReader {
            state: GzipState::Start(inner),
        }
    }
}

impl<R: BufRead> Read for GzipReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match std::mem::replace(&mut self.state, GzipState::Done) {
                GzipState::Done => return Ok(0),
                GzipState::Start(mut inner) => {
                    if !inner.fill_buf()?.is_empty() {
                        self.state = GzipState::Member(Box::new(GzDecoder::new(inner)));
                    }
                }
                GzipState::Member(mut decoder) => match decoder.read(buf) {
                    Ok(0) => {
                        if decoder.header().is_none() {
                            // flate2 reports a header cut short as a clean end.
                            return Err(classify("gzip", io::ErrorKind::UnexpectedEof.into()));
                        }
                        let mut inner = (*decoder).into_inner();
                        let rest = inner.fill_buf()?;
                        if rest.is_empty() {
                            return Ok(0);
                        }
                        if rest[0] != 0x1f || rest.get(1).is_some_and(|&b| b != 0x8b) {
                            return Err(stream_error(
                                FrameProblem::TrailingBytes,
                                FrameDetail::AfterStream { codec: "gzip" },
                            ));
                        }
                        self.state = GzipState::Member(Box::new(GzDecoder::new(inner)));
                    }
                    Ok(n) => {
                        self.state = GzipState::Member(decoder);
                        return Ok(n);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                        self.state = GzipState::Member(decoder);
                    }
                    Err(e) => return Err(classify("gzip", e)),
                },
            }
        }
    }
}

/// Reads one zlib stream, and fails when it is cut short or followed by more bytes.
///
/// flate2's `ZlibDecoder` returns a clean end of file for a stream cut short, so this
/// drives `Decompress` itself to see the real end-of-stream status.
pub struct ZlibReader<R: BufRead> {
    inner: R,
    state: Decompress,
    done: bool,
    started: bool,
}

impl<R: BufRead> ZlibReader<R> {
    /// Reads a zlib stream. An empty input is an empty stream.
    pub fn new(inner: R) -> ZlibReader<R> {
        ZlibReader {
            inner,
            state: Decompress::new(true),
            done: false,
            started: false,
        }
    }
}

impl<R: BufRead> Read for ZlibReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while !self.done {
            let input = self.inner.fill_buf()?;
            let eof = input.is_empty();
            if eof && !self.started {
                self.done = true;
                return Ok(0);
            }
            self.started = true;
            let (in_before, out_before) = (self.state.total_in(), self.state.total_out());
            let flush = if eof {
                FlushDecompress::Finish
            } else {
                FlushDecompress::None
            };
            let status = self
                .state
                .decompress(input, buf, flush)
                .map_err(|e| classify("zlib", io::Error::other(e)))?;
            let consumed = (self.state.total_in() - in_before) as usize;
            let produced = (self.state.total_out() - out_before) as usize;
            self.inner.consume(consumed);
            if status == Status::StreamEnd {
                self.done = true;
                if !self.inner.fill_buf()?.is_empty() {
                    return Err(stream_error(
                        FrameProblem::TrailingBytes,
                        FrameDetail::AfterStream { codec: "zlib" },
                    ));
                }
            }
            if produced > 0 {
                return Ok(produced);
            }
            if eof {
                return Err(classify("zlib", io::ErrorKind::UnexpectedEof.into()));
            }
        }
        Ok(0)
    }
}

/// A writer that compresses (or not) what is written to it.
///
/// gzip and zlib go through `tfrecord::deflate` in fixed-size chunks: on the calling
/// thread ([`Encoder::new`]) or on a deflate pool ([`Encoder::with_pool`]),
/// with the same bytes either way.
pub struct Encoder<W: Write> {
    inner: W,
    chunks: Option<Chunks>,
    /// The header could not be written at construction; it goes first on the next write.
    started: bool,
}

impl<W: Write> Encoder<W> {
    /// Starts a stream of the given compression, compressed on this thread.
    pub fn new(inner: W, compression: Compression) -> Encoder<W> {
        Encoder::with_pool(inner, compression, None)
    }

    /// Starts a stream whose chunks compress on `pool` (on this thread when `None`).
    pub fn with_pool(
        inner: W,
        compression: Compression,
        pool: Option<Arc<DeflatePool>>,
    ) -> Encoder<W> {
        let format = match compression {
            Compression::None => None,
            Compression::Gzip => Some(Format::Gzip),
            Compression::Zlib => Some(Format::Zlib),
        };
        Encoder {
            inner,
            chunks: format.map(|f| Chunks::new(f, pool)),
            started: false,
        }
    }

    fn start(&mut self) -> io::Result<()> {
        if !self.started {
            if let Some(chunks) = &self.chunks {
                chunks.start(&mut self.inner)?;
            }
            self.started = true;
        }
        Ok(())
    }

    /// The writer underneath.
    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    /// Ends the stream (writes the trailer) and returns the writer underneath.
    ///
    /// # Errors
    ///
    /// The underlying writer's I/O error.
    pub fn finish(mut self) -> io::Result<W> {
        self.start()?;
        if let Some(chunks) = &mut self.chunks {
            chunks.finish(&mut self.inner)?;
        }
        self.inner.flush()?;
        Ok(self.inner)
    }
}

impl<W: Write> Write for Encoder<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.start()?;
        match &mut self.chunks {
            None => self.inner.write_all(buf),
            Some(chunks) => chunks.write(buf, &mut self.inner),
        }
    }

    /// For gzip and zlib, a sync point: the chunk being filled ends early and every byte
    /// written so far reaches the writer underneath (so its size is exact).
    fn flush(&mut self) -> io::Result<()> {
        self.start()?;
        if let Some(chunks) = &mut self.chunks {
            chunks.flush(&mut self.inner)?;
        }
        self.inner.flush()
    }
}

/// The most bytes that `input` uncompressed bytes can take on disk, written after a sync
/// point in chunks of `CHUNK_BYTES`, each with its framing, plus the stream's trailer.
/// libdeflate's worst case is 5 bytes per 5,000 (stored blocks) plus a header; zlib-rs's
/// is tighter, plus a sync flush per chunk.
pub fn compressed_bound(input: u64) -> u64 {
    let chunks = input.div_ceil(CHUNK_BYTES as u64).max(1);
    input + input / 999 + chunks * (GZIP_OVERHEAD + 16) + 16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tfrecord::reader::tests::problem;

    fn compress(data: &[u8], compression: Compression) -> Vec<u8> {
        let mut enc = Encoder::new(Vec::new(), compression);
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    fn decompress(bytes: &[u8], compression: Compression) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        let result = match compression {
            Compression::Gzip => GzipReader::new(bytes).read_to_end(&mut out),
            Compression::Zlib => ZlibReader::new(bytes).read_to_end(&mut out),
            Compression::None => unreachable!(),
        };
        result.map(|_| out).map_err(Error::from)
    }

    #[test]
    fn round_trip_and_multi_member() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        for c in [Compression::Gzip, Compression::Zlib] {
            assert_eq!(decompress(&compress(&data, c), c).unwrap(), data);
            assert_eq!(decompress(b"", c).unwrap(), b"");
        }
        let mut two = compress(b"first ", Compression::Gzip);
        two.extend(compress(b"second", Compression::Gzip));
        assert_eq!(
            decompress(&two, Compression::Gzip).unwrap(),
            b"first second"
        );
    }

    #[test]
    fn deterministic_bytes() {
        let a = compress(b"same bytes", Compression::Gzip);
        assert_eq!(a, compress(b"same bytes", Compression::Gzip));
        assert_eq!(&a[4..8], &[0, 0, 0, 0], "mtime is 0");
    }

    #[test]
    fn truncation_and_trailing_bytes_are_caught() {
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 256) as u8).collect();
        for c in [Compression::Gzip, Compression::Zlib] {
            let full = compress(&data, c);
            for cut in [1, 2, 5, 11, full.len() / 2, full.len() - 4, full.len() - 1] {
                let err = decompress(&full[..cut], c).expect_err(&format!("{c:?} cut at {cut}"));
                assert!(
                    matches!(
                        problem(&err),
                        FrameProblem::TruncatedData | FrameProblem::DataCrc
                    ),
                    "{c:?} cut at {cut}: {err}"
                );
            }
            let mut trailing = full.clone();
            trailing.extend_from_slice(b"junk");
            let err = decompress(&trailing, c).unwrap_err();
            assert_eq!(problem(&err), FrameProblem::TrailingBytes, "{c:?}");
        }
    }

    #[test]
    fn detect_by_name_then_content() {
        let plain = crate::tfrecord::frame::encode_header(5);
        assert_eq!(Compression::detect("a.tfrecord", &plain), Compression::None);
        assert_eq!(
            Compression::detect("a.tfrecord.gz", &plain),
            Compression::Gzip
        );
        assert_eq!(Compression::detect("a.zlib", &plain), Compression::Zlib);
        let gz = compress(b"x", Compression::Gzip);
        assert_eq!(Compression::detect("a", &gz[..12]), Compression::Gzip);
        let zl = compress(b"x", Compression::Zlib);
        assert_eq!(
            Compression::detect("a", &zl[..zl.len().min(12)]),
            Compression::Zlib
        );
        assert_eq!(Compression::detect("a", b""), Compression::None);
    }

    #[test]
    fn bound_holds_for_incompressible_data() {
        let mut x = 0x1234_5678u32;
        let data: Vec<u8> = (0..200_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        for c in [Compression::Gzip, Compression::Zlib] {
            let out = compress(&data, c);
            assert!((out.len() as u64) <= compressed_bound(data.len() as u64));
        }
    }
}
