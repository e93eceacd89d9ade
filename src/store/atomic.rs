//! A local file replaced atomically: written in full under a hidden temporary name beside
//! its final one, synced, then renamed into place (or linked, to create it only where
//! nothing is). Readers see the old file or the whole new one; a write that fails or is
//! dropped before its commit leaves nothing. The manifest, the `--resume` journal and the
//! pipeline's cache file are written this way, by this one helper.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A file being written under its temporary name; [`AtomicFile::commit`] puts it in
/// place. Dropped uncommitted, the temporary is removed.
#[derive(Debug)]
pub struct AtomicFile {
    file: Option<File>,
    temp: PathBuf,
    path: PathBuf,
}

impl AtomicFile {
    /// Starts the file that will be `path`, under a temporary name beside it unique to
    /// this run: two writers of one name never share a temporary.
    ///
    /// # Errors
    ///
    /// The temporary cannot be made (its folder missing, among others).
    pub fn create(path: &Path) -> io::Result<AtomicFile> {
        let temp = path.with_file_name(format!(
            ".{}.{}.tfshard-write",
            path.file_name().unwrap_or_default().to_string_lossy(),
            super::attempt_id()
        ));
        let file = File::create(&temp)?;
        Ok(AtomicFile {
            file: Some(file),
            temp,
            path: path.to_path_buf(),
        })
    }

    /// The temporary's name (for errors while writing).
    pub fn temp(&self) -> &Path {
        &self.temp
    }

    /// Syncs the file and renames it into place, replacing what was there; returns it
    /// opened for reading (the file just written, whatever is renamed onto its name
    /// later).
    ///
    /// # Errors
    ///
    /// The sync, the reopening or the rename failed (the temporary is removed).
    pub fn commit(mut self) -> io::Result<File> {
        self.sync()?;
        let read = File::open(&self.temp)?;
        fs::rename(&self.temp, &self.path)?;
        Ok(read)
    }

    /// Syncs the file and links it into place only where nothing is
    /// ([`io::ErrorKind::AlreadyExists`] otherwise); the temporary goes either way.
    ///
    /// # Errors
    ///
    /// Something is at the final name, or the sync or link failed.
    pub fn commit_new(mut self) -> io::Result<()> {
        self.sync()?;
        let placed = match fs::hard_link(&self.temp, &self.path) {
            // A file system without hard links (FAT, some network and FUSE mounts):
            // renamed where nothing is, a moment ago (not atomic against a racing
            // writer there, which such a folder cannot have safely anyway).
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists && !self.path.exists() => {
                fs::rename(&self.temp, &self.path)
            }
            other => other,
        };
        let _ = fs::remove_file(&self.temp);
        placed
    }
}

impl AtomicFile {
    /// Makes what was written durable and closes the file (no write may follow).
    fn sync(&mut self) -> io::Result<()> {
        let file = (self.file.take()).ok_or_else(|| io::Error::other("committed twice"))?;
        file.sync_all()
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.file {
            Some(f) => f.write(buf),
            None => Err(io::Error::other("written after its commit")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.file {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        // Uncommitted (or a commit that failed after the sync): nothing stays.
        let _ = fs::remove_file(&self.temp);
    }
}

/// Whether `name` in a folder is an atomic write's temporary (a killed writer leaves
/// one behind).
pub fn is_temporary(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tfshard-write")
}

/// Removes the temporaries in `dir` that killed writers left (untouched for a minute: a
/// live writer's lasts a moment).
pub fn remove_leftovers(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age.as_secs() >= 60);
        if old && is_temporary(&entry.file_name().to_string_lossy()) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Writes `bytes` as the file `path` (its folders made), atomically and durably:
/// replacing what is there, or with `create_only` only where nothing is
/// ([`io::ErrorKind::AlreadyExists`]).
///
/// # Errors
///
/// As [`AtomicFile::create`], [`AtomicFile::commit`] and [`AtomicFile::commit_new`].
pub fn write_atomic(path: &Path, bytes: &[u8], create_only: bool) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // As on a store, where a name's folders need not exist.
        fs::create_dir_all(dir)?;
    }
    let mut file = AtomicFile::create(path)?;
    file.write_all(bytes)?;
    if create_only {
        file.commit_new()
    } else {
        file.commit().map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        crate::test_dir(&format!("atomic-{name}"))
    }

    fn names(d: &Path) -> Vec<String> {
        let mut n: Vec<String> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }

    #[test]
    fn replaces_whole_or_leaves_nothing() {
        let d = dir("replace");
        let path = d.join("m.json");
        write_atomic(&path, b"one", false).unwrap();
        write_atomic(&path, b"two", false).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        // A write dropped before its commit leaves the old file and no temporary.
        let mut half = AtomicFile::create(&path).unwrap();
        half.write_all(b"thr").unwrap();
        assert_eq!(names(&d).len(), 2, "the temporary beside it while written");
        drop(half);
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(names(&d), ["m.json"]);
        let _ = fs::remove_dir_all(&d);
    }

    /// A killed writer's temporary is known as one, and only an old one is removed.
    #[test]
    fn a_killed_writers_temporary_is_known_and_cleared_once_old() {
        let d = dir("killed");
        let half = AtomicFile::create(&d.join("m.json")).unwrap();
        let temp = half.temp().to_owned();
        std::mem::forget(half);
        let name = temp.file_name().unwrap().to_string_lossy().into_owned();
        assert!(is_temporary(&name), "{name}");
        assert!(!is_temporary("m.json") && !is_temporary(".data.tfshard-tmp"));
        remove_leftovers(&d);
        assert_eq!(
            names(&d),
            std::slice::from_ref(&name),
            "a fresh one may be a live writer's"
        );
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(120);
        File::options()
            .write(true)
            .open(&temp)
            .unwrap()
            .set_modified(old)
            .unwrap();
        remove_leftovers(&d);
        assert!(names(&d).is_empty());
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn create_only_refuses_an_existing_file() {
        let d = dir("create");
        let path = d.join("sub").join("claim");
        write_atomic(&path, b"a", true).unwrap();
        let e = write_atomic(&path, b"b", true).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&path).unwrap(), b"a");
        assert_eq!(names(&d.join("sub")), ["claim"]);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn commit_hands_back_the_file_written() {
        let d = dir("read");
        let path = d.join("cache");
        let mut f = AtomicFile::create(&path).unwrap();
        f.write_all(b"cached").unwrap();
        let read = f.commit().unwrap();
        // Replaced since: the handle still reads what this writer wrote.
        write_atomic(&path, b"other", false).unwrap();
        let mut got = String::new();
        std::io::Read::read_to_string(&mut &read, &mut got).unwrap();
        assert_eq!(got, "cached");
        let _ = fs::remove_dir_all(&d);
    }
}
