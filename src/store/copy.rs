//! Server-side copies: one request, or on S3 above CopyObject's 5 GiB a multipart copy
//! of ranges (UploadPartCopy, presigned by `object_store`'s signer) in parallel, its
//! upload id recorded before its first part; on Azure, a copy waited for until the blob
//! says it completed.

use std::ops::Range;
use std::time::{Duration, Instant};

use object_store::signer::{HeaderName, HeaderValue, Method, SignedUrlOptions};
use object_store::ObjectStoreExt;

use super::client::{block_on, bucket, http_client, request, send_retried, Bucket, PRESIGNED_FOR};
use super::errors::{has_etag, shorten, store_error, xml_value, StoreProblem};
use super::multipart::{abort_multipart, complete_multipart, unescape_etag, SentPart};
use super::objects::{delete, put_async};
use super::records::{create_recorded, kill_point, upload_record};
use super::url::{ObjectUrl, Scheme};
use crate::error::{Error, ErrorKind, Result};

/// `copy_recorded` for a caller that keeps no upload ids (blocking): a multipart copy's
/// id is recorded in the object `record` while it runs (`abort_uploads_under` aborts it
/// after a kill).
///
/// # Errors
///
/// A store error naming the URL.
pub fn copy_object_recorded(from: &ObjectUrl, to: &ObjectUrl, record: &ObjectUrl) -> Result<()> {
    block_on(copy_recorded(
        from,
        to,
        async |id: String| put_async(record, upload_record(to, &id), false).await,
        async |()| {
            let _ = delete(record).await;
        },
    ))
}

/// Copies an object within its bucket, on the server: one request, or on S3, for an
/// object above [`IoOptions::max_copy_bytes`](super::IoOptions::max_copy_bytes), a multipart copy; on Azure, where a copy may finish
/// after its request, this returns once the copy has completed.
///
/// A multipart copy's id goes to `record` before its first part is sent. Once the copy
/// has completed, or failed and been aborted, `forget` gets what `record` returned; an
/// abort that fails skips `forget`, so the record stays for a later run to abort.
pub(crate) async fn copy_recorded<R>(
    from: &ObjectUrl,
    to: &ObjectUrl,
    record: impl AsyncFnOnce(String) -> Result<R>,
    forget: impl AsyncFnOnce(R),
) -> Result<()> {
    let mut recorded = None;
    let slot = &mut recorded;
    let copied = copy_on_server(from, to, async move |id: String| {
        *slot = Some((id.clone(), record(id).await?));
        Ok(())
    })
    .await;
    if let Some((id, kept)) = recorded {
        if copied.is_err() && abort_multipart(to, &id).await.is_err() {
            return copied;
        }
        forget(kept).await;
    }
    copied
}

/// [`copy_recorded`]'s request: calls `started` with the id of a multipart copy before
/// its first part, and leaves a multipart copy that fails open.
async fn copy_on_server(
    from: &ObjectUrl,
    to: &ObjectUrl,
    started: impl AsyncFnOnce(String) -> Result<()>,
) -> Result<()> {
    let b = bucket(from)?;
    let (src, dst) = (from.object_key()?, to.object_key()?);
    match from.scheme() {
        Scheme::S3 => {
            let source = request(from, b.store.head(&src)).await?;
            if source.size > from.io().max_copy_bytes {
                let etag = source.e_tag.as_deref();
                return multipart_copy(&b, from, to, source.size, etag, started).await;
            }
            request(to, b.store.copy(&src, &dst)).await
        }
        Scheme::Azure => {
            request(to, b.store.copy(&src, &dst)).await?;
            wait_for_copy(&b, to).await
        }
        Scheme::Gcs => request(to, b.store.copy(&src, &dst)).await,
    }
}

/// Copies `from` (`size` bytes, pinned to `etag`) to `to` as a multipart upload whose
/// parts are ranges of the source, copied on the server in parallel (the permits bound
/// them). Left open on failure (the caller aborts it).
async fn multipart_copy(
    b: &Bucket,
    from: &ObjectUrl,
    to: &ObjectUrl,
    size: u64,
    etag: Option<&str>,
    started: impl AsyncFnOnce(String) -> Result<()>,
) -> Result<()> {
    // Settings whose headers an UploadPartCopy would need and this one does not send.
    for var in ["AWS_CHECKSUM_ALGORITHM", "AWS_SSE_CUSTOMER_KEY_BASE64"] {
        if std::env::var_os(var).is_some_and(|v| !v.is_empty()) {
            return Err(Error::invalid_option(
                "URL",
                format!(
                    "{to}: a shard above {} bytes is copied in parts, which \
                     tfshard cannot do with {var} set; use a smaller --target-shard-size",
                    from.io().max_copy_bytes
                ),
            ));
        }
    }
    let (id, ()) =
        create_recorded(to, false, async |id: &str| started(id.to_owned()).await).await?;
    // S3 takes 10,000 parts at most.
    let step = to.io().copy_part_bytes.max(size.div_ceil(10_000));
    let ranges = (0..size)
        .step_by(step as usize)
        .map(|s| s..(s + step).min(size));
    let parts = ranges
        .enumerate()
        .map(|(i, range)| copy_part(b, from, to, &id, i, range, etag));
    let parts = futures_util::future::try_join_all(parts).await?;
    kill_point("store:parts-copied").await?;
    complete_multipart(to, &id, parts).await.map(drop)
}

/// What an S3 key is in an `x-amz-copy-source` header: URL-encoded, `/` kept.
const COPY_SOURCE_KEY: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// Copies bytes `range` of `from` into part `index` of upload `id` of `to`
/// (UploadPartCopy, which `object_store` has no call for: presigned by its signer, with
/// the copy headers in the signature, and retried here as its own requests are).
async fn copy_part(
    b: &Bucket,
    from: &ObjectUrl,
    to: &ObjectUrl,
    id: &str,
    index: usize,
    range: Range<u64>,
    etag: Option<&str>,
) -> Result<SentPart> {
    let key = to.object_key()?;
    let bucket_name = from.root().trim_start_matches("s3://");
    let source = format!(
        "/{bucket_name}/{}",
        percent_encoding::utf8_percent_encode(from.key(), COPY_SOURCE_KEY)
    );
    let header = |name: &'static str, value: &str| {
        HeaderValue::from_str(value)
            .map(|v| (HeaderName::from_static(name), v))
            .map_err(|_| {
                Error::invalid_option("URL", format!("{from}: not a valid copy source header"))
            })
    };
    let mut headers = vec![
        header("x-amz-copy-source", &source)?,
        header(
            "x-amz-copy-source-range",
            &format!("bytes={}-{}", range.start, range.end - 1),
        )?,
    ];
    if let Some(etag) = etag {
        headers.push(header("x-amz-copy-source-if-match", etag)?);
    }
    let mut options = SignedUrlOptions::new().with_query([
        ("partNumber", (index + 1).to_string()),
        ("uploadId", id.to_owned()),
    ]);
    for (name, value) in &headers {
        options = options.with_signed_header(name.clone(), value.clone());
    }
    let body = send_retried(to, has_etag, || async {
        let mut req = b
            .presigned(to, Method::PUT, &key, &options)
            .await?
            .header("content-length", "0");
        for (name, value) in &headers {
            req = req.header(name, value);
        }
        Ok(req)
    })
    .await?
    .1;
    let etag = xml_value(&body, "ETag").unwrap_or_default();
    Ok(SentPart {
        etag: unescape_etag(etag),
        crc32c: None,
    })
}

/// Waits until a copy to `to` has completed (Azure's Copy Blob may answer `pending` and
/// go on in the background): polls the blob's `x-ms-copy-status`, backing off, within
/// `--io-timeout`. A copy that failed or was aborted is an error naming the blob.
///
/// A SAS-token credential cannot presign the status request (nor can customer-provided
/// keys); the copy is then trusted as answered (copies within one storage account
/// complete at once in practice). Any other signing failure is an error.
async fn wait_for_copy(b: &Bucket, to: &ObjectUrl) -> Result<()> {
    let key = to.object_key()?;
    let started = Instant::now();
    let mut backoff = Duration::from_millis(100);
    loop {
        if b.sas_token {
            // A SAS-token credential cannot sign another SAS: the copy is trusted as
            // answered.
            return Ok(());
        }
        let url = match b.signer.signed_url(Method::GET, &key, PRESIGNED_FOR).await {
            Ok(url) => url,
            // Customer-provided keys sign none: the copy is trusted as answered.
            Err(object_store::Error::NotSupported { .. }) => return Ok(()),
            Err(e) => return Err(store_error(to, &e, None)),
        };
        let (headers, _) = send_retried(
            to,
            |_| true,
            || async { Ok(http_client(to.io())?.request(Method::HEAD, url.as_str())) },
        )
        .await?;
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        match copy_state(&header("x-ms-copy-status")) {
            CopyState::Done => return Ok(()),
            CopyState::Pending if started.elapsed() < to.io().timeout => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            CopyState::Pending => {
                return Err(Error::new(ErrorKind::Store {
                    problem: StoreProblem::Other,
                    detail: format!(
                        "the server-side copy was still pending after {:?} (--io-timeout; {})",
                        to.io().timeout,
                        header("x-ms-copy-progress")
                    ),
                })
                .with_file(to.to_path()))
            }
            CopyState::Failed(status) => {
                return Err(Error::new(ErrorKind::Store {
                    problem: StoreProblem::Other,
                    detail: shorten(&format!(
                        "the server-side copy {status}: {}",
                        header("x-ms-copy-status-description")
                    )),
                })
                .with_file(to.to_path()))
            }
        }
    }
}

/// A blob's copy status, as Azure's `x-ms-copy-status` says it.
#[derive(Debug, PartialEq, Eq)]
enum CopyState {
    /// `success`, or no status (the blob was not written by a copy).
    Done,
    /// `pending`: still copying.
    Pending,
    /// `aborted` or `failed` (or a status we do not know).
    Failed(String),
}

fn copy_state(status: &str) -> CopyState {
    match status.trim().to_ascii_lowercase().as_str() {
        "" | "success" => CopyState::Done,
        "pending" => CopyState::Pending,
        other => CopyState::Failed(other.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_states() {
        assert_eq!(copy_state(""), CopyState::Done);
        assert_eq!(copy_state("success"), CopyState::Done);
        assert_eq!(copy_state("Pending"), CopyState::Pending);
        assert_eq!(copy_state("failed"), CopyState::Failed("failed".into()));
        assert_eq!(copy_state("aborted"), CopyState::Failed("aborted".into()));
    }
}
