//! The image source: a folder of images (one sub-folder per class) → framed
//! `tf.train.Example` records, in path order. Files are read in parallel chunks on the
//! run's pool and written in order.

use std::path::PathBuf;

use rayon::prelude::*;
use serde_json::json;

use crate::convert::route::Router;
use crate::convert::{ConvertOptions, Open, Source};
use crate::error::{Error, ErrorKind, Result};
use crate::example::encode::{EncodeOptions, EncodedBatch};
use crate::example::image;
use crate::example::RecordType;
use crate::manifest::{InputInfo, Manifest, Skipped};
use crate::progress::Progress;
use crate::source::images::{self, ImageData, ImagePlan, Labels, OnError};

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
    dir: PathBuf,
    images: ImageOptions,
    plan: ImagePlan,
    /// Files left out by the last pass (`--on-error skip`), and the bytes it read.
    skipped: Vec<Skipped>,
    bytes_read: u64,
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
        Ok(ImageSource {
            dir,
            images: images.clone(),
            plan,
            skipped: Vec::new(),
            bytes_read: 0,
        })
    }

    /// Files left out, in path order: the plan's and the last pass's.
    fn all_skipped(&self) -> Vec<Skipped> {
        let mut all = self.plan.skipped.clone();
        all.extend(self.skipped.iter().cloned());
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
        self.plan
            .files
            .iter()
            .filter_map(|f| std::fs::symlink_metadata(&f.path).ok())
            .map(|m| m.len())
            .sum()
    }

    fn produce(
        &mut self,
        options: &ConvertOptions,
        router: &mut Router,
        progress: &dyn Progress,
    ) -> Result<()> {
        let mut skipped = Vec::new();
        let mut bytes_read = 0u64;
        let mut batch = EncodedBatch::default();
        // One input, the folder: its records are its images in the plan's order.
        router.origin(0, 0);
        for chunk in self.plan.files.chunks(IMAGE_CHUNK) {
            // The work is I/O and syscalls: read a chunk in parallel, write it in order.
            let read: Vec<Result<ImageData>> = chunk
                .par_iter()
                .map(|f| images::read_image(&f.path))
                .collect();
            batch.clear();
            for (file, image) in chunk.iter().zip(read) {
                let image = image.and_then(|image| match image.format {
                    // TFDS's Image feature decodes these with a frame dimension.
                    format @ ("gif" | "webp") if options.tfds.is_some() => {
                        Err(Error::new(ErrorKind::TfdsImage { format }).with_file(&file.path))
                    }
                    _ => Ok(image),
                });
                match image {
                    Ok(image) => {
                        bytes_read += image.bytes.len() as u64;
                        batch.push_record(&image::encode(file, image));
                    }
                    Err(e) if self.images.on_error == OnError::Skip => skipped.push(Skipped {
                        path: file.rel.clone(),
                        reason: e.kind().to_string(),
                    }),
                    Err(e) => return Err(e),
                }
            }
            router.put_batch(&batch)?;
            progress.advance(chunk.len() as u64, router.bytes_written());
            options.cancel.check()?;
        }
        self.skipped = skipped;
        self.bytes_read = bytes_read;
        Ok(())
    }

    fn manifest(&self, options: &ConvertOptions, records: u64) -> Manifest {
        let images = &self.images;
        let total: u64 = self.plan.files.len() as u64 - self.skipped.len() as u64;
        let inputs = vec![InputInfo {
            path: self.dir.display().to_string(),
            bytes: self.bytes_read,
            rows: total,
            etag: None,
        }];
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
}
