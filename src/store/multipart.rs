//! Multipart uploads: create, upload a part, complete, abort (one already gone is
//! fine), and list those pending under a prefix (S3's ListMultipartUploads, which
//! `object_store` has no call for: presigned by its signer).
//!
//! On S3 a part of a staged file is sent streamed from the file (UploadPart presigned
//! by `object_store`'s signer, the body read 256 KiB at a time), so a run holds no part
//! buffers; `TFSHARD_STREAM_PARTS=0` (or a checksum or SSE-C setting, whose headers the
//! presigned request would lack) sends it through `object_store`'s `put_part` instead.

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

/// Whether parts of staged files go up streamed from the file (S3, no setting that
/// needs headers, not switched off).
pub(crate) fn streams_parts(url: &ObjectUrl) -> bool {
    let set = |var: &str| std::env::var_os(var).is_some_and(|v| !v.is_empty());
    url.scheme() == Scheme::S3
        && std::env::var("TFSHARD_STREAM_PARTS").map_or(true, |v| v != "0")
        && !set("AWS_CHECKSUM_ALGORITHM")
        && !set("AWS_SSE_CUSTOMER_KEY_BASE64")
}

/// Bytes `range` of a file, as a request body read a piece at a time.
struct FileRange {
    file: std::sync::Arc<std::fs::File>,
    range: std::ops::Range<u64>,
}

/// Bytes a streamed part reads from its file at a time.
const STREAM_PIECE: u64 = 256 << 10;

impl http_body::Body for FileRange {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<std::result::Result<http_body::Frame<Bytes>, std::io::Error>>> {
        let (start, end) = (self.range.start, self.range.end);
        if start >= end {
            return std::task::Poll::Ready(None);
        }
        let n = (end - start).min(STREAM_PIECE);
        let mut buf = vec![0u8; n as usize];
        // A read of a file just written (in the page cache): short enough to do here.
        let read = std::os::unix::fs::FileExt::read_exact_at(&*self.file, &mut buf, start);
        self.range.start += n;
        std::task::Poll::Ready(Some(
            read.map(|()| http_body::Frame::data(Bytes::from(buf))),
        ))
    }

    fn is_end_stream(&self) -> bool {
        self.range.start >= self.range.end
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.range.end - self.range.start)
    }
}

/// Uploads bytes `range` of `file` as part `index` of upload `id`, streamed from the
/// file (see [`streams_parts`]); retried as `object_store`'s own requests are, each try
/// reading the file again.
pub(crate) async fn put_part_streamed(
    url: &ObjectUrl,
    id: &str,
    index: usize,
    file: std::sync::Arc<std::fs::File>,
    range: std::ops::Range<u64>,
) -> Result<object_store::multipart::PartId> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    let options = SignedUrlOptions::new().with_query([
        ("partNumber", (index + 1).to_string()),
        ("uploadId", id.to_owned()),
    ]);
    let (headers, _) = send_retried(
        url,
        |_| true,
        || async {
            let signed = b
                .signer
                .signed_url_opts(Method::PUT, &key, PRESIGNED_FOR, &options)
                .await?;
            let body = FileRange {
                file: file.clone(),
                range: range.clone(),
            };
            Ok(http_client(url.io())?
                .put(signed.as_str())
                .header("content-length", range.end - range.start)
                .body(reqwest::Body::wrap(body)))
        },
    )
    .await?;
    let etag = headers
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            Error::new(ErrorKind::Store {
                problem: StoreProblem::Other,
                detail: format!("the store answered part {} with no ETag", index + 1),
            })
            .with_file(url.to_path())
        })?;
    Ok(object_store::multipart::PartId {
        content_id: etag.to_owned(),
    })
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
            // The folder's keys, not its neighbours' (`out/a` is no prefix of `out/ab`);
            // the bucket's root, every key.
            (
                "prefix",
                match prefix.key().trim_end_matches('/') {
                    "" => String::new(),
                    key => format!("{key}/"),
                },
            ),
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
