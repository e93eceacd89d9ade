//! `--tfds NAME`: the layout TensorFlow Datasets loads with
//! `tfds.builder_from_directory(OUT/NAME/1.0.0)`.
//!
//! The shards are ours, named as TFDS names them (`{NAME}-{split}.tfrecord-{i:05}-of-{n:05}`,
//! the shard prefix being `{NAME}-{split}.tfrecord`), with our manifests beside them
//! (`{NAME}-{split}.manifest.json`, so `verify` works there too). After the manifests,
//! three kinds of files TFDS reads (it parses them strictly: no key of ours goes in them):
//!
//! - `dataset_info.json`: name, version, file format, and per split its shard lengths and
//!   bytes (a split with no record is left out: TFDS cannot read an empty split);
//! - `features.json`: a `FeaturesDict` typed from the manifests' features: scalars and fixed
//!   shapes as `Tensor`, variable lengths (nulls included: a null omits the feature, which
//!   TFDS reads as an empty array) as `Tensor` with a `-1` dimension, `a/b` names nested,
//!   an image folder's `image/encoded` as `Image` and `image/class/label` as `ClassLabel`;
//! - `{feature path joined with -}.labels.txt`: a `ClassLabel`'s names, one per line.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::error::{Error, ErrorKind, Result};
use crate::example::{FeatureKind, FeatureSpec};
use crate::manifest::Manifest;

/// The version folder every dataset is written to.
pub const VERSION: &str = "1.0.0";

/// `OUT/NAME/1.0.0`, the folder a dataset `NAME` is written to under `OUT`.
pub fn version_dir(output: &std::path::Path, name: &str) -> std::path::PathBuf {
    output.join(name).join(VERSION)
}

/// The split of a conversion without `--split`.
pub const DEFAULT_SPLIT: &str = "train";

const CLASS: &str = "tensorflow_datasets.core.features.";

/// Checks a dataset name: TFDS's `[a-zA-Z][a-zA-Z0-9_]*` (ASCII).
pub fn check_name(name: &str) -> std::result::Result<(), String> {
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a TFDS dataset name: a letter, then letters, digits or _"
        ))
    }
}

/// Checks a split name: TFDS's `[A-Za-z0-9_-]+`, and not `all` (TFDS's union of every
/// split).
pub fn check_split(split: &str) -> std::result::Result<(), String> {
    let ok = !split.is_empty()
        && split
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && split.chars().any(|c| c.is_ascii_alphanumeric())
        && split != "all";
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{split:?} is not a TFDS split name: letters, digits, _ or -, and not \"all\""
        ))
    }
}

/// The shard prefix of a split: `{NAME}-{split}.tfrecord`.
pub fn prefix(name: &str, split: &str) -> String {
    format!("{name}-{split}.tfrecord")
}

/// The split a prefix of [`prefix`] names.
pub fn split_of<'a>(name: &str, prefix: &'a str) -> Option<&'a str> {
    prefix
        .strip_prefix(name)?
        .strip_prefix('-')?
        .strip_suffix(".tfrecord")
}

/// The TFDS files of a dataset whose splits' manifests are given: (file name, bytes).
///
/// # Errors
///
/// A feature TFDS cannot express: a name with an empty part (`a//b`, `/a`), or both a
/// feature and the parent of another (`a` and `a/b`).
pub fn files(name: &str, splits: &[(String, &Manifest)]) -> Result<Vec<(String, Vec<u8>)>> {
    // One feature set for every split: a shape that differs between splits (a column
    // fixed in one, variable in another) becomes variable.
    let mut merged: Vec<FeatureSpec> = Vec::new();
    // (A split with no record has no shapes to say; it is left out of the dataset too.)
    let holding = splits.iter().filter(|(_, m)| m.records > 0);
    let all = splits
        .iter()
        .filter(|_| splits.iter().all(|(_, m)| m.records == 0));
    for (_, m) in holding.chain(all) {
        for f in &m.features {
            match merged.iter_mut().find(|g| g.name == f.name) {
                Some(g) if g.shape != f.shape => g.shape = None,
                Some(_) => {}
                None => merged.push(f.clone()),
            }
        }
    }
    let first = splits.first().map(|(_, m)| *m);
    let image_folder = first.is_some_and(|m| m.options.contains_key("labels"));
    let classes: Vec<String> = first.and_then(|m| m.classes.clone()).unwrap_or_default();
    let mut root = Map::new();
    let mut labels = Vec::new();
    for f in &merged {
        let parts: Vec<&str> = f.name.split('/').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(not_expressible(f, "a name part is empty"));
        }
        let feature = if image_folder && f.name == "image/encoded" {
            json!({
                "pythonClassName": format!("{CLASS}image_feature.Image"),
                "image": {"shape": {"dimensions": [-1, -1, 3]}, "dtype": "uint8"},
            })
        } else if image_folder && f.name == "image/class/label" && !classes.is_empty() {
            // (Integer labels from a CSV have no names: a plain int64 tensor.)
            labels.push((format!("{}.labels.txt", parts.join("-")), classes.clone()));
            json!({
                "pythonClassName": format!("{CLASS}class_label_feature.ClassLabel"),
                "classLabel": {"numClasses": classes.len().to_string()},
            })
        } else {
            let dims: Vec<i64> = match &f.shape {
                Some(shape) => shape.iter().map(|&d| d as i64).collect(),
                None => vec![-1],
            };
            json!({
                "pythonClassName": format!("{CLASS}tensor_feature.Tensor"),
                "tensor": {"shape": {"dimensions": dims}, "dtype": dtype(f)},
            })
        };
        insert(&mut root, &parts, feature).map_err(|why| not_expressible(f, why))?;
    }
    let features = dict(root);
    let mut split_info = Vec::new();
    for (split, m) in splits {
        if m.records == 0 {
            continue;
        }
        let lengths: Vec<String> = m.shards.iter().map(|s| s.records.to_string()).collect();
        // TFDS counts the serialized records, not their framing.
        let payload = m.bytes - crate::tfrecord::frame::FRAME_OVERHEAD * m.records;
        split_info.push(json!({
            "filepathTemplate": "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}",
            "name": split,
            "numBytes": payload.to_string(),
            "shardLengths": lengths,
        }));
    }
    let info = json!({
        "description": format!(
            "Converted by tfshard {} (the manifests beside this file say from what).",
            env!("CARGO_PKG_VERSION")
        ),
        "fileFormat": "tfrecord",
        "name": name,
        "splits": split_info,
        "version": VERSION,
    });
    let pretty = |v: &Value| {
        let mut out = serde_json::to_vec_pretty(v).expect("JSON values serialize");
        out.push(b'\n');
        out
    };
    let mut out = vec![
        ("dataset_info.json".to_owned(), pretty(&info)),
        ("features.json".to_owned(), pretty(&features)),
    ];
    for (file, names) in labels {
        let mut text = names.join("\n");
        text.push('\n');
        out.push((file, text.into_bytes()));
    }
    Ok(out)
}

/// Checks, before a conversion writes anything, that every feature has a name TFDS can
/// nest ([`files`] checks the same at the end).
///
/// # Errors
///
/// As [`files`].
pub fn check_features(features: &[FeatureSpec]) -> Result<()> {
    let mut root = Map::new();
    for f in features {
        let parts: Vec<&str> = f.name.split('/').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(not_expressible(f, "a name part is empty"));
        }
        insert(&mut root, &parts, json!({"pythonClassName": ""}))
            .map_err(|why| not_expressible(f, why))?;
    }
    Ok(())
}

fn not_expressible(f: &FeatureSpec, why: &str) -> Error {
    Error::new(ErrorKind::TfdsFeature {
        feature: f.name.clone(),
        reason: why.to_owned(),
    })
}

/// The dtype TFDS casts the stored list to: the Arrow type's where it is one of TFDS's
/// (booleans, unsigned 64-bit integers, whose bits the `int64_list` holds), else the
/// list's own.
fn dtype(f: &FeatureSpec) -> &'static str {
    match (f.kind, f.arrow_type.as_deref()) {
        (FeatureKind::Int64, Some("Boolean")) => "bool",
        (FeatureKind::Int64, Some("UInt64")) => "uint64",
        (FeatureKind::Int64, _) => "int64",
        (FeatureKind::Float, _) => "float32",
        (FeatureKind::Bytes, _) => "string",
    }
}

/// Places a feature at its path in nested dicts.
fn insert(
    dict: &mut Map<String, Value>,
    parts: &[&str],
    feature: Value,
) -> std::result::Result<(), &'static str> {
    let (first, rest) = parts.split_first().expect("a name has a part");
    if rest.is_empty() {
        if dict.contains_key(*first) {
            return Err("another feature's name starts with it and a /");
        }
        dict.insert((*first).to_owned(), feature);
        return Ok(());
    }
    let entry = dict
        .entry((*first).to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    match entry {
        // A nested dict still being built: an object without "pythonClassName".
        Value::Object(inner) if !inner.contains_key("pythonClassName") => {
            insert(inner, rest, feature)
        }
        _ => Err("another feature has the name of its parent"),
    }
}

/// Turns the nested maps into `FeaturesDict` entries.
fn dict(map: Map<String, Value>) -> Value {
    let features: BTreeMap<String, Value> = map
        .into_iter()
        .map(|(k, v)| match v {
            Value::Object(inner) if !inner.contains_key("pythonClassName") => (k, dict(inner)),
            other => (k, other),
        })
        .collect();
    json!({
        "pythonClassName": format!("{CLASS}features_dict.FeaturesDict"),
        "featuresDict": {"features": features},
    })
}

/// Writes the TensorFlow Datasets files of dataset `name` from every
/// manifest of it in `output` (`{name}-{split}.manifest.json` whose options say `tfds`).
///
/// # Errors
///
/// A manifest that cannot be read, a feature TFDS cannot express, a failed write.
pub(crate) fn publish(out: &dyn crate::store::destination::Destination, name: &str) -> Result<()> {
    let mut names = out.names("")?;
    names.sort();
    let mut splits = Vec::new();
    for n in names {
        let Some(split) = n
            .strip_suffix(crate::manifest::MANIFEST_SUFFIX)
            .and_then(|p| p.strip_prefix(name))
            .and_then(|p| p.strip_prefix('-'))
        else {
            continue;
        };
        let manifest: crate::manifest::Manifest = serde_json::from_slice(&out.read(&n)?)
            .map_err(|e| Error::new(ErrorKind::ManifestInvalid(e)).with_file(out.display(&n)))?;
        if manifest.options.get("tfds").and_then(|v| v.as_str()) == Some(name) {
            splits.push((split.to_owned(), manifest));
        }
    }
    let named: Vec<(String, &crate::manifest::Manifest)> =
        splits.iter().map(|(s, m)| (s.clone(), m)).collect();
    for (file, bytes) in files(name, &named)? {
        out.write(&file, bytes, false)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_splits() {
        assert!(check_name("my_ds1").is_ok());
        for bad in ["", "1ds", "_ds", "my-ds", "a.b", "dé"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert!(check_split("train").is_ok() && check_split("my-split_2").is_ok());
        for bad in ["", "all", "a.b", "-", "a/b"] {
            assert!(check_split(bad).is_err(), "{bad}");
        }
        assert_eq!(prefix("ds", "test"), "ds-test.tfrecord");
        assert_eq!(split_of("ds", "ds-test.tfrecord"), Some("test"));
        assert_eq!(split_of("ds", "data"), None);
    }

    #[test]
    fn nested_names_and_conflicts() {
        let mut root = Map::new();
        insert(&mut root, &["a", "b"], json!({"pythonClassName": "x"})).unwrap();
        insert(&mut root, &["a", "c", "d"], json!({"pythonClassName": "y"})).unwrap();
        assert!(insert(&mut root, &["a"], json!({"pythonClassName": "z"})).is_err());
        assert!(insert(&mut root, &["a", "b", "e"], json!({"pythonClassName": "z"})).is_err());
        let d = dict(root);
        assert_eq!(
            d["featuresDict"]["features"]["a"]["featuresDict"]["features"]["c"]["featuresDict"]
                ["features"]["d"]["pythonClassName"],
            "y"
        );
    }
}
