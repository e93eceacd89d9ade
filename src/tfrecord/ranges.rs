//! Checking one uncompressed record file on every core.
//!
//! Each header says where the next record starts, so one thread walking a file reads,
//! frames and checksums every byte alone. [`check_file`] cuts the file into ranges and
//! walks them all at once: the walk of a range starts at its first offset that holds a
//! sound header (a length and that length's CRC; range 0 starts at 0) and checks every
//! record that starts inside the range, reading past its end for the last one. Where
//! each walk stopped must be exactly where the next one started, the first at 0 and the
//! last at the end of the file: then the walks followed the file's one chain of records
//! (a header that only looks sound, 1 in 2³² at a wrong offset, breaks the tiling), every
//! record's data CRC was checked, and the ranges' CRC32Cs combine, in order, into the
//! whole file's. Reads, never a memory map: a file cut short meanwhile ends in a short
//! read, not `SIGBUS`.
//!
//! It answers only "every record is sound, there are N, and this is the file's CRC32C":
//! at any doubt it returns `None`, and the caller walks the file the ordinary way to
//! report exactly what is wrong and where.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use rayon::prelude::*;

use super::frame::{self, FOOTER_LEN, HEADER_LEN};

/// Bytes each walk reads at a time (more for a larger record).
const READ_BYTES: usize = 8 << 20;

/// The smallest range worth a walk of its own.
const MIN_RANGE_BYTES: u64 = 8 << 20;

/// Records of at least this size have the range's CRC32C combined from theirs (one pass
/// over their bytes); smaller ones are checksummed again whole, while in the cache.
const COMBINE_FROM_BYTES: usize = 4096;

/// What [`check_file`] found in a sound file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileCheck {
    /// Records in the file.
    pub records: u64,
    /// CRC32C of every byte of the file.
    pub crc32c: u32,
}

/// Checks every record of the uncompressed record file at `path`, whose first `len`
/// bytes are read, in `ranges` walks at once (at least 8 MiB each): framing, both CRCs,
/// no bytes after the last record. `None` at any problem or doubt.
///
/// # Errors
///
/// The I/O error of opening the file, or of a read that failed (a read cut short by a
/// shrinking file is `None`).
pub fn check_file(path: &Path, len: u64, ranges: usize) -> std::io::Result<Option<FileCheck>> {
    check_ranges(path, len, ranges, MIN_RANGE_BYTES)
}

/// [`check_file`] with ranges of at least `min_range` bytes.
fn check_ranges(
    path: &Path,
    len: u64,
    ranges: usize,
    min_range: u64,
) -> std::io::Result<Option<FileCheck>> {
    let file = File::open(path)?;
    let size = (len / ranges.max(1) as u64).max(min_range);
    let starts: Vec<u64> = (0..len).step_by(size as usize).collect();
    let walks = starts
        .par_iter()
        .map(|&start| walk(&file, len, start, (start + size).min(len)))
        .collect::<std::io::Result<Vec<Option<Walk>>>>()?;
    let (mut at, mut records, mut crc) = (0u64, 0u64, 0u32);
    for walk in walks {
        match walk {
            None => return Ok(None),
            Some(Walk::NoStart) => {}
            Some(Walk::Chain {
                first,
                next,
                records: n,
                crc32c,
            }) => {
                if first != at {
                    return Ok(None);
                }
                crc = frame::crc32c_combine(crc, crc32c, next - first);
                records += n;
                at = next;
            }
        }
    }
    Ok((at == len).then_some(FileCheck {
        records,
        crc32c: crc,
    }))
}

/// One range's walk.
#[derive(Debug, PartialEq, Eq)]
enum Walk {
    /// No offset of the range holds a sound header (one record spans it).
    NoStart,
    /// Records from `first` to `next` (exclusive), every one sound; `crc32c` of those
    /// bytes.
    Chain {
        first: u64,
        next: u64,
        records: u64,
        crc32c: u32,
    },
}

/// Walks the records that start in `start..end`; `None` at a bad record or a short read.
fn walk(file: &File, len: u64, start: u64, end: u64) -> std::io::Result<Option<Walk>> {
    let mut window = Window::new(file, len, end);
    let mut at = start;
    if start > 0 {
        match window.find_header(start, end)? {
            Some(found) => at = found,
            None => return Ok(Some(Walk::NoStart)),
        }
    }
    let first = at;
    let (mut records, mut crc) = (0u64, 0u32);
    while at < end {
        let Some(total) = window.record_len(at)? else {
            return Ok(None);
        };
        let Some(record) = window.get(at, total)? else {
            return Ok(None);
        };
        let data = &record[HEADER_LEN..total - FOOTER_LEN];
        let stored = u32::from_le_bytes(record[total - FOOTER_LEN..].try_into().expect("4"));
        let raw = frame::crc32c(data);
        if frame::mask(raw) != stored {
            return Ok(None);
        }
        crc = if total >= COMBINE_FROM_BYTES {
            let crc = frame::crc32c_append(crc, &record[..HEADER_LEN]);
            let crc = frame::crc32c_combine(crc, raw, data.len() as u64);
            frame::crc32c_append(crc, &record[total - FOOTER_LEN..])
        } else {
            frame::crc32c_append(crc, record)
        };
        records += 1;
        at += total as u64;
    }
    Ok(Some(Walk::Chain {
        first,
        next: at,
        records,
        crc32c: crc,
    }))
}

/// A forward-moving view of a file's bytes, read in large blocks.
struct Window<'a> {
    file: &'a File,
    len: u64,
    /// Reads ahead stop here (the range's end), but for bytes asked for.
    stop: u64,
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    base: u64,
    /// Bytes of `buf` read.
    filled: usize,
}

impl<'a> Window<'a> {
    fn new(file: &'a File, len: u64, stop: u64) -> Window<'a> {
        Window {
            file,
            len,
            stop,
            buf: Vec::new(),
            base: 0,
            filled: 0,
        }
    }

    /// Bytes `off..off + n` (never before an earlier call's `off`); `None` past the end
    /// of the file or when the file has shrunk.
    fn get(&mut self, off: u64, n: usize) -> std::io::Result<Option<&[u8]>> {
        let Some(end) = off.checked_add(n as u64).filter(|&e| e <= self.len) else {
            return Ok(None);
        };
        if off < self.base {
            return Ok(None);
        }
        if end > self.base + self.filled as u64 {
            // Keep what is still ahead, then read on.
            let keep = (off - self.base).min(self.filled as u64) as usize;
            self.buf.copy_within(keep..self.filled, 0);
            self.filled -= keep;
            self.base += keep as u64;
            if off > self.base {
                // Skipped past everything read.
                (self.base, self.filled) = (off, 0);
            }
            let ahead = self.stop.saturating_sub(self.base).min(READ_BYTES as u64) as usize;
            let target = n.max(ahead).min((self.len - self.base) as usize);
            if self.buf.len() < target {
                self.buf.resize(target, 0);
            }
            let read_at = self.base + self.filled as u64;
            match self
                .file
                .read_exact_at(&mut self.buf[self.filled..target], read_at)
            {
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                other => other?,
            }
            self.filled = target;
        }
        let start = (off - self.base) as usize;
        Ok(Some(&self.buf[start..start + n]))
    }

    /// The first offset in `from..to` whose 12 bytes are a sound header of a record
    /// that ends within the file.
    fn find_header(&mut self, from: u64, to: u64) -> std::io::Result<Option<u64>> {
        let len = self.len;
        let mut at = from;
        while at < to {
            // Headers that begin before `to`, and the 11 bytes the last of them needs.
            let want =
                (((to - at) as usize).min(READ_BYTES) + HEADER_LEN - 1).min((len - at) as usize);
            if want < HEADER_LEN {
                return Ok(None);
            }
            let Some(bytes) = self.get(at, want)? else {
                return Ok(None);
            };
            for (p, header) in bytes.windows(HEADER_LEN).enumerate() {
                let n = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
                let room = len - (at + p as u64);
                // The bound first: most offsets hold no length that fits the file.
                if n <= room.saturating_sub((HEADER_LEN + FOOTER_LEN) as u64)
                    && room >= (HEADER_LEN + FOOTER_LEN) as u64
                    && frame::decode_header(header.try_into().expect("12 bytes")) == Ok(n)
                {
                    return Ok(Some(at + p as u64));
                }
            }
            at += (want - HEADER_LEN + 1) as u64;
        }
        Ok(None)
    }

    /// The whole length (header, data, footer) of the record at `off`, if its header is
    /// sound and the record ends within the file.
    fn record_len(&mut self, off: u64) -> std::io::Result<Option<usize>> {
        let len = self.len;
        let Some(header) = self.get(off, HEADER_LEN)? else {
            return Ok(None);
        };
        let Ok(n) = frame::decode_header(header.try_into().expect("12 bytes")) else {
            return Ok(None);
        };
        Ok(n.checked_add((HEADER_LEN + FOOTER_LEN) as u64)
            .filter(|&total| off + total <= len)
            .and_then(|total| usize::try_from(total).ok()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        crate::test_dir(&format!("ranges-{name}"))
    }

    fn file_of(sizes: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let payload: Vec<u8> = (0..n).map(|j| (i * 7 + j * 13) as u8).collect();
            frame::append_record(&mut out, &payload);
        }
        out
    }

    /// Checks `bytes` in `ranges` ranges (of 4 KiB at least, so that small files are
    /// cut too).
    fn check(bytes: &[u8], dir: &Path, ranges: usize) -> Option<FileCheck> {
        let path = dir.join("f");
        std::fs::write(&path, bytes).expect("write");
        check_ranges(&path, bytes.len() as u64, ranges, 4096).expect("read")
    }

    /// Sound files of small records, of records straddling ranges and reads, of records
    /// larger than a range: every record counted and the file's CRC32C exact, whatever
    /// the number of ranges.
    #[test]
    fn sound_files_count_every_record_and_hash_every_byte() {
        let dir = scratch("sound");
        for sizes in [
            vec![],
            vec![0],
            vec![200; 20_000],
            // Records across many 4 KiB ranges, and one larger than a read.
            vec![4096 - 10, 5, 40_000, 3 * 4096 + 1, 7, READ_BYTES + 100, 3],
            (0..500).map(|i| (i * 7919) % 20_000).collect(),
            (0..100).map(|i| 4096 + (i * 7919) % 200_000).collect(),
        ] {
            let bytes = file_of(&sizes);
            // (Many ranges only where they are small: a debug build scans slowly.)
            let many = if bytes.len() < 2 << 20 { 300 } else { 7 };
            for ranges in [1, 2, 7, many] {
                assert_eq!(
                    check(&bytes, &dir, ranges),
                    Some(FileCheck {
                        records: sizes.len() as u64,
                        crc32c: frame::crc32c(&bytes),
                    }),
                    "{} records, {ranges} ranges",
                    sizes.len()
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Any damage (a flipped bit anywhere, a cut, bytes after the last record) is
    /// `None`, never a count.
    #[test]
    fn any_damage_is_none() {
        let dir = scratch("damage");
        for sizes in [
            (0..900)
                .map(|i| (i * 104_729) % 40_000)
                .collect::<Vec<usize>>(),
            (0..300).map(|i| 50_000 + (i * 104_729) % 90_000).collect(),
        ] {
            let bytes = file_of(&sizes);
            for (step, at) in (0..bytes.len()).step_by(bytes.len() / 15).enumerate() {
                let mut bad = bytes.clone();
                bad[at] ^= 1 << (step % 8);
                assert_eq!(check(&bad, &dir, 12), None, "byte {at} flipped");
            }
            for cut in [1, HEADER_LEN, bytes.len() / 2, bytes.len() - 1] {
                assert_eq!(check(&bytes[..cut], &dir, 12), None, "cut at {cut}");
            }
            let mut long = bytes.clone();
            long.extend_from_slice(&[0; 5]);
            assert_eq!(check(&long, &dir, 12), None, "trailing bytes");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
