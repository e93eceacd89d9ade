//! Multipart uploads: create, upload a part, complete, abort (one already gone is
//! fine).

use bytes::Bytes;

use super::client::{bucket, request};
use super::errors::{is_problem, StoreProblem};
use super::url::ObjectUrl;
use crate::error::Result;

/// Starts a multipart upload, returning its id.
pub(crate) async fn create_multipart(url: &ObjectUrl) -> Result<String> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    request(url, b.multipart.create_multipart(&key)).await
}

/// Uploads part `index` of an upload.
pub(crate) async fn put_part(
    url: &ObjectUrl,
    id: &str,
    index: usize,
    data: Bytes,
) -> Result<object_store::multipart::PartId> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    let id = id.to_owned();
    request(url, b.multipart.put_part(&key, &id, index, data.into())).await
}

/// Completes an upload from its parts, in order.
pub(crate) async fn complete_multipart(
    url: &ObjectUrl,
    id: &str,
    parts: Vec<object_store::multipart::PartId>,
) -> Result<()> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    let id = id.to_owned();
    request(url, b.multipart.complete_multipart(&key, &id, parts)).await?;
    Ok(())
}

/// Aborts an upload (one already gone is fine).
pub(crate) async fn abort_multipart(url: &ObjectUrl, id: &str) -> Result<()> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    let id = id.to_owned();
    match request(url, b.multipart.abort_multipart(&key, &id)).await {
        Err(e) if is_problem(&e, StoreProblem::NotFound) => Ok(()),
        other => other,
    }
}
