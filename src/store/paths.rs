//! File operations on a path that may be a URL, for the readers (`verify`, `inspect`,
//! `schema`, `bench`): each one through the path's [`Storage`](super::Storage), with the
//! reader's settings (`io`) for a store.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::storage::{resolve, storage_of, Blob};
use super::IoOptions;
use crate::error::Result;

/// A readable byte source and its length.
pub type Opened = (Box<dyn Read + Send>, u64);

/// Opens a file or object for reading from its start.
///
/// # Errors
///
/// The file cannot be opened, or a store error naming the URL.
pub fn open(path: &Path, io: IoOptions) -> Result<Opened> {
    let blob = Blob::head(path, io)?;
    Ok((blob.open()?, blob.size()))
}

/// The first `n` bytes (fewer when the file is shorter).
///
/// # Errors
///
/// As [`open`].
pub fn head_bytes(path: &Path, n: usize, io: IoOptions) -> Result<Vec<u8>> {
    let blob = Blob::head(path, io)?;
    let end = blob.size().min(n as u64);
    if end == 0 {
        return Ok(Vec::new());
    }
    Ok(blob.read_range(0..end)?.to_vec())
}

/// A whole (small) file.
///
/// # Errors
///
/// As [`open`].
pub fn read(path: &Path, io: IoOptions) -> Result<Vec<u8>> {
    Ok(storage_of(path, io)?.read(&resolve(path, io)?)?.to_vec())
}

/// The size of a file or object.
///
/// # Errors
///
/// As [`open`].
pub fn len(path: &Path, io: IoOptions) -> Result<u64> {
    Ok(Blob::head(path, io)?.size())
}

/// Whether a path names a folder (a URL: a prefix with objects below it, and no object
/// of that name).
///
/// # Errors
///
/// A local path that does not exist; a URL with neither an object nor objects below it
/// (`not found`).
pub fn is_dir(path: &Path, io: IoOptions) -> Result<bool> {
    storage_of(path, io)?.is_dir(&resolve(path, io)?)
}

/// Where the bytes at `path` can be memory-mapped and read by the local file system's
/// calls, if they can (a local file, `file://` resolved); `None` for a store URL.
///
/// # Errors
///
/// An unsupported URL scheme.
pub fn local_path(path: &Path, io: IoOptions) -> Result<Option<PathBuf>> {
    Ok(storage_of(path, io)?.local_path(&resolve(path, io)?))
}

/// The files directly in a folder (or objects directly below a prefix): their paths, by
/// name.
///
/// # Errors
///
/// The folder cannot be listed.
pub fn files_in(dir: &Path, io: IoOptions) -> Result<Vec<PathBuf>> {
    let (files, _) = storage_of(dir, io)?.list_dir(&resolve(dir, io)?)?;
    Ok(files
        .into_iter()
        .filter_map(|o| o.path.file_name().map(|name| dir.join(name)))
        .collect())
}
