//! Publishing a run's shards to a store, where no rename exists (DESIGN.md, "Writing to
//! a store").
//!
//! The run writes its shards to a local staging folder (under `--tmp-dir`, default
//! `$TMPDIR`), exactly as it would on disk. [`RemoteOutput::commit`] then:
//!
//! 1. without `--overwrite`, claims the output with a conditional put of
//!    `.{prefix}.tfshard-tmp/publishing` (two runs racing: one claims, the other fails
//!    before it touches a final name);
//! 2. uploads every shard (multipart, parts in parallel) under
//!    `{out}/.{prefix}.tfshard-tmp/{run}/`, recording each upload id there first;
//! 3. with `--overwrite`, deletes the old manifests;
//! 4. copies each shard server-side to its final `-of-N` name (on S3 a shard above 5 GiB,
//!    CopyObject's limit, as a multipart copy of ranges, its upload id recorded like the
//!    others'; on Azure, waiting until each copy has completed);
//! 5. with `--overwrite`, deletes the prefix's stale shards;
//! 6. deletes the temporaries, then writes each manifest (a conditional put without
//!    `--overwrite`) — the commit point — and releases the claim.
//!
//! On any failure or interrupt before the manifests, dropping the [`RemoteOutput`]
//! aborts the uploads it started and deletes its temporaries (and its claim).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

use super::{
    abort_multipart, block_on, complete_multipart, copy_recorded, delete, is_problem, list,
    list_async, list_dir, list_dir_async, put, put_part, ObjectUrl, StoreProblem,
};
use crate::error::{Error, ErrorKind, Result};
use crate::manifest::{Manifest, ShardInfo};
use crate::progress::CancelToken;
use crate::shard::journal::{Journal, JOURNAL};
use crate::shard::name;
use crate::shard::{ClosedShard, ShardEvents, ShardHook};
use crate::tfrecord::Compression;

/// Bytes per uploaded part (S3 allows 10,000 parts: objects up to 80 GB).
pub const PART_BYTES: usize = 8 << 20;
/// Parts in flight per run at most (bounds upload memory to 16 MiB; moto, like a real
/// store, takes parts no faster with more in flight from one client on two cores).
const PARTS_IN_FLIGHT: usize = 2;
/// One run's output in a store.
pub(crate) struct RemoteOutput {
    shared: Arc<Shared>,
    /// Uploads started, by local file: as each shard closes, or at the commit.
    tasks: Arc<Mutex<Vec<Upload>>>,
    claimed: AtomicBool,
    committed: AtomicBool,
}

/// A staged file and the task uploading it.
type Upload = (PathBuf, JoinHandle<Result<()>>);

/// What the upload tasks share with the run.
struct Shared {
    out: ObjectUrl,
    prefixes: Vec<String>,
    run: String,
    overwrite: bool,
    staging: PathBuf,
    /// Multipart uploads started and not yet completed or aborted.
    open_uploads: Mutex<Vec<(ObjectUrl, String)>>,
    /// Part buffers in flight, across every upload of the run.
    parts: Arc<Semaphore>,
    /// Set when the run fails or is interrupted: uploads stop at their next part.
    stop: AtomicBool,
    /// `--resume`: the journal header, once set; the run's temporaries then live under
    /// a fixed name, and what they hold is journaled as shards finish uploading.
    resume: Mutex<Option<serde_json::Value>>,
    /// Shards closed by the writer (their sizes and CRCs), by staged path.
    closed: Mutex<Vec<ClosedShard>>,
    /// Uploads finished, by staged path (resumed shards start here).
    uploaded: Mutex<Vec<PathBuf>>,
}

impl RemoteOutput {
    /// Checks that the output may be written (without `overwrite`, nothing but hidden
    /// temporaries under it) and makes the local staging folder.
    ///
    /// # Errors
    ///
    /// `output folder is not empty`, a store error, or a local I/O error. A `part` (a
    /// worker's) is written with `overwrite` semantics and no claim, and leaves other
    /// runs' temporaries alone.
    pub(crate) fn prepare(
        out: ObjectUrl,
        prefixes: &[String],
        overwrite: bool,
        tmp_dir: Option<&Path>,
        part: bool,
        resume: bool,
    ) -> Result<RemoteOutput> {
        let (objects, dirs) = if part {
            // A worker's part: replaced as a whole by a retried worker.
            (Vec::new(), Vec::new())
        } else {
            list_dir(&out)?
        };
        let hidden = |n: &str| {
            prefixes
                .iter()
                .any(|p| n == name::tmp_dir_name(p) || n == format!(".{p}.tfshard-parts"))
        };
        if !overwrite
            && (objects.iter().any(|o| !hidden(o.url.file_name()))
                || dirs.iter().any(|d| !hidden(d)))
        {
            return Err(Error::new(ErrorKind::OutputExists).with_file(out.to_path()));
        }
        // A resumable run's temporaries have a fixed name, where its rerun finds them.
        let run = if resume {
            "resume".to_owned()
        } else {
            name::attempt_id()
        };
        let base = tmp_dir
            .map(Path::to_path_buf)
            .unwrap_or_else(std::env::temp_dir);
        // The local staging folder is always this process's own.
        let staging = base.join(format!(".tfshard-staging-{}", name::attempt_id()));
        std::fs::create_dir_all(&staging).map_err(|e| Error::from(e).with_file(&staging))?;
        let output = RemoteOutput {
            shared: Arc::new(Shared {
                out,
                prefixes: prefixes.to_vec(),
                run,
                overwrite,
                staging,
                open_uploads: Mutex::new(Vec::new()),
                parts: Arc::new(Semaphore::new(PARTS_IN_FLIGHT)),
                stop: AtomicBool::new(false),
                resume: Mutex::new(None),
                closed: Mutex::new(Vec::new()),
                uploaded: Mutex::new(Vec::new()),
            }),
            tasks: Default::default(),
            claimed: AtomicBool::new(false),
            committed: AtomicBool::new(false),
        };
        if overwrite && !part && !resume {
            // A killed run's leftovers: abort its recorded uploads, delete its objects.
            // (Not for a part: a copy of the same worker may be running beside it.)
            for prefix in prefixes {
                let tmp = output.shared.out.join(&name::tmp_dir_name(prefix));
                output.shared.clear_tmp(&tmp)?;
            }
        }
        Ok(output)
    }

    /// The local folder the run writes its shards to before they are uploaded.
    pub(crate) fn staging(&self) -> &Path {
        &self.shared.staging
    }

    /// Streams each shard of output `prefix` up while it is written: its parts go as
    /// soon as the staged file holds them, and the upload completes when it closes.
    pub(crate) fn shard_hook(&self, prefix: &str) -> ShardHook {
        ShardHook::new(Stager {
            shared: self.shared.clone(),
            prefix: prefix.to_owned(),
            tasks: self.tasks.clone(),
            senders: Mutex::new(Vec::new()),
        })
    }

    /// With `--resume`: checks the journal an earlier run left in the store against
    /// this run's `header`, keeps the uploaded shards that are still sound (size and
    /// CRC32C, read back), and returns them, staged-path named, for the shard writer of
    /// `prefix`; from here on this run journals its uploads.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::ResumeMismatch`] naming the first difference, or a store error.
    pub(crate) fn begin_resume(
        &self,
        prefix: &str,
        staging_tmp: &Path,
        header: serde_json::Value,
    ) -> Result<Vec<ClosedShard>> {
        let s = &self.shared;
        // Uploads the killed run started and never completed: abort them (their shards
        // are not in the journal, and go up again).
        super::abort_recorded_below(&s.run_dir(prefix).join("uploads"))?;
        let journal_url = s.run_dir(prefix).join(JOURNAL);
        let mut finished = Vec::new();
        match super::read_all(&journal_url) {
            Ok(bytes) => {
                let journal: Journal = serde_json::from_slice(&bytes).map_err(|e| {
                    Error::new(ErrorKind::ManifestInvalid(e)).with_file(journal_url.to_path())
                })?;
                if let Some(difference) = journal.difference(&header) {
                    return Err(crate::shard::journal::mismatch(difference)
                        .with_file(journal_url.to_path()));
                }
                for entry in &journal.shards {
                    let url = s.run_dir(prefix).join(&entry.file);
                    let sound = super::read_all(&url).is_ok_and(|b| {
                        b.len() as u64 == entry.bytes
                            && crate::tfrecord::frame::crc32c(&b) == entry.crc32c
                    });
                    if !sound || entry.idx.is_some() {
                        break;
                    }
                    let path = staging_tmp.join(&entry.file);
                    s.uploaded
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(path.clone());
                    finished.push(ClosedShard {
                        path,
                        idx_path: None,
                        records: entry.records,
                        bytes: entry.bytes,
                        crc32c: entry.crc32c,
                    });
                }
            }
            Err(e) if is_problem(&e, StoreProblem::NotFound) => {}
            Err(e) => return Err(e),
        }
        s.closed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(finished.iter().cloned());
        *s.resume.lock().unwrap_or_else(|p| p.into_inner()) = Some(header);
        Ok(finished)
    }

    fn claim_url(&self) -> ObjectUrl {
        let s = &self.shared;
        s.out
            .join(&name::tmp_dir_name(&s.prefixes[0]))
            .join("publishing")
    }

    /// Waits for the upload of `local` (starting it if no hook did).
    async fn uploaded(&self, prefix: &str, local: &Path) -> Result<()> {
        if self
            .shared
            .uploaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|p| p == local)
        {
            return Ok(());
        }
        let task = {
            let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
            match tasks.iter().position(|(p, _)| p == local) {
                Some(i) => tasks.swap_remove(i).1,
                None => self.shared.start_upload(prefix, local),
            }
        };
        task.await
            .map_err(|e| Error::from(std::io::Error::other(e)))?
    }

    /// Publishes every output of the run (see the module docs). Returns the manifests'
    /// URLs, in `prefixes` order.
    ///
    /// # Errors
    ///
    /// A store error naming the URL; another run publishing to the same output.
    pub(crate) fn commit(
        &self,
        shards: &[Vec<ClosedShard>],
        compression: Compression,
        manifests: &mut [Manifest],
        cancel: &CancelToken,
    ) -> Result<Vec<PathBuf>> {
        let s = &*self.shared;
        if !s.overwrite {
            match put(&self.claim_url(), s.run.clone().into_bytes(), true) {
                Ok(()) => self.claimed.store(true, Ordering::SeqCst),
                Err(e) if is_problem(&e, StoreProblem::AlreadyExists) => {
                    // A resumable run killed while publishing left its claim: ours.
                    let resuming = s.resume.lock().unwrap_or_else(|p| p.into_inner()).is_some();
                    let holder = super::read_all(&self.claim_url()).ok();
                    if resuming && holder.is_some_and(|h| h[..] == *s.run.as_bytes()) {
                        self.claimed.store(true, Ordering::SeqCst);
                    } else {
                        return Err(Error::new(ErrorKind::OutputClaimed).with_file(s.out.to_path()));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        // 2. Every shard uploaded under the run's temporary folder.
        block_on(async {
            let mut waits = Vec::new();
            for (prefix, split) in s.prefixes.iter().zip(shards) {
                for shard in split {
                    for local in std::iter::once(&shard.path).chain(&shard.idx_path) {
                        waits.push(self.uploaded(prefix, local));
                    }
                }
            }
            futures_util::future::try_join_all(waits).await
        })?;
        cancel.check()?;
        crate::failpoint::hit("store:uploaded")?;
        // 3-5. Old manifests go, new shards are copied into place, stale shards go.
        block_on(async {
            if s.overwrite {
                for prefix in &s.prefixes {
                    delete(&s.out.join(&name::manifest_name(prefix))).await?;
                }
            }
            let mut pairs = Vec::new();
            for (prefix, split) in s.prefixes.iter().zip(shards) {
                for (i, shard) in split.iter().enumerate() {
                    let final_name = name::shard_name(prefix, i, split.len(), compression);
                    pairs.push((
                        prefix,
                        s.temporary(prefix, &shard.path),
                        s.out.join(&final_name),
                    ));
                    if let Some(idx) = &shard.idx_path {
                        let final_idx = s.out.join(&format!("{final_name}.idx"));
                        pairs.push((prefix, s.temporary(prefix, idx), final_idx));
                    }
                }
            }
            futures_util::future::try_join_all(
                pairs
                    .iter()
                    .map(|(prefix, from, to)| s.copy_into_place(prefix, from, to)),
            )
            .await?;
            if s.overwrite {
                let (objects, _) = list_dir_async(&s.out).await?;
                for (prefix, split) in s.prefixes.iter().zip(shards) {
                    let fresh: Vec<String> = (0..split.len())
                        .map(|i| name::shard_name(prefix, i, split.len(), compression))
                        .collect();
                    for o in &objects {
                        let n = o.url.file_name();
                        let stem = n.strip_suffix(".idx").unwrap_or(n);
                        if name::is_own_shard(prefix, n) && !fresh.iter().any(|f| f == stem) {
                            delete(&o.url).await?;
                        }
                    }
                }
            }
            for prefix in &s.prefixes {
                for o in list_async(&s.run_dir(prefix)).await? {
                    delete(&o.url).await?;
                }
            }
            Ok::<(), Error>(())
        })?;
        crate::failpoint::hit("store:copied")?;
        // 6. The manifests: the commit point.
        let mut paths = Vec::new();
        for ((prefix, split), manifest) in s.prefixes.iter().zip(shards).zip(manifests.iter_mut()) {
            fill_shards(manifest, prefix, split, compression);
            let url = s.out.join(&name::manifest_name(prefix));
            let mut json = serde_json::to_vec_pretty(&*manifest)
                .map_err(|e| Error::from(std::io::Error::other(e)))?;
            json.push(b'\n');
            match put(&url, json, !s.overwrite) {
                Err(e) if is_problem(&e, StoreProblem::AlreadyExists) => {
                    return Err(Error::new(ErrorKind::OutputClaimed).with_file(url.to_path()))
                }
                other => other?,
            }
            paths.push(url.to_path());
        }
        self.committed.store(true, Ordering::SeqCst);
        if self.claimed.swap(false, Ordering::SeqCst) {
            let _ = block_on(delete(&self.claim_url()));
        }
        Ok(paths)
    }
}

impl Shared {
    fn run_dir(&self, prefix: &str) -> ObjectUrl {
        self.out.join(&name::tmp_dir_name(prefix)).join(&self.run)
    }

    /// Where the upload of a staged file goes.
    fn temporary(&self, prefix: &str, local: &Path) -> ObjectUrl {
        let file = local.file_name().unwrap_or_default().to_string_lossy();
        self.run_dir(prefix).join(&file)
    }

    fn start_stream(
        self: &Arc<Self>,
        prefix: &str,
        local: &Path,
        staged: watch::Receiver<Staged>,
    ) -> JoinHandle<Result<()>> {
        let this = self.clone();
        let (prefix, local) = (prefix.to_owned(), local.to_path_buf());
        super::spawn(async move {
            let target = this.temporary(&prefix, &local);
            this.stream(&prefix, &local, &target, staged).await?;
            this.staged_done(&local);
            this.uploaded
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(local.clone());
            this.journal(&prefix).await
        })
    }

    /// With `--resume`: records in the store the shards uploaded so far, from the first
    /// on without a gap (the rerun reuses exactly those).
    async fn journal(&self, prefix: &str) -> Result<()> {
        let Some(header) = self
            .resume
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        else {
            return Ok(());
        };
        let journal = {
            let closed = self.closed.lock().unwrap_or_else(|p| p.into_inner());
            let uploaded = self.uploaded.lock().unwrap_or_else(|p| p.into_inner());
            let shards = closed
                .iter()
                .take_while(|c| uploaded.contains(&c.path))
                .map(crate::shard::journal::entry)
                .collect();
            Journal { header, shards }
        };
        let bytes =
            serde_json::to_vec(&journal).map_err(|e| Error::from(std::io::Error::other(e)))?;
        super::put_async(&self.run_dir(prefix).join(JOURNAL), bytes, false).await?;
        crate::failpoint::hit("shard:journaled")
    }

    /// Removes a staged file once uploaded.
    fn staged_done(&self, local: &Path) {
        let _ = std::fs::remove_file(local);
    }

    /// Copies a shard's temporary to its final name on the server. A multipart copy
    /// (S3, above 5 GiB) is recorded as the run's uploads are, so that a killed run's
    /// can be aborted by the next.
    async fn copy_into_place(&self, prefix: &str, from: &ObjectUrl, to: &ObjectUrl) -> Result<()> {
        copy_recorded(
            from,
            to,
            async |id: String| Ok((self.record_upload(prefix, to, &id).await?, id)),
            // A record left behind goes with the run's temporaries.
            async |(record, id)| {
                let _ = self.forget_upload(&id, &record).await;
            },
        )
        .await
    }

    /// Records a multipart upload started for `target`: among the run's open uploads,
    /// and in the run's temporary folder, where a later run finds it to abort it.
    async fn record_upload(&self, prefix: &str, target: &ObjectUrl, id: &str) -> Result<ObjectUrl> {
        self.open_uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((target.clone(), id.to_owned()));
        let record = self
            .run_dir(prefix)
            .join("uploads")
            .join(target.file_name());
        super::put_async(&record, super::upload_record(target, id), false).await?;
        Ok(record)
    }

    /// An upload completed or aborted: no longer open, its record deleted.
    async fn forget_upload(&self, id: &str, record: &ObjectUrl) -> Result<()> {
        self.open_uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(_, i)| i != id);
        delete(record).await
    }

    fn start_upload(self: &Arc<Self>, prefix: &str, local: &Path) -> JoinHandle<Result<()>> {
        let this = self.clone();
        let (prefix, local) = (prefix.to_owned(), local.to_path_buf());
        super::spawn(async move {
            let target = this.temporary(&prefix, &local);
            this.upload(&prefix, &local, &target).await?;
            this.staged_done(&local);
            Ok(())
        })
    }

    /// Aborts the uploads recorded under `tmp` and deletes every object there.
    fn clear_tmp(&self, tmp: &ObjectUrl) -> Result<()> {
        let objects = list(tmp)?;
        block_on(async {
            for o in &objects {
                if o.url.parent().file_name() == "uploads" {
                    super::abort_recorded(&o.url).await?;
                }
            }
            for o in &objects {
                delete(&o.url).await?;
            }
            Ok(())
        })
    }

    /// Uploads one complete local file to `target`.
    async fn upload(&self, prefix: &str, local: &Path, target: &ObjectUrl) -> Result<()> {
        let at = |e: std::io::Error| Error::from(e).with_file(local);
        let size = std::fs::metadata(local).map_err(at)?.len();
        let (_tx, rx) = watch::channel(Staged {
            written: size,
            closed: true,
        });
        self.stream(prefix, local, target, rx).await
    }

    /// Uploads a staged file to `target` as it grows: each full part as soon as the file
    /// holds it (as many in flight as the run's part budget allows), the rest when the
    /// file is closed. A file that ends smaller than one part goes up in one request.
    async fn stream(
        &self,
        prefix: &str,
        local: &Path,
        target: &ObjectUrl,
        mut staged: watch::Receiver<Staged>,
    ) -> Result<()> {
        let at = |e: std::io::Error| Error::from(e).with_file(local);
        let part = PART_BYTES as u64;
        let mut upload: Option<(String, ObjectUrl)> = None;
        let mut parts: Vec<JoinHandle<Result<object_store::multipart::PartId>>> = Vec::new();
        let mut sent = 0u64;
        let file = Arc::new(std::fs::File::open(local).map_err(at)?);
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Err(Error::new(ErrorKind::Interrupted));
            }
            let Staged { written, closed } = *staged.borrow_and_update();
            if closed && upload.is_none() && written < part {
                // One request: S3 needs parts of 5 MiB but the last.
                let bytes = std::fs::read(local).map_err(at)?;
                return super::put_async(target, bytes, false).await;
            }
            while written >= sent + part || (closed && written > sent) {
                if upload.is_none() {
                    let started = super::create_recorded(target, async |id: &str| {
                        self.record_upload(prefix, target, id).await
                    })
                    .await?;
                    super::kill_point("store:uploading").await?;
                    upload = Some(started);
                }
                let (id, _) = upload.as_ref().expect("started just above");
                let range = sent..(sent + part).min(written);
                parts.push(self.send_part(&file, local, target, id, parts.len(), range));
                sent = (sent + part).min(written);
            }
            if closed {
                break;
            }
            // Woken by the writer, or every 100 ms to see whether the run has stopped.
            let wait = tokio::time::timeout(Duration::from_millis(100), staged.changed());
            if let Ok(Err(_)) = wait.await {
                // The writer went away without closing the shard: the run failed.
                return Err(Error::new(ErrorKind::Interrupted));
            }
        }
        let (id, record) = upload.expect("a file of a part or more started an upload");
        let mut done = Vec::with_capacity(parts.len());
        for p in parts {
            done.push(
                p.await
                    .map_err(|e| Error::from(std::io::Error::other(e)))??,
            );
        }
        complete_multipart(target, &id, done).await?;
        self.forget_upload(&id, &record).await
    }

    /// Sends bytes `range` of the staged file as part `index`, once a part buffer is
    /// free. Buffers are anonymous maps, returned to the system when the part is sent.
    fn send_part(
        &self,
        file: &Arc<std::fs::File>,
        local: &Path,
        target: &ObjectUrl,
        id: &str,
        index: usize,
        range: std::ops::Range<u64>,
    ) -> JoinHandle<Result<object_store::multipart::PartId>> {
        let parts = self.parts.clone();
        let (file, local, target, id) = (
            file.clone(),
            local.to_path_buf(),
            target.clone(),
            id.to_owned(),
        );
        super::spawn(async move {
            let _permit = parts.acquire().await.expect("never closed");
            let at = |e: std::io::Error| Error::from(e).with_file(&local);
            let mut buf =
                memmap2::MmapMut::map_anon((range.end - range.start) as usize).map_err(at)?;
            std::os::unix::fs::FileExt::read_exact_at(&*file, &mut buf, range.start).map_err(at)?;
            let bytes = Bytes::from_owner(buf.make_read_only().map_err(at)?);
            put_part(&target, &id, index, bytes).await
        })
    }
}

/// How much of a staged shard is on disk, and whether it is complete.
#[derive(Debug, Clone, Copy)]
struct Staged {
    written: u64,
    closed: bool,
}

/// The store output's side of the shard writers: starts each shard's upload when the
/// shard is created, and tells it how far the file has grown.
struct Stager {
    shared: Arc<Shared>,
    prefix: String,
    tasks: Arc<Mutex<Vec<Upload>>>,
    senders: Mutex<Vec<(PathBuf, Arc<watch::Sender<Staged>>)>>,
}

impl ShardEvents for Stager {
    fn opened(&self, path: &Path) -> Box<dyn FnMut(u64) + Send> {
        let (tx, rx) = watch::channel(Staged {
            written: 0,
            closed: false,
        });
        let tx = Arc::new(tx);
        self.senders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((path.to_path_buf(), tx.clone()));
        let task = self.shared.start_stream(&self.prefix, path, rx);
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((path.to_path_buf(), task));
        Box::new(move |written| {
            tx.send_modify(|s| s.written = written);
        })
    }

    fn closed(&self, shard: &ClosedShard) {
        self.shared
            .closed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(shard.clone());
        let sender = {
            let mut senders = self.senders.lock().unwrap_or_else(|p| p.into_inner());
            senders
                .iter()
                .position(|(p, _)| *p == shard.path)
                .map(|i| senders.swap_remove(i).1)
        };
        if let Some(tx) = sender {
            tx.send_modify(|s| {
                s.written = shard.bytes;
                s.closed = true;
            });
        }
        if let Some(idx) = &shard.idx_path {
            let task = self.shared.start_upload(&self.prefix, idx);
            self.tasks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((idx.clone(), task));
        }
    }
}

/// Fills a manifest's shard list and totals from the run's closed shards.
pub(crate) fn fill_shards(
    manifest: &mut Manifest,
    prefix: &str,
    shards: &[ClosedShard],
    compression: Compression,
) {
    manifest.shards = shards
        .iter()
        .enumerate()
        .map(|(i, s)| ShardInfo {
            file: name::shard_name(prefix, i, shards.len(), compression),
            records: s.records,
            bytes: s.bytes,
            crc32c: format!("{:08x}", s.crc32c),
        })
        .collect();
    manifest.records = shards.iter().map(|s| s.records).sum();
    manifest.bytes = shards.iter().map(|s| s.bytes).sum();
}

impl Drop for RemoteOutput {
    fn drop(&mut self) {
        let s = &*self.shared;
        if !self.committed.load(Ordering::SeqCst) {
            // Failed or interrupted: let the uploads stop at their next part (so every
            // upload started is recorded), abort them, delete what we wrote.
            s.stop.store(true, Ordering::SeqCst);
            let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()));
            let uploads = block_on(async {
                for (_, task) in tasks {
                    let _ = task.await;
                }
                std::mem::take(&mut *s.open_uploads.lock().unwrap_or_else(|p| p.into_inner()))
            });
            block_on(async {
                for (url, id) in &uploads {
                    let _ = abort_multipart(url, id).await;
                }
            });
            let resumable = s.resume.lock().unwrap_or_else(|p| p.into_inner()).is_some();
            for prefix in s.prefixes.iter().filter(|_| !resumable) {
                if let Ok(objects) = list(&s.run_dir(prefix)) {
                    block_on(async {
                        for o in &objects {
                            let _ = delete(&o.url).await;
                        }
                    });
                }
            }
            if self.claimed.load(Ordering::SeqCst) {
                let _ = block_on(delete(&self.claim_url()));
            }
        }
        let _ = std::fs::remove_dir_all(&s.staging);
    }
}
