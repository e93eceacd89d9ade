//! One home for every output: the [`Destination`] a run, a worker, `finalize` and the
//! TFDS files write to, local or in a store, behind one protocol.
//!
//! A conversion **stages** its shards ([`Destination::stage`] → [`Staging`]): the shard
//! writer writes each one to a local file under a hidden temporary name (in the output
//! folder itself on disk; in a local staging folder for a store, which streams each
//! file's parts up while it is written), and tells the staging's hook, the one writer of
//! the `--resume` journal, as each one closes. At the end, [`Staging::commit`]
//! **publishes** by the one protocol ([`super::publish`]): the old manifests go, the
//! prefix's other shards go, every shard is **placed** under its final `-of-N` name (a
//! rename; a server-side copy on a store), and **each manifest is written last**: the
//! commit point. A staging dropped before its commit **aborts**: its temporaries go
//! (uploads aborted), unless the run is resumable. `finalize` publishes by the same
//! protocol over the destination's own operations ([`Destination::write`],
//! [`Destination::place`], …), and the TFDS files use them too.
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
    /// [`ErrorKind::OutputExists`](crate::error::ErrorKind::OutputExists) locally or
    /// [`StoreProblem::AlreadyExists`](super::StoreProblem::AlreadyExists) on a store
    /// when `create_only` finds the file; an I/O or store error.
    fn write(&self, rel: &str, bytes: Vec<u8>, create_only: bool) -> Result<()>;

    /// Writes small file `rel` whole only if it still holds `expected` (compare and
    /// swap: a claim taken over, a claim refreshed); `Ok(false)` when it holds something
    /// else or nothing. On a store, a conditional put pinned to the ETag of what was
    /// read; on disk, under an exclusive lock of the file, which every replace takes.
    ///
    /// # Errors
    ///
    /// An I/O or store error naming it.
    fn replace(&self, rel: &str, expected: &[u8], bytes: Vec<u8>) -> Result<bool>;

    /// Deletes file `rel` only if it still holds `expected` (a claim released by its
    /// holder, never another's that took it over); `Ok(false)` when it holds something
    /// else or nothing. On disk under the lock [`Destination::replace`] takes; on a store,
    /// read, compared, then deleted (object stores have no conditional delete: a
    /// replace in between is not seen).
    ///
    /// # Errors
    ///
    /// An I/O or store error naming it.
    fn delete_if(&self, rel: &str, expected: &[u8]) -> Result<bool>;

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
    /// `record` while it runs, where [`Destination::abort_uploads`] finds it after a kill.
    ///
    /// # Errors
    ///
    /// An I/O or store error naming the target.
    fn place(&self, from: &str, to: &str, record: &str) -> Result<()>;

    /// Aborts every upload under folder `rel`: those recorded in any `uploads/` folder
    /// below it (their records deleted), and those the store lists as pending there (an
    /// upload whose run was killed before it recorded it). Nothing to do on disk.
    ///
    /// # Errors
    ///
    /// A store error.
    fn abort_uploads(&self, rel: &str) -> Result<()>;

    /// Prepares a run's outputs for writing (see the module docs).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::OutputExists`](crate::error::ErrorKind::OutputExists) when the output holds
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
    /// `--append`: a new generation of the sets the outputs hold (the run holds their
    /// claim).
    pub append: bool,
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

    /// What the shard writer of output `i` tells about each file, if anything: a store
    /// streams it up; a resumable run journals it (the one journal writer: beside the
    /// files on disk, in the store for a store).
    fn hook(&self, i: usize) -> Option<ShardHook>;

    /// `--resume`: checks output `i`'s journal, if an earlier run left one, against this
    /// run's `header`, and returns the shards it finished that are still sound (sizes
    /// and CRC32C checked), for the writer to reuse. From here on, the run journals
    /// under `header`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::ResumeMismatch`](crate::error::ErrorKind::ResumeMismatch) naming the first
    /// difference; an I/O or store error.
    fn resume(&mut self, i: usize, header: serde_json::Value) -> Result<Vec<ClosedShard>>;

    /// `--resume`: the header of output `i`'s journal, if an earlier run left one (what
    /// it read: a lakehouse table's snapshot, which the rerun continues).
    ///
    /// # Errors
    ///
    /// A store error other than the journal's absence.
    fn journal_header(&self, i: usize) -> Result<Option<serde_json::Value>>;

    /// Publishes every output (one [`Publication`] per output, in order): the old
    /// manifests go, the shards are placed, the stale shards go, and the manifests are
    /// written last, each right after `confirm` found the run's claims still its own.
    /// Returns the manifests' paths.
    ///
    /// # Errors
    ///
    /// An I/O or store error; another run publishing to the same output; cancelled;
    /// `confirm`'s error. Nothing is published then.
    fn commit(
        &mut self,
        outputs: Vec<Publication>,
        cancel: &CancelToken,
        confirm: &dyn Fn() -> Result<()>,
    ) -> Result<Vec<PathBuf>>;
}

/// What an append publishes beside its staged files (names in the set's folder).
#[derive(Debug, Clone, Default)]
pub(crate) struct AppendSet {
    /// The files step 2 leaves: the live set's shards (retired ones too, until the new
    /// manifest is written) and the pinned manifests kept, with their shards.
    pub keep: Vec<String>,
    /// The generation's pinned manifest: name and bytes, written before the manifest.
    pub pinned: (String, Vec<u8>),
    /// Deleted once the manifest is written: the retired shards, and the pinned
    /// manifests that list them.
    pub after: Vec<String>,
}

/// What [`Staging::commit`] publishes for one output.
pub(crate) struct Publication {
    /// The closed shards, in order.
    pub shards: Vec<ClosedShard>,
    /// Each shard's final name.
    pub names: Vec<String>,
    /// The manifest's name and bytes.
    pub manifest: (String, Vec<u8>),
    /// The statistics file's name and bytes, written right before the manifest.
    pub stats: Option<(String, Vec<u8>)>,
    /// Whether a name in the output folder is a shard (or `.idx`) of this output's
    /// prefix, of any count: what `--overwrite` removes when the new set lacks it.
    pub own: fn(&str, &str) -> bool,
    /// The prefix `own` is asked about.
    pub prefix: String,
    /// An append's: what stays, its pinned manifest, and what goes after the manifest.
    pub append: Option<AppendSet>,
}

impl Publication {
    /// The final names of the files placed, each with its staged path: every shard,
    /// then its `.idx` and `.stats` files.
    pub(crate) fn files(&self) -> impl Iterator<Item = (&Path, String)> {
        self.shards
            .iter()
            .zip(&self.names)
            .flat_map(|(shard, name)| {
                std::iter::once((shard.path.as_path(), name.clone()))
                    .chain(
                        shard
                            .idx_path
                            .as_deref()
                            .map(|idx| (idx, format!("{name}.idx"))),
                    )
                    .chain(
                        shard
                            .stats
                            .as_ref()
                            .map(|s| (s.path.as_path(), format!("{name}.stats"))),
                    )
            })
    }
}

/// A shard's partial statistics, kept beside it as `{shard}.stats`.
#[derive(Debug, Clone)]
pub struct ShardStats {
    /// The temporary file.
    pub path: PathBuf,
    /// Its bytes (the partial statistics' own serialization).
    pub bytes: Arc<Vec<u8>>,
}

/// A finished shard, still under its temporary name.
#[derive(Debug, Clone)]
pub struct ClosedShard {
    /// Temporary path.
    pub path: PathBuf,
    /// Temporary `.idx` path, with `--index`.
    pub idx_path: Option<PathBuf>,
    /// Its partial statistics (unless `--no-stats`): the temporary `.stats` file that
    /// keeps them beside the shard, and their bytes.
    pub stats: Option<ShardStats>,
    /// Records in it.
    pub records: u64,
    /// Bytes on disk.
    pub bytes: u64,
    /// CRC32C of the bytes on disk.
    pub crc32c: u32,
    /// `--resume`: where the producer of the records stood at the last point it could
    /// restart from (a Parquet row group's end) whose records all lie in this shard or
    /// earlier ones; journaled, so that a rerun skips reading what it reuses.
    pub checkpoint: Option<serde_json::Value>,
    /// The inputs it holds records of, in the order its records came, each with the range
    /// of its records there (the manifest's `sources`).
    pub sources: Vec<SourceRows>,
}

/// Records of one input that a shard holds: the input (its index among the run's
/// inputs, as the manifest lists them) and the range of its records, `[start, end)`
/// counted in the order its source yields them. Each range holds only records the run
/// read one after another: for a split's shard, the records of the range that went to
/// this split (the others went to other splits' shards); two runs of an input that the
/// run did not read one after another (an append's records read again from both sides
/// of a gap that live shards hold) are two ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SourceRows {
    /// The input's index.
    pub input: u32,
    /// `[start, end)` of its records.
    pub rows: [u64; 2],
}

impl SourceRows {
    /// Adds `count` records of `input` from record `first` on to `sources`, read in one
    /// run from record `run_start` on: the last range grows when it is the same input's
    /// and ends inside that run (the records between went elsewhere), else a range
    /// starts.
    pub fn note(sources: &mut Vec<SourceRows>, input: u32, first: u64, count: u64, run_start: u64) {
        match sources.last_mut() {
            Some(last)
                if last.input == input && run_start <= last.rows[1] && last.rows[1] <= first =>
            {
                last.rows[1] = first + count;
            }
            _ => sources.push(SourceRows {
                input,
                rows: [first, first + count],
            }),
        }
    }
}

/// Where the next record of a run comes from: its input, its index among that input's
/// records, and where the run of that input's records read one after another began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// The input's index.
    pub input: u32,
    /// The next record's index in it.
    pub next: u64,
    /// The first record of the run the next one continues.
    pub run_start: u64,
}

impl Origin {
    /// The next record is record `record` of `input`: a run continues when it follows the
    /// last record read (`current`), else a run starts there.
    pub fn at(current: Option<Origin>, input: u32, record: u64) -> Origin {
        match current {
            Some(o) if o.input == input && o.next == record => o,
            _ => Origin {
                input,
                next: record,
                run_start: record,
            },
        }
    }

    /// Notes the next `count` records in `sources` and moves past them.
    pub fn note(&mut self, sources: &mut Vec<SourceRows>, count: u64) {
        SourceRows::note(sources, self.input, self.next, count, self.run_start);
        self.next += count;
    }
}

/// What a shard writer tells about each shard as it writes it: a store's staging streams
/// each shard's parts up while the rest of it is still being written.
pub trait ShardEvents: Send + Sync {
    /// A shard file was created; the returned function is called with the bytes written
    /// to the file so far, each time more reach it. `last` is the writer's running
    /// guess that no shard follows this one.
    fn opened(&self, path: &Path, last: LastGuess) -> Box<dyn FnMut(u64) + Send>;
    /// The shard is complete (its file closed, every byte written). What the hook
    /// keeps of it (a store's upload, a `--resume` journal's entry) is its to make
    /// durable.
    ///
    /// # Errors
    ///
    /// What the hook could not record (the journal); the run fails with it.
    fn closed(&self, shard: &ClosedShard) -> Result<()>;
}

/// A shard writer's running guess that the shard it has open is the last of its output
/// (from the records its producer said it would give). A store's staging holds such a
/// shard back instead of streaming it: once the run ends, the count is known, and the
/// shard goes up under its final `-of-N` name, with no copy. A wrong guess costs only
/// time: the shard then goes up under its temporary name when the next one opens.
#[derive(Debug, Clone, Default)]
pub struct LastGuess(Arc<std::sync::atomic::AtomicBool>);

impl LastGuess {
    /// The guess now.
    pub fn get(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn set(&self, last: bool) {
        self.0.store(last, std::sync::atomic::Ordering::Relaxed);
    }
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

/// One conformance suite for every back-end: the same functions run against a local
/// folder and against a store (moto's S3 server on 127.0.0.1), as each one must keep
/// the protocol alike.
#[cfg(test)]
mod conformance {
    use super::*;
    use crate::error::ErrorKind;
    use crate::shard::name::is_own_shard;

    fn plan(overwrite: bool, staging: &Path) -> StagePlan {
        StagePlan {
            outputs: vec![StagedOutput {
                dir: String::new(),
                tmp: ".data.tfshard-tmp".into(),
            }],
            hidden: vec![".data.tfshard-tmp".into(), ".data.tfshard-parts".into()],
            overwrite,
            append: false,
            resume: false,
            part: false,
            staging_dir: Some(staging.to_path_buf()),
        }
    }

    /// Writes `count` shards into the staging as the shard writer does (telling its
    /// hook; with `guessed_last`, guessing each one the last, wrongly but for the last),
    /// and returns them with their bytes (a store's staging removes each file once it is
    /// uploaded).
    fn write_shards(
        staging: &dyn Staging,
        count: usize,
        seed: u8,
        guessed_last: bool,
    ) -> Vec<(ClosedShard, Vec<u8>)> {
        let hook = staging.hook(0);
        (0..count)
            .map(|i| {
                let path = staging.folder(0).join(format!("{i:05}.tfrecord"));
                let bytes: Vec<u8> = (0..1000 + i * 10).map(|b| b as u8 ^ seed).collect();
                // Created, then announced, as the shard writer does.
                std::fs::write(&path, &bytes).unwrap();
                let last = LastGuess::default();
                last.set(guessed_last);
                let mut report = hook.as_ref().map(|h| h.0.opened(&path, last));
                if let Some(report) = report.as_mut() {
                    report(bytes.len() as u64);
                }
                let shard = ClosedShard {
                    path,
                    idx_path: None,
                    stats: None,
                    records: 1,
                    bytes: bytes.len() as u64,
                    crc32c: crc32c::crc32c(&bytes),
                    checkpoint: None,
                    sources: Vec::new(),
                };
                if let Some(h) = &hook {
                    h.0.closed(&shard).unwrap();
                }
                (shard, bytes)
            })
            .collect()
    }

    fn publication(shards: Vec<(ClosedShard, Vec<u8>)>) -> Publication {
        let shards: Vec<ClosedShard> = shards.into_iter().map(|(s, _)| s).collect();
        let names = (0..shards.len())
            .map(|i| format!("data-{i:05}-of-{:05}.tfrecord", shards.len()))
            .collect();
        Publication {
            shards,
            names,
            manifest: ("data.manifest.json".into(), b"{}\n".to_vec()),
            stats: None,
            own: is_own_shard,
            prefix: "data".into(),
            append: None,
        }
    }

    fn sorted(mut names: Vec<String>) -> Vec<String> {
        names.sort();
        names
    }

    /// Small files: written whole, read back, create-only refused when present.
    pub(super) fn small_files(d: &dyn Destination) {
        d.write("a/plan.json", b"one".to_vec(), false).unwrap();
        assert!(d.exists("a/plan.json").unwrap());
        assert_eq!(d.read("a/plan.json").unwrap(), b"one");
        d.write("a/plan.json", b"two".to_vec(), false).unwrap();
        assert_eq!(d.read("a/plan.json").unwrap(), b"two");
        let refused = d.write("a/plan.json", b"three".to_vec(), true).unwrap_err();
        assert!(
            matches!(refused.kind(), ErrorKind::OutputExists)
                || crate::store::is_problem(&refused, crate::store::StoreProblem::AlreadyExists),
            "{refused}"
        );
        assert_eq!(d.read("a/plan.json").unwrap(), b"two");
        d.place("a/plan.json", "a/moved.json", "a/uploads/moved.json")
            .unwrap();
        assert_eq!(d.read("a/moved.json").unwrap(), b"two");
        d.delete_tree("a").unwrap();
        assert!(!d.exists("a/moved.json").unwrap());
        assert!(d.names("").unwrap().is_empty(), "{:?}", d.names(""));
        d.delete("never-there").unwrap();
    }

    /// Stage, place, publish: the shards under their final names, the manifest last,
    /// nothing hidden left behind; the same bytes where the writer guessed each shard
    /// the last (a store holds such a shard back, and uploads it once the next one
    /// opens, or at the commit under its final name).
    pub(super) fn stage_place_publish(d: &dyn Destination, scratch: &Path) {
        let mut staging = d.stage(plan(false, scratch)).unwrap();
        let shards = write_shards(&*staging, 3, 7, true);
        let bytes: Vec<Vec<u8>> = shards.iter().map(|(_, b)| b.clone()).collect();
        let paths = staging
            .commit(vec![publication(shards)], &CancelToken::new(), &|| Ok(()))
            .unwrap();
        drop(staging);
        assert_eq!(paths, vec![d.display("data.manifest.json")]);
        assert_eq!(
            sorted(d.names("").unwrap()),
            [
                "data-00000-of-00003.tfrecord",
                "data-00001-of-00003.tfrecord",
                "data-00002-of-00003.tfrecord",
                "data.manifest.json"
            ]
        );
        for (i, b) in bytes.iter().enumerate() {
            assert_eq!(
                &d.read(&format!("data-{i:05}-of-00003.tfrecord")).unwrap(),
                b
            );
        }
        // A second run without overwrite finds the output taken.
        let taken = d.stage(plan(false, scratch)).err().expect("not empty");
        assert!(matches!(taken.kind(), ErrorKind::OutputExists), "{taken}");
        // With overwrite, every file of the prefix the new set does not place goes
        // (the third shard, an old index, a set of another count or compression); other
        // prefixes and files stay.
        for name in [
            "data-00001-of-00003.tfrecord.idx",
            "data-00000-of-00001.tfrecord.gz",
            "train-00000-of-00001.tfrecord",
            "notes.txt",
        ] {
            d.write(name, b"old".to_vec(), false).unwrap();
        }
        let mut staging = d.stage(plan(true, scratch)).unwrap();
        let shards = write_shards(&*staging, 2, 9, false);
        let bytes: Vec<Vec<u8>> = shards.iter().map(|(_, b)| b.clone()).collect();
        staging
            .commit(vec![publication(shards)], &CancelToken::new(), &|| Ok(()))
            .unwrap();
        drop(staging);
        assert_eq!(
            sorted(d.names("").unwrap()),
            [
                "data-00000-of-00002.tfrecord",
                "data-00001-of-00002.tfrecord",
                "data.manifest.json",
                "notes.txt",
                "train-00000-of-00001.tfrecord",
            ]
        );
        for (i, b) in bytes.iter().enumerate() {
            assert_eq!(
                &d.read(&format!("data-{i:05}-of-00002.tfrecord")).unwrap(),
                b
            );
        }
        for name in d.names("").unwrap() {
            d.delete(&name).unwrap();
        }
    }

    /// A staging dropped before its commit leaves nothing: no shard, no manifest, no
    /// temporary.
    pub(super) fn abort_leaves_nothing(d: &dyn Destination, scratch: &Path) {
        let staging = d.stage(plan(false, scratch)).unwrap();
        write_shards(&*staging, 2, 3, true);
        drop(staging);
        assert!(d.names("").unwrap().is_empty(), "{:?}", d.names(""));
        // A cancelled commit publishes nothing either.
        let mut staging = d.stage(plan(false, scratch)).unwrap();
        let shards = write_shards(&*staging, 2, 3, false);
        let cancel = CancelToken::new();
        cancel.cancel();
        let stopped = staging
            .commit(vec![publication(shards)], &cancel, &|| Ok(()))
            .unwrap_err();
        assert!(
            matches!(stopped.kind(), ErrorKind::Interrupted),
            "{stopped}"
        );
        drop(staging);
        assert!(d.names("").unwrap().is_empty(), "{:?}", d.names(""));
    }

    /// A run without overwrite that finds, at its commit, a set another run published
    /// meanwhile leaves that set alone: refused before it touches a file.
    pub(super) fn a_set_published_meanwhile_is_left_alone(d: &dyn Destination, scratch: &Path) {
        let mut staging = d.stage(plan(false, scratch)).unwrap();
        let shards = write_shards(&*staging, 2, 5, false);
        let theirs = [
            ("data-00000-of-00003.tfrecord", &b"theirs"[..]),
            ("data.manifest.json", &b"{\"theirs\": 1}"[..]),
        ];
        for (name, bytes) in theirs {
            d.write(name, bytes.to_vec(), false).unwrap();
        }
        let refused = staging
            .commit(vec![publication(shards)], &CancelToken::new(), &|| Ok(()))
            .unwrap_err();
        assert!(
            matches!(refused.kind(), ErrorKind::OutputClaimed),
            "{refused}"
        );
        drop(staging);
        assert_eq!(
            sorted(d.names("").unwrap()),
            ["data-00000-of-00003.tfrecord", "data.manifest.json"]
        );
        for (name, bytes) in theirs {
            assert_eq!(d.read(name).unwrap(), bytes);
            d.delete(name).unwrap();
        }
    }

    fn all(d: &dyn Destination, scratch: &Path) {
        small_files(d);
        stage_place_publish(d, scratch);
        abort_leaves_nothing(d, scratch);
        a_set_published_meanwhile_is_left_alone(d, scratch);
    }

    #[test]
    fn the_local_destination_conforms() {
        let root = crate::test_dir("destination-local");
        let d = crate::store::destination_of(&root.join("out"), crate::store::IoOptions::new())
            .unwrap();
        all(&*d, &root.join("staging"));
        crate::store::claim::conformance::all(&d);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_object_destination_conforms() {
        let Some(endpoint) = crate::store::test_server::s3() else {
            return;
        };
        let bucket = endpoint.bucket("conformance");
        let d = crate::store::destination_of(
            Path::new(&format!("s3://{bucket}/out")),
            crate::store::IoOptions::new(),
        )
        .unwrap();
        let scratch = crate::test_dir("destination-s3");
        all(&*d, &scratch);
        crate::store::claim::conformance::all(&d);
        // Local staging is the run's own and goes with it.
        assert!(std::fs::read_dir(&scratch).map_or(true, |mut e| e.next().is_none()));
        let _ = std::fs::remove_dir_all(&scratch);
    }
}
