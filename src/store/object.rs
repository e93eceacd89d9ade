//! The store [`Destination`]: an object prefix (`s3://`, `gs://`, `az://`), where no
//! rename exists.
//!
//! A run writes its shards to a local staging folder (under `--tmp-dir`, default
//! `$TMPDIR`), exactly as it would on disk, and each shard's parts go up while it is
//! written ([`Stager`]). [`Staging::commit`] then:
//!
//! 1. without `--overwrite`, claims the output ([`Claims`]:
//!    `.{prefix}.tfshard-tmp/publishing`, a conditional put refreshed while the run
//!    lives; two runs racing: one claims, the other fails before it touches a final
//!    name);
//! 2. waits for every shard's upload under `{out}/.{prefix}.tfshard-tmp/{run}/` (each
//!    upload id recorded there before its first part); into a claimed output found
//!    empty, each shard is copied to its final name as soon as its upload is done;
//! 3. publishes by the one protocol ([`super::publish`]): with `--overwrite` the old
//!    manifests go; the prefix's other shards go; each shard is copied server-side to
//!    its final `-of-N` name, all at once (on S3 a shard above 5 GiB, CopyObject's
//!    limit, as a multipart copy of ranges, its upload id recorded like the others'; on
//!    Azure, waiting until each copy has completed; a shard whose upload starts only
//!    now (no hook streamed it: `--min-shards`) went up under its final name, and
//!    completing that upload takes the place of the copy); the temporaries go; each
//!    manifest is written (a conditional put without `--overwrite`), the commit point;
//! 4. releases the claim; a claimed run then clears what killed runs left in the
//!    temporary folders (their uploads aborted).
//!
//! On any failure or interrupt before the manifests, dropping the staging aborts the
//! uploads it started and deletes its temporaries (and its claim).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

use super::claim::{Claims, Held};
use super::destination::{
    ClosedShard, Destination, LastGuess, Publication, ShardEvents, ShardHook, ShardStats,
    StagePlan, Staging,
};
use super::journal::{self, Journal, JOURNAL};
use super::publish::{publish, Mode, Set, Steps};
use super::{
    abort_multipart, block_on, complete_multipart, copy_recorded, delete, is_problem, list,
    list_async, list_dir, put, put_part, ObjectUrl, SentPart, StoreProblem,
};
use crate::error::{Error, ErrorKind, Result};
use crate::progress::CancelToken;
use crate::scratch::Scratch;

/// An output prefix in a store.
pub(crate) struct ObjectPrefix {
    url: ObjectUrl,
}

impl ObjectPrefix {
    pub(crate) fn new(url: ObjectUrl) -> ObjectPrefix {
        ObjectPrefix { url }
    }

    fn at(&self, rel: &str) -> ObjectUrl {
        self.url.join(rel)
    }
}

impl Destination for ObjectPrefix {
    fn display(&self, rel: &str) -> PathBuf {
        self.at(rel).to_path()
    }

    fn names(&self, rel: &str) -> Result<Vec<String>> {
        let (objects, dirs) = list_dir(&self.at(rel))?;
        Ok(objects
            .iter()
            .map(|o| o.url.file_name().to_owned())
            .chain(dirs)
            .collect())
    }

    fn exists(&self, rel: &str) -> Result<bool> {
        match super::head(&self.at(rel)) {
            Ok(_) => Ok(true),
            Err(e) if is_problem(&e, StoreProblem::NotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn read(&self, rel: &str) -> Result<Vec<u8>> {
        Ok(super::read_all(&self.at(rel))?.to_vec())
    }

    fn write(&self, rel: &str, bytes: Vec<u8>, create_only: bool) -> Result<()> {
        put(&self.at(rel), bytes, create_only)
    }

    fn replace(&self, rel: &str, expected: &[u8], bytes: Vec<u8>) -> Result<bool> {
        super::replace_object(&self.at(rel), expected, bytes)
    }

    fn delete_if(&self, rel: &str, expected: &[u8]) -> Result<bool> {
        let url = self.at(rel);
        match super::read_all(&url) {
            Ok(held) if held.as_ref() == expected => {
                super::delete_object(&url)?;
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(e) if super::is_problem(&e, super::StoreProblem::NotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn delete(&self, rel: &str) -> Result<()> {
        super::delete_object(&self.at(rel))
    }

    fn delete_tree(&self, rel: &str) -> Result<()> {
        for o in list(&self.at(rel))? {
            super::delete_object(&o.url)?;
        }
        Ok(())
    }

    fn place(&self, from: &str, to: &str, record: &str) -> Result<()> {
        super::copy_object_recorded(&self.at(from), &self.at(to), &self.at(record))
    }

    fn abort_uploads(&self, rel: &str) -> Result<()> {
        super::abort_uploads_under(&self.at(rel))
    }

    fn stage(&self, plan: StagePlan) -> Result<Box<dyn Staging>> {
        // One group per output folder: a run's splits share the output; a worker's
        // splits each have a part folder of their own.
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        let mut which = Vec::with_capacity(plan.outputs.len());
        for output in &plan.outputs {
            let g = match groups.iter().position(|(dir, _)| *dir == output.dir) {
                Some(g) => g,
                None => {
                    groups.push((output.dir.clone(), Vec::new()));
                    groups.len() - 1
                }
            };
            groups[g].1.push(output.tmp.clone());
            which.push(g);
        }
        let groups = groups
            .into_iter()
            .map(|(dir, tmps)| RemoteOutput::prepare(self.at(&dir), tmps, &plan))
            .collect::<Result<Vec<_>>>()?;
        let mut folders = Vec::with_capacity(plan.outputs.len());
        for (output, &g) in plan.outputs.iter().zip(&which) {
            let folder = groups[g].staging().join(&output.tmp);
            std::fs::create_dir_all(&folder).map_err(|e| Error::from(e).with_file(&folder))?;
            folders.push(folder);
        }
        Ok(Box::new(ObjectStaging {
            groups,
            which,
            folders,
            tmps: plan.outputs.iter().map(|o| o.tmp.clone()).collect(),
        }))
    }
}

/// A run's outputs in a store: one [`RemoteOutput`] per output folder.
struct ObjectStaging {
    groups: Vec<RemoteOutput>,
    /// Output i's group.
    which: Vec<usize>,
    /// Output i's local staging folder.
    folders: Vec<PathBuf>,
    /// Output i's temporary folder name.
    tmps: Vec<String>,
}

impl Staging for ObjectStaging {
    fn folder(&self, i: usize) -> &Path {
        &self.folders[i]
    }

    fn hook(&self, i: usize) -> Option<ShardHook> {
        Some(self.groups[self.which[i]].shard_hook(&self.tmps[i]))
    }

    fn journal_header(&self, i: usize) -> Result<Option<serde_json::Value>> {
        let url = self.groups[self.which[i]]
            .shared
            .run_dir(&self.tmps[i])
            .join(JOURNAL);
        match super::read_all(&url) {
            Ok(bytes) => Ok(serde_json::from_slice::<Journal>(&bytes)
                .ok()
                .map(|j| j.header)),
            Err(e) if super::is_problem(&e, super::StoreProblem::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn resume(&mut self, i: usize, header: serde_json::Value) -> Result<Vec<ClosedShard>> {
        self.groups[self.which[i]].begin_resume(&self.tmps[i], &self.folders[i], header)
    }

    fn commit(
        &mut self,
        outputs: Vec<Publication>,
        cancel: &CancelToken,
        confirm: &dyn Fn() -> Result<()>,
    ) -> Result<Vec<PathBuf>> {
        let mut by_group: Vec<Vec<(&str, Publication)>> =
            (0..self.groups.len()).map(|_| Vec::new()).collect();
        for (i, publication) in outputs.into_iter().enumerate() {
            by_group[self.which[i]].push((&self.tmps[i], publication));
        }
        let mut paths = Vec::new();
        for (group, publications) in self.groups.iter().zip(by_group) {
            paths.extend(group.commit(publications, cancel, confirm)?);
        }
        Ok(paths)
    }
}

/// Bytes per uploaded part (S3 allows 10,000 parts: objects up to 80 GB).
pub const PART_BYTES: usize = 8 << 20;
/// Parts in flight per run at most: as many as a tuned boto3 sends (4 threads), where
/// parts stream from the staged files (S3: a part holds a 256 KiB piece at a time);
/// else 2, a buffered part holding its 8 MiB (16 MiB in all). Against moto on two cores
/// a plain `object_store` client PUTs 404 MB in 2.4-3.0 s with 4 in flight, 2.8-3.6 s
/// with 2 (five interleaved runs).
fn parts_in_flight(out: &ObjectUrl) -> usize {
    if super::streams_parts(out) {
        4
    } else {
        2
    }
}
/// One output folder of a run in a store (the output, or a worker's part).
struct RemoteOutput {
    shared: Arc<Shared>,
    /// Uploads started, by local file: as each shard closes, or at the commit.
    tasks: Arc<Mutex<Vec<Upload>>>,
    /// The output, claimed while this run publishes it (released when dropped).
    claims: Mutex<Option<Claims>>,
    committed: AtomicBool,
    /// The local staging folder, removed (after the uploads end) when this is dropped.
    _scratch: Scratch,
}

/// A staged file and the task uploading it.
type Upload = (PathBuf, JoinHandle<Result<()>>);

/// An upload task taken from the run's list while it is awaited; put back if the wait
/// is dropped before the task ends.
struct PutBack<'a> {
    tasks: &'a Mutex<Vec<Upload>>,
    task: Option<Upload>,
}

impl Drop for PutBack<'_> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            self.tasks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(task);
        }
    }
}

/// What the upload tasks share with the run.
struct Shared {
    out: ObjectUrl,
    /// The temporary folder names of the outputs in `out`.
    tmps: Vec<String>,
    run: String,
    overwrite: bool,
    /// `--append`: the run holds the output's claim; the live set stays until its new
    /// manifest.
    append: bool,
    /// `--resume`: a failed run keeps its temporaries and journal for the next (also a
    /// run refused for a journal that does not match it).
    resumable: bool,
    staging: PathBuf,
    /// Multipart uploads started and not yet completed or aborted.
    open_uploads: Mutex<Vec<(ObjectUrl, String)>>,
    /// Part buffers in flight, across every upload of the run.
    parts: Arc<Semaphore>,
    /// Set when the run fails or is interrupted: uploads stop at their next part.
    stop: AtomicBool,
    /// `--resume`: each output's journal header (by `tmp`), once set; the run's
    /// temporaries then live under a fixed name, and what they hold is journaled as
    /// shards finish uploading.
    resume: Mutex<Vec<(String, serde_json::Value)>>,
    /// Shards closed by the writer (their sizes and CRCs), by staged path.
    closed: Mutex<Vec<ClosedShard>>,
    /// Uploads finished, by staged path (resumed shards start here).
    uploaded: Mutex<Vec<PathBuf>>,
    /// The ETags of finished uploads, by staged path (journaled with `--resume`).
    etags: Mutex<Vec<(PathBuf, String)>>,
    /// Shards in the journal last written, by output (`tmp`); held while one is written.
    journaled: tokio::sync::Mutex<Vec<(String, usize)>>,
    /// Final names copied into place by a commit not finished yet: deleted if it fails.
    placed: Mutex<Vec<ObjectUrl>>,
    /// Shards uploaded under their final names (their upload started at the commit, when
    /// the names are known), by staged path: completed in place of a copy.
    finals: Mutex<Vec<(PathBuf, Final)>>,
    /// Shards held back as their output's last ([`LastGuess`]) until the commit, by
    /// staged path: the commit uploads them under their final names.
    held: Mutex<Vec<PathBuf>>,
    /// What the shard writers tell each shard's stream, by staged path (a later shard
    /// of the same output, and the commit, tell it too).
    staged: Mutex<Vec<(PathBuf, Arc<watch::Sender<Staged>>)>>,
}

impl RemoteOutput {
    /// Checks that the output may be written (without `overwrite`, nothing but hidden
    /// names under it) and makes the local staging folder. A `part` (a worker's) is
    /// written with `overwrite` semantics and no claim, and leaves other runs'
    /// temporaries alone.
    fn prepare(out: ObjectUrl, tmps: Vec<String>, plan: &StagePlan) -> Result<RemoteOutput> {
        if !plan.part && !plan.overwrite && !plan.append {
            let (objects, dirs) = list_dir(&out)?;
            let hidden = |n: &str| plan.hidden.iter().any(|h| h == n);
            if objects.iter().any(|o| !hidden(o.url.file_name())) || dirs.iter().any(|d| !hidden(d))
            {
                return Err(Error::new(ErrorKind::OutputExists).with_file(out.to_path()));
            }
        }
        // A resumable run's temporaries have a fixed name, where its rerun finds them.
        let run = if plan.resume {
            "resume".to_owned()
        } else {
            super::attempt_id()
        };
        let base = plan.staging_dir.clone().unwrap_or_else(std::env::temp_dir);
        // The local staging folder is always this process's own, locked while it lives:
        // a killed run's is removed by the next run staging in the same place.
        let scratch = Scratch::create(&base, "tfshard-staging", &super::attempt_id())?;
        let staging = scratch.path().to_owned();
        let parts = Arc::new(Semaphore::new(parts_in_flight(&out)));
        let output = RemoteOutput {
            shared: Arc::new(Shared {
                out,
                tmps,
                run,
                overwrite: plan.overwrite || plan.part,
                append: plan.append,
                resumable: plan.resume,
                staging,
                open_uploads: Mutex::new(Vec::new()),
                parts,
                stop: AtomicBool::new(false),
                resume: Mutex::new(Vec::new()),
                closed: Mutex::new(Vec::new()),
                uploaded: Mutex::new(Vec::new()),
                etags: Mutex::new(Vec::new()),
                journaled: tokio::sync::Mutex::new(Vec::new()),
                placed: Mutex::new(Vec::new()),
                finals: Mutex::new(Vec::new()),
                held: Mutex::new(Vec::new()),
                staged: Mutex::new(Vec::new()),
            }),
            tasks: Default::default(),
            claims: Mutex::new(None),
            committed: AtomicBool::new(false),
            _scratch: scratch,
        };
        if (plan.overwrite || plan.append) && !plan.part && !plan.resume {
            // A killed run's leftovers: abort its recorded uploads, delete its objects.
            // (Not for a part: a copy of the same worker may be running beside it.)
            for tmp in &output.shared.tmps {
                output.shared.clear_tmp(&output.shared.out.join(tmp))?;
            }
        }
        Ok(output)
    }

    /// The local folder the run writes its shards to before they are uploaded.
    fn staging(&self) -> &Path {
        &self.shared.staging
    }

    /// Streams each shard of output `tmp` up while it is written: its parts go as
    /// soon as the staged file holds them, and the upload completes when it closes.
    fn shard_hook(&self, tmp: &str) -> ShardHook {
        ShardHook::new(Stager {
            shared: self.shared.clone(),
            tmp: tmp.to_owned(),
            tasks: self.tasks.clone(),
        })
    }

    /// With `--resume`: checks the journal an earlier run left in the store against
    /// this run's `header`, keeps the uploaded shards that are still sound (size and
    /// CRC32C, read back), and returns them, staged-path named, for the shard writer of
    /// `tmp`; from here on this run journals its uploads.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::ResumeMismatch`] naming the first difference, or a store error.
    fn begin_resume(
        &self,
        tmp: &str,
        staging_tmp: &Path,
        header: serde_json::Value,
    ) -> Result<Vec<ClosedShard>> {
        let s = &self.shared;
        // Uploads the killed run started and never completed: abort them (their shards
        // are not in the journal, and go up again).
        super::abort_uploads_under(&s.run_dir(tmp))?;
        let journal_url = s.run_dir(tmp).join(JOURNAL);
        let mut finished = Vec::new();
        match super::read_all(&journal_url) {
            Ok(bytes) => {
                let journal: Journal = serde_json::from_slice(&bytes).map_err(|e| {
                    Error::new(ErrorKind::ManifestInvalid(e)).with_file(journal_url.to_path())
                })?;
                if let Some(difference) = journal.difference(&header) {
                    if !journal.superseded_by(&header) {
                        return Err(journal::mismatch(difference).with_file(journal_url.to_path()));
                    }
                }
                let live = if journal.superseded_by(&header) {
                    &[][..]
                } else {
                    &journal.shards[..]
                };
                for entry in live {
                    let url = s.run_dir(tmp).join(&entry.file);
                    // The object the upload made (its ETag and size), or, journaled
                    // without an ETag, its bytes read back.
                    let sound = match &entry.etag {
                        Some(etag) => super::head(&url).is_ok_and(|o| {
                            o.size == entry.bytes
                                && o.etag.as_deref().map(|e| e.trim_matches('"'))
                                    == Some(etag.trim_matches('"'))
                        }),
                        None => super::read_all(&url).is_ok_and(|b| {
                            b.len() as u64 == entry.bytes && crc32c::crc32c(&b) == entry.crc32c
                        }),
                    };
                    if !sound || entry.idx.is_some() {
                        break;
                    }
                    // Its partial statistics, as uploaded (else it is written again).
                    let stats = match &entry.stats {
                        None => None,
                        Some(name) => match super::read_all(&s.run_dir(tmp).join(name)) {
                            Ok(bytes) => {
                                let path = staging_tmp.join(name);
                                s.uploaded
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .push(path.clone());
                                Some(ShardStats {
                                    path,
                                    bytes: Arc::new(bytes.to_vec()),
                                })
                            }
                            Err(_) => break,
                        },
                    };
                    let path = staging_tmp.join(&entry.file);
                    s.uploaded
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(path.clone());
                    if let Some(etag) = &entry.etag {
                        // Journaled again with the shards this run adds.
                        s.etags
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((path.clone(), etag.clone()));
                    }
                    finished.push(ClosedShard {
                        path,
                        idx_path: None,
                        stats,
                        records: entry.records,
                        bytes: entry.bytes,
                        crc32c: entry.crc32c,
                        checkpoint: entry.checkpoint.clone(),
                        sources: entry.sources.clone(),
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
        s.resume
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((tmp.to_owned(), header));
        Ok(finished)
    }

    /// The output's claim, while this run publishes it: in the first output's
    /// temporary folder.
    fn claim_file(&self) -> String {
        format!("{}/publishing", self.shared.tmps[0])
    }

    /// Waits for the upload of `local` (starting it if no hook did, or the hook held it
    /// back as the last: then under its final `name`, left open for [`Shared::place`] to
    /// complete).
    async fn uploaded(&self, tmp: &str, local: &Path, name: &str) -> Result<()> {
        self.upload_task_done(tmp, local, name).await?;
        let held = {
            let mut held = self.shared.held.lock().unwrap_or_else(|p| p.into_inner());
            let at = held.iter().position(|p| p == local);
            at.map(|i| held.swap_remove(i)).is_some()
        };
        if !held {
            return Ok(());
        }
        let task = (
            local.to_path_buf(),
            self.shared.start_final_upload(tmp, local, name),
        );
        self.await_task(task).await
    }

    /// Waits for the task uploading `local` (starting one under its final `name` if
    /// there is none).
    async fn upload_task_done(&self, tmp: &str, local: &Path, name: &str) -> Result<()> {
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
                Some(i) => tasks.swap_remove(i),
                None => (
                    local.to_path_buf(),
                    self.shared.start_final_upload(tmp, local, name),
                ),
            }
        };
        self.await_task(task).await
    }

    async fn await_task(&self, task: Upload) -> Result<()> {
        // Awaited in place: if this wait is dropped midway (another upload failed), the
        // task goes back to the list, where dropping the output waits for it before it
        // aborts the uploads and deletes the temporaries.
        let mut held = PutBack {
            tasks: &self.tasks,
            task: Some(task),
        };
        let (_, handle) = held.task.as_mut().expect("the task was set just above");
        let done = handle.await;
        held.task = None;
        done.map_err(|e| Error::from(std::io::Error::other(e)))?
    }

    /// Publishes this folder's outputs (see the module docs): `outputs` pairs each
    /// output's temporary folder name with what to publish. Returns the manifests'
    /// URLs, in order.
    ///
    /// # Errors
    ///
    /// A store error naming the URL; another run publishing to the same output.
    fn commit(
        &self,
        outputs: Vec<(&str, Publication)>,
        cancel: &CancelToken,
        confirm: &dyn Fn() -> Result<()>,
    ) -> Result<Vec<PathBuf>> {
        let s = &*self.shared;
        if !s.overwrite && !s.append {
            // 1. Of two runs racing for the output, one claims it; the other fails before
            // it touches a final name.
            let mut claims = Claims::new(Arc::new(ObjectPrefix::new(s.out.clone())));
            if let Err(Held) = claims.claim(&self.claim_file())? {
                return Err(Error::new(ErrorKind::OutputClaimed).with_file(s.out.to_path()));
            }
            claims.keep_alive();
            *self.claims.lock().unwrap_or_else(|p| p.into_inner()) = Some(claims);
        }
        // 2. Every shard uploaded under the run's temporary folder. Into an output this
        // run has claimed and found empty of its names, a shard is copied to its final
        // name as soon as its own upload is done, beside the uploads still running;
        // otherwise (--overwrite, a worker's part) the publish places every shard once
        // all are uploaded, after the old manifests went, so that a reader of the old set
        // never sees a new byte (an unclaimed run may publish those names meanwhile).
        let files: Vec<(&str, PathBuf, String)> = outputs
            .iter()
            .flat_map(|(tmp, p)| {
                p.files()
                    .map(move |(local, name)| (*tmp, local.to_path_buf(), name))
            })
            .collect();
        let (objects, _) = list_dir(&s.out)?;
        let exists = |name: &str| objects.iter().any(|o| o.url.file_name() == name);
        if !s.overwrite && !s.append && outputs.iter().any(|(_, p)| exists(&p.manifest.0)) {
            // Another run published since this one found the output empty (and has
            // released its claim): nothing of ours may touch its set.
            return Err(Error::new(ErrorKind::OutputClaimed).with_file(s.out.to_path()));
        }
        let pipelined = !s.overwrite && !s.append && !files.iter().any(|(_, _, name)| exists(name));
        // The count is known: a shard held back as the last goes up under its name.
        for (_, tx) in s.staged.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            tx.send_modify(|st| st.committing = true);
        }
        block_on(futures_util::future::try_join_all(files.iter().map(
            |(tmp, local, name)| async move {
                self.uploaded(tmp, local, name).await?;
                if pipelined {
                    s.place(tmp, local, name).await?;
                }
                Ok::<(), Error>(())
            },
        )))?;
        cancel.check()?;
        crate::failpoint::hit("store:uploaded")?;
        // 3-6. The publish protocol: old manifests, the prefix's other shards, the
        // copies, the temporaries, the manifests last.
        let sets: Vec<Set<StagedFile>> = outputs
            .into_iter()
            .map(|(tmp, p)| {
                Set::of_run(p, String::new(), |local| (tmp.to_owned(), local.to_owned()))
            })
            .collect();
        // Right before each manifest: the caller's claims, and this run's own on the
        // output.
        let confirm = || {
            confirm()?;
            let claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
            match claims.as_ref().map(Claims::confirm) {
                Some(Err(e)) if matches!(e.kind(), ErrorKind::ClaimLost) => {
                    Err(Error::new(ErrorKind::OutputClaimed).with_file(s.out.to_path()))
                }
                Some(other) => other,
                None => Ok(()),
            }
        };
        let mode = Mode::of(s.overwrite, s.append);
        let paths = publish(self, &sets, mode, cancel, &confirm)?;
        self.committed.store(true, Ordering::SeqCst);
        if let Some(claims) = self.claims.lock().unwrap_or_else(|p| p.into_inner()).take() {
            drop(claims);
            // Published: what killed runs left in the temporary folders (their recorded
            // or pending uploads, their objects) is no one's now. A run racing this one
            // fails at its claim whatever it finds. (Best effort: the set is published.)
            for tmp in &s.tmps {
                let _ = s.clear_tmp(&s.out.join(tmp));
            }
        }
        Ok(paths)
    }
}

/// A staged file of a store's run: its output's temporary folder name and its local path.
type StagedFile = (String, PathBuf);

impl Steps for RemoteOutput {
    type From = StagedFile;

    fn names(&self, dir: &str) -> Result<Vec<String>> {
        let folder = if dir.is_empty() {
            self.shared.out.clone()
        } else {
            self.shared.out.join(dir)
        };
        let (objects, _) = list_dir(&folder)?;
        Ok(objects
            .into_iter()
            .map(|o| o.url.file_name().to_owned())
            .collect())
    }

    fn is_placed(&self, _from: &StagedFile, to: &str) -> Result<bool> {
        let to = self.shared.out.join(to);
        Ok(self
            .shared
            .placed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&to))
    }

    fn delete(&self, names: &[String]) -> Result<()> {
        let urls: Vec<ObjectUrl> = names.iter().map(|n| self.shared.out.join(n)).collect();
        block_on(futures_util::future::try_join_all(urls.iter().map(delete)))?;
        Ok(())
    }

    fn place(&self, set: &Set<StagedFile>) -> Result<()> {
        let mut todo = Vec::new();
        for ((tmp, local), name) in &set.moves {
            if !self.is_placed(&(tmp.clone(), local.clone()), &set.rel(name))? {
                todo.push((tmp, local, set.rel(name)));
            }
        }
        let s = &*self.shared;
        block_on(futures_util::future::try_join_all(
            todo.iter()
                .map(|(tmp, local, name)| s.place(tmp, local, name)),
        ))?;
        Ok(())
    }

    fn retire_staging(&self) -> Result<()> {
        let s = &*self.shared;
        block_on(async {
            let mut doomed = Vec::new();
            for tmp in &s.tmps {
                doomed.extend(
                    list_async(&s.run_dir(tmp))
                        .await?
                        .into_iter()
                        .map(|o| o.url),
                );
            }
            futures_util::future::try_join_all(doomed.iter().map(delete)).await?;
            Ok::<(), Error>(())
        })
    }

    fn write_manifest(&self, set: &Set<StagedFile>, create_only: bool) -> Result<()> {
        let s = &*self.shared;
        put(
            &s.out.join(&set.manifest_rel()),
            set.manifest.1.clone(),
            create_only,
        )?;
        // Published: its shards are the manifest's now, never a failed commit's.
        s.placed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|u| !set.moves.iter().any(|(_, n)| n == u.file_name()));
        Ok(())
    }

    fn write_file(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        put(&self.shared.out.join(rel), bytes.to_vec(), false)
    }

    fn display(&self, rel: &str) -> PathBuf {
        self.shared.out.join(rel).to_path()
    }
}

impl Shared {
    /// Where this run's temporaries of output `tmp` go: `{out}/{tmp}/{run}/`.
    fn run_dir(&self, tmp: &str) -> ObjectUrl {
        self.out.join(tmp).join(&self.run)
    }

    /// Where the upload of a staged file goes.
    fn temporary(&self, tmp: &str, local: &Path) -> ObjectUrl {
        let file = local.file_name().unwrap_or_default().to_string_lossy();
        self.run_dir(tmp).join(&file)
    }

    fn start_stream(
        self: &Arc<Self>,
        tmp: &str,
        local: &Path,
        staged: watch::Receiver<Staged>,
        last: LastGuess,
    ) -> JoinHandle<Result<()>> {
        let this = self.clone();
        let (tmp, local) = (tmp.to_owned(), local.to_path_buf());
        super::spawn(async move {
            let target = this.temporary(&tmp, &local);
            let etag = match this
                .stream(&tmp, &local, &target, staged, Some(&last))
                .await?
            {
                Streamed::Uploaded(etag) => etag,
                Streamed::Held => {
                    this.held
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(local);
                    return Ok(());
                }
            };
            if let Some(etag) = etag {
                this.etags
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((local.clone(), etag));
            }
            this.staged_done(&local);
            this.uploaded
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(local.clone());
            this.journal(&tmp).await
        })
    }

    /// With `--resume`: records in the store the shards uploaded so far, from the first
    /// on without a gap (the rerun reuses exactly those).
    async fn journal(&self, tmp: &str) -> Result<()> {
        let header = self
            .resume
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(t, _)| t == tmp)
            .map(|(_, h)| h.clone());
        let Some(header) = header else {
            return Ok(());
        };
        // One journal write at a time, each holding more shards than the last: a put
        // never lands a shorter journal over a longer one, nor an empty first one.
        let mut journaled = self.journaled.lock().await;
        let journal = {
            let closed = self.closed.lock().unwrap_or_else(|p| p.into_inner());
            let uploaded = self.uploaded.lock().unwrap_or_else(|p| p.into_inner());
            let etags = self.etags.lock().unwrap_or_else(|p| p.into_inner());
            let mine = |c: &&ClosedShard| {
                c.path.parent().and_then(Path::file_name) == Some(std::ffi::OsStr::new(tmp))
            };
            let shards = closed
                .iter()
                .filter(mine)
                .take_while(|c| uploaded.contains(&c.path))
                .map(|c| journal::JournalShard {
                    etag: etags
                        .iter()
                        .find(|(p, _)| *p == c.path)
                        .map(|(_, e)| e.clone()),
                    ..journal::entry(c)
                })
                .collect();
            Journal { header, shards }
        };
        let written = journaled.iter_mut().find(|(t, _)| t == tmp);
        let before = written.as_ref().map_or(0, |(_, n)| *n);
        if journal.shards.len() <= before {
            return Ok(());
        }
        let bytes =
            serde_json::to_vec(&journal).map_err(|e| Error::from(std::io::Error::other(e)))?;
        super::put_async(&self.run_dir(tmp).join(JOURNAL), bytes, false).await?;
        match written {
            Some((_, n)) => *n = journal.shards.len(),
            None => journaled.push((tmp.to_owned(), journal.shards.len())),
        }
        crate::failpoint::hit("shard:journaled")
    }

    /// Removes a staged file once uploaded.
    fn staged_done(&self, local: &Path) {
        let _ = std::fs::remove_file(local);
    }

    /// Copies the upload of staged file `local` to its final `name`, noted as placed
    /// before the copy starts (a commit that fails deletes it, even if the copy was cut
    /// off with the server still finishing it).
    async fn place(&self, tmp: &str, local: &Path, name: &str) -> Result<()> {
        let to = self.out.join(name);
        self.placed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(to.clone());
        let uploaded = {
            let mut finals = self.finals.lock().unwrap_or_else(|p| p.into_inner());
            let at = finals.iter().position(|(p, _)| p == local);
            at.map(|i| finals.swap_remove(i).1)
        };
        if let Some(f) = uploaded {
            // Uploaded under its final name: completing it is the placing.
            complete_multipart(&f.target, &f.id, f.parts).await?;
            return self.forget_upload(&f.id, &f.record).await;
        }
        self.copy_into_place(tmp, &self.temporary(tmp, local), &to)
            .await
    }

    /// Copies a shard's temporary to its final name on the server. A multipart copy
    /// (S3, above 5 GiB) is recorded as the run's uploads are, so that a killed run's
    /// can be aborted by the next.
    async fn copy_into_place(&self, tmp: &str, from: &ObjectUrl, to: &ObjectUrl) -> Result<()> {
        copy_recorded(
            from,
            to,
            async |id: String| Ok((self.record_upload(tmp, to, &id).await?, id)),
            // A record left behind goes with the run's temporaries.
            async |(record, id)| {
                let _ = self.forget_upload(&id, &record).await;
            },
        )
        .await
    }

    /// Records a multipart upload started for `target`: among the run's open uploads,
    /// and in the run's temporary folder, where a later run finds it to abort it.
    async fn record_upload(&self, tmp: &str, target: &ObjectUrl, id: &str) -> Result<ObjectUrl> {
        self.open_uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((target.clone(), id.to_owned()));
        let record = self.run_dir(tmp).join("uploads").join(target.file_name());
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

    /// Uploads staged file `local` under its final `name` (a multipart upload, recorded
    /// like every other, its parts sent, left open: [`Shared::place`] completes it, so
    /// the name shows nothing until the commit places it).
    fn start_final_upload(
        self: &Arc<Self>,
        tmp: &str,
        local: &Path,
        name: &str,
    ) -> JoinHandle<Result<()>> {
        let this = self.clone();
        let (tmp, local, target) = (tmp.to_owned(), local.to_path_buf(), self.out.join(name));
        super::spawn(async move {
            let at = |e: std::io::Error| Error::from(e).with_file(&local);
            let size = std::fs::metadata(&local).map_err(at)?.len();
            if size == 0 {
                // No part to send (an empty shard): a temporary, copied as before.
                let temporary = this.temporary(&tmp, &local);
                this.upload(&tmp, &local, &temporary).await?;
                this.staged_done(&local);
                return Ok(());
            }
            let file = Arc::new(std::fs::File::open(&local).map_err(at)?);
            let checksums = super::part_checksums(&target);
            let (id, record) = super::create_recorded(&target, checksums, async |id: &str| {
                this.record_upload(&tmp, &target, id).await
            })
            .await?;
            super::kill_point("store:uploading").await?;
            let part = PART_BYTES as u64;
            // The last part may be of any size.
            let ranges: Vec<_> = (0..size)
                .step_by(part as usize)
                .map(|s| s..(s + part).min(size))
                .collect();
            let sent = ranges
                .into_iter()
                .enumerate()
                .map(|(i, range)| this.send_part(&file, &local, &target, &id, checksums, i, range));
            let mut parts = Vec::new();
            for p in sent.collect::<Vec<_>>() {
                parts.push(
                    p.await
                        .map_err(|e| Error::from(std::io::Error::other(e)))??,
                );
            }
            this.finals.lock().unwrap_or_else(|p| p.into_inner()).push((
                local.clone(),
                Final {
                    target,
                    id,
                    record,
                    parts,
                },
            ));
            this.staged_done(&local);
            Ok(())
        })
    }

    fn start_upload(self: &Arc<Self>, tmp: &str, local: &Path) -> JoinHandle<Result<()>> {
        let this = self.clone();
        let (tmp, local) = (tmp.to_owned(), local.to_path_buf());
        super::spawn(async move {
            let target = this.temporary(&tmp, &local);
            this.upload(&tmp, &local, &target).await?;
            this.staged_done(&local);
            Ok(())
        })
    }

    /// Aborts the uploads under `tmp` (recorded, or pending) and those pending under a
    /// final name in the output (a killed commit's, before it recorded them), and deletes
    /// every object in `tmp`.
    fn clear_tmp(&self, tmp: &ObjectUrl) -> Result<()> {
        super::abort_uploads_under(tmp)?;
        // This output's shard names only (`{prefix}-…-of-…`, the prefix from the
        // temporary folder's name `.{prefix}.tfshard-tmp`): other prefixes' commits and
        // uploads may be running beside this one.
        let prefix = tmp.file_name();
        let prefix = prefix.strip_prefix('.').unwrap_or(prefix);
        let prefix = prefix.strip_suffix(".tfshard-tmp").unwrap_or(prefix);
        super::abort_pending_in(&self.out, |name| {
            name.strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with('-') && rest.contains("-of-"))
        })?;
        let objects = list(tmp)?;
        block_on(async {
            for o in &objects {
                delete(&o.url).await?;
            }
            Ok(())
        })
    }

    /// Uploads one complete local file to `target`.
    async fn upload(&self, tmp: &str, local: &Path, target: &ObjectUrl) -> Result<()> {
        let at = |e: std::io::Error| Error::from(e).with_file(local);
        let size = std::fs::metadata(local).map_err(at)?.len();
        let (_tx, rx) = watch::channel(Staged {
            written: size,
            closed: true,
            ..Staged::default()
        });
        self.stream(tmp, local, target, rx, None).await.map(drop)
    }

    /// Uploads a staged file to `target` as it grows: each full part as soon as the file
    /// holds it (as many in flight as the run's part budget allows), the rest when the
    /// file is closed. A file that ends smaller than one part goes up in one request.
    /// Returns the object's ETag; or, while the writer guesses the shard is the `last`
    /// when its first part is ready, nothing goes up: a shard closed so, and not
    /// followed by another by the time the commit begins, is [`Streamed::Held`].
    async fn stream(
        &self,
        tmp: &str,
        local: &Path,
        target: &ObjectUrl,
        mut staged: watch::Receiver<Staged>,
        last: Option<&LastGuess>,
    ) -> Result<Streamed> {
        let at = |e: std::io::Error| Error::from(e).with_file(local);
        let part = PART_BYTES as u64;
        let mut upload: Option<(String, ObjectUrl)> = None;
        let mut parts: Vec<JoinHandle<Result<SentPart>>> = Vec::new();
        let checksums = super::part_checksums(target);
        let mut sent = 0u64;
        let file = Arc::new(std::fs::File::open(local).map_err(at)?);
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Err(Error::new(ErrorKind::Interrupted));
            }
            let Staged {
                written,
                closed,
                followed,
                committing,
            } = *staged.borrow_and_update();
            let holding = upload.is_none()
                && !followed
                && (closed || written >= part)
                && last.is_some_and(LastGuess::get);
            if holding && closed && committing {
                return Ok(Streamed::Held);
            }
            if !holding && closed && upload.is_none() && written < part {
                // One request: S3 needs parts of 5 MiB but the last.
                let bytes = std::fs::read(local).map_err(at)?;
                return Ok(Streamed::Uploaded(
                    super::put_tagged(target, bytes, false).await?,
                ));
            }
            while !holding && (written >= sent + part || (closed && written > sent)) {
                if upload.is_none() {
                    let started = super::create_recorded(target, checksums, async |id: &str| {
                        self.record_upload(tmp, target, id).await
                    })
                    .await?;
                    super::kill_point("store:uploading").await?;
                    upload = Some(started);
                }
                let (id, _) = upload.as_ref().expect("started just above");
                let range = sent..(sent + part).min(written);
                parts.push(self.send_part(&file, local, target, id, checksums, parts.len(), range));
                sent = (sent + part).min(written);
            }
            if closed && !holding {
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
        let etag = complete_multipart(target, &id, done).await?;
        self.forget_upload(&id, &record).await?;
        Ok(Streamed::Uploaded(etag))
    }

    /// Sends bytes `range` of the staged file as part `index`, once one of the run's
    /// parts in flight is free: streamed from the file on S3 (with its CRC32C when the
    /// upload was created with `checksums`), else through a buffer (an anonymous map,
    /// returned to the system when the part is sent).
    #[allow(clippy::too_many_arguments)]
    fn send_part(
        &self,
        file: &Arc<std::fs::File>,
        local: &Path,
        target: &ObjectUrl,
        id: &str,
        checksums: bool,
        index: usize,
        range: std::ops::Range<u64>,
    ) -> JoinHandle<Result<SentPart>> {
        let parts = self.parts.clone();
        let (file, local, target, id) = (
            file.clone(),
            local.to_path_buf(),
            target.clone(),
            id.to_owned(),
        );
        super::spawn(async move {
            let _permit = parts.acquire().await.expect("never closed");
            if super::streams_parts(&target) {
                return super::put_part_streamed(&target, &id, index, file, range, checksums).await;
            }
            let at = |e: std::io::Error| Error::from(e).with_file(&local);
            let mut buf =
                memmap2::MmapMut::map_anon((range.end - range.start) as usize).map_err(at)?;
            std::os::unix::fs::FileExt::read_exact_at(&*file, &mut buf, range.start).map_err(at)?;
            let bytes = Bytes::from_owner(buf.make_read_only().map_err(at)?);
            put_part(&target, &id, index, bytes).await
        })
    }
}

/// A shard uploaded under its final name, not completed yet.
struct Final {
    target: ObjectUrl,
    id: String,
    /// Its upload record.
    record: ObjectUrl,
    parts: Vec<SentPart>,
}

/// How much of a staged shard is on disk, and whether it is complete.
#[derive(Debug, Clone, Copy, Default)]
struct Staged {
    written: u64,
    closed: bool,
    /// Another shard of its output was opened since: not the last.
    followed: bool,
    /// The commit has begun: no shard follows.
    committing: bool,
}

/// How a staged shard's stream ended.
enum Streamed {
    /// Uploaded under its temporary name (the object's ETag).
    Uploaded(Option<String>),
    /// Held back as the last, for the commit to upload under its final name.
    Held,
}

/// The store output's side of the shard writers: starts each shard's upload when the
/// shard is created, and tells it how far the file has grown.
struct Stager {
    shared: Arc<Shared>,
    tmp: String,
    tasks: Arc<Mutex<Vec<Upload>>>,
}

impl ShardEvents for Stager {
    fn opened(&self, path: &Path, last: LastGuess) -> Box<dyn FnMut(u64) + Send> {
        let (tx, rx) = watch::channel(Staged::default());
        let tx = Arc::new(tx);
        {
            let mut staged = self.shared.staged.lock().unwrap_or_else(|p| p.into_inner());
            // The shards before this one of its output (its staging folder) are not the
            // last.
            for (earlier, tx) in staged.iter() {
                if earlier.parent() == path.parent() {
                    tx.send_modify(|s| s.followed = true);
                }
            }
            staged.push((path.to_path_buf(), tx.clone()));
        }
        let task = self.shared.start_stream(&self.tmp, path, rx, last);
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((path.to_path_buf(), task));
        Box::new(move |written| {
            tx.send_modify(|s| s.written = written);
        })
    }

    fn closed(&self, shard: &ClosedShard) -> Result<()> {
        self.shared
            .closed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(shard.clone());
        let sender = {
            let staged = self.shared.staged.lock().unwrap_or_else(|p| p.into_inner());
            staged
                .iter()
                .find(|(p, _)| *p == shard.path)
                .map(|(_, tx)| tx.clone())
        };
        if let Some(tx) = sender {
            tx.send_modify(|s| {
                s.written = shard.bytes;
                s.closed = true;
            });
        }
        let stats = shard.stats.as_ref().map(|s| &s.path);
        for companion in shard.idx_path.iter().chain(stats) {
            let task = self.shared.start_upload(&self.tmp, companion);
            self.tasks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((companion.clone(), task));
        }
        Ok(())
    }
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
            let placed = std::mem::take(&mut *s.placed.lock().unwrap_or_else(|p| p.into_inner()));
            block_on(async {
                for (url, id) in &uploads {
                    let _ = abort_multipart(url, id).await;
                }
                // A failed commit's copies: no final-named shard outlives it.
                for url in &placed {
                    let _ = delete(url).await;
                }
            });
            for tmp in s.tmps.iter().filter(|_| !s.resumable) {
                if let Ok(objects) = list(&s.run_dir(tmp)) {
                    block_on(async {
                        for o in &objects {
                            let _ = delete(&o.url).await;
                        }
                    });
                }
            }
        }
    }
}
