//! Existing TFRecord files as input (`convert tfrecord`): which files the command line
//! names, in which order, and their bytes.
//!
//! A file names itself (a `*.manifest.json`, the shards it lists). A folder (or a store
//! prefix) with one of our manifests names the shards it lists, in its order; with
//! TFDS's `dataset_info.json`, the split's shards in index order; otherwise it is walked
//! like a Parquet folder (recursively, skipping `_`/`.` names such as `_SUCCESS` and
//! Hadoop's `.crc` files) for `*.tfrecord*`, `*.tfrec*`, `*-of-*` and `part-*` names
//! (Spark's and Hadoop's part files), in byte order of the relative path, `.idx`,
//! `.crc` and `.json` sidecars left out. A folder that holds several splits (several
//! manifests, or a TFDS dataset of several splits) is refused: converting them into
//! one output would mix a test split into the training data; the error says how to
//! name one.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};
use crate::example::RecordType;
use crate::manifest::read_manifest;
use crate::manifest::{self, MANIFEST_SUFFIX};
use crate::store::storage::Stat;
use crate::store::{self, Blob, IoOptions, Object, Storage};

/// TFDS's file describing a prepared dataset.
const TFDS_INFO: &str = "dataset_info.json";

/// One input file.
#[derive(Debug, Clone)]
pub struct TfrecordInput {
    /// The path as the manifest lists it.
    pub display: String,
    /// The file, with the storage that reads it (an object's reads pinned to the ETag it
    /// was found with).
    pub blob: Blob,
    /// Size on disk.
    pub bytes: u64,
    /// What the manifest listing it says: size and CRC32C (ours), records (ours and
    /// TFDS's); the conversion checks the file against them.
    pub listed: Listing,
}

/// What a manifest says of a file it lists.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    /// Size on disk.
    pub bytes: Option<u64>,
    /// CRC32C of the file's bytes (8 lowercase hex digits).
    pub crc32c: Option<String>,
    /// Records in it.
    pub records: Option<u64>,
    /// The feature spec of the whole set (ours), shared by its files; `schema` gives
    /// it for them, so a conversion that finds a file as listed need not infer it.
    pub spec: Option<std::sync::Arc<Vec<crate::example::FeatureSpec>>>,
}

impl TfrecordInput {
    fn new(blob: Blob, display: String) -> TfrecordInput {
        TfrecordInput {
            display,
            bytes: blob.size(),
            blob,
            listed: Listing::default(),
        }
    }

    /// The path errors name.
    pub fn name(&self) -> &Path {
        Path::new(&self.display)
    }

    /// Its bytes on disk from the start.
    ///
    /// # Errors
    ///
    /// The file cannot be opened.
    pub fn open(&self) -> Result<Box<dyn Read + Send>> {
        self.blob.open()
    }

    /// The ETag an object's reads are pinned to.
    pub fn etag(&self) -> Option<String> {
        self.blob.etag().map(str::to_owned)
    }
}

/// The files the command line names, and the record type a manifest beside them says.
#[derive(Debug, Clone, Default)]
pub struct Found {
    /// Every input file, in order.
    pub files: Vec<TfrecordInput>,
    /// The record type of the first manifest (ours) or TFDS dataset found.
    pub record_type: Option<RecordType>,
}

/// Whether a walk takes a file of this name: a TFRecord name, not a sidecar.
fn takes_name(name: &str) -> bool {
    if [".idx", ".crc", ".json", ".stats"]
        .iter()
        .any(|s| name.ends_with(s))
    {
        return false;
    }
    name.contains(".tfrec") || name.contains("-of-") || name.starts_with("part-")
}

/// Whether a walk takes a path relative to its folder: no `_`/`.` segment, a TFRecord
/// name.
fn walk_takes(relative: &str) -> bool {
    relative
        .split('/')
        .all(|s| !s.is_empty() && !s.starts_with(['_', '.']))
        && takes_name(relative.rsplit('/').next().unwrap_or(relative))
}

/// Resolves the command line's inputs (see the module docs).
///
/// # Errors
///
/// A missing path or object, a folder with no TFRecord file, a folder of several
/// splits, a manifest or `dataset_info.json` that cannot be read or names a file that
/// is not there.
pub fn discover(inputs: &[PathBuf], io: IoOptions) -> Result<Found> {
    let mut found = Found::default();
    for input in inputs {
        let storage = store::storage_of(input, io)?;
        let path = store::storage::resolve(input, io)?;
        let shown = store::storage::shown(input, io)?;
        discover_one(&storage, input, &path, &shown, io, &mut found)?;
    }
    Ok(found)
}

fn note_type(found: &mut Found, record_type: RecordType) {
    found.record_type.get_or_insert(record_type);
}

/// The files `listed` (relative to folder `dir`, shown under `shown`): taken from
/// `walked` (the folder's walk) where it holds them, else found in the storage.
fn add_listed(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    shown: &str,
    listed: Vec<(String, RecordType, Listing)>,
    walked: &[(String, Object)],
    found: &mut Found,
) -> Result<()> {
    let walked: std::collections::HashMap<&str, &Object> =
        walked.iter().map(|(rel, o)| (rel.as_str(), o)).collect();
    let missing: Vec<String> = listed
        .iter()
        .filter(|(f, _, _)| !walked.contains_key(f.as_str()))
        .map(|(f, _, _)| f.clone())
        .collect();
    let mut others = storage.find(dir, &missing)?.into_iter().zip(&missing);
    for (file, record_type, listing) in listed {
        note_type(found, record_type);
        let object = match walked.get(file.as_str()) {
            Some(object) => (*object).clone(),
            None => match others.next() {
                Some((Some(object), _)) => object,
                _ => {
                    return Err(Error::from(std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "listed by the manifest beside it, but not there",
                    ))
                    .with_file(format!("{shown}/{file}")))
                }
            },
        };
        let blob = Blob::new(storage.clone(), object);
        let mut input = TfrecordInput::new(blob, format!("{shown}/{file}"));
        input.listed = listing;
        found.files.push(input);
    }
    Ok(())
}

fn discover_one(
    storage: &Arc<dyn Storage>,
    input: &Path,
    path: &Path,
    shown: &str,
    io: IoOptions,
    found: &mut Found,
) -> Result<()> {
    let object = match storage.stat(path)? {
        Stat::File(object) => object,
        Stat::Dir => return discover_folder(storage, input, path, shown, io, found),
    };
    if shown.ends_with(MANIFEST_SUFFIX) {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        let dir_shown = shown.rsplit_once('/').map_or(".", |(d, _)| d);
        let listed = listed_by_manifest(path, io)?;
        let dir = dir.unwrap_or(Path::new("."));
        return add_listed(storage, dir, dir_shown, listed, &[], found);
    }
    let blob = Blob::new(storage.clone(), object);
    found.files.push(TfrecordInput::new(blob, shown.to_owned()));
    Ok(())
}

/// A folder's files: those its one manifest (ours, or TFDS's) lists, else its walk's
/// TFRecord names. The folder is listed once.
fn discover_folder(
    storage: &Arc<dyn Storage>,
    input: &Path,
    path: &Path,
    shown: &str,
    io: IoOptions,
    found: &mut Found,
) -> Result<()> {
    let walked = storage.walk(path)?;
    let top = |rel: &&(String, Object)| !rel.0.contains('/');
    let mut manifest_names: Vec<String> = walked
        .iter()
        .filter(top)
        .filter(|(rel, _)| rel.ends_with(MANIFEST_SUFFIX))
        .map(|(rel, _)| rel.clone())
        .collect();
    manifest_names.sort();
    let info = walked
        .iter()
        .filter(top)
        .find(|(rel, _)| rel == TFDS_INFO)
        .map(|(_, o)| o);
    if let Some(listing) = one_listing(shown, &manifest_names, info.is_some())? {
        let listed = match (listing, info) {
            (ListedBy::Ours(i), _) => listed_by_manifest(&path.join(&manifest_names[i]), io)?,
            (ListedBy::Tfds, Some(info)) => {
                listed_by_tfds(&storage.read_whole(info)?, &info.path, shown)?
            }
            (ListedBy::Tfds, None) => Vec::new(),
        };
        return add_listed(storage, path, shown, listed, &walked, found);
    }
    let before = found.files.len();
    for (rel, object) in walked {
        if walk_takes(&rel) {
            let blob = Blob::new(storage.clone(), object);
            found
                .files
                .push(TfrecordInput::new(blob, format!("{shown}/{rel}")));
        }
    }
    if found.files.len() == before {
        return Err(Error::new(ErrorKind::NoTfrecordFiles).with_file(input));
    }
    Ok(())
}

/// What names a folder's files.
enum ListedBy {
    /// Our manifest, by its index among the folder's manifests.
    Ours(usize),
    /// TFDS's `dataset_info.json`.
    Tfds,
}

/// The one listing of a folder, if any: our manifest, else TFDS's; several manifests
/// (splits) are refused.
fn one_listing(folder: &str, manifests: &[String], tfds: bool) -> Result<Option<ListedBy>> {
    match manifests {
        [] if tfds => Ok(Some(ListedBy::Tfds)),
        [] => Ok(None),
        [_] => Ok(Some(ListedBy::Ours(0))),
        several => Err(Error::invalid_option(
            "input",
            format!(
                "{folder} holds {} manifests ({}): one output would mix its splits; name one \
                 split's manifest, e.g. {folder}/{}",
                several.len(),
                several.join(", "),
                several[0]
            ),
        )),
    }
}

/// The shard files a manifest of ours lists, relative to its folder, with its record
/// type.
fn listed_by_manifest(path: &Path, io: IoOptions) -> Result<Vec<(String, RecordType, Listing)>> {
    let m = read_manifest(path, io)?;
    let spec = std::sync::Arc::new(m.features.clone());
    m.shards
        .iter()
        .map(|s| {
            manifest::check_shard_file(&s.file, path)?;
            let listing = Listing {
                bytes: Some(s.bytes),
                crc32c: Some(s.crc32c.clone()),
                records: Some(s.records),
                spec: Some(spec.clone()),
            };
            Ok((s.file.clone(), m.record_type, listing))
        })
        .collect()
}

/// The shard files TFDS's `dataset_info.json` names (one split; several are refused),
/// by its `filepathTemplate` (default `{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}`).
fn listed_by_tfds(
    bytes: &[u8],
    path: &Path,
    folder: &str,
) -> Result<Vec<(String, RecordType, Listing)>> {
    let bad = |why: String| {
        Error::new(ErrorKind::ManifestInvalid(serde::de::Error::custom(why))).with_file(path)
    };
    let info: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| Error::new(ErrorKind::ManifestInvalid(e)).with_file(path))?;
    let name = info["name"]
        .as_str()
        .ok_or_else(|| bad("no dataset \"name\"".into()))?;
    let format = info["fileFormat"].as_str().unwrap_or("tfrecord");
    if format != "tfrecord" {
        return Err(bad(format!(
            "the dataset's files are {format}, not TFRecord"
        )));
    }
    let splits = info["splits"].as_array().cloned().unwrap_or_default();
    let split = match splits.as_slice() {
        [one] => one,
        [] => return Err(bad("no \"splits\"".into())),
        several => {
            let names: Vec<&str> = several.iter().filter_map(|s| s["name"].as_str()).collect();
            let first = names.first().copied().unwrap_or("train");
            return Err(Error::invalid_option(
                "input",
                format!(
                    "{folder} is a TFDS dataset of {} splits ({}): one output would mix them; \
                     name one split's files, e.g. {folder}/{name}-{first}.tfrecord-*",
                    names.len(),
                    names.join(", "),
                ),
            ));
        }
    };
    let split_name = split["name"]
        .as_str()
        .ok_or_else(|| bad("a split without a \"name\"".into()))?;
    let lengths: Vec<Option<u64>> = split["shardLengths"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| {
                    v.as_u64()
                        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                })
                .collect()
        })
        .unwrap_or_default();
    let shards = lengths.len();
    let template = split["filepathTemplate"]
        .as_str()
        .filter(|t| !t.is_empty())
        .unwrap_or("{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}");
    (0..shards)
        .map(|i| {
            let file = template
                .replace("{DATASET}", name)
                .replace("{SPLIT}", split_name)
                .replace("{FILEFORMAT}", format)
                .replace("{SHARD_X_OF_Y}", &format!("{i:05}-of-{shards:05}"))
                .replace("{SHARD_INDEX}", &format!("{i:05}"))
                .replace("{NUM_SHARDS}", &format!("{shards:05}"));
            if !manifest::is_safe_relative(&file) {
                return Err(bad(format!(
                    "unsafe path: {file:?} leaves the dataset's folder"
                )));
            }
            let listing = Listing {
                records: lengths[i],
                ..Listing::default()
            };
            Ok((file, RecordType::Example, listing))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_takes_tfrecord_names_and_leaves_sidecars() {
        for name in [
            "data-00000-of-00004.tfrecord",
            "x.tfrecord.gz",
            "mnist-train.tfrecord-00000-of-00001",
            "train.tfrec",
            "part-00000-1b2c-c000.tfrecord",
            "part-r-00000",
            "out-00003-of-00010",
            "label=1/part-00001.tfrecord",
        ] {
            assert!(walk_takes(name), "{name}");
        }
        for name in [
            "_SUCCESS",
            ".part-00000.crc",
            "part-00000.crc",
            "data-00000-of-00004.tfrecord.idx",
            "data-00000-of-00004.tfrecord.stats",
            "data.stats.pb",
            "data.manifest.json",
            "dataset_info.json",
            "notes.txt",
            "_tmp/part-00000",
            ".hidden/x.tfrecord",
        ] {
            assert!(!walk_takes(name), "{name}");
        }
    }

    #[test]
    fn a_tfds_info_names_its_shards_and_refuses_several_splits() {
        let info =
            br#"{"name": "mnist", "splits": [{"name": "train", "shardLengths": ["3", "2"]}]}"#;
        let files = listed_by_tfds(info, Path::new("i.json"), "ds").unwrap();
        let names: Vec<&str> = files.iter().map(|(f, _, _)| f.as_str()).collect();
        assert_eq!(
            names,
            [
                "mnist-train.tfrecord-00000-of-00002",
                "mnist-train.tfrecord-00001-of-00002"
            ]
        );
        let two = br#"{"name": "mnist", "splits": [{"name": "train"}, {"name": "test"}]}"#;
        let err = listed_by_tfds(two, Path::new("i.json"), "ds").unwrap_err();
        assert!(
            err.to_string().contains("ds/mnist-train.tfrecord-*"),
            "{err}"
        );
        let array =
            br#"{"name": "m", "fileFormat": "array_record", "splits": [{"name": "train"}]}"#;
        assert!(listed_by_tfds(array, Path::new("i.json"), "ds").is_err());
    }
}
