//! `convert images`: real JPEG/PNG/GIF/BMP/WebP files (testdata/images, made by
//! scripts/make_images.py), labels, bad files under both --on-error modes, symlinks.

use std::fs;
use std::path::{Path, PathBuf};

use prost::Message;
use tfshard::example::proto::{Example, Kind};
use tfshard::tfrecord;

use crate::{convert_parquet, read_manifest, root, run, s, scratch};

fn images() -> PathBuf {
    root().join("testdata/images")
}

/// A copy of testdata/images (with its empty class folder, which git does not keep).
fn copy_images(name: &str) -> PathBuf {
    let dir = scratch(name).join("photos");
    copy_dir(&images(), &dir);
    fs::create_dir_all(dir.join("zebras")).unwrap();
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The feature names of a record, in order.
fn feature_names(record: &Example) -> Vec<String> {
    record
        .features
        .as_ref()
        .unwrap()
        .feature
        .keys()
        .cloned()
        .collect()
}

fn records(out: &Path) -> Vec<Example> {
    let m = read_manifest(out, "data");
    let mut all = Vec::new();
    for shard in m["shards"].as_array().unwrap() {
        let mut reader = tfrecord::open(&out.join(shard["file"].as_str().unwrap()), None).unwrap();
        while let Some(r) = reader.read_record().unwrap() {
            all.push(Example::decode(r).unwrap());
        }
    }
    all
}

fn text(e: &Example, name: &str) -> String {
    match &e.features.as_ref().unwrap().feature[name].kind {
        Some(Kind::BytesList(l)) => String::from_utf8(l.value[0].clone()).unwrap(),
        other => panic!("{name}: {other:?}"),
    }
}

fn int(e: &Example, name: &str) -> i64 {
    match &e.features.as_ref().unwrap().feature[name].kind {
        Some(Kind::Int64List(l)) => l.value[0],
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn class_folders_formats_sizes_and_order() {
    let dir = copy_images("images_basic");
    let out = dir.parent().unwrap().join("out");
    let (code, _, err) = run(["convert", "images", s(&dir), "-o", s(&out)]);
    assert_eq!(code, 0, "{err}");
    let m = read_manifest(&out, "data");
    assert_eq!(
        m["classes"],
        serde_json::json!(["cats", "dogs", "zebras"]),
        "an empty class keeps its label"
    );
    assert_eq!(m["skipped"], serde_json::json!([]));
    let got: Vec<(String, String, i64, i64, i64, String)> = records(&out)
        .iter()
        .map(|e| {
            (
                text(e, "image/filename"),
                text(e, "image/format"),
                int(e, "image/width"),
                int(e, "image/height"),
                int(e, "image/class/label"),
                text(e, "image/class/text"),
            )
        })
        .collect();
    let want = [
        ("cats/a.jpg", "jpeg", 32, 24, 0, "cats"),
        ("cats/c.webp", "webp", 20, 30, 0, "cats"),
        ("cats/nested/deep/b.png", "png", 17, 9, 0, "cats"),
        ("dogs/G.JPEG", "jpeg", 40, 2, 1, "dogs"),
        ("dogs/d.gif", "gif", 12, 12, 1, "dogs"),
        ("dogs/e.bmp", "bmp", 8, 5, 1, "dogs"),
        ("dogs/f-really-png.jpg", "png", 10, 11, 1, "dogs"),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|w| (w.0.into(), w.1.into(), w.2, w.3, w.4, w.5.into()))
        .collect();
    assert_eq!(got, want);
    // The bytes are the file's, unchanged.
    let first = &records(&out)[0];
    match &first.features.as_ref().unwrap().feature["image/encoded"].kind {
        Some(Kind::BytesList(l)) => {
            assert_eq!(l.value[0], fs::read(dir.join("cats/a.jpg")).unwrap())
        }
        other => panic!("{other:?}"),
    }
    let (code, _, err) = run(["verify", s(&out), "--deep"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn labels_none_and_csv() {
    let dir = copy_images("images_labels");
    let out = dir.parent().unwrap().join("none");
    let (code, _, err) = run([
        "convert",
        "images",
        s(&dir),
        "-o",
        s(&out),
        "--labels",
        "none",
    ]);
    assert_eq!(code, 0, "{err}");
    let keys = feature_names(&records(&out)[0]);
    assert_eq!(
        keys,
        [
            "image/encoded",
            "image/filename",
            "image/format",
            "image/height",
            "image/width"
        ]
    );

    let csv = dir.parent().unwrap().join("labels.csv");
    let rows =
        "filename,label\ncats/a.jpg,tabby\ncats/c.webp,tabby\ncats/nested/deep/b.png,siamese\n\
                dogs/G.JPEG,pug\ndogs/d.gif,pug\ndogs/e.bmp,pug\ndogs/f-really-png.jpg,pug\n";
    fs::write(&csv, rows).unwrap();
    let out = dir.parent().unwrap().join("csv");
    let (code, _, err) = run([
        "convert",
        "images",
        s(&dir),
        "-o",
        s(&out),
        "--labels",
        s(&csv),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        read_manifest(&out, "data")["classes"],
        serde_json::json!(["pug", "siamese", "tabby"])
    );
    let r = records(&out);
    assert_eq!(
        (
            int(&r[0], "image/class/label"),
            text(&r[0], "image/class/text")
        ),
        (2, "tabby".into())
    );
    assert_eq!(int(&r[2], "image/class/label"), 1);

    // A row with no image and an image with no row: both reported.
    fs::write(
        &csv,
        format!("{}ghost.png,pug\n", rows.replace("dogs/e.bmp,pug\n", "")),
    )
    .unwrap();
    let out = dir.parent().unwrap().join("csv-bad");
    let (code, _, err) = run([
        "convert",
        "images",
        s(&dir),
        "-o",
        s(&out),
        "--labels",
        s(&csv),
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("dogs/e.bmp: not in the labels file (2 such files in all)"),
        "{err}"
    );
    let (code, _, err) = run([
        "convert",
        "images",
        s(&dir),
        "-o",
        s(&out),
        "--labels",
        s(&csv),
        "--on-error",
        "skip",
    ]);
    assert_eq!(code, 0, "{err}");
    let skipped: Vec<(String, String)> = read_manifest(&out, "data")["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["path"].as_str().unwrap().into(),
                v["reason"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        skipped,
        [
            ("dogs/e.bmp".into(), "not in the labels file".into()),
            (
                "ghost.png".into(),
                "in the labels file but no such image".into()
            )
        ]
    );
}

#[test]
fn bad_files_fail_or_are_skipped_and_symlinks_never_read() {
    let dir = copy_images("images_bad");
    fs::write(dir.join("dogs/notes.jpg"), "this is text, not an image").unwrap();
    let png = fs::read(dir.join("cats/nested/deep/b.png")).unwrap();
    fs::write(dir.join("cats/truncated.png"), &png[..20]).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.join("cats/link.jpg")).unwrap();
    let out = dir.parent().unwrap().join("out");
    let (code, _, err) = run(["convert", "images", s(&dir), "-o", s(&out)]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("error: ") && err.contains("cats/truncated.png: png header unreadable"),
        "{err}"
    );
    assert!(!out.join("data.manifest.json").exists());
    assert!(
        fs::read_dir(&out).map(|d| d.count()).unwrap_or(0) == 0,
        "nothing left behind"
    );

    let (code, _, err) = run([
        "convert",
        "images",
        s(&dir),
        "-o",
        s(&out),
        "--on-error",
        "skip",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("warning: skipped 3 files"), "{err}");
    let m = read_manifest(&out, "data");
    let skipped: Vec<(&str, &str)> = m["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["path"].as_str().unwrap(), v["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(skipped.len(), 3, "{skipped:?}");
    assert_eq!(skipped[0], ("cats/link.jpg", "symlink"));
    assert_eq!(skipped[1].0, "cats/truncated.png");
    assert!(
        skipped[2].0 == "dogs/notes.jpg" && skipped[2].1.starts_with("not an image"),
        "{skipped:?}"
    );
    assert_eq!(m["records"], 7);

    // An image outside any class folder is an error naming it.
    fs::copy(dir.join("cats/a.jpg"), dir.join("loose.jpg")).unwrap();
    let (code, _, err) = run([
        "convert",
        "images",
        s(&dir),
        "-o",
        s(&dir.parent().unwrap().join("o2")),
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("loose.jpg: this image is not inside a class folder"),
        "{err}"
    );
}

#[test]
fn huggingface_style_parquet_recipe() {
    // The README's recipe: a struct column `image` {bytes, path}, as Hugging Face
    // datasets export image tables, converted with --rename image/bytes=image/encoded.
    use arrow_array::{ArrayRef, BinaryArray, Int64Array, RecordBatch, StringArray, StructArray};
    use arrow_schema::{DataType, Field};
    use std::sync::Arc;
    let dir = scratch("images_hf");
    let jpg = fs::read(images().join("cats/a.jpg")).unwrap();
    let image = StructArray::from(vec![
        (
            Arc::new(Field::new("bytes", DataType::Binary, true)),
            Arc::new(BinaryArray::from(vec![&jpg[..], &jpg[..]])) as ArrayRef,
        ),
        (
            Arc::new(Field::new("path", DataType::Utf8, true)),
            Arc::new(StringArray::from(vec!["a.jpg", "b.jpg"])) as ArrayRef,
        ),
    ]);
    let batch = RecordBatch::try_from_iter(vec![
        ("image", Arc::new(image) as ArrayRef),
        ("label", Arc::new(Int64Array::from(vec![3, 5])) as ArrayRef),
    ])
    .unwrap();
    let input = dir.join("train.parquet");
    crate::convert::write_batch(&input, &batch);
    let out = dir.join("out");
    let (code, _, err) = convert_parquet(
        &input,
        &out,
        &[
            "--rename",
            "image/bytes=image/encoded",
            "--rename",
            "image/path=image/filename",
            "--rename",
            "label=image/class/label",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let r = records(&out);
    let keys = feature_names(&r[0]);
    assert_eq!(
        keys,
        ["image/class/label", "image/encoded", "image/filename"]
    );
    assert_eq!(int(&r[1], "image/class/label"), 5);
    match &r[0].features.as_ref().unwrap().feature["image/encoded"].kind {
        Some(Kind::BytesList(l)) => assert_eq!(l.value[0], jpg),
        other => panic!("{other:?}"),
    }
}
