//! Local scratch folders of a run (a store output's staging, a shuffle's spill) that a
//! killed run cannot clean up itself: each holds a lock file, locked while its run lives
//! (the system releases the lock when the process dies, however it dies); the next run
//! that makes one in the same place removes those whose lock it can take.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The lock file in each scratch folder.
const LOCK: &str = ".lock";

/// A scratch folder, locked while this value lives, removed when it is dropped.
#[derive(Debug)]
pub(crate) struct Scratch {
    path: PathBuf,
    /// Holds the lock (released with the file).
    _lock: fs::File,
}

impl Scratch {
    /// Makes `{base}/.{stem}-{unique}` and locks it, after removing the folders of the
    /// same stem in `base` left by dead runs.
    ///
    /// # Errors
    ///
    /// An I/O error naming the folder.
    pub(crate) fn create(base: &Path, stem: &str, unique: &str) -> Result<Scratch> {
        let path = base.join(format!(".{stem}-{unique}"));
        // Made and locked under a name no sweep takes, then renamed into place: a sweep
        // never finds it unlocked.
        let making = base.join(format!(".{stem}~{unique}"));
        let at = |e: std::io::Error| Error::from(e).with_file(&path);
        fs::create_dir_all(&making).map_err(at)?;
        let lock = fs::File::create(making.join(LOCK)).map_err(at)?;
        // Where the file system has no flock (some network mounts), the folder is still
        // removed when the run ends, but a killed run's stays: no sweep there.
        let locked = try_lock(&lock);
        fs::rename(&making, &path).map_err(at)?;
        if locked {
            sweep(base, stem);
        }
        Ok(Scratch { path, _lock: lock })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Takes an exclusive `flock` on `file` without waiting: whether it got it. (Held per
/// open file, so a second open in the same process does not get it either.)
fn try_lock(file: &fs::File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this `File` owns and keeps open.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Removes the scratch folders `{base}/.{stem}-*` whose runs are gone (their lock can be
/// taken); returns how many. Folders without a lock file (being made this instant) and
/// anything unreadable are left alone.
pub(crate) fn sweep(base: &Path, stem: &str) -> usize {
    let Ok(entries) = fs::read_dir(base) else {
        return 0;
    };
    let start = format!(".{stem}-");
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(&start) {
            continue;
        }
        let dir = entry.path();
        let Ok(lock) = fs::OpenOptions::new().write(true).open(dir.join(LOCK)) else {
            continue;
        };
        if try_lock(&lock) && fs::remove_dir_all(&dir).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dead run's folder goes, a live one's stays, whatever its age.
    #[test]
    fn the_next_run_removes_only_the_folders_of_dead_runs() {
        let base = crate::test_dir("scratch-sweep");
        let live = Scratch::create(&base, "tfshard-staging", "a").unwrap();
        fs::write(live.path().join("00000.tfrecord"), b"x").unwrap();
        // A dead run's: its lock file is there and nobody holds it.
        let dead = base.join(".tfshard-staging-b");
        fs::create_dir_all(&dead).unwrap();
        fs::write(dead.join(LOCK), b"").unwrap();
        fs::write(dead.join("00001.tfrecord"), b"y").unwrap();
        // Being made this instant (no lock file yet), and another stem's.
        let making = base.join(".tfshard-staging-c");
        fs::create_dir_all(&making).unwrap();
        let other = base.join(".tfshard-shuffle-d");
        fs::create_dir_all(&other).unwrap();
        fs::write(other.join(LOCK), b"").unwrap();
        let next = Scratch::create(&base, "tfshard-staging", "e").unwrap();
        assert!(!dead.exists());
        assert!(live.path().join("00000.tfrecord").exists());
        assert!(making.exists() && other.exists() && next.path().exists());
        let (live_path, next_path) = (live.path().to_owned(), next.path().to_owned());
        drop((live, next));
        assert!(!live_path.exists() && !next_path.exists());
        fs::remove_dir_all(&base).unwrap();
    }
}
