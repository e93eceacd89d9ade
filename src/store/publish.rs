//! The publish protocol, written once: how a set of staged shards becomes a published
//! set, for a run on disk ([`super::local`]), a run in a store ([`super::object`]) and
//! `finalize` (over any [`Destination`]). Each back-end supplies the [`Steps`]; the order
//! is here, and so are the rules that make it safe:
//!
//! 1. **Retire the old sets** (with `replace`): their manifests go first, so from here
//!    on no reader starts from an old set. Without `replace`, a set's manifest already
//!    there (another run published it meanwhile) stops the publish before anything is
//!    touched ([`ErrorKind::OutputClaimed`]).
//! 2. **Clear the prefix** (with `replace`): every shard and `.idx` file of each set's
//!    prefix, of any count, goes, unless this publish has placed it already (a rerun of
//!    `finalize` finds its moves half done). A crash during the moves then leaves a
//!    partial new set without a manifest, never old and new shards mixed under the
//!    final names.
//! 3. **Place** every staged file under its final name (a rename on disk; a
//!    server-side copy, or the completion of an upload begun under that name, on a
//!    store).
//! 4. **Retire the staging** (a store's uploaded temporaries; nothing on disk, where the
//!    renames emptied it).
//! 5. **Publish the manifests**: the commit point, one per set, every set's after every
//!    set's shards (a failure between two manifests leaves the earlier sets published,
//!    the later not), each right after the caller confirmed that it still holds its
//!    claims, each right after its statistics file. Without `replace`, each is written
//!    only where none is. An append writes
//!    every set's pinned manifest before any set's manifest, so that a writer killed
//!    between two sets' manifests leaves what completes the later ones.
//!
//! An **append** (`--append`) publishes a new generation beside the live set instead:
//! nothing of the set goes before its new manifest is written; step 2 clears only the
//! prefix's files no manifest kept lists (a killed append's); step 5 writes the
//! generation's pinned manifests, then each manifest over the old one (one atomic
//! replace); then, the set published, the shards it retired go.
//!
//! Claiming the output comes before (the caller holds a [`super::claim::Claims`] where
//! two runs may race), and so does staging; a failure before step 5 publishes nothing,
//! and the caller's staging, dropped, aborts what it started.

use std::path::{Path, PathBuf};

use super::destination::{AppendSet, Destination, Publication};
use crate::error::{Error, ErrorKind, Result};
use crate::progress::CancelToken;

/// One set to publish: a prefix's staged files, their final names, and its manifest.
pub(crate) struct Set<F> {
    /// The folder of the set, relative to the destination (`""`, or a worker's part
    /// folder).
    pub dir: String,
    /// The prefix whose files step 2 clears.
    pub prefix: String,
    /// Whether a name in `dir` is a shard (or `.idx`) of `prefix`, of any count.
    pub own: fn(&str, &str) -> bool,
    /// Each staged file (in the back-end's terms) with its final name in `dir`.
    pub moves: Vec<(F, String)>,
    /// The manifest's name in `dir`, and its bytes.
    pub manifest: (String, Vec<u8>),
    /// The set's statistics file (`{prefix}.stats.pb`): name in `dir` and bytes,
    /// written right before the manifest that names it.
    pub stats: Option<(String, Vec<u8>)>,
    /// Where a store records a multipart copy that places one of the files, while it
    /// runs (relative to the destination), so that a killed attempt's can be aborted.
    pub records: String,
    /// An append's: what stays and what goes once its manifest is written.
    pub append: Option<AppendSet>,
}

/// How [`publish`] treats what the output holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Into an output that holds no set: each manifest written only where none is.
    Create,
    /// Replacing the sets there (`--overwrite`, a worker's part).
    Replace,
    /// A new generation of the sets there (every set has [`Set::append`]).
    Append,
}

impl Mode {
    /// The mode of a run that replaces (or not) what is there, or appends.
    pub(crate) fn of(replace: bool, append: bool) -> Mode {
        match (append, replace) {
            (true, _) => Mode::Append,
            (false, true) => Mode::Replace,
            (false, false) => Mode::Create,
        }
    }
}

impl<F> Set<F> {
    /// A run's output to publish, in folder `dir`, each staged file named by `from`.
    pub(crate) fn of_run(
        publication: Publication,
        dir: String,
        from: impl Fn(&Path) -> F,
    ) -> Set<F> {
        let moves = publication
            .files()
            .map(|(p, name)| (from(p), name))
            .collect();
        Set {
            dir,
            prefix: publication.prefix,
            own: publication.own,
            moves,
            manifest: publication.manifest,
            stats: publication.stats,
            records: String::new(),
            append: publication.append,
        }
    }

    /// Name `name` of the set's folder, relative to the destination.
    pub(crate) fn rel(&self, name: &str) -> String {
        join(&self.dir, name)
    }

    /// The manifest, relative to the destination.
    pub(crate) fn manifest_rel(&self) -> String {
        self.rel(&self.manifest.0)
    }
}

/// What a back-end does at each step of [`publish`]. Names are relative to the
/// destination.
pub(crate) trait Steps {
    /// A staged file, as this back-end finds it.
    type From;

    /// The names directly in folder `dir`.
    ///
    /// # Errors
    ///
    /// An I/O or store error naming the folder.
    fn names(&self, dir: &str) -> Result<Vec<String>>;

    /// Whether the file staged as `from` is already in place as `to` (placed by an
    /// earlier attempt of this publish, or early, while the run still wrote).
    ///
    /// # Errors
    ///
    /// An I/O or store error.
    fn is_placed(&self, from: &Self::From, to: &str) -> Result<bool>;

    /// Deletes these files (missing ones are fine).
    ///
    /// # Errors
    ///
    /// An I/O or store error naming the first file that could not go.
    fn delete(&self, names: &[String]) -> Result<()>;

    /// Places the staged files of set `set` under their final names (those not placed
    /// yet).
    ///
    /// # Errors
    ///
    /// An I/O or store error naming the target.
    fn place(&self, set: &Set<Self::From>) -> Result<()>;

    /// Deletes what staging left that no published set needs (called once, after every
    /// set is placed).
    ///
    /// # Errors
    ///
    /// An I/O or store error.
    fn retire_staging(&self) -> Result<()> {
        Ok(())
    }

    /// Writes set `set`'s manifest whole (only where none is, with `create_only`): from
    /// here on its files are the published set's.
    ///
    /// # Errors
    ///
    /// An I/O or store error; with `create_only`, [`ErrorKind::OutputExists`] or the
    /// store's "already exists" when one is there.
    fn write_manifest(&self, set: &Set<Self::From>, create_only: bool) -> Result<()>;

    /// Writes the file `rel` whole, replacing any there (an append's pinned manifest).
    ///
    /// # Errors
    ///
    /// An I/O or store error.
    fn write_file(&self, rel: &str, bytes: &[u8]) -> Result<()>;

    /// `rel` as a path to show or record (a URL for a store).
    fn display(&self, rel: &str) -> PathBuf;
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// Publishes `sets` in the protocol's order (see the module docs): into an empty output,
/// replacing what their prefixes held, or appending to it (`mode`). Returns the
/// manifests' paths, in order.
///
/// # Errors
///
/// Cancelled before anything is touched ([`ErrorKind::Interrupted`]); a set published
/// by another run meanwhile, without `replace` ([`ErrorKind::OutputClaimed`]);
/// `confirm`'s error (the caller's claim taken over); an I/O or store error. Nothing is
/// published then (but the sets whose manifests were written before a failure).
pub(crate) fn publish<S: Steps + ?Sized>(
    steps: &S,
    sets: &[Set<S::From>],
    mode: Mode,
    cancel: &CancelToken,
    confirm: &dyn Fn() -> Result<()>,
) -> Result<Vec<PathBuf>> {
    cancel.check()?;
    let replace = mode == Mode::Replace;
    // 1.
    if replace {
        let old: Vec<String> = sets.iter().map(Set::manifest_rel).collect();
        steps.delete(&old)?;
    } else if mode == Mode::Append {
        // The live set stays live until its new manifest replaces the old one.
    } else {
        for set in sets {
            if steps.names(&set.dir)?.contains(&set.manifest.0) {
                let path = steps.display(&set.manifest_rel());
                return Err(Error::new(ErrorKind::OutputClaimed).with_file(path));
            }
        }
    }
    // 2.
    let mut doomed = Vec::new();
    for set in sets.iter().filter(|_| mode != Mode::Create) {
        let mut placed = Vec::new();
        for (from, to) in &set.moves {
            if steps.is_placed(from, &join(&set.dir, to))? {
                placed.push(to.as_str());
            }
        }
        let kept = set.append.as_ref().map_or(&[][..], |a| &a.keep[..]);
        for name in steps.names(&set.dir)? {
            if (set.own)(&set.prefix, &name)
                && !placed.contains(&name.as_str())
                && !kept.contains(&name)
            {
                doomed.push(join(&set.dir, &name));
            }
        }
    }
    steps.delete(&doomed)?;
    // 3-4.
    for set in sets {
        steps.place(set)?;
    }
    steps.retire_staging()?;
    crate::failpoint::hit("publish:placed")?;
    // 5.
    confirm()?;
    for set in sets {
        if let Some(append) = &set.append {
            steps.write_file(&set.rel(&append.pinned.0), &append.pinned.1)?;
            crate::failpoint::hit("publish:pinned")?;
        }
    }
    let mut paths = Vec::with_capacity(sets.len());
    for set in sets {
        let path = steps.display(&set.manifest_rel());
        confirm()?;
        if let Some((name, bytes)) = &set.stats {
            // Before the manifest that names it (its SHA-256 tells a reader of an older
            // manifest that the file is not its own).
            steps.write_file(&set.rel(name), bytes)?;
        }
        match steps.write_manifest(set, mode == Mode::Create) {
            // Another run published this set since this one found the output empty.
            Err(e) if !replace && already_exists(&e) => {
                return Err(Error::new(ErrorKind::OutputClaimed).with_file(path))
            }
            other => other?,
        }
        crate::failpoint::hit("publish:manifest")?;
        paths.push(path);
    }
    // 6. An append's retired shards, now that no manifest lists them.
    for set in sets {
        if let Some(append) = &set.append {
            crate::failpoint::hit("publish:published")?;
            let after: Vec<String> = append.after.iter().map(|n| set.rel(n)).collect();
            steps.delete(&after)?;
        }
    }
    Ok(paths)
}

fn already_exists(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::OutputExists)
        || super::is_problem(e, super::StoreProblem::AlreadyExists)
}

/// The steps over a [`Destination`]'s own operations: staged files are names relative
/// to it, placed one at a time ([`Destination::place`]); a move is done when its source
/// is gone and its target there (a rename that an earlier attempt made).
pub(crate) struct Direct<'a>(pub &'a dyn Destination);

impl Steps for Direct<'_> {
    type From = String;

    fn names(&self, dir: &str) -> Result<Vec<String>> {
        self.0.names(dir)
    }

    fn is_placed(&self, from: &String, to: &str) -> Result<bool> {
        Ok(!self.0.exists(from)? && self.0.exists(to)?)
    }

    fn delete(&self, names: &[String]) -> Result<()> {
        names.iter().try_for_each(|n| self.0.delete(n))
    }

    fn place(&self, set: &Set<String>) -> Result<()> {
        for (from, to) in &set.moves {
            let target = join(&set.dir, to);
            if self.0.exists(from)? {
                let record = join(&set.records, to);
                self.0.place(from, &target, &record)?;
                crate::failpoint::hit("publish:moved")?;
            } else if !self.0.exists(&target)? {
                // Neither staged nor placed: lost (deleted by hand?).
                return Err(Error::new(ErrorKind::PartsMissing {
                    missing: Vec::new(),
                    count: 0,
                })
                .with_file(self.0.display(from)));
            }
        }
        Ok(())
    }

    fn write_manifest(&self, set: &Set<String>, create_only: bool) -> Result<()> {
        self.0
            .write(&set.manifest_rel(), set.manifest.1.clone(), create_only)
    }

    fn write_file(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        self.0.write(rel, bytes.to_vec(), false)
    }

    fn display(&self, rel: &str) -> PathBuf {
        self.0.display(rel)
    }
}
