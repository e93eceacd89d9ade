//! Image records: one `tf.train.Example` per image file, in the layout TensorFlow's
//! image tutorials and TFDS read (`image/encoded`, `image/format`, `image/height`, ...).

use std::path::PathBuf;

use prost::Message;

use crate::example::proto::{Example, Feature, Features};
use crate::example::{FeatureKind, FeatureSpec};

/// One image to convert.
#[derive(Debug, Clone)]
pub struct ImageFile {
    /// Path relative to the folder, `/`-separated.
    pub rel: String,
    /// Where to read it.
    pub path: PathBuf,
    /// Label and class text.
    pub label: Option<(i64, String)>,
    /// Its size when the folder was walked.
    pub bytes: u64,
    /// What the file system tells it by (see [`crate::store::storage::file_identity`]).
    pub identity: Option<String>,
}

/// An image's bytes and what its header says.
#[derive(Debug, Clone)]
pub struct ImageData {
    /// The file's bytes, unchanged.
    pub bytes: Vec<u8>,
    /// `jpeg`, `png`, `gif`, `bmp` or `webp`, from the content.
    pub format: &'static str,
    /// Pixels.
    pub height: u64,
    /// Pixels.
    pub width: u64,
}

/// The record for one image: its bytes, format, file name, size and (with labels) its
/// class, under the feature names TensorFlow's image datasets use.
pub fn encode(file: &ImageFile, image: ImageData) -> Vec<u8> {
    let mut f = Features::default();
    f.feature
        .insert("image/encoded".into(), Feature::bytes(vec![image.bytes]));
    f.feature.insert(
        "image/format".into(),
        Feature::bytes(vec![image.format.as_bytes().to_vec()]),
    );
    f.feature.insert(
        "image/filename".into(),
        Feature::bytes(vec![file.rel.as_bytes().to_vec()]),
    );
    f.feature.insert(
        "image/height".into(),
        Feature::int64(vec![image.height as i64]),
    );
    f.feature.insert(
        "image/width".into(),
        Feature::int64(vec![image.width as i64]),
    );
    if let Some((label, text)) = &file.label {
        f.feature
            .insert("image/class/label".into(), Feature::int64(vec![*label]));
        f.feature.insert(
            "image/class/text".into(),
            Feature::bytes(vec![text.as_bytes().to_vec()]),
        );
    }
    Example { features: Some(f) }.encode_to_vec()
}

/// The feature spec of image records (every feature a scalar in every record).
pub fn features(labels: bool, records: u64) -> Vec<FeatureSpec> {
    let mut names = vec![
        ("image/encoded", FeatureKind::Bytes),
        ("image/filename", FeatureKind::Bytes),
        ("image/format", FeatureKind::Bytes),
        ("image/height", FeatureKind::Int64),
        ("image/width", FeatureKind::Int64),
    ];
    if labels {
        names.push(("image/class/label", FeatureKind::Int64));
        names.push(("image/class/text", FeatureKind::Bytes));
    }
    names.sort_by(|a, b| a.0.cmp(b.0));
    names
        .into_iter()
        .map(|(name, kind)| FeatureSpec {
            name: name.into(),
            kind,
            shape: (records > 0).then(Vec::new),
            arrow_type: None,
            unit: None,
            part: None,
            partition: None,
        })
        .collect()
}
