//! Upload records: the id of every multipart upload a run starts is written to an object
//! in its temporary folder before the first part, so that whoever removes the record (a
//! rerun, `--overwrite`, `finalize`) can abort an upload a killed run left open.

use super::client::block_on;
use super::errors::{is_problem, StoreProblem};
use super::multipart::{abort_multipart, create_multipart, pending_uploads};
use super::objects::{delete, list_async, read_all_async};
use super::url::ObjectUrl;
use crate::error::Result;

/// The record of a multipart upload started for `target`, kept in a temporary folder
/// (`uploads/NAME`) so that a later run can abort it after a kill: its key and id.
pub(crate) fn upload_record(target: &ObjectUrl, id: &str) -> Vec<u8> {
    format!("{}\n{id}", target.key()).into_bytes()
}

/// Aborts the upload that the record `record` names, and deletes the record.
pub(crate) async fn abort_recorded(record: &ObjectUrl) -> Result<()> {
    let text = match read_all_async(record).await {
        Err(e) if is_problem(&e, StoreProblem::NotFound) => return Ok(()),
        other => other?,
    };
    if let Some((key, id)) = String::from_utf8_lossy(&text).split_once('\n') {
        let target = record.with_key(key);
        abort_multipart(&target, id).await?;
    }
    delete(record).await
}

/// Aborts every upload under the folder `dir` (blocking): those recorded anywhere below
/// it (in any `uploads/` folder), and on S3 those the store lists as pending there, which
/// covers an upload whose process was killed between its creation and its record.
///
/// # Errors
///
/// A store error naming the URL.
pub fn abort_uploads_under(dir: &ObjectUrl) -> Result<()> {
    block_on(async {
        for object in list_async(dir).await? {
            if object.url.parent().file_name() == "uploads" {
                abort_recorded(&object.url).await?;
            }
        }
        for (target, id) in pending_uploads(dir).await? {
            abort_multipart(&target, &id).await?;
        }
        Ok(())
    })
}

/// Aborts the uploads pending directly in folder `dir` (not below it; on S3) whose names
/// `ours` accepts: shards a killed commit was uploading under their final names.
///
/// # Errors
///
/// A store error naming the URL.
pub fn abort_pending_in(dir: &ObjectUrl, ours: impl Fn(&str) -> bool) -> Result<()> {
    block_on(async {
        for (target, id) in pending_uploads(dir).await? {
            let here =
                target.parent().key().trim_end_matches('/') == dir.key().trim_end_matches('/');
            if here && ours(target.file_name()) {
                abort_multipart(&target, &id).await?;
            }
        }
        Ok(())
    })
}

/// Held from a multipart upload's creation until its id is recorded, and by the failure
/// points that stand for a kill: uploads and copies run side by side, and a test's kill
/// must not fall between another one's two requests. (A real kill can: that upload is
/// then found by listing the pending uploads under the temporary folder, on S3.)
static RECORDING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Starts a multipart upload of `target` (with `checksums`, one of parts with CRC32Cs)
/// and hands its id to `record` (which keeps it where a later run finds it) before
/// anything else may stop the process.
pub(crate) async fn create_recorded<R>(
    target: &ObjectUrl,
    checksums: bool,
    record: impl AsyncFnOnce(&str) -> Result<R>,
) -> Result<(String, R)> {
    let _recording = RECORDING.lock().await;
    let id = create_multipart(target, checksums).await?;
    // A kill here leaves an upload no record names (found by listing the pending ones).
    crate::failpoint::hit("store:created")?;
    let kept = record(&id).await?;
    Ok((id, kept))
}

/// Failure point `name`, where a kill finds every upload started so far recorded.
pub(crate) async fn kill_point(name: &str) -> Result<()> {
    let _recording = RECORDING.lock().await;
    crate::failpoint::hit(name)
}
