//! Image folders → `tf.train.Example` records, in path order.
//!
//! [`plan`] walks the folder (never following a symlink: symlinks are listed as
//! skipped), sorts files by the byte order of their relative path, and labels them: by
//! first-level class folder (sorted, 0..K-1, as Keras' `image_dataset_from_directory` and
//! torchvision's `ImageFolder` do), from a `filename,label` CSV, or not at all.
//! [`read_image`] reads one file and sniffs its format and size from the header only
//! (no decode); [`encode`] builds the record.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, ImageProblem, Result};
pub use crate::example::image::{ImageData, ImageFile};
use crate::manifest::Skipped;

/// Extensions read by default (case-insensitive).
pub(crate) const DEFAULT_EXTENSIONS: &[&str] = &["jpg", "jpeg", "png", "gif", "bmp", "webp"];

/// Where labels come from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Labels {
    /// First-level sub-folders are classes.
    DirName,
    /// No label features.
    None,
    /// A CSV file with columns `filename,label` (a class name or an integer).
    Csv(PathBuf),
}

/// What to do with a file that is not a readable image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnError {
    /// Stop with an error naming it.
    Fail,
    /// Leave it out and list it in the manifest's `skipped`.
    Skip,
}

/// The walk's result.
#[derive(Debug, Clone, Default)]
pub struct ImagePlan {
    /// Images in output order.
    pub files: Vec<ImageFile>,
    /// Class names in label order (when labels are names).
    pub classes: Option<Vec<String>>,
    /// Left out, with the reason.
    pub skipped: Vec<Skipped>,
}

fn bad(problem: ImageProblem, path: &Path) -> Error {
    Error::new(ErrorKind::BadImage(problem)).with_file(path)
}

fn has_extension(name: &str, extensions: &[String]) -> bool {
    match name.rsplit_once('.') {
        Some((_, ext)) => extensions.iter().any(|e| e.eq_ignore_ascii_case(ext)),
        None => false,
    }
}

/// Walks `dir` and labels its images.
///
/// # Errors
///
/// An unreadable folder (with `OnError::Fail`), an image outside any class folder (with
/// `Labels::DirName`), or a labels file that does not match the images (with
/// `OnError::Fail`).
pub fn plan(
    dir: &Path,
    labels: &Labels,
    extensions: &[String],
    on_error: OnError,
) -> Result<ImagePlan> {
    let meta = std::fs::metadata(dir).map_err(|e| Error::from(e).with_file(dir))?;
    if !meta.is_dir() {
        return Err(bad(ImageProblem::NotAFolder, dir));
    }
    let mut out = ImagePlan::default();
    let mut found: Vec<ImageFile> = Vec::new();
    let mut classes: BTreeSet<String> = BTreeSet::new();
    let rel_of = |p: &Path| -> String {
        let rel = p.strip_prefix(dir).unwrap_or(p);
        rel.components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/")
    };
    let walker = walkdir::WalkDir::new(dir)
        .follow_links(false)
        .min_depth(1)
        .into_iter()
        .filter_entry(|e| {
            !(e.depth() == 1
                && e.file_type().is_dir()
                && e.file_name().to_string_lossy().starts_with('.'))
        });
    for entry in walker {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                let path = e
                    .path()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| dir.to_path_buf());
                let err = Error::from(std::io::Error::from(e)).with_file(&path);
                match on_error {
                    OnError::Fail => return Err(err),
                    OnError::Skip => {
                        out.skipped.push(Skipped {
                            path: rel_of(&path),
                            reason: format!("unreadable: {}", err.kind()),
                        });
                        continue;
                    }
                }
            }
        };
        let rel = rel_of(entry.path());
        let kind = entry.file_type();
        if kind.is_symlink() {
            // Never read: it could point anywhere.
            out.skipped.push(Skipped {
                path: rel,
                reason: "symlink".into(),
            });
            continue;
        }
        if kind.is_dir() {
            if entry.depth() == 1 {
                classes.insert(rel);
            }
            continue;
        }
        if !kind.is_file() || !has_extension(&rel, extensions) {
            continue;
        }
        if entry.depth() == 1 && *labels == Labels::DirName {
            return Err(Error::new(ErrorKind::UnlabeledImage).with_file(entry.path()));
        }
        let meta = entry.metadata().ok();
        found.push(ImageFile {
            rel,
            path: entry.path().to_path_buf(),
            label: None,
            bytes: meta.as_ref().map_or(0, std::fs::Metadata::len),
            identity: meta.as_ref().map(crate::store::storage::file_identity),
        });
    }
    // Byte order of the relative path, as Python's sorted().
    found.sort_by(|a, b| a.rel.as_bytes().cmp(b.rel.as_bytes()));
    out.skipped
        .sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    match labels {
        Labels::None => out.files = found,
        Labels::DirName => {
            let names: Vec<String> = classes.into_iter().collect();
            let index: BTreeMap<&str, i64> = names
                .iter()
                .enumerate()
                .map(|(i, n)| (n.as_str(), i as i64))
                .collect();
            out.files = found
                .into_iter()
                .map(|file| {
                    let class = file.rel.split('/').next().unwrap_or_default().to_owned();
                    let label = index.get(class.as_str()).copied().unwrap_or(0);
                    ImageFile {
                        label: Some((label, class)),
                        ..file
                    }
                })
                .collect();
            out.classes = Some(names);
        }
        Labels::Csv(csv) => label_from_csv(csv, found, on_error, &mut out)?,
    }
    Ok(out)
}

/// Reads `filename,label` rows (a header row first). A field may be double-quoted.
fn read_csv(csv: &Path) -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(csv).map_err(|e| Error::from(e).with_file(csv))?;
    let unquote = |s: &str| s.trim().trim_matches('"').replace("\"\"", "\"");
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let Some((name, label)) = line.rsplit_once(',') else {
            return Err(Error::new(ErrorKind::LabelsMismatch {
                detail: format!("line {} is not `filename,label`", i + 1),
            })
            .with_file(csv));
        };
        if i == 0 && unquote(name) == "filename" {
            continue;
        }
        rows.push((unquote(name), unquote(label)));
    }
    Ok(rows)
}

fn label_from_csv(
    csv: &Path,
    found: Vec<ImageFile>,
    on_error: OnError,
    out: &mut ImagePlan,
) -> Result<()> {
    let rows = read_csv(csv)?;
    let by_name: BTreeMap<&str, &str> =
        rows.iter().map(|(n, l)| (n.as_str(), l.as_str())).collect();
    let integers = rows.iter().all(|(_, l)| l.parse::<i64>().is_ok());
    let names: Vec<String> = rows
        .iter()
        .map(|(_, l)| l.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let index: BTreeMap<&str, i64> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i as i64))
        .collect();
    let present: BTreeSet<&str> = found.iter().map(|f| f.rel.as_str()).collect();
    let mut problems = Vec::new();
    for file in &found {
        let rel = &file.rel;
        match by_name.get(rel.as_str()) {
            Some(label) => {
                let value = if integers {
                    label.parse().unwrap_or(0)
                } else {
                    index[label]
                };
                out.files.push(ImageFile {
                    label: Some((value, (*label).to_owned())),
                    ..file.clone()
                });
            }
            None => problems.push(Skipped {
                path: rel.clone(),
                reason: "not in the labels file".into(),
            }),
        }
    }
    for (name, _) in &rows {
        if !present.contains(name.as_str()) {
            problems.push(Skipped {
                path: name.clone(),
                reason: "in the labels file but no such image".into(),
            });
        }
    }
    if let (OnError::Fail, Some(first)) = (on_error, problems.first()) {
        return Err(Error::new(ErrorKind::LabelsMismatch {
            detail: format!(
                "{}: {} ({} such files in all)",
                first.path,
                first.reason,
                problems.len()
            ),
        })
        .with_file(csv));
    }
    out.skipped.extend(problems);
    out.classes = (!integers).then_some(names);
    Ok(())
}

/// The format from the first bytes.
pub fn sniff(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("jpeg")
    } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("png")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("gif")
    } else if bytes.starts_with(b"BM") {
        Some("bmp")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("webp")
    } else {
        None
    }
}

/// Reads an image and its header.
///
/// # Errors
///
/// An I/O error, content that is no image we know, or a header cut short.
pub fn read_image(path: &Path) -> Result<ImageData> {
    let bytes = std::fs::read(path).map_err(|e| Error::from(e).with_file(path))?;
    let Some(format) = sniff(&bytes) else {
        return Err(bad(ImageProblem::NoSignature, path));
    };
    let size = imagesize::blob_size(&bytes).map_err(|e| {
        let cause = e.to_string();
        bad(ImageProblem::Header { format, cause }, path)
    })?;
    if size.width == 0 || size.height == 0 {
        return Err(bad(
            ImageProblem::ZeroSize {
                format,
                width: size.width,
                height: size.height,
            },
            path,
        ));
    }
    Ok(ImageData {
        bytes,
        format,
        height: size.height as u64,
        width: size.width as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_content_not_names() {
        assert_eq!(sniff(b"\xff\xd8\xff\xe0"), Some("jpeg"));
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\n...."), Some("png"));
        assert_eq!(sniff(b"GIF89a"), Some("gif"));
        assert_eq!(sniff(b"BM...."), Some("bmp"));
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 "), Some("webp"));
        assert_eq!(sniff(b"hello"), None);
    }

    #[test]
    fn extensions_are_case_insensitive() {
        let ext: Vec<String> = DEFAULT_EXTENSIONS.iter().map(|s| s.to_string()).collect();
        assert!(has_extension("a/B.JPEG", &ext));
        assert!(!has_extension("a/b.txt", &ext));
        assert!(!has_extension("jpg", &ext));
    }
}
