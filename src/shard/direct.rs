//! Shard files written around the page cache.
//!
//! A conversion writes each shard once, and the fsync before its rename waits until every
//! byte is on the disk. Through the page cache that costs a copy into freshly allocated
//! cache pages per byte (the largest single cost of a conversion on a fast decoder, and
//! the noisiest: first-touch page allocation) and leaves the disk idle until writeback
//! starts. [`DirectFile`] instead gathers the bytes in one page-aligned buffer and writes
//! it with `O_DIRECT` as each block of [`DIRECT_BUFFER_BYTES`] fills, so the disk works
//! while the run goes on and the cache is not flooded with a table's worth of shards.
//! The tail is written padded to the alignment, then the file is cut to its length.
//!
//! Where `O_DIRECT` is not offered (a file system that refuses it at open or at the first
//! write, or another OS), the same aligned writes go through the page cache: the bytes
//! on disk are the same either way.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Bytes gathered before each write (a multiple of every common block size).
pub const DIRECT_BUFFER_BYTES: usize = 4 << 20;

/// Offsets and lengths of direct writes are multiples of this (512- and 4096-byte
/// sectors alike; the buffer itself is page-aligned).
const ALIGN: usize = 4096;

/// A new file written in aligned blocks, around the page cache where the system allows.
pub struct DirectFile {
    file: File,
    buf: memmap2::MmapMut,
    /// Bytes in `buf`.
    len: usize,
    /// File offset of `buf[0]`.
    offset: u64,
    /// Whether the file is open with `O_DIRECT` (false after a fallback).
    direct: bool,
}

impl DirectFile {
    /// Creates (or truncates) `path`; `direct: false` writes through the page cache.
    ///
    /// # Errors
    ///
    /// The I/O error of creating the file or its buffer.
    pub fn create(path: &Path, direct: bool) -> io::Result<DirectFile> {
        let (file, direct) = open(path, direct)?;
        Ok(DirectFile {
            file,
            buf: memmap2::MmapMut::map_anon(DIRECT_BUFFER_BYTES)?,
            len: 0,
            offset: 0,
            direct,
        })
    }

    /// Whether the bytes go around the page cache.
    #[cfg(test)]
    fn is_direct(&self) -> bool {
        self.direct
    }

    /// Bytes written so far (on disk or in the buffer).
    pub fn written(&self) -> u64 {
        self.offset + self.len as u64
    }

    /// Writes the buffer's first `len` bytes (a multiple of [`ALIGN`]) at its offset.
    fn write_block(&mut self, len: usize) -> io::Result<()> {
        match self.file.write_all_at(&self.buf[..len], self.offset) {
            Err(e) if self.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                // The file system takes O_DIRECT at open but not these writes.
                self.direct = false;
                clear_direct(&self.file)?;
                self.file.write_all_at(&self.buf[..len], self.offset)
            }
            other => other,
        }
    }

    /// Writes what is buffered and cuts the file to its length; returns the file (not
    /// yet synced).
    ///
    /// # Errors
    ///
    /// The I/O error of the last write or the truncation.
    pub fn finish(mut self) -> io::Result<File> {
        if self.len > 0 {
            let padded = self.len.next_multiple_of(ALIGN);
            self.buf[self.len..padded].fill(0);
            self.write_block(padded)?;
        }
        let size = self.written();
        if !self.len.is_multiple_of(ALIGN) {
            self.file.set_len(size)?;
        }
        Ok(self.file)
    }
}

impl Write for DirectFile {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(DIRECT_BUFFER_BYTES - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&data[..n]);
        self.len += n;
        if self.len == DIRECT_BUFFER_BYTES {
            self.write_block(DIRECT_BUFFER_BYTES)?;
            self.offset += DIRECT_BUFFER_BYTES as u64;
            self.len = 0;
        }
        Ok(n)
    }

    /// Nothing to do: only whole blocks can be written before [`DirectFile::finish`].
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(target_os = "linux")]
fn open(path: &Path, direct: bool) -> io::Result<(File, bool)> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    if direct {
        match options.clone().custom_flags(libc::O_DIRECT).open(path) {
            Ok(file) => return Ok((file, true)),
            // tmpfs (before Linux 6.6) and some FUSE file systems refuse it.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((options.open(path)?, false))
}

#[cfg(not(target_os = "linux"))]
fn open(path: &Path, _direct: bool) -> io::Result<(File, bool)> {
    Ok((File::create(path)?, false))
}

#[cfg(target_os = "linux")]
fn clear_direct(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor this File owns, with no pointer arguments.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_DIRECT) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn clear_direct(_file: &File) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tfshard-direct-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch folder");
        dir
    }

    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    /// Any length, written in pieces of any size, reads back exactly, direct or not.
    #[test]
    fn every_length_reads_back_exactly() {
        let dir = scratch("lengths");
        let total = 2 * DIRECT_BUFFER_BYTES + 5000;
        let data = bytes(total);
        for direct in [true, false] {
            for (len, piece) in [
                (0, 1),
                (1, 1),
                (ALIGN, 100),
                (ALIGN + 1, 4097),
                (DIRECT_BUFFER_BYTES, 1 << 20),
                (total, 3 << 20),
            ] {
                let path = dir.join(format!("{direct}-{len}"));
                let mut f = DirectFile::create(&path, direct).expect("create");
                for chunk in data[..len].chunks(piece) {
                    f.write_all(chunk).expect("write");
                }
                assert_eq!(f.written(), len as u64);
                f.flush().expect("flush");
                drop(f.finish().expect("finish"));
                assert_eq!(std::fs::read(&path).expect("read"), &data[..len], "{len}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Where the test folder's file system takes O_DIRECT, the file is opened with it.
    #[test]
    fn the_direct_flag_is_used_where_offered() {
        let dir = scratch("flag");
        let path = dir.join("f");
        let f = DirectFile::create(&path, true).expect("create");
        if !f.is_direct() {
            eprintln!("skipped: {} refuses O_DIRECT", dir.display());
            return;
        }
        let mut f = f;
        f.write_all(&bytes(DIRECT_BUFFER_BYTES + 10))
            .expect("write");
        assert!(f.is_direct(), "a full block was written directly");
        drop(f.finish().expect("finish"));
        assert_eq!(
            std::fs::metadata(&path).expect("stat").len(),
            DIRECT_BUFFER_BYTES as u64 + 10
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
