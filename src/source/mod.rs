//! Inputs: Parquet files, Delta and Iceberg tables as Arrow batches, image folders and TFRecord
//! files, each in input order.

mod contain;
pub mod delta;
mod fixed_list;
pub mod hive;
pub mod iceberg;
pub mod images;
pub mod parquet;
pub mod table;
pub mod tfrecord;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The files below a local folder that `takes` (given each file's name) keeps: `(path
/// relative to the folder with '/' separators, path)`, in byte order of the relative
/// path (as Python's `sorted()`), never entering a `_`/`.` folder or taking such a file.
///
/// # Errors
///
/// A folder that cannot be read, named.
pub(crate) fn walk(dir: &Path, takes: impl Fn(&str) -> bool) -> Result<Vec<(String, PathBuf)>> {
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    let walker = walkdir::WalkDir::new(dir).follow_links(false).into_iter();
    let walker = walker.filter_entry(|e| {
        e.depth() == 0 || !e.file_name().to_string_lossy().starts_with(['_', '.'])
    });
    for entry in walker {
        let entry = entry.map_err(|e| {
            let at = e
                .path()
                .map_or_else(|| dir.to_path_buf(), Path::to_path_buf);
            Error::from(std::io::Error::from(e)).with_file(at)
        })?;
        if entry.file_type().is_file() && takes(&entry.file_name().to_string_lossy()) {
            let rel = entry.path().strip_prefix(dir).unwrap_or(entry.path());
            let rel: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            found.push((rel.join("/"), entry.path().to_path_buf()));
        }
    }
    found.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    Ok(found)
}
