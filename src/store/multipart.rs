//! Multipart uploads: create, upload a part, complete, abort (one already gone is
//! fine), and list those pending under a prefix (S3's ListMultipartUploads, which
//! `object_store` has no call for: presigned by its signer).
//!
//! On S3 a part of a staged file is sent streamed from the file (UploadPart presigned
//! by `object_store`'s signer, the body read 256 KiB at a time), so a run holds no part
//! buffers; `TFSHARD_STREAM_PARTS=0` (or a checksum or SSE-C setting, whose headers the
//! presigned request would lack) sends it through `object_store`'s `put_part` instead.
//!
//! Such an upload also carries a CRC32C per part, as the AWS SDKs send a checksum by
//! default: created with `x-amz-checksum-algorithm: CRC32C`, each part with its
//! `x-amz-checksum-crc32c` (read from the staged file before it is sent), completed with
//! the parts' checksums. The store checks every part against its CRC and keeps their
//! composite with the object. `object_store` offers SHA-256 or CRC64NVME only, over
//! buffered parts; so these three requests are our own, presigned by its signer. Off
//! with `AWS_REQUEST_CHECKSUM_CALCULATION=when_required` (the AWS SDKs' switch, for
//! stores that take no checksums) and with a server-side encryption setting (whose
//! headers `object_store`'s own create sends).

use base64::Engine as _;
use bytes::Bytes;
use object_store::signer::{Method, SignedUrlOptions};
use reqwest::header::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

use super::client::{bucket, request, send_retried};
use super::errors::{has_etag, is_problem, xml_value, StoreProblem};
use super::url::{ObjectUrl, Scheme};
use crate::error::{Error, ErrorKind, Result};

/// A part sent: its ETag, and the CRC32C it was sent with (an upload with
/// [`part_checksums`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentPart {
    pub etag: String,
    pub crc32c: Option<u32>,
}

/// Starts a multipart upload, returning its id; with `checksums`, one whose parts each
/// carry a CRC32C (see [`part_checksums`]).
pub(crate) async fn create_multipart(url: &ObjectUrl, checksums: bool) -> Result<String> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    if !checksums {
        return request(url, b.multipart.create_multipart(&key)).await;
    }
    let (name, value) = (
        HeaderName::from_static("x-amz-checksum-algorithm"),
        HeaderValue::from_static("CRC32C"),
    );
    let options = SignedUrlOptions::new()
        .with_query([("uploads", "")])
        .with_signed_header(name.clone(), value.clone());
    let (_, body) = send_retried(
        url,
        |body| xml_value(body, "UploadId").is_some(),
        || async {
            Ok(b.presigned(url, Method::POST, &key, &options)
                .await?
                .header(name.clone(), value.clone())
                .header("content-length", "0"))
        },
    )
    .await?;
    Ok(xml_value(&body, "UploadId")
        .expect("accepted only with an UploadId")
        .to_owned())
}

/// Uploads part `index` of an upload.
pub(crate) async fn put_part(
    url: &ObjectUrl,
    id: &str,
    index: usize,
    data: Bytes,
) -> Result<SentPart> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    let id = id.to_owned();
    let part = request(url, b.multipart.put_part(&key, &id, index, data.into())).await?;
    Ok(SentPart {
        etag: part.content_id,
        crc32c: None,
    })
}

/// Whether an upload of staged file parts to `url` sends a CRC32C with each part: where
/// the parts are streamed, unless the AWS SDKs' switch says checksums only where
/// required, or a server-side encryption setting asks for `object_store`'s create.
pub(crate) fn part_checksums(url: &ObjectUrl) -> bool {
    let set = |var: &str| std::env::var_os(var).is_some_and(|v| !v.is_empty());
    streams_parts(url)
        && !std::env::var("AWS_REQUEST_CHECKSUM_CALCULATION")
            .is_ok_and(|v| v.eq_ignore_ascii_case("when_required"))
        && ![
            "AWS_SERVER_SIDE_ENCRYPTION",
            "AWS_SSE_KMS_KEY_ID",
            "AWS_SSE_BUCKET_KEY_ENABLED",
        ]
        .iter()
        .any(|v| set(v))
}

/// Whether parts of staged files go up streamed from the file (S3, no setting that
/// needs headers, not switched off).
pub(crate) fn streams_parts(url: &ObjectUrl) -> bool {
    let set = |var: &str| std::env::var_os(var).is_some_and(|v| !v.is_empty());
    url.scheme() == Scheme::S3
        && url.io().stream_parts
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

/// The CRC32C of bytes `range` of `file` (a staged file, in the page cache: read here).
fn range_crc32c(file: &std::fs::File, range: std::ops::Range<u64>) -> std::io::Result<u32> {
    let mut buf = vec![0u8; STREAM_PIECE as usize];
    let (mut at, mut crc) = (range.start, 0u32);
    while at < range.end {
        let n = (range.end - at).min(STREAM_PIECE) as usize;
        std::os::unix::fs::FileExt::read_exact_at(file, &mut buf[..n], at)?;
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        at += n as u64;
    }
    Ok(crc)
}

/// A CRC32C as S3 writes it: the big-endian bytes in base64.
fn crc32c_text(crc: u32) -> String {
    base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes())
}

/// Uploads bytes `range` of `file` as part `index` of upload `id`, streamed from the
/// file (see [`streams_parts`]), with its CRC32C when the upload was created with
/// `checksums`; retried as `object_store`'s own requests are, each try reading the file
/// again.
pub(crate) async fn put_part_streamed(
    url: &ObjectUrl,
    id: &str,
    index: usize,
    file: std::sync::Arc<std::fs::File>,
    range: std::ops::Range<u64>,
    checksums: bool,
) -> Result<SentPart> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    let mut options = SignedUrlOptions::new().with_query([
        ("partNumber", (index + 1).to_string()),
        ("uploadId", id.to_owned()),
    ]);
    let crc32c = match checksums {
        true => Some(
            range_crc32c(&file, range.clone())
                .map_err(|e| Error::from(e).with_file(url.to_path()))?,
        ),
        false => None,
    };
    let checksum = match crc32c {
        Some(crc) => {
            let value = HeaderValue::from_str(&crc32c_text(crc)).expect("base64 is a header value");
            let name = HeaderName::from_static("x-amz-checksum-crc32c");
            options = options.with_signed_header(name.clone(), value.clone());
            Some((name, value))
        }
        None => None,
    };
    let (headers, _) = send_retried(
        url,
        |_| true,
        || async {
            let body = FileRange {
                file: file.clone(),
                range: range.clone(),
            };
            let mut put = b
                .presigned(url, Method::PUT, &key, &options)
                .await?
                .header("content-length", range.end - range.start);
            if let Some((name, value)) = &checksum {
                put = put.header(name.clone(), value.clone());
            }
            Ok(put.body(reqwest::Body::wrap(body)))
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
    Ok(SentPart {
        etag: etag.to_owned(),
        crc32c,
    })
}

/// S3's CompleteMultipartUpload body for parts sent with their CRC32C.
#[derive(Debug, Serialize)]
#[serde(rename = "CompleteMultipartUpload")]
struct CompleteBody {
    #[serde(rename = "Part")]
    parts: Vec<CompletePart>,
}

#[derive(Debug, Serialize)]
struct CompletePart {
    #[serde(rename = "PartNumber")]
    number: usize,
    #[serde(rename = "ETag")]
    etag: String,
    #[serde(rename = "ChecksumCRC32C")]
    crc32c: String,
}

fn complete_body(parts: &[SentPart]) -> String {
    let body = CompleteBody {
        parts: parts
            .iter()
            .enumerate()
            .map(|(i, p)| CompletePart {
                number: i + 1,
                etag: p.etag.clone(),
                crc32c: crc32c_text(p.crc32c.unwrap_or_default()),
            })
            .collect(),
    };
    quick_xml::se::to_string(&body).expect("plain strings and numbers serialize")
}

/// Completes an upload from its parts, in order; returns the object's ETag.
pub(crate) async fn complete_multipart(
    url: &ObjectUrl,
    id: &str,
    parts: Vec<SentPart>,
) -> Result<Option<String>> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    if !parts.iter().any(|p| p.crc32c.is_some()) {
        let parts = parts
            .into_iter()
            .map(|p| object_store::multipart::PartId { content_id: p.etag })
            .collect();
        let id = id.to_owned();
        let done = request(url, b.multipart.complete_multipart(&key, &id, parts)).await?;
        return Ok(done.e_tag);
    }
    let options = SignedUrlOptions::new().with_query([("uploadId", id.to_owned())]);
    let body = complete_body(&parts);
    let (_, answer) = send_retried(url, has_etag, || async {
        Ok(b.presigned(url, Method::POST, &key, &options)
            .await?
            .body(body.clone()))
    })
    .await?;
    Ok(xml_value(&answer, "ETag").map(unescape_etag))
}

/// An ETag as an XML body spells it (its quotes escaped).
pub(super) fn unescape_etag(text: &str) -> String {
    text.replace("&quot;", "\"").replace("&#34;", "\"")
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
            || b.presigned(prefix, Method::GET, &root, &options),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The body S3's API reference gives for CompleteMultipartUpload, with each part's
    /// checksum; a CRC32C as its big-endian bytes in base64.
    #[test]
    fn a_checksummed_complete_names_each_part_its_etag_and_crc32c() {
        let parts = [
            SentPart {
                etag: "\"a54357aff0632cce46d942af68356b38\"".into(),
                crc32c: Some(crc32c::crc32c(b"123456789")),
            },
            SentPart {
                etag: "\"0c78aef83f66abc1fa1e8477f296d394\"".into(),
                crc32c: Some(0),
            },
        ];
        assert_eq!(crc32c_text(0xe306_9283), "4waSgw==");
        assert_eq!(
            complete_body(&parts),
            "<CompleteMultipartUpload>\
             <Part><PartNumber>1</PartNumber><ETag>\"a54357aff0632cce46d942af68356b38\"</ETag>\
             <ChecksumCRC32C>4waSgw==</ChecksumCRC32C></Part>\
             <Part><PartNumber>2</PartNumber><ETag>\"0c78aef83f66abc1fa1e8477f296d394\"</ETag>\
             <ChecksumCRC32C>AAAAAA==</ChecksumCRC32C></Part>\
             </CompleteMultipartUpload>"
        );
        assert_eq!(unescape_etag("&quot;x&quot;"), "\"x\"");
    }
}
