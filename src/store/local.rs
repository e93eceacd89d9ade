//! The local [`Destination`]: a folder on disk. Shards are written in place, in each
//! output's hidden temporary folder, synced, then published by the one protocol
//! ([`super::publish`]): renamed to their final names, a manifest written beside them
//! under a temporary name, synced, and renamed into place last; the folder is synced
//! after the renames.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::destination::{
    ClosedShard, Destination, LastGuess, Publication, ShardEvents, ShardHook, StagePlan,
    StagedOutput, Staging,
};
use super::journal::{self, Journal};
use super::publish::{publish, Direct, Mode, Set};
use crate::error::{Error, ErrorKind, Result};
use crate::progress::CancelToken;

fn io_at(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::from(e).with_file(path)
}

/// A local output folder.
pub(crate) struct LocalDir {
    root: PathBuf,
}

impl LocalDir {
    pub(crate) fn new(root: PathBuf) -> LocalDir {
        LocalDir { root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }
}

/// Writes `bytes` to `path` atomically ([`super::atomic::write_atomic`]); with
/// `create_only`, where something is already there, [`ErrorKind::OutputExists`].
fn write_atomic(path: &Path, bytes: &[u8], create_only: bool) -> Result<()> {
    match super::atomic::write_atomic(path, bytes, create_only) {
        Err(e) if create_only && e.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(Error::new(ErrorKind::OutputExists).with_file(path))
        }
        other => other.map_err(io_at(path)),
    }
}

/// The file at `path`, locked (an exclusive `flock`, released when dropped), if it is
/// still the file there and holds `expected`; `None` otherwise (gone, replaced, or
/// holding something else).
fn lock_if_holding(path: &Path, expected: &[u8]) -> Result<Option<fs::File>> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::io::AsRawFd;
    let mut file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_at(path)(e)),
    };
    // SAFETY: a valid descriptor; the lock goes with it when `file` is dropped.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(io_at(path)(std::io::Error::last_os_error()));
    }
    let locked = file.metadata().map_err(io_at(path))?.ino();
    match fs::metadata(path) {
        Ok(m) if m.ino() == locked => {}
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_at(path)(e)),
    }
    let mut held = Vec::new();
    file.read_to_end(&mut held).map_err(io_at(path))?;
    Ok((held == expected).then_some(file))
}

impl Destination for LocalDir {
    fn display(&self, rel: &str) -> PathBuf {
        self.path(rel)
    }

    fn names(&self, rel: &str) -> Result<Vec<String>> {
        let dir = self.path(rel);
        match fs::read_dir(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(Error::from(e).with_file(&dir)),
            Ok(entries) => Ok(entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()),
        }
    }

    fn exists(&self, rel: &str) -> Result<bool> {
        Ok(self.path(rel).exists())
    }

    fn read(&self, rel: &str) -> Result<Vec<u8>> {
        let path = self.path(rel);
        fs::read(&path).map_err(io_at(&path))
    }

    fn write(&self, rel: &str, bytes: Vec<u8>, create_only: bool) -> Result<()> {
        write_atomic(&self.path(rel), &bytes, create_only)
    }

    /// Under an exclusive `flock` of the file: the one that still holds `expected`
    /// (the path names the locked file, not one renamed over it meanwhile) is replaced
    /// by a rename, so whoever waited on the lock finds another file there and fails.
    fn replace(&self, rel: &str, expected: &[u8], bytes: Vec<u8>) -> Result<bool> {
        let path = self.path(rel);
        let Some(_locked) = lock_if_holding(&path, expected)? else {
            return Ok(false);
        };
        write_atomic(&path, &bytes, false)?;
        Ok(true)
    }

    fn delete_if(&self, rel: &str, expected: &[u8]) -> Result<bool> {
        let path = self.path(rel);
        let Some(_locked) = lock_if_holding(&path, expected)? else {
            return Ok(false);
        };
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_at(&path)(e)),
            _ => Ok(true),
        }
    }

    fn delete(&self, rel: &str) -> Result<()> {
        let path = self.path(rel);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_at(&path)(e)),
            _ => Ok(()),
        }
    }

    fn delete_tree(&self, rel: &str) -> Result<()> {
        let path = self.path(rel);
        match fs::remove_dir_all(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_at(&path)(e)),
            _ => Ok(()),
        }
    }

    fn place(&self, from: &str, to: &str, _record: &str) -> Result<()> {
        let target = self.path(to);
        fs::rename(self.path(from), &target).map_err(io_at(&target))
    }

    fn abort_uploads(&self, _rel: &str) -> Result<()> {
        Ok(())
    }

    fn stage(&self, plan: StagePlan) -> Result<Box<dyn Staging>> {
        fs::create_dir_all(&self.root).map_err(io_at(&self.root))?;
        super::atomic::remove_leftovers(&self.root);
        if !plan.overwrite && !plan.part && !plan.append {
            for name in self.names("")? {
                if !plan.hidden.contains(&name) && !super::atomic::is_temporary(&name) {
                    return Err(Error::new(ErrorKind::OutputExists).with_file(&self.root));
                }
            }
        }
        let mut outputs = Vec::with_capacity(plan.outputs.len());
        for output in &plan.outputs {
            outputs.push(self.stage_output(output, &plan)?);
        }
        Ok(Box::new(LocalStaging {
            outputs,
            resume: plan.resume,
            replace: plan.overwrite || plan.part,
            append: plan.append,
            root: self.root.clone(),
        }))
    }
}

impl LocalDir {
    /// Makes one output's temporary folder: a fresh one, or with `--resume` the one an
    /// earlier run left with its journal. A worker's attempt gets a folder of its own.
    fn stage_output(&self, output: &StagedOutput, plan: &StagePlan) -> Result<LocalOutput> {
        let dir = self.path(&output.dir);
        fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        if plan.part && !plan.resume {
            // A resumed worker finds its journal under the usual name (so two copies of
            // one worker must not both resume at once); any other attempt's is unique.
            let tmp = dir.join(format!("{}-{}", output.tmp, super::attempt_id()));
            fs::create_dir(&tmp).map_err(io_at(&tmp))?;
            return Ok(LocalOutput {
                dir,
                tmp,
                journal: None,
                journaling: Arc::default(),
                committed: false,
            });
        }
        let tmp = dir.join(&output.tmp);
        let journal = if plan.resume {
            Journal::read(&tmp)
        } else {
            None
        };
        if journal.is_none() {
            if tmp.exists() {
                fs::remove_dir_all(&tmp).map_err(io_at(&tmp))?;
            }
            fs::create_dir(&tmp).map_err(io_at(&tmp))?;
        }
        Ok(LocalOutput {
            dir,
            tmp,
            journal,
            journaling: Arc::default(),
            committed: false,
        })
    }
}

/// One output's folder and temporary folder.
struct LocalOutput {
    dir: PathBuf,
    tmp: PathBuf,
    /// What an earlier run journaled in `tmp` (`--resume`).
    journal: Option<Journal>,
    /// `--resume`, once checked: this run's journal, which its hook rewrites at each
    /// shard's close.
    journaling: Arc<Mutex<Option<Journal>>>,
    committed: bool,
}

/// A resumable run's hook on disk: each closed shard (and its `.idx` and `.stats`) synced, then
/// journaled beside it, with every shard before it.
struct Journaler {
    tmp: PathBuf,
    journal: Arc<Mutex<Option<Journal>>>,
}

impl ShardEvents for Journaler {
    fn opened(&self, _: &Path, _: LastGuess) -> Box<dyn FnMut(u64) + Send> {
        Box::new(|_| {})
    }

    fn closed(&self, shard: &ClosedShard) -> Result<()> {
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        let Some(journal) = journal.as_mut() else {
            return Ok(());
        };
        let stats = shard.stats.as_ref().map(|s| &s.path);
        for path in std::iter::once(&shard.path)
            .chain(&shard.idx_path)
            .chain(stats)
        {
            let sync = fs::File::open(path).and_then(|f| f.sync_all());
            sync.map_err(io_at(path))?;
        }
        journal.shards.push(journal::entry(shard));
        journal.write(&self.tmp)?;
        crate::failpoint::hit("shard:journaled")
    }
}

/// A local run's outputs: their temporary folders are removed on drop (kept, with
/// `--resume`, when the run did not commit).
struct LocalStaging {
    outputs: Vec<LocalOutput>,
    resume: bool,
    /// The outputs' old sets are replaced (`--overwrite`, a worker's part).
    replace: bool,
    /// `--append`: a new generation of the outputs' sets.
    append: bool,
    root: PathBuf,
}

impl Staging for LocalStaging {
    fn folder(&self, i: usize) -> &Path {
        &self.outputs[i].tmp
    }

    fn hook(&self, i: usize) -> Option<ShardHook> {
        let out = &self.outputs[i];
        self.resume.then(|| {
            ShardHook::new(Journaler {
                tmp: out.tmp.clone(),
                journal: out.journaling.clone(),
            })
        })
    }

    fn journal_header(&self, i: usize) -> Result<Option<serde_json::Value>> {
        Ok(self.outputs[i].journal.as_ref().map(|j| j.header.clone()))
    }

    fn resume(&mut self, i: usize, header: serde_json::Value) -> Result<Vec<ClosedShard>> {
        let out = &self.outputs[i];
        let finished = match &out.journal {
            None => Vec::new(),
            Some(journal) if journal.superseded_by(&header) => Vec::new(),
            Some(journal) => {
                if let Some(difference) = journal.difference(&header) {
                    return Err(journal::mismatch(difference).with_file(&out.tmp));
                }
                journal.verified(&out.tmp)
            }
        };
        // From here on, this run journals under its header, the reused shards first.
        *out.journaling.lock().unwrap_or_else(|p| p.into_inner()) = Some(Journal {
            header,
            shards: finished.iter().map(journal::entry).collect(),
        });
        Ok(finished)
    }

    /// The publish protocol ([`super::publish`]) over this folder: the staged files
    /// are renamed into place, the manifests written last; then the folders are synced,
    /// which makes the renames durable. A failure before a set's manifest removes the
    /// shards placed for it (a folder of shards without a manifest would still pass a
    /// frame check).
    fn commit(
        &mut self,
        outputs: Vec<Publication>,
        cancel: &CancelToken,
        confirm: &dyn Fn() -> Result<()>,
    ) -> Result<Vec<PathBuf>> {
        let rel = |path: &Path| -> String {
            let rel = path.strip_prefix(&self.root).unwrap_or(path);
            rel.to_string_lossy()
                .replace(std::path::MAIN_SEPARATOR, "/")
        };
        let sets: Vec<Set<String>> = self
            .outputs
            .iter()
            .zip(outputs)
            .map(|(out, publication)| Set::of_run(publication, rel(&out.dir), |p| rel(p)))
            .collect();
        let dir = LocalDir::new(self.root.clone());
        let paths = match publish(
            &Direct(&dir),
            &sets,
            Mode::of(self.replace, self.append),
            cancel,
            confirm,
        ) {
            Ok(paths) => paths,
            Err(e) => {
                for set in &sets {
                    if dir.exists(&set.manifest_rel()).unwrap_or(true) {
                        continue;
                    }
                    for (from, to) in &set.moves {
                        if !dir.path(from).exists() {
                            let _ = fs::remove_file(dir.path(&set.rel(to)));
                        }
                    }
                }
                return Err(e);
            }
        };
        for out in &mut self.outputs {
            out.committed = true;
        }
        // The renames are durable once the folders are.
        let mut dirs: Vec<&PathBuf> = self.outputs.iter().map(|o| &o.dir).collect();
        dirs.dedup();
        for dir in dirs.into_iter().chain([&self.root]) {
            if let Ok(d) = fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(paths)
    }
}

impl Drop for LocalStaging {
    fn drop(&mut self) {
        for out in &self.outputs {
            // With --resume, a failed or interrupted run leaves its journal and finished
            // shards for the rerun.
            if self.resume && !out.committed {
                continue;
            }
            // Success or failure, no temporary outlives the run.
            let _ = fs::remove_dir_all(&out.tmp);
        }
    }
}
