//! File operations on a path that may be a URL: what the readers (`verify`, `inspect`,
//! `schema`, `bench`) need, local paths through `std::fs`, URLs through the store with
//! the reader's settings (`io`).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::{head, list_dir, locate, read_all, IoOptions, Place, RemoteRead};
use crate::error::{Error, Result};

/// A readable byte source and its length.
pub type Opened = (Box<dyn Read + Send>, u64);

fn io_at(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::from(e).with_file(path)
}

/// Opens a file or object for reading from its start.
///
/// # Errors
///
/// The file cannot be opened, or a store error naming the URL.
pub fn open(path: &Path, io: IoOptions) -> Result<Opened> {
    match locate(path, io)? {
        Place::Local(p) => {
            let file = File::open(&p).map_err(io_at(path))?;
            let len = file.metadata().map_err(io_at(path))?.len();
            Ok((Box::new(file), len))
        }
        Place::Remote(url) => {
            let r = RemoteRead::open(&url)?;
            let len = r.len();
            Ok((Box::new(r), len))
        }
    }
}

/// The first `n` bytes (fewer when the file is shorter).
///
/// # Errors
///
/// As [`open`].
pub fn head_bytes(path: &Path, n: usize, io: IoOptions) -> Result<Vec<u8>> {
    match locate(path, io)? {
        Place::Local(p) => {
            let file = File::open(&p).map_err(io_at(path))?;
            let mut out = Vec::with_capacity(n);
            file.take(n as u64)
                .read_to_end(&mut out)
                .map_err(io_at(path))?;
            Ok(out)
        }
        Place::Remote(url) => {
            let object = head(&url)?;
            let end = object.size.min(n as u64);
            if end == 0 {
                return Ok(Vec::new());
            }
            let bytes = super::block_on(super::get_range(&url, 0..end, object.etag.as_deref()))?;
            Ok(bytes.to_vec())
        }
    }
}

/// A whole (small) file.
///
/// # Errors
///
/// As [`open`].
pub fn read(path: &Path, io: IoOptions) -> Result<Vec<u8>> {
    match locate(path, io)? {
        Place::Local(p) => std::fs::read(&p).map_err(io_at(path)),
        Place::Remote(url) => Ok(read_all(&url)?.to_vec()),
    }
}

/// The size of a file or object.
///
/// # Errors
///
/// As [`open`].
pub fn len(path: &Path, io: IoOptions) -> Result<u64> {
    match locate(path, io)? {
        Place::Local(p) => Ok(std::fs::metadata(&p).map_err(io_at(path))?.len()),
        Place::Remote(url) => Ok(head(&url)?.size),
    }
}

/// Whether a path names a folder (a URL: a prefix with objects below it, and no object
/// of that name).
///
/// # Errors
///
/// A local path that does not exist; a URL with neither an object nor objects below it
/// (`not found`).
pub fn is_dir(path: &Path, io: IoOptions) -> Result<bool> {
    match locate(path, io)? {
        Place::Local(p) => Ok(std::fs::metadata(&p).map_err(io_at(path))?.is_dir()),
        Place::Remote(url) => {
            if url.key().is_empty() {
                return Ok(true);
            }
            let (objects, dirs) = list_dir(&url)?;
            if !objects.is_empty() || !dirs.is_empty() {
                return Ok(true);
            }
            head(&url).map(|_| false)
        }
    }
}

/// The files directly in a folder (or objects directly below a prefix): their paths, by
/// name.
///
/// # Errors
///
/// The folder cannot be listed.
pub fn files_in(dir: &Path, io: IoOptions) -> Result<Vec<PathBuf>> {
    match locate(dir, io)? {
        Place::Local(p) => {
            let mut out = Vec::new();
            for entry in std::fs::read_dir(&p).map_err(io_at(dir))? {
                let entry = entry.map_err(io_at(dir))?;
                if entry.path().is_file() {
                    out.push(dir.join(entry.file_name()));
                }
            }
            out.sort();
            Ok(out)
        }
        Place::Remote(url) => {
            let (objects, _) = list_dir(&url)?;
            Ok(objects
                .iter()
                .map(|o| dir.join(o.url.file_name()))
                .collect())
        }
    }
}
