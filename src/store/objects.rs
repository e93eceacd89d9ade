//! Object operations: listing, HEAD, ranged reads pinned to an ETag, whole reads, puts
//! (conditional ones too) and deletes. Each holds a permit while it runs and names the
//! URL in its error.

use std::ops::Range;

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use object_store::{GetOptions, GetRange, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use super::client::{block_on, bucket, request};
use super::errors::{is_problem, StoreProblem};
use super::url::ObjectUrl;
use crate::error::Result;

/// An object found by a listing or a HEAD.
#[derive(Debug, Clone)]
pub struct Listed {
    /// Where it is.
    pub url: ObjectUrl,
    /// Its size.
    pub size: u64,
    /// Its ETag (or version), which later reads are pinned to.
    pub etag: Option<String>,
}

fn listed(url: &ObjectUrl, meta: object_store::ObjectMeta) -> Listed {
    Listed {
        url: url.with_key(meta.location.as_ref()),
        size: meta.size,
        etag: meta.e_tag.or(meta.version),
    }
}

/// Every object below `url` (recursively), in key byte order.
///
/// # Errors
///
/// A store error naming the URL.
pub fn list(url: &ObjectUrl) -> Result<Vec<Listed>> {
    block_on(list_async(url))
}

pub(crate) async fn list_async(url: &ObjectUrl) -> Result<Vec<Listed>> {
    let b = bucket(url)?;
    let prefix = url.prefix_key()?;
    let mut out: Vec<Listed> = request(url, async {
        b.store.list(prefix.as_ref()).try_collect::<Vec<_>>().await
    })
    .await?
    .into_iter()
    .map(|m| listed(url, m))
    .collect();
    out.sort_by(|a, b| a.url.key().as_bytes().cmp(b.url.key().as_bytes()));
    Ok(out)
}

/// Whether any object lies below `url` (the first page of a listing, no more).
///
/// # Errors
///
/// A store error naming the URL.
pub(crate) fn any_below(url: &ObjectUrl) -> Result<bool> {
    block_on(async {
        let b = bucket(url)?;
        let prefix = url.prefix_key()?;
        request(url, async {
            b.store
                .list(prefix.as_ref())
                .try_next()
                .await
                .map(|first| first.is_some())
        })
        .await
    })
}

/// The objects directly below `url` and the names of its sub-prefixes.
///
/// # Errors
///
/// A store error naming the URL.
pub fn list_dir(url: &ObjectUrl) -> Result<(Vec<Listed>, Vec<String>)> {
    block_on(list_dir_async(url))
}

async fn list_dir_async(url: &ObjectUrl) -> Result<(Vec<Listed>, Vec<String>)> {
    let b = bucket(url)?;
    let prefix = url.prefix_key()?;
    let result = request(url, b.store.list_with_delimiter(prefix.as_ref())).await?;
    let mut objects: Vec<Listed> = result.objects.into_iter().map(|m| listed(url, m)).collect();
    objects.sort_by(|a, b| a.url.key().as_bytes().cmp(b.url.key().as_bytes()));
    let dirs = result
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename().map(str::to_owned))
        .collect();
    Ok((objects, dirs))
}

/// The object's size and ETag.
///
/// # Errors
///
/// A store error naming the URL (`not found` when there is no such object).
pub fn head(url: &ObjectUrl) -> Result<Listed> {
    block_on(head_async(url))
}

pub(crate) async fn head_async(url: &ObjectUrl) -> Result<Listed> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    let meta = request(url, b.store.head(&key)).await?;
    Ok(listed(url, meta))
}

/// Bytes `range` of the object, as it was when its ETag was `etag`.
pub(crate) async fn get_range(
    url: &ObjectUrl,
    range: Range<u64>,
    etag: Option<&str>,
) -> Result<Bytes> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    let options = GetOptions {
        if_match: etag.map(str::to_owned),
        range: Some(GetRange::Bounded(range)),
        ..Default::default()
    };
    request(url, async {
        let result = b.store.get_opts(&key, options).await?;
        let len = (result.range.end - result.range.start) as usize;
        if len < MAPPED_READ_BYTES {
            return result.bytes().await;
        }
        // Large reads land in an anonymous map, given back to the system when dropped:
        // from the heap they stayed in the I/O threads' malloc arenas (peak RSS).
        let failed =
            |source: Box<dyn std::error::Error + Send + Sync>| object_store::Error::Generic {
                store: "tfshard",
                source,
            };
        let mut map = memmap2::MmapMut::map_anon(len).map_err(|e| failed(Box::new(e)))?;
        let mut at = 0;
        let mut stream = result.into_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            let end = at + chunk.len();
            if end > len {
                return Err(failed(
                    "the store sent more bytes than the range asked".into(),
                ));
            }
            map[at..end].copy_from_slice(&chunk);
            at = end;
        }
        if at != len {
            return Err(failed(
                format!("the store sent {at} of the {len} bytes asked").into(),
            ));
        }
        let map = map.make_read_only().map_err(|e| failed(Box::new(e)))?;
        Ok(Bytes::from_owner(map))
    })
    .await
}

/// Reads of at least this many bytes go to an anonymous map rather than the heap.
const MAPPED_READ_BYTES: usize = 1 << 20;

/// The whole object.
///
/// # Errors
///
/// A store error naming the URL.
pub fn read_all(url: &ObjectUrl) -> Result<Bytes> {
    block_on(read_all_async(url))
}

pub(crate) async fn read_all_async(url: &ObjectUrl) -> Result<Bytes> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    request(url, async { b.store.get(&key).await?.bytes().await }).await
}

/// Writes a small object in one request; with `create_only`, only if nothing is there
/// (a conditional put: `already exists` otherwise).
///
/// # Errors
///
/// A store error naming the URL.
pub fn put(url: &ObjectUrl, bytes: Vec<u8>, create_only: bool) -> Result<()> {
    block_on(put_async(url, bytes, create_only))
}

pub(crate) async fn put_async(url: &ObjectUrl, bytes: Vec<u8>, create_only: bool) -> Result<()> {
    put_tagged(url, bytes, create_only).await.map(drop)
}

/// [`put_async`], returning the object's ETag.
pub(crate) async fn put_tagged(
    url: &ObjectUrl,
    bytes: Vec<u8>,
    create_only: bool,
) -> Result<Option<String>> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    let options = PutOptions {
        mode: if create_only {
            PutMode::Create
        } else {
            PutMode::Overwrite
        },
        ..Default::default()
    };
    let done = request(
        url,
        b.store.put_opts(&key, PutPayload::from(bytes), options),
    )
    .await?;
    Ok(done.e_tag)
}

/// Writes a small object whole only if it still holds `expected`: a conditional put
/// pinned to the ETag of what was read (S3's `If-Match`, GCS's generation, Azure's
/// `If-Match`). `Ok(false)` when it holds something else, or nothing.
///
/// # Errors
///
/// A store error naming the URL.
pub fn replace_object(url: &ObjectUrl, expected: &[u8], bytes: Vec<u8>) -> Result<bool> {
    block_on(async {
        let b = bucket(url)?;
        let key = url.object_key()?;
        let got = match request(url, async { b.store.get(&key).await }).await {
            Ok(got) => got,
            Err(e) if is_problem(&e, StoreProblem::NotFound) => return Ok(false),
            Err(e) => return Err(e),
        };
        let version = object_store::UpdateVersion {
            e_tag: got.meta.e_tag.clone(),
            version: got.meta.version.clone(),
        };
        let held = request(url, got.bytes()).await?;
        if held.as_ref() != expected {
            return Ok(false);
        }
        let options = PutOptions {
            mode: PutMode::Update(version),
            ..Default::default()
        };
        match request(
            url,
            b.store.put_opts(&key, PutPayload::from(bytes), options),
        )
        .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_problem(&e, StoreProblem::Changed) => Ok(false),
            Err(e) => Err(e),
        }
    })
}

/// Deletes an object; a missing one is fine (blocking).
///
/// # Errors
///
/// A store error naming the URL.
pub fn delete_object(url: &ObjectUrl) -> Result<()> {
    block_on(delete(url))
}

/// Deletes an object (a missing one is fine).
pub(crate) async fn delete(url: &ObjectUrl) -> Result<()> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    match request(url, b.store.delete(&key)).await {
        Err(e) if is_problem(&e, StoreProblem::NotFound) => Ok(()),
        other => other,
    }
}
