//! The image source: a folder of images (one sub-folder per class) → framed
//! `tf.train.Example` records, in path order. Files are read in parallel chunks on the
//! run's pool and written in order.

use std::collections::HashMap;
use std::sync::Arc;

use rayon::prelude::*;
use serde_json::json;

use crate::convert::route::Router;
use crate::convert::{append, ConvertOptions, Open, Source};
use crate::error::{Error, ErrorKind, Result};
use crate::example::encode::{EncodeOptions, EncodedBatch};
use crate::example::image;
use crate::example::RecordType;
use crate::hash::stable_hash;
use crate::manifest::{InputInfo, Manifest, Skipped};
use crate::progress::Progress;
use crate::source::images::{self, ImageData, ImageFile, ImagePlan, Labels, OnError};

/// Files read in parallel per step; their bytes are held until written in order.
const IMAGE_CHUNK: usize = 64;

/// What to do with an image folder (set through [`super::ConverterBuilder`]'s
/// `with_labels`, `with_extensions` and `with_on_error`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ImageOptions {
    /// Where labels come from.
    pub labels: Labels,
    /// File extensions to read (case-insensitive).
    pub extensions: Vec<String>,
    /// Fail on a bad file, or skip it.
    pub on_error: OnError,
}

impl Default for ImageOptions {
    /// Labels from class folders, the common extensions, a bad file stops the run.
    fn default() -> ImageOptions {
        ImageOptions {
            labels: Labels::DirName,
            extensions: images::DEFAULT_EXTENSIONS
                .iter()
                .map(|e| e.to_string())
                .collect(),
            on_error: OnError::Fail,
        }
    }
}

impl ImageOptions {
    /// Checks the options that do not depend on the folder, with the run's options:
    /// one input folder, no Parquet-only settings, at least one extension.
    ///
    /// # Errors
    ///
    /// [`InvalidOption`](crate::error::ErrorKind::InvalidOption) naming the option.
    pub fn validate(&self, options: &ConvertOptions) -> Result<()> {
        let invalid = |option, reason: &str| Err(Error::invalid_option(option, reason));
        if options.inputs.len() != 1 {
            return invalid("inputs", "the image converter reads one folder");
        }
        if options.encode != EncodeOptions::default() {
            return invalid(
                "columns",
                "columns, renames, split keys and record types are for Parquet; images split by position",
            );
        }
        if self.extensions.is_empty() || self.extensions.iter().any(String::is_empty) {
            return invalid("extensions", "takes names like jpg,png");
        }
        Ok(())
    }
}

/// An image folder, walked and planned, ready to be converted.
pub(crate) struct ImageSource {
    images: ImageOptions,
    plan: ImagePlan,
    /// The folders the images are in: the manifest's inputs.
    folders: Vec<Folder>,
    /// Per image of the plan: its folder's index, and its index among that folder's
    /// images (what shards' `sources` count).
    at: Vec<(u32, u64)>,
    /// Files left out by the last pass (`--on-error skip`).
    skipped: Vec<Skipped>,
    /// `--append`: what the set left out of the images this run does not read again.
    carried: Vec<Skipped>,
}

/// A folder of images, as the manifest lists it among the inputs: its images' bytes and
/// count, and as its ETag a digest of their names, sizes, modification times and labels,
/// so that an append tells a folder that only gained images after its last one from one
/// whose images changed.
struct Folder {
    name: String,
    bytes: u64,
    /// The running digest after each of its images.
    digests: Vec<u64>,
}

/// The folders of `files` (each image's parent, relative to `dir`), in order of their
/// first image, and each image's place in its folder.
fn folders_of(dir: &std::path::Path, files: &[ImageFile]) -> (Vec<Folder>, Vec<(u32, u64)>) {
    let mut index: HashMap<&str, u32> = HashMap::new();
    let mut folders: Vec<Folder> = Vec::new();
    let mut at = Vec::with_capacity(files.len());
    for file in files {
        let parent = file.rel.rsplit_once('/').map_or("", |(d, _)| d);
        let f = *index.entry(parent).or_insert_with(|| {
            let name = if parent.is_empty() {
                dir.to_path_buf()
            } else {
                dir.join(parent)
            };
            folders.push(Folder {
                name: name.display().to_string(),
                bytes: 0,
                digests: Vec::new(),
            });
            (folders.len() - 1) as u32
        });
        let folder = &mut folders[f as usize];
        at.push((f, folder.digests.len() as u64));
        folder.bytes += file.bytes;
        let before = folder.digests.last().copied().unwrap_or(0);
        folder.digests.push(image_digest(before, file));
    }
    (folders, at)
}

/// The running digest of a folder's images after `file`.
fn image_digest(before: u64, file: &ImageFile) -> u64 {
    let mut bytes = before.to_le_bytes().to_vec();
    bytes.extend_from_slice(file.rel.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(&file.bytes.to_le_bytes());
    // (Its identity: a file rewritten with the same size, even with its old mtime set
    // back, is another image.)
    bytes.extend_from_slice(file.identity.as_deref().unwrap_or("?").as_bytes());
    bytes.push(0);
    if let Some((value, text)) = &file.label {
        bytes.extend_from_slice(&value.to_le_bytes());
        bytes.extend_from_slice(text.as_bytes());
    }
    stable_hash(b'I', &bytes)
}

impl ImageSource {
    /// Walks the folder and plans the labels.
    ///
    /// # Errors
    ///
    /// An unreadable folder, a labels file that does not match, an image outside any
    /// class folder.
    pub(crate) fn open(options: &ConvertOptions, images: &ImageOptions) -> Result<ImageSource> {
        let dir = options.inputs.first().cloned().unwrap_or_default();
        let plan = images::plan(&dir, &images.labels, &images.extensions, images.on_error)?;
        let (folders, at) = folders_of(&dir, &plan.files);
        Ok(ImageSource {
            images: images.clone(),
            plan,
            folders,
            at,
            skipped: Vec::new(),
            carried: Vec::new(),
        })
    }

    /// Files left out, in path order: the plan's and the last pass's.
    fn all_skipped(&self) -> Vec<Skipped> {
        let mut all = self.plan.skipped.clone();
        all.extend(self.skipped.iter().cloned());
        all.extend(self.carried.iter().cloned());
        all.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
        all
    }
}

impl Open for ImageOptions {
    fn open(&self, options: &ConvertOptions) -> Result<Box<dyn Source + '_>> {
        Ok(Box::new(ImageSource::open(options, self)?))
    }
}

impl Source for ImageSource {
    fn total_units(&self) -> u64 {
        self.plan.files.len() as u64
    }

    /// One record per image (fewer if `--on-error skip` drops some).
    fn expected_records(&self) -> Option<u64> {
        Some(self.total_units())
    }

    fn estimated_bytes(&self) -> u64 {
        self.plan.files.iter().map(|f| f.bytes).sum()
    }

    fn produce(
        &mut self,
        options: &ConvertOptions,
        router: &mut Router,
        progress: &dyn Progress,
    ) -> Result<()> {
        let mut skipped = Vec::new();
        let mut batch = EncodedBatch::default();
        // Each folder is an input: an image's record is its index among the folder's
        // images. The batch holds a run of consecutive ones.
        let mut next: Option<(u32, u64)> = None;
        for (chunk, at) in (self.plan.files.chunks(IMAGE_CHUNK)).zip(self.at.chunks(IMAGE_CHUNK)) {
            // The work is I/O and syscalls: read a chunk in parallel, write it in order.
            let read: Vec<Result<ImageData>> = chunk
                .par_iter()
                .map(|f| images::read_image(&f.path))
                .collect();
            for ((file, image), &(folder, index)) in chunk.iter().zip(read).zip(at) {
                let image = image.and_then(|image| match image.format {
                    // TFDS's Image feature decodes these with a frame dimension.
                    format @ ("gif" | "webp") if options.tfds.is_some() => {
                        Err(Error::new(ErrorKind::TfdsImage { format }).with_file(&file.path))
                    }
                    _ => Ok(image),
                });
                match image {
                    Ok(image) => {
                        if next != Some((folder, index)) {
                            if !batch.sizes.is_empty() {
                                router.put_batch(&batch)?;
                                batch.clear();
                            }
                            router.origin(folder, index);
                        }
                        next = Some((folder, index + 1));
                        batch.push_record(&image::encode(file, image));
                    }
                    Err(e) if self.images.on_error == OnError::Skip => skipped.push(Skipped {
                        path: file.rel.clone(),
                        reason: e.kind().to_string(),
                    }),
                    Err(e) => return Err(e),
                }
            }
            if !batch.sizes.is_empty() {
                router.put_batch(&batch)?;
                batch.clear();
            }
            progress.advance(chunk.len() as u64, router.bytes_written());
            options.cancel.check()?;
        }
        self.skipped = skipped;
        Ok(())
    }

    fn manifest(&self, options: &ConvertOptions, records: u64) -> Manifest {
        let images = &self.images;
        let inputs = (self.folders.iter())
            .map(|f| InputInfo {
                path: f.name.clone(),
                bytes: f.bytes,
                rows: f.digests.len() as u64,
                etag: f.digests.last().map(|&d| append::listing_etag(d)),
                identity: None,
            })
            .collect();
        let labels = images.labels != Labels::None;
        let labels_option = match &images.labels {
            Labels::DirName => "dirname".to_owned(),
            Labels::None => "none".to_owned(),
            Labels::Csv(p) => p.display().to_string(),
        };
        let on_error = if images.on_error == OnError::Skip {
            "skip"
        } else {
            "fail"
        };
        let mut m = options.new_manifest(
            RecordType::Example,
            inputs,
            image::features(labels, records),
        );
        m.options.insert("labels".into(), json!(labels_option));
        m.options
            .insert("extensions".into(), json!(images.extensions));
        m.options.insert("on_error".into(), json!(on_error));
        m.classes = self.plan.classes.clone();
        m.skipped = Some(self.all_skipped());
        m
    }

    fn skipped(&self) -> u64 {
        (self.plan.skipped.len() + self.skipped.len()) as u64
    }

    /// Each folder's images by name, size, modification time and label.
    fn now_inputs(&self) -> Option<Vec<append::NowInput>> {
        Some(
            (self.folders.iter())
                .map(|f| append::NowInput {
                    name: f.name.clone(),
                    bytes: f.bytes,
                    etag: f.digests.last().map(|&d| append::listing_etag(d)),
                    records: Some(f.digests.len() as u64),
                    identity: None,
                    delete_files: Vec::new(),
                    growth: Some(Arc::new(f.digests.clone())),
                })
                .collect(),
        )
    }

    /// The images of the folders `reads` names; of the images the set left out before,
    /// those this run does not read again stay left out (an image fixed since is read
    /// again, its folder changed, and is no longer listed; one deleted is gone).
    fn select(&mut self, reads: &[Vec<[u64; 2]>], base: &Manifest) -> Result<()> {
        let read = |&(folder, index): &(u32, u64)| {
            (reads[folder as usize].iter()).any(|r| r[0] <= index && index < r[1])
        };
        let keep: Vec<bool> = self.at.iter().map(read).collect();
        let walked: std::collections::HashSet<String> =
            (self.plan.files.iter()).map(|f| f.rel.clone()).collect();
        let mut k = keep.iter();
        self.plan.files.retain(|_| *k.next().unwrap_or(&false));
        self.at.retain(read);
        let read_again: std::collections::HashSet<&str> =
            self.plan.files.iter().map(|f| f.rel.as_str()).collect();
        self.carried = (base.skipped.iter().flatten())
            .filter(|s| walked.contains(&s.path) && !read_again.contains(s.path.as_str()))
            .cloned()
            .collect();
        Ok(())
    }
}
