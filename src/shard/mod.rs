//! Shards on disk: where a run writes ([`OutputDir`]), how records become files of a
//! target size ([`writer`]), and the commit that publishes them.
//!
//! Everything a run writes goes to one hidden folder, `.{prefix}.tfshard-tmp/`, until
//! every shard is complete. Then, in this order: the old manifest goes, then the old
//! shards and `.idx` files of the same prefix, then the new shards are renamed into
//! place and the new manifest is written atomically. A run that fails before the commit
//! leaves the old output valid; the guard removes the temporaries on every exit.

pub mod name;
pub mod scatter;
pub mod writer;

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::manifest::{Manifest, ShardInfo};
use crate::tfrecord::Compression;

pub use writer::{ClosedShard, Plan, ShardOptions, ShardWriter};

/// The output folder of one prefix, with its temporary folder (removed on drop).
#[derive(Debug)]
pub struct OutputDir {
    dir: PathBuf,
    prefix: String,
    tmp: PathBuf,
}

fn io_at(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::from(e).with_file(path)
}

impl OutputDir {
    /// Creates the folder if needed and checks that it may be written: a non-empty
    /// folder needs `overwrite` (a folder holding only this prefix's leftover temporary
    /// folder counts as empty). Removes such a leftover, then creates a fresh one.
    ///
    /// # Errors
    ///
    /// `output folder is not empty`, or an I/O error naming the folder.
    pub fn prepare(dir: &Path, prefix: &str, overwrite: bool) -> Result<OutputDir> {
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
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(io_at(&tmp))?;
        }
        fs::create_dir(&tmp).map_err(io_at(&tmp))?;
        Ok(OutputDir {
            dir: dir.to_path_buf(),
            prefix: prefix.to_owned(),
            tmp,
        })
    }

    /// Prepares one output per prefix in the same folder (`--split`): the emptiness
    /// check ignores every one of this run's temporary folders.
    ///
    /// # Errors
    ///
    /// As [`OutputDir::prepare`].
    pub fn prepare_all(dir: &Path, prefixes: &[String], overwrite: bool) -> Result<Vec<OutputDir>> {
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
            .map(|p| OutputDir::prepare(dir, p, true))
            .collect()
    }

    /// The prefix of this output's files.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The temporary folder.
    pub fn tmp_dir(&self) -> &Path {
        &self.tmp
    }

    /// The output folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the manifest goes.
    pub fn manifest_path(&self) -> PathBuf {
        self.dir.join(name::manifest_name(&self.prefix))
    }

    /// Publishes the shards: removes the old manifest, then this prefix's old shards and
    /// `.idx` files, renames the new shards into place, fills `manifest.shards` and
    /// writes the manifest atomically.
    ///
    /// # Errors
    ///
    /// An I/O error naming the file.
    pub fn commit(
        &self,
        shards: &[ClosedShard],
        compression: Compression,
        manifest: &mut Manifest,
    ) -> Result<PathBuf> {
        let manifest_path = self.manifest_path();
        match fs::remove_file(&manifest_path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io_at(&manifest_path)(e))
            }
            _ => {}
        }
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
            if let Some(idx) = &shard.idx_path {
                let idx_target = self.dir.join(format!("{final_name}.idx"));
                fs::rename(idx, &idx_target).map_err(io_at(&idx_target))?;
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
        manifest.write_atomic(&manifest_path, &self.tmp)?;
        // The renames are durable once the folder is.
        if let Ok(d) = fs::File::open(&self.dir) {
            let _ = d.sync_all();
        }
        Ok(manifest_path)
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        // Success or failure, no temporary outlives the run.
        let _ = fs::remove_dir_all(&self.tmp);
    }
}
