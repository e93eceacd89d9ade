//! Multipart uploads: create, upload a part, complete, abort (one already gone is
//! fine), and list those pending under a prefix (S3's ListMultipartUploads, which
//! `object_store` has no call for: presigned by its signer).

use bytes::Bytes;
use object_store::signer::{Method, SignedUrlOptions};
use serde::Deserialize;

use super::client::{bucket, http_client, request, send_retried, PRESIGNED_FOR};
use super::errors::{is_problem, StoreProblem};
use super::url::{ObjectUrl, Scheme};
use crate::error::{Error, ErrorKind, Result};

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

/// Completes an upload from its parts, in order; returns the object's ETag.
pub(crate) async fn complete_multipart(
    url: &ObjectUrl,
    id: &str,
    parts: Vec<object_store::multipart::PartId>,
) -> Result<Option<String>> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    let id = id.to_owned();
    let done = request(url, b.multipart.complete_multipart(&key, &id, parts)).await?;
    Ok(done.e_tag)
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

/// One page of S3's ListMultipartUploads answer (the fields we read).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct UploadsPage {
    #[serde(default)]
    upload: Vec<PendingUpload>,
    #[serde(default)]
    is_truncated: bool,
    next_key_marker: Option<String>,
    next_upload_id_marker: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct PendingUpload {
    key: String,
    upload_id: String,
}

/// The multipart uploads started and neither completed nor aborted whose keys begin
/// with `prefix`'s key, each as its target and id: on S3 (ListMultipartUploads, page by
/// page). Elsewhere none are listed: Azure's uncommitted blocks are not uploads of their
/// own (the service drops them after a week), and GCS's are left to the bucket's
/// lifecycle rule.
pub(crate) async fn pending_uploads(prefix: &ObjectUrl) -> Result<Vec<(ObjectUrl, String)>> {
    if prefix.scheme() != Scheme::S3 {
        return Ok(Vec::new());
    }
    let b = bucket(prefix)?;
    let mut found = Vec::new();
    let mut markers: Option<(String, String)> = None;
    loop {
        let mut query = vec![
            ("uploads", String::new()),
            // The folder's keys, not its neighbours' (`out/a` is no prefix of `out/ab`).
            ("prefix", format!("{}/", prefix.key().trim_end_matches('/'))),
        ];
        if let Some((key, id)) = &markers {
            query.push(("key-marker", key.clone()));
            query.push(("upload-id-marker", id.clone()));
        }
        let options = SignedUrlOptions::new().with_query(query);
        let root = object_store::path::Path::from("");
        let (_, body) = send_retried(
            prefix,
            |_| true,
            || async {
                let url = b
                    .signer
                    .signed_url_opts(Method::GET, &root, PRESIGNED_FOR, &options)
                    .await?;
                Ok(http_client(prefix.io())?.get(url.as_str()))
            },
        )
        .await?;
        let page: UploadsPage = quick_xml::de::from_str(&body).map_err(|e| {
            Error::new(ErrorKind::Store {
                problem: StoreProblem::Other,
                detail: format!("cannot read the list of pending uploads: {e}"),
            })
            .with_file(prefix.to_path())
        })?;
        found.extend(
            page.upload
                .into_iter()
                .map(|u| (prefix.with_key(&u.key), u.upload_id)),
        );
        match (
            page.is_truncated,
            page.next_key_marker,
            page.next_upload_id_marker,
        ) {
            (true, Some(key), Some(id)) => markers = Some((key, id)),
            _ => return Ok(found),
        }
    }
}
