//! Shards on disk: where a run writes ([`OutputDir`]), how records become files of a
//! target size ([`writer`]), and the commit that publishes them.
//!
//! Everything a run writes goes to one hidden folder, `.{prefix}.tfshard-tmp/`, until
//! every shard is complete. Then [`commit_all`] publishes every output of the run (all
//! its splits) together: old manifests first, new manifests last. A run that fails
//! before the commit leaves the old output valid; the guard removes the temporaries on
//! every exit.

pub mod journal;
pub mod name;
pub mod scatter;
pub mod writer;

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::manifest::{Manifest, ShardInfo};
use crate::tfrecord::Compression;

pub use writer::{ClosedShard, Plan, ShardEvents, ShardHook, ShardOptions, ShardWriter};

/// The output folder of one prefix, with its temporary folder (removed on drop).
#[derive(Debug)]
pub struct OutputDir {
    dir: PathBuf,
    prefix: String,
    tmp: PathBuf,
    /// Told about each shard as it is written (a store output streams it up).
    events: Option<ShardHook>,
    /// `--resume`: the temporary folder outlives a failed or interrupted run, and this
    /// is what an earlier run journaled there.
    resume: Option<Option<journal::Journal>>,
    /// Set once the commit has published this output.
    committed: std::cell::Cell<bool>,
    /// `--resume`, once checked: the journal header of this run and the finished shards
    /// it reuses.
    resume_state: Option<(std::sync::Arc<serde_json::Value>, Vec<ClosedShard>)>,
}

fn io_at(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::from(e).with_file(path)
}

impl OutputDir {
    fn at(dir: &Path, prefix: &str, tmp: PathBuf) -> OutputDir {
        OutputDir {
            dir: dir.to_path_buf(),
            prefix: prefix.to_owned(),
            tmp,
            events: None,
            resume: None,
            committed: Default::default(),
            resume_state: None,
        }
    }

    /// Creates the folder if needed and checks that it may be written: a non-empty
    /// folder needs `overwrite` (a folder holding only this prefix's leftover temporary
    /// folder counts as empty). Removes such a leftover, then creates a fresh one.
    ///
    /// # Errors
    ///
    /// `output folder is not empty`, or an I/O error naming the folder.
    pub fn prepare(dir: &Path, prefix: &str, overwrite: bool) -> Result<OutputDir> {
        OutputDir::prepare_resumable(dir, prefix, overwrite, false)
    }

    /// [`OutputDir::prepare`]; with `resume`, an earlier run's temporary folder and
    /// journal are kept for [`OutputDir::resumed`], and this run's outlives a failure.
    ///
    /// # Errors
    ///
    /// As [`OutputDir::prepare`].
    pub fn prepare_resumable(
        dir: &Path,
        prefix: &str,
        overwrite: bool,
        resume: bool,
    ) -> Result<OutputDir> {
        fs::create_dir_all(dir).map_err(io_at(dir))?;
        let tmp_name = name::tmp_dir_name(prefix);
        if !overwrite {
            for entry in fs::read_dir(dir).map_err(io_at(dir))? {
                let entry = entry.map_err(io_at(dir))?;
                if entry.file_name().to_string_lossy() != tmp_name {
                    return Err(Error::new(ErrorKind::OutputExists).with_file(dir));
                }
            }
        }
        let tmp = dir.join(&tmp_name);
        let journal = if resume {
            journal::Journal::read(&tmp)
        } else {
            None
        };
        if journal.is_none() {
            if tmp.exists() {
                fs::remove_dir_all(&tmp).map_err(io_at(&tmp))?;
            }
            fs::create_dir(&tmp).map_err(io_at(&tmp))?;
        }
        let mut out = OutputDir::at(dir, prefix, tmp);
        out.resume = resume.then_some(journal);
        Ok(out)
    }

    /// Prepares a worker's part folder: replaced as a whole (a retried worker's part
    /// is the same), with a temporary folder unique to this attempt, so two copies of
    /// one worker running at once never share one.
    ///
    /// # Errors
    ///
    /// An I/O error naming the folder.
    pub fn prepare_part(dir: &Path, prefix: &str, resume: bool) -> Result<OutputDir> {
        if resume {
            // A resumed worker finds its journal under the usual name (so two copies of
            // one worker must not both resume at once).
            fs::create_dir_all(dir).map_err(io_at(dir))?;
            return OutputDir::prepare_resumable(dir, prefix, true, true);
        }
        fs::create_dir_all(dir).map_err(io_at(dir))?;
        let attempt = format!("{}-{}", name::tmp_dir_name(prefix), name::attempt_id());
        let tmp = dir.join(attempt);
        fs::create_dir(&tmp).map_err(io_at(&tmp))?;
        Ok(OutputDir::at(dir, prefix, tmp))
    }

    /// Prepares one output per prefix in the same folder (`--split`): the emptiness
    /// check ignores every one of this run's temporary folders.
    ///
    /// # Errors
    ///
    /// As [`OutputDir::prepare`].
    pub fn prepare_all(
        dir: &Path,
        prefixes: &[String],
        overwrite: bool,
        resume: bool,
    ) -> Result<Vec<OutputDir>> {
        fs::create_dir_all(dir).map_err(io_at(dir))?;
        let ours: Vec<String> = prefixes.iter().map(|p| name::tmp_dir_name(p)).collect();
        if !overwrite {
            for entry in fs::read_dir(dir).map_err(io_at(dir))? {
                let entry = entry.map_err(io_at(dir))?;
                if !ours.contains(&entry.file_name().to_string_lossy().into_owned()) {
                    return Err(Error::new(ErrorKind::OutputExists).with_file(dir));
                }
            }
        }
        prefixes
            .iter()
            .map(|p| OutputDir::prepare_resumable(dir, p, true, resume))
            .collect()
    }

    /// Tells `hook` about each shard as it is written.
    pub fn set_shard_hook(&mut self, hook: ShardHook) {
        self.events = Some(hook);
    }

    /// The shard hook, if any.
    pub fn shard_hook(&self) -> Option<&ShardHook> {
        self.events.as_ref()
    }

    /// With `--resume`: checks an earlier run's journal header against this run's
    /// `header`, and keeps the shards it finished that are still sound (size and CRC32C
    /// checked) for the writer; from here on this run journals under `header`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::ResumeMismatch`] naming the first difference.
    pub fn begin_resume(&mut self, header: serde_json::Value) -> Result<()> {
        let Some(earlier) = &self.resume else {
            return Ok(());
        };
        let finished = match earlier {
            None => Vec::new(),
            Some(journal) => {
                if let Some(difference) = journal.difference(&header) {
                    return Err(journal::mismatch(difference).with_file(&self.tmp));
                }
                journal.verified(&self.tmp)
            }
        };
        self.resume_state = Some((std::sync::Arc::new(header), finished));
        Ok(())
    }

    /// Sets the journal header and the finished shards another journal (a store's)
    /// vouched for: the writer skips what they hold.
    pub fn set_resumed(&mut self, header: serde_json::Value, finished: Vec<ClosedShard>) {
        self.resume_state = Some((std::sync::Arc::new(header), finished));
    }

    /// The checked journal header and finished shards, with `--resume`.
    pub fn resume_state(&self) -> Option<(&std::sync::Arc<serde_json::Value>, &[ClosedShard])> {
        self.resume_state.as_ref().map(|(h, f)| (h, f.as_slice()))
    }

    /// The prefix of this output's files.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The temporary folder.
    pub fn tmp_dir(&self) -> &Path {
        &self.tmp
    }

    /// Where the manifest goes.
    pub fn manifest_path(&self) -> PathBuf {
        self.dir.join(name::manifest_name(&self.prefix))
    }

    /// Removes this prefix's old manifest (from then on its old output is not
    /// published).
    fn retire(&self) -> Result<()> {
        let manifest_path = self.manifest_path();
        match fs::remove_file(&manifest_path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_at(&manifest_path)(e)),
            _ => Ok(()),
        }
    }

    /// Removes this prefix's old shards and `.idx` files, renames the new shards into
    /// place (pushing each path placed onto `placed`) and fills `manifest.shards` and
    /// its totals.
    fn place(
        &self,
        shards: &[ClosedShard],
        compression: Compression,
        manifest: &mut Manifest,
        placed: &mut Vec<PathBuf>,
    ) -> Result<()> {
        for entry in fs::read_dir(&self.dir).map_err(io_at(&self.dir))? {
            let entry = entry.map_err(io_at(&self.dir))?;
            let file_name = entry.file_name().to_string_lossy().into_owned();
            if name::is_own_shard(&self.prefix, &file_name)
                && entry.file_type().map_err(io_at(&self.dir))?.is_file()
            {
                fs::remove_file(entry.path()).map_err(io_at(&entry.path()))?;
            }
        }
        manifest.shards.clear();
        for (i, shard) in shards.iter().enumerate() {
            let final_name = name::shard_name(&self.prefix, i, shards.len(), compression);
            let target = self.dir.join(&final_name);
            fs::rename(&shard.path, &target).map_err(io_at(&target))?;
            placed.push(target);
            if let Some(idx) = &shard.idx_path {
                let idx_target = self.dir.join(format!("{final_name}.idx"));
                fs::rename(idx, &idx_target).map_err(io_at(&idx_target))?;
                placed.push(idx_target);
            }
            manifest.shards.push(ShardInfo {
                file: final_name,
                records: shard.records,
                bytes: shard.bytes,
                crc32c: format!("{:08x}", shard.crc32c),
            });
        }
        manifest.records = shards.iter().map(|s| s.records).sum();
        manifest.bytes = shards.iter().map(|s| s.bytes).sum();
        Ok(())
    }
}

/// Publishes every output of a run as one commit (each split's, or the one prefix's),
/// the manifest being each output's commit point:
///
/// 1. every old manifest goes (no output of these prefixes is published from here on);
/// 2. each prefix's old shards go and its new ones are renamed into place;
/// 3. every new manifest is written and synced beside the temporaries;
/// 4. the manifests are renamed into place, then the folder is synced.
///
/// A failure before step 4 publishes none of the outputs, and the shards step 2 placed
/// are removed (a folder of shards without a manifest would still pass a frame check).
/// Step 4 is one rename per output. Returns the manifest paths, in `outs` order.
///
/// # Errors
///
/// An I/O error naming the file.
pub fn commit_all(
    outs: &[OutputDir],
    shards: &[Vec<ClosedShard>],
    compression: Compression,
    manifests: &mut [Manifest],
) -> Result<Vec<PathBuf>> {
    for out in outs {
        out.retire()?;
    }
    let mut placed = Vec::new();
    let mut stage = || -> Result<Vec<PathBuf>> {
        for ((out, shards), manifest) in outs.iter().zip(shards).zip(manifests.iter_mut()) {
            out.place(shards, compression, manifest, &mut placed)?;
        }
        outs.iter()
            .zip(manifests.iter())
            .map(|(out, m)| m.stage(&out.manifest_path(), out.tmp_dir()))
            .collect()
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
    let mut paths = Vec::with_capacity(outs.len());
    for (out, staged) in outs.iter().zip(staged) {
        let path = out.manifest_path();
        fs::rename(&staged, &path).map_err(io_at(&path))?;
        out.committed.set(true);
        paths.push(path);
    }
    // The renames are durable once the folder is (every output shares it).
    if let Some(out) = outs.first() {
        if let Ok(d) = fs::File::open(&out.dir) {
            let _ = d.sync_all();
        }
    }
    Ok(paths)
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        // With --resume, a failed or interrupted run leaves its journal and finished
        // shards for the rerun.
        if self.resume.is_some() && !self.committed.get() {
            return;
        }
        // Success or failure, no temporary outlives the run.
        let _ = fs::remove_dir_all(&self.tmp);
    }
}
