//! The local [`Destination`]: a folder on disk. Shards are written in place, in each
//! output's hidden temporary folder, synced, then renamed to their final names; a
//! manifest is written beside them under a temporary name, synced, and renamed into
//! place last; the folder is synced after the renames.

use std::fs;
use std::path::{Path, PathBuf};

use super::destination::{
    ClosedShard, Destination, Publication, ShardHook, StagePlan, StagedOutput, Staging,
};
use super::journal::{self, Journal};
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
        if !plan.overwrite && !plan.part {
            for name in self.names("")? {
                if !plan.hidden.contains(&name) {
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
    committed: bool,
}

/// A local run's outputs: their temporary folders are removed on drop (kept, with
/// `--resume`, when the run did not commit).
struct LocalStaging {
    outputs: Vec<LocalOutput>,
    resume: bool,
    root: PathBuf,
}

impl Staging for LocalStaging {
    fn folder(&self, i: usize) -> &Path {
        &self.outputs[i].tmp
    }

    fn hook(&self, _i: usize) -> Option<ShardHook> {
        None
    }

    fn journal_header(&self, i: usize) -> Result<Option<serde_json::Value>> {
        Ok(self.outputs[i].journal.as_ref().map(|j| j.header.clone()))
    }

    fn journals_locally(&self) -> bool {
        true
    }

    fn resume(&mut self, i: usize, header: serde_json::Value) -> Result<Vec<ClosedShard>> {
        let out = &self.outputs[i];
        match &out.journal {
            None => Ok(Vec::new()),
            Some(journal) => {
                if let Some(difference) = journal.difference(&header) {
                    return Err(journal::mismatch(difference).with_file(&out.tmp));
                }
                Ok(journal.verified(&out.tmp))
            }
        }
    }

    /// 1. every old manifest goes (no output of these prefixes is published from here
    ///    on);
    /// 2. each output's old shards go (all of the prefix's) and its new ones are
    ///    renamed into place;
    /// 3. every new manifest is written and synced beside the temporaries;
    /// 4. the manifests are renamed into place, then the folder is synced.
    ///
    /// A failure before step 4 publishes none of the outputs, and the shards step 2
    /// placed are removed (a folder of shards without a manifest would still pass a
    /// frame check). Step 4 is one rename per output.
    fn commit(&mut self, outputs: Vec<Publication>, cancel: &CancelToken) -> Result<Vec<PathBuf>> {
        cancel.check()?;
        for (out, publication) in self.outputs.iter().zip(&outputs) {
            let manifest = out.dir.join(&publication.manifest.0);
            match fs::remove_file(&manifest) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io_at(&manifest)(e))
                }
                _ => {}
            }
        }
        let mut placed = Vec::new();
        let mut stage = || -> Result<Vec<PathBuf>> {
            for (out, publication) in self.outputs.iter().zip(&outputs) {
                for entry in fs::read_dir(&out.dir).map_err(io_at(&out.dir))? {
                    let entry = entry.map_err(io_at(&out.dir))?;
                    let name = entry.file_name().to_string_lossy().into_owned();
                    // Every old shard of the prefix goes before the renames, those of
                    // reused names too: a crash between renames leaves a partial new
                    // set, never old and new shards mixed under the final names.
                    if (publication.own)(&publication.prefix, &name)
                        && entry.file_type().map_err(io_at(&out.dir))?.is_file()
                    {
                        fs::remove_file(entry.path()).map_err(io_at(&entry.path()))?;
                    }
                }
                for (staged, name) in publication.files() {
                    let target = out.dir.join(&name);
                    fs::rename(staged, &target).map_err(io_at(&target))?;
                    placed.push(target);
                }
            }
            let mut staged = Vec::with_capacity(outputs.len());
            for (out, publication) in self.outputs.iter().zip(&outputs) {
                let (name, bytes) = &publication.manifest;
                let tmp = out.tmp.join(name);
                let write = || -> std::io::Result<()> {
                    use std::io::Write;
                    let mut file = fs::File::create(&tmp)?;
                    file.write_all(bytes)?;
                    file.sync_all()
                };
                write().map_err(io_at(&out.dir.join(name)))?;
                staged.push(tmp);
            }
            Ok(staged)
        };
        let staged = match stage() {
            Ok(staged) => staged,
            Err(e) => {
                for path in &placed {
                    let _ = fs::remove_file(path);
                }
                return Err(e);
            }
        };
        crate::failpoint::hit("commit:placed")?;
        let mut paths = Vec::with_capacity(outputs.len());
        for ((out, publication), staged) in self.outputs.iter_mut().zip(&outputs).zip(staged) {
            let path = out.dir.join(&publication.manifest.0);
            fs::rename(&staged, &path).map_err(io_at(&path))?;
            out.committed = true;
            paths.push(path);
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
