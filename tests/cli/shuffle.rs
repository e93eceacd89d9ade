//! `--shuffle` and `--split` (issue 7): a global permutation, deterministic whatever the
//! threads, memory and temporary folder; label-sorted input comes out mixed; memory stays
//! bounded; splits are stable under appends and reorders.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use prost::Message;
use tfshard::example::proto::{Example, Kind};
use tfshard::tfrecord;

use crate::convert::write_ids;
use crate::{convert_parquet, read_manifest, run, s, scratch};

/// (id, label) of every record of a prefix, shard by shard, in order.
fn records(dir: &Path, prefix: &str) -> Vec<Vec<(u64, i64)>> {
    read_manifest(dir, prefix)["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|shard| {
            let mut reader =
                tfrecord::open(&dir.join(shard["file"].as_str().unwrap()), None).unwrap();
            let mut out = Vec::new();
            while let Some(r) = reader.read_record().unwrap() {
                let e = Example::decode(r).unwrap();
                let f = &e.features.as_ref().unwrap().feature;
                let id = match &f["id"].kind {
                    Some(Kind::BytesList(l)) => std::str::from_utf8(&l.value[0]).unwrap()[3..]
                        .parse()
                        .unwrap(),
                    _ => panic!("id"),
                };
                let y = match &f["y"].kind {
                    Some(Kind::Int64List(l)) => l.value[0],
                    _ => panic!("y"),
                };
                out.push((id, y));
            }
            out
        })
        .collect()
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && !p.to_string_lossy().ends_with(".json"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                fs::read(&p).unwrap(),
            )
        })
        .collect()
}

/// A table sorted by label: 10 runs of 3,000 rows (all y=0, then all y=1, ...).
fn label_sorted(dir: &Path) -> PathBuf {
    let mut ids: Vec<usize> = (0..30_000).collect();
    ids.sort_by_key(|i| (i % 10, *i));
    let input = dir.join("sorted.parquet");
    write_ids(&input, &ids, 4096);
    input
}

#[test]
fn every_record_once_and_the_same_bytes_whatever_threads_memory_and_tmp_dir() {
    let dir = scratch("shuffle_determinism");
    let input = label_sorted(&dir);
    let mut outputs = Vec::new();
    for (i, extra) in [
        vec!["--threads", "1", "--shuffle-memory", "1GiB"],
        vec!["--threads", "2", "--shuffle-memory", "1MiB"],
        vec![
            "--threads",
            "2",
            "--shuffle-memory",
            "2MiB",
            "--tmp-dir",
            "TMP",
        ],
    ]
    .into_iter()
    .enumerate()
    {
        let out = dir.join(format!("out{i}"));
        let tmp = dir.join("tmp");
        fs::create_dir_all(&tmp).unwrap();
        let mut args = vec![
            "convert",
            "parquet",
            s(&input),
            "-o",
            s(&out),
            "--shuffle",
            "--seed",
            "7",
            "--target-shard-size",
            "300KB",
        ];
        args.extend(extra.iter().map(|a| if *a == "TMP" { s(&tmp) } else { a }));
        let (code, _, err) = run(args);
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            fs::read_dir(&tmp).unwrap().count(),
            0,
            "--tmp-dir is cleaned up"
        );
        assert!(!out.join(".data.tfshard-tmp").exists());
        outputs.push(out);
    }
    let first = files(&outputs[0]);
    assert!(first.len() > 3);
    for other in &outputs[1..] {
        assert!(files(other) == first, "{} differs", other.display());
    }
    let mut ids: Vec<u64> = records(&outputs[0], "data")
        .into_iter()
        .flatten()
        .map(|(id, _)| id)
        .collect();
    assert_ne!(ids, (0..30_000).collect::<Vec<u64>>(), "shuffled");
    ids.sort_unstable();
    assert_eq!(
        ids,
        (0..30_000).collect::<Vec<u64>>(),
        "every record exactly once"
    );
    let m = read_manifest(&outputs[0], "data");
    assert_eq!(m["options"]["shuffle"], true);
    assert_eq!(m["options"]["seed"], 7);
    // Another seed, another order.
    let out = dir.join("seed8");
    let (code, _, _) = convert_parquet(
        &input,
        &out,
        &["--shuffle", "--seed", "8", "--target-shard-size", "300KB"],
    );
    assert_eq!(code, 0);
    assert!(files(&out) != first);
}

/// The input is sorted by label, so unshuffled shards hold one or two labels each. After
/// the shuffle, each shard's label histogram must match the global one (10% each): every
/// label's share in every shard within 5 percentage points. For a uniform permutation
/// and ~1,500-record shards the standard deviation of a share is sqrt(.1*.9/1500) = 0.8
/// points, so 5 points is over 6 sigma: the test does not flake, and an unshuffled or
/// locally shuffled output fails it by far (shares of 0 or 100%).
#[test]
fn a_label_sorted_input_gives_shards_with_the_global_label_mix() {
    let dir = scratch("shuffle_labels");
    let input = label_sorted(&dir);
    for shuffle in [false, true] {
        let out = dir.join(format!("out-{shuffle}"));
        let mut args = vec![
            "convert",
            "parquet",
            s(&input),
            "-o",
            s(&out),
            "--max-records-per-shard",
            "1500",
            "--seed",
            "1",
        ];
        if shuffle {
            args.push("--shuffle");
        }
        let (code, _, err) = run(args);
        assert_eq!(code, 0, "{err}");
        let shards = records(&out, "data");
        assert_eq!(shards.len(), 20);
        let worst = shards
            .iter()
            .flat_map(|shard| {
                (0..10).map(move |label| {
                    let share = shard.iter().filter(|(_, y)| *y == label).count() as f64
                        / shard.len() as f64;
                    (share - 0.1).abs()
                })
            })
            .fold(0.0, f64::max);
        if shuffle {
            assert!(
                worst < 0.05,
                "a label's share is off by {:.1} points",
                worst * 100.0
            );
        } else {
            assert!(worst > 0.5, "the unshuffled control should be skewed");
        }
    }
}

#[test]
fn split_membership_is_stable_under_appends_and_reorders() {
    let dir = scratch("shuffle_splits");
    let split = |name: &str, ids: &[usize], key: bool| -> BTreeMap<u64, String> {
        let input = dir.join(format!("{name}.parquet"));
        write_ids(&input, ids, 1000);
        let out = dir.join(name);
        let mut args = vec![
            "convert",
            "parquet",
            s(&input),
            "-o",
            s(&out),
            "--split",
            "train=0.8,validation=0.1,test=0.1",
            "--json",
        ];
        if key {
            args.extend(["--split-key", "id"]);
        }
        let (code, stdout, err) = run(args);
        assert_eq!(code, 0, "{err}");
        let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert!(summary["manifest"].is_null());
        let mut member = BTreeMap::new();
        for name in ["train", "validation", "test"] {
            assert!(summary["splits"][name]["manifest"].is_string());
            for (id, _) in records(&out, name).into_iter().flatten() {
                assert!(
                    member.insert(id, name.to_owned()).is_none(),
                    "{id} in two splits"
                );
            }
        }
        assert_eq!(member.len(), ids.len(), "every row in exactly one split");
        member
    };
    let base: Vec<usize> = (0..5000).collect();
    let mut grown: Vec<usize> = base.iter().rev().copied().collect();
    grown.extend(5000..6000);
    let a = split("key-a", &base, true);
    let b = split("key-b", &grown, true);
    assert!(
        base.iter().all(|&i| a[&(i as u64)] == b[&(i as u64)]),
        "a row moved when rows were appended and reordered"
    );
    let train = a.values().filter(|s| *s == "train").count();
    assert!((3800..4200).contains(&train), "train got {train} of 5000");
    // Without a key: stable when rows are appended at the end.
    let appended: Vec<usize> = (0..6000).collect();
    let c = split("pos-a", &base, false);
    let d = split("pos-b", &appended, false);
    assert!(base.iter().all(|&i| c[&(i as u64)] == d[&(i as u64)]));
    // Usage errors.
    let input = dir.join("key-a.parquet");
    let bad_out = dir.join("bad");
    for bad in [
        vec!["--split", "a=0.5,b=0.4"],
        vec!["--split", "a=0.5,b=0.5", "--prefix", "x"],
        vec!["--split-key", "id"],
        vec!["--split", "a=1", "--split-key", "nope"],
    ] {
        let mut args = vec!["convert", "parquet", s(&input), "-o", s(&bad_out)];
        args.extend(bad.iter().copied());
        let (code, _, err) = run(args);
        let want = if bad.contains(&"nope") { 1 } else { 2 };
        assert_eq!(code, want, "{bad:?}: {err}");
    }
}

#[test]
fn shuffle_and_split_together_and_with_images() {
    let dir = scratch("shuffle_split_images");
    let input = label_sorted(&dir);
    let out = dir.join("out");
    let (code, _, err) = convert_parquet(
        &input,
        &out,
        &[
            "--shuffle",
            "--split",
            "train=0.9,test=0.1",
            "--split-key",
            "id",
            "--min-shards",
            "3",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let train = records(&out, "train");
    let test = records(&out, "test");
    assert_eq!(train.len(), 3, "--min-shards applies per split");
    assert_eq!(test.len(), 3);
    assert_eq!(
        train.iter().chain(&test).map(Vec::len).sum::<usize>(),
        30_000
    );
    let (code, _, err) = run(["verify", s(&out), "--deep"]);
    assert_eq!(code, 0, "{err}");
    let images = crate::root().join("testdata/images");
    let out = dir.join("images");
    let (code, _, err) = run([
        "convert",
        "images",
        s(&images),
        "-o",
        s(&out),
        "--shuffle",
        "--split",
        "a=0.5,b=0.5",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, stdout, _) = run(["verify", s(&out), "--json"]);
    assert_eq!(code, 0);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["records"], 7);
}

#[test]
fn sigterm_during_a_shuffle_removes_the_buckets() {
    let dir = scratch("shuffle_sigterm");
    let input = dir.join("t.parquet");
    write_ids(&input, &(0..300_000).collect::<Vec<_>>(), 20_000);
    let out = dir.join("out");
    let tmp = dir.join("tmp");
    fs::create_dir_all(&tmp).unwrap();
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
        .args([
            "convert",
            "parquet",
            s(&input),
            "-o",
            s(&out),
            "--shuffle",
            "--tmp-dir",
            s(&tmp),
            "--threads",
            "1",
        ])
        .args([
            "--compression",
            "gzip",
            "--quiet",
            "--shuffle-memory",
            "1MiB",
        ])
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while fs::read_dir(&tmp).unwrap().count() == 0 && start.elapsed().as_secs() < 60 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0, "bucket files left");
    assert_eq!(fs::read_dir(&out).map(|d| d.count()).unwrap_or(0), 0);
}

/// The splits of a run are one commit. The second split's shards cannot be
/// placed (a folder stands where its first shard goes); the run fails and publishes no
/// split at all (no manifest, none of the first split's shards either), and an earlier
/// run's manifests are gone with the outputs they described.
#[test]
fn a_failed_split_commit_publishes_no_split() {
    let dir = scratch("split_commit");
    let input = dir.join("t.parquet");
    write_ids(&input, &(0..2000).collect::<Vec<_>>(), 500);
    let out = dir.join("out");
    let split = ["--split", "train=0.5,test=0.5", "--overwrite"];
    let (code, _, err) = convert_parquet(&input, &out, &split);
    assert_eq!(code, 0, "{err}");
    assert!(out.join("train.manifest.json").exists() && out.join("test.manifest.json").exists());
    let blocker = out.join("test-00000-of-00001.tfrecord");
    fs::remove_file(&blocker).unwrap();
    fs::create_dir_all(blocker.join("in-the-way")).unwrap();
    let (code, _, err) = convert_parquet(&input, &out, &split);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("test-00000-of-00001.tfrecord"), "{err}");
    let left: Vec<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        left,
        vec!["test-00000-of-00001.tfrecord".to_owned()],
        "only the blocker"
    );
}
