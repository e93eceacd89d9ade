//! Shards: where each output's records go ([`OutputDir`]), how records become files of
//! a target size ([`writer`]), the shuffle's buckets ([`scatter`]) and the names of
//! everything a run writes ([`name`]).
//!
//! The files are written to a folder that the output's
//! [`Destination`](crate::store::destination::Destination) staged, and published by
//! its commit; nothing here knows whether they end up on disk or in a store.

pub mod name;
pub mod scatter;
pub mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use writer::{ClosedShard, Origin, Plan, ShardHook, ShardOptions, ShardWriter, SourceRows};

/// One output of a run (a prefix, or a split): the staged folder its shard writer
/// writes to, and what the writer must know about it.
#[derive(Debug)]
pub struct OutputDir {
    prefix: String,
    /// The staged folder (hidden, temporary).
    tmp: PathBuf,
    /// Told about each shard as it is written (a store's staging streams it up).
    events: Option<ShardHook>,
    /// `--resume`, once checked: the journal header of this run and the finished shards
    /// it reuses.
    resume_state: Option<(Arc<serde_json::Value>, Vec<ClosedShard>)>,
    /// `--resume`: records of the finished shards that the producer skipped itself (it
    /// restarted from a checkpoint), so the writer drops only the rest.
    skipped_by_producer: u64,
}

impl OutputDir {
    /// The output of `prefix`, written to staged folder `tmp`.
    pub(crate) fn new(prefix: &str, tmp: &Path, events: Option<ShardHook>) -> OutputDir {
        OutputDir {
            prefix: prefix.to_owned(),
            tmp: tmp.to_path_buf(),
            events,
            resume_state: None,
            skipped_by_producer: 0,
        }
    }

    /// `--resume`: the producer restarted `records` records into the stream.
    pub(crate) fn set_skipped_by_producer(&mut self, records: u64) {
        self.skipped_by_producer = records;
    }

    /// Records of the finished shards the producer skipped itself.
    pub(crate) fn skipped_by_producer(&self) -> u64 {
        self.skipped_by_producer
    }

    /// `--resume`: the journal header of this run, and the finished shards (checked by
    /// the destination) that the writer reuses.
    pub(crate) fn set_resumed(&mut self, header: serde_json::Value, finished: Vec<ClosedShard>) {
        self.resume_state = Some((Arc::new(header), finished));
    }

    /// The shard hook, if any.
    pub fn shard_hook(&self) -> Option<&ShardHook> {
        self.events.as_ref()
    }

    /// The checked journal header and finished shards, with `--resume`.
    pub fn resume_state(&self) -> Option<(&Arc<serde_json::Value>, &[ClosedShard])> {
        self.resume_state.as_ref().map(|(h, f)| (h, f.as_slice()))
    }

    /// The prefix of this output's files.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The staged folder.
    pub fn tmp_dir(&self) -> &Path {
        &self.tmp
    }
}
