//! `--tfds NAME`: the TensorFlow Datasets layout (TFDS itself loads it in
//! scripts/tf_interop.py; here, the files, names and refusals).

use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::convert::{listing as names, write_table};
use crate::{convert_parquet, run, s, scratch};

fn json(path: &Path) -> Value {
    serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
}

#[test]
fn tfds_writes_the_layout_tfds_loads_and_verify_checks() {
    let dir = scratch("tfds_layout");
    let input = dir.join("t.parquet");
    write_table(&input, 1000, 0, 100);
    let out = dir.join("out");
    let (code, stdout, err) = convert_parquet(
        &input,
        &out,
        &[
            "--tfds",
            "my_ds",
            "--split",
            "train=0.8,test=0.2",
            "--max-records-per-shard",
            "300",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    let version = out.join("my_ds/1.0.0");
    assert_eq!(summary["output"], s(&version));
    assert_eq!(
        summary["splits"]["train"]["manifest"],
        s(&version.join("my_ds-train.manifest.json"))
    );
    let files = names(&version);
    for want in [
        "dataset_info.json",
        "features.json",
        "my_ds-train.manifest.json",
        "my_ds-test.manifest.json",
        "my_ds-train.tfrecord-00000-of-00003",
        "my_ds-test.tfrecord-00000-of-00001",
    ] {
        assert!(files.contains(&want.to_owned()), "{want} in {files:?}");
    }
    let info = json(&version.join("dataset_info.json"));
    assert_eq!(
        (info["name"].as_str(), info["version"].as_str()),
        (Some("my_ds"), Some("1.0.0"))
    );
    let splits = info["splits"].as_array().unwrap();
    let mut total = 0;
    for split in splits {
        let manifest = json(&version.join(format!(
            "my_ds-{}.manifest.json",
            split["name"].as_str().unwrap()
        )));
        let lengths: Vec<u64> = split["shardLengths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap().parse().unwrap())
            .collect();
        let listed: Vec<u64> = manifest["shards"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["records"].as_u64().unwrap())
            .collect();
        assert_eq!(lengths, listed);
        assert_eq!(manifest["options"]["tfds"], "my_ds");
        total += lengths.iter().sum::<u64>();
    }
    assert_eq!(total, 1000);
    let listed: Vec<&str> = splits.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(listed, ["test", "train"]);
    let features = &json(&version.join("features.json"))["featuresDict"]["features"];
    assert_eq!(
        features["x"]["tensor"]["shape"]["dimensions"],
        serde_json::json!([4])
    );
    assert_eq!(features["x"]["tensor"]["dtype"], "float32");
    assert_eq!(features["y"]["tensor"]["dtype"], "int64");
    assert_eq!(features["id"]["tensor"]["dtype"], "string");
    let (code, out_text, err) = run(["verify", s(&version)]);
    assert_eq!(code, 0, "{err}");
    assert!(out_text.contains("OK"), "{out_text}");
    // A stray TFDS-named shard is an unlisted shard.
    fs::write(version.join("my_ds-train.tfrecord-00007-of-00009"), b"").unwrap();
    let (code, out_text, _) = run(["verify", s(&version)]);
    assert_eq!(code, 1, "{out_text}");
    assert!(out_text.contains("unlisted shard"), "{out_text}");
    fs::remove_file(version.join("my_ds-train.tfrecord-00007-of-00009")).unwrap();
    // --overwrite replaces the splits it writes (here train, now every row); the test
    // split's files stay, and stay listed, as another prefix's output does.
    let (code, _, err) =
        convert_parquet(&input, &out, &["--tfds", "my_ds", "--overwrite", "--quiet"]);
    assert_eq!(code, 0, "{err}");
    let info = json(&version.join("dataset_info.json"));
    let train = &info["splits"].as_array().unwrap()[1];
    assert_eq!(train["name"], "train");
    assert_eq!(train["shardLengths"], serde_json::json!(["1000"]));
    assert!(
        !version.join("my_ds-train.tfrecord-00000-of-00003").exists(),
        "stale shards gone"
    );
    // TFDS cannot read an empty split: a table of no rows lists none.
    let empty = dir.join("empty.parquet");
    write_table(&empty, 0, 0, 10);
    let (code, _, err) =
        convert_parquet(&empty, &dir.join("none"), &["--tfds", "my_ds", "--quiet"]);
    assert_eq!(code, 0, "{err}");
    let info = json(&dir.join("none/my_ds/1.0.0/dataset_info.json"));
    assert_eq!(info["splits"], serde_json::json!([]));
}

#[test]
fn tfds_refuses_what_tfds_cannot_load() {
    let dir = scratch("tfds_refuse");
    let input = dir.join("t.parquet");
    write_table(&input, 10, 0, 10);
    let out = dir.join("out");
    for (extra, said) in [
        (&["--tfds", "my-ds"][..], "not a TFDS dataset name"),
        (&["--tfds", "1ds"][..], "not a TFDS dataset name"),
        (
            &["--tfds", "ds", "--compression", "gzip"][..],
            "plain TFRecord",
        ),
        (
            &["--tfds", "ds", "--record-type", "sequence-example"][..],
            "tf.train.Example",
        ),
        (&["--tfds", "ds", "--prefix", "p"][..], "--prefix"),
        (
            &["--tfds", "ds", "--split", "all=1"][..],
            "not a TFDS split name",
        ),
    ] {
        let (code, _, err) = convert_parquet(&input, &out, extra);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(said), "{extra:?}: {err}");
        assert!(!out.exists(), "{extra:?}: nothing written");
    }
    // A prefix ending in .tfrecord (what tells TFDS prefixes apart) is refused.
    let (code, _, err) = convert_parquet(&input, &dir.join("p"), &["--prefix", "x.tfrecord"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("ends in .tfrecord"), "{err}");
    // So is one that ends as a later generation's shard names do after another prefix.
    let (code, _, err) = convert_parquet(&input, &dir.join("p"), &["--prefix", "data-g00001"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("-g and 5 digits"), "{err}");
    // A feature that is also another's parent: named, before anything is written.
    let (code, _, err) = convert_parquet(&input, &out, &["--tfds", "ds", "--rename", "y=x/y"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("cannot be a TFDS feature") && err.contains("x/y"),
        "{err}"
    );
    assert!(!out.join("ds/1.0.0").exists() || names(&out.join("ds/1.0.0")).is_empty());
}

#[test]
fn tfds_images_refuse_gif_and_webp_or_skip_them() {
    let dir = scratch("tfds_images");
    let images = crate::root().join("testdata/images");
    let out = dir.join("out");
    let convert = [
        "convert",
        "images",
        s(&images),
        "-o",
        s(&out),
        "--tfds",
        "imgs",
    ];
    let (code, _, err) = run(convert);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("TFDS's Image feature cannot decode"), "{err}");
    assert!(err.contains(".gif") || err.contains(".webp"), "{err}");
    let skip = ["--on-error", "skip", "--overwrite", "--quiet"];
    let (code, _, err) = run([&convert[..], &skip].concat());
    assert_eq!(code, 0, "{err}");
    let version = out.join("imgs/1.0.0");
    let features = &json(&version.join("features.json"))["featuresDict"]["features"]["image"]
        ["featuresDict"]["features"];
    assert!(features["encoded"]["pythonClassName"]
        .as_str()
        .unwrap()
        .ends_with("Image"));
    assert!(
        features["class"]["featuresDict"]["features"]["label"]["pythonClassName"]
            .as_str()
            .unwrap()
            .ends_with("ClassLabel")
    );
    let manifest = json(&version.join("imgs-train.manifest.json"));
    let labels = fs::read_to_string(version.join("image-class-label.labels.txt")).unwrap();
    let classes: Vec<&str> = manifest["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(labels.lines().collect::<Vec<_>>(), classes);
    assert_eq!(manifest["skipped"].as_array().unwrap().len(), 2);
}

#[test]
fn tfds_workers_finalize_into_the_layout() {
    let dir = scratch("tfds_workers");
    let input = dir.join("t.parquet");
    write_table(&input, 400, 0, 50);
    let out = dir.join("out");
    for i in ["1", "0"] {
        let (code, _, err) = convert_parquet(
            &input,
            &out,
            &[
                "--tfds",
                "ds",
                "--num-workers",
                "2",
                "--worker-index",
                i,
                "--quiet",
            ],
        );
        assert_eq!(code, 0, "{err}");
    }
    let version = out.join("ds/1.0.0");
    assert!(
        !version.join("dataset_info.json").exists(),
        "workers publish nothing"
    );
    let (code, _, err) = run(["finalize", s(&out), "--tfds", "ds", "--quiet"]);
    assert_eq!(code, 0, "{err}");
    let info = json(&version.join("dataset_info.json"));
    let lengths: u64 = info["splits"][0]["shardLengths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(lengths, 400);
    assert!(
        names(&version)
            .iter()
            .any(|n| n == "ds-train.tfrecord-00000-of-00002"),
        "{:?}",
        names(&version)
    );
}
