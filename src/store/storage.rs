//! Where input bytes come from: [`Storage`], the read side's one home beside the write
//! side's `Destination`. A local folder tree ([`LocalFiles`]) and a store
//! ([`ObjectFiles`]) answer the same questions: what is at a path (its size and ETag),
//! what a folder holds, and the bytes of an object as it was when it was found. A
//! [`Blob`] is one file found, with the storage that reads it. Input discovery, the
//! readers' file operations ([`super::paths`]), the pipeline, `verify`, Parquet's bytes
//! ([`super::ParquetBytes`]), Delta's engine ([`Storage::object_store`]) and Iceberg's
//! storage adapter (the async face) all go through it and ask capabilities
//! ([`Storage::local_path`]), not whether bytes are local; a test below holds the rest
//! of the code to that.
//!
//! Reads are pinned: a ranged or sequential read of an object found with an ETag fails
//! (the store's "precondition failed") rather than mixing two versions of it, and a
//! whole-object read of a listed object uses the size the listing gave (no HEAD).

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use url::Url;

use super::{
    block_on, get_range, head, list, list_dir, locate, IoOptions, Listed, ObjectUrl, Place,
};
use crate::error::{Error, Result};

fn io_at(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::from(e).with_file(path)
}

/// One file or object as a listing or a HEAD found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Its path, as errors and manifests name it (a URL for a store).
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// The ETag (or version) reads are pinned to; `None` on disk.
    pub etag: Option<String>,
    /// When it was last modified, where the storage says.
    pub modified: Option<SystemTime>,
    /// What tells this file from another one at the same path on a storage without
    /// ETags (see [`file_identity`]); `None` in a store, whose ETag does.
    pub identity: Option<String>,
}

/// A local file's identity, compared for equality (never against a clock): its
/// modification time to the nanosecond, its inode and its status-change time
/// (`mtime_ns:ino:ctime_ns`), so that a file rewritten within one second, restored with
/// an older modification time, or rewritten in place with its old one set back, still
/// reads as another file.
pub fn file_identity(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    let ns = |secs: i64, nsec: i64| i128::from(secs) * 1_000_000_000 + i128::from(nsec);
    format!(
        "{}:{}:{}",
        ns(meta.mtime(), meta.mtime_nsec()),
        meta.ino(),
        ns(meta.ctime(), meta.ctime_nsec())
    )
}

/// What is at a path: a folder, or a file as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stat {
    /// A folder (on a store: a prefix with objects below it).
    Dir,
    /// A file, with its size and ETag.
    File(Object),
}

/// Whether `e` says that nothing is there (a missing file or object).
pub fn is_not_found(e: &Error) -> bool {
    super::is_problem(e, super::StoreProblem::NotFound)
        || matches!(e.kind(), crate::error::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::NotFound)
}

/// How inputs below `given` (a path or URL as the command line gives it) are named in
/// manifests and errors: a local path as given (a trailing `/` dropped), a store URL
/// in its one spelling (`s3a://` as `s3://`).
///
/// # Errors
///
/// An unsupported URL scheme.
pub fn shown(given: &Path, io: IoOptions) -> Result<String> {
    Ok(match locate(given, io)? {
        Place::Local(_) => given.display().to_string().trim_end_matches('/').to_owned(),
        Place::Remote(url) => url.to_string(),
    })
}

/// What a reader can ask of the place its inputs are (see the module docs). Paths are
/// full paths or URLs, as the command line gives them.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// The file at `path`: its size, ETag and time.
    ///
    /// # Errors
    ///
    /// Not found (an I/O or store error naming `path`); a folder where a file was
    /// expected.
    fn head(&self, path: &Path) -> Result<Object>;

    /// What is at `path`: a folder (on a store: a prefix with objects below it, tried
    /// first), or a file as found (one HEAD).
    ///
    /// # Errors
    ///
    /// Nothing at `path` (not found).
    fn stat(&self, path: &Path) -> Result<Stat>;

    /// Whether `path` is a folder.
    ///
    /// # Errors
    ///
    /// Nothing at `path` (not found).
    fn is_dir(&self, path: &Path) -> Result<bool> {
        Ok(self.stat(path)? == Stat::Dir)
    }

    /// The whole of a small file not yet found, in one request (no HEAD).
    ///
    /// # Errors
    ///
    /// Not found, or an I/O or store error naming `path`.
    fn read(&self, path: &Path) -> Result<Bytes>;

    /// Every file below folder `dir`, at any depth, with its path relative to `dir`
    /// (`/`-separated), in byte order of that path. Names starting with `_` or `.` are
    /// left out, and so is everything below them (Hadoop's `_SUCCESS`, `.crc` files, a
    /// table's `_delta_log`); links are not followed. An empty list where `dir` holds
    /// nothing or is not there on a store.
    ///
    /// # Errors
    ///
    /// A local folder that cannot be read; a store error naming `dir`.
    fn walk(&self, dir: &Path) -> Result<Vec<(String, Object)>>;

    /// The files `names` (relative to folder `dir`), in that order, found as cheaply as
    /// this storage can: a stat each on disk, one listing of `dir` in a store. `None`
    /// for a name that is not there (or is a folder).
    ///
    /// # Errors
    ///
    /// A file that cannot be looked at; a store error naming `dir`.
    fn find(&self, dir: &Path, names: &[String]) -> Result<Vec<Option<Object>>>;

    /// The files directly in folder `dir`, by name, and the names of its sub-folders.
    ///
    /// # Errors
    ///
    /// A local folder that cannot be read; a store error naming `dir`.
    fn list_dir(&self, dir: &Path) -> Result<(Vec<Object>, Vec<String>)>;

    /// Bytes `range` of `object`, as it was when it was found.
    ///
    /// # Errors
    ///
    /// An I/O or store error naming the object; the object changed since.
    fn read_range(&self, object: &Object, range: Range<u64>) -> Result<Bytes>;

    /// [`Storage::head`] for async callers (a dependency's own async storage trait,
    /// Iceberg's).
    fn head_async<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<Object>>;

    /// [`Storage::read`] for async callers.
    fn read_async<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<Bytes>>;

    /// [`Storage::read_range`] for async callers.
    fn read_range_async<'a>(
        &'a self,
        object: &'a Object,
        range: Range<u64>,
    ) -> BoxFuture<'a, Result<Bytes>>;

    /// The whole of `object` (its found size: no HEAD).
    ///
    /// # Errors
    ///
    /// As [`Storage::read_range`].
    fn read_whole(&self, object: &Object) -> Result<Bytes> {
        if object.size == 0 {
            return Ok(Bytes::new());
        }
        self.read_range(object, 0..object.size)
    }

    /// `object` from its start, as a stream (a store's read a few large ranged GETs
    /// ahead of the reader).
    ///
    /// # Errors
    ///
    /// The file cannot be opened.
    fn open(&self, object: &Object) -> Result<Box<dyn Read + Send>>;

    /// Where the bytes at `path` can be mapped into memory and read by the local file
    /// system's calls, if they can (a local file); `None` in a store.
    fn local_path(&self, path: &Path) -> Option<PathBuf>;

    /// The folder `path` is in (`None` at the root of a file system or a bucket).
    fn parent(&self, path: &Path) -> Option<PathBuf>;

    /// The store's own handle on `object` (its URL, size and ETag), for the store's
    /// readers; `None` on disk.
    #[doc(hidden)]
    fn listed(&self, object: &Object) -> Option<Listed>;

    /// `path` as one name for one file, whatever way it was reached (a local path with
    /// its links resolved, where it exists; a URL as it is), for keys such as a cache's.
    fn canonical(&self, path: &Path) -> PathBuf;

    /// The `object_store` crate's client for folder `dir` and the URL of `dir` in it
    /// (ending in `/`), for a dependency that reads through that crate (Delta's
    /// kernel).
    ///
    /// # Errors
    ///
    /// A local folder that is not there or has no `file://` spelling; a store's
    /// client that cannot be built.
    fn object_store(&self, dir: &Path) -> Result<(Arc<dyn object_store::ObjectStore>, Url)>;
}

/// Files on this machine's disks.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalFiles;

fn local_object(path: &Path, meta: &std::fs::Metadata) -> Object {
    Object {
        path: path.to_path_buf(),
        size: meta.len(),
        etag: None,
        modified: meta.modified().ok(),
        identity: Some(file_identity(meta)),
    }
}

impl Storage for LocalFiles {
    fn head(&self, path: &Path) -> Result<Object> {
        let meta = std::fs::metadata(path).map_err(io_at(path))?;
        if meta.is_dir() {
            return Err(Error::from(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "a folder where a file was expected",
            ))
            .with_file(path));
        }
        Ok(local_object(path, &meta))
    }

    fn stat(&self, path: &Path) -> Result<Stat> {
        let meta = std::fs::metadata(path).map_err(io_at(path))?;
        Ok(if meta.is_dir() {
            Stat::Dir
        } else {
            Stat::File(local_object(path, &meta))
        })
    }

    fn read(&self, path: &Path) -> Result<Bytes> {
        Ok(Bytes::from(std::fs::read(path).map_err(io_at(path))?))
    }

    // A local file's calls are quick and blocking: answered at once, as the
    // synchronous ones.
    fn head_async<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<Object>> {
        Box::pin(std::future::ready(self.head(path)))
    }

    fn read_async<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<Bytes>> {
        Box::pin(std::future::ready(self.read(path)))
    }

    fn read_range_async<'a>(
        &'a self,
        object: &'a Object,
        range: Range<u64>,
    ) -> BoxFuture<'a, Result<Bytes>> {
        Box::pin(std::future::ready(self.read_range(object, range)))
    }

    fn walk(&self, dir: &Path) -> Result<Vec<(String, Object)>> {
        let mut found: Vec<(String, Object)> = Vec::new();
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
            if !entry.file_type().is_file() {
                continue;
            }
            let rel = entry.path().strip_prefix(dir).unwrap_or(entry.path());
            let rel: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let meta = entry
                .metadata()
                .map_err(|e| Error::from(std::io::Error::from(e)).with_file(entry.path()))?;
            found.push((rel.join("/"), local_object(entry.path(), &meta)));
        }
        found.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        Ok(found)
    }

    fn find(&self, dir: &Path, names: &[String]) -> Result<Vec<Option<Object>>> {
        names
            .iter()
            .map(|name| {
                let path = dir.join(name);
                match std::fs::metadata(&path) {
                    Ok(meta) => Ok(meta.is_file().then(|| local_object(&path, &meta))),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(io_at(&path)(e)),
                }
            })
            .collect()
    }

    fn list_dir(&self, dir: &Path) -> Result<(Vec<Object>, Vec<String>)> {
        let (mut files, mut dirs) = (Vec::new(), Vec::new());
        for entry in std::fs::read_dir(dir).map_err(io_at(dir))? {
            let entry = entry.map_err(io_at(dir))?;
            let path = dir.join(entry.file_name());
            // A link is followed; a broken one (or an entry gone meanwhile) is skipped.
            let is_link = entry.file_type().is_ok_and(|t| t.is_symlink());
            let meta = if is_link {
                std::fs::metadata(&path)
            } else {
                entry.metadata()
            };
            let Ok(meta) = meta else {
                continue;
            };
            if meta.is_dir() {
                dirs.push(entry.file_name().to_string_lossy().into_owned());
            } else if meta.is_file() {
                files.push(local_object(&path, &meta));
            }
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        dirs.sort();
        Ok((files, dirs))
    }

    fn read_range(&self, object: &Object, range: Range<u64>) -> Result<Bytes> {
        use std::io::{Seek, SeekFrom};
        let at = io_at(&object.path);
        let mut file = File::open(&object.path).map_err(&at)?;
        file.seek(SeekFrom::Start(range.start)).map_err(&at)?;
        let len = usize::try_from(range.end.saturating_sub(range.start))
            .map_err(|e| at(std::io::Error::other(e)))?;
        let mut buf = vec![0; len];
        file.read_exact(&mut buf).map_err(&at)?;
        Ok(Bytes::from(buf))
    }

    fn read_whole(&self, object: &Object) -> Result<Bytes> {
        Ok(Bytes::from(
            std::fs::read(&object.path).map_err(io_at(&object.path))?,
        ))
    }

    fn open(&self, object: &Object) -> Result<Box<dyn Read + Send>> {
        Ok(Box::new(
            File::open(&object.path).map_err(io_at(&object.path))?,
        ))
    }

    fn local_path(&self, path: &Path) -> Option<PathBuf> {
        Some(path.to_path_buf())
    }

    fn parent(&self, path: &Path) -> Option<PathBuf> {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
    }

    fn listed(&self, _object: &Object) -> Option<Listed> {
        None
    }

    fn canonical(&self, path: &Path) -> PathBuf {
        std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
    }

    fn object_store(&self, dir: &Path) -> Result<(Arc<dyn object_store::ObjectStore>, Url)> {
        let abs = std::fs::canonicalize(dir).map_err(io_at(dir))?;
        let url = Url::from_directory_path(&abs).map_err(|()| {
            io_at(dir)(std::io::Error::other(
                "its path cannot be written as a file:// URL",
            ))
        })?;
        Ok((Arc::new(object_store::local::LocalFileSystem::new()), url))
    }
}

/// Objects in a store, read with the settings they were found with.
#[derive(Debug, Clone, Copy)]
pub struct ObjectFiles {
    io: IoOptions,
}

fn remote_object(listed: &Listed) -> Object {
    Object {
        path: listed.url.to_path(),
        size: listed.size,
        etag: listed.etag.clone(),
        modified: None,
        identity: None,
    }
}

impl ObjectFiles {
    fn url(&self, path: &Path) -> Result<ObjectUrl> {
        match locate(path, self.io)? {
            Place::Remote(url) => Ok(url),
            Place::Local(p) => Err(Error::invalid_option(
                "URL",
                format!(
                    "{}: a local path where a store URL was expected",
                    p.display()
                ),
            )),
        }
    }

    fn listed(&self, object: &Object) -> Result<Listed> {
        Ok(Listed {
            url: self.url(&object.path)?,
            size: object.size,
            etag: object.etag.clone(),
        })
    }
}

impl Storage for ObjectFiles {
    fn head(&self, path: &Path) -> Result<Object> {
        Ok(remote_object(&head(&self.url(path)?)?))
    }

    fn stat(&self, path: &Path) -> Result<Stat> {
        let url = self.url(path)?;
        if url.key().is_empty() || super::any_below(&url)? {
            return Ok(Stat::Dir);
        }
        Ok(Stat::File(remote_object(&head(&url)?)))
    }

    fn read(&self, path: &Path) -> Result<Bytes> {
        super::read_all(&self.url(path)?)
    }

    fn head_async<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<Object>> {
        Box::pin(async move { Ok(remote_object(&super::head_async(&self.url(path)?).await?)) })
    }

    fn read_async<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<Bytes>> {
        Box::pin(async move { super::read_all_async(&self.url(path)?).await })
    }

    fn read_range_async<'a>(
        &'a self,
        object: &'a Object,
        range: Range<u64>,
    ) -> BoxFuture<'a, Result<Bytes>> {
        Box::pin(async move {
            let url = self.url(&object.path)?;
            get_range(&url, range, object.etag.as_deref()).await
        })
    }

    fn walk(&self, dir: &Path) -> Result<Vec<(String, Object)>> {
        let url = self.url(dir)?;
        let mut found: Vec<(String, Object)> = list(&url)?
            .iter()
            .filter_map(|o| {
                let rel = o.url.relative_to(&url)?;
                let kept = rel
                    .split('/')
                    .all(|s| !s.is_empty() && !s.starts_with(['_', '.']));
                kept.then(|| (rel.to_owned(), remote_object(o)))
            })
            .collect();
        found.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        Ok(found)
    }

    fn find(&self, dir: &Path, names: &[String]) -> Result<Vec<Option<Object>>> {
        let dir = self.url(dir)?;
        let objects = list(&dir)?;
        let by_key: std::collections::HashMap<&str, &Listed> =
            objects.iter().map(|o| (o.url.key(), o)).collect();
        Ok(names
            .iter()
            .map(|name| by_key.get(dir.join(name).key()).map(|o| remote_object(o)))
            .collect())
    }

    fn list_dir(&self, dir: &Path) -> Result<(Vec<Object>, Vec<String>)> {
        let (objects, dirs) = list_dir(&self.url(dir)?)?;
        Ok((objects.iter().map(remote_object).collect(), dirs))
    }

    fn read_range(&self, object: &Object, range: Range<u64>) -> Result<Bytes> {
        let url = self.url(&object.path)?;
        block_on(get_range(&url, range, object.etag.as_deref()))
    }

    fn open(&self, object: &Object) -> Result<Box<dyn Read + Send>> {
        Ok(Box::new(super::RemoteRead::new(self.listed(object)?)))
    }

    fn local_path(&self, _path: &Path) -> Option<PathBuf> {
        None
    }

    fn parent(&self, path: &Path) -> Option<PathBuf> {
        let url = self.url(path).ok()?;
        (!url.key().is_empty()).then(|| url.parent().to_path())
    }

    fn listed(&self, object: &Object) -> Option<Listed> {
        ObjectFiles::listed(self, object).ok()
    }

    fn canonical(&self, path: &Path) -> PathBuf {
        path.to_path_buf()
    }

    fn object_store(&self, dir: &Path) -> Result<(Arc<dyn object_store::ObjectStore>, Url)> {
        let dir = self.url(dir)?;
        let bad = |why: String| io_at(&dir.to_path())(std::io::Error::other(why));
        // Segment by segment, so a key's `#`, `?` or `%` is encoded, not read.
        let mut url =
            Url::parse(&format!("{}/", dir.root())).map_err(|e| bad(format!("not a URL: {e}")))?;
        url.path_segments_mut()
            .map_err(|()| bad("not a URL with a path".into()))?
            .pop_if_empty()
            .extend(dir.key().split('/').filter(|s| !s.is_empty()))
            .push("");
        Ok((super::object_store_of(&dir)?, url))
    }
}

/// The storage of `path` (a local path, a `file://` URL, or a store URL whose requests
/// run with `io`).
///
/// # Errors
///
/// An unsupported URL scheme or a URL without a bucket.
pub fn storage_of(path: &Path, io: IoOptions) -> Result<Arc<dyn Storage>> {
    Ok(match locate(path, io)? {
        Place::Local(_) => Arc::new(LocalFiles),
        Place::Remote(_) => Arc::new(ObjectFiles { io }),
    })
}

/// `path` as its storage names it: a `file://` URL becomes its local path; anything else
/// is kept.
///
/// # Errors
///
/// As [`storage_of`].
pub fn resolve(path: &Path, io: IoOptions) -> Result<PathBuf> {
    Ok(match locate(path, io)? {
        Place::Local(p) => p,
        Place::Remote(url) => url.to_path(),
    })
}

/// One input file found, with the storage that reads it.
#[derive(Debug, Clone)]
pub struct Blob {
    storage: Arc<dyn Storage>,
    object: Object,
}

impl Blob {
    /// `object`, read through `storage`.
    pub fn new(storage: Arc<dyn Storage>, object: Object) -> Blob {
        Blob { storage, object }
    }

    /// The file at `path` (one HEAD on a store).
    ///
    /// # Errors
    ///
    /// As [`Storage::head`].
    pub fn head(path: &Path, io: IoOptions) -> Result<Blob> {
        let storage = storage_of(path, io)?;
        let object = storage.head(&resolve(path, io)?)?;
        Ok(Blob { storage, object })
    }

    /// What was found.
    pub fn object(&self) -> &Object {
        &self.object
    }

    /// Its path (a URL for a store).
    pub fn path(&self) -> &Path {
        &self.object.path
    }

    /// Its size.
    pub fn size(&self) -> u64 {
        self.object.size
    }

    /// The ETag its reads are pinned to.
    pub fn etag(&self) -> Option<&str> {
        self.object.etag.as_deref()
    }

    /// The storage it is read through.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// Its bytes from the start.
    ///
    /// # Errors
    ///
    /// As [`Storage::open`].
    pub fn open(&self) -> Result<Box<dyn Read + Send>> {
        self.storage.open(&self.object)
    }

    /// Bytes `range`.
    ///
    /// # Errors
    ///
    /// As [`Storage::read_range`].
    pub fn read_range(&self, range: Range<u64>) -> Result<Bytes> {
        self.storage.read_range(&self.object, range)
    }

    /// Each of `reads` (a blob and a range of it), up to `limit` requests at once on the
    /// I/O runtime (no thread of their own), in the order given.
    ///
    /// # Errors
    ///
    /// The first error of a read, as [`Storage::read_range`].
    pub fn read_ranges(reads: &[(&Blob, Range<u64>)], limit: usize) -> Result<Vec<Bytes>> {
        use futures_util::{StreamExt, TryStreamExt};
        let each = (reads.iter())
            .map(|(blob, range)| blob.storage.read_range_async(&blob.object, range.clone()));
        super::block_on(
            futures_util::stream::iter(each)
                .buffered(limit.max(1))
                .try_collect(),
        )
    }

    /// All of it.
    ///
    /// # Errors
    ///
    /// As [`Storage::read_range`].
    pub fn read_whole(&self) -> Result<Bytes> {
        self.storage.read_whole(&self.object)
    }

    /// Where its bytes can be memory-mapped, if they can.
    pub fn mappable(&self) -> Option<PathBuf> {
        self.storage.local_path(&self.object.path)
    }
}

/// One conformance suite for both storages: the same files, put on disk and in moto's
/// S3 server on 127.0.0.1, answer the same.
#[cfg(test)]
mod conformance {
    use super::*;

    const FILES: [(&str, &[u8]); 5] = [
        ("a.bin", b"0123456789"),
        ("sub/b.bin", b"abc"),
        ("sub/deeper/c.bin", b""),
        ("_SUCCESS", b""),
        ("_delta_log/00.json", b"{}"),
    ];

    fn check(storage: &dyn Storage, root: &Path) {
        let at = |rel: &str| PathBuf::from(format!("{}/{rel}", root.display()));
        let a = storage.head(&at("a.bin")).unwrap();
        assert_eq!((a.size, a.path.clone()), (10, at("a.bin")));
        assert_eq!(&storage.read_range(&a, 2..5).unwrap()[..], b"234");
        assert_eq!(&storage.read_whole(&a).unwrap()[..], b"0123456789");
        let mut streamed = Vec::new();
        storage
            .open(&a)
            .unwrap()
            .read_to_end(&mut streamed)
            .unwrap();
        assert_eq!(streamed, b"0123456789");
        let missing = storage.head(&at("missing.bin")).unwrap_err();
        assert!(is_not_found(&missing), "{missing}");
        assert!(missing.to_string().contains("missing.bin"), "{missing}");
        assert_eq!(storage.stat(&at("sub")).unwrap(), Stat::Dir);
        assert_eq!(storage.stat(&at("a.bin")).unwrap(), Stat::File(a.clone()));
        assert!(storage.head(&at("sub")).is_err(), "a folder is no file");
        assert_eq!(storage.parent(&at("sub/b.bin")), Some(at("sub")));
        let walked: Vec<(String, u64)> = storage
            .walk(root)
            .unwrap()
            .into_iter()
            .map(|(rel, o)| (rel, o.size))
            .collect();
        assert_eq!(
            walked,
            [
                ("a.bin".to_owned(), 10),
                ("sub/b.bin".to_owned(), 3),
                ("sub/deeper/c.bin".to_owned(), 0)
            ]
        );
        assert_eq!(&storage.read(&at("sub/b.bin")).unwrap()[..], b"abc");
        assert!(storage.is_dir(&at("sub")).unwrap());
        assert!(!storage.is_dir(&at("a.bin")).unwrap());
        assert!(storage.is_dir(&at("nothing")).is_err());
        let (files, dirs) = storage.list_dir(&at("sub")).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, at("sub/b.bin"));
        assert_eq!(dirs, ["deeper"]);
        let names = ["sub/b.bin", "a.bin", "nope.bin", "sub"].map(String::from);
        let found = storage.find(root, &names).unwrap();
        let sizes: Vec<Option<u64>> = found.iter().map(|o| o.as_ref().map(|o| o.size)).collect();
        assert_eq!(sizes, [Some(3), Some(10), None, None]);
        // The async face answers as the other.
        let headed = block_on(storage.head_async(&at("a.bin"))).unwrap();
        assert_eq!((headed.size, &headed.etag), (a.size, &a.etag));
        assert_eq!(
            &block_on(storage.read_range_async(&a, 2..5)).unwrap()[..],
            b"234"
        );
        assert_eq!(
            &block_on(storage.read_async(&at("sub/b.bin"))).unwrap()[..],
            b"abc"
        );
        assert!(is_not_found(
            &block_on(storage.head_async(&at("nope.bin"))).unwrap_err()
        ));
        // The object_store client a dependency reads the folder with.
        let (client, url) = storage.object_store(root).unwrap();
        assert!(url.as_str().ends_with('/'), "{url}");
        let key =
            object_store::path::Path::from_url_path(url.join("sub/b.bin").unwrap().path()).unwrap();
        let got = block_on(async {
            use object_store::ObjectStoreExt;
            client.get(&key).await.unwrap().bytes().await.unwrap()
        });
        assert_eq!(&got[..], b"abc");
        let empty = storage.head(&at("sub/deeper/c.bin")).unwrap();
        assert!(storage.read_whole(&empty).unwrap().is_empty());
    }

    #[test]
    fn local_files_conform() {
        let root = crate::test_dir("storage-local");
        for (rel, bytes) in FILES {
            let path = root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        }
        // A broken link is left out of a listing, not an error.
        std::os::unix::fs::symlink(root.join("gone"), root.join("sub/broken")).unwrap();
        let storage = storage_of(&root, IoOptions::new()).unwrap();
        assert_eq!(
            storage.local_path(&root.join("a.bin")),
            Some(root.join("a.bin"))
        );
        check(&*storage, &root);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn object_files_conform() {
        let Some(endpoint) = crate::store::test_server::s3() else {
            return;
        };
        let bucket = endpoint.bucket("storage");
        let root = PathBuf::from(format!("s3://{bucket}/in"));
        let io = IoOptions::new();
        for (rel, bytes) in FILES {
            let url = match locate(&root.join(rel), io).unwrap() {
                Place::Remote(url) => url,
                Place::Local(_) => unreachable!(),
            };
            crate::store::put(&url, bytes.to_vec(), false).unwrap();
        }
        let storage = storage_of(&root, io).unwrap();
        let a = storage.head(&root.join("a.bin")).unwrap();
        assert!(storage.local_path(&a.path).is_none());
        assert_eq!(storage.parent(&a.path), Some(root.clone()));
        let bucket_root = PathBuf::from(format!("s3://{bucket}"));
        assert_eq!(storage.parent(&root), Some(bucket_root.clone()));
        assert_eq!(storage.parent(&bucket_root), None);
        assert_eq!(storage.canonical(&a.path), root.join("a.bin"));
        check(&*storage, &root);
        // Pinned: the object rewritten since it was found is not read as it is now.
        let url = match locate(&root.join("a.bin"), io).unwrap() {
            Place::Remote(url) => url,
            Place::Local(_) => unreachable!(),
        };
        crate::store::put(&url, b"changed!!!".to_vec(), false).unwrap();
        assert!(storage.read_range(&a, 0..4).is_err());
        assert!(storage.read_whole(&a).is_err());
        let mut streamed = Vec::new();
        assert!(storage
            .open(&a)
            .unwrap()
            .read_to_end(&mut streamed)
            .is_err());
    }
}

/// The boundary, checked in the code itself: outside `src/store/`, no code asks where
/// bytes are. It names none of the store's own handles (a place, a URL, a listing) and
/// calls none of its object functions; it reads through [`Storage`], [`Blob`] and the
/// store's readers.
#[cfg(test)]
mod boundary {
    /// Names only `src/store/` may use (whole identifiers, outside comments).
    const STORE_ONLY: [&str; 9] = [
        "Place",
        "ObjectUrl",
        "Listed",
        "RemoteRead",
        "RemoteChunks",
        "RemoteParquet",
        "object_store_of",
        "get_range",
        "read_all_async",
    ];
    /// Calls only `src/store/` may make.
    const STORE_CALLS: [&str; 13] = [
        "store::locate",
        "store::head(",
        "store::head_async(",
        "store::list(",
        "store::list_async(",
        "store::list_dir(",
        "store::any_below(",
        "store::read_all(",
        "store::put(",
        "store::put_async(",
        "store::put_tagged(",
        "store::delete(",
        "store::delete_object(",
    ];

    /// The code of a line: up to a comment (a `//` that starts the line or follows a
    /// space, so that a URL's `s3://` in a string is kept).
    fn code(line: &str) -> &str {
        if line.trim_start().starts_with("//") {
            return "";
        }
        line.split(" //").next().unwrap_or_default()
    }

    #[test]
    fn only_the_store_knows_whether_bytes_are_local() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut checked = 0;
        let mut found = Vec::new();
        for entry in walkdir::WalkDir::new(&src) {
            let entry = entry.unwrap();
            let path = entry.path();
            if path.starts_with(src.join("store")) || path.extension() != Some("rs".as_ref()) {
                continue;
            }
            checked += 1;
            let text = std::fs::read_to_string(path).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = code(line);
                let words: Vec<&str> = code
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .collect();
                // `locate` is a common closure name: only its import from the store.
                let imported = code.contains("use crate::store") && words.contains(&"locate");
                let named = words
                    .into_iter()
                    .filter(|w| STORE_ONLY.contains(w))
                    .chain(imported.then_some("locate"));
                let called = STORE_CALLS.iter().filter(|c| code.contains(*c));
                for what in named.chain(called.copied()) {
                    let at = path.strip_prefix(&src).unwrap().display();
                    found.push(format!("src/{at}:{}: {what}", n + 1));
                }
            }
        }
        assert!(
            checked > 50,
            "only {checked} files found below {}",
            src.display()
        );
        assert!(
            found.is_empty(),
            "store-only names outside src/store/:\n{}",
            found.join("\n")
        );
    }
}
