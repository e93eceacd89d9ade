//! Where data lives: a local path, or an object in a store (`s3://`, `gs://`, `az://`,
//! `abfss://`), and where a run's output goes (the `destination`).
//!
//! Local paths keep their native back-end (memory maps, fsync before rename). URLs go
//! through arrow-rs `object_store`, configured from its documented environment
//! variables. This module is the only one that talks to a store, split by concern:
//! [`url`] (the URL model), `client` (clients per bucket and settings, the runtime,
//! permits, timeouts and retries), `errors` (typed classification), `objects`
//! (listing, ranged reads pinned to an ETag, conditional puts, deletes), `atomic` (a
//! local file replaced atomically: manifests, journals, cache files), `multipart`
//! (uploads), `copy` (server-side copies), `records` (upload ids recorded for a later
//! abort), `settings`, and the `destination` with its two back-ends, `local` and
//! `object`. Every call blocks the calling thread
//! on a small runtime of its own (started on first use), holds one of `--io-concurrency`
//! permits while it runs, and gives up after `--io-timeout` with an error that names
//! the URL and the cause ([`StoreProblem`]). Settings are values ([`IoOptions`]) that
//! each URL carries.

pub(crate) mod atomic;
pub(crate) mod claim;
mod client;
mod copy;
pub(crate) mod destination;
mod errors;
pub(crate) mod journal;
mod local;
mod multipart;
mod object;
mod objects;
pub(crate) mod parquet;
pub mod paths;
pub(crate) mod publish;
mod read;
mod records;
mod settings;
pub mod storage;
#[cfg(test)]
pub(crate) mod test_server;
pub mod url;

pub(crate) use self::client::{block_on, runtime_handle, spawn};

/// The `object_store` client of `url`'s bucket (rooted at the bucket: keys are
/// [`ObjectUrl::key`]s), for a library that reads the store itself (delta_kernel).
pub(crate) fn object_store_of(
    url: &ObjectUrl,
) -> crate::error::Result<std::sync::Arc<dyn object_store::ObjectStore>> {
    Ok(client::bucket(url)?.store.clone())
}
pub use self::copy::copy_object_recorded;
pub(crate) use self::copy::copy_recorded;
pub(crate) use self::errors::is_problem;
pub use self::errors::StoreProblem;
pub(crate) use self::multipart::{
    abort_multipart, complete_multipart, part_checksums, put_part, put_part_streamed,
    streams_parts, SentPart,
};
pub(crate) use self::objects::{
    any_below, delete, get_range, head_async, list_async, put_async, put_tagged, read_all_async,
};
pub use self::objects::{
    delete_object, head, list, list_dir, put, read_all, replace_object, Listed,
};
pub use self::parquet::{ColumnChunks, PageRead, ParquetBytes};
pub use self::read::RemoteRead;
pub(crate) use self::records::{
    abort_pending_in, abort_uploads_under, create_recorded, kill_point, upload_record,
};
pub use self::settings::{
    IoOptions, COPY_PART_BYTES, DEFAULT_IO_CONCURRENCY, DEFAULT_IO_TIMEOUT, MAX_COPY_BYTES,
    READ_AHEAD_BYTES,
};
pub use self::storage::{storage_of, Blob, Object, Storage};
pub use self::url::{is_url, ObjectUrl, Scheme};
pub(crate) use self::url::{locate, Place};

/// An id unique among the runs (and attempts of one worker) that may race for one
/// output: time, process and a counter. `run-…`.
pub(crate) fn attempt_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("run-{nanos:x}-{:x}-{n}", std::process::id())
}

/// Opens the destination of an output path or URL; a store's requests run with `io`.
///
/// # Errors
///
/// An unsupported URL scheme.
pub(crate) fn destination_of(
    output: &std::path::Path,
    io: IoOptions,
) -> crate::error::Result<std::sync::Arc<dyn destination::Destination>> {
    Ok(match locate(output, io)? {
        Place::Local(dir) => std::sync::Arc::new(local::LocalDir::new(dir)),
        Place::Remote(url) => std::sync::Arc::new(object::ObjectPrefix::new(url)),
    })
}
