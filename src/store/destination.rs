//! One home for every output: the [`Destination`] a run, a worker, `finalize` and the
//! TFDS files write to, local or in a store, behind one protocol.
//!
//! A conversion **stages** its shards ([`Destination::stage`] → [`Staging`]): the shard
//! writer writes each one to a local file under a hidden temporary name (in the output
//! folder itself on disk; in a local staging folder for a store, which streams each
//! file's parts up while it is written). At the end, [`Staging::commit`] **places** every
//! shard under its final `-of-N` name (a rename; a server-side copy on a store), removes
//! the prefix's stale shards and **publishes each manifest last**: the commit point. A
//! staging dropped before its commit **aborts**: its temporaries go (uploads aborted),
//! unless the run is resumable. `finalize` and the TFDS files use the same destination's
//! small-file operations ([`Destination::write`], [`Destination::place`], …).
//!
//! Back-ends: [`super::local`] (rename, fsync, the folder synced after the renames) and
//! [`super::object`] (`object_store`: multipart uploads recorded before their first part,
//! server-side copies, conditional puts). Nothing above this module asks whether bytes
//! are local or remote; it works on names relative to the output.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Result;
use crate::progress::CancelToken;

/// Where a run's output lives: a local folder or a store prefix. Names are relative to
/// the output (`/`-separated; `""` is the output itself).
pub(crate) trait Destination: Send + Sync {
    /// `rel` as a path to show or record (a URL for a store).
    fn display(&self, rel: &str) -> PathBuf;

    /// The names directly in folder `rel` (files and folders; none when it does not
    /// exist).
    ///
    /// # Errors
    ///
    /// An I/O or store error naming the folder.
    fn names(&self, rel: &str) -> Result<Vec<String>>;

    /// Whether file `rel` exists.
    ///
    /// # Errors
    ///
    /// An I/O or store error naming it.
    fn exists(&self, rel: &str) -> Result<bool>;

    /// The whole of small file `rel`.
    ///
    /// # Errors
    ///
    /// An I/O or store error naming it (not found included).
    fn read(&self, rel: &str) -> Result<Vec<u8>>;

    /// Writes small file `rel` whole and atomically (a synced temporary renamed into
    /// place; one put on a store); with `create_only`, only if nothing is there.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::OutputExists`](crate::ErrorKind::OutputExists) locally or
    /// [`StoreProblem::AlreadyExists`](super::StoreProblem::AlreadyExists) on a store
    /// when `create_only` finds the file; an I/O or store error.
    fn write(&self, rel: &str, bytes: Vec<u8>, create_only: bool) -> Result<()>;

    /// Deletes file `rel` (a missing one is fine).
    ///
    /// # Errors
    ///
    /// An I/O or store error naming it.
    fn delete(&self, rel: &str) -> Result<()>;

    /// Deletes folder `rel` and everything below it (a missing one is fine).
    ///
    /// # Errors
    ///
    /// An I/O or store error naming what could not be deleted.
    fn delete_tree(&self, rel: &str) -> Result<()>;

    /// Moves file `from` to `to`: a rename, or on a store a server-side copy (the source
    /// stays until its folder is deleted). A multipart copy's upload id is recorded in
    /// `record` while it runs, where [`Destination::abort_recorded`] finds it after a kill.
    ///
    /// # Errors
    ///
    /// An I/O or store error naming the target.
    fn place(&self, from: &str, to: &str, record: &str) -> Result<()>;

    /// Aborts the uploads recorded directly in folder `rel` and deletes their records
    /// (nothing to do on disk).
    ///
    /// # Errors
    ///
    /// A store error.
    fn abort_recorded(&self, rel: &str) -> Result<()>;

    /// Prepares a run's outputs for writing (see the module docs).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::OutputExists`](crate::ErrorKind::OutputExists) when the output holds
    /// anything but `plan.hidden` names and `plan.overwrite` is off; an I/O or store
    /// error.
    fn stage(&self, plan: StagePlan) -> Result<Box<dyn Staging>>;
}

/// One output of a run: a prefix's shards and manifest, in folder `dir`.
#[derive(Debug, Clone)]
pub(crate) struct StagedOutput {
    /// The folder, relative to the destination (`""`, or a worker's part folder).
    pub dir: String,
    /// The name of the output's hidden temporary folder in `dir`.
    pub tmp: String,
}

/// What [`Destination::stage`] prepares.
#[derive(Debug, Clone)]
pub(crate) struct StagePlan {
    /// Every output of the run (its splits), committed together.
    pub outputs: Vec<StagedOutput>,
    /// Names directly in the destination that do not make it "non-empty" (this run's
    /// temporary and parts folders).
    pub hidden: Vec<String>,
    /// Replace what the outputs hold.
    pub overwrite: bool,
    /// `--resume`: an earlier run's temporaries and journal are kept for
    /// [`Staging::resume`], and this run's outlive a failure.
    pub resume: bool,
    /// A worker's part: replaced as a whole by a retried worker, never claimed, with
    /// temporaries unique to this attempt (two copies of one worker may run at once).
    pub part: bool,
    /// Where a store's shards are staged locally (default `$TMPDIR`).
    pub staging_dir: Option<PathBuf>,
}

/// A run's outputs while their shards are written (see the module docs).
pub(crate) trait Staging {
    /// The local folder output `i`'s shard files are written to.
    fn folder(&self, i: usize) -> &Path;

    /// What the shard writer of output `i` tells about each file (a store streams it
    /// up), if anything.
    fn hook(&self, i: usize) -> Option<ShardHook>;

    /// Whether the shard writer journals `--resume` progress itself, beside its files
    /// (on disk); a store's staging journals uploads in the store instead.
    fn journals_locally(&self) -> bool;

    /// `--resume`: checks output `i`'s journal, if an earlier run left one, against this
    /// run's `header`, and returns the shards it finished that are still sound (sizes
    /// and CRC32C checked), for the writer to reuse. From here on, the run journals
    /// under `header`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::ResumeMismatch`](crate::ErrorKind::ResumeMismatch) naming the first
    /// difference; an I/O or store error.
    fn resume(&mut self, i: usize, header: serde_json::Value) -> Result<Vec<ClosedShard>>;

    /// Publishes every output (one [`Publication`] per output, in order): the old
    /// manifests go, the shards are placed, the stale shards go, and the manifests are
    /// written last. Returns the manifests' paths.
    ///
    /// # Errors
    ///
    /// An I/O or store error; another run publishing to the same output; cancelled.
    /// Nothing is published then.
    fn commit(&mut self, outputs: Vec<Publication>, cancel: &CancelToken) -> Result<Vec<PathBuf>>;
}

/// What [`Staging::commit`] publishes for one output.
pub(crate) struct Publication {
    /// The closed shards, in order.
    pub shards: Vec<ClosedShard>,
    /// Each shard's final name.
    pub names: Vec<String>,
    /// The manifest's name and bytes.
    pub manifest: (String, Vec<u8>),
    /// Whether a name in the output folder is a shard (or `.idx`) of this output's
    /// prefix, of any count: what `--overwrite` removes when the new set lacks it.
    pub own: fn(&str, &str) -> bool,
    /// The prefix `own` is asked about.
    pub prefix: String,
}

impl Publication {
    /// The final names of the files placed, each with its staged path: every shard,
    /// then its `.idx` file.
    pub(crate) fn files(&self) -> impl Iterator<Item = (&Path, String)> {
        self.shards
            .iter()
            .zip(&self.names)
            .flat_map(|(shard, name)| {
                std::iter::once((shard.path.as_path(), name.clone())).chain(
                    shard
                        .idx_path
                        .as_deref()
                        .map(|idx| (idx, format!("{name}.idx"))),
                )
            })
    }

    /// Whether `name` in the output is this prefix's and not in the new set.
    pub(crate) fn is_stale(&self, name: &str) -> bool {
        let stem = name.strip_suffix(".idx").unwrap_or(name);
        (self.own)(&self.prefix, name) && !self.names.iter().any(|n| n == stem)
    }
}

/// A finished shard, still under its temporary name.
#[derive(Debug, Clone)]
pub struct ClosedShard {
    /// Temporary path.
    pub path: PathBuf,
    /// Temporary `.idx` path, with `--index`.
    pub idx_path: Option<PathBuf>,
    /// Records in it.
    pub records: u64,
    /// Bytes on disk.
    pub bytes: u64,
    /// CRC32C of the bytes on disk.
    pub crc32c: u32,
}

/// What a shard writer tells about each shard as it writes it: a store's staging streams
/// each shard's parts up while the rest of it is still being written.
pub trait ShardEvents: Send + Sync {
    /// A shard file was created; the returned function is called with the bytes written
    /// to the file so far, each time more reach it.
    fn opened(&self, path: &Path) -> Box<dyn FnMut(u64) + Send>;
    /// The shard is complete (its file closed, every byte written).
    fn closed(&self, shard: &ClosedShard);
}

/// A shared [`ShardEvents`] handler.
#[derive(Clone)]
pub struct ShardHook(pub(crate) Arc<dyn ShardEvents>);

impl ShardHook {
    /// Wraps a handler.
    pub fn new(events: impl ShardEvents + 'static) -> ShardHook {
        ShardHook(Arc::new(events))
    }
}

impl std::fmt::Debug for ShardHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShardHook")
    }
}
