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
//! 4. copies each shard server-side to its final `-of-N` name;
//! 5. with `--overwrite`, deletes the prefix's stale shards;
//! 6. deletes the temporaries, then writes each manifest (a conditional put without
//!    `--overwrite`) — the commit point — and releases the claim.
//!
//! On any failure or interrupt before the manifests, dropping the [`RemoteOutput`]
//! aborts the uploads it started and deletes its temporaries (and its claim).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use bytes::Bytes;

use super::{
    abort_multipart, block_on, complete_multipart, copy, create_multipart, delete, list,
    list_async, list_dir, list_dir_async, put, put_part, ObjectUrl, StoreProblem,
};
use crate::error::{Error, ErrorKind, Result};
use crate::manifest::{Manifest, ShardInfo};
use crate::progress::CancelToken;
use crate::shard::name;
use crate::shard::ClosedShard;
use crate::tfrecord::Compression;

/// Bytes per uploaded part (S3 allows 10,000 parts: objects up to 80 GB).
pub const PART_BYTES: usize = 8 << 20;
/// Parts in flight per run at most (bounds upload memory to 32 MiB).
const PARTS_IN_FLIGHT: usize = 4;
/// The largest object S3's CopyObject copies in one request.
pub const MAX_COPY_BYTES: u64 = 5 << 30;

/// One run's output in a store.
pub(crate) struct RemoteOutput {
    out: ObjectUrl,
    prefixes: Vec<String>,
    run: String,
    overwrite: bool,
    staging: PathBuf,
    /// Multipart uploads started and not yet completed or aborted.
    open_uploads: Mutex<Vec<(ObjectUrl, String)>>,
    claimed: AtomicBool,
    committed: AtomicBool,
}

impl RemoteOutput {
    /// Checks that the output may be written (without `overwrite`, nothing but hidden
    /// temporaries under it) and makes the local staging folder.
    ///
    /// # Errors
    ///
    /// `output folder is not empty`, a store error, or a local I/O error.
    pub(crate) fn prepare(
        out: ObjectUrl,
        prefixes: &[String],
        overwrite: bool,
        tmp_dir: Option<&Path>,
    ) -> Result<RemoteOutput> {
        let (objects, dirs) = list_dir(&out)?;
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
        let run = run_id();
        let base = tmp_dir
            .map(Path::to_path_buf)
            .unwrap_or_else(std::env::temp_dir);
        let staging = base.join(format!(".tfshard-staging-{run}"));
        std::fs::create_dir_all(&staging).map_err(|e| Error::from(e).with_file(&staging))?;
        let output = RemoteOutput {
            out,
            prefixes: prefixes.to_vec(),
            run,
            overwrite,
            staging,
            open_uploads: Mutex::new(Vec::new()),
            claimed: AtomicBool::new(false),
            committed: AtomicBool::new(false),
        };
        if overwrite {
            // A killed run's leftovers: abort its recorded uploads, delete its objects.
            for prefix in prefixes {
                output.clear_tmp(&output.out.join(&name::tmp_dir_name(prefix)))?;
            }
        }
        Ok(output)
    }

    /// The local folder the run writes its shards to before they are uploaded.
    pub(crate) fn staging(&self) -> &Path {
        &self.staging
    }

    fn run_dir(&self, prefix: &str) -> ObjectUrl {
        self.out.join(&name::tmp_dir_name(prefix)).join(&self.run)
    }

    fn claim_url(&self) -> ObjectUrl {
        self.out
            .join(&name::tmp_dir_name(&self.prefixes[0]))
            .join("publishing")
    }

    /// Aborts the uploads recorded under `tmp` and deletes every object there.
    fn clear_tmp(&self, tmp: &ObjectUrl) -> Result<()> {
        let objects = list(tmp)?;
        block_on(async {
            for o in &objects {
                if o.url.parent().file_name() == "uploads" {
                    if let Ok(text) = super::read_all_async(&o.url).await {
                        let text = String::from_utf8_lossy(&text).into_owned();
                        if let Some((key, id)) = text.split_once('\n') {
                            let target = ObjectUrl {
                                key: key.to_owned(),
                                ..self.out.clone()
                            };
                            abort_multipart(&target, id).await?;
                        }
                    }
                }
            }
            for o in &objects {
                delete(&o.url).await?;
            }
            Ok(())
        })
    }

    /// Uploads one local file to `target` in parts, in parallel.
    async fn upload(&self, local: &Path, target: &ObjectUrl, cancel: &CancelToken) -> Result<()> {
        let at = |e: std::io::Error| Error::from(e).with_file(local);
        let size = std::fs::metadata(local).map_err(at)?.len();
        if size < PART_BYTES as u64 {
            // One request: S3 needs parts of 5 MiB but the last.
            let bytes = std::fs::read(local).map_err(at)?;
            return super::put_async(target, bytes, false).await;
        }
        let id = create_multipart(target).await?;
        self.open_uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((target.clone(), id.clone()));
        // Recorded in the run's temporary folder, so a later run can abort it too.
        let record = self
            .run_dir(&self.prefix_of(target))
            .join("uploads")
            .join(target.file_name());
        let body = format!("{}\n{id}", target.key());
        super::put_async(&record, body.into_bytes(), false).await?;
        let parts = size.div_ceil(PART_BYTES as u64) as usize;
        let mut done = Vec::with_capacity(parts);
        let mut file = std::fs::File::open(local).map_err(at)?;
        for batch_start in (0..parts).step_by(PARTS_IN_FLIGHT) {
            cancel.check()?;
            let batch: Vec<usize> =
                (batch_start..(batch_start + PARTS_IN_FLIGHT).min(parts)).collect();
            let mut futures = Vec::with_capacity(batch.len());
            for &index in &batch {
                let mut buf =
                    vec![0u8; PART_BYTES.min((size - (index * PART_BYTES) as u64) as usize)];
                std::io::Read::read_exact(&mut file, &mut buf).map_err(at)?;
                futures.push(put_part(target, &id, index, Bytes::from(buf)));
            }
            done.extend(futures_util::future::try_join_all(futures).await?);
        }
        complete_multipart(target, &id, done).await?;
        self.open_uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(_, i)| *i != id);
        delete(&record).await?;
        Ok(())
    }

    fn prefix_of(&self, target: &ObjectUrl) -> String {
        self.prefixes
            .iter()
            .find(|p| {
                target
                    .relative_to(&self.out)
                    .is_some_and(|rel| rel.starts_with(&name::tmp_dir_name(p)))
            })
            .unwrap_or(&self.prefixes[0])
            .clone()
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
        if !self.overwrite {
            let claim = self.claim_url();
            match put(&claim, self.run.clone().into_bytes(), true) {
                Ok(()) => self.claimed.store(true, Ordering::SeqCst),
                Err(e) if is_problem(&e, StoreProblem::AlreadyExists) => {
                    return Err(Error::new(ErrorKind::OutputClaimed).with_file(self.out.to_path()))
                }
                Err(e) => return Err(e),
            }
        }
        // 2. Upload under the run's temporary folder.
        let mut temporaries: Vec<Vec<(ObjectUrl, Option<ObjectUrl>)>> = Vec::new();
        block_on(async {
            for (prefix, split) in self.prefixes.iter().zip(shards) {
                let dir = self.run_dir(prefix);
                let mut uploads = Vec::new();
                let mut names = Vec::new();
                for shard in split {
                    if shard.bytes > MAX_COPY_BYTES {
                        return Err(Error::invalid_option(
                            "target-shard-size",
                            format!(
                                "a shard of {} bytes cannot be copied in one request on a \
                                 store (at most 5 GiB); use a smaller --target-shard-size",
                                shard.bytes
                            ),
                        ));
                    }
                    let file = shard.path.file_name().unwrap_or_default().to_string_lossy();
                    let tmp = dir.join(&file);
                    uploads.push((shard.path.clone(), tmp.clone()));
                    let idx = shard.idx_path.as_ref().map(|p| {
                        let t = dir.join(&p.file_name().unwrap_or_default().to_string_lossy());
                        uploads.push((p.clone(), t.clone()));
                        t
                    });
                    names.push((tmp, idx));
                }
                // Files one after another; each one's parts in parallel.
                for (local, target) in &uploads {
                    self.upload(local, target, cancel).await?;
                }
                temporaries.push(names);
            }
            Ok(())
        })?;
        cancel.check()?;
        // 3-5. Old manifests go, new shards are copied into place, stale shards go.
        block_on(async {
            if self.overwrite {
                for prefix in &self.prefixes {
                    delete(&self.out.join(&name::manifest_name(prefix))).await?;
                }
            }
            let mut pairs = Vec::new();
            for ((prefix, split), tmps) in self.prefixes.iter().zip(shards).zip(&temporaries) {
                for (i, (tmp, idx)) in tmps.iter().enumerate() {
                    let final_name = name::shard_name(prefix, i, split.len(), compression);
                    pairs.push((tmp.clone(), self.out.join(&final_name)));
                    if let Some(idx) = idx {
                        pairs.push((idx.clone(), self.out.join(&format!("{final_name}.idx"))));
                    }
                }
            }
            futures_util::future::try_join_all(pairs.iter().map(|(from, to)| copy(from, to)))
                .await?;
            if self.overwrite {
                let (objects, _) = list_dir_async(&self.out).await?;
                for (prefix, split) in self.prefixes.iter().zip(shards) {
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
            for prefix in &self.prefixes {
                for o in list_async(&self.run_dir(prefix)).await? {
                    delete(&o.url).await?;
                }
            }
            Ok::<(), Error>(())
        })?;
        // 6. The manifests: the commit point.
        let mut paths = Vec::new();
        for ((prefix, split), manifest) in
            self.prefixes.iter().zip(shards).zip(manifests.iter_mut())
        {
            fill_shards(manifest, prefix, split, compression);
            let url = self.out.join(&name::manifest_name(prefix));
            let mut json = serde_json::to_vec_pretty(&*manifest)
                .map_err(|e| Error::from(std::io::Error::other(e)))?;
            json.push(b'\n');
            match put(&url, json, !self.overwrite) {
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

fn is_problem(e: &Error, problem: StoreProblem) -> bool {
    matches!(e.kind(), ErrorKind::Store { problem: p, .. } if *p == problem)
}

/// A run id unique enough among runs racing for one output: time, process and a counter.
fn run_id() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("run-{nanos:x}-{:x}-{n}", std::process::id())
}

impl Drop for RemoteOutput {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.staging);
        if self.committed.load(Ordering::SeqCst) {
            return;
        }
        // Failed or interrupted: abort what we started, delete what we wrote.
        let uploads =
            std::mem::take(&mut *self.open_uploads.lock().unwrap_or_else(|p| p.into_inner()));
        block_on(async {
            for (url, id) in &uploads {
                let _ = abort_multipart(url, id).await;
            }
        });
        for prefix in &self.prefixes {
            if let Ok(objects) = list(&self.run_dir(prefix)) {
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
}
